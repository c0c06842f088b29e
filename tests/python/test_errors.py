"""Errors, not crashes: whatever a Python caller passes gives a Python exception naming the
argument and the values (ValueError, TypeError; RuntimeError for a failed world), never a
segfault or an abort. The named refusals first, then generated inputs (hypothesis): a crash
kills this process and fails the test. LONGSEQ_FUZZ_SCALE=N runs N times CI's generated examples
(a deeper search by hand: N = 100 is 36,000 calls, 2 minutes on a 2-core Xeon)."""

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import longseq
import longseq.torch as lt


def qkv(t=16, hq=4, hkv=2, d=8, dtype=torch.float32):
    return (torch.randn(t, hq, d).to(dtype), torch.randn(t, hkv, d).to(dtype),
            torch.randn(t, hkv, d).to(dtype))


def _torch_exports_bool():
    try:
        torch.utils.dlpack.to_dlpack(torch.zeros(1, dtype=torch.bool))
        return True
    except RuntimeError:  # torch 1.13: "Bool type is not supported by dlpack"
        return False


def raises(exc, match, fn, *a, **kw):
    with pytest.raises(exc, match=match):
        fn(*a, **kw)


def test_named_refusals():
    q, k, v = qkv()
    f = longseq.attention.forward
    raises(TypeError, "q has dtype float64, expected float32 or bfloat16", f, q.double(),
           k.double(), v.double())
    raises(TypeError, "k has dtype bfloat16 but q has float32", f, q, k.bfloat16(), v)
    raises(ValueError, r"q has shape \[16, 32\], expected", f, q.reshape(16, 32), k, v)
    raises(ValueError, r"k has shape \[15, 2, 8\], expected \[16, 2, 8\]", f, q, k[:15], v)
    raises(ValueError, "query heads 4 are no multiple of key/value heads 3", f, q,
           torch.randn(16, 3, 8), torch.randn(16, 3, 8))
    raises(ValueError, r"q \[16, 4, 8\] is not contiguous.*q.contiguous", f,
           q.transpose(0, 1).contiguous().transpose(0, 1), k, v)
    raises(ValueError, "every extent must be positive", f, q[:0], k[:0], v[:0])
    raises(ValueError, r"doc_ids has shape \[10\], expected \[16\]", f, q, k, v,
           longseq.Mask(doc_ids=torch.zeros(10, dtype=torch.int32)))
    raises(ValueError, r"block_mask has shape \[2, 2\], expected \[3, 3\]", f, q, k, v,
           longseq.Mask(block_mask=torch.ones(2, 2, dtype=torch.uint8), block_size=6))
    raises(ValueError, "cu_seqlens .* must start at 0 and end at the 16 tokens", f, q, k, v,
           longseq.Mask(cu_seqlens=torch.tensor([0, 5, 9], dtype=torch.int32)))
    raises(ValueError, "cu_seqlens decreases at entry 2", f, q, k, v,
           longseq.Mask(cu_seqlens=torch.tensor([0, 9, 5, 16])))
    raises(ValueError, "unknown --mask term 'diagonal'", f, q, k, v, "diagonal")
    raises(ValueError, "window:W needs W >= 1", f, q, k, v, "window:0")
    raises(TypeError, "mask must be None, a str", f, q, k, v, 3)
    raises(TypeError, r"got Tensor \(a dense \[T, T\] mask .*block_size=1", f, q, k, v,
           torch.ones(16, 16, dtype=torch.bool))
    raises(ValueError, "softmax_scale nan must be finite", f, q, k, v, None, float("nan"))
    raises(TypeError, "q is a list, not a tensor", f, [1.0], k, v)
    raises(ValueError, "lse has shape", f, q, k, v, lse=torch.empty(16, 3))
    raises(TypeError, "o has dtype bfloat16, expected float32", f, q, k, v,
           out=torch.empty(16, 4, 8, dtype=torch.bfloat16))
    raises(ValueError, "o and q share memory", f, q, k, v, out=q)
    raises(ValueError, "dq and q share memory|dk and k share memory", longseq._core.attention_backward,
           q, q, k, v, q.clone(), torch.zeros(16, 4), q, k, v, longseq.Mask().bind(16))
    raises(ValueError, "precision bf16 for float32 host tensors", f, q, k, v, precision="bf16")
    b = longseq.attention.backward
    o, lse = f(q, k, v)
    raises(ValueError, r"dk has shape \[16, 4, 8\], expected \[16, 2, 8\]", b, q, q, k, v, o,
           lse, dk=torch.empty(16, 4, 8))
    raises(TypeError, "dv has dtype bfloat16, expected float32", b, q, q, k, v, o, lse,
           dv=torch.empty(16, 2, 8, dtype=torch.bfloat16))
    raises(ValueError, "dq and q share memory", b, q, q, k, v, o, lse, dq=q)
    raises(ValueError, r"threads -1 must be in \[0, 1024\]", f, q, k, v, threads=-1)
    raises(ValueError, r"threads 100000 must be in \[0, 1024\]", f, q, k, v, threads=100000)
    # torch refuses a tensor that requires grad: the argument is named.
    raises(ValueError, "longseq.attention.forward: q: its __dlpack__ failed", f,
           q.requires_grad_(True), k, v)
    q.requires_grad_(False)
    # A dtype torch cannot export (bool, in 1.13's DLPack): named too, whichever way it crossed.
    if not _torch_exports_bool():
        raises(ValueError, "longseq.attention.forward: q: its __dlpack__ failed", f,
               q.to(torch.bool), k, v)
    # numpy read-only arrays cannot be exported as writable outputs.
    ro = np.zeros((16, 4, 8), np.float32)
    ro.setflags(write=False)
    raises(ValueError, "o: its __dlpack__ failed", f, q.numpy(), k.numpy(), v.numpy(), out=ro)
    raises(TypeError, "not a torch.Tensor", lt.attention, q.numpy(), k, v)
    raises(TypeError, "longseq.attention.forward: q has dtype complex64, which longseq takes "
           "nowhere", f, q.to(torch.complex64), k, v)
    # A tensor torch cannot even place for DLPack (the meta device): named as well.
    raises(ValueError, "longseq.attention.forward: k: its __dlpack_device__ failed", f, q,
           torch.empty(16, 2, 8, device="meta"), v)


def test_distributed_refusals():
    q, k, v = qkv(t=20)
    d = longseq.attention.distributed
    raises(ValueError, "startrail:3 needs C\\*C=9 to divide world 4|startrail:3", d, q, k, v,
           world=4, algo="startrail:3")
    raises(ValueError, "unknown balance 'spiral'", d, q, k, v, world=2, balance="spiral")
    raises(ValueError, r"world 0 must be in \[1, 1024\]", d, q, k, v, world=0)
    raises(ValueError, r"world 5000 must be in \[1, 1024\]", d, q, k, v, world=5000)
    raises(ValueError, "Ulysses over 3 ranks needs the query heads 4 to be divisible by 3", d, q,
           k, v, world=3, algo="ulysses")
    raises(ValueError, "nodes 3 must divide world 4", d, q, k, v, world=4, nodes=3)
    raises(ValueError, "--precision 'fp16'", d, q, k, v, world=2, precision="fp16")
    raises(ValueError, "backward 'x' is not burst or ring", d, q, k, v, world=2,
           algo="double-ring:x")
    raises(ValueError, r"q has shape \[1, 20, 4, 8\], expected \[T, Hq, D\]", d, q[None], k[None],
           v[None], world=2)


def test_mask_and_tokenizer_refusals(tmp_path):
    raises(TypeError, "text must be a str", longseq.Mask, 5)
    raises(ValueError, "give doc_ids or cu_seqlens, not both", longseq.Mask(
        doc_ids=torch.zeros(4, dtype=torch.int32), cu_seqlens=torch.tensor([0, 4])).bind, 4)
    raises(ValueError, "block_size 4 without a block_mask", longseq.Mask(block_size=4).bind, 8)
    raises(ValueError, "does not fit 32 bits", longseq.Mask(
        doc_ids=torch.tensor([0, 2**40])).bind, 2)
    raises(ValueError, "cannot read|No such file|does not exist|open", longseq.Tokenizer,
           tmp_path / "missing.json")
    raises(ValueError, "id 300 is outside the vocabulary of 257", longseq.Tokenizer().decode,
           [65, 300])
    raises(ValueError, "needs a tokenizer.json", longseq.Tokenizer, None, "</s>")
    raises(ValueError, "cannot|open|No such", longseq.load_safetensors, tmp_path / "none.st")
    raises(TypeError, r"save_safetensors: half has dtype float16, which longseq takes nowhere "
           r"\(its tensors are float32, bfloat16, float64", longseq.save_safetensors,
           tmp_path / "half.st", {"half": torch.ones(3, dtype=torch.float16)})


# ---- generated inputs ----------------------------------------------------------------------------

DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.uint8, torch.float16]
MASKS = st.sampled_from([None, "causal", "full", "window:3", "window:0", "causal,window:2",
                         "blocks", "document", "", "causal,causal", "window:-1", "window:99999"])


def tensor(shape, dtype, contiguous):
    t = torch.zeros(shape, dtype=torch.float64).normal_().to(dtype) if dtype.is_floating_point \
        else torch.zeros(shape, dtype=dtype)
    if not contiguous and len(shape) >= 2 and shape[0] > 1:
        t = t.transpose(0, 1).contiguous().transpose(0, 1)
    return t


dims = st.integers(min_value=0, max_value=6)


def examples(n):
    """CI's example count n, times LONGSEQ_FUZZ_SCALE (a positive integer; default 1)."""
    scale = os.environ.get("LONGSEQ_FUZZ_SCALE", "1")
    if not scale.isdigit() or int(scale) < 1:
        raise ValueError(f"LONGSEQ_FUZZ_SCALE={scale!r}: expected a positive integer")
    return n * int(scale)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(qs=st.lists(dims, min_size=0, max_size=5), ks=st.lists(dims, min_size=0, max_size=5),
       vs=st.lists(dims, min_size=0, max_size=5), dq=st.sampled_from(DTYPES),
       dk=st.sampled_from(DTYPES), mask=MASKS, contiguous=st.booleans(),
       scale=st.sampled_from([None, 0.0, -1.0, 0.5, float("inf")]),
       numpy=st.booleans())
def test_generated_calls_raise_or_match_shapes(qs, ks, vs, dq, dk, mask, contiguous, scale,
                                               numpy):
    q, k, v = tensor(qs, dq, contiguous), tensor(ks, dk, True), tensor(vs, dk, True)
    if numpy and dq != torch.bfloat16 and dk != torch.bfloat16:
        q, k, v = q.numpy(), k.numpy(), v.numpy()
    try:
        o, lse = longseq.attention.forward(q, k, v, mask, scale)
    except (ValueError, TypeError):
        return
    assert tuple(o.shape) == tuple(q.shape) and tuple(lse.shape) == tuple(q.shape[:-1])
    try:
        longseq.attention.backward(o, q, k, v, o, lse, mask, scale)
    except (ValueError, TypeError):
        pass


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(min_value=-2, max_value=40), world=st.integers(min_value=-1, max_value=5),
       algo=st.sampled_from(["ring", "burst", "double-ring", "double-ring:2", "startrail:1",
                             "startrail:2", "ulysses", "usp:2", "usp:3:ring", "bogus", "usp:0"]),
       balance=st.sampled_from(["contiguous", "zigzag", "striped", "block-striped", "x"]),
       heads=st.sampled_from([(1, 1), (2, 1), (4, 2), (6, 3), (3, 2)]),
       mask=st.sampled_from(["causal", "full", "window:4", "blocks"]),
       nodes=st.integers(min_value=0, max_value=3))
def test_generated_distributed_calls_raise_or_run(n, world, algo, balance, heads, mask, nodes):
    hq, hkv = heads
    q = torch.randn(max(n, 0), hq, 4)
    k = torch.randn(max(n, 0), hkv, 4)
    m = mask
    if mask == "blocks" and n > 0:
        nb = (n + 3) // 4
        m = longseq.Mask("causal", block_mask=torch.ones(nb, nb, dtype=torch.uint8), block_size=4)
    try:
        r = longseq.attention.distributed(q, k, k.clone(), world=world, algo=algo,
                                          balance=balance, mask=m, nodes=nodes, timeout=60)
    except (ValueError, TypeError):
        return
    assert r.o.shape == q.shape and len(r.stats["ranks"]) == world
