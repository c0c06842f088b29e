"""The rest of the engine from Python, each against the command that does the same:
info (``longseq info --json``), the tokenizer (``longseq tokenize``: byte-level and a BPE
tokenizer.json), token files, safetensors files and the trainer's checkpoints (``longseq train``
writes one, Python reads it; Python writes one, ``longseq eval`` reads it)."""

import json
import os
import subprocess

import numpy as np
import pytest
import torch

import longseq

CLI = os.environ.get("LONGSEQ_CLI", "longseq")


def cli(*args, cwd=None):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       timeout=600)
    assert r.returncode == 0, f"longseq {' '.join(map(str, args))}: {r.stderr}"
    return r.stdout


def test_info_and_version_are_what_the_cli_reports():
    want = json.loads(cli("info", "--json"))
    assert longseq.info() == want
    assert longseq.__version__ == want["version"]
    assert want["kernel_variant"] in want["kernel_variants_built"]


TEXTS = ["In the beginning God created the heaven and the earth.\n",
         "abc café 12 the  xyz ünïcödé\tend", ""]


def write_texts(tmp_path):
    paths = []
    for i, t in enumerate(TEXTS):
        p = tmp_path / f"doc{i}.txt"
        p.write_text(t, encoding="utf-8")
        paths.append(p)
    return paths


def test_byte_level_tokenizer_equals_cli_tokenize(tmp_path):
    paths = write_texts(tmp_path)
    args = ["tokenize", "--out", tmp_path / "bytes.tok"]
    for p in paths:
        args += ["--in", p]
    cli(*args)
    ids, vocab, eot = longseq.read_tokens(tmp_path / "bytes.tok")
    tok = longseq.Tokenizer()
    assert (vocab, eot) == (tok.vocab_size, tok.eot) == (257, 256)
    assert ids.tolist() == tok.encode_documents(TEXTS)
    assert tok.decode(tok.encode(TEXTS[1])) == TEXTS[1]
    n, _, _ = longseq.read_tokens(tmp_path / "bytes.tok", framework="numpy")
    assert isinstance(n, np.ndarray) and n.tolist() == ids.tolist()


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 bytes (what a byte-level tokenizer.json uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_level_tokenizer_json(path):
    u = bytes_to_unicode()
    vocab = {u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("b", "c"), ("a", "b"), ("Ã", "©")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    j = {"version": "1.0",
         "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>",
                           "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": False, "special": True}],
         "normalizer": None,
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": True},
         "post_processor": None,
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None,
                   "continuing_subword_prefix": None, "end_of_word_suffix": None,
                   "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                   "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}}
    path.write_text(json.dumps(j), encoding="utf-8")
    return vocab


def test_bpe_tokenizer_equals_cli_tokenize(tmp_path):
    vocab = byte_level_tokenizer_json(tmp_path / "tokenizer.json")
    paths = write_texts(tmp_path)
    args = ["tokenize", "--tokenizer", tmp_path / "tokenizer.json", "--out", tmp_path / "bpe.tok"]
    for p in paths:
        args += ["--in", p]
    cli(*args)
    ids, v, eot = longseq.read_tokens(tmp_path / "bpe.tok")
    tok = longseq.Tokenizer(tmp_path / "tokenizer.json")
    assert (v, eot) == (tok.vocab_size, tok.eot) and eot == vocab["<|endoftext|>"]
    assert ids.tolist() == tok.encode_documents(TEXTS)
    assert vocab["Ġthe"] in tok.encode(" the cat")  # the merges apply
    assert tok.decode(tok.encode(TEXTS[1])) == TEXTS[1]
    assert tok.token_id("<|endoftext|>") == eot and tok.token_id("nope") is None


def test_safetensors_round_trip_and_checksums(tmp_path):
    ts = {"a.weight": torch.randn(3, 5), "b": torch.randn(4).to(torch.bfloat16),
          "ids": torch.arange(7, dtype=torch.int64), "mask": torch.tensor([1, 0, 1],
                                                                         dtype=torch.uint8),
          "scalar": torch.tensor(2.5, dtype=torch.float64), "i32": torch.tensor([-3],
                                                                               dtype=torch.int32)}
    path = tmp_path / "t.safetensors"
    longseq.save_safetensors(path, ts, {"note": "hi"})
    back, meta = longseq.load_safetensors(path)
    assert meta["note"] == "hi" and "longseq.crc32c" in meta
    assert back.keys() == ts.keys()
    for k, t in ts.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape and torch.equal(back[k], t)
    with pytest.raises(TypeError, match="bfloat16 tensor needs framework='torch'"):
        longseq.load_safetensors(path, framework="numpy")
    np_path = tmp_path / "n.safetensors"
    longseq.save_safetensors(np_path, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    arrs, _ = longseq.load_safetensors(np_path, framework="numpy")
    assert arrs["x"].dtype == np.float32 and arrs["x"].tolist() == [[0, 1, 2], [3, 4, 5]]
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x10  # a byte of the last tensor
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="tensor .i32. fails its CRC-32C check"):
        longseq.load_safetensors(path)


def test_bool_tensors_round_trip_and_bad_bool_bytes_are_refused(tmp_path):
    # torch 1.13's and numpy 1.24's DLPack have no bool: the package moves them as bytes.
    path = tmp_path / "b.safetensors"
    m = torch.tensor([[True, False, True], [False, False, True]])
    longseq.save_safetensors(path, {"m": m, "n": np.array([False, True])})
    back, _ = longseq.load_safetensors(path)
    assert back["m"].dtype == torch.bool and torch.equal(back["m"], m)
    assert back["n"].tolist() == [False, True]
    arrs, _ = longseq.load_safetensors(path, framework="numpy")
    assert arrs["m"].dtype == np.bool_ and arrs["m"].tolist() == m.tolist()
    # A hand-written BOOL tensor holding a byte that is neither 0 nor 1.
    header = b'{"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}'
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(len(header).to_bytes(8, "little") + header + bytes([1, 0, 2]))
    with pytest.raises(ValueError, match="BOOL tensor 'm' holds the byte 2 at element 2"):
        longseq.load_safetensors(bad)


def test_data_file_names_what_is_missing():
    assert os.path.exists(longseq.data_file("kjv-genesis-exodus.txt"))
    with pytest.raises(FileNotFoundError, match="no 'nope.txt' in longseq's data directory"):
        longseq.data_file("nope.txt")


def test_trainer_checkpoint_read_and_written_back(tmp_path):
    run = tmp_path / "run"
    cli("train", "--preset", "tiny", "--steps", "2", "--out", run)
    ck = longseq.load_checkpoint(run)
    cfg = ck["config"]
    h, v, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    m = ck["model"]
    assert m["model.embed_tokens.weight"].shape == (v, h)
    assert m["model.embed_tokens.weight"].dtype == torch.float32
    assert sum(k.endswith("self_attn.q_proj.weight") for k in m) == layers
    kv = cfg["num_key_value_heads"] * cfg.get("head_dim", h // cfg["num_attention_heads"])
    assert m["model.layers.0.self_attn.k_proj.weight"].shape == (kv, h)
    assert set(ck["optimizer"]) == {f"exp_avg.{k}" for k in m} | {f"exp_avg_sq.{k}" for k in m}
    assert ck["trainer_state"]["step"] == 2
    # Written back from Python into a Hugging Face directory, the engine reads the same model.
    out = tmp_path / "hf"
    out.mkdir()
    longseq.save_safetensors(out / "model.safetensors", m)
    (out / "config.json").write_text(json.dumps(cfg))
    data = longseq.data_file("kjv-genesis-exodus.txt")
    a = tmp_path / "eval_a"
    b = tmp_path / "eval_b"
    for d, o in ((run, a), (out, b)):
        cli("eval", "--checkpoint-dir", d, "--data", data, "--seq", 96, "--sequences", 2,
            "--out", o)
    la = json.loads((a / "eval.json").read_text())["loss"]
    lb = json.loads((b / "eval.json").read_text())["loss"]
    assert la == lb
