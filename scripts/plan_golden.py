#!/usr/bin/python3
"""Writes tests/plan/data/planner_golden.json: `longseq plan --json` on small odd cases (odd world
sizes, padded lengths, full/causal/window masks, three balances, a GPU and the local profile).

tests/plan/replay_scale_test.cpp checks that the planner still gives these rankings and numbers
bit for bit (every GPU a context rank: --dp 1; nothing pruned: --top 0). Issue 44's step model
(ZeRO-3 of the embedding and head units, fp32 reduce-scatters, the exposed collectives, the step's
all-reduces and the optimizer) rewrote them; the attention replays under them are held to the
reference replay by the other tests of that file. Regenerate (from the repository root, after building) only when a change is meant to
change the cost model:  /usr/bin/python3 scripts/plan_golden.py build/cli/longseq

With --odd it writes tests/plan/data/planner_golden_odd.json from ODD_CASES instead: worlds 6, 12
and 24 with 2, 3 or 4 GPUs per node, so nodes, inner rings, StarTrail teams and USP groups of
several sizes meet padded lengths (issue 31: the planner's shared forwards, rank-pair counts and
event replay checked against the planner before them, written by that binary).
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
ODD_CASES = [
    (6001, 6, 3, "causal", "zigzag", "a800"),
    (6000, 6, 3, "window:150", "striped", "a800"),
    (12007, 12, 4, "causal", "contiguous", "a800"),
    (12000, 12, 3, "window:500", "zigzag", "a800"),
    (12001, 12, 4, "full", "striped", "a800"),
    (24011, 24, 4, "causal", "zigzag", "a800"),
    (24000, 24, 3, "window:777", "zigzag", "a800"),
    (24001, 24, 3, "full", "contiguous", "a800"),
    (24000, 24, 4, "causal", "striped", "a800"),
    (6007, 6, 2, "window:300", "zigzag", "local"),
    (12011, 12, 2, "causal", "striped", "local"),
]
KEYS = ("algo", "checkpoint", "feasible", "reason", "step_seconds", "tokens_per_sec_per_gpu",
        "mfu", "peak_memory_bytes", "comm_bytes")


def main():
    args = [a for a in sys.argv[1:] if a != "--odd"]
    odd = "--odd" in sys.argv[1:]
    longseq = args[0] if args else "build/cli/longseq"
    out = {"source": "longseq plan --json --checkpoint none,seq-selective --loss fused --dp 1 "
                     "--top 0, written by scripts/plan_golden.py" + (" --odd" if odd else ""),
           "cases": []}
    for seq, gpus, gpn, mask, balance, hw in (ODD_CASES if odd else CASES):
        run = subprocess.run([longseq, "plan", "--seq", str(seq), "--gpus", str(gpus),
                              "--gpus-per-node", str(gpn), "--mask", mask, "--balance", balance,
                              "--hardware", hw, "--checkpoint", "none,seq-selective",
                              "--loss", "fused", "--dp", "1", "--top", "0", "--json"],
                             capture_output=True, text=True)
        configs = json.loads(run.stdout)["configs"]
        with open(f"data/hardware/{hw}.json") as f:
            profile = json.load(f)
        out["cases"].append({"seq": seq, "gpus": gpus, "gpus_per_node": gpn, "mask": mask,
                             "balance": balance, "hardware": hw, "hardware_json": profile,
                             "configs": [{k: c[k] for k in KEYS} for c in configs]})
    name = "planner_golden_odd.json" if odd else "planner_golden.json"
    with open("tests/plan/data/" + name, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
