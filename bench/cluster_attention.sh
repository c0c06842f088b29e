#!/usr/bin/env bash
# Distributed attention on a 2-host x 2-rank cluster of network namespaces (scripts/cluster.sh)
# with the inter-host link shaped (default 1 Gbit/s, tbf) and intra-host traffic unshaped (TCP
# over loopback): forward + backward of every algorithm at N = 16K and 32K, each run's stats.json
# kept under OUT/<algo>_<N>/, then bench/cluster_predict_bench puts the planner's prediction beside
# each measurement (docs/cluster.md).
#   bench/cluster_attention.sh [OUT=/tmp/cluster_attention] [RATE=1gbit]
# Env: NS="16384 32768", ALGOS="ring burst double-ring startrail:2 usp:2", SHAPE=4,4,64.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/cluster_attention}
RATE=${2:-1gbit}
NS=${NS:-"16384 32768"}
ALGOS=${ALGOS:-"ring burst double-ring startrail:2 usp:2"}
SHAPE=${SHAPE:-4,4,64}
LONGSEQ=$PWD/build/cli/longseq
export LONGSEQ_CLUSTER=${LONGSEQ_CLUSTER:-bench}
mkdir -p "$OUT"
bash scripts/cluster.sh up 2 --rate "$RATE"
trap 'bash scripts/cluster.sh down >/dev/null 2>&1' EXIT
echo "{\"rate\": \"$RATE\", \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p')\", \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >"$OUT/cluster.json"
# The links as MPI sees them: ping-pong ranks 0-1 on one host (intra) and across hosts (inter).
bash scripts/cluster.sh run -- mpirun -np 2 --map-by slot "$PWD/build/bench/comm_bench" --ops pingpong --max-bytes 16777216 --out "$OUT/pingpong_intra.json" 2>/dev/null
bash scripts/cluster.sh run -- mpirun -np 2 --map-by node "$PWD/build/bench/comm_bench" --ops pingpong --max-bytes 16777216 --out "$OUT/pingpong_inter.json" 2>/dev/null
for n in $NS; do
  for algo in $ALGOS; do
    dir="$OUT/${algo//:/_}_$n"
    echo "== $algo N=$n"
    bash scripts/cluster.sh run -- mpirun -np 4 "$LONGSEQ" attention --random "$n,$SHAPE" --mask causal \
      --algo "$algo" --out "$dir" | head -1
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PWD/build/bench/cluster_predict_bench" --dir "$OUT" --out "$OUT/cluster_attention.json"
