#!/usr/bin/python3
"""The whole LLaMA model of src/longseq/model against an independent float64 PyTorch autograd
implementation written after Hugging Face transformers' modeling_llama (LlamaRMSNorm,
rotate_half RoPE, repeat_kv GQA, SwiGLU MLP, tied or separate lm_head, mean cross-entropy with
ignore_index -100), reading the parameters by their Hugging Face names from model.safetensors.

Runs `model_dump DIR tied|untied POLICY` for each case, recomputes the loss and every gradient,
and exits non-zero on a mismatch. Tolerances: loss 1e-5 relative; gradients
|ours - torch| <= 1e-5 max|g| + 1e-3 |torch| (fp32 against fp64 over two layers)."""
import argparse, json, math, os, struct, subprocess, sys, tempfile

import numpy as np
import torch

DT = {"F32": np.float32, "I32": np.int32, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(body[b:end], dtype=DT[e["dtype"]]).reshape(e["shape"])
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def model_loss(p, cfg, tokens, labels):
    c, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, n = cfg["rms_norm_eps"], tokens.shape[0]
    x = p["model.embed_tokens.weight"][tokens]
    pos = torch.arange(n, dtype=torch.float64)
    inv = cfg["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.outer(pos, inv)
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(n, hq, d).transpose(0, 1)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(n, hkv, d).transpose(0, 1)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(n, hkv, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(hq // hkv, dim=0)
        v = v.repeat_interleave(hq // hkv, dim=0)
        s = q @ k.transpose(1, 2) / math.sqrt(d) + mask
        o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(n, hq * d)
        x = x + o @ p[pre + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h @ p[pre + "mlp.gate_proj.weight"].T
        u = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return torch.nn.functional.cross_entropy(x @ head.T, labels, ignore_index=-100)


def check(dump, case, policy):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([dump, d, case, policy], check=True, stdout=subprocess.DEVNULL)
        res = json.load(open(os.path.join(d, "result.json")))
        params = {k: torch.tensor(v.astype(np.float64), requires_grad=True)
                  for k, v in read_safetensors(os.path.join(d, "model.safetensors")).items()}
        grads = read_safetensors(os.path.join(d, "grads.safetensors"))
        batch = read_safetensors(os.path.join(d, "batch.safetensors"))
    tokens = torch.tensor(batch["tokens"].astype(np.int64))
    labels = torch.tensor(batch["labels"].astype(np.int64))
    loss = model_loss(params, res["config"], tokens, labels)
    loss.backward()
    bad = []
    if abs(res["loss"] - loss.item()) > 1e-5 * abs(loss.item()):
        bad.append(f"loss {res['loss']} vs torch {loss.item()}")
    gmax = max(float(t.grad.abs().max()) for t in params.values())
    worst = 0.0
    for name, t in params.items():
        ours = grads[name].astype(np.float64)
        ref = t.grad.numpy()
        err = np.abs(ours - ref)
        worst = max(worst, float(err.max()))
        tol = 1e-5 * gmax + 1e-3 * np.abs(ref)
        if (err > tol).any():
            i = int(np.argmax(err - tol))
            bad.append(f"{name}[{i}]: {ours.flat[i]} vs torch {ref.flat[i]}")
    print(f"{case:7s} {policy:14s} loss {res['loss']:.8f} torch {loss.item():.8f} "
          f"max|dgrad| {worst:.2e} (max|g| {gmax:.2e}) {'FAIL' if bad else 'ok'}")
    for b in bad[:10]:
        print("   ", b)
    return not bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="the model_dump executable")
    a = ap.parse_args()
    ok = True
    for case in ("tied", "untied"):
        for policy in ("none", "full", "selective++", "seq-selective"):
            ok &= check(a.dump, case, policy)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
