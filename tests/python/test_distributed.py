"""longseq.attention.distributed: P ranks as threads of this process, every algorithm and layout,
equal to the single-process attention (tests/README.md rule 4) and to the float64 reference.

Tolerance: the distributed passes merge (O, LSE) partials and sum gradient partials in another
order than one block does, so o and lse within 1e-5 + 1e-5 |ref|, gradients 5e-5 + 5e-5 |ref|
of float64 (twice the single kernel's bounds of test_attention.py)."""

import pytest
import torch

import longseq
import reference as ref


def inputs(n, hq, hkv, d, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, hq, d, generator=g), torch.randn(n, hkv, d, generator=g),
            torch.randn(n, hkv, d, generator=g), torch.randn(n, hq, d, generator=g))


def close(got, want, atol, rtol):
    got, want = got.double(), want.double()
    inf = torch.isinf(got) & torch.isinf(want)
    return bool((inf | ((got - want).abs() <= atol + rtol * want.abs())).all())


# (world, nodes, algo, balance, mask kind)
RUNS = [
    (1, 0, "burst", "contiguous", "causal"),
    (2, 0, "ring", "zigzag", "causal"),
    (3, 0, "burst", "striped", "window"),
    (3, 0, "ring", "contiguous", "docs"),
    (4, 2, "double-ring", "zigzag", "causal"),
    (4, 2, "double-ring:2:ring", "contiguous", "full"),
    (4, 0, "startrail:2", "zigzag", "causal"),
    (4, 2, "startrail:2:rings", "striped", "causal"),
    (2, 0, "ulysses", "zigzag", "causal"),
    (4, 0, "usp:2", "zigzag", "docs"),
    (4, 0, "usp:2:ring", "striped", "window"),
    (4, 0, "burst", "block-striped", "blocks"),
]


@pytest.mark.parametrize("run", RUNS, ids=[f"{r[2]}-P{r[0]}-{r[3]}-{r[4]}" for r in RUNS])
def test_every_algorithm_equals_one_process(run):
    world, nodes, algo, balance, kind = run
    n, hq, hkv, d = 53, 4, 2, 16
    q, k, v, do = inputs(n, hq, hkv, d, seed=world * 100 + len(algo))
    if kind == "docs":
        ids = torch.tensor([i // 7 for i in range(n)], dtype=torch.int32)  # across shards
        mask, ok = longseq.Mask(doc_ids=ids), ref.allowed(n, doc_ids=ids)
    elif kind == "blocks":
        bs = 8
        nb = (n + bs - 1) // bs
        bm = (torch.arange(nb)[:, None] - torch.arange(nb)[None, :]).abs() <= 1
        mask = longseq.Mask("causal", block_mask=bm.to(torch.uint8), block_size=bs)
        ok = ref.allowed(n, causal=True, block_mask=bm, block_size=bs)
    elif kind == "window":
        mask, ok = "window:7", ref.allowed(n, window=7)
    else:
        mask, ok = kind, ref.allowed(n, causal=kind == "causal")
    r = longseq.attention.distributed(q, k, v, world=world, nodes=nodes, algo=algo,
                                      balance=balance, mask=mask, do=do, threads=1)
    exact = ref.attention_and_grads(*(x.double() for x in (q, k, v, do)), ok)
    for name, got, want, tol in zip(("o", "lse", "dq", "dk", "dv"), r[:5], exact,
                                    (1e-5, 1e-5, 5e-5, 5e-5, 5e-5)):
        assert close(got, want, tol, tol), f"{name}: max error {ref.max_err(got, want):.3g}"
    # The single-process engine on the same inputs agrees to the same bounds.
    o1, lse1 = longseq.attention.forward(q, k, v, mask)
    assert close(r.o, o1, 1e-5, 1e-5)
    assert len(r.stats["ranks"]) == world and r.stats["algo"] == longseq.attention.distributed(
        q, k, v, world=world, nodes=nodes, algo=algo, balance=balance, mask=mask).stats["algo"]
    sent = sum(x["bytes_sent_intra"] + x["bytes_sent_inter"] for x in r.stats["ranks"])
    assert (sent > 0) == (world > 1)


def test_bf16_precision_runs_the_bf16_kernels():
    q, k, v, do = inputs(40, 2, 2, 16, seed=4)
    f = longseq.attention.distributed(q, k, v, world=2, mask="causal", do=do)
    b = longseq.attention.distributed(q, k, v, world=2, mask="causal", do=do, precision="bf16")
    assert b.o.dtype == torch.float32 and not torch.equal(f.o, b.o)
    assert close(b.o, f.o, 2e-2, 2e-2)  # bf16 operands: about 3 significant digits
