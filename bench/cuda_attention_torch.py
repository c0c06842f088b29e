#!/usr/bin/env python3
"""PyTorch's SDPA backends (flash = FlashAttention-2, cuDNN) on the shapes of
bench/cuda_attention_bench.cpp, on the same GPU in the same gpu_check run: the yardstick of issue
"GPU II". A baseline only, never part of the engine.

    python3 bench/cuda_attention_torch.py --out FILE [--quick]

Same FLOP convention (causal forward 4 N^2/2 D H, forward + backward 3.5x; full masks count N^2)
and the same sections: "table" (causal, 32K/128K tokens, 32/8 heads D=128 and 4/4 heads D=64)
and "sweep" (block lengths 1K-16K, batch (16K/L)^2, full and causal, 32/8 heads, D=128).
Grouped K/V: enable_gqa=True where the backend takes it, else K/V repeated to Hq heads (noted in
the row as "gqa": "repeat"). bf16 inputs. Writes {"skipped": reason} when torch or a GPU is
missing, and exits 0.
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    res = {"bench": "cuda_attention_torch"}

    def write():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # noqa: BLE001 - any import failure means no baseline
        res["skipped"] = "torch with SDPA backends not importable: %s" % e
        write()
        return 0
    if not torch.cuda.is_available():
        res["skipped"] = "torch sees no GPU"
        write()
        return 0
    res["torch"] = torch.__version__
    res["gpu"] = torch.cuda.get_device_name(0)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}

    def timed(fn, reps):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        n = max(1, min(reps, int(1.5 / max(first, 1e-6))))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n

    def run(section, b, n, hq, hkv, d, causal):
        pairs = n * (n + 1) / 2 if causal else n * n
        fwd_flops = 4.0 * pairs * d * hq * b
        dev = "cuda"
        q = torch.randn(b, hq, n, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, hkv, n, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, hkv, n, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(b, hq, n, d, device=dev, dtype=torch.bfloat16)
        for name, be in backends.items():
            row = {"backend": name, "mask": "causal" if causal else "full", "n": n, "batch": b,
                   "hq": hq, "hkv": hkv, "d": d}
            try:
                with sdpa_kernel([be]):
                    gqa = "native"

                    def attn():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                              enable_gqa=hq != hkv)
                    try:
                        attn()
                    except Exception:  # noqa: BLE001 - backend without GQA: repeat K/V
                        gqa = "repeat"
                        rep = hq // hkv

                        def attn():
                            return F.scaled_dot_product_attention(
                                q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                is_causal=causal)
                    with torch.no_grad():
                        f_ms = timed(attn, args.reps)

                    def step():
                        attn().backward(do)
                    fb_ms = timed(step, args.reps)
                row.update({"gqa": gqa, "fwd_ms": f_ms, "fwd_tflops": fwd_flops / f_ms / 1e9,
                            "fwd_bwd_ms": fb_ms, "fwd_bwd_tflops": 3.5 * fwd_flops / fb_ms / 1e9})
                print("%-6s %-6s %-6s N=%-7d b=%-4d heads %d/%d D=%-4d fwd %8.1f TFLOP/s "
                      "fwd+bwd %8.1f TFLOP/s" % (section, name, row["mask"], n, b, hq, hkv, d,
                                                 row["fwd_tflops"], row["fwd_bwd_tflops"]),
                      flush=True)
            except Exception as e:  # noqa: BLE001 - record why, go on with the others
                row["error"] = str(e)[:300]
                print("%-6s %-6s N=%d: %s" % (section, name, n, row["error"]), flush=True)
            res.setdefault(section, []).append(row)
            q.grad = k.grad = v.grad = None
            write()
        del q, k, v, do
        torch.cuda.empty_cache()

    table = [(32768, 32, 8, 128), (32768, 4, 4, 64)]
    if not args.quick:
        table += [(131072, 32, 8, 128), (131072, 4, 4, 64)]
    for n, hq, hkv, d in table:
        run("table", 1, n, hq, hkv, d, True)
    for n in (1024, 2048, 4096, 8192, 16384):
        if args.quick and n > 4096:
            break
        b = (16384 // n) ** 2
        run("sweep", b, n, 32, 8, 128, False)
        run("sweep", b, n, 32, 8, 128, True)
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
