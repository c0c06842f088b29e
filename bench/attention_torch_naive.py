#!/usr/bin/python3
"""PyTorch naive attention, the baseline of attention_kernel_bench (one case per process).

Naive = what a framework user writes: scores = q k^T * scale, masked_fill for causal, softmax,
p v; the backward is autograd's. Layout [H, T, D] (its best case: no transposes needed).
Prints one JSON object: best forward and forward+backward seconds (wall, and process CPU time
divided by the thread count), and the peak resident memory
above the baseline taken after the inputs exist (ru_maxrss of this process, so one case per
process). Run with Debian's /usr/bin/python3 (torch 1.13, CPU).

usage: attention_torch_naive.py --t T --h H --d D --mask full|causal --dtype f32|bf16
                                [--threads 2] [--reps 2]
"""
import argparse
import json
import resource
import time

import torch


def rss_bytes():
    # Current resident set from /proc (ru_maxrss is the peak).
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def naive(q, k, v, causal, scale):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool).triu_(1)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--t", type=int, required=True)
    ap.add_argument("--h", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--mask", choices=["full", "causal"], required=True)
    ap.add_argument("--dtype", choices=["f32", "bf16"], required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.float32 if a.dtype == "f32" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(a.h, a.t, a.d, generator=g).to(dt) for _ in range(4))
    causal = a.mask == "causal"
    scale = a.d ** -0.5
    base = rss_bytes()

    # Wall seconds, and process CPU seconds / threads (what an idle machine would take).
    fwd = fwd_cpu = float("inf")
    with torch.no_grad():
        for _ in range(a.reps):
            t0, c0 = time.perf_counter(), time.process_time()
            o = naive(q, k, v, causal, scale)
            fwd = min(fwd, time.perf_counter() - t0)
            fwd_cpu = min(fwd_cpu, (time.process_time() - c0) / a.threads)
            del o
    fwd_peak = peak_bytes() - base

    fb = fb_cpu = float("inf")
    for _ in range(a.reps):
        qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
        t0, c0 = time.perf_counter(), time.process_time()
        o = naive(qq, kk, vv, causal, scale)
        o.backward(do)
        fb = min(fb, time.perf_counter() - t0)
        fb_cpu = min(fb_cpu, (time.process_time() - c0) / a.threads)
        del o, qq, kk, vv
    print(json.dumps({
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "fwd_s": fwd,
        "fwdbwd_s": fb,
        "fwd_cpu_s": fwd_cpu,
        "fwdbwd_cpu_s": fb_cpu,
        "fwd_peak_extra_bytes": fwd_peak,
        "fwdbwd_peak_extra_bytes": peak_bytes() - base,
    }))


if __name__ == "__main__":
    main()
