"""Outputs allocated by the caller's framework (design.md §11): torch tensors for torch inputs,
numpy arrays for anything else with __dlpack__. torch is imported only when a torch tensor is
seen, so numpy users need no torch."""

import sys

__all__ = ["is_torch", "empty_like_framework", "dtype_name", "is_bool", "bool_bytes"]


def is_torch(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def dtype_name(x):
    """"float32", "bfloat16", ... of a torch tensor or numpy array."""
    if is_torch(x):
        return str(x.dtype).replace("torch.", "")
    return str(getattr(x, "dtype", type(x).__name__))


def is_bool(x):
    return dtype_name(x) == "bool"


def bool_bytes(x):
    """A bool tensor's uint8 view (the same memory), anything else as it is: DLPack in torch 1.13
    and numpy 1.24 has no bool, and both store a bool as one byte, 0 or 1 (safetensors' BOOL)."""
    if not is_bool(x):
        return x
    if is_torch(x):
        import torch
        return x.view(torch.uint8)
    return x.view("uint8")


def empty_like_framework(like, shape, dtype=None):
    """An uninitialised tensor of `shape` in `like`'s framework and device; dtype: a name
    ("float32", "bfloat16", "int64", ...) or None for like's."""
    if is_torch(like):
        import torch
        dt = like.dtype if dtype is None else getattr(torch, dtype)
        return torch.empty(tuple(shape), dtype=dt, device=like.device)
    import numpy as np
    if dtype == "bfloat16":
        raise TypeError("bfloat16 needs torch tensors (numpy has no bfloat16)")
    return np.empty(tuple(shape), dtype=like.dtype if dtype is None else dtype)
