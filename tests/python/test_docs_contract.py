"""The documented contract of the ``longseq`` package, checked from the outside.

Every test here checks a sentence of docs/python.md or of a docstring (``help(longseq...)``)
against an oracle that does not come from the engine: attention written out below in float64
PyTorch (masks built from their definitions), torch autograd of that naive attention, the
``longseq`` command's own output (``LONGSEQ_CLI``), or an exact property (shard then unshard is
the identity, positions are a permutation of range(seq) plus -1 padding, in-place outputs are
the very tensors passed). The cases are the ones a contract should survive and the authors'
own tests do not dwell on: lengths 1, 2, 7, 255, 257, 1000; worlds 3, 5, 6, 7; heads 6/3, 5/1,
12/4; head dims 8, 24, 40, 72; batch 1 and 3; every mask form; float32 and bfloat16;
positional and keyword arguments; the documented refusals.

Tolerances (tests/README.md):
* float32 against the float64 oracle: o and lse 1e-5 + 1e-5 |ref|, gradients 5e-5 + 5e-5 |ref|.
  Inputs are standard normal and the scale is 1/sqrt(D), so scores are O(1); a float32 result
  carries a relative error of a few u = 6e-8 per operation, grown by at most ~sqrt(T) (T <= 1000)
  in the softmax sums and the T-long gradient sums: ~1e-6 at most, observed 1e-7..3e-6. The bounds
  are 2x the kernel tests' own (5e-6, 2e-5), because D = 72 and T = 1000 are past their cases;
  a single wrong mask entry moves an output by O(1e-2), far beyond.
* bfloat16 (rule 2): error against float64 on the same bf16-rounded inputs at most 2x that of
  naive attention computed in torch bfloat16 (every op rounded), + 1e-6 for exact naive results.
* distributed against single-process, both float32 on the same inputs: each is within the bound
  above of the exact value, so they are within twice that: o/lse 2e-5 + 2e-5, grads 1e-4 + 1e-4.
* exact (``torch.equal``) where the docs promise bits: the deterministic backward (every run and
  thread count), in-place outputs equal to freshly allocated ones, shard/unshard, the CLI's
  ``longseq attention`` whose computation ``distributed`` is documented to be.
"""

import json
import math
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import longseq
import longseq.attention as la
import longseq.torch as lt

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]


def cli_path():
    p = os.environ.get("LONGSEQ_CLI")
    if p and os.path.exists(p):
        return p
    p = REPO / "build" / "cli" / "longseq"
    return str(p) if p.exists() else None


# ----------------------------------------------------------------------------------------------
# The oracle: masks from their definitions (docs/python.md "Masks") and naive attention.


def visible(n, causal=False, window=0, doc_ids=None, block_mask=None, block_size=0):
    """[n, n] bool: (query i, key j) visible. window implies causal (a token sees itself and the
    W - 1 before it); document ids imply causal; block mask entry [i // B, j // B]."""
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    ok = torch.ones(n, n, dtype=torch.bool)
    if causal or window or doc_ids is not None:
        ok &= j <= i
    if window:
        ok &= (i - j) < window
    if doc_ids is not None:
        d = torch.as_tensor(doc_ids)
        ok &= d.unsqueeze(1) == d.unsqueeze(0)
    if block_mask is not None:
        b = torch.as_tensor(block_mask).bool()
        ok &= b[i // block_size, j // block_size]
    return ok


def ids_of_cu(cu, n):
    ids = torch.empty(n, dtype=torch.int64)
    for d in range(len(cu) - 1):
        ids[cu[d]:cu[d + 1]] = d
    return ids


def naive(q, k, v, ok, scale=None):
    """softmax(scale q k^T) v over visible pairs, in the inputs' dtype; o = 0, lse = -inf where a
    row sees nothing. q [.., T, Hq, D], ok [T, T] or [B, T, T]. Returns (o, lse [.., T, Hq])."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    g = q.shape[-2] // k.shape[-2]
    kk = k.repeat_interleave(g, dim=-2)
    vv = v.repeat_interleave(g, dim=-2)
    s = torch.einsum("...qhd,...khd->...hqk", q, kk) * scale
    okb = ok if ok.dim() == 2 else ok.unsqueeze(1)
    s = s.masked_fill(~okb, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m).detach()
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    o = torch.einsum("...hqk,...khd->...qhd", p / torch.where(l > 0, l, torch.ones_like(l)), vv)
    lse = (torch.log(l) + m).squeeze(-1).transpose(-1, -2)
    return o, lse


def naive_grads(q, k, v, do, ok, scale=None):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    o, lse = naive(q, k, v, ok, scale)
    o.backward(do)
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def exact(q, k, v, do, ok, scale=None):
    return naive_grads(*(x.double() for x in (q, k, v, do)), ok, scale)


def assert_close(name, got, want, atol, rtol):
    got = torch.as_tensor(got).double()
    want = torch.as_tensor(want).double()
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    same_inf = torch.isinf(got) & torch.isinf(want) & (torch.sign(got) == torch.sign(want))
    bad = ~same_inf & ~((got - want).abs() <= atol + rtol * want.abs())
    if bad.any():
        diff = torch.where(same_inf, torch.zeros_like(got), (got - want).abs())
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.numel()} elements off, max diff "
                             f"{float(diff.nan_to_num(float('inf')).max()):.3g}")


def max_err(a, b):
    a, b = a.double(), b.double()
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    d = torch.where(same_inf, torch.zeros_like(a), (a - b).abs())
    return float(d.max()) if d.numel() else 0.0


def inputs(b, t, hq, hkv, d, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    lead = (b,) if b else ()
    q = torch.randn(*lead, t, hq, d, generator=g)
    k = torch.randn(*lead, t, hkv, d, generator=g)
    v = torch.randn(*lead, t, hkv, d, generator=g)
    do = torch.randn(*lead, t, hq, d, generator=g)
    return [x.to(dtype).contiguous() for x in (q, k, v, do)]


def rand_blocks(n, bs, seed, empty_row=True, dtype=torch.uint8):
    nb = (n + bs - 1) // bs
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(nb, nb, generator=g) < 0.5)
    m.fill_diagonal_(True)
    if empty_row:
        m[nb // 2, :] = False  # a block row that sees nothing
    return m.to(dtype)


# ----------------------------------------------------------------------------------------------
# Mask builders: (T, B) -> (what longseq takes, visible [T, T] or [B, T, T]).


def mk_full(t, b):
    return None, visible(t)


def mk_full_str(t, b):
    return "full", visible(t)


def mk_causal(t, b):
    return "causal", visible(t, causal=True)


def mk_window1(t, b):
    return "window:1", visible(t, window=1)


def mk_window3(t, b):
    return "window:3", visible(t, window=3)


def mk_causal_window(t, b):
    return "causal,window:64", visible(t, window=64)


def mk_window_causal_obj(t, b):
    return longseq.Mask("window:17,causal"), visible(t, window=17)


def mk_window_past_t(t, b):
    return "window:5000", visible(t, causal=True)


def mk_docs(t, b):
    ids = torch.tensor([(i * i) // 97 for i in range(t)], dtype=torch.int32)  # growing docs
    return longseq.Mask("causal", doc_ids=ids), visible(t, doc_ids=ids)


def mk_docs_full(t, b):
    # "Document ids imply causal": under the text "full" too.
    ids = torch.tensor([i // 40 for i in range(t)], dtype=torch.int64)
    return longseq.Mask("full", doc_ids=ids), visible(t, doc_ids=ids)


def mk_docs_window(t, b):
    ids = torch.tensor([i // 50 for i in range(t)], dtype=torch.int64)
    return longseq.Mask("window:10", doc_ids=ids), visible(t, window=10, doc_ids=ids)


def mk_cu(t, b):
    # empty documents and a one-token one; int64 offsets
    cu = torch.tensor([0, 0, 1, 1, t // 3, t - 2, t], dtype=torch.int64)
    return longseq.Mask(cu_seqlens=cu), visible(t, doc_ids=ids_of_cu(cu.tolist(), t))


def mk_cu32(t, b):
    cu = torch.tensor([0, t // 2, t], dtype=torch.int32)
    return longseq.Mask(cu_seqlens=cu), visible(t, doc_ids=ids_of_cu(cu.tolist(), t))


def mk_blocks64(t, b):
    bm = rand_blocks(t, 64, seed=5)
    return (longseq.Mask(block_mask=bm, block_size=64),
            visible(t, block_mask=bm, block_size=64))


def mk_blocks_causal_bool(t, b):
    bm = rand_blocks(t, 7, seed=6, dtype=torch.bool)
    return (longseq.Mask("causal", block_mask=bm, block_size=7),
            visible(t, causal=True, block_mask=bm, block_size=7))


def mk_docs_per_row(t, b):
    rows = torch.stack([torch.tensor([i // (3 + 4 * r) for i in range(t)]) for r in range(b)])
    return (longseq.Mask(doc_ids=rows),
            torch.stack([visible(t, doc_ids=r) for r in rows]))


# (id, B (0: unbatched), T, Hq, Hkv, D, mask)
SINGLE = [
    ("T1_full_gqa", 0, 1, 6, 3, 8, mk_full),
    ("T2_causal_mqa", 0, 2, 5, 1, 24, mk_causal),
    ("T7_window1", 0, 7, 12, 4, 40, mk_window1),
    ("T7_window3", 0, 7, 6, 3, 8, mk_window3),
    ("T255_causal_window_D72", 0, 255, 6, 3, 72, mk_causal_window),
    ("T257_docs_12_4", 0, 257, 12, 4, 8, mk_docs),
    ("T257_full_text_docs", 0, 257, 5, 1, 24, mk_docs_full),
    ("T130_window_docs", 0, 130, 6, 3, 24, mk_docs_window),
    ("T255_cu_seqlens_empty_docs", 0, 255, 6, 3, 40, mk_cu),
    ("T200_blocks_64_ragged", 0, 200, 5, 1, 8, mk_blocks64),
    ("T100_blocks_causal_bool", 0, 100, 6, 3, 24, mk_blocks_causal_bool),
    ("T61_window_obj_reordered", 0, 61, 6, 3, 8, mk_window_causal_obj),
    ("T33_window_past_T", 0, 33, 5, 1, 8, mk_window_past_t),
    ("T1000_causal", 0, 1000, 2, 1, 8, mk_causal),
    ("B1_T57_window", 1, 57, 6, 3, 40, mk_window3),
    ("B3_T33_causal_D40", 3, 33, 6, 3, 40, mk_causal),
    ("B3_T45_full_str", 3, 45, 12, 4, 8, mk_full_str),
    ("B3_T71_docs_per_row", 3, 71, 6, 3, 8, mk_docs_per_row),
    ("B3_T64_cu_shared", 3, 64, 5, 1, 24, mk_cu32),
]
SINGLE_IDS = [c[0] for c in SINGLE]


@pytest.mark.parametrize("case", SINGLE, ids=SINGLE_IDS)
def test_forward_backward_float32_match_float64(case):
    """attention.forward/backward: (o, lse) of softmax(scale q k^T + mask) v, lse float32 natural
    log, -inf for rows that see nothing (whose o is 0); every mask form; GQA/MQA; batch."""
    _, b, t, hq, hkv, d, build = case
    q, k, v, do = inputs(b, t, hq, hkv, d, seed=t + hq)
    mask, ok = build(t, b)
    o, lse = la.forward(q, k, v, mask)
    dq, dk, dv = la.backward(do, q, k, v, o, lse, mask)
    assert o.dtype == torch.float32 and lse.dtype == torch.float32
    assert lse.shape == q.shape[:-1]
    ro, rlse, rdq, rdk, rdv = exact(q, k, v, do, ok)
    assert_close("o", o, ro, 1e-5, 1e-5)
    assert_close("lse", lse, rlse, 1e-5, 1e-5)
    assert_close("dq", dq, rdq, 5e-5, 5e-5)
    assert_close("dk", dk, rdk, 5e-5, 5e-5)
    assert_close("dv", dv, rdv, 5e-5, 5e-5)
    empty = torch.isinf(rlse)
    assert torch.equal(torch.isneginf(lse), empty), "lse is -inf exactly where a row sees nothing"
    if empty.any():
        assert (o[empty] == 0).all() and (dq[empty] == 0).all()


BF16 = [c for c in SINGLE if c[0] in ("T2_causal_mqa", "T255_causal_window_D72", "T257_docs_12_4",
                                       "T200_blocks_64_ragged", "B3_T33_causal_D40",
                                       "B3_T71_docs_per_row", "T255_cu_seqlens_empty_docs")]


@pytest.mark.parametrize("case", BF16, ids=[c[0] for c in BF16])
def test_bfloat16_at_most_twice_naive_bfloat16_error(case):
    """bf16 inputs: o and the gradients in bf16, lse float32; accuracy by tests/README.md rule 2."""
    _, b, t, hq, hkv, d, build = case
    q, k, v, do = inputs(b, t, hq, hkv, d, seed=3 * t + 1, dtype=torch.bfloat16)
    mask, ok = build(t, b)
    o, lse = la.forward(q, k, v, mask)
    dq, dk, dv = la.backward(do, q, k, v, o, lse, mask)
    assert (o.dtype, dq.dtype, dk.dtype, dv.dtype, lse.dtype) == (torch.bfloat16,) * 4 + (
        torch.float32,)
    ref = exact(q, k, v, do, ok)
    nv = naive_grads(q, k, v, do, ok)  # torch bfloat16 throughout
    for name, ours, n, r in zip(("o", "lse", "dq", "dk", "dv"), (o, lse, dq, dk, dv), nv, ref):
        e, en = max_err(ours, r), max_err(n, r)
        assert e <= 2 * en + 1e-6, f"{name}: error {e:.3g} > 2 x naive bf16 {en:.3g}"


# ----------------------------------------------------------------------------------------------
# longseq.torch.attention: autograd, return_lse, positional vs keyword.

AUTOGRAD = [c for c in SINGLE if c[0] in ("T7_window3", "T257_full_text_docs",
                                          "T100_blocks_causal_bool", "B3_T71_docs_per_row",
                                          "T255_cu_seqlens_empty_docs", "B1_T57_window")]


@pytest.mark.parametrize("case", AUTOGRAD, ids=[c[0] for c in AUTOGRAD])
def test_torch_attention_autograd_matches_float64_autograd(case):
    _, b, t, hq, hkv, d, build = case
    q, k, v, do = inputs(b, t, hq, hkv, d, seed=11 + t)
    mask, ok = build(t, b)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    o, lse = lt.attention(qs, ks, vs, mask=mask, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:-1]
    (o * do).sum().backward()
    ro, rlse, rdq, rdk, rdv = exact(q, k, v, do, ok)
    assert_close("o", o.detach(), ro, 1e-5, 1e-5)
    assert_close("lse", lse.detach(), rlse, 1e-5, 1e-5)
    assert_close("dq", qs.grad, rdq, 5e-5, 5e-5)
    assert_close("dk", ks.grad, rdk, 5e-5, 5e-5)
    assert_close("dv", vs.grad, rdv, 5e-5, 5e-5)


def test_torch_attention_default_mask_is_full_and_positional_args():
    """`full` is the default; (q, k, v, mask, softmax_scale, return_lse) may be positional."""
    q, k, v, do = inputs(0, 29, 6, 3, 24, seed=2)
    ro, rlse = naive(q.double(), k.double(), v.double(), visible(29))
    assert_close("o default", lt.attention(q, k, v), ro, 1e-5, 1e-5)
    o1, l1 = lt.attention(q, k, v, "window:4", 0.3, True)
    o2, l2 = lt.attention(q, k, v, mask="window:4", softmax_scale=0.3, return_lse=True)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    ro, rlse = naive(q.double(), k.double(), v.double(), visible(29, window=4), scale=0.3)
    assert_close("o scaled", o1, ro, 1e-5, 1e-5)
    assert_close("lse scaled", l1, rlse, 1e-5, 1e-5)


def test_torch_attention_partial_requires_grad_and_strided_grad_output():
    """Only q and v require grad; the loss reads o through a permutation, so the incoming
    gradient is not contiguous."""
    q, k, v, _ = inputs(2, 37, 6, 3, 8, seed=15)
    w = torch.randn(8, 6, 37, 2, generator=torch.Generator().manual_seed(3))
    qs, vs = q.clone().requires_grad_(True), v.clone().requires_grad_(True)
    o = lt.attention(qs, k, vs, mask="window:6")
    (o.permute(3, 2, 1, 0) * w).sum().backward()
    do = w.permute(3, 2, 1, 0).contiguous()
    ro, _, rdq, _, rdv = exact(q, k, v, do, visible(37, window=6))
    assert_close("o", o.detach(), ro, 1e-5, 1e-5)
    assert_close("dq", qs.grad, rdq, 5e-5, 5e-5)
    assert_close("dv", vs.grad, rdv, 5e-5, 5e-5)


def test_torch_attention_bfloat16_autograd_dtypes_and_accuracy():
    q, k, v, do = inputs(3, 40, 5, 1, 40, seed=8, dtype=torch.bfloat16)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    o, lse = lt.attention(qs, ks, vs, mask="causal", return_lse=True)
    (o.float() * do.float()).sum().backward()
    assert o.dtype == qs.grad.dtype == ks.grad.dtype == vs.grad.dtype == torch.bfloat16
    assert lse.dtype == torch.float32
    ok = visible(40, causal=True)
    ref = exact(q, k, v, do, ok)
    nv = naive_grads(q, k, v, do, ok)
    for name, ours, n, r in zip(("o", "dq", "dk", "dv"), (o.detach(), qs.grad, ks.grad, vs.grad),
                                (nv[0], nv[2], nv[3], nv[4]), (ref[0], ref[2], ref[3], ref[4])):
        assert max_err(ours, r) <= 2 * max_err(n, r) + 1e-6, name


# ----------------------------------------------------------------------------------------------
# Outputs written in place; the softmax scale; determinism; numpy.


def test_forward_out_and_lse_are_written_in_place_and_returned():
    q, k, v, _ = inputs(3, 77, 6, 3, 24, seed=4)
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"))
    o2, l2 = la.forward(q, k, v, "causal", out=out, lse=lse)
    assert o2 is out and l2 is lse
    fo, fl = la.forward(q, k, v, "causal")
    assert torch.equal(out, fo) and torch.equal(lse, fl)


def test_forward_out_bfloat16_in_place():
    q, k, v, _ = inputs(0, 50, 6, 3, 8, seed=9, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    lse = torch.empty(50, 6, dtype=torch.float32)
    o2, l2 = la.forward(q, k, v, "window:7", out=out, lse=lse)
    assert o2 is out and l2 is lse
    fo, fl = la.forward(q, k, v, "window:7")
    assert torch.equal(out, fo) and torch.equal(lse, fl)


def test_backward_gradients_overwritten_not_added():
    """dq, dk, dv given: written in place, overwritten (not added to)."""
    q, k, v, do = inputs(0, 131, 12, 4, 8, seed=10)
    o, lse = la.forward(q, k, v, "causal")
    fresh = la.backward(do, q, k, v, o, lse, "causal")
    dq, dk, dv = torch.full_like(q, 7.0), torch.full_like(k, -3.0), torch.full_like(v, 1e30)
    got = la.backward(do, q, k, v, o, lse, "causal", dq=dq, dk=dk, dv=dv)
    assert got[0] is dq and got[1] is dk and got[2] is dv
    for g, f in zip((dq, dk, dv), fresh):
        assert torch.equal(g, f)
    # only one of them given
    dk2 = torch.full_like(k, 5.0)
    got = la.backward(do, q, k, v, o, lse, "causal", dk=dk2)
    assert got[1] is dk2 and torch.equal(dk2, fresh[1]) and torch.equal(got[0], fresh[0])


def test_softmax_scale_positional_keyword_and_none():
    q, k, v, do = inputs(0, 23, 5, 1, 72, seed=12)
    a = la.forward(q, k, v, "causal", 0.05)
    b = la.forward(q, k, v, mask="causal", softmax_scale=0.05)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    ok = visible(23, causal=True)
    ro, rlse, rdq, rdk, rdv = exact(q, k, v, do, ok, scale=0.05)
    assert_close("o", a[0], ro, 1e-5, 1e-5)
    assert_close("lse", a[1], rlse, 1e-5, 1e-5)
    g1 = la.backward(do, q, k, v, a[0], a[1], "causal", 0.05)
    g2 = la.backward(do=do, q=q, k=k, v=v, o=a[0], lse=a[1], mask="causal", softmax_scale=0.05)
    for x, y, r, n in zip(g1, g2, (rdq, rdk, rdv), ("dq", "dk", "dv")):
        assert torch.equal(x, y)
        assert_close(n, x, r, 5e-5, 5e-5)
    # None: 1/sqrt(D)
    c = la.forward(q, k, v, "causal", None)
    d = la.forward(q, k, v, "causal", 1.0 / math.sqrt(72))
    assert_close("scale None", c[0], d[0], 1e-6, 1e-6)


def test_backward_is_bitwise_deterministic_across_runs_and_threads():
    q, k, v, do = inputs(2, 300, 6, 3, 24, seed=13)
    mask = longseq.Mask(doc_ids=torch.tensor([i // 70 for i in range(300)]))
    o, lse = la.forward(q, k, v, mask)
    runs = [la.backward(do, q, k, v, o, lse, mask, threads=n) for n in (1, 2, 3, 1)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert torch.equal(a, b)
    # and through autograd
    grads = []
    for n in (1, 2):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
        (lt.attention(*xs, mask=mask, threads=n) * do).sum().backward()
        grads.append([x.grad for x in xs])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_numpy_in_numpy_out_same_as_torch():
    q, k, v, do = inputs(0, 45, 6, 3, 8, seed=14)
    qn, kn, vn, don = (x.numpy() for x in (q, k, v, do))
    o, lse = la.forward(qn, kn, vn, "causal")
    assert isinstance(o, np.ndarray) and isinstance(lse, np.ndarray)
    assert o.dtype == np.float32 and lse.dtype == np.float32 and lse.shape == (45, 6)
    to, tl = la.forward(q, k, v, "causal")
    assert_close("o numpy vs torch", torch.from_numpy(o), to, 1e-6, 0)
    dq = np.empty_like(qn)
    g = la.backward(don, qn, kn, vn, o, lse, "causal", dq=dq)
    assert g[0] is dq and all(isinstance(x, np.ndarray) for x in g)
    tg = la.backward(do, q, k, v, torch.from_numpy(o), torch.from_numpy(lse), "causal")
    for a, b in zip(g, tg):
        assert np.array_equal(a, b.numpy())
    ro, _, rdq, _, _ = exact(q, k, v, do, visible(45, causal=True))
    assert_close("o", torch.from_numpy(o), ro, 1e-5, 1e-5)
    assert_close("dq", torch.from_numpy(dq), rdq, 5e-5, 5e-5)


def test_q_k_v_may_alias():
    x = torch.randn(21, 3, 8, generator=torch.Generator().manual_seed(1))
    o, _ = la.forward(x, x, x, "causal")
    ro, _ = naive(x.double(), x.double(), x.double(), visible(21, causal=True))
    assert_close("o", o, ro, 1e-5, 1e-5)


# ----------------------------------------------------------------------------------------------
# longseq.attention.distributed: every algorithm and layout, odd worlds, against one process.


def dist_case(q, k, v, do, mask, **kw):
    o, lse = la.forward(q, k, v, mask)
    dq, dk, dv = la.backward(do, q, k, v, o, lse, mask)
    r = la.distributed(q, k, v, mask=mask, do=do, **kw)
    assert isinstance(r, la.Distributed)
    tag = str(kw)
    assert_close("o " + tag, r.o, o, 2e-5, 2e-5)
    assert_close("lse " + tag, r.lse, lse, 2e-5, 2e-5)
    assert_close("dq " + tag, r.dq, dq, 1e-4, 1e-4)
    assert_close("dk " + tag, r.dk, dk, 1e-4, 1e-4)
    assert_close("dv " + tag, r.dv, dv, 1e-4, 1e-4)
    assert len(r.stats["ranks"]) == kw["world"], "every rank's stats"
    return r


T_D = 257
Q6, K3, V3, DO6 = inputs(0, T_D, 6, 3, 24, seed=21)
Q12, K4, V4, DO12 = inputs(0, T_D, 12, 4, 8, seed=23)  # heads Ulysses over 2 or 4 can split
BM12 = rand_blocks(T_D, 12, seed=22)

DIST = [
    # (id, world, algo, balance, mask builder, extra)
    ("w1_burst_zigzag", 1, "burst", "zigzag", "causal", {}),
    ("w2_ring_striped_full", 2, "ring", "striped", None, {}),
    ("w3_burst_zigzag", 3, "burst", "zigzag", "causal", {}),
    ("w3_ring_contiguous_window", 3, "ring", "contiguous", "window:33", {}),
    ("w5_burst_striped_docs", 5, "burst", "striped",
     longseq.Mask(doc_ids=torch.tensor([i // 60 for i in range(T_D)])), {}),
    ("w5_ring_zigzag_cu", 5, "ring", "zigzag",
     longseq.Mask(cu_seqlens=torch.tensor([0, 1, 1, 100, 256, T_D], dtype=torch.int32)), {}),
    ("w6_burst_contiguous_full", 6, "burst", "contiguous", "full", {}),
    ("w7_burst_zigzag", 7, "burst", "zigzag", "causal", {}),
    ("w7_ring_striped_window", 7, "ring", "striped", "causal,window:40", {}),
    ("w6_double_ring_2", 6, "double-ring:2", "zigzag", "causal", {}),
    ("w6_double_ring_3_ring", 6, "double-ring:3:ring", "striped", "causal", {}),
    ("w6_double_ring_nodes2", 6, "double-ring", "zigzag", "causal", {"nodes": 2}),
    ("w4_double_ring_2_burst_link", 4, "double-ring:2:burst", "contiguous", "window:50",
     {"link": "inter=20us,2.5GB/s"}),
    ("w4_startrail_2", 4, "startrail:2", "zigzag", "causal", {}),
    ("w4_startrail_2_rings", 4, "startrail:2:rings", "striped", "full", {}),
    ("w8_startrail_2_teams_nodes2", 8, "startrail:2:teams", "zigzag", "causal", {"nodes": 2}),
    ("w3_ulysses", 3, "ulysses", "zigzag", "causal", {}),
    ("w6_ulysses", 6, "ulysses", "contiguous", "window:20", {}),
    ("w6_usp_2_h12_4", 6, "usp:2", "zigzag", "causal", {"heads": 12}),
    ("w4_ulysses_h12_4", 4, "ulysses", "striped", "full", {"heads": 12}),
    ("w8_usp_4_burst_h12_4", 8, "usp:4:burst", "zigzag", "causal", {"heads": 12}),
    ("w6_usp_3_ring", 6, "usp:3:ring", "striped", "causal", {}),
    ("w3_burst_no_head_groups", 3, "burst", "zigzag", "causal", {"head_groups": False}),
    ("w3_block_striped", 3, "burst", "block-striped",
     longseq.Mask(block_mask=BM12, block_size=12), {}),
    ("w4_block_striped_causal_ring", 4, "ring", "block-striped",
     longseq.Mask("causal", block_mask=BM12, block_size=12), {}),
    ("w6_block_striped", 6, "burst", "block-striped",
     longseq.Mask(block_mask=BM12, block_size=12), {}),
]


@pytest.mark.parametrize("case", DIST, ids=[c[0] for c in DIST])
def test_distributed_equals_single_process(case):
    _, world, algo, balance, mask, extra = case
    extra = dict(extra)
    t = (Q12, K4, V4, DO12) if extra.pop("heads", 6) == 12 else (Q6, K3, V3, DO6)
    dist_case(*t, mask, world=world, algo=algo, balance=balance, **extra)


QM, KM, VM, DOM = inputs(0, 255, 6, 3, 40, seed=24)
MATRIX_MASKS = [("causal", None), ("window", "window:31"), ("full", "full"),
                ("docs", longseq.Mask(doc_ids=torch.tensor([(i * 7) // 255 for i in range(255)])))]


@pytest.mark.parametrize("algo", ["ring", "burst"])
@pytest.mark.parametrize("world", [3, 5, 6, 7])
def test_distributed_matrix_odd_worlds_layouts_masks(world, algo):
    """T = 255 (no multiple of any world here), Hq 6 / Hkv 3, D 40: every layout x mask form."""
    for balance in ("contiguous", "zigzag", "striped"):
        for _, mask in MATRIX_MASKS:
            dist_case(QM, KM, VM, DOM, mask if mask is not None else "causal", world=world,
                      algo=algo, balance=balance)


@pytest.mark.parametrize("t,world", [(1, 3), (2, 5), (7, 7), (1, 2), (255, 6)])
def test_distributed_tiny_and_odd_lengths(t, world):
    q, k, v, do = inputs(0, t, 5, 1, 8, seed=t * 10 + world)
    for balance in ("contiguous", "zigzag", "striped"):
        dist_case(q, k, v, do, "causal", world=world, algo="burst", balance=balance)


def test_distributed_defaults_and_forward_only():
    """Defaults: algo burst, balance zigzag, mask None = full (as forward); without do the
    gradients are None; stats name the algorithm, layout and mask and count the visible pairs."""
    q, k, v, _ = inputs(0, 101, 6, 3, 8, seed=30)
    r = la.distributed(q, k, v, world=3)
    assert r.dq is None and r.dk is None and r.dv is None
    o, lse = la.forward(q, k, v)
    assert_close("o", r.o, o, 2e-5, 2e-5)
    assert r.stats["algo"] == "burst" and r.stats["balance"] == "zigzag"
    assert r.stats["visible_pairs"] == 101 * 101
    for mask, ok in (("causal", visible(101, causal=True)), ("window:10", visible(101, window=10)),
                     (longseq.Mask(block_mask=rand_blocks(101, 12, 3), block_size=12),
                      visible(101, block_mask=rand_blocks(101, 12, 3), block_size=12))):
        r = la.distributed(q, k, v, world=5, algo="ring", mask=mask)
        assert r.stats["visible_pairs"] == int(ok.sum()), mask


def test_distributed_bf16_precision_accuracy():
    """precision="bf16": bf16 operands, fp32 accumulation (rule 2 against the naive bf16)."""
    q, k, v, do = inputs(0, 90, 6, 3, 24, seed=31)
    r = la.distributed(q, k, v, world=3, mask="causal", precision="bf16", do=do)
    assert r.o.dtype == torch.float32
    qb, kb, vb = (x.bfloat16() for x in (q, k, v))
    ok = visible(90, causal=True)
    ro, _ = naive(qb.double(), kb.double(), vb.double(), ok)
    no, _ = naive(qb, kb, vb, ok)
    assert max_err(r.o, ro) <= 2 * max_err(no, ro) + 1e-6


def test_distributed_is_what_the_cli_computes(tmp_path):
    """docs: distributed runs "what `longseq attention` computes": the CLI on the same .npy files
    (local backend, same world/algo/layout/mask, one thread per rank) writes the same bits."""
    cli = cli_path()
    if cli is None:
        pytest.skip("no longseq CLI")
    q, k, v, do = inputs(0, 77, 6, 3, 8, seed=32)
    for n, x in zip(("q", "k", "v", "do"), (q, k, v, do)):
        np.save(tmp_path / f"{n}.npy", x.numpy())
    for algo, bal, world, mask in (("burst", "zigzag", 3, "causal"),
                                   ("ring", "striped", 5, "window:9"),
                                   ("ulysses", "contiguous", 3, "full")):
        out = tmp_path / f"out_{algo}"
        subprocess.run([cli, "attention", "--q", str(tmp_path / "q.npy"), "--k",
                        str(tmp_path / "k.npy"), "--v", str(tmp_path / "v.npy"), "--do",
                        str(tmp_path / "do.npy"), "--world", str(world), "--algo", algo,
                        "--balance", bal, "--mask", mask, "--backend", "local", "--threads", "1",
                        "--out", str(out)], check=True, capture_output=True, timeout=120)
        r = la.distributed(q, k, v, world=world, algo=algo, balance=bal, mask=mask, do=do,
                           threads=1)
        for n in ("o", "lse", "dq", "dk", "dv"):
            c = torch.from_numpy(np.load(out / f"{n}.npy"))
            assert torch.equal(c, getattr(r, n)), f"{algo} {n}"
        stats = json.loads((out / "stats.json").read_text())
        assert stats["visible_pairs"] == r.stats["visible_pairs"]


# ----------------------------------------------------------------------------------------------
# ContextParallel at world 1 (longseq.comm.mpi() without mpirun).


@pytest.fixture(scope="module")
def group():
    return longseq.comm.mpi()


def test_mpi_without_mpirun_is_a_world_of_one(group):
    assert group.size == 1 and group.rank == 0
    assert longseq.comm.mpi().size == 1


def test_mpi_returns_the_same_group_after_the_first_call(group):
    """help(longseq.comm.mpi): "opened on the first call, the same Group after"."""
    assert longseq.comm.mpi() is group


def test_cp_stats_sum_over_calls_and_reset(group):
    cp = lt.ContextParallel(group, seq=50)
    cp.stats(reset=True)
    q, k, v, _ = inputs(0, 50, 2, 1, 8, seed=70)
    qs = cp.shard(q).requires_grad_(True)
    cp.attention(qs, cp.shard(k), cp.shard(v))
    one = cp.stats()
    o = cp.attention(qs, cp.shard(k), cp.shard(v))
    two = cp.stats()
    assert one["forward"]["steps"] > 0 and one["backward"]["steps"] == 0
    assert two["forward"]["steps"] == 2 * one["forward"]["steps"]
    assert two["forward"]["pairs"] == 2 * one["forward"]["pairs"]
    o.sum().backward()
    assert cp.stats(reset=True)["backward"]["steps"] > 0
    z = cp.stats()
    assert z["forward"]["steps"] == 0 and z["backward"]["steps"] == 0


LAYOUTS = ["contiguous", "zigzag", "striped", "block-striped"]


@pytest.mark.parametrize("balance", LAYOUTS)
@pytest.mark.parametrize("seq", [1, 2, 7, 255, 257])
def test_cp_layout_shard_unshard_positions(group, balance, seq):
    extra = {}
    if balance == "block-striped":
        extra = dict(block_mask=torch.ones((seq + 3) // 4, (seq + 3) // 4, dtype=torch.uint8),
                     block_size=4)
    cp = lt.ContextParallel(group, algo="burst", balance=balance, seq=seq, **extra)
    assert (cp.world, cp.rank, cp.seq, cp.balance, cp.algo) == (1, 0, seq, balance, "burst")
    pos, valid = cp.positions(), cp.valid()
    assert pos.dtype == torch.int64 and pos.shape == (cp.local_len,)
    assert valid.dtype == torch.bool and torch.equal(valid, pos >= 0)
    assert cp.padded_len == cp.local_len * cp.world and cp.padded_len >= seq
    if balance == "zigzag":
        assert cp.padded_len % 2 == 0, "zigzag: 2P chunks"
    assert sorted(pos[valid].tolist()) == list(range(seq)), "a permutation of range(seq)"
    assert bool((pos[~valid] == -1).all()) and int((~valid).sum()) == cp.padded_len - seq
    x = torch.randn(2, seq, 3)
    xs = cp.shard(x, dim=1)
    assert xs.shape == (2, cp.local_len, 3)
    assert torch.equal(xs[:, valid], x[:, pos[valid]]), "local order = positions()"
    assert bool((xs[:, ~valid] == 0).all()), "padding rows are zero"
    assert torch.equal(cp.unshard(xs, dim=1), x)
    y = torch.arange(seq)
    assert torch.equal(cp.unshard(cp.shard(y)), y)


CP_CASES = [
    # (id, algo, balance, seq, ctor mask kwargs, reference visible)
    ("burst_zigzag_causal", "burst", "zigzag", 257, dict(), visible(257, causal=True)),
    ("ring_contiguous_full", "ring", "contiguous", 255, dict(mask="full"), visible(255)),
    ("ulysses_striped_window", "ulysses", "striped", 7, dict(mask="window:3"),
     visible(7, window=3)),
    ("double_ring_zigzag_docids", "double-ring", "zigzag", 255,
     dict(doc_ids=torch.tensor([i // 31 for i in range(255)])),
     visible(255, doc_ids=torch.tensor([i // 31 for i in range(255)]))),
    ("burst_striped_cu", "burst", "striped", 201,
     dict(cu_seqlens=torch.tensor([0, 50, 51, 201], dtype=torch.int32)),
     visible(201, doc_ids=ids_of_cu([0, 50, 51, 201], 201))),
    ("burst_block_striped", "burst", "block-striped", 100,
     dict(mask="full", block_mask=rand_blocks(100, 8, 40), block_size=8),
     visible(100, block_mask=rand_blocks(100, 8, 40), block_size=8)),
    ("ring_zigzag_T1", "ring", "zigzag", 1, dict(), visible(1, causal=True)),
    ("ring_zigzag_T2_mask_obj", "ring", "zigzag", 2, dict(mask=longseq.Mask("window:1")),
     visible(2, window=1)),
]


@pytest.mark.parametrize("case", CP_CASES, ids=[c[0] for c in CP_CASES])
def test_cp_attention_matches_float64(group, case):
    """cp.attention over shards == attention of the whole sequence; padding sees nothing (o 0,
    lse -inf) and is seen by nobody; autograd through shard."""
    _, algo, balance, seq, kw, ok = case
    cp = lt.ContextParallel(group, algo=algo, balance=balance, seq=seq, **kw)
    q, k, v, do = inputs(0, seq, 6, 3, 24, seed=seq + 50)
    qs, ks, vs = (cp.shard(x).requires_grad_(True) for x in (q, k, v))
    o, lse = cp.attention(qs, ks, vs, return_lse=True)
    assert o.shape == (cp.local_len, 6, 24) and lse.shape == (cp.local_len, 6)
    assert lse.dtype == torch.float32
    (o * cp.shard(do)).sum().backward()
    ro, rlse, rdq, rdk, rdv = exact(q, k, v, do, ok)
    assert_close("o", cp.unshard(o.detach()), ro, 1e-5, 1e-5)
    assert_close("lse", cp.unshard(lse.detach()), rlse, 1e-5, 1e-5)
    assert_close("dq", cp.unshard(qs.grad), rdq, 5e-5, 5e-5)
    assert_close("dk", cp.unshard(ks.grad), rdk, 5e-5, 5e-5)
    assert_close("dv", cp.unshard(vs.grad), rdv, 5e-5, 5e-5)
    pad = ~cp.valid()
    if pad.any():
        assert (o.detach()[pad] == 0).all() and torch.isneginf(lse[pad]).all()
        # seen by nobody: garbage in the padding rows of k and v changes no real output
        k2, v2 = cp.shard(k), cp.shard(v)
        k2[pad] = 100.0
        v2[pad] = -100.0
        o2 = cp.attention(cp.shard(q), k2, v2)
        assert_close("o with garbage padding", o2[~pad], o.detach()[~pad], 1e-6, 0)


def test_cp_batch_shares_mask_and_call_mask_overrides(group):
    cp = lt.ContextParallel(group, algo="burst", balance="zigzag", seq=99, mask="causal")
    q, k, v, _ = inputs(3, 99, 12, 4, 8, seed=60)
    qs, ks, vs = (cp.shard(x, dim=1) for x in (q, k, v))
    o = cp.attention(qs, ks, vs)
    assert o.shape == (3, cp.local_len, 12, 8)
    ro, _ = naive(q.double(), k.double(), v.double(), visible(99, causal=True))
    assert_close("o batch", cp.unshard(o, dim=1), ro, 1e-5, 1e-5)
    o = cp.attention(qs, ks, vs, mask="window:5")
    ro, _ = naive(q.double(), k.double(), v.double(), visible(99, window=5))
    assert_close("o mask override", cp.unshard(o, dim=1), ro, 1e-5, 1e-5)
    o = cp.attention(qs, ks, vs, None, 0.2)
    ro, _ = naive(q.double(), k.double(), v.double(), visible(99, causal=True), scale=0.2)
    assert_close("o scale", cp.unshard(o, dim=1), ro, 1e-5, 1e-5)


def test_cp_bfloat16_tensors_come_back_bfloat16(group):
    cp = lt.ContextParallel(group, algo="ring", balance="striped", seq=70)
    q, k, v, do = inputs(0, 70, 6, 3, 24, seed=61, dtype=torch.bfloat16)
    qs, ks, vs = (cp.shard(x).requires_grad_(True) for x in (q, k, v))
    o = cp.attention(qs, ks, vs)
    (o.float() * cp.shard(do).float()).sum().backward()
    assert o.dtype == qs.grad.dtype == ks.grad.dtype == vs.grad.dtype == torch.bfloat16
    ok = visible(70, causal=True)
    ref = exact(q, k, v, do, ok)
    nv = naive_grads(q, k, v, do, ok)
    for name, ours, n, r in zip(("o", "dq", "dk", "dv"),
                                (o.detach(), qs.grad, ks.grad, vs.grad),
                                (nv[0], nv[2], nv[3], nv[4]), (ref[0], ref[2], ref[3], ref[4])):
        e, en = max_err(cp.unshard(ours.contiguous()), r), max_err(n, r)
        assert e <= 2 * en + 1e-6, f"{name}: {e:.3g} > 2 x {en:.3g}"


def test_collectives_world_one(group):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert group.all_reduce(x) is x and torch.equal(x, torch.arange(6.).reshape(2, 3))
    assert group.all_reduce(x, "max") is x
    assert group.broadcast(x, 0) is x
    g = group.all_gather(x)
    assert g.shape == (1, 2, 3) and torch.equal(g[0], x) and g.data_ptr() != x.data_ptr()
    n = np.ones(4, dtype=np.float32)
    assert group.all_reduce(n) is n and isinstance(group.all_gather(n), np.ndarray)
    group.barrier()
    s = group.split(0, 0)
    assert s.size == 1 and s.rank == 0
    cp = lt.ContextParallel(group, seq=5)
    y = torch.ones(3)
    assert cp.all_reduce(y) is y and cp.all_gather(y).shape == (1, 3)


# ----------------------------------------------------------------------------------------------
# The documented refusals: TypeError or ValueError naming the argument and the values.


def _qkv(t=16, hq=4, hkv=2, d=8):
    return [torch.randn(t, h, d) for h in (hq, hkv, hkv)]


def _nc_q():
    # the docs' own example: q [16, 4, 8] with strides [8, 128, 1]
    q = torch.randn(4, 16, 8).transpose(0, 1)
    _, k, v = _qkv()
    return la.forward(q, k, v)


def _blocks_refusal():
    q, k, v = _qkv()
    return la.distributed(q, k, v, world=3, balance="block-striped",
                          mask=longseq.Mask(block_mask=torch.ones(4, 4, dtype=torch.uint8),
                                            block_size=4))


def _rg():
    q, k, v = _qkv()
    return la.forward(q.requires_grad_(True), k, v)


def _cp_startrail_world1():
    cp = lt.ContextParallel(longseq.comm.mpi(), algo="startrail:2", seq=16)
    q, k, v = (cp.shard(x) for x in _qkv())
    return cp.attention(q, k, v)


REFUSALS = [
    # (id, call, exception types, substrings the message must contain)
    ("noncontiguous_q", _nc_q, ValueError,
     ["q [16, 4, 8] is not contiguous (strides [8, 128, 1] elements)", "q.contiguous()"]),
    ("float64", lambda: la.forward(*(x.double() for x in _qkv())), TypeError, ["q", "64"]),
    ("float16", lambda: la.forward(*(x.half() for x in _qkv())), TypeError, ["q", "16"]),
    ("mixed_dtype", lambda: (lambda q, k, v: la.forward(q, k.bfloat16(), v))(*_qkv()),
     TypeError, ["k"]),
    ("heads_3_into_4", lambda: la.forward(*_qkv(hkv=3)), ValueError, ["4", "3"]),
    ("k_length", lambda: (lambda q, k, v: la.forward(q, k[:15].contiguous(),
                                                     v[:15].contiguous()))(*_qkv()),
     ValueError, ["k", "15"]),
    ("rank2_q", lambda: (lambda q, k, v: la.forward(q[0], k[0], v[0]))(*_qkv()), ValueError,
     ["q", "[4, 8]"]),
    ("requires_grad_untracked", _rg, (TypeError, ValueError), ["q"]),
    ("mask_term", lambda: la.forward(*_qkv(), "bogus"), ValueError, ["bogus"]),
    ("window_0", lambda: la.forward(*_qkv(), "window:0"), ValueError, ["window", "0"]),
    ("mask_type", lambda: la.forward(*_qkv(), 5), TypeError, ["mask", "int"]),
    ("doc_ids_length", lambda: la.forward(*_qkv(), longseq.Mask(
        doc_ids=torch.zeros(15, dtype=torch.int32))), ValueError, ["doc_ids", "15", "16"]),
    ("doc_ids_dtype", lambda: la.forward(*_qkv(), longseq.Mask(doc_ids=torch.zeros(16))),
     TypeError, ["doc_ids"]),
    ("doc_ids_batch", lambda: la.forward(*(x.expand(3, *x.shape).contiguous() for x in _qkv()),
                                         longseq.Mask(doc_ids=torch.zeros(2, 16,
                                                                          dtype=torch.int64))),
     ValueError, ["2", "3"]),
    ("cu_seqlens_end", lambda: la.forward(*_qkv(), longseq.Mask(
        cu_seqlens=torch.tensor([0, 5, 15], dtype=torch.int32))), ValueError, ["cu_seqlens", "16",
                                                                             "15"]),
    ("block_mask_shape", lambda: la.forward(*_qkv(), longseq.Mask(
        block_mask=torch.ones(3, 3, dtype=torch.uint8), block_size=4)), ValueError,
     ["block_mask", "[3, 3]", "[4, 4]"]),
    ("block_mask_dtype", lambda: la.forward(*_qkv(), longseq.Mask(
        block_mask=torch.ones(4, 4), block_size=4)), TypeError, ["block_mask"]),
    ("out_shape", lambda: la.forward(*_qkv(), out=torch.empty(16, 4, 9)), ValueError,
     ["[16, 4, 9]", "[16, 4, 8]"]),
    ("lse_dtype", lambda: la.forward(*_qkv(), lse=torch.empty(16, 4, dtype=torch.float64)),
     TypeError, ["lse"]),
    ("softmax_scale_negative", lambda: la.forward(*_qkv(), softmax_scale=-1.0), ValueError,
     ["softmax_scale", "-1"]),
    ("ulysses_heads_docs_message", lambda: la.distributed(*_qkv(), world=3, algo="ulysses"),
     ValueError, ["[attention] Ulysses over 3 ranks needs the query heads 4 to be divisible by 3"]),
    ("startrail_c2", lambda: la.distributed(*_qkv(), world=3, algo="startrail:2"), ValueError,
     ["startrail:2", "3"]),
    ("inner_ring", lambda: la.distributed(*_qkv(), world=3, algo="double-ring:2"), ValueError,
     ["2", "3"]),
    ("usp_inner", lambda: la.distributed(*_qkv(), world=6, algo="usp:4"), ValueError,
     ["usp:4", "6"]),
    ("block_striped_multiple", _blocks_refusal, ValueError, ["4", "3"]),
    ("unknown_algo", lambda: la.distributed(*_qkv(), world=2, algo="bogus"), ValueError,
     ["bogus"]),
    ("unknown_balance", lambda: la.distributed(*_qkv(), world=2, balance="diagonal"), ValueError,
     ["diagonal"]),
    ("distributed_bf16", lambda: la.distributed(*(x.bfloat16() for x in _qkv()), world=2),
     TypeError, ["q"]),
    ("cp_per_row_doc_ids", lambda: (lambda cp: cp.attention(
        *(cp.shard(x.expand(2, *x.shape).contiguous(), dim=1) for x in _qkv(t=12, hq=2))))(
        lt.ContextParallel(longseq.comm.mpi(), seq=12,
                           doc_ids=torch.zeros(2, 12, dtype=torch.int64))),
     ValueError, ["2"]),
    ("cp_block_mask_shape", lambda: lt.ContextParallel(
        longseq.comm.mpi(), seq=20, balance="block-striped",
        block_mask=torch.ones(4, 4, dtype=torch.uint8), block_size=8), ValueError,
     ["[4, 4]", "[3, 3]"]),
    ("mask_reused_at_other_length", lambda: (lambda m: (la.forward(*_qkv(), m), la.forward(
        *_qkv(t=10), m)))(longseq.Mask(doc_ids=torch.zeros(16, dtype=torch.int64))),
     ValueError, ["16", "10"]),
    ("cp_startrail_world1", _cp_startrail_world1, ValueError, ["startrail:2", "1"]),
    ("cp_group_type", lambda: lt.ContextParallel(None, seq=5), TypeError, ["group", "NoneType"]),
    ("cp_shard_length", lambda: lt.ContextParallel(longseq.comm.mpi(), seq=11).shard(
        torch.randn(10, 3)), ValueError, ["10", "11"]),
    ("cp_attention_length", lambda: lt.ContextParallel(longseq.comm.mpi(), seq=11).attention(
        *_qkv(t=11, hq=2)), ValueError, ["11", "12"]),
    ("all_reduce_op", lambda: longseq.comm.mpi().all_reduce(torch.ones(2), "min"), ValueError,
     ["min"]),
    ("all_reduce_noncontiguous", lambda: longseq.comm.mpi().all_reduce(torch.ones(3, 2).t()),
     ValueError, ["contiguous"]),
    ("plan_unknown_flag", lambda: longseq.plan(gpuz=3), TypeError, ["gpuz"]),
    ("plan_bad_value", lambda: longseq.plan(seq="abc"), ValueError, ["abc"]),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_documented_refusals(case):
    _, call, exc, needles = case
    with pytest.raises(exc) as ei:
        call()
    assert type(ei.value) in ((exc,) if isinstance(exc, type) else exc), type(ei.value)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"message {msg!r} does not name {n!r}"


# ----------------------------------------------------------------------------------------------
# The rest of the engine: plan, info, tokenizer, token files, safetensors.


def _cli_json(*args):
    cli = cli_path()
    if cli is None:
        pytest.skip("no longseq CLI")
    r = subprocess.run([cli, *args], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("kw,flags", [
    (dict(gpus=24, gpus_per_node=8, seq="96K", algo="burst,usp:2", mask="window:4096"),
     ["--gpus", "24", "--gpus-per-node", "8", "--seq", "96K", "--algo", "burst,usp:2", "--mask",
      "window:4096"]),
    (dict(gpus=6, gpus_per_node=3, seq=1001, dp="2,3"),
     ["--gpus", "6", "--gpus-per-node", "3", "--seq", "1001", "--dp", "2,3"]),
    (dict(train="main"), ["--train", "main"]),
])
def test_plan_is_what_the_cli_prints(kw, flags):
    assert longseq.plan(**kw) == _cli_json("plan", "--json", *flags)


def test_plan_seq_as_int_or_suffix():
    assert longseq.plan(gpus=16, seq=65536) == longseq.plan(gpus=16, seq="64K")


def test_info_is_what_the_cli_prints():
    info = longseq.info()
    assert info == _cli_json("info", "--json")
    assert info["version"] == longseq.__version__


def test_byte_level_tokenizer():
    tk = longseq.Tokenizer()
    s = "h\u00e9llo \u2713\n\x00end"
    ids = list(tk.encode(s))
    assert ids == list(s.encode("utf-8")), "byte-level: ids 0-255 are the bytes"
    assert tk.eot == 256
    assert tk.decode(ids) == s
    cut = list("\u00e9".encode())[:1]
    assert tk.decode(cut) == bytes(cut).decode("utf-8", errors="replace")
    assert tk.decode(cut, errors="ignore") == ""
    docs = ["ab", "", "\u00fc\n"]
    assert list(tk.encode_documents(docs)) == [97, 98, 256, 256, 0xc3, 0xbc, 10, 256]


def test_encode_documents_is_the_token_file_cli_writes(tmp_path):
    cli = cli_path()
    if cli is None:
        pytest.skip("no longseq CLI")
    docs = ["In the beginning\n", "", "\u00e9t\u00e9 \u2713", "x" * 300]
    paths = []
    for i, d in enumerate(docs):
        p = tmp_path / f"d{i}.txt"
        p.write_text(d, encoding="utf-8")
        paths.append(str(p))
    out = tmp_path / "t.bin"
    subprocess.run([cli, "tokenize", "--out", str(out), "--in", *paths], check=True,
                   capture_output=True, timeout=60)
    ids, vocab, eot = longseq.read_tokens(str(out))
    assert ids.dtype == torch.int64 and ids.dim() == 1
    tk = longseq.Tokenizer()
    assert ids.tolist() == list(tk.encode_documents(docs))
    assert vocab == tk.vocab_size and eot == tk.eot


SAFE_DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.int64,
               torch.uint8]


def test_safetensors_round_trip_and_checksum(tmp_path):
    p = tmp_path / "m.safetensors"
    g = torch.Generator().manual_seed(1)
    ts = {f"t{i}": (torch.randn(3, 5, generator=g) * 100).to(dt) for i, dt in
          enumerate(SAFE_DTYPES)}
    ts["scalarish"] = torch.randn(1, generator=g)
    longseq.save_safetensors(str(p), ts, {"note": "x"})
    back, meta = longseq.load_safetensors(str(p))
    assert meta.get("note") == "x"
    for n, t in ts.items():
        assert back[n].dtype == t.dtype and back[n].shape == t.shape and torch.equal(back[n], t)
    # a flipped byte: ValueError naming the tensor
    raw = bytearray(p.read_bytes())
    hlen = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hlen])
    raw[8 + hlen + hdr["t3"]["data_offsets"][0]] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="t3"):
        longseq.load_safetensors(str(p))


def test_safetensors_bool_documented_dtype(tmp_path):
    """docs: load_safetensors/save_safetensors handle F32, BF16, F64, I32, I64, U8, BOOL."""
    p = tmp_path / "b.safetensors"
    m = torch.tensor([True, False, True])
    longseq.save_safetensors(str(p), {"m": m})
    back, _ = longseq.load_safetensors(str(p))
    assert back["m"].dtype == torch.bool and torch.equal(back["m"], m)


def test_safetensors_loads_a_bool_file_written_by_hand(tmp_path):
    """A BOOL tensor in a safetensors file written without longseq (no checksums)."""
    p = tmp_path / "h.safetensors"
    hdr = json.dumps({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]},
                      "f": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]}}).encode()
    p.write_bytes(struct.pack("<Q", len(hdr)) + hdr + bytes([1, 0, 1]) +
                  np.array([1.5, -2.0], dtype=np.float32).tobytes())
    back, _ = longseq.load_safetensors(str(p))
    assert back["m"].dtype == torch.bool and back["m"].tolist() == [True, False, True]
    assert back["f"].tolist() == [1.5, -2.0]
