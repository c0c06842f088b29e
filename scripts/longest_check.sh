#!/usr/bin/env bash
# The longest sequence this machine trains per checkpoint policy: predicted by the planner
# (`longseq plan --train PRESET --longest --memory-limit LIMIT`), then measured by bisection on
# real runs (/usr/bin/time -v maximum resident set size <= LIMIT) of a cheap model, one step each.
#   usage: scripts/longest_check.sh [OUT.json]      (default docs/results/longest_n.json)
#   env:   PRESET (longest-probe: 2 layers, hidden 64, window 512, 4 ranks), LIMIT_GIB (3),
#          POLICIES ("none full selective++ seq-selective"), LONGSEQ (build/cli/longseq),
#          DATA (build/kjv-books.tok: scripts/kjv_books.sh makes it; must hold >= N tokens)
# The measured search starts at the prediction and steps by 12.5 % until it brackets the limit,
# then bisects down to the planner's granularity (8192 tokens at 4 ranks) or 2 % of N. A limit
# below the machine's memory keeps the runs cheap and leaves room for other work; the planner's
# prediction for the whole machine is printed beside it. A documented command, not a CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/longest_n.json}
PRESET=${PRESET:-longest-probe}
LIMIT_GIB=${LIMIT_GIB:-3}
POLICIES=${POLICIES:-none full selective++ seq-selective}
LONGSEQ=${LONGSEQ:-build/cli/longseq}
DATA=${DATA:-build/kjv-books.tok}
[ -x "$LONGSEQ" ] || { echo "[longest_check] no $LONGSEQ: build first" >&2; exit 1; }
[ -f "$DATA" ] || { echo "[longest_check] no $DATA: run scripts/kjv_books.sh" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "[longest_check] needs /usr/bin/time (Debian package time)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
limit=$(awk -v g="$LIMIT_GIB" 'BEGIN { printf "%.0f", g * 1073741824 }')
pyget() { /usr/bin/python3 -c "import json,sys; j=json.load(open('$1')); print($2)"; }
"$LONGSEQ" plan --train "$PRESET" --longest --memory-limit "$LIMIT_GIB" --json >"$tmp/pred.json"
"$LONGSEQ" plan --train "$PRESET" --longest --json >"$tmp/pred_all.json"
step=$(pyget "$tmp/pred.json" "j['longest_step_tokens']")
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
# measure N POLICY -> prints the peak RSS in bytes (0 when the run failed); each run is one line
# of $tmp/runs (measure runs in a subshell: an array would not survive it)
: >"$tmp/runs"
measure() {
  local n=$1 p=$2 kib load
  load=$(cut -d' ' -f1 /proc/loadavg)
  if /usr/bin/time -v -o "$tmp/time" "$LONGSEQ" train --preset "$PRESET" --checkpoint "$p" \
      --seq "$n" --steps 1 --data "$DATA" --quiet >"$tmp/log" 2>&1; then
    kib=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$tmp/time")
  else
    echo "[longest_check] $p N=$n failed: $(tail -1 "$tmp/log")" >&2
    kib=0
  fi
  printf '{"checkpoint": "%s", "seq": %s, "measured_max_rss_bytes": %s, "load_average_1min_at_start": %s}\n' \
    "$p" "$n" "$((kib * 1024))" "$load" >>"$tmp/runs"
  echo "[longest_check] $p N=$n: $((kib / 1024)) MiB (limit $((limit / 1048576)) MiB)" >&2
  echo $((kib * 1024))
}
rows=()
for p in $POLICIES; do
  pred_n=$(pyget "$tmp/pred.json" "[x['seq'] for x in j['longest'] if x['checkpoint']=='$p'][0]")
  pred_b=$(pyget "$tmp/pred.json" "[x['predicted_bytes'] for x in j['longest'] if x['checkpoint']=='$p'][0]")
  pred_all=$(pyget "$tmp/pred_all.json" "[x['seq'] for x in j['longest'] if x['checkpoint']=='$p'][0]")
  round() { awk -v x="$1" -v s="$step" 'BEGIN { n = int(x / s + 0.5); if (n < 1) n = 1; printf "%d", n * s }'; }
  lo=0 hi=0 n=$pred_n
  # Bracket: lo fits, hi does not.
  for _ in 1 2 3 4 5 6; do
    rss=$(measure "$n" "$p")
    if [ "$rss" -gt 0 ] && [ "$rss" -le "$limit" ]; then
      lo=$n; [ "$hi" -gt 0 ] && break; n=$(round "$(awk -v n="$n" 'BEGIN { print n * 1.125 }')")
    else
      hi=$n; [ "$lo" -gt 0 ] && break; n=$(round "$(awk -v n="$n" 'BEGIN { print n / 1.125 }')")
    fi
  done
  # Bisect to the granularity (or 2 %).
  while [ "$lo" -gt 0 ] && [ "$hi" -gt 0 ] && [ $((hi - lo)) -gt "$step" ] &&
        [ $((hi - lo)) -gt $((lo / 50)) ]; do
    mid=$(round $(((lo + hi) / 2)))
    { [ "$mid" -le "$lo" ] || [ "$mid" -ge "$hi" ]; } && break
    rss=$(measure "$mid" "$p")
    if [ "$rss" -gt 0 ] && [ "$rss" -le "$limit" ]; then lo=$mid; else hi=$mid; fi
  done
  ratio=$(awk -v a="$lo" -v b="$pred_n" 'BEGIN { printf "%.4f", (a > 0 ? b / a : 0) }')
  printf '[longest_check] %-14s predicted N %8d  measured N %8d (first failing %d)  predicted/measured %s; whole machine predicted N %d\n' \
    "$p" "$pred_n" "$lo" "$hi" "$ratio" "$pred_all"
  rows+=("$(printf '{"checkpoint": "%s", "predicted_longest_seq": %s, "predicted_bytes_at_it": %s, "measured_longest_seq": %s, "measured_first_failing_seq": %s, "predicted_over_measured": %s, "predicted_longest_seq_whole_machine": %s}' \
    "$p" "$pred_n" "$pred_b" "$lo" "$hi" "$ratio" "$pred_all")")
done
mkdir -p "$(dirname "$OUT")"
join() { local i; for i in "${!rows[@]}"; do printf '  %s%s\n' "${rows[$i]}" "$([ "$i" -lt $((${#rows[@]} - 1)) ] && echo ,)"; done; }
{
  printf '{\n "what": "longest N per checkpoint policy within a memory limit: longseq plan --train --longest (predicted) vs bisection on one-step runs (measured max RSS)",\n'
  printf ' "command": "LIMIT_GIB=%s PRESET=%s scripts/longest_check.sh %s",\n' "$LIMIT_GIB" "$PRESET" "$OUT"
  printf ' "preset": "%s", "limit_bytes": %s, "granularity_tokens": %s, "data": "%s",\n' "$PRESET" "$limit" "$step" "$DATA"
  printf ' "whole_machine_limit_bytes": %s,\n' "$(pyget "$tmp/pred_all.json" "j['limit_bytes']")"
  printf ' "cpu": "%s", "cores": %s,\n "policies": [\n' "$cpu" "$(nproc)"
  join
  printf ' ],\n "runs": [\n'
  mapfile -t rows <"$tmp/runs"
  join
  printf ' ]\n}\n'
} >"$OUT"
echo "[longest_check] wrote $OUT"
