#!/usr/bin/env python3
"""Round trip of `longseq attention` through .npy files, checked against PyTorch (float64).

Writes seeded inputs, runs the CLI on several algorithms, layouts, masks and worlds, and compares
o, lse, dq, dk, dv with torch autograd on the same mask. Also checks that malformed input is
refused with a message naming the file. Exits non-zero on any mismatch.
Usage: cli_vs_torch.py LONGSEQ_BINARY WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

LONGSEQ, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
failures = []


def visible(n, kind, docs=None, blocks=None, bsize=0, causal_blocks=False, window=0):
    q = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    m = np.ones((n, n), dtype=bool)
    if kind in ("causal", "document") or causal_blocks or window:
        m &= k <= q
    if window:
        m &= (q - k) < window
    if docs is not None:
        m &= docs[:, None] == docs[None, :]
    if blocks is not None:
        m &= blocks[q // bsize, k // bsize].astype(bool)
    return m


def torch_attention(q, k, v, do, vis, scale):
    qt, kt, vt = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kr = kt.repeat_interleave(g, dim=1)  # the oracle may repeat K/V; longseq never does
    vr = vt.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", qt, kr) * scale
    s = s.masked_fill(~torch.tensor(vis)[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [h, q]
    p = torch.exp(s - lse[..., None])
    p = torch.nan_to_num(p, nan=0.0)  # rows that see nothing
    o = torch.einsum("hqk,khd->qhd", p, vr)
    (o * torch.tensor(do, dtype=torch.float64)).sum().backward()
    return o.detach().numpy(), lse.T.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def check(name, got, want, atol=2e-4, rtol=2e-3):
    inf = np.isinf(want)
    if not np.array_equal(np.isinf(got), inf) or np.any(got[inf] != want[inf]):
        failures.append(f"{name}: -inf pattern differs")
        return
    err = np.abs(got[~inf] - want[~inf]) - (atol + rtol * np.abs(want[~inf]))
    if np.isnan(got).any() or (err.size and err.max() > 0):
        i = int(np.argmax(err))
        failures.append(f"{name}: worst excess {err.max():.3g} at flat {i}")


rng = np.random.default_rng(7)
n, hq, hkv, d = 53, 4, 2, 8
q = rng.standard_normal((n, hq, d)).astype(np.float32)
k = rng.standard_normal((n, hkv, d)).astype(np.float32)
v = rng.standard_normal((n, hkv, d)).astype(np.float32)
do = rng.standard_normal((n, hq, d)).astype(np.float32)
for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
    np.save(os.path.join(WORK, f"{name}.npy"), x)
docs = np.repeat(np.arange(5), [3, 20, 1, 17, 12]).astype(np.int32)
np.save(os.path.join(WORK, "docs.npy"), docs)
bsize = 6
nb = (n + bsize - 1) // bsize
blocks = ((np.abs(np.arange(nb)[:, None] - np.arange(nb)[None, :]) <= 1) | (np.arange(nb)[None, :] == 0)).astype(np.uint8)
blocks[3, :] = 0  # a block row that sees nothing
np.save(os.path.join(WORK, "blocks.npy"), blocks)

cases = [
    ("burst", "zigzag", "causal", [], 3, 1, visible(n, "causal")),
    ("ring", "striped", "full", [], 4, 2, visible(n, "full")),
    ("double-ring", "contiguous", "window:9", [], 4, 2, visible(n, "causal", window=9)),
    ("double-ring:ring", "zigzag", f"document:{WORK}/docs.npy", [], 6, 3, visible(n, "document", docs=docs)),
    ("burst", "block-striped", f"blocks:{WORK}/blocks.npy:{bsize}", ["--causal"], 3, 1,
     visible(n, "blocks", blocks=blocks, bsize=bsize, causal_blocks=True)),
    ("ring", "zigzag", f"blocks:{WORK}/blocks.npy:{bsize}", [], 5, 1, visible(n, "blocks", blocks=blocks, bsize=bsize)),
    ("startrail:2", "zigzag", "causal", [], 4, 1, visible(n, "causal")),
    ("ulysses", "zigzag", f"document:{WORK}/docs.npy", [], 2, 1, visible(n, "document", docs=docs)),
    ("usp:2:ring", "striped", "window:9", [], 4, 2, visible(n, "causal", window=9)),
]
scale = 0.3
for algo, bal, mask, extra, world, nodes, vis in cases:
    out = os.path.join(WORK, f"out_{algo}_{bal}_{world}".replace(":", "_"))
    cmd = [LONGSEQ, "attention", "--backend", "local", "--q", f"{WORK}/q.npy", "--k", f"{WORK}/k.npy",
           "--v", f"{WORK}/v.npy", "--do", f"{WORK}/do.npy", "--mask", mask, "--algo", algo, "--world",
           str(world), "--nodes", str(nodes), "--balance", bal, "--scale", str(scale), "--out", out] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"{algo}/{bal}/{mask}: exit {r.returncode}: {r.stderr.strip()}")
        continue
    want = torch_attention(q, k, v, do, vis, scale)
    for nm, w in zip(("o", "lse", "dq", "dk", "dv"), want):
        got = np.load(os.path.join(out, f"{nm}.npy"))
        if got.dtype != np.float32 or got.shape != w.shape:
            failures.append(f"{algo}/{bal}/{mask} {nm}: dtype {got.dtype} shape {got.shape}, want float32 {w.shape}")
            continue
        check(f"{algo}/{bal}/{mask}/world{world} {nm}", got, w)
    stats = json.load(open(os.path.join(out, "stats.json")))
    if len(stats["ranks"]) != world or any(
        key not in stats["ranks"][0]
        for key in ("bytes_sent_intra", "bytes_sent_inter", "messages_sent_intra", "messages_sent_inter", "compute_s", "wait_s")
    ):
        failures.append(f"{algo}: stats.json lacks per-rank fields")

# Malformed input is refused with a message naming the file, not a crash.
np.save(os.path.join(WORK, "qf.npy"), np.asfortranarray(q.reshape(n, hq * d)).reshape(n, hq, d, order="F"))
bad = [
    (["--q", f"{WORK}/qf.npy"], "qf.npy"),
    (["--q", f"{WORK}/docs.npy"], "docs.npy"),
    (["--q", f"{WORK}/missing.npy"], "missing.npy"),
    (["--q", f"{WORK}/q.npy", "--mask", "window:x"], "window"),
    (["--q", f"{WORK}/q.npy", "--algo", "startrail:3", "--world", "8"], "startrail"),
    (["--q", f"{WORK}/q.npy", "--world", "4", "--nodes", "3"], "3"),
]
for args, needle in bad:
    cmd = [LONGSEQ, "attention", "--backend", "local", "--k", f"{WORK}/k.npy", "--v", f"{WORK}/v.npy"] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 0 or needle not in r.stderr or "error" not in r.stderr:
        failures.append(f"bad input {args}: exit {r.returncode}, stderr {r.stderr.strip()!r}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"{len(cases)} CLI runs and {len(bad)} malformed inputs: 0 failed")
