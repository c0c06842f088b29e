"""One rank of longseq.comm.nccl() over torch.distributed (test_nccl.py starts P of them on the
CPU, test_cuda.py one on the GPU; on a machine with P GPUs, torchrun --nproc-per-node P runs it
as well). Prints one JSON line: what the mode found.

    python3 nccl_context_parallel.py MODE RANK WORLD STORE_FILE
    torchrun --nproc-per-node P nccl_context_parallel.py MODE     (rank and world from torchrun)

Modes:
  bootstrap  the bootstrap over the default group, each rank claiming GPU RANK: NCCL's id as
             every rank received it, the rank and the node ids (no GPU needed)
  subgroup   the same over torch.distributed.new_group([1, 2]) (ranks 1 and 2; rank 1 is the
             id's source, so its global rank is looked up)
  open       longseq.comm.nccl() as a user calls it; its error on a machine without GPUs
  same_gpu   longseq.comm.nccl(device=0) on every rank: two ranks of one host on one GPU
  bad_device longseq.comm.nccl(device=-1)
  attention  context parallelism on CUDA tensors over the nccl group, every algorithm that runs
             at this world size, forward and backward against float64 attention on the host
             (needs a GPU per rank)
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import longseq.comm as lc
import longseq.torch as lt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402


def attention_mode(rank, world):
    torch.cuda.set_device(rank % torch.cuda.device_count())
    g = lc.nccl(timeout=120)
    assert g.backend == "nccl" and g.size == world and g.rank == rank and g.device is not None
    seq, hq, hkv, d = 203, 4, 2, 64  # odd length: the layout pads
    algos = ["ring", "burst"] + (["ulysses"] if hkv % world == 0 else [])
    if world % 2 == 0 and world >= 4:
        algos.append("double-ring:2")
    gen = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(seq, h, d, generator=gen) for h in (hq, hkv, hkv, hq))
    ok = ref.allowed(seq, causal=True)
    exact = ref.attention_and_grads(*(x.double() for x in (q, k, v, do)), ok)
    # bfloat16's bound: torch's naive bfloat16 attention on the same GPU (rule 2, design.md §9).
    naive = ref.attention_and_grads(*(x.to(torch.bfloat16).cuda() for x in (q, k, v, do)),
                                    ok.cuda())
    out = {"naive_bf16": [ref.max_err(x.cpu(), w) for x, w in zip(naive, exact)], "errors": {}}
    for algo in algos:
        for dtype in (torch.float32, torch.bfloat16):
            cp = lt.ContextParallel(g, algo=algo, balance="zigzag", seq=seq, mask="causal")
            qs, ks, vs = (cp.shard(x.to(dtype).cuda()).requires_grad_(True) for x in (q, k, v))
            o, lse = cp.attention(qs, ks, vs, return_lse=True)
            assert o.is_cuda and o.dtype == dtype and lse.is_cuda and lse.dtype == torch.float32
            o.backward(cp.shard(do.to(dtype).cuda()))
            assert qs.grad.dtype == dtype
            # Each rank's leaf shard holds its own tokens' gradients; unshard gathers them.
            got = [cp.unshard(t.detach()) for t in (o, lse, qs.grad, ks.grad, vs.grad)]
            out["errors"][f"{algo}/{str(dtype)[6:]}"] = [ref.max_err(x.cpu(), w)
                                                        for x, w in zip(got, exact)]
    return out


def main():
    mode = sys.argv[1]
    if len(sys.argv) == 5:
        rank, world = int(sys.argv[2]), int(sys.argv[3])
        dist.init_process_group("gloo", init_method=f"file://{sys.argv[4]}", rank=rank,
                                world_size=world)
    else:
        dist.init_process_group("gloo")  # torchrun's environment
        rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank}
    try:
        if mode == "bootstrap":
            uid, r, nodes = lc._bootstrap("test", None, rank)
            out.update(id=uid.hex(), group_rank=r, nodes=nodes)
        elif mode == "subgroup":
            pg = dist.new_group([1, 2])
            if rank in (1, 2):
                uid, r, nodes = lc._bootstrap("test", pg, rank)
                out.update(id=uid.hex(), group_rank=r, nodes=nodes)
            else:
                out.update(group=repr(lc.nccl(pg)))  # not a member: refused
        elif mode == "open":
            out.update(group=repr(lc.nccl()))
        elif mode == "same_gpu":
            out.update(group=repr(lc.nccl(device=0)))
        elif mode == "bad_device":
            out.update(group=repr(lc.nccl(device=-1)))
        elif mode == "attention":
            out.update(attention_mode(rank, world))
        else:
            raise SystemExit(f"unknown mode {mode}")
    except (RuntimeError, ValueError, TypeError) as e:
        out.update(error=f"{type(e).__name__}: {e}")
    print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
