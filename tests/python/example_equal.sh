#!/usr/bin/env bash
# examples/torch_cp_llama.py at -np 1, 3 and 4: the same losses and the same first-step gradients
# (summed over the ranks) within fp32 rounding.
#   example_equal.sh MPIEXEC PYTHON EXAMPLE OUTDIR
set -euo pipefail
mpiexec=$1 py=$2 example=$3 out=$4
mkdir -p "$out"
# An odd length: every layout pads, and the shards are uneven.
args=(--seq 999 --steps 3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --threads 1)
for np in 1 3 4; do
  "$mpiexec" -np "$np" "$py" "$example" "${args[@]}" --json "$out/np$np.json" \
    --dump-grads "$out/np$np.safetensors" > "$out/np$np.log"
done
"$py" - "$out" <<'PY'
import json, sys
import torch
import longseq
out = sys.argv[1]
base = json.load(open(f"{out}/np1.json"))
g1, _ = longseq.load_safetensors(f"{out}/np1.safetensors")
for np in (3, 4):
    run = json.load(open(f"{out}/np{np}.json"))
    assert run["world"] == np, run["world"]
    for a, b in zip(base["steps"], run["steps"]):
        rel = abs(a["loss"] - b["loss"]) / abs(a["loss"])
        assert rel < 1e-5, f"np {np} step {a['step']}: loss {b['loss']} vs {a['loss']} (rel {rel:.2e})"
    g, _ = longseq.load_safetensors(f"{out}/np{np}.safetensors")
    assert g.keys() == g1.keys()
    for name, t in g1.items():
        err = float((g[name] - t).abs().max())
        scale = float(t.abs().max())
        assert err <= 1e-4 * scale + 1e-7, f"np {np} {name}: gradient off by {err:.3g} (max {scale:.3g})"
    print(f"np {np}: {len(run['steps'])} losses and {len(g)} gradients equal np 1 "
          f"(losses {[round(s['loss'], 6) for s in run['steps']]})")
PY
