#!/usr/bin/env python3
"""PyTorch on the same GPU, the baseline of cuda_kernels_bench (issue "GPU I", Performance).

Times the operations cuda_kernels_bench times, with the same kernel names and shape strings, the
way a PyTorch user writes them (autograd for the backwards, torch.optim.AdamW(fused=True), the
unfused F.cross_entropy(x @ W.T) for the LM head), with CUDA events: two warm-up calls, then the
mean of --reps calls (the LM head: max(1, reps // 5)). Products run in exact fp32 where the name
says f32 (TF32 off) and on bf16 tensors where it says bf16 (PyTorch writes bf16 outputs there;
ours writes fp32). The LM head's peak memory is torch.cuda.max_memory_allocated above what its
inputs hold.

Writes JSON (--out). With --ours FILE (cuda_kernels_bench's JSON) it also writes --compare FILE:
per kernel, ours and PyTorch's milliseconds, PyTorch / ours (> 1: ours is faster), ours against
the bandwidth floor, and for the LM head ours' workspace against PyTorch's peak; and prints it.
Exits 0 with {"skipped": reason} when torch or a GPU is missing.

usage: cuda_kernels_torch.py --out FILE [--ours FILE --compare FILE] [--reps N] [--tokens T]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ours")
    ap.add_argument("--compare")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=32768)
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        return skip(a.out, f"torch not importable: {e}")
    if not torch.cuda.is_available():
        return skip(a.out, "torch sees no GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    t, reps = a.tokens, a.reps
    c, f, h, d, v = 4096, 14336, 32, 128, 128256
    rows = []

    def timed(fn, n=reps):
        fn()
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / n

    def add(kernel, shape, ms, **extra):
        rows.append(dict(kernel=kernel, shape=shape, ms=ms, **extra))
        print(f"{kernel:22s} {shape:34s} {ms:9.3f} ms", flush=True)

    def randn(*shape, scale=1.0, dtype=torch.float32, grad=False):
        x = torch.randn(*shape, device=dev, dtype=torch.float32) * scale
        return x.to(dtype).requires_grad_(grad)

    # RMSNorm [T, C]: forward, and autograd's backward alone (graph kept).
    x, w, dout = randn(t, c, grad=True), randn(c, grad=True), randn(t, c)
    rms = getattr(F, "rms_norm", None)

    def rmsnorm(x, w):
        if rms is not None:
            return rms(x, (c,), w, 1e-5)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    s = f"T={t} C={c}"
    with torch.no_grad():
        add("rmsnorm_forward", s, timed(lambda: rmsnorm(x, w)))
    y = rmsnorm(x, w)
    add("rmsnorm_backward", s,
        timed(lambda: torch.autograd.grad(y, (x, w), dout, retain_graph=True)))
    del x, w, dout, y

    # SwiGLU over [T/4, F].
    tm = t // 4
    g, u, dout = randn(tm, f, scale=3.0, grad=True), randn(tm, f, grad=True), randn(tm, f)
    s = f"T={tm} F={f}"
    with torch.no_grad():
        add("swiglu_forward", s, timed(lambda: F.silu(g) * u))
    y = F.silu(g) * u
    add("swiglu_backward", s,
        timed(lambda: torch.autograd.grad(y, (g, u), dout, retain_graph=True)))
    del g, u, dout, y

    # RoPE [T, H, D], rotate_half with a [T, 1, D] cos/sin table built outside the timing.
    x = randn(t, h, d)
    pos = torch.arange(1000000, 1000000 + t, device=dev, dtype=torch.float64)
    inv = 500000.0 ** (-torch.arange(0, d, 2, device=dev, dtype=torch.float64) / d)
    ang = torch.outer(pos, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()[:, None, :]

    def rope(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    add("rope_forward", f"T={t} H={h} D={d}", timed(lambda: rope(x)))
    del x, cos, sin

    # AdamW over 2^28 parameters, fused.
    n = 1 << 28
    p = torch.nn.Parameter(randn(n))
    p.grad = randn(n, scale=1e-3)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    add("adamw_step", f"n={n}", timed(opt.step))
    del p, opt

    # Embedding: T tokens of a V x C table; backward: the dense weight gradient.
    tokens = (torch.arange(t, device=dev) * 7919) % v
    w, dout = randn(v, c, grad=True), randn(t, c)
    s = f"T={t} C={c} V={v}"
    with torch.no_grad():
        add("embedding_forward", s, timed(lambda: F.embedding(tokens, w)))
    y = F.embedding(tokens, w)
    add("embedding_backward", s,
        timed(lambda: torch.autograd.grad(y, (w,), dout, retain_graph=True)))
    del w, dout, y

    # GEMM 4096^3.
    m = 4096
    a32, b32 = randn(m, m), randn(m, m)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    s = f"M={m} N={m} K={m}"
    add("gemm_f32", s, timed(lambda: a32 @ b32))
    add("gemm_bf16", s, timed(lambda: a16 @ b16))
    del a32, b32, a16, b16

    # The MLP's up projection [T/4, C] x [F, C]^T.
    inp, w = randn(tm, c), randn(f, c, scale=0.02)
    inp16, w16 = inp.bfloat16(), w.bfloat16()
    s = f"T={tm} K={c} N={f}"
    add("linear_forward_f32", s, timed(lambda: F.linear(inp, w)))
    add("linear_forward_bf16", s, timed(lambda: F.linear(inp16, w16)))
    del inp, w, inp16, w16

    # Merging attention partials and the delta over [T, H, D].
    o, oo, dout = randn(t, h, d), randn(t, h, d), randn(t, h, d)
    la, lb = randn(t, h, scale=3.0), randn(t, h, scale=3.0)

    def merge():
        lse = torch.logaddexp(la, lb)
        return (torch.exp(la - lse)[..., None] * o + torch.exp(lb - lse)[..., None] * oo), lse

    s = f"T={t} H={h} D={d}"
    add("merge_partials", s, timed(merge))
    add("attention_delta", s, timed(lambda: (dout * o).sum(-1)))
    del o, oo, dout, la, lb

    # LM head + cross-entropy, unfused: F.cross_entropy(x @ W.T), forward and backward.
    ch = 2048
    for name, dtype, tl in (("lm_head_ce_bf16", torch.bfloat16, t),
                            ("lm_head_ce_f32", torch.float32, max(t // 8, 1))):
        x = randn(tl, ch, dtype=dtype, grad=True)
        w = randn(v, ch, scale=0.02, dtype=dtype, grad=True)
        labels = (torch.arange(tl, device=dev) * 7919 + 13) % v

        def step():
            loss = F.cross_entropy(x @ w.T, labels)
            loss.backward()
            x.grad = None
            w.grad = None

        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            ms = timed(step, max(1, reps // 5))
            peak = torch.cuda.max_memory_allocated() - base
            add(name, f"T={tl} C={ch} V={v}", ms, peak_bytes=peak)
        except torch.OutOfMemoryError as e:
            rows.append(dict(kernel=name, shape=f"T={tl} C={ch} V={v}", oom=str(e)[:200]))
            print(f"{name}: out of memory", flush=True)
        del x, w
        torch.cuda.empty_cache()

    out = dict(bench="cuda_kernels_torch", torch=torch.__version__,
               gpu=torch.cuda.get_device_name(0), reps=reps, results=rows)
    with open(a.out, "w") as fo:
        json.dump(out, fo, indent=1)
    if a.ours and a.compare:
        compare(a.ours, out, a.compare)
    return 0


def compare(ours_path, torch_out, path):
    with open(ours_path) as f:
        ours = json.load(f)
    theirs = {(r["kernel"], r["shape"]): r for r in torch_out["results"]}
    lines, rows = [], []
    lines.append(f"ours vs PyTorch {torch_out['torch']} on {torch_out['gpu']}")
    lines.append(f"{'kernel':22s} {'shape':28s} {'ours ms':>9s} {'torch ms':>9s} "
                 f"{'torch/ours':>10s} {'ours/floor':>10s}")
    for r in ours.get("results", []):
        tr = theirs.get((r["kernel"], r["shape"]), {})
        row = dict(kernel=r["kernel"], shape=r["shape"], ours_ms=r["ms"],
                   torch_ms=tr.get("ms"), x_floor=r.get("x_floor"))
        if tr.get("ms"):
            row["torch_over_ours"] = tr["ms"] / r["ms"]
        if "workspace_bytes" in r and tr.get("peak_bytes"):
            row["memory_ours_over_torch"] = r["workspace_bytes"] / tr["peak_bytes"]
        rows.append(row)

        def fmt(x, spec):
            return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))

        line = (f"{r['kernel']:22s} {r['shape']:28s} {fmt(r['ms'], '9.3f')} "
                f"{fmt(tr.get('ms'), '9.3f')} {fmt(row.get('torch_over_ours'), '10.2f')} "
                f"{fmt(r.get('x_floor'), '10.2f')}")
        if "memory_ours_over_torch" in row:
            line += f"  memory {100 * row['memory_ours_over_torch']:.1f}% of torch's"
        if tr.get("oom"):
            line += "  (torch: out of memory)"
        lines.append(line)
    with open(path, "w") as f:
        json.dump(dict(gpu=torch_out["gpu"], torch=torch_out["torch"], rows=rows), f, indent=1)
    print("\n".join(lines))
    with open(path.rsplit(".", 1)[0] + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")


def skip(out, reason):
    print(f"[cuda_kernels_torch] {reason} (nothing timed)")
    with open(out, "w") as f:
        json.dump(dict(skipped=reason), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
