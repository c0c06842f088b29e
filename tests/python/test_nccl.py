"""longseq.comm.nccl(): an NCCL world bootstrapped over torch.distributed (docs/python.md "GPUs").
What needs no GPU runs here: the unique id's trip over a gloo group of 3 processes (and over a
sub-group, whose source rank is looked up), the node ids, and the refusals every rank raises
alike (no GPU, two ranks on one GPU, no torch.distributed, a build without NCCL). The NCCL world
itself and context parallelism on CUDA tensors are test_cuda.py's (world 1 on the lent GPU)."""

import json
import os
import subprocess
import sys

import pytest
import torch

import longseq
import longseq.comm as lc

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "nccl_context_parallel.py")
built = longseq.info()["nccl"] == "built"
needs_nccl = pytest.mark.skipif(not built, reason="this build of longseq has no NCCL")


def ranks(mode, world, tmp_path):
    """Runs `world` processes of the script in `mode`; each one's JSON line, by rank."""
    store = str(tmp_path / "store")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    procs = [subprocess.Popen([sys.executable, SCRIPT, mode, str(r), str(world), store],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=120)
        assert p.returncode == 0, e[-3000:]
        out.append(json.loads(o.strip().splitlines()[-1]))
    return sorted(out, key=lambda x: x["rank"])


def test_node_ids_are_dense_in_order_of_first_appearance():
    assert lc._node_ids(["b", "a", "b", "c", "a"]) == [0, 1, 0, 2, 1]
    assert lc._node_ids(["h"]) == [0]


def test_gpu_places_are_checked_naming_the_ranks():
    lc._check_gpus("f", [("a", 0), ("a", 1), ("b", 0)])
    with pytest.raises(RuntimeError, match=r"f: rank\(s\) \[1, 2\] have no CUDA device"):
        lc._check_gpus("f", [("a", 0), ("a", -1), ("b", -1)])
    with pytest.raises(RuntimeError, match="f: ranks 0 and 2 are both on GPU 1 of host 'a'"):
        lc._check_gpus("f", [("a", 1), ("b", 1), ("a", 1)])


@needs_nccl
def test_the_unique_id_reaches_every_rank(tmp_path):
    got = ranks("bootstrap", 3, tmp_path)
    assert [g["group_rank"] for g in got] == [0, 1, 2]
    ids = {g["id"] for g in got}
    assert len(ids) == 1 and len(bytes.fromhex(ids.pop())) == 128
    assert all(g["nodes"] == [0, 0, 0] for g in got)  # one host


@needs_nccl
def test_the_unique_id_over_a_sub_group_comes_from_its_first_rank(tmp_path):
    got = ranks("subgroup", 3, tmp_path)
    assert "id" not in got[0]
    assert got[0]["error"] == ("ValueError: longseq.comm.nccl: this process (global rank 0) is "
                               "not a member of process_group; every member calls "
                               "nccl(process_group), others not")
    assert [got[1]["group_rank"], got[2]["group_rank"]] == [0, 1]
    assert got[1]["id"] == got[2]["id"] and got[1]["nodes"] == [0, 0]


@needs_nccl
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_every_rank_refuses_when_there_is_no_gpu(tmp_path):
    got = ranks("open", 2, tmp_path)
    for g in got:
        assert g["error"].startswith("RuntimeError: longseq.comm.nccl: rank(s) [0, 1] have no "
                                     "CUDA device"), g


@needs_nccl
def test_every_rank_refuses_two_ranks_on_one_gpu(tmp_path):
    got = ranks("same_gpu", 2, tmp_path)
    for g in got:
        assert g["error"] == (f"RuntimeError: longseq.comm.nccl: ranks 0 and 1 are both on GPU 0 "
                              f"of host {os.uname().nodename!r}; NCCL runs one rank per GPU: call "
                              f"torch.cuda.set_device(local_rank) before longseq.comm.nccl()"), g


@needs_nccl
def test_without_torch_distributed_it_says_what_to_call():
    import torch.distributed as dist
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"longseq.comm.nccl: torch.distributed is not "
                                           r"initialised: call torch.distributed.init_process"):
        lc.nccl()


@needs_nccl
def test_the_world_refuses_a_bad_id_rank_or_node_and_a_missing_gpu():
    core = longseq._core
    with pytest.raises(ValueError, match="the unique id has 5 bytes, NCCL's has 128"):
        core.open_nccl_world(b"short", 0, [0], 0, 30.0)
    with pytest.raises(ValueError, match="rank 2 of a world of 2"):
        core.open_nccl_world(bytes(128), 2, [0, 0], 0, 30.0)
    with pytest.raises(ValueError, match="nodes is empty: one node id per rank"):
        core.open_nccl_world(bytes(128), 0, [], 0, 30.0)
    with pytest.raises(ValueError, match=r"rank -5 of a world of 1"):
        core.open_nccl_world(bytes(128), -5, [0], 0, 30.0)
    with pytest.raises(ValueError, match="node 5 of rank 1 is not in"):
        core.open_nccl_world(bytes(128), 0, [0, 5], 0, 30.0)
    with pytest.raises(ValueError, match="timeout 0 s must be positive"):
        core.open_nccl_world(bytes(128), 0, [0], 0, 0.0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"\[comm\] the nccl backend needs a GPU; none is "
                                               r"visible"):
            core.open_nccl_world(core.nccl_unique_id(), 0, [0], 0, 30.0)


@pytest.mark.skipif(built, reason="this build has NCCL")
def test_a_build_without_nccl_says_so():
    with pytest.raises(RuntimeError, match="this build of longseq has no NCCL"):
        lc.nccl()


def test_a_later_call_compares_only_the_arguments_it_gives():
    opened = {"timeout": 120.0, "device": 0, "process_group": None}
    lc._check_reopen("f", {"timeout": None, "device": None, "process_group": None},
                     {"timeout": 300.0, "device": 1, "process_group": None}, opened)
    with pytest.raises(ValueError, match=r"^f: the world is open with timeout 120.0, device 0; "
                                         r"asked again for timeout 300.0, device 1 \(they hold"):
        lc._check_reopen("f", {"timeout": 300, "device": 1, "process_group": None},
                         {"timeout": 300.0, "device": 1, "process_group": None}, opened)


@needs_nccl
def test_a_negative_device_is_refused_by_name(tmp_path):
    got = ranks("bad_device", 2, tmp_path)
    for g in got:
        assert g["error"] == ("ValueError: longseq.comm.nccl: device -1 must be a CUDA device "
                              "index (>= 0)"), g
