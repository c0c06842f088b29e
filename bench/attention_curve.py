#!/usr/bin/env python3
"""The planner's attention block curve (plan/hardware.hpp BlockCurve) from a cuda_attention_bench
run: efficiency = achieved rate / peak on the sweep's full L x L blocks, forward from the forward
rate, backward from (forward + backward) - forward.

    python3 bench/attention_curve.py BENCH.json --peak FLOPS [--source TEXT] [--profile FILE]

Prints the "attention_curve" object; with --profile, writes it into that hardware profile
(data/hardware/*.json), keeping the file's other fields. Full blocks: most ring steps are
off-diagonal (full) blocks, and the planner counts visible pairs, so a causal diagonal block's
partial tiles are charged at the full blocks' rate.
"""
import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--peak", type=float, required=True, help="dense bf16 peak FLOP/s of the GPU")
    ap.add_argument("--source", default="")
    ap.add_argument("--profile")
    a = ap.parse_args()
    with open(a.bench) as f:
        b = json.load(f)
    pts = []
    for r in b.get("sweep", []):
        if r.get("mask") != "full" or "fwd_bwd_ms" not in r:
            continue
        fwd_flops = r["fwd_tflops"] * 1e12 * r["fwd_ms"] * 1e-3  # the bench's count
        bwd_s = (r["fwd_bwd_ms"] - r["fwd_ms"]) * 1e-3
        if bwd_s <= 0:
            sys.exit("bench row N=%d: fwd+bwd %.3f ms not above fwd %.3f ms" %
                     (r["n"], r["fwd_bwd_ms"], r["fwd_ms"]))
        pts.append({"tokens": r["n"], "fwd": round(r["fwd_tflops"] * 1e12 / a.peak, 4),
                    "bwd": round(2.5 * fwd_flops / bwd_s / a.peak, 4)})
    if not pts:
        sys.exit("no full-block sweep rows in %s" % a.bench)
    pts.sort(key=lambda p: p["tokens"])
    src = a.source or "bench/cuda_attention_bench sweep (full L x L blocks, %d/%d heads, D=%d) on %s" % (
        b["sweep"][0]["hq"], b["sweep"][0]["hkv"], b["sweep"][0]["d"], b.get("gpu", "?"))
    curve = {"source": src, "points": pts}
    if a.profile:
        with open(a.profile) as f:
            prof = json.load(f)
        prof["attention_curve"] = curve
        with open(a.profile, "w") as f:
            json.dump(prof, f, indent=2)
            f.write("\n")
    json.dump(curve, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
