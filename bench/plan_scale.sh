#!/usr/bin/env bash
# The planner at cluster scale (issue 31 item 2): `longseq plan --seq 16M` over a series of GPU
# counts, wall / user / system seconds and peak RSS of each run (GNU time), with an optional second
# binary (the planner before a change) run on the same cases and its --json ranking compared with
# this one's byte for byte.
#   bench/plan_scale.sh [OUT=docs/results/plan_scale.json] [OLD_LONGSEQ]
# Env: CASES="causal:64 ... window:4096:512" (mask:gpus; default below), OLD_MAX=256 (the largest
# GPU count the old binary is run at), LIMIT=900 (seconds per run; a run past it is recorded as
# timed out). The CPU line names the widest vector ISA the kernel reports (AVX512F or AVX2).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/plan_scale.json}
OLD=${2:-}
LONGSEQ=$PWD/build/cli/longseq
CASES=${CASES:-"window:4096:64 window:4096:128 window:4096:256 window:4096:512 window:4096:1024 causal:64 causal:128 causal:256 causal:512 causal:1024"}
OLD_MAX=${OLD_MAX:-256}
LIMIT=${LIMIT:-900}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run BIN TAG MASK GPUS: one JSON object on stdout.
run() {
  local bin=$1 tag=$2 mask=$3 gpus=$4 rc=0
  local load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" timeout "$LIMIT" "$bin" plan --seq 16M \
    --mask "$mask" --gpus "$gpus" --gpus-per-node 8 --json >"$tmp/$tag.json" 2>/dev/null || rc=$?
  # longseq plan exits 3 when no configuration fits (every one is still costed and printed).
  local timed_out=false
  [ "$rc" = 124 ] && timed_out=true
  read -r wall user sys rss < <(tail -1 "$tmp/time")
  printf '{"binary": "%s", "mask": "%s", "gpus": %s, "exit": %s, "timed_out": %s, "wall_s": %s, "user_s": %s, "sys_s": %s, "max_rss_kib": %s, "load_before": "%s", "configs": %s}' \
    "$tag" "$mask" "$gpus" "$rc" "$timed_out" "$wall" "$user" "$sys" "$rss" "$load" \
    "$(grep -c '"algo"' "$tmp/$tag.json" || true)"
}

{
  echo "{\"command\": \"longseq plan --seq 16M --mask MASK --gpus GPUS --gpus-per-node 8 --json\","
  isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -ow 'avx512f\|avx2' | sort | tail -1 | tr a-z A-Z)
  echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores${isa:+, $isa}\","
  echo " \"note\": \"the machine was shared with other jobs: wall seconds include their load (load_before); user_s is this process's CPU time over all its threads\","
  echo " \"runs\": ["
  first=1
  for c in $CASES; do
    mask=${c%:*}
    gpus=${c##*:}
    [ $first = 1 ] || echo ","
    first=0
    run "$LONGSEQ" new "$mask" "$gpus"
    if [ -n "$OLD" ] && [ "$gpus" -le "$OLD_MAX" ]; then
      echo ","
      run "$OLD" old "$mask" "$gpus"
      same=false
      cmp -s "$tmp/new.json" "$tmp/old.json" && same=true
      printf ', {"compare": "%s:%s", "rankings_identical": %s}' "$mask" "$gpus" "$same"
    fi
    echo "== $mask $gpus done" >&2
  done
  echo "]}"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT" >&2
