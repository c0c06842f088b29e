"""The oracle of the Python package's tests: attention written out in PyTorch, with masks built
here from their definitions (design.md §3), never from the engine.

* ``allowed(kind, n, ...)``: the [n, n] boolean matrix of visible (query, key) pairs;
* ``attention(q, k, v, allowed, scale)``: softmax(scale q k^T) v over the visible pairs, in the
  dtype of its inputs (float64 for the exact reference; bfloat16 for the naive bf16 baseline of
  tests/README.md rule 2, where every op's result is rounded to bf16). Rows that see no key give
  o = 0 and lse = -inf, and gradients flow through it by autograd.
* ``grads_plain_and_checkpointed(block, inputs, do, reentrant)``: the gradients of a block with
  and without ``torch.utils.checkpoint``, for the checkpointing tests.
"""

import math

import torch


def allowed(n, causal=False, window=0, doc_ids=None, block_mask=None, block_size=0):
    q = torch.arange(n).unsqueeze(1)
    k = torch.arange(n).unsqueeze(0)
    ok = torch.ones(n, n, dtype=torch.bool)
    if causal or window > 0 or doc_ids is not None:
        # window implies causal; the grammar's document term implies causal
        ok &= k <= q
    if window > 0:
        ok &= (q - k) < window
    if doc_ids is not None:
        d = torch.as_tensor(doc_ids)
        ok &= d.unsqueeze(1) == d.unsqueeze(0)
    if block_mask is not None:
        b = torch.as_tensor(block_mask).bool()
        ok &= b[q // block_size, k // block_size]
    return ok


def doc_ids_from_cu_seqlens(cu, n):
    ids = torch.empty(n, dtype=torch.int32)
    for i in range(len(cu) - 1):
        ids[cu[i]:cu[i + 1]] = i
    return ids


def attention(q, k, v, ok, scale=None):
    """q [.., T, Hq, D], k/v [.., T, Hkv, D], ok [T, T] or [B, T, T] -> (o, lse float32/64)."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    g = q.shape[-2] // k.shape[-2]
    kk = k.repeat_interleave(g, dim=-2)
    vv = v.repeat_interleave(g, dim=-2)
    # [.., H, T, T]
    s = torch.einsum("...qhd,...khd->...hqk", q, kk) * scale
    if ok.dim() == 2:
        okb = ok
    else:  # per sequence of the batch
        okb = ok.unsqueeze(1)
    s = s.masked_fill(~okb, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    empty = torch.isinf(m) & (m < 0)
    m = torch.where(empty, torch.zeros_like(m), m).detach()
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    l_safe = torch.where(l > 0, l, torch.ones_like(l))
    o = torch.einsum("...hqk,...khd->...qhd", p / l_safe, vv)
    lse = (torch.log(l) + m).squeeze(-1)  # -inf where empty
    return o, lse.transpose(-1, -2)


def attention_and_grads(q, k, v, do, ok, scale=None):
    """(o, lse, dq, dk, dv) with autograd, in the inputs' dtype."""
    q = q.detach().clone().requires_grad_(True)
    k = k.detach().clone().requires_grad_(True)
    v = v.detach().clone().requires_grad_(True)
    o, lse = attention(q, k, v, ok, scale)
    o.backward(do)
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def max_err(a, b):
    a = a.double()
    b = b.double()
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    diff = torch.where(same_inf, torch.zeros_like(a), (a - b).abs())
    return float(diff.max()) if diff.numel() else 0.0


def grads_plain_and_checkpointed(block, inputs, do, reentrant):
    """([d/dx of (block(*inputs) * do).sum() for x in inputs], the same under
    torch.utils.checkpoint with ``use_reentrant=reentrant``), each on fresh leaf copies."""
    from torch.utils.checkpoint import checkpoint
    out = []
    for ckpt in (False, True):
        xs = [t.clone().requires_grad_(True) for t in inputs]
        o = checkpoint(block, *xs, use_reentrant=reentrant) if ckpt else block(*xs)
        (o * do).sum().backward()
        out.append([t.grad for t in xs])
    return out
