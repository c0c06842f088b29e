#!/usr/bin/python3
"""Conformance of the fp64 reference kernels (src/longseq/kernels/ref) with PyTorch.

ref_dump (tests/kernels/torch/ref_dump.cpp) writes seeded inputs and the reference's outputs as
.npy files, one folder per case; this script recomputes every output with torch autograd in
float64, from an independent implementation (the attention mask predicate is re-written here in
numpy, not taken from the C++ code), and compares.

Tolerance: |ref - torch| <= atol + rtol * |torch| elementwise with rtol 1e-10 and atol 1e-12
(RoPE: atol 1e-9, since angles pos * theta^(-2i/D) at pos ~1e6 carry ~1e-10 absolute rounding
that the two sides compute in different orders). Both sides are float64 and differ only in
summation order, so any real disagreement shows up many orders of magnitude above these.
LSE: -inf entries (rows that see nothing) must match exactly.

Usage:
  ref_vs_torch.py --dump <path to ref_dump>   # runs ref_dump into a temp folder, then compares
  ref_vs_torch.py --dir <folder>              # compares a folder ref_dump already wrote
Exits 0 when everything matches, 1 on any mismatch (each one printed), 2 on a usage or setup
error.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

RTOL, ATOL = 1e-10, 1e-12

failures = []


def compare(case, name, ref, want, atol=ATOL, rtol=RTOL):
    """Records a failure unless ref matches want elementwise (inf entries must match exactly)."""
    ref = np.asarray(ref, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if ref.shape != want.shape:
        failures.append(f"{case}/{name}: shape {ref.shape} != torch {want.shape}")
        return 0.0
    if np.isnan(ref).any():
        where = np.argwhere(np.isnan(ref))[:5].tolist()
        failures.append(f"{case}/{name}: reference has NaN at {where}")
        return 0.0
    inf_ref, inf_want = np.isinf(ref), np.isinf(want)
    if (inf_ref != inf_want).any() or (ref[inf_ref] != want[inf_want]).any():
        bad = np.argwhere((inf_ref != inf_want))[:5].tolist()
        failures.append(f"{case}/{name}: infinities differ (first at {bad})")
        return 0.0
    fin = ~inf_ref
    err = np.abs(ref[fin] - want[fin])
    bound = atol + rtol * np.abs(want[fin])
    if (err > bound).any():
        idx = np.argwhere(fin)[np.argmax(err - bound)]
        idx = tuple(int(i) for i in idx)
        failures.append(
            f"{case}/{name}: {int((err > bound).sum())} of {err.size} elements differ; worst at "
            f"{idx}: ref {ref[idx]!r} torch {want[idx]!r} (|diff| {np.max(err):.3e}, "
            f"atol {atol:g}, rtol {rtol:g})")
    return float(err.max()) if err.size else 0.0


def load(d, name):
    return np.load(os.path.join(d, name + ".npy"))


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=torch.float64, requires_grad=grad)


# ---- attention ----------------------------------------------------------------------------------

def visible(qpos, kpos, qdoc, kdoc, causal, window, block_mask, block_size):
    """The mask predicate of design.md section 3 over global positions, written independently."""
    qp, kp = qpos[:, None], kpos[None, :]
    m = (qp >= 0) & (kp >= 0)
    if causal or window > 0:
        m &= kp <= qp
    if window > 0:
        m &= (qp - kp) < window
    if qdoc is not None:
        m &= qdoc[:, None] == kdoc[None, :]
    if block_mask is not None:
        qb = np.maximum(qp, 0) // block_size
        kb = np.maximum(kp, 0) // block_size
        m &= block_mask[qb, kb] != 0
    return m


def check_attention(case, d):
    scale, causal, window, docs, has_block, block_size, _, hkv = load(d, "params").tolist()
    q, k, v, do = (load(d, n) for n in ("q", "k", "v", "do"))
    qpos, kpos = load(d, "qpos"), load(d, "kpos")
    qdoc = load(d, "qdoc") if docs else None
    kdoc = load(d, "kdoc") if docs else None
    bm = load(d, "block_mask") if has_block else None
    mask = visible(qpos, kpos, qdoc, kdoc, bool(causal), int(window), bm, int(block_size))

    hq = q.shape[1]
    g = hq // int(hkv)
    tq_, tk_ = t64(q, True), t64(k, True)
    tv_ = t64(v, True)
    kk = tk_.repeat_interleave(g, dim=1)  # K/V repeated per query head: gradients sum back
    vv = tv_.repeat_interleave(g, dim=1)
    mt = torch.from_numpy(mask)
    any_row = mt.any(-1)
    s = torch.einsum("ihd,jhd->hij", tq_, kk) * scale
    s = s.masked_fill(~mt, float("-inf"))
    # Rows that see nothing: a finite placeholder keeps logsumexp and its gradient free of NaN;
    # their probabilities are then zeroed by the mask.
    s = torch.where(any_row[None, :, None], s, torch.zeros_like(s))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]) * mt
    o = torch.einsum("hij,jhd->ihd", p, vv)
    lse_out = torch.where(any_row[None, :], lse, torch.full_like(lse, float("-inf"))).T
    (o * t64(do)).sum().backward()

    if any_row.all():
        failures.append(f"{case}: expected at least one query row that sees nothing")
    errs = [
        compare(case, "o", load(d, "o"), o.detach().numpy()),
        compare(case, "lse", load(d, "lse"), lse_out.detach().numpy()),
        compare(case, "delta", load(d, "delta"), (o.detach() * t64(do)).sum(-1).numpy()),
        compare(case, "dq", load(d, "dq"), tq_.grad.numpy()),
        compare(case, "dk", load(d, "dk"), tk_.grad.numpy()),
        compare(case, "dv", load(d, "dv"), tv_.grad.numpy()),
    ]
    return max(errs)


# ---- LM head + cross-entropy --------------------------------------------------------------------

def check_ce(case, d):
    ignore = int(load(d, "params")[0])
    hidden, weight = t64(load(d, "hidden"), True), t64(load(d, "weight"), True)
    labels = torch.from_numpy(load(d, "labels").astype(np.int64))
    logits = hidden @ weight.T
    mean = F.cross_entropy(logits, labels, ignore_index=ignore, reduction="mean")
    total = F.cross_entropy(logits.detach(), labels, ignore_index=ignore, reduction="sum")
    per_token = F.cross_entropy(logits.detach(), labels, ignore_index=ignore, reduction="none")
    count = int((labels != ignore).sum())
    mean.backward()
    errs = [
        compare(case, "loss[sum,count,mean]", load(d, "loss"), [total.item(), count, mean.item()]),
        compare(case, "token_loss", load(d, "token_loss"), per_token.numpy()),
        compare(case, "lse", load(d, "lse"), torch.logsumexp(logits.detach(), -1).numpy()),
        compare(case, "dhidden", load(d, "dhidden"), hidden.grad.numpy()),
        compare(case, "dweight", load(d, "dweight"), weight.grad.numpy()),
    ]
    return max(errs)


# ---- RMSNorm, RoPE, SwiGLU ----------------------------------------------------------------------

def check_rmsnorm(case, d):
    eps = float(load(d, "params")[0])
    x, w = t64(load(d, "x"), True), t64(load(d, "weight"), True)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    y = x * rstd * w  # LlamaRMSNorm
    (y * t64(load(d, "do"))).sum().backward()
    return max(
        compare(case, "out", load(d, "out"), y.detach().numpy()),
        compare(case, "rstd", load(d, "rstd"), rstd.detach()[:, 0].numpy()),
        compare(case, "dx", load(d, "dx"), x.grad.numpy()),
        compare(case, "dweight", load(d, "dweight"), w.grad.numpy()))


def rotate_half(x):
    """Hugging Face transformers' LLaMA rotate_half."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def check_rope(case, d):
    theta = float(load(d, "params")[0])
    x = t64(load(d, "x"), True)
    pos = torch.from_numpy(load(d, "pos"))
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = pos.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    pad = (pos < 0)[:, None]
    cos = torch.where(pad, torch.ones_like(emb), emb.cos())[:, None, :]  # padding: identity
    sin = torch.where(pad, torch.zeros_like(emb), emb.sin())[:, None, :]
    y = x * cos + rotate_half(x) * sin
    (y * t64(load(d, "do"))).sum().backward()
    return max(
        compare(case, "out", load(d, "out"), y.detach().numpy(), atol=1e-9),
        compare(case, "dx", load(d, "dx"), x.grad.numpy(), atol=1e-9))


def check_swiglu(case, d):
    gate, up = t64(load(d, "gate"), True), t64(load(d, "up"), True)
    y = F.silu(gate) * up
    (y * t64(load(d, "do"))).sum().backward()
    return max(
        compare(case, "out", load(d, "out"), y.detach().numpy()),
        compare(case, "dgate", load(d, "dgate"), gate.grad.numpy()),
        compare(case, "dup", load(d, "dup"), up.grad.numpy()))


CHECKS = {"attn_": check_attention, "ce_": check_ce, "rmsnorm": check_rmsnorm,
          "rope_": check_rope, "swiglu": check_swiglu}
# What ref_dump must have written: 9 mask kinds x GQA groups 1, 2, 4, and the other ops.
EXPECTED_MIN = {"attn_": 27, "ce_": 2, "rmsnorm": 1, "rope_": 2, "swiglu": 1}


def run(root):
    cases = sorted(os.listdir(root))
    seen = {p: 0 for p in CHECKS}
    for case in cases:
        prefix = next((p for p in CHECKS if case.startswith(p)), None)
        if prefix is None:
            failures.append(f"{case}: unknown case kind")
            continue
        seen[prefix] += 1
        worst = CHECKS[prefix](case, os.path.join(root, case))
        print(f"  {case:28s} max |ref - torch| {worst:.2e}")
    for p, n in EXPECTED_MIN.items():
        if seen[p] < n:
            failures.append(f"expected at least {n} '{p}' cases, found {seen[p]}")
    if failures:
        print(f"FAILED: {len(failures)} mismatches", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"OK: {len(cases)} cases match torch {torch.__version__} (float64)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--dump", help="path to the ref_dump executable")
    src.add_argument("--dir", help="folder written by ref_dump")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    if args.dir:
        return run(args.dir)
    with tempfile.TemporaryDirectory(prefix="ref_vs_torch_") as tmp:
        try:
            r = subprocess.run([args.dump, tmp])
        except OSError as e:
            print(f"cannot run ref_dump {args.dump!r}: {e}", file=sys.stderr)
            return 2
        if r.returncode != 0:
            print(f"ref_dump failed with exit code {r.returncode}", file=sys.stderr)
            return 2
        return run(tmp)


if __name__ == "__main__":
    sys.exit(main())
