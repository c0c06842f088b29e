"""Tokenizer, token files and safetensors (the trainer's checkpoints) from Python."""

import json
import os

from . import _core
from ._tensors import bool_bytes, is_bool

__all__ = ["Tokenizer", "load_checkpoint", "load_safetensors", "read_tokens", "save_safetensors"]


class Tokenizer:
    """The tokenizer of ``longseq tokenize``: byte-level without ``path`` (ids 0-255 are bytes,
    256 is end-of-text), else the BPE of a Hugging Face ``tokenizer.json`` with its end-of-text
    token (``eot``: its name; default the first of <|endoftext|> <|end_of_text|> </s> <|im_end|>).
    """

    def __init__(self, path=None, eot=None):
        self._t = _core.Tokenizer(None if path is None else os.fspath(path), eot or "")

    vocab_size = property(lambda self: self._t.vocab_size)
    eot = property(lambda self: self._t.eot, doc="the end-of-text id")

    def encode(self, text):
        """Token ids of ``text`` (no BOS, no end-of-text)."""
        return self._t.encode(text)

    def encode_documents(self, documents):
        """Each document's ids followed by the end-of-text id: the ids of the token file
        ``longseq tokenize --in`` writes for these documents."""
        return self._t.encode_documents(list(documents))

    def decode(self, ids, errors="replace"):
        """The text of ``ids`` (bytes that are not valid UTF-8, e.g. a cut-off character, follow
        ``errors`` as in bytes.decode)."""
        return self.decode_bytes(ids).decode("utf-8", errors)

    def decode_bytes(self, ids):
        return self._t.decode_bytes([int(i) for i in ids])

    def token_id(self, token):
        return self._t.token_id(token)


def read_tokens(path, framework="torch"):
    """(ids int64 [n], vocab, eot) of a token file (``longseq tokenize --out``)."""
    f = _core.TokenFile(os.fspath(path))
    out = _empty(framework, (f.size,), "int64")
    f.read_into(out)
    return out, f.vocab, f.eot


_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f64": "float64", "i32": "int32",
           "i64": "int64", "u8": "uint8", "bool": "bool"}


def _empty(framework, shape, dtype):
    if framework == "torch":
        import torch
        return torch.empty(tuple(shape), dtype=getattr(torch, dtype))
    if framework == "numpy":
        import numpy as np
        if dtype == "bfloat16":
            raise TypeError("a bfloat16 tensor needs framework='torch' (numpy has no bfloat16)")
        return np.empty(tuple(shape), dtype=dtype)
    raise ValueError(f"framework {framework!r}: expected 'torch' or 'numpy'")


def load_safetensors(path, framework="torch"):
    """(tensors, metadata) of a safetensors file: {name: tensor} with the file's dtypes and
    shapes (F32, BF16, F64, I32, I64, U8, BOOL), and the __metadata__ strings. Checksums that
    longseq recorded are verified (a flipped byte raises ValueError naming the tensor)."""
    f = _core.SafeTensors(os.fspath(path))
    tensors = {}
    for name in f.names():
        dtype, shape = f.info(name)
        t = _empty(framework, shape, _DTYPES[dtype])
        f.read_into(name, bool_bytes(t))
        tensors[name] = t
    return tensors, dict(f.metadata)


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (contiguous host tensors, any dtype above) atomically, with CRC-32C
    checksums in the metadata; ``transformers`` and ``longseq train --init-from`` read it."""
    names = list(tensors)
    values = [tensors[n].detach() if hasattr(tensors[n], "detach") else tensors[n] for n in names]
    bools = [is_bool(x) for x in values]
    _core.save_safetensors(os.fspath(path), names, [bool_bytes(x) for x in values],
                           dict(metadata or {}), bools)


def load_checkpoint(path, framework="torch"):
    """A trainer checkpoint (``train --out DIR`` writes DIR/checkpoint) as a dict: "model" and
    "optimizer" ({name: tensor}, Hugging Face LLaMA names; moments "exp_avg.<name>",
    "exp_avg_sq.<name>"), "config" (config.json) and "trainer_state" (trainer_state.json).
    ``path`` is DIR, DIR/checkpoint or a Hugging Face model directory."""
    path = os.fspath(path)
    if os.path.isdir(os.path.join(path, "checkpoint")):
        path = os.path.join(path, "checkpoint")
    out = {}
    for key, name in (("model", "model.safetensors"), ("optimizer", "optimizer.safetensors")):
        f = os.path.join(path, name)
        if os.path.exists(f):
            out[key] = load_safetensors(f, framework)[0]
    if "model" not in out:
        raise ValueError(f"longseq.load_checkpoint: {path} has no model.safetensors")
    for key, name in (("config", "config.json"), ("trainer_state", "trainer_state.json")):
        f = os.path.join(path, name)
        if os.path.exists(f):
            with open(f) as fh:
                out[key] = json.load(fh)
    return out
