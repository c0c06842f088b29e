#!/usr/bin/env bash
# A/B of two longseq builds on the 2-host x 2-rank cluster (scripts/cluster.sh, inter link shaped,
# intra not): the same `longseq attention` runs alternate between OLD and NEW, REPS times, so the
# shared machine's load swings hit both alike. Prints one line per run and writes OUT (JSON).
#   bench/cluster_attention_ab.sh OLD_LONGSEQ NEW_LONGSEQ [OUT=/tmp/cluster_attention_ab.json]
# Env: RATE=1gbit, N=32768, SHAPE=4,4,64, ALGOS="double-ring usp:2 ring", REPS=2.
# Build OLD from another commit and copy its cli/longseq aside first (docs/cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1") NEW=$(realpath "$2")
OUT=${3:-/tmp/cluster_attention_ab.json}
RATE=${RATE:-1gbit} N=${N:-32768} SHAPE=${SHAPE:-4,4,64}
ALGOS=${ALGOS:-"double-ring usp:2 ring"} REPS=${REPS:-2}
export LONGSEQ_CLUSTER=${LONGSEQ_CLUSTER:-abtest}
WORK=$(mktemp -d)
bash scripts/cluster.sh up 2 --rate "$RATE" >/dev/null
trap 'bash scripts/cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
runs=()
for rep in $(seq 1 "$REPS"); do
  for algo in $ALGOS; do
    for side in old new; do
      bin=$OLD
      [ "$side" = new ] && bin=$NEW
      line=$(bash scripts/cluster.sh run -- mpirun -np 4 "$bin" attention --random "$N,$SHAPE" \
        --mask causal --algo "$algo" 2>&1 | grep -m1 'forward + backward')
      t=$(echo "$line" | grep -o ': [0-9.]* s (forward' | grep -o '[0-9.]*')
      load=$(cut -d' ' -f1 /proc/loadavg)
      echo "$rep $algo $side $t s (load $load)"
      runs+=("{\"rep\": $rep, \"algo\": \"$algo\", \"build\": \"$side\", \"fwd_bwd_s\": $t, \"loadavg_1min_after\": $load}")
    done
  done
done
{
  echo "{\"bench\": \"cluster_attention_ab\", \"rate\": \"$RATE\", \"n\": $N, \"shape\": \"$SHAPE\","
  echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p')\", \"old\": \"$OLD\", \"new\": \"$NEW\","
  echo " \"runs\": ["
  (IFS=$'\n'; echo "${runs[*]}" | sed '$!s/$/,/')
  echo "]}"
} >"$OUT"
echo "wrote $OUT"
