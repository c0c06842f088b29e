"""A small LLaMA in plain PyTorch whose attention is longseq's, trained with context parallelism.

    mpirun -np 4 python3 examples/torch_cp_llama.py            # 4 ranks, each a quarter of every
    python3 examples/torch_cp_llama.py                          # one process: the same losses
    mpirun -np 4 python3 examples/torch_cp_llama.py --cp 2 --batch 2   # dp 2 x cp 2
    python3 examples/torch_cp_llama.py --batch 2                # the same losses again

Each process is one rank (longseq.comm.mpi(): mpirun's processes, or a world of 1 without it).
Every sequence of --seq tokens of the KJV text is cut into shards by a balanced layout
(ContextParallel: --balance zigzag by default); each rank embeds its shard, applies RoPE at the
global positions of its tokens (cp.positions()), and runs every attention layer as longseq's
distributed attention (--algo burst) with autograd. The rest of the model (RMSNorm, projections,
SwiGLU, the LM head) is ordinary PyTorch on the local tokens. The loss of a step is the mean over
the whole sequence: each rank sums its tokens' losses over the global token count, and the
gradients are summed over the ranks with longseq's all_reduce, so every rank takes the same
AdamW step and the run equals the one-process run within fp32 rounding (tests/python/tests.cmake
checks losses and gradients).

Data x context parallelism: --cp C puts C consecutive ranks on each sequence (world.split) and
makes the world's other factor data-parallel replicas; a step's --batch sequences are shared out
among the replicas, each taking its share one after another with the gradients accumulating, and
the loss is the mean over every token of the batch. So the losses depend on --batch alone, not on
how the world is split.

On GPUs (--device cuda), one process per GPU started by torchrun (or any launcher that sets
torch.distributed's environment; a plain python3 is a world of 1): the ranks are those of
torch.distributed, longseq.comm.nccl() carries NCCL's id over it, and the model, the shards and
the collectives live on each rank's GPU:

    torchrun --nproc-per-node 4 examples/torch_cp_llama.py --device cuda

Nothing here needs more than torch and longseq; the same script runs in your own model by
replacing attention() below with yours around cp.attention().
"""

import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import longseq
import longseq.torch as lt

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--seq", type=int, default=2048, help="tokens per sequence (any length)")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--hidden", type=int, default=128)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--kv-heads", type=int, default=2)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--cp", type=int, default=0,
               help="ranks per sequence (0: the whole world); the world's other factor is data "
                    "parallelism")
p.add_argument("--batch", type=int, default=1,
               help="sequences per step, shared out among the data-parallel replicas")
p.add_argument("--algo", default="burst", help="the --algo grammar of longseq")
p.add_argument("--balance", default="zigzag")
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--threads", type=int, default=0, help="torch and longseq threads per rank")
p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
               help="cpu: ranks are mpirun's processes (longseq.comm.mpi()); cuda: one GPU per "
                    "process, ranks from torch.distributed (longseq.comm.nccl())")
p.add_argument("--data", default=None, help="text file (default: the KJV text longseq ships)")
p.add_argument("--json", default=None, help="write losses and timings here (rank 0)")
p.add_argument("--dump-grads", default=None,
               help="write the first step's summed gradients here (safetensors, rank 0)")
args = p.parse_args()


def open_group():
    """This process's rank: mpirun's on the CPU; torch.distributed's on GPUs (torchrun's
    environment, or a world of 1 without it), its GPU the local rank's."""
    if args.device == "cpu":
        return longseq.comm.mpi(), torch.device("cpu")
    if not torch.cuda.is_available():
        p.error("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)")
    import tempfile
    import torch.distributed as dist
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")  # it only carries NCCL's id; longseq's NCCL does the rest
    else:
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    return longseq.comm.nccl(), torch.device("cuda", local)


group, device = open_group()
rank, world = group.rank, group.size
cp_size = args.cp or world
if cp_size < 1 or world % cp_size:
    p.error(f"--cp {args.cp} must divide the {world} ranks")
dp = world // cp_size
if args.batch < 1 or args.batch % dp:
    p.error(f"--batch {args.batch} must be a positive multiple of the {dp} data-parallel replicas")
replica, per_replica = rank // cp_size, args.batch // dp
threads = args.threads or max(1, (os.cpu_count() or 1) // world)
torch.set_num_threads(threads)
# cp_size consecutive ranks share a sequence; with dp = 1 the split is the whole world.
cp = lt.ContextParallel(group.split(replica, rank), algo=args.algo, balance=args.balance,
                        seq=args.seq, mask="causal", threads=threads)

# ---- data: byte-level tokens of the text; every rank reads the same, then takes its shard ----
path = args.data or longseq.data_file("kjv-genesis-exodus.txt")
tok = longseq.Tokenizer()
with open(path, encoding="utf-8") as f:
    ids = torch.tensor(tok.encode_documents([f.read()]), dtype=torch.int64)


def batch(index):
    """This rank's shard of sequence `index`: input ids, labels (the next token; -100 where there
    is none: the last token and the layout's padding) and global positions."""
    start = (index * args.seq) % (len(ids) - args.seq - 1)
    x = ids[start:start + args.seq]
    y = ids[start + 1:start + args.seq + 1]
    pos = cp.positions()
    labels = cp.shard(y).masked_fill(pos < 0, -100)
    return cp.shard(x).to(device), labels.to(device), pos.clamp(min=0).to(device)


# ---- the model ----------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, pos, theta=10000.0):
    """Rotary embedding at global positions (Hugging Face's rotate_half convention)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Block(nn.Module):
    def __init__(self, h, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, h // heads
        self.norm1, self.norm2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, heads * self.hd, bias=False)
        self.k = nn.Linear(h, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(h, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, h, bias=False)
        inter = int(8 * h / 3 + 63) // 64 * 64
        self.gate = nn.Linear(h, inter, bias=False)
        self.up = nn.Linear(h, inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def attention(self, x, pos):
        t = x.shape[0]
        q = rope(self.q(x).view(t, self.heads, self.hd), pos)
        k = rope(self.k(x).view(t, self.kv_heads, self.hd), pos)
        v = self.v(x).view(t, self.kv_heads, self.hd)
        # longseq: exact attention over the whole sequence, this rank holding its shard.
        o = cp.attention(q.contiguous(), k.contiguous(), v.contiguous())
        return self.o(o.reshape(t, -1))

    def forward(self, x, pos):
        x = x + self.attention(self.norm1(x), pos)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab, h, layers, heads, kv_heads):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(h)

    def forward(self, ids, pos):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x, pos)
        return self.norm(x) @ self.embed.weight.t()  # tied LM head


torch.manual_seed(args.seed)
model = Llama(tok.vocab_size, args.hidden, args.layers, args.heads, args.kv_heads)
for name, t in model.named_parameters():  # LLaMA's initialisation: N(0, 0.02), norms at 1
    if t.dim() > 1:
        nn.init.normal_(t, std=0.02)
model.to(device)  # initialised on the CPU: the same weights on every device
for t in model.parameters():  # rank 0's initial weights everywhere
    group.broadcast(t.data, root=0)
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
# Labelled tokens of a step: every sequence's last token's label is the next one in the text.
count = args.seq * args.batch

log = {"device": str(device), "world": world, "cp": cp_size, "dp": dp, "batch": args.batch,
       "algo": cp.algo, "balance": cp.balance, "seq": args.seq, "local_len": cp.local_len,
       "threads": threads, "steps": []}
for step in range(args.steps):
    t0 = time.perf_counter()
    cp.stats(reset=True)
    opt.zero_grad(set_to_none=False)
    loss = torch.zeros((), device=device)
    for j in range(per_replica):  # this replica's sequences of the batch, gradients accumulating
        x, y, pos = batch(step * args.batch + replica * per_replica + j)
        logits = model(x, pos)
        part = F.cross_entropy(logits, y, ignore_index=-100, reduction="sum") / count
        part.backward()
        loss += part.detach()
    t_back = time.perf_counter()
    flat = torch.cat([t.grad.reshape(-1) for t in model.parameters()])
    group.all_reduce(flat)  # the gradient of the batch's mean loss: every rank's tokens
    off = 0
    for t in model.parameters():
        n = t.numel()
        t.grad.copy_(flat[off:off + n].view_as(t))
        off += n
    total = group.all_reduce(loss).item()
    if step == 0 and args.dump_grads and rank == 0:
        longseq.save_safetensors(args.dump_grads, {n: t.grad.cpu() for n, t in
                                                   model.named_parameters()})
    opt.step()
    t1 = time.perf_counter()
    # longseq's share of the step: every attention layer's forward and backward as the engine
    # timed them (compute and waiting for other ranks).
    s = cp.stats()
    attn = sum(s[p][k] for p in ("forward", "backward") for k in ("compute_s", "wait_s"))
    rec = {"step": step, "loss": total, "step_s": t1 - t0, "attention_s": attn,
           "allreduce_s": t1 - t_back, "grad_norm": float(flat.norm())}
    log["steps"].append(rec)
    if rank == 0:
        print(f"step {step:3d}  loss {total:.6f}  {t1 - t0:.3f} s "
              f"(longseq attention {attn:.3f} s)", flush=True)

if rank == 0 and args.json:
    with open(args.json, "w") as f:
        json.dump(log, f, indent=1)
