#!/usr/bin/env bash
# examples/torch_cp_llama.py at -np 1, 3 and 4: the same losses and the same first-step gradients
# (summed over the ranks) within fp32 rounding; and data x context parallelism: -np 4 --cp 2
# --batch 2 (dp 2 x cp 2) against -np 1 --batch 2 (the same two sequences a step, accumulated).
#   example_equal.sh MPIEXEC PYTHON EXAMPLE OUTDIR
set -euo pipefail
mpiexec=$1 py=$2 example=$3 out=$4
mkdir -p "$out"
# An odd length: every layout pads, and the shards are uneven.
args=(--seq 999 --steps 3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --threads 1)
run() {  # NAME NP [ARGS...]
  local name=$1 np=$2
  shift 2
  "$mpiexec" -np "$np" "$py" "$example" "${args[@]}" "$@" --json "$out/$name.json" \
    --dump-grads "$out/$name.safetensors" > "$out/$name.log"
}
run np1 1
run np3 3
run np4 4
run np1_batch2 1 --batch 2
run np4_cp2_batch2 4 --cp 2 --batch 2
"$py" - "$out" <<'PY'
import json, sys
import longseq
out = sys.argv[1]


def same(base_name, name, world, cp):
    base = json.load(open(f"{out}/{base_name}.json"))
    g1, _ = longseq.load_safetensors(f"{out}/{base_name}.safetensors")
    run = json.load(open(f"{out}/{name}.json"))
    assert (run["world"], run["cp"]) == (world, cp), (run["world"], run["cp"])
    assert run["batch"] == base["batch"], (run["batch"], base["batch"])
    for a, b in zip(base["steps"], run["steps"]):
        rel = abs(a["loss"] - b["loss"]) / abs(a["loss"])
        assert rel < 1e-5, \
            f"{name} step {a['step']}: loss {b['loss']} vs {a['loss']} (rel {rel:.2e})"
    g, _ = longseq.load_safetensors(f"{out}/{name}.safetensors")
    assert g.keys() == g1.keys()
    for n, t in g1.items():
        err = float((g[n] - t).abs().max())
        scale = float(t.abs().max())
        assert err <= 1e-4 * scale + 1e-7, \
            f"{name} {n}: gradient off by {err:.3g} (max {scale:.3g})"
    print(f"{name}: {len(run['steps'])} losses and {len(g)} gradients equal {base_name} "
          f"(losses {[round(s['loss'], 6) for s in run['steps']]})")


same("np1", "np3", 3, 3)
same("np1", "np4", 4, 4)
same("np1_batch2", "np4_cp2_batch2", 4, 2)
PY
