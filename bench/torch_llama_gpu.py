#!/usr/bin/env python3
"""The GPU peer of `longseq train --device cuda` (issue "GPU III"): one training step of the same
LLaMA written the way a careful PyTorch user writes it for one GPU: fp32 master weights, bf16
autocast, SDPA attention (FlashAttention or cuDNN, whichever PyTorch picks; causal), a SwiGLU MLP,
each block under activation checkpointing (torch.utils.checkpoint, as gradient checkpointing in
Hugging Face), the LM head + cross-entropy in checkpointed chunks of --loss-chunk tokens (no
[T, V] logits kept), fused AdamW, gradient clipping at 1.0.

Prints one JSON object: the best step's wall seconds over --reps timed steps (after --warmup
untimed ones), every step's seconds, tokens/s, MFU against --peak-tflops when given, the peak
allocated and reserved GPU memory (torch.cuda.max_memory_*), the GPU's name, and "oom": true
with the message when the step ran out of memory. Run with the GPU machine's python (PyTorch with
CUDA); bench/gpu_train_bench.sh drives it beside longseq.

usage: torch_llama_gpu.py --seq N [--layers 16 --hidden 2048 --heads 32 --kv-heads 8
                          --head-dim 64 --intermediate 8192 --vocab 128256] [--untied]
                          [--reps 2] [--warmup 1] [--loss-chunk 8192] [--no-checkpoint]
                          [--peak-tflops P]
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


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
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    def forward(self, x, cos, sin):
        n = x.shape[0]
        h = self.norm(x, self.n1)
        q = self.wq(h).view(n, self.hq, self.d).transpose(0, 1)
        k = self.wk(h).view(n, self.hkv, self.d).transpose(0, 1)
        v = self.wv(h).view(n, self.hkv, self.d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                           is_causal=True, enable_gqa=self.hq != self.hkv)
        x = x + self.wo(o.squeeze(0).transpose(0, 1).reshape(n, self.hq * self.d))
        h = self.norm(x, self.n2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.hidden)
        torch.nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = torch.nn.ModuleList(
            [Block(a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate, 1e-5)
             for _ in range(a.layers)])
        self.nf = torch.nn.Parameter(torch.ones(a.hidden))
        self.head = None if not a.untied else torch.nn.Linear(a.hidden, a.vocab, bias=False)
        self.a = a

    def head_weight(self):
        return self.emb.weight if self.head is None else self.head.weight

    def chunk_loss(self, x, labels):
        return F.cross_entropy((x @ self.head_weight().T).float(), labels, reduction="sum")

    def forward(self, tokens, labels):
        a = self.a
        n = tokens.shape[0]
        pos = torch.arange(n, dtype=torch.float32, device=tokens.device)
        inv = 10000.0 ** (-torch.arange(0, a.head_dim, 2, dtype=torch.float32,
                                        device=tokens.device) / a.head_dim)
        ang = torch.outer(pos, inv)
        cos = torch.cat((ang.cos(), ang.cos()), -1).to(torch.bfloat16)
        sin = torch.cat((ang.sin(), ang.sin()), -1).to(torch.bfloat16)
        x = self.emb(tokens)
        for b in self.blocks:
            x = checkpoint(b, x, cos, sin, use_reentrant=False) if a.checkpoint else b(x, cos, sin)
        x = b.norm(x, self.nf) if self.blocks else x
        total = 0.0
        for t0 in range(0, n, a.loss_chunk):
            xs, ls = x[t0:t0 + a.loss_chunk], labels[t0:t0 + a.loss_chunk]
            total = total + checkpoint(self.chunk_loss, xs, ls, use_reentrant=False)
        return total / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--loss-chunk", type=int, default=8192)
    ap.add_argument("--no-checkpoint", dest="checkpoint", action="store_false")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(1)
    out = {"seq": a.seq, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads,
           "head_dim": a.head_dim, "intermediate": a.intermediate, "vocab": a.vocab,
           "checkpoint": a.checkpoint, "loss_chunk": a.loss_chunk}
    try:
        model = Llama(a).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95),
                                weight_decay=0.1, fused=True)
        g = torch.Generator().manual_seed(2)
        tokens = torch.randint(0, a.vocab, (a.seq + 1,), generator=g).to(dev)
        inp, lab = tokens[:-1], tokens[1:]
        times = []
        for _ in range(a.warmup + a.reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(inp, lab)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        best = min(times[a.warmup:])
        n = sum(p.numel() for p in model.parameters())
        # Parameters in matrix products: all but the norms, and the embedding lookup when the LM
        # head is its own matrix (tied, the embedding is the head: counted once).
        matmul = n - a.hidden * (2 * a.layers + 1) - (a.vocab * a.hidden if a.untied else 0)
        # 6 N T for the matrix products, 12 L Hq D T^2 / 2 for causal attention (forward +
        # backward); recomputation not counted (the trainer's MFU formula).
        flops = 6.0 * matmul * a.seq + 12.0 * a.layers * a.heads * a.head_dim * a.seq * (a.seq + 1) / 2
        out.update({"step_seconds": best, "all_step_seconds": times, "loss": loss.item(),
                    "tokens_per_second": a.seq / best, "model_flops": flops,
                    "parameters": n, "matmul_parameters": matmul,
                    "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                    "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30, "oom": False})
        if a.peak_tflops > 0:
            out["mfu"] = flops / best / (a.peak_tflops * 1e12)
    except torch.OutOfMemoryError as e:
        out.update({"oom": True, "message": str(e).splitlines()[0],
                    "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
