#!/usr/bin/env bash
# examples/torch_cp_llama.py's step at -np 1 and -np 4: the step time split into longseq's
# attention (the engine's compute and wait seconds of every layer's forward and backward, as
# ContextParallel.stats() reports them) and the rest of the PyTorch model (embedding, norms,
# projections, RoPE, SwiGLU, the LM head, autograd, the gradient all-reduce and AdamW).
#   PYTHONPATH=build/python bash bench/python_example.sh OUT.json [STEPS] [SEQ]
# Writes OUT.json: per world, the mean over the steps after the first of step_s, attention_s and
# their ratio, and each run's whole log.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1 steps=${2:-8} seq=${3:-8192}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for np in 1 4; do
  mpirun -np "$np" /usr/bin/python3 examples/torch_cp_llama.py --steps "$steps" --seq "$seq" \
    --json "$tmp/np$np.json" > "$tmp/np$np.log"
done
/usr/bin/python3 - "$tmp" "$out" "$steps" "$seq" <<'PY'
import json, os, platform, sys
tmp, out, steps, seq = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
res = {"command": f"bash bench/python_example.sh {out} {steps} {seq}", "cpu": cpu,
       "cores": os.cpu_count(), "loadavg": open("/proc/loadavg").read().split()[:3], "runs": {}}
for np in (1, 4):
    log = json.load(open(f"{tmp}/np{np}.json"))
    s = log["steps"][1:]  # the first step pays the set-up
    step = sum(x["step_s"] for x in s) / len(s)
    attn = sum(x["attention_s"] for x in s) / len(s)
    res["runs"][f"np{np}"] = {"world": np, "local_len": log["local_len"], "threads": log["threads"],
                              "step_s": step, "attention_s": attn, "rest_s": step - attn,
                              "attention_share": attn / step, "losses": [x["loss"] for x in log["steps"]],
                              "log": log}
    print(f"np {np}: step {step:.3f} s = longseq attention {attn:.3f} s ({100 * attn / step:.0f}%) "
          f"+ the rest {step - attn:.3f} s (seq {seq}, {log['local_len']} tokens per rank)")
json.dump(res, open(out, "w"), indent=1)
PY
