#!/usr/bin/env bash
# The longest sequence LLaMA-1B trains at on one GPU, with and without activation offload (issue
# "GPU III", item 5; docs/gpu.md "Training on a GPU"). Not in scripts/gpu_check.sh: at 512K tokens
# one step is minutes, so it is a run of its own on a GPU machine.
#
# usage: bench/gpu_longest.sh LONGSEQ OUTDIR
# For each mode (kept: block inputs stay on the GPU; offload: `--offload`) it trains LLaMA-1B
# (16 layers, hidden 2048, 32/8 heads, intermediate 8192, vocab 128256, tied, bf16, --checkpoint
# full) for GPU_LONGEST_STEPS (2) steps at each length of GPU_LONGEST_SEQS (65536 ... 1048576),
# shortest first, and stops that mode at its first failure (out of device memory, or the
# GPU_LONGEST_TIMEOUT cap, 1200 s per run). Writes OUTDIR/longest/{mode}_{N}/metrics.json and
# .log, and OUTDIR/longest/longest.json: per run the exit status, whether it ran out of memory,
# the last step's seconds, tokens/s and MFU, the measured device peak (device_peak_mib), and per
# mode the longest N that trained.
#
# The token file: the repository's KJV text repeated to cover the longest N (byte-level tokens;
# the model's vocabulary is larger, which the trainer allows).
set -uo pipefail
LONGSEQ=${1:?usage: gpu_longest.sh LONGSEQ OUTDIR}
OUT=${2:?usage: gpu_longest.sh LONGSEQ OUTDIR}/longest
HERE=$(cd "$(dirname "$0")" && pwd)
SEQS=${GPU_LONGEST_SEQS:-"65536 131072 262144 524288 1048576"}
STEPS=${GPU_LONGEST_STEPS:-2}
CAP=${GPU_LONGEST_TIMEOUT:-1200}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUT"
DATA="$OUT/text.txt"
longest=0
for s in $SEQS; do [ "$s" -gt "$longest" ] && longest=$s; done
: >"$DATA"
while [ "$(stat -c %s "$DATA")" -le "$((longest + 1))" ]; do
  cat "$HERE/../data/kjv-genesis-exodus.txt" >>"$DATA"
done
LLAMA_1B=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --head-dim 64 --intermediate 8192
  --vocab 128256)

for mode in kept offload; do
  extra=()
  [ "$mode" = offload ] && extra=(--offload)
  for s in $SEQS; do
    name="${mode}_$s"
    echo "[gpu_longest] $name"
    rc=0
    timeout "$CAP" "$LONGSEQ" train --preset main --world 1 --device cuda --precision bf16 \
      --checkpoint full --steps "$STEPS" --seq "$s" --data "$DATA" --save-every -1 --quiet \
      --out "$OUT/$name" "${LLAMA_1B[@]}" "${extra[@]}" >"$OUT/$name.log" 2>&1 || rc=$?
    echo "$rc" >"$OUT/$name.rc"
    [ "$rc" -eq 0 ] || break
  done
done

"$PY" - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
runs, longest = [], {}
for f in sorted(os.listdir(out)):
    if not f.endswith(".rc"):
        continue
    name = f[:-3]
    mode, n = name.rsplit("_", 1)
    row = {"mode": mode, "seq": int(n), "rc": int(open(os.path.join(out, f)).read().strip() or -1)}
    log = open(os.path.join(out, name + ".log"), errors="replace").read()
    row["out_of_memory"] = "out of device memory" in log or "out of memory" in log
    try:
        steps = json.load(open(os.path.join(out, name, "metrics.json")))["steps"]
        last = steps[-1]
        for k in ("seconds", "tokens_per_sec", "mfu", "device_peak_mib", "peak_rss_mib"):
            row[k] = last.get(k)
    except Exception as e:  # no metrics: the run failed before its first step ended
        row["error"] = str(e)
        row["log_tail"] = log[-600:]
    runs.append(row)
    if row["rc"] == 0:
        longest[mode] = max(longest.get(mode, 0), row["seq"])
runs.sort(key=lambda r: (r["mode"], r["seq"]))
json.dump({"model": "LLaMA-1B (16 x 2048, 32/8 heads, 8192, vocab 128256, tied), bf16, "
                    "checkpoint full", "runs": runs, "longest": longest},
          open(os.path.join(out, "longest.json"), "w"), indent=1)
for r in runs:
    print(r["mode"], r["seq"], "rc", r["rc"], "oom" if r["out_of_memory"] else "",
          r.get("seconds"), "s", r.get("device_peak_mib"), "MiB")
print("longest:", longest)
EOF
