#!/usr/bin/env python3
"""Our attention kernels beside PyTorch's flash (FlashAttention-2) and cuDNN SDPA backends, row
by row, from the two JSON files of one gpu_check run (issue "GPU II"'s table):

    python3 bench/cuda_attention_compare.py OURS.json TORCH.json --out FILE.json [--text FILE.txt]

OURS.json is bench/cuda_attention_bench's, TORCH.json bench/cuda_attention_torch.py's; both use
the same FLOP convention, so TFLOP/s compare directly. Rows join on (section, mask, N, heads, D).
The window rows (ours only) are set beside our causal rate at the same N and heads: the issue
asks that a sliding window keep within 10% of it (tile skipping costs nothing). A plain join,
no torch needed.
"""
import argparse
import json
import sys


def key(section, r):
    return (section, r["mask"], r["n"], r["hq"], r["hkv"], r["d"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("torch")
    ap.add_argument("--out", required=True)
    ap.add_argument("--text")
    a = ap.parse_args()
    with open(a.ours) as f:
        ours = json.load(f)
    try:
        with open(a.torch) as f:
            theirs = json.load(f)
    except (OSError, ValueError):
        theirs = {}
    base = {}
    for section in ("table", "sweep"):
        for r in theirs.get(section, []):
            if "fwd_bwd_tflops" in r:
                base[key(section, r) + (r["backend"],)] = r
    rows = []
    causal = {}
    for section in ("table", "sweep", "window"):
        for r in ours.get(section, []):
            if "fwd_bwd_tflops" not in r:
                continue
            row = {"section": section, "mask": r["mask"], "n": r["n"], "hq": r["hq"],
                   "hkv": r["hkv"], "d": r["d"], "ours_fwd": r["fwd_tflops"],
                   "ours_fwd_bwd": r["fwd_bwd_tflops"]}
            for be in ("flash", "cudnn"):
                t = base.get(key(section, r) + (be,))
                if t:
                    row[be + "_fwd"] = t["fwd_tflops"]
                    row[be + "_fwd_bwd"] = t["fwd_bwd_tflops"]
            if "flash_fwd_bwd" in row:
                row["ours_over_flash"] = row["ours_fwd_bwd"] / row["flash_fwd_bwd"]
            if section == "table" and r["mask"] == "causal":
                causal[(r["n"], r["hq"], r["hkv"], r["d"])] = r["fwd_bwd_tflops"]
            rows.append(row)
    for row in rows:
        if row["section"] == "window":
            c = causal.get((row["n"], row["hq"], row["hkv"], row["d"]))
            if c:
                row["over_causal"] = row["ours_fwd_bwd"] / c
    doc = {"gpu": ours.get("gpu"), "torch": theirs.get("torch"),
           "unit": "TFLOP/s (bench/cuda_attention_bench.cpp's convention)", "rows": rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)

    def fmt(row, k):
        return "%7.1f" % row[k] if k in row else "      -"

    lines = ["ours vs PyTorch %s on %s, TFLOP/s fwd / fwd+bwd" % (doc["torch"], doc["gpu"]),
             "%-7s %-11s %7s %-9s %15s %15s %15s %8s" % ("section", "mask", "N", "heads D",
                                                          "ours", "flash (FA2)", "cuDNN",
                                                          "vs FA2")]
    for row in rows:
        ratio = row.get("ours_over_flash", row.get("over_causal"))
        tag = "" if ratio is None else ("%.2f" % ratio) + (" of causal" if
                                                            row["section"] == "window" else "")
        lines.append("%-7s %-11s %7d %2d/%-2d %-3d %s / %s %s / %s %s / %s %s" % (
            row["section"], row["mask"], row["n"], row["hq"], row["hkv"], row["d"],
            fmt(row, "ours_fwd"), fmt(row, "ours_fwd_bwd"), fmt(row, "flash_fwd"),
            fmt(row, "flash_fwd_bwd"), fmt(row, "cudnn_fwd"), fmt(row, "cudnn_fwd_bwd"), tag))
    text = "\n".join(lines) + "\n"
    if a.text:
        with open(a.text, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
