"""A rank whose script fails ends the other ranks' waits (longseq.comm's contract): under
``mpirun -np 2``, rank 1 raises; its uncaught exception fails the world (comm.py's excepthook),
and rank 0's collective raises ``longseq.RankFailed``, a RuntimeError naming rank 1 and its
error. That is the engine's ``comm::RankFailed`` crossing python/src/module.cpp's translator;
nothing else in the Python suite raises it. Both orders: rank 0 already waiting in the collective
when rank 1 fails ("pending"), and rank 1 failed before rank 0 calls it ("next"). The world's
timeout is 60 s, so a failure that did not travel would show as a timeout, not as rank 1's
error."""

import os
import shutil
import subprocess
import sys

import pytest

import longseq

pytestmark = pytest.mark.skipif(
    longseq.info()["mpi"] != "built" or shutil.which("mpirun") is None,
    reason="this build of longseq has no MPI, or mpirun is not on PATH")

SCRIPT = r"""
import sys, time
import torch
import longseq
order = sys.argv[1]
g = longseq.comm.mpi(timeout=60)
if g.rank == 1:
    if order == "pending":
        time.sleep(1.0)  # rank 0 is inside its all_reduce by then
    raise ValueError("rank one stops here")
if order == "next":
    time.sleep(3.0)  # rank 1 has failed by then
x = torch.ones(5)
try:
    g.all_reduce(x)
    print("rank 0: all_reduce returned", flush=True)
except longseq.RankFailed as e:
    print(f"rank 0 caught {type(e).__name__} (RuntimeError: {isinstance(e, RuntimeError)}): {e}",
          flush=True)
"""


@pytest.mark.parametrize("order", ["pending", "next"])
def test_a_failed_rank_ends_the_others_collective_with_rank_failed(order):
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", sys.executable, "-c", SCRIPT,
                        order], capture_output=True, text=True, timeout=180, env=env)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out  # a failed world is never reported as a success
    assert "rank 0 caught RankFailed (RuntimeError: True): [comm] rank 1 failed: " \
           "ValueError: rank one stops here" in p.stdout, out
    assert "ValueError: rank one stops here" in p.stderr, out  # rank 1's own traceback
