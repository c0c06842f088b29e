#!/usr/bin/env bash
# The planner against published measurements (issue 44 item 3): for every row of the tables below,
# `longseq plan --json` restricted to the row's configuration (algorithm, checkpoint policy, loss,
# balance, dp x cp split) gives the predicted TGS, MFU and peak memory; the JSON holds them beside
# the published ones and their ratios, and the planner's own best configuration for the row's
# cluster and sequence. With OLD_LONGSEQ (the planner before a change; OLD_DATA its data/, whose
# hardware profiles it reads) the same rows are predicted by it too, for the rows it can express
# (every GPU a context rank), so that a change of the model shows as the rows' movement.
#   bench/plan_published.sh [OUT=docs/results/plan_published.json] [OLD_LONGSEQ]
# Rows:
#   BurstEngine (SC25) Table 2: 14B, 1M tokens, 32 x A800, the ablation (striped balance);
#   Table 4: 14B, 32K tokens per GPU, 2-8 nodes; Table 5: 14B, 32K tokens per GPU, one node, cp 1-8
#   with dp = 8 / cp (the paper offloads the optimizer there, which the planner does not model);
#   USP (Fang and Zhao 2024) abstract: LLaMA3-8B, 208K tokens, 2 x 8 A800, 47% MFU (its split is
#   not given: the planner's best USP configuration at dp 1 is compared).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/plan_published.json}
OLD=${2:-}
OLD_DATA=${OLD_DATA:-}
LONGSEQ=$PWD/build/cli/longseq
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/llama3-8b.json" <<'EOF'
{"name": "llama3-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
 "intermediate": 14336, "vocab": 128256}
EOF

# table|row|published TGS|published MFU %|published memory GB|flags
ROWS=(
  "BurstEngine Table 2|ring (no optimization), full, unfused|83.79|36.75|48.47|--model llama-14b --seq 1M --gpus 32 --balance striped --algo ring --checkpoint full --loss unfused --dp 1"
  "BurstEngine Table 2|+ backward comm. (burst), full, unfused|87.48|38.37|49.31|--model llama-14b --seq 1M --gpus 32 --balance striped --algo burst --checkpoint full --loss unfused --dp 1"
  "BurstEngine Table 2|+ topology-aware (double-ring:8), full, unfused|95.06|41.69|48.97|--model llama-14b --seq 1M --gpus 32 --balance striped --algo double-ring:8 --checkpoint full --loss unfused --dp 1"
  "BurstEngine Table 2|+ fused LM head, full|94.81|41.58|41.45|--model llama-14b --seq 1M --gpus 32 --balance striped --algo double-ring:8 --checkpoint full --loss fused --dp 1"
  "BurstEngine Table 2|+ seq-selective|108.82|47.72|45.93|--model llama-14b --seq 1M --gpus 32 --balance striped --algo double-ring:8 --checkpoint seq-selective --loss fused --dp 1"
  "BurstEngine Table 2|+ selective++|117.83|51.68|53.91|--model llama-14b --seq 1M --gpus 32 --balance striped --algo double-ring:8 --checkpoint selective++ --loss fused --dp 1"
  "BurstEngine Table 4|2 nodes, 512K|223.25|53.1|63.13|--model llama-14b --seq 512K --gpus 16 --balance striped --algo double-ring:8 --checkpoint selective++ --loss fused --dp 1"
  "BurstEngine Table 4|4 nodes, 1M|118.36|53.2|53.96|--model llama-14b --seq 1M --gpus 32 --balance striped --algo double-ring:8 --checkpoint selective++ --loss fused --dp 1"
  "BurstEngine Table 4|8 nodes, 2M|60.49|52.7|50.96|--model llama-14b --seq 2M --gpus 64 --balance striped --algo double-ring:8 --checkpoint selective++ --loss fused --dp 1"
  "BurstEngine Table 5|cp 1 (dp 8), 32K|1201.14|47.34|57.71|--model llama-14b --seq 32K --gpus 8 --balance striped --algo burst --checkpoint selective++ --loss fused --dp 8"
  "BurstEngine Table 5|cp 2 (dp 4), 64K|928.24|48.85|55.18|--model llama-14b --seq 64K --gpus 8 --balance striped --algo burst --checkpoint selective++ --loss fused --dp 4"
  "BurstEngine Table 5|cp 4 (dp 2), 128K|639.43|50.55|55.58|--model llama-14b --seq 128K --gpus 8 --balance striped --algo burst --checkpoint selective++ --loss fused --dp 2"
  "BurstEngine Table 5|cp 8 (dp 1), 256K|393.44|51.90|53.56|--model llama-14b --seq 256K --gpus 8 --balance striped --algo burst --checkpoint selective++ --loss fused --dp 1"
  "USP abstract|LLaMA3-8B, 208K, 16 x A800|null|47|null|--model $tmp/llama3-8b.json --seq 208K --gpus 16 --algo usp:2,usp:4,usp:8,usp:2:ring,usp:4:ring,usp:8:ring --dp 1"
)

# predict BIN DATA FLAGS: {"tgs", "mfu", "memory_gib", "config"} of the best feasible answer.
predict() {
  local bin=$1 data=$2 flags=$3
  # shellcheck disable=SC2086  # flags is a list
  if [ -n "$data" ]; then
    LONGSEQ_DATA_DIR=$data "$bin" plan $flags --gpus-per-node 8 --hardware a800 --json \
      >"$tmp/p.json" 2>/dev/null || true
  else
    "$bin" plan $flags --gpus-per-node 8 --hardware a800 --json >"$tmp/p.json" 2>/dev/null || true
  fi
  python3 - "$tmp/p.json" <<'PY'
import json, sys
try:
    c = next(c for c in json.load(open(sys.argv[1]))["configs"] if c["feasible"])
except Exception:
    print("null"); sys.exit()
print(json.dumps({"tgs": c["tokens_per_sec_per_gpu"], "mfu_pct": 100 * c["mfu"],
                  "memory_gib": c["peak_memory_bytes"] / 2**30,
                  "config": "dp %s x cp %s %s %s %s" % (c.get("dp", 1), c.get("cp", "all"),
                                                        c["algo"], c["checkpoint"], c["loss"])}))
PY
}

{
  echo "{\"what\": \"longseq plan (a800 profile) against published measurements: predicted / published\","
  echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores\","
  echo " \"rows\": ["
  first=1
  for row in "${ROWS[@]}"; do
    IFS='|' read -r table name tgs mfu mem flags <<<"$row"
    flags=${flags//\$tmp/$tmp}
    new=$(predict "$LONGSEQ" "" "$flags")
    # The planner's own pick for the row's cluster and sequence: the restrictions dropped.
    free=$(echo "$flags" | sed -E 's/--(algo|checkpoint|loss|dp) [^ ]+//g')
    best=$(predict "$LONGSEQ" "" "$free")
    old=null
    if [ -n "$OLD" ] && [[ "$flags" == *"--dp 1"* ]]; then
      old=$(predict "$OLD" "$OLD_DATA" "${flags/--dp 1/}")
    fi
    [ $first = 1 ] || echo ","
    first=0
    shown=${flags//$tmp\//}
    python3 - "$table" "$name" "$tgs" "$mfu" "$mem" "$shown" "$new" "$best" "$old" <<'PY'
import json, sys
table, name, tgs, mfu, mem, flags, new, best, old = sys.argv[1:]
pub = {"tgs": json.loads(tgs), "mfu_pct": json.loads(mfu), "memory_gb": json.loads(mem)}
new, best, old = json.loads(new), json.loads(best), json.loads(old)
def ratios(p):
    if p is None:
        return None
    r = {}
    if pub["tgs"]: r["tgs"] = p["tgs"] / pub["tgs"]
    if pub["mfu_pct"]: r["mfu"] = p["mfu_pct"] / pub["mfu_pct"]
    if pub["memory_gb"]: r["memory"] = p["memory_gib"] * 2**30 / 1e9 / pub["memory_gb"]
    return r
row = {"table": table, "row": name, "flags": flags,
       "published": pub, "predicted": new, "predicted_over_published": ratios(new),
       "planner_best": best, "before": old, "before_over_published": ratios(old),
       "moved": None if old is None or new is None else new["tgs"] / old["tgs"]}
print(json.dumps(row), end="")
PY
    echo "== $table: $name" >&2
  done
  echo "]}"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT" >&2
