"""ContextParallel in one process (an MPI world of 1, no mpirun): the layout's contracts on odd
lengths, the refusals, and generated calls that must raise, never crash. The multi-rank
equalities are mpi_context_parallel.py's (mpirun -np 2, 3, 4)."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import longseq
import longseq.torch as lt

g = longseq.comm.mpi()


@pytest.mark.parametrize("balance", ["contiguous", "zigzag", "striped"])
@pytest.mark.parametrize("n", [1, 2, 37, 64])
def test_world_one_layout_and_attention(balance, n):
    cp = lt.ContextParallel(g, algo="burst", balance=balance, seq=n)
    assert cp.world == 1 and cp.local_len >= n and cp.padded_len == cp.local_len
    pos = cp.positions()
    assert sorted(pos[pos >= 0].tolist()) == list(range(n))
    x = torch.randn(3, n, 5)
    assert torch.equal(cp.unshard(cp.shard(x, dim=1), dim=1), x)
    q, k, v = (torch.randn(n, 2, 8) for _ in range(3))
    o = cp.attention(cp.shard(q), cp.shard(k), cp.shard(v))
    full = lt.attention(q, k, v, mask="causal")
    assert torch.allclose(cp.unshard(o), full, atol=1e-5, rtol=1e-5)
    assert repr(cp) == (f"ContextParallel(rank 0 of 1, algo='burst', balance={balance!r}, "
                        f"seq={n}, local_len={cp.local_len}, mask={cp.mask!r})")


def test_create_graph_refuses_a_second_derivative_naming_context_parallel():
    cp = lt.ContextParallel(g, seq=21)
    q, k, v = (cp.shard(torch.randn(21, 2, 8)).requires_grad_(True) for _ in range(3))
    gq, = torch.autograd.grad(cp.attention(q, k, v).square().sum(), q, create_graph=True)
    pq, = torch.autograd.grad(cp.attention(q, k, v).square().sum(), q)
    assert torch.equal(gq.detach(), pq)
    with pytest.raises(RuntimeError,
                       match="longseq.torch.ContextParallel.attention: a second derivative"):
        (gq.square().sum() + k.sum()).backward()
    # unshard's backward is a collective: refused alike; shard's is torch's indexing, which
    # differentiates again.
    x = torch.randn(cp.local_len, 2, requires_grad=True)
    gx, = torch.autograd.grad(cp.unshard(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="ContextParallel.unshard: a second derivative"):
        gx.sum().backward()
    y = torch.randn(21, 2, requires_grad=True)
    gy, = torch.autograd.grad(cp.shard(y).square().sum(), y, create_graph=True)
    gy.sum().backward()
    assert torch.equal(y.grad, torch.full_like(y, 2.0))


def test_autocast_runs_context_parallel_attention_in_bfloat16():
    cp = lt.ContextParallel(g, seq=17)
    q, k, v = (cp.shard(torch.randn(17, 2, 8)) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o = cp.attention(q, k, v.to(torch.bfloat16))
    assert o.dtype == torch.bfloat16
    assert torch.equal(o, cp.attention(*(x.to(torch.bfloat16) for x in (q, k, v))))


@pytest.mark.parametrize("balance", ["contiguous", "zigzag", "striped"])
def test_shard_and_unshard_are_differentiable(balance):
    cp = lt.ContextParallel(g, balance=balance, seq=13)
    x = torch.randn(2, 13, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: cp.shard(t, dim=1), (x,))
    xl = torch.randn(cp.local_len, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: cp.unshard(t), (xl,))
    # The gradient of a shard is torch's own indexing of this rank's tokens (padding: none).
    c = torch.randn(2, cp.local_len, 3, dtype=torch.float64)
    (cp.shard(x, dim=1) * c).sum().backward()
    pos = cp.positions()
    xr = x.detach().clone().requires_grad_(True)
    (xr[:, pos[pos >= 0]] * c[:, pos >= 0]).sum().backward()
    assert torch.equal(x.grad, xr.grad)
    # Untracked inputs stay untracked; under no_grad nothing is recorded.
    assert not cp.shard(x.detach(), dim=1).requires_grad
    with torch.no_grad():
        assert not cp.shard(x, dim=1).requires_grad


def test_refusals_name_the_values():
    cp = lt.ContextParallel(g, seq=50)
    L = cp.local_len
    with pytest.raises(ValueError, match=f"q holds 7 tokens, rank 0 of the 50-token layout holds {L}"):
        cp.attention(*(torch.randn(7, 2, 8) for _ in range(3)))
    with pytest.raises(ValueError, match="seq .the global sequence length. is required"):
        lt.ContextParallel(g)
    with pytest.raises(ValueError, match="unknown balance 'diagonal'"):
        lt.ContextParallel(g, balance="diagonal", seq=8)
    with pytest.raises(ValueError, match=r"dim 3 of x \[50, 2\] \(2 dims\)"):
        cp.shard(torch.zeros(50, 2), dim=3)
    with pytest.raises(ValueError, match=r"x \[50, 2\] has 2 tokens along dim 1, expected 50"):
        cp.shard(torch.zeros(50, 2), dim=-1)
    with pytest.raises(ValueError, match="dim 3 of x"):  # the engine checks it too
        cp._core.shard(torch.zeros(50, 2), 3, torch.zeros(50, 2))
    with pytest.raises(TypeError, match="group must be a longseq.comm.Group"):
        lt.ContextParallel("world", seq=8)
    # Lengths are taken exactly: a float or a string is refused, never truncated.
    with pytest.raises(TypeError, match="ContextParallel: seq 30.5 is a float, expected an int"):
        lt.ContextParallel(g, seq=30.5)
    with pytest.raises(TypeError, match="ContextParallel: seq '1M' is a str, expected an int"):
        lt.ContextParallel(g, seq="1M")
    assert lt.ContextParallel(g, seq=torch.tensor(30)).seq == 30  # integers of torch are ints
    with pytest.raises(TypeError, match="longseq.comm.broadcast: root 0.0 is a float"):
        g.broadcast(torch.zeros(2), root=0.0)
    with pytest.raises(ValueError, match="every sequence of the batch shares one mask"):
        cp.attention(*(torch.randn(2, L, 2, 8) for _ in range(3)),
                     mask=longseq.Mask(doc_ids=torch.zeros(2, 50, dtype=torch.int32)))
    with pytest.raises(ValueError, match="block-striped needs|block"):
        lt.ContextParallel(g, balance="block-striped", seq=50)


def test_the_world_and_the_algorithm_are_checked_when_given():
    # mpi(): one world, one Group object; other settings asked later are refused, not ignored.
    assert longseq.comm.mpi() is g and longseq.comm.mpi(timeout=300, nodes=0) is g
    with pytest.raises(ValueError, match=r"open with timeout 300.0; asked again for timeout 5.0"):
        longseq.comm.mpi(timeout=5)
    with pytest.raises(ValueError, match=r"open with nodes 0; asked again for nodes 3"):
        longseq.comm.mpi(nodes=3)
    # What no tensor could make work is refused by the constructor, not by the first attention.
    with pytest.raises(ValueError, match=r"startrail:2 needs C\*C = 4 to divide world 1"):
        lt.ContextParallel(g, algo="startrail:2", seq=8)
    with pytest.raises(ValueError, match=r"usp:2 needs U to divide world 1"):
        lt.ContextParallel(g, algo="usp:2", seq=8)
    with pytest.raises(ValueError, match=r"doc_ids \[2, 8\] give each sequence"):
        lt.ContextParallel(g, seq=8, doc_ids=torch.zeros(2, 8, dtype=torch.int32))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(min_value=-1, max_value=70), lq=st.integers(min_value=0, max_value=80),
       heads=st.sampled_from([(1, 1), (2, 1), (3, 2), (4, 4)]), d=st.integers(0, 9),
       algo=st.sampled_from(["ring", "burst", "ulysses", "usp:2", "startrail:1", "double-ring",
                             "nope"]),
       balance=st.sampled_from(["contiguous", "zigzag", "striped", "block-striped"]),
       batch=st.sampled_from([None, 1, 2]), dtype=st.sampled_from([torch.float32,
                                                                   torch.bfloat16,
                                                                   torch.float64]))
def test_generated_calls_raise_or_run(n, lq, heads, d, algo, balance, batch, dtype):
    try:
        cp = lt.ContextParallel(g, algo=algo, balance=balance, seq=n)
    except (ValueError, TypeError):
        return
    hq, hkv = heads
    # shard and unshard of a tensor that requires grad, along a generated dim: a result whose
    # gradient has the input's shape, or a refusal.
    x = torch.randn(2, max(lq, 1), 3).to(dtype).requires_grad_(True)
    for op in (cp.shard, cp.unshard):
        try:
            y = op(x, dim=d % 4 - 1)
        except (ValueError, TypeError):
            continue
        x.grad = None
        y.float().sum().backward()
        assert x.grad.shape == x.shape
    lead = () if batch is None else (batch,)
    q = torch.randn(*lead, lq, hq, d).to(dtype).requires_grad_(True)
    k = torch.randn(*lead, lq, hkv, d).to(dtype)
    try:
        o = cp.attention(q, k, k.clone())
    except (ValueError, TypeError):
        return
    o.float().sum().backward()
    assert q.grad.shape == q.shape


def test_a_rank_torchrun_started_is_refused_not_run_as_a_world_of_one():
    # torchrun sets WORLD_SIZE and RANK; without mpirun MPI would start a world of 1 and every
    # rank would compute the whole sequence alone. A fresh interpreter: this one's world is open.
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_"))}
    script = "import longseq; print(longseq.comm.mpi().size)"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env={**env, "WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "2"})
    assert r.returncode != 0
    assert ("RuntimeError: longseq.comm.mpi: this process is rank 2 of WORLD_SIZE=4 (torchrun's"
            in r.stderr), r.stderr
    assert "mpirun -np 4 python3 script.py" in r.stderr
    # WORLD_SIZE=1 (torchrun --nproc-per-node 1) is a world of 1 either way: it runs.
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env={**env, "WORLD_SIZE": "1", "RANK": "0"})
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
