"""Outputs allocated by the caller's framework (design.md §11): torch tensors for torch inputs,
numpy arrays for anything else with __dlpack__. torch is imported only when a torch tensor is
seen, so numpy users need no torch."""

import sys

__all__ = ["is_torch", "empty_like_framework", "dtype_name"]


def is_torch(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def dtype_name(x):
    """"float32", "bfloat16", ... of a torch tensor or numpy array."""
    if is_torch(x):
        return str(x.dtype).replace("torch.", "")
    return str(getattr(x, "dtype", type(x).__name__))


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
