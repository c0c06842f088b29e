#!/usr/bin/env bash
# The memory model against measurement: for each checkpoint policy, `longseq plan --train` predicts
# the peak RSS of a training run and the run is measured (/usr/bin/time -v maximum resident set
# size, the kernel's VmHWM), then both go into a JSON file with the ratio.
#   usage: scripts/memory_check.sh [OUT.json] [-- extra train flags]
#   env:   PRESET (main), POLICIES ("none full selective++ seq-selective"), STEPS (1), MASK (the
#          preset's), LONGSEQ (build/cli/longseq)
# A documented command, not a CTest: it trains (minutes per policy on 2 cores). One step is
# enough: the peak is reached inside the first step (every step holds the same tensors) or at the
# checkpoint written after it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/memory_check.json}
shift || true
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
PRESET=${PRESET:-main}
POLICIES=${POLICIES:-none full selective++ seq-selective}
STEPS=${STEPS:-1}
LONGSEQ=${LONGSEQ:-build/cli/longseq}
[ -x "$LONGSEQ" ] || { echo "[memory_check] no $LONGSEQ: build first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "[memory_check] needs /usr/bin/time (Debian package time)" >&2; exit 1; }
mask_args=()
[ -n "${MASK:-}" ] && mask_args=(--mask "$MASK")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
rows=()
for p in $POLICIES; do
  pred=$("$LONGSEQ" plan --train "$PRESET" --checkpoint "$p" "${mask_args[@]}" --json \
         | sed -n 's/.*"predicted_bytes": \([0-9.e+]*\).*/\1/p' | head -1)
  load=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s)
  /usr/bin/time -v -o "$tmp/time_$p" "$LONGSEQ" train --preset "$PRESET" --checkpoint "$p" \
    --steps "$STEPS" --out "$tmp/run_$p" "${mask_args[@]}" "${EXTRA[@]}" >"$tmp/log_$p" 2>&1 ||
    { echo "[memory_check] $p: train failed:" >&2; tail -5 "$tmp/log_$p" >&2; exit 1; }
  secs=$(( $(date +%s) - start ))
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$tmp/time_$p")
  step_s=$(sed -n 's/.*"seconds": \([0-9.e+-]*\).*/\1/p' "$tmp/run_$p/metrics.json" | tail -1)
  ratio=$(awk -v a="$pred" -v b="$kib" 'BEGIN { printf "%.4f", a / (b * 1024) }')
  printf '[memory_check] %-14s predicted %8.1f MiB  measured %8.1f MiB  predicted/measured %s  (%ss, load %s)\n' \
    "$p" "$(awk -v a="$pred" 'BEGIN { print a / 1048576 }')" "$(awk -v b="$kib" 'BEGIN { print b / 1024 }')" \
    "$ratio" "$secs" "$load"
  rows+=("$(printf '{"checkpoint": "%s", "predicted_bytes": %s, "measured_max_rss_bytes": %s, "predicted_over_measured": %s, "step_seconds": %s, "wall_seconds": %s, "load_average_1min_at_start": %s}' \
    "$p" "$pred" "$((kib * 1024))" "$ratio" "${step_s:-null}" "$secs" "$load")")
done
mkdir -p "$(dirname "$OUT")"
{
  printf '{\n "what": "peak RSS of longseq train: longseq plan --train (plan/memory.hpp host_trainer_memory) vs /usr/bin/time -v maximum resident set size",\n'
  printf ' "command": "scripts/memory_check.sh %s",\n' "$OUT"
  printf ' "preset": "%s", "steps": %s, "mask": "%s", "extra_flags": "%s",\n' "$PRESET" "$STEPS" "${MASK:-preset}" "${EXTRA[*]:-}"
  printf ' "cpu": "%s", "cores": %s,\n "runs": [\n' "$cpu" "$(nproc)"
  for i in "${!rows[@]}"; do printf '  %s%s\n' "${rows[$i]}" "$([ "$i" -lt $((${#rows[@]} - 1)) ] && echo ,)"; done
  printf ' ]\n}\n'
} >"$OUT"
echo "[memory_check] wrote $OUT"
