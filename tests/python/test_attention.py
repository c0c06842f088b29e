"""Single-process attention from Python against PyTorch float64 attention (reference.py).

Every mask of the grammar (full, causal, window, document ids and cu_seqlens, blocks with and
without causal), GQA and MQA, odd lengths, batch and per-row document ids, float32 and bfloat16,
forward and backward, through ``longseq.attention`` (numpy and torch) and the autograd function
``longseq.torch.attention``.

Tolerances (tests/README.md): float32 against float64 as the CPU attention kernels' own tests,
o and lse 5e-6 + 5e-6 |ref|, gradients 2e-5 + 2e-5 |ref| (standard normal inputs, D <= 64, the
scores' magnitudes stay O(1)); bfloat16 by rule 2: the error against float64 on the same
bf16-rounded inputs at most twice that of the same attention written naively in torch bfloat16
(every op's result rounded to bf16), plus 1e-6 for outputs a naive run gets exactly.
"""

import numpy as np
import pytest
import torch

import longseq
import longseq.torch as lt
import reference as ref

torch.manual_seed(0)


def make(b, t, hq, hkv, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (b,) if b else ()
    q = torch.randn(*shape, t, hq, d, generator=g)
    k = torch.randn(*shape, t, hkv, d, generator=g)
    v = torch.randn(*shape, t, hkv, d, generator=g)
    do = torch.randn(*shape, t, hq, d, generator=g)
    return [x.to(dtype) for x in (q, k, v, do)]


def blocks(n, bs, seed=1, causal_diag=True):
    nb = (n + bs - 1) // bs
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(nb, nb, generator=g) < 0.5).to(torch.uint8)
    if causal_diag:
        m.fill_diagonal_(1)
    m[nb - 1, :] = 0  # a block row that sees nothing: o = 0, lse = -inf
    return m


# (name, B (0: unbatched), T, Hq, Hkv, D, mask builder (T, B) -> (longseq mask, allowed [T,T] or
# [B,T,T]))
def m_full(t, b):
    return None, ref.allowed(t)


def m_causal(t, b):
    return "causal", ref.allowed(t, causal=True)


def m_window(t, b):
    return "window:5", ref.allowed(t, window=5)


def m_docs(t, b):
    ids = torch.tensor([i // 7 for i in range(t)], dtype=torch.int32)
    return longseq.Mask("causal", doc_ids=ids), ref.allowed(t, doc_ids=ids)


def m_docs_per_row(t, b):
    rows = [torch.tensor([(i + r) // (5 + r) for i in range(t)], dtype=torch.int64)
            for r in range(b)]
    ids = torch.stack(rows)
    return longseq.Mask("full", doc_ids=ids), torch.stack([ref.allowed(t, doc_ids=r) for r in rows])


def m_cu(t, b):
    cu = torch.tensor([0, 3, 3, 11, t], dtype=torch.int32)
    ids = ref.doc_ids_from_cu_seqlens(cu.tolist(), t)
    return longseq.Mask(cu_seqlens=cu), ref.allowed(t, doc_ids=ids)


def m_blocks(t, b):
    bm = blocks(t, 8)
    return longseq.Mask(block_mask=bm, block_size=8), ref.allowed(t, block_mask=bm, block_size=8)


def m_blocks_causal(t, b):
    bm = blocks(t, 6, seed=3).bool()
    return (longseq.Mask("causal", block_mask=bm, block_size=6),
            ref.allowed(t, causal=True, block_mask=bm, block_size=6))


def m_dense(t, b):
    # A dense [T, T] mask as torch's attn_mask habit writes it: block_size 1 (the hint of the
    # TypeError a bare tensor mask gets).
    bm = blocks(t, 1, seed=5).bool()
    return longseq.Mask(block_mask=bm, block_size=1), ref.allowed(t, block_mask=bm, block_size=1)


CASES = [
    ("full", 0, 37, 4, 2, 16, m_full),
    ("causal_mha", 0, 64, 3, 3, 32, m_causal),
    ("causal_odd_gqa", 0, 129, 6, 2, 24, m_causal),
    ("mqa_window", 0, 41, 4, 1, 8, m_window),
    ("docs", 0, 30, 2, 2, 16, m_docs),
    ("cu_seqlens", 0, 23, 4, 2, 16, m_cu),
    ("blocks", 0, 45, 2, 1, 16, m_blocks),
    ("blocks_causal", 0, 31, 2, 2, 8, m_blocks_causal),
    ("one_token", 0, 1, 1, 1, 1, m_causal),
    ("batch_causal", 3, 19, 4, 2, 16, m_causal),
    ("batch_docs_per_row", 2, 26, 2, 1, 16, m_docs_per_row),
    ("head_dim_64", 0, 300, 2, 2, 64, m_causal),
    # Longer than the rows of one backward call (local.hpp: 1024, or 256 for MQA's 8 chunks).
    ("chunked_mqa", 0, 700, 4, 1, 16, m_causal),
    ("chunked_docs", 2, 1100, 2, 2, 8, m_docs),
    ("dense_mask", 0, 29, 2, 1, 8, m_dense),
]
IDS = [c[0] for c in CASES]


def reference_of(q, k, v, do, ok, scale=None):
    return ref.attention_and_grads(*(x.double() for x in (q, k, v, do)), ok, scale)


def check_close(name, got, want, atol, rtol):
    got = got.double()
    want = want.double()
    both_inf = torch.isinf(got) & torch.isinf(want) & (torch.sign(got) == torch.sign(want))
    bad = ~both_inf & ((got - want).abs() > atol + rtol * want.abs())
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {bad.numel()} elements off, max "
                           f"{ref.max_err(got, want):.3g}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_float32_forward_and_backward_match_float64(case):
    name, b, t, hq, hkv, d, build = case
    q, k, v, do = make(b, t, hq, hkv, d)
    mask, ok = build(t, b)
    o, lse = longseq.attention.forward(q, k, v, mask)
    dq, dk, dv = longseq.attention.backward(do, q, k, v, o, lse, mask)
    ro, rlse, rdq, rdk, rdv = reference_of(q, k, v, do, ok)
    check_close("o", o, ro, 5e-6, 5e-6)
    check_close("lse", lse, rlse, 5e-6, 5e-6)
    for nm, g, r in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)):
        check_close(nm, g, r, 2e-5, 2e-5)
    # Rows that see nothing: o exactly 0, lse exactly -inf.
    empty = torch.isinf(rlse) & (rlse < 0)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty)
    assert (o[empty.unsqueeze(-1).expand_as(o)] == 0).all()


@pytest.mark.parametrize("case", CASES[1:8] + CASES[9:11] + CASES[12:],
                         ids=IDS[1:8] + IDS[9:11] + IDS[12:])
def test_bfloat16_error_at_most_twice_naive_bfloat16(case):
    name, b, t, hq, hkv, d, build = case
    q, k, v, do = make(b, t, hq, hkv, d, dtype=torch.bfloat16, seed=7)
    mask, ok = build(t, b)
    o, lse = longseq.attention.forward(q, k, v, mask)
    dq, dk, dv = longseq.attention.backward(do, q, k, v, o, lse, mask)
    assert o.dtype == torch.bfloat16 and dq.dtype == torch.bfloat16 and lse.dtype == torch.float32
    exact = reference_of(q, k, v, do, ok)
    naive = ref.attention_and_grads(q, k, v, do, ok)  # torch bfloat16 throughout
    for nm, ours, nv, r in zip(("o", "lse", "dq", "dk", "dv"), (o, lse, dq, dk, dv), naive, exact):
        e_ours, e_naive = ref.max_err(ours, r), ref.max_err(nv, r)
        assert e_ours <= 2 * e_naive + 1e-6, f"{nm}: error {e_ours:.3g} > 2 x naive {e_naive:.3g}"


@pytest.mark.parametrize("case", [CASES[2], CASES[4], CASES[9]], ids=[IDS[2], IDS[4], IDS[9]])
def test_autograd_function_gives_the_engines_gradients(case):
    name, b, t, hq, hkv, d, build = case
    q, k, v, do = make(b, t, hq, hkv, d, seed=3)
    mask, ok = build(t, b)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    o, lse = lt.attention(qs, ks, vs, mask=mask, return_lse=True)
    (o * do).sum().backward()  # the lse unused: its gradient is None, not zeros
    ro, rlse, rdq, rdk, rdv = reference_of(q, k, v, do, ok)
    check_close("o", o.detach(), ro, 5e-6, 5e-6)
    for nm, g, r in (("dq", qs.grad, rdq), ("dk", ks.grad, rdk), ("dv", vs.grad, rdv)):
        check_close(nm, g, r, 2e-5, 2e-5)
    # The backward is deterministic: a second run gives the same bits.
    qs2, ks2, vs2 = (x.clone().requires_grad_(True) for x in (q, k, v))
    (lt.attention(qs2, ks2, vs2, mask=mask) * do).sum().backward()
    assert torch.equal(qs.grad, qs2.grad) and torch.equal(ks.grad, ks2.grad)


def reference_with_lse(q, k, v, do, u, ok, scale=None):
    """float64 gradients of (o * do).sum() + (lse * u).sum(); u None: the lse unused."""
    q, k, v = (x.double().requires_grad_(True) for x in (q, k, v))
    o, lse = ref.attention(q, k, v, ok, scale)
    loss = (o * do.double()).sum() if do is not None else 0
    if u is not None:
        loss = loss + (lse * u.double()).sum()
    loss.backward()
    # The lse does not depend on v: a loss on the lse alone leaves v without a gradient.
    return [torch.zeros_like(x) if x.grad is None else x.grad for x in (q, k, v)]


# Masks under which every row sees a key (an empty row's lse is -inf, and float64 autograd of
# log(0) gives NaN where the engine gives zero gradients).
@pytest.mark.parametrize("case", [CASES[2], CASES[3], CASES[4], CASES[9], CASES[13]],
                         ids=[IDS[2], IDS[3], IDS[4], IDS[9], IDS[13]])
@pytest.mark.parametrize("uses", ["o_and_lse", "lse_only"])
def test_a_loss_on_the_lse_gets_its_gradient(case, uses):
    name, b, t, hq, hkv, d, build = case
    q, k, v, do = make(b, t, hq, hkv, d, seed=11)
    u = torch.randn(do.shape[:-1], generator=torch.Generator().manual_seed(12))
    mask, ok = build(t, b)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    o, lse = lt.attention(qs, ks, vs, mask=mask, return_lse=True)
    assert lse.requires_grad
    loss = (lse * u).sum() if uses == "lse_only" else (o * do).sum() + (lse * u).sum()
    loss.backward()
    want = reference_with_lse(q, k, v, None if uses == "lse_only" else do, u, ok)
    for nm, g, r in zip(("dq", "dk", "dv"), (qs.grad, ks.grad, vs.grad), want):
        check_close(nm, g, r, 2e-5, 2e-5)
    # The raw backward takes the same gradient as dlse=.
    o2, lse2 = longseq.attention.forward(q, k, v, mask)
    zero = torch.zeros_like(do) if uses == "lse_only" else do
    dq, dk, dv = longseq.attention.backward(zero, q, k, v, o2, lse2, mask, dlse=u)
    assert torch.equal(dq, qs.grad) and torch.equal(dk, ks.grad) and torch.equal(dv, vs.grad)


def test_dlse_must_fit_the_lse():
    q, k, v, do = make(0, 9, 2, 2, 8)
    o, lse = longseq.attention.forward(q, k, v, "causal")
    with pytest.raises(ValueError, match=r"dlse.*\[9, 2\]"):
        longseq.attention.backward(do, q, k, v, o, lse, "causal", dlse=torch.zeros(9, 3))
    with pytest.raises(TypeError, match="dlse"):
        longseq.attention.backward(do, q, k, v, o, lse, "causal",
                                   dlse=torch.zeros(9, 2, dtype=torch.float64))


def test_autograd_bfloat16_and_softmax_scale():
    q, k, v, do = make(0, 33, 4, 2, 16, dtype=torch.bfloat16, seed=5)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    o = lt.attention(qs, ks, vs, mask="causal", softmax_scale=0.3)
    (o.float() * do.float()).sum().backward()
    assert o.dtype == qs.grad.dtype == torch.bfloat16
    ok = ref.allowed(33, causal=True)
    exact = reference_of(q, k, v, do, ok, scale=0.3)
    naive = ref.attention_and_grads(q, k, v, do, ok, scale=0.3)
    for ours, nv, r in zip((o.detach(), qs.grad, ks.grad, vs.grad),
                           (naive[0], naive[2], naive[3], naive[4]),
                           (exact[0], exact[2], exact[3], exact[4])):
        assert ref.max_err(ours, r) <= 2 * ref.max_err(nv, r) + 1e-6


def test_create_graph_gives_first_derivatives_and_refuses_a_second():
    q, k, v, do = make(0, 19, 4, 2, 8, seed=21)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    gq, gk = torch.autograd.grad((lt.attention(qs, ks, vs, mask="causal") * do).sum(), (qs, ks),
                                 create_graph=True)
    pq, pk = torch.autograd.grad((lt.attention(qs, ks, vs, mask="causal") * do).sum(), (qs, ks))
    assert torch.equal(gq.detach(), pq) and torch.equal(gk.detach(), pk)
    # A gradient penalty needs attention's second derivative. Taken as a constant, gq would give
    # the penalty no gradient and qs.grad would silently be the ones of qs.sum() alone.
    with pytest.raises(RuntimeError, match="longseq.torch.attention: a second derivative"):
        (gq.square().sum() + qs.sum()).backward()


@pytest.mark.parametrize("reentrant", [True, False])
def test_activation_checkpointing_gives_the_same_gradients(reentrant):
    # torch.utils.checkpoint reruns the forward inside the backward (reentrant: a nested
    # backward; otherwise saved-tensor hooks): the engine's deterministic kernels give the same
    # bits both ways.
    q, k, v, do = make(2, 23, 4, 1, 8, seed=22)
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(23))

    def block(x, y, z, w):
        return lt.attention(torch.tanh(x @ w), y, z, mask="window:7")

    grads = ref.grads_plain_and_checkpointed(block, (q, k, v, w), do, reentrant)
    for nm, plain, ck in zip(("dq", "dk", "dv", "dw"), *grads):
        assert torch.equal(plain, ck), f"{nm} differs under checkpointing"


def test_autocast_runs_attention_in_bfloat16_as_torchs_own_ops():
    q, k, v, do = make(0, 21, 4, 2, 8, seed=31)
    qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # v as an autocast linear leaves it (bfloat16); q and k float32, as after RoPE's tables
        o = lt.attention(qs, ks, vs.to(torch.bfloat16), mask="causal")
    assert o.dtype == torch.bfloat16
    (o.float() * do).sum().backward()
    assert qs.grad.dtype == vs.grad.dtype == torch.float32
    # The same bits as bfloat16 inputs without autocast, gradients cast back by torch.
    qb, kb, vb = (x.to(torch.bfloat16).requires_grad_(True) for x in (q, k, v))
    (lt.attention(qb, kb, vb, mask="causal").float() * do).sum().backward()
    assert torch.equal(o, lt.attention(qb, kb, vb, mask="causal"))
    for ours, want in ((qs, qb), (ks, kb), (vs, vb)):
        assert torch.equal(ours.grad, want.grad.float())
    # Without autocast the mixture is refused by name, never cast silently.
    with pytest.raises(TypeError, match="v has dtype bfloat16 but q has float32"):
        lt.attention(q, k, v.to(torch.bfloat16))


def test_q_k_v_may_be_one_tensor():
    x = torch.randn(20, 2, 8)
    xs = x.clone().requires_grad_(True)
    o = lt.attention(xs, xs, xs, mask="causal")  # self-attention on one tensor: inputs may alias
    o.sum().backward()
    ok = ref.allowed(20, causal=True)
    xd = x.double().requires_grad_(True)
    ro, _ = ref.attention(xd, xd, xd, ok)
    ro.sum().backward()
    check_close("o", o.detach(), ro.detach(), 5e-6, 5e-6)
    check_close("dx", xs.grad, xd.grad, 2e-5, 2e-5)


def test_numpy_in_numpy_out():
    q, k, v, do = (x.numpy() for x in make(0, 17, 2, 1, 8, seed=9))
    o, lse = longseq.attention.forward(q, k, v, "causal")
    assert isinstance(o, np.ndarray) and o.dtype == np.float32 and lse.shape == (17, 2)
    dq, dk, dv = longseq.attention.backward(do, q, k, v, o, lse, "causal")
    assert isinstance(dk, np.ndarray) and dk.shape == (17, 1, 8)
    ro, _, rdq, _, _ = reference_of(*(torch.from_numpy(x) for x in (q, k, v, do)),
                                    ref.allowed(17, causal=True))
    check_close("o", torch.from_numpy(o), ro, 5e-6, 5e-6)
    check_close("dq", torch.from_numpy(dq), rdq, 2e-5, 2e-5)


def test_threads_do_not_change_the_bits():
    q, k, v, do = make(0, 200, 2, 2, 32, seed=11)
    o1, l1 = longseq.attention.forward(q, k, v, "causal", threads=1)
    o2, l2 = longseq.attention.forward(q, k, v, "causal", threads=2)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    g1 = longseq.attention.backward(do, q, k, v, o1, l1, "causal", threads=1)
    g2 = longseq.attention.backward(do, q, k, v, o1, l1, "causal", threads=2)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))


def test_engine_seconds_time_each_call_inside_its_wall_time():
    # bench/python_attention.py's in-call reading subtracts these from each call's wall time:
    # they must be this call's (not a stale one's) and lie inside it.
    import time
    for t in (64, 1500):
        q, k, v, do = make(0, t, 4, 2, 32, seed=t)
        t0 = time.perf_counter()
        o, lse = longseq.attention.forward(q, k, v, "causal", threads=1)
        t1 = time.perf_counter()
        dq, dk, dv = longseq.attention.backward(do, q, k, v, o, lse, "causal", threads=1)
        t2 = time.perf_counter()
        fwd, bwd = longseq._core.engine_seconds()
        assert 0 < fwd < t1 - t0 and 0 < bwd < t2 - t1, (t, fwd, bwd, t1 - t0, t2 - t1)
        if t == 64:
            small = (fwd, bwd)
    # The long call's kernels take more than the short one's: the reading follows the work.
    assert fwd > small[0] and bwd > small[1], (small, fwd, bwd)
