"""Context parallelism from PyTorch under mpirun: one Python process per rank.

    mpirun -np P python3 tests/python/mpi_context_parallel.py

Every rank builds the same seeded global q, k, v, dO, shards them with ContextParallel.shard,
runs ContextParallel.attention (autograd) and compares its shard of o and of the gradients, and
the unsharded tensors, with the single-process longseq.torch.attention on the whole sequence
(tests/README.md rule 4), for every algorithm that runs at this world and every layout. Also:
positions() against shard(arange), batch [B, L, H, D], bf16 tensors, activation checkpointing,
dp x cp splits of the world, the collectives, and the refusals that must name the value. Exits
non-zero (the assertion's message on stderr) on any mismatch; rank 0 prints one line per case.
"""

import sys

import torch

import longseq
import longseq.torch as lt
import reference as ref

g = longseq.comm.mpi(nodes=2 if int(__import__("os").environ.get("OMPI_COMM_WORLD_SIZE", "1"))
                     % 2 == 0 else 0)
P, R = g.size, g.rank


def say(*a):
    if R == 0:
        print(*a, flush=True)


def inputs(n, hq, hkv, d, seed, b=None):
    gen = torch.Generator().manual_seed(seed)
    lead = () if b is None else (b,)
    return [torch.randn(*lead, n, h, d, generator=gen) for h in (hq, hkv, hkv, hq)]


def close(got, want, tol):
    got, want = got.double(), want.double()
    inf = torch.isinf(got) & torch.isinf(want)
    err = (got - want).abs().masked_fill(inf, 0)
    assert bool((err <= tol + tol * want.abs().masked_fill(inf, 0)).all()), \
        f"max error {float(err.max()):.3g} over tolerance {tol}"


def algorithms(world, hq, hkv):
    out = ["ring", "burst"]
    if world >= 4 and world % 2 == 0:  # several inner rings of several ranks each
        out += ["double-ring", "double-ring:2:ring"]
    for c in range(1, world + 1):
        if world % (c * c) == 0:
            out.append(f"startrail:{c}")
    if hq % world == 0 and hkv % world == 0:
        out.append("ulysses")
    for u in range(2, world):
        if world % u == 0 and hkv % u == 0:
            out += [f"usp:{u}", f"usp:{u}:ring"]
    return out


def run_case(algo, balance, mask, n, hq, hkv, d, seed, batch=None, dtype=torch.float32, tol=1e-5,
             lse_grad=False, group=None):
    """lse_grad: the loss uses the lse too, (lse * u).sum() over the real tokens. group: the
    world's, or a sub-group's (each sub-group then computes the same sequence)."""
    cp = lt.ContextParallel(g if group is None else group, algo=algo, balance=balance, seq=n,
                            mask=mask)
    q, k, v, do = (x.to(dtype) for x in inputs(n, hq, hkv, d, seed, batch))
    u = torch.randn(do.shape[:-1], generator=torch.Generator().manual_seed(seed + 1000))
    dim = 0 if batch is None else 1
    valid = cp.valid()
    ql, kl, vl, dol = (cp.shard(x, dim).requires_grad_(x is not do) for x in (q, k, v, do))
    o, lse = cp.attention(ql, kl, vl, return_lse=True)
    loss = (o * dol).sum()
    if lse_grad:  # padding rows hold lse = -inf: leave them out of the loss
        loss = loss + (torch.where(valid.unsqueeze(-1), lse, torch.zeros_like(lse))
                       * cp.shard(u, dim)).sum()
    loss.backward()
    # The whole sequence in one process, on every rank.
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    ro, rlse = lt.attention(qs, ks, vs, mask=cp.mask, return_lse=True)
    rloss = (ro * do).sum()
    if lse_grad:
        rloss = rloss + (rlse * u).sum()
    rloss.backward()
    sel = (slice(None), valid) if batch is not None else (valid,)
    for name, local, whole in (("o", o, ro), ("dq", ql.grad, qs.grad), ("dk", kl.grad, ks.grad),
                               ("dv", vl.grad, vs.grad)):
        want = cp.shard(whole, dim)
        try:
            close(local.detach()[sel], want[sel], tol if name == "o" else 5 * tol)
            close(cp.unshard(local.detach(), dim), whole.detach(), tol if name == "o" else 5 * tol)
        except AssertionError as e:
            raise AssertionError(f"rank {R}: {algo} {balance} {mask} {name}: {e}") from None
    # Padding rows are zero in the shards and produce nothing.
    assert (o.detach()[(slice(None), ~valid) if batch is not None else (~valid,)] == 0).all()


n, hq, hkv, d = 61, 4, 2, 16
cases = 0
for algo in algorithms(P, hq, hkv):
    for balance in ("contiguous", "zigzag", "striped"):
        run_case(algo, balance, "causal", n, hq, hkv, d, seed=cases)
        cases += 1
    say(f"[mpi_cp] P={P} {algo}: contiguous, zigzag, striped (causal) equal one process")

# Ulysses over the whole group where the heads allow, and StarTrail's other placement.
if 4 % P == 0:
    run_case("ulysses", "zigzag", "causal", n, 4, 4, d, seed=100)
if P == 4:
    run_case("startrail:2:rings", "striped", "causal", n, hq, hkv, d, seed=99)

# Other masks, odd lengths, a batch, bf16, block-striped with a block mask.
docs = torch.tensor([i // 10 for i in range(n)], dtype=torch.int32)
run_case("burst", "zigzag", longseq.Mask(doc_ids=docs), n, hq, hkv, d, seed=101)
run_case("ring", "striped", longseq.Mask(cu_seqlens=torch.tensor([0, 7, 30, 31, n])), n, hq,
         hkv, d, seed=102)
run_case("burst", "contiguous", "window:9", 37, 2, 1, 8, seed=103)
run_case("ring", "zigzag", "full", 5, 2, 2, 8, seed=104)  # fewer tokens than 2P chunks
run_case("burst", "zigzag", "causal", 45, 2, 2, 8, seed=105, batch=3)
bs = 4 * P
nb = (n + bs - 1) // bs
blocks = ((torch.arange(nb)[:, None] - torch.arange(nb)[None, :]) % 3 != 1).to(torch.uint8)
run_case("burst", "block-striped", longseq.Mask("causal", block_mask=blocks, block_size=bs), n,
         hq, hkv, d, seed=106)
say(f"[mpi_cp] P={P}: documents, cu_seqlens, window, tiny N, batch, block-striped equal one "
    f"process")
# A loss that uses the lse as well as o: its gradient enters every algorithm's backward.
for algo in [a for a in algorithms(P, hq, hkv) if a in ("ring", "burst", "startrail:1")
             or a.startswith("usp:") or a == "double-ring"][:4]:
    run_case(algo, "zigzag", "causal", n, hq, hkv, d, seed=110, lse_grad=True)
run_case("burst", "striped", "window:9", 37, 2, 1, 8, seed=111, batch=2, lse_grad=True)
say(f"[mpi_cp] P={P}: a loss on o and lse equals one process")
# Activation checkpointing (torch.utils.checkpoint, both variants) reruns every rank's forward,
# its collectives included, inside the backward: the same gradients as without it.
cp = lt.ContextParallel(g, algo="burst", balance="zigzag", seq=n)
ql, kl, vl, dol = (cp.shard(x) for x in inputs(n, hq, hkv, d, seed=120))
w = torch.randn(d, d, generator=torch.Generator().manual_seed(121))


def block(x, y, z, w):
    return cp.attention(torch.tanh(x @ w), y, z)


for reentrant in (True, False):
    grads = ref.grads_plain_and_checkpointed(block, (ql, kl, vl, w), dol, reentrant)
    for nm, plain, ck in zip(("dq", "dk", "dv", "dw"), *grads):
        assert torch.equal(plain, ck), \
            f"rank {R}: {nm} differs under checkpointing (use_reentrant={reentrant})"
say(f"[mpi_cp] P={P}: activation checkpointing gives the same gradients")
# shard and unshard under autograd: a shard's gradient is this rank's tokens' (torch's own
# indexing as the reference); an unshard's is its tokens of the sum over the ranks' gradients of
# the whole tensor (every rank's loss reads it all).
cp = lt.ContextParallel(g, algo="burst", balance="zigzag", seq=n)
pos, gen = cp.positions(), torch.Generator().manual_seed(130 + R)
x = torch.randn(2, n, 3, generator=torch.Generator().manual_seed(130)).requires_grad_(True)
c = torch.randn(2, cp.local_len, 3, generator=gen)
(cp.shard(x, dim=1) * c).sum().backward()
xr = x.detach().clone().requires_grad_(True)
(xr[:, pos[pos >= 0]] * c[:, pos >= 0]).sum().backward()
assert torch.equal(x.grad, xr.grad), f"rank {R}: shard's gradient"
xl = torch.randn(cp.local_len, 3, generator=gen).requires_grad_(True)
w = torch.randn(n, 3, generator=gen)  # each rank's own loss over the whole tensor
(cp.unshard(xl) * w).sum().backward()
assert torch.equal(xl.grad, cp.shard(g.all_reduce(w.clone()))), f"rank {R}: unshard's gradient"
say(f"[mpi_cp] P={P}: shard and unshard carry gradients")

# Data x context parallelism (the dp x cp splits `longseq.plan` ranks): the world split into P/c
# context-parallel groups of c ranks, each on its own sequence, and c data-parallel groups across
# them that sum the gradients; the groups of one kind run their collectives at the same time.
for c in [c for c in range(1, P) if P % c == 0]:
    cpg, dpg = g.split(R // c, R), g.split(R % c, R)
    assert (cpg.size, cpg.rank, dpg.size, dpg.rank) == (c, R % c, P // c, R // c)
    cp = lt.ContextParallel(cpg, algo="burst", balance="zigzag", seq=n)
    seqs = [inputs(n, hq, hkv, d, seed=140 + j) for j in range(P // c)]  # replica j's sequence
    q, k, v, do = seqs[R // c]
    ql, kl, vl = (cp.shard(x).requires_grad_(True) for x in (q, k, v))
    o = cp.attention(ql, kl, vl)
    (o * cp.shard(do)).sum().backward()
    summed = [dpg.all_reduce(t.grad.clone()) for t in (ql, kl, vl)]
    want_o, want = None, [0, 0, 0]
    for j, (qj, kj, vj, doj) in enumerate(seqs):
        xs = [x.clone().requires_grad_(True) for x in (qj, kj, vj)]
        oj = lt.attention(*xs, mask="causal")
        (oj * doj).sum().backward()
        want_o = oj.detach() if j == R // c else want_o
        want = [w + cp.shard(x.grad) for w, x in zip(want, xs)]
    valid = cp.valid()
    try:
        close(o.detach()[valid], cp.shard(want_o)[valid], 1e-5)
        for got, w in zip(summed, want):
            close(got[valid], w[valid], 5e-5)
    except AssertionError as e:
        raise AssertionError(f"rank {R}: dp {P // c} x cp {c}: {e}") from None
# What the planner picks, built as it says: its winner's cp consecutive ranks per sequence and
# its algorithm (at P = 4 on 2-GPU nodes the default model's 128K gives burst over dp 2 x cp 2,
# 256K usp:2 over cp 4).
if P == 4:
    for s in ("128K", "256K"):
        win = longseq.plan(gpus=P, gpus_per_node=2, seq=s)["winner"]
        assert win["cp"] * win["dp"] == P, win
        # 8 / 4 heads: whatever Ulysses degree (<= P) the planner picks divides them.
        run_case(win["algo"], "zigzag", "causal", n, 8, 4, d, seed=150,
                 group=g.split(R // win["cp"], R))
say(f"[mpi_cp] P={P}: dp x cp splits of the world (cp in "
    f"{[c for c in range(1, P) if P % c == 0]}) equal one process")

# bf16 tensors: the bf16 kernels; both sides are longseq's, so compare within bf16 rounding of
# the output (2^-8 relative, plus the accumulated rounding of the operands).
run_case("burst", "zigzag", "causal", n, hq, hkv, d, seed=107, dtype=torch.bfloat16, tol=3e-2)
say(f"[mpi_cp] P={P}: bfloat16 equals one process within bf16 rounding")

# positions() are the global positions of the local tokens.
cp = lt.ContextParallel(g, algo="burst", balance="zigzag", seq=n)
pos = cp.positions()
ar = cp.shard(torch.arange(n))
assert torch.equal(pos[pos >= 0], ar[pos >= 0]) and (pos[pos < 0].numel() == cp.local_len
                                                       - int((pos >= 0).sum()))
allpos = g.all_gather(pos)
assert sorted(allpos[allpos >= 0].tolist()) == list(range(n))

# Collectives on tensors.
x = torch.full((5,), float(R + 1))
assert torch.equal(g.all_reduce(x), torch.full((5,), float(P * (P + 1) // 2)))
y = torch.arange(3, dtype=torch.int64) * (R + 1)
assert torch.equal(g.all_reduce(y, "max"), torch.arange(3) * P)
z = torch.full((2, 2), float(R))
assert torch.equal(g.broadcast(z, root=P - 1), torch.full((2, 2), float(P - 1)))
gath = g.all_gather(torch.tensor([R, 10 * R]))
assert gath.tolist() == [[r, 10 * r] for r in range(P)]
g.barrier()
say(f"[mpi_cp] P={P}: positions, all_reduce, broadcast, all_gather, barrier")

# The rows CUDA tensors take (ContextParallel._move_on_gpu: torch's index ops, the group's
# all_gather), run here on host tensors, equal the engine's host copies bit for bit, along any dim
# and for every layout.
for bal in ("contiguous", "zigzag", "striped"):
    c2 = lt.ContextParallel(g, balance=bal, seq=n)
    x = torch.randn(3, n, 5, generator=torch.Generator().manual_seed(11))
    shape = [3, c2.local_len, 5]
    mine = c2._move_on_gpu("shard", x, 1, shape)
    assert torch.equal(mine, c2._move("shard", x, 1)), bal
    whole = c2._move_on_gpu("unshard", mine, 1, [3, n, 5])
    assert torch.equal(whole, c2._move("unshard", mine, 1)) and torch.equal(whole, x), bal
say(f"[mpi_cp] P={P}: the CUDA tensors' shard and unshard rows equal the engine's")

# Refusals name the value (every rank raises alike, before any communication).
def refused(fn, words):
    try:
        fn()
    except (ValueError, TypeError) as e:
        assert words in str(e), f"expected '{words}' in: {e}"
        return
    raise AssertionError(f"no error for {words}")


def three(t, h=2):
    return [torch.randn(t, h, 8) for _ in range(3)]


refused(lambda: cp.attention(*three(10)), f"q holds 10 tokens, rank {R}")
refused(lambda: cp.attention(*three(cp.local_len), mask=longseq.Mask(
    cu_seqlens=torch.tensor([0, 60]))), "must start at 0 and end at the 61 tokens")
refused(lambda: lt.ContextParallel(g, algo="spiral", seq=n), "unknown --algo")
refused(lambda: cp.shard(torch.zeros(7, 2)), "x [7, 2] has 7 tokens along dim 0, expected 61")
if P > 1:
    refused(lambda: lt.ContextParallel(g, algo="ulysses", seq=n).attention(
        *three(cp.local_len, h=P + 1)), f"Ulysses over {P} ranks needs the query heads {P + 1}")
say(f"[mpi_cp] P={P}: {cases} algorithm x layout cases and the refusals passed")
sys.exit(0)
