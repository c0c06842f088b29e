#!/usr/bin/python3
"""The peer of `longseq train`: one training step of the same LLaMA written plainly in PyTorch
(what a framework user writes: nn.Linear projections, rotate_half RoPE, scores = q k^T * scale +
causal mask, softmax, SwiGLU MLP, tied LM head, mean cross-entropy, autograd, torch.optim.AdamW),
fp32 on the CPU with `--threads` intra-op threads. One sequence length per process.

Prints one JSON object: the best step's wall seconds over --reps timed steps (after one warm-up
step), every step's seconds, and the peak resident memory of the process (ru_maxrss).
Run with Debian's /usr/bin/python3 (torch 1.13, CPU); bench/train_vs_torch_bench.cpp drives it.

usage: torch_llama_step.py --seq N [--layers 4 --hidden 256 --heads 4 --kv-heads 4
                           --head-dim 64 --intermediate 688 --vocab 257] [--threads 2] [--reps 2]
"""
import argparse
import json
import math
import resource
import time

import torch


class Block(torch.nn.Module):
    def __init__(self, c, hq, hkv, d, f, eps):
        super().__init__()
        self.hq, self.hkv, self.d, self.eps = hq, hkv, d, eps
        self.n1 = torch.nn.Parameter(torch.ones(c))
        self.n2 = torch.nn.Parameter(torch.ones(c))
        self.wq = torch.nn.Linear(c, hq * d, bias=False)
        self.wk = torch.nn.Linear(c, hkv * d, bias=False)
        self.wv = torch.nn.Linear(c, hkv * d, bias=False)
        self.wo = torch.nn.Linear(hq * d, c, bias=False)
        self.gate = torch.nn.Linear(c, f, bias=False)
        self.up = torch.nn.Linear(c, f, bias=False)
        self.down = torch.nn.Linear(f, c, bias=False)

    def norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def forward(self, x, cos, sin, mask):
        n = x.shape[0]
        h = self.norm(x, self.n1)
        q = self.wq(h).view(n, self.hq, self.d).transpose(0, 1)
        k = self.wk(h).view(n, self.hkv, self.d).transpose(0, 1)
        v = self.wv(h).view(n, self.hkv, self.d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.hq // self.hkv, dim=0)
        v = v.repeat_interleave(self.hq // self.hkv, dim=0)
        s = q @ k.transpose(1, 2) / math.sqrt(self.d) + mask
        o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(n, self.hq * self.d)
        x = x + self.wo(o)
        h = self.norm(x, self.n2)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.hidden)
        torch.nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = torch.nn.ModuleList(
            [Block(a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate, 1e-5)
             for _ in range(a.layers)])
        self.nf = torch.nn.Parameter(torch.ones(a.hidden))
        self.d, self.theta = a.head_dim, 10000.0

    def forward(self, tokens, labels):
        n = tokens.shape[0]
        pos = torch.arange(n, dtype=torch.float32)
        inv = self.theta ** (-torch.arange(0, self.d, 2, dtype=torch.float32) / self.d)
        ang = torch.outer(pos, inv)
        cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
        mask = torch.full((n, n), float("-inf")).triu(1)
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.nf
        return torch.nn.functional.cross_entropy(x @ self.emb.weight.T, labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=257)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = Llama(a)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, a.vocab, (a.seq + 1,), generator=g)
    inp, lab = tokens[:-1], tokens[1:]
    times = []
    for _ in range(1 + a.reps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(inp, lab)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({
        "seq": a.seq, "threads": a.threads, "torch": torch.__version__,
        "step_seconds": min(times[1:]), "all_step_seconds": times, "loss": loss.item(),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


if __name__ == "__main__":
    main()
