#!/usr/bin/python3
"""Writes tests/plan/data/planner_golden.json: `longseq plan --json` on small odd cases (odd world
sizes, padded lengths, full/causal/window masks, three balances, a GPU and the local profile).

tests/plan/replay_scale_test.cpp checks that the planner still gives these rankings and numbers
bit for bit. Regenerate (from the repository root, after building) only when a change is meant to
change the cost model:  /usr/bin/python3 scripts/plan_golden.py build/cli/longseq
"""
import json
import subprocess
import sys

CASES = [  # seq, gpus, gpus per node, mask, balance, hardware
    (3001, 5, 5, "causal", "zigzag", "a800"),
    (3000, 6, 2, "window:100", "striped", "a800"),
    (4099, 9, 3, "causal", "zigzag", "a800"),
    (5000, 12, 4, "full", "contiguous", "a800"),
    (8192, 16, 8, "window:256", "zigzag", "a800"),
    (2999, 7, 7, "causal", "striped", "a800"),
    (6000, 15, 5, "window:333", "contiguous", "a800"),
    (2048, 4, 2, "causal", "zigzag", "local"),
    (3001, 6, 2, "window:200", "striped", "local"),
    (4096, 18, 6, "causal", "contiguous", "a800"),
]
KEYS = ("algo", "checkpoint", "feasible", "reason", "step_seconds", "tokens_per_sec_per_gpu",
        "mfu", "peak_memory_bytes", "comm_bytes")


def main():
    longseq = sys.argv[1] if len(sys.argv) > 1 else "build/cli/longseq"
    out = {"source": "longseq plan --json --checkpoint none,seq-selective --loss fused, written "
                     "by scripts/plan_golden.py", "cases": []}
    for seq, gpus, gpn, mask, balance, hw in CASES:
        run = subprocess.run([longseq, "plan", "--seq", str(seq), "--gpus", str(gpus),
                              "--gpus-per-node", str(gpn), "--mask", mask, "--balance", balance,
                              "--hardware", hw, "--checkpoint", "none,seq-selective",
                              "--loss", "fused", "--json"], capture_output=True, text=True)
        configs = json.loads(run.stdout)["configs"]
        with open(f"data/hardware/{hw}.json") as f:
            profile = json.load(f)
        out["cases"].append({"seq": seq, "gpus": gpus, "gpus_per_node": gpn, "mask": mask,
                             "balance": balance, "hardware": hw, "hardware_json": profile,
                             "configs": [{k: c[k] for k in KEYS} for c in configs]})
    with open("tests/plan/data/planner_golden.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
