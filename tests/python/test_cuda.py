"""CUDA tensors through longseq.torch.attention (labels python;cuda): the attention executor at
world 1 on the tensors' GPU (python/src/device.hpp). Skipped where torch sees no GPU (this
machine's torch has no CUDA); scripts/gpu_check.sh runs it on the GPU machine.

Against float64 on the host (reference.py) with test_attention.py's bounds for float32 (the GPU's
generic fp32 kernels sum in a fixed order, as the CPU's), and rule 2 for bfloat16 against torch's
naive bf16 attention on the same GPU; the DLPack stream rule: inputs written on a side stream
are read after that stream's work. Context parallelism on CUDA tensors: longseq.comm.nccl() over
torch.distributed at world 1 (nccl_context_parallel.py; NCCL runs one rank per GPU, so one GPU
holds one rank), the refusal of CUDA tensors over an MPI group, and examples/torch_cp_llama.py
with --device cuda against the same run on the CPU."""

import json
import os
import subprocess
import sys

import pytest
import torch

import longseq
import longseq.torch as lt
import reference as ref

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)
if not longseq.info()["cuda"]["built"]:
    pytest.skip("this build of longseq has no CUDA", allow_module_level=True)


def make(t, hq, hkv, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t, h, d, generator=g).to(dtype) for h in (hq, hkv, hkv, hq)]


@pytest.mark.parametrize("mask,ok", [("causal", lambda t: ref.allowed(t, causal=True)),
                                     ("window:9", lambda t: ref.allowed(t, window=9)),
                                     (None, lambda t: ref.allowed(t))])
def test_float32_on_the_gpu_matches_float64(mask, ok):
    q, k, v, do = make(203, 4, 2, 64, torch.float32, 1)
    qs, ks, vs = (x.cuda().requires_grad_(True) for x in (q, k, v))
    o, lse = lt.attention(qs, ks, vs, mask=mask, return_lse=True)
    assert o.is_cuda and o.dtype == torch.float32 and lse.is_cuda
    o.backward(do.cuda())
    exact = ref.attention_and_grads(*(x.double() for x in (q, k, v, do)), ok(203))
    for got, want, tol in zip((o, lse, qs.grad, ks.grad, vs.grad), exact,
                              (5e-6, 5e-6, 2e-5, 2e-5, 2e-5)):
        got, want = got.detach().double().cpu(), want
        inf = torch.isinf(got) & torch.isinf(want)
        assert bool((inf | ((got - want).abs() <= tol + tol * want.abs())).all()), \
            ref.max_err(got, want)


def test_bfloat16_on_the_gpu_within_twice_naive():
    q, k, v, do = make(300, 8, 8, 128, torch.bfloat16, 2)  # D = 128: the tensor-core path
    qs, ks, vs = (x.cuda().requires_grad_(True) for x in (q, k, v))
    o = lt.attention(qs, ks, vs, mask="causal")
    o.backward(do.cuda())
    assert o.dtype == torch.bfloat16 and qs.grad.dtype == torch.bfloat16
    ok = ref.allowed(300, causal=True)
    exact = ref.attention_and_grads(*(x.double() for x in (q, k, v, do)), ok)
    naive = ref.attention_and_grads(*(x.cuda() for x in (q, k, v, do)), ok.cuda())
    for ours, nv, want in zip((o.detach(), qs.grad, ks.grad, vs.grad),
                              (naive[0], naive[2], naive[3], naive[4]),
                              (exact[0], exact[2], exact[3], exact[4])):
        assert ref.max_err(ours.cpu(), want) <= 2 * ref.max_err(nv.cpu(), want) + 1e-6


def test_inputs_from_a_side_stream_are_read_after_it():
    q, k, v, _ = make(4096, 4, 4, 64, torch.float32, 3)
    want = lt.attention(q.cuda(), k.cuda(), v.cuda(), mask="causal")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        qc = torch.zeros(4096, 4, 64, device="cuda")
        torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time before the copy lands
        qc.copy_(q.cuda(non_blocking=True))
        o = lt.attention(qc, k.cuda(), v.cuda(), mask="causal")
    torch.cuda.synchronize()
    assert torch.equal(o, want)
    assert longseq._core.data_pointer(qc) == qc.data_ptr()


@pytest.mark.skipif(longseq.info()["nccl"] != "built", reason="this build of longseq has no NCCL")
def test_context_parallel_over_nccl_at_world_one(tmp_path):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_context_parallel.py")
    p = subprocess.run([sys.executable, script, "attention", "0", "1", str(tmp_path / "store")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert "error" not in got, got["error"]
    naive = got["naive_bf16"]
    assert set(got["errors"]) == {f"{a}/{t}" for a in ("ring", "burst", "ulysses")
                                  for t in ("float32", "bfloat16")}
    for name, errs in got["errors"].items():
        if name.endswith("float32"):
            assert max(errs[:2]) <= 1e-4 and max(errs[2:]) <= 5e-4, (name, errs)
        else:  # o, dq, dk, dv within twice torch's naive bfloat16 attention
            for i in (0, 2, 3, 4):
                assert errs[i] <= 2 * naive[i] + 1e-6, (name, i, errs, naive)


@pytest.mark.skipif(longseq.info()["mpi"] != "built", reason="this build of longseq has no MPI")
def test_cuda_tensors_over_an_mpi_group_are_refused_naming_nccl():
    cp = lt.ContextParallel(longseq.comm.mpi(), seq=16)
    q = torch.randn(cp.local_len, 2, 8, device="cuda")
    with pytest.raises(ValueError, match="CUDA tensors need a longseq.comm.nccl\\(\\) group"):
        cp.attention(q, q, q)


@pytest.mark.skipif(longseq.info()["nccl"] != "built" or longseq.info()["mpi"] != "built",
                    reason="this build of longseq lacks NCCL or MPI")
def test_the_example_on_the_gpu_follows_the_cpu(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    example = os.path.join(root, "examples", "torch_cp_llama.py")
    common = ["--seq", "999", "--steps", "3", "--layers", "2", "--hidden", "64", "--heads", "4",
              "--kv-heads", "2", "--threads", "2"]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    logs = {}
    for dev in ("cpu", "cuda"):
        out = tmp_path / f"{dev}.json"
        p = subprocess.run([sys.executable, example, *common, "--device", dev, "--json", str(out)],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        logs[dev] = json.loads(out.read_text())
    assert logs["cuda"]["device"].startswith("cuda")
    for a, b in zip(logs["cpu"]["steps"], logs["cuda"]["steps"]):
        # Other kernels and summation orders (cuBLAS, the GPU attention): fp32 rounding apart.
        assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
