#!/usr/bin/env bash
# Ranks sharing one GPU (issue "GPU III" item 2): `longseq attention --device cuda --world W` for
# W = 1, 2, 4 (threads of the local backend, each with its own stream; W = 1 is the trainer's
# whole-sequence kernel, W > 1 the executor on the GPU), forward + backward, bf16, causal, one
# untimed warm-up pass. Writes OUT/gpu_ranks.json: per (algo, world) the measured pass's seconds
# (stats.json "seconds") and its ratio to world 1 on the same GPU in the same call; the target
# of the issue is world 4 at most 1.15x world 1 (for the trainer; this is its attention).
#
#   bash bench/gpu_ranks_bench.sh build-gpu/cli/longseq OUT [N,Hq,Hkv,D]
set -euo pipefail
cli=$1
out=$2
shape=${3:-16384,32,8,128}
mkdir -p "$out/gpu_ranks"
rows=()
base_s=""
run() {  # algo world
  local dir="$out/gpu_ranks/$1_w$2"
  "$cli" attention --random "$shape" --seed 3 --mask causal --precision bf16 --balance zigzag \
    --backend local --device cuda --world "$2" --algo "$1" --warmup 1 --out "$dir" \
    > "$dir.txt" 2>&1 || { echo "[gpu_ranks] $1 world $2 failed (see $dir.txt)" >&2; return 1; }
  grep -o '"seconds": [0-9.e+-]*' "$dir/stats.json" | head -1 | awk '{print $2}'
}
rc=0
base_s=$(run ring 1) || rc=1
for spec in "ring 2" "ring 4" "burst 4" "usp:2 4" "ulysses 4"; do
  set -- $spec
  s=$(run "$1" "$2") || { rc=1; continue; }
  ratio=$(awk -v s="$s" -v b="${base_s:-0}" 'BEGIN { if (b > 0) printf "%.3f", s / b; else print "null" }')
  rows+=("{\"algo\": \"$1\", \"world\": $2, \"seconds\": $s, \"vs_world1\": $ratio}")
  echo "[gpu_ranks] $1 world $2: $s s ($ratio x world 1)"
done
{
  echo "{\"shape\": \"$shape\", \"precision\": \"bf16\", \"mask\": \"causal\","
  echo " \"gpu\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)\","
  echo " \"world1_seconds\": ${base_s:-null}, \"runs\": ["
  (IFS=,; echo "  ${rows[*]:-}")
  echo "]}"
} > "$out/gpu_ranks.json"
echo "[gpu_ranks] world 1 (ring, whole-sequence kernel): ${base_s:-failed} s; $out/gpu_ranks.json"
exit $rc
