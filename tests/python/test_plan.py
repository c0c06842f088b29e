"""longseq.plan(**flags) is `longseq plan --json` with the same flags (plan/request.hpp: one
library call behind both), on requests of the cluster planner and of --train, and its refusals."""

import json
import os
import subprocess

import pytest

import longseq

CLI = os.environ.get("LONGSEQ_CLI", "longseq")


def cli_plan(*args):
    r = subprocess.run([CLI, "plan", "--json", *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode in (0, 3), r.stderr  # 3: nothing feasible (still a JSON answer)
    return json.loads(r.stdout)


def flags(kw):
    out = []
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            if v:
                out.append(flag)
        else:
            out += [flag, v]
    return out


REQUESTS = [
    dict(gpus=16, gpus_per_node=8, seq="64K", top=5),
    dict(model="llama-14b", gpus=24, gpus_per_node=8, seq=98304, mask="window:4096",
         balance="zigzag", algo="burst,ring,usp:2", global_batch="4seq", checkpoint="full,none"),
    dict(gpus=12, gpus_per_node=4, seq="48K", dp="1,3", cp="4,12", hardware="h200-ib",
         loss="fused", top=0),
    dict(train="tiny", seq=256, gpus=2),
]


@pytest.mark.parametrize("kw", REQUESTS, ids=[f"request{i}" for i in range(len(REQUESTS))])
def test_plan_is_the_commands_json(kw):
    got = longseq.plan(**kw)
    want = cli_plan(*flags(kw))
    assert got == want


def test_the_answer_reads_as_the_docs_say():
    p = longseq.plan(gpus=16, gpus_per_node=8, seq="64K", top=3)
    w = p["winner"]
    assert w["dp"] * w["cp"] == 16 and w["step_seconds"] > 0
    assert p["search"]["gpus"] == 16 and {"dp", "cp", "grad_accum"} <= set(p["search"]["splits"][0])


def test_prune_gap_is_exact_up_to_1024_gpus_and_one_percent_above():
    assert longseq.plan(gpus=1024, seq="64K", top=2)["search"]["prune_gap"] == 0
    assert longseq.plan(gpus=2048, seq="64K", top=2)["search"]["prune_gap"] == 0.01
    assert longseq.plan(gpus=2048, seq="64K", top=2, prune_gap=0)["search"]["prune_gap"] == 0


def test_refusals():
    with pytest.raises(TypeError, match="no flag --gpu .keywords: .*gpus_per_node"):
        longseq.plan(gpu=8)
    with pytest.raises(TypeError, match="gpus takes an int, got str"):
        longseq.plan(gpus="8")
    with pytest.raises(TypeError, match="exhaustive takes a bool"):
        longseq.plan(exhaustive=1)
    with pytest.raises(TypeError, match="seq takes a str .or an int., got float"):
        longseq.plan(seq=1.5)
    with pytest.raises(ValueError, match=r"\[plan\]"):
        longseq.plan(gpus=16, dp="5")
    with pytest.raises(ValueError, match="algo"):
        longseq.plan(gpus=8, algo="spiral")
