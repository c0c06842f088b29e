#!/usr/bin/env bash
# `longseq train --device cuda` beside plain PyTorch on the same GPU, in one call (issue
# "GPU III"; scripts/gpu_check.sh runs it): the main job's model at 32K tokens on one rank, and
# LLaMA-1B (16 layers, hidden 2048, 32/8 heads, intermediate 8192, vocab 128256, tied, bf16) at
# 8K and 32K tokens. Ours: bf16, --checkpoint full for the 1B (the peer's per-block activation
# checkpointing), seq-selective for the main model; PyTorch: bench/torch_llama_gpu.py with the
# same shapes (SDPA, activation checkpointing, chunked loss, fused AdamW).
#
# usage: bench/gpu_train_bench.sh LONGSEQ OUTDIR [PYTHON]
# Writes OUTDIR/gpu_train/{NAME}_ours/metrics.json, {NAME}_torch.json and gpu_train.json: per
# configuration both step times (ours: the best step after the first), tokens/s, MFU and peak
# memory (ours: the tensors the GPU held, kernels::cuda::memory_stats; PyTorch: its allocator's
# max_memory_allocated), and their ratio; beside ours, the planner's prediction of that peak
# (`longseq plan --train PRESET --device cuda`, plan/memory.hpp device_trainer_memory; the
# presets are written to OUTDIR/gpu_train/*_preset.json) and predicted / measured. GPU_TRAIN_SEQS="8192 32768" and GPU_TRAIN_STEPS=3 set
# the 1B lengths and the steps per run; each run is capped at GPU_TRAIN_TIMEOUT seconds (300).
set -uo pipefail
LONGSEQ=${1:?usage: gpu_train_bench.sh LONGSEQ OUTDIR [PYTHON]}
OUT=${2:?usage: gpu_train_bench.sh LONGSEQ OUTDIR [PYTHON]}/gpu_train
PY=${3:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${GPU_TRAIN_STEPS:-3}
SEQS=${GPU_TRAIN_SEQS:-"8192 32768"}
CAP=${GPU_TRAIN_TIMEOUT:-300}
mkdir -p "$OUT"
LLAMA_1B=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --head-dim 64 --intermediate 8192
  --vocab 128256)
TORCH_1B=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --head-dim 64 --intermediate 8192
  --vocab 128256)
MAIN=(--layers 4 --hidden 256 --heads 4 --kv-heads 4 --head-dim 64 --intermediate 688
  --vocab 257)

# The runs' shapes as presets, for the planner (plan --train takes a preset, not model flags).
cat >"$OUT/main_preset.json" <<'JSON'
{"inherits": "main", "world": 1, "precision": "bf16"}
JSON
cat >"$OUT/llama1b_preset.json" <<'JSON'
{"inherits": "main", "world": 1, "precision": "bf16", "layers": 16,
 "hidden": 2048, "heads": 32, "kv_heads": 8, "head_dim": 64, "intermediate": 8192,
 "vocab": 128256}
JSON
plan_ours() {  # NAME PRESET SEQ CHECKPOINT: the planner's prediction of the run's device peak
  "$LONGSEQ" plan --train "$OUT/$2_preset.json" --device cuda --seq "$3" --checkpoint "$4" \
    --json >"$OUT/$1_plan.json" 2>"$OUT/$1_plan.log" || echo "[gpu_train] plan: $1 failed (rc $?)"
}
run_ours() {  # NAME ARGS...
  local name=$1
  shift
  echo "[gpu_train] ours: $name"
  timeout "$CAP" "$LONGSEQ" train --preset main --world 1 --device cuda --precision bf16 \
    --steps "$STEPS" --quiet --save-every -1 --out "$OUT/${name}_ours" "$@" \
    >"$OUT/${name}_ours.log" 2>&1 || echo "[gpu_train] ours: $name failed (rc $?)" | tee -a "$OUT/${name}_ours.log"
}
run_torch() {  # NAME ARGS...
  local name=$1
  shift
  echo "[gpu_train] torch: $name"
  timeout "$CAP" "$PY" "$HERE/torch_llama_gpu.py" --reps 2 "$@" >"$OUT/${name}_torch.json" \
    2>"$OUT/${name}_torch.log" || echo "[gpu_train] torch: $name failed (rc $?)" | tee -a "$OUT/${name}_torch.log"
}

run_ours main_32k --seq 32768
plan_ours main_32k main 32768 seq-selective
run_torch main_32k --seq 32768 "${MAIN[@]}" --no-checkpoint --loss-chunk 32768
# World 4 sharing the GPU (threads, each with the whole model; docs/gpu.md "Ranks sharing a
# GPU") beside main_32k at world 1: the issue's "world 4 on one GPU at most 15% slower".
echo "[gpu_train] ours: main_32k_w4"
timeout "$CAP" "$LONGSEQ" train --preset main --world 4 --algo burst --device cuda --precision bf16 \
  --steps "$STEPS" --quiet --save-every -1 --out "$OUT/main_32k_w4_ours" --seq 32768 \
  >"$OUT/main_32k_w4_ours.log" 2>&1 || echo "[gpu_train] ours: main_32k_w4 failed (rc $?)" | tee -a "$OUT/main_32k_w4_ours.log"
for s in $SEQS; do
  run_ours "llama1b_$s" --seq "$s" --checkpoint full "${LLAMA_1B[@]}"
  plan_ours "llama1b_$s" llama1b "$s" full
  run_torch "llama1b_$s" --seq "$s" "${TORCH_1B[@]}"
done

"$PY" - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = []
for f in sorted(os.listdir(out)):
    if not f.endswith("_torch.json"):
        continue
    name = f[:-len("_torch.json")]
    row = {"name": name}
    try:
        row["torch"] = json.load(open(os.path.join(out, f)))
    except Exception as e:  # a failed or killed run
        row["torch"] = {"error": str(e)}
    m = os.path.join(out, name + "_ours", "metrics.json")
    try:
        steps = json.load(open(m))["steps"]
        best = min(steps[1:] or steps, key=lambda s: s["seconds"])
        row["ours"] = {k: best[k] for k in ("seconds", "tokens_per_sec", "mfu", "loss",
                                            "device_peak_mib", "peak_rss_mib")}
        row["ours"]["steps"] = [s["seconds"] for s in steps]
        cfg = json.load(open(m))["config"]
        row["ours"]["gpu"] = cfg.get("gpu", "")
        row["ours"]["peak_gflops_measured"] = cfg.get("peak_gflops_measured")
    except Exception as e:
        row["ours"] = {"error": str(e)}
    try:  # the planner's predicted device peak (plan --train --device cuda)
        pj = json.load(open(os.path.join(out, name + "_plan.json")))
        pred = pj["policies"][0]["device"]["predicted_bytes"] / 2**20
        row["planned_device_mib"] = pred
        if row["ours"].get("device_peak_mib"):
            row["planned_over_measured"] = pred / row["ours"]["device_peak_mib"]
    except Exception as e:
        row["planned_device_mib"] = {"error": str(e)}
    t = row["torch"].get("step_seconds")
    o = row["ours"].get("seconds")
    if t and o:
        row["ours_over_torch_seconds"] = o / t
    rows.append(row)
def best_step(name):
    steps = json.load(open(os.path.join(out, name + "_ours", "metrics.json")))["steps"]
    return min(steps[1:] or steps, key=lambda s: s["seconds"])
world4 = {}
try:  # world 4 sharing the GPU against world 1, same model and length
    w1, w4 = best_step("main_32k"), best_step("main_32k_w4")
    world4 = {"world1_seconds": w1["seconds"], "world4_seconds": w4["seconds"],
              "world4_over_world1": w4["seconds"] / w1["seconds"],
              "world1_loss": w1["loss"], "world4_loss": w4["loss"],
              "world4_device_peak_mib": w4.get("device_peak_mib")}
except Exception as e:
    world4 = {"error": str(e)}
json.dump({"runs": rows, "main_32k_world4": world4},
          open(os.path.join(out, "gpu_train.json"), "w"), indent=1)
print("[gpu_train] main_32k world 4 on the one GPU: %s" % json.dumps(world4))
for r in rows:
    o, t = r["ours"], r["torch"]
    print("[gpu_train] %-16s ours %s s (%s MiB, planned %s)  torch %s s (%s GiB)  ratio %s" % (
        r["name"], o.get("seconds", "-"), o.get("device_peak_mib", "-"),
        "%.0f MiB = %.3f" % (r["planned_device_mib"], r["planned_over_measured"])
        if "planned_over_measured" in r else "-",
        t.get("step_seconds", "oom" if t.get("oom") else "-"), t.get("peak_allocated_gib", "-"),
        "%.2f" % r["ours_over_torch_seconds"] if "ours_over_torch_seconds" in r else "-"))
EOF
