"""Attention of whole sequences on this process, for any framework that speaks DLPack.

``forward`` and ``backward`` are the two halves ``longseq.torch.attention`` puts under autograd:
the engine's kernels read the caller's q, k, v and write outputs the caller's framework
allocated (float32 or bfloat16; bfloat16 through torch). ``distributed`` runs P ranks as threads
of this process over whole tensors: what ``longseq attention`` computes, for tests and notebooks.

Shapes: q ``[T, Hq, D]`` or ``[B, T, Hq, D]``, k and v ``[.., T, Hkv, D]`` with Hkv dividing Hq
(GQA, MQA), o like q, lse ``[.., T, Hq]`` float32 (natural log; -inf for a row that sees nothing,
whose o is 0). ``softmax_scale`` None means 1/sqrt(D).
"""

import collections
import json

from . import _core
from ._args import as_int
from ._mask import as_mask
from ._tensors import empty_like_framework

__all__ = ["forward", "backward", "distributed", "Distributed"]


def _scale(softmax_scale):
    return 0.0 if softmax_scale is None else float(softmax_scale)


def _tokens(q, fn, ranks=(3, 4)):
    """T of q [T, Hq, D] / [B, T, Hq, D], or the error naming q's shape."""
    shape = getattr(q, "shape", None)
    if shape is None or not hasattr(q, "__dlpack__"):
        raise TypeError(f"{fn}: q is a {type(q).__name__}, not a tensor (torch tensors and numpy "
                        f"arrays work)")
    if len(shape) not in ranks:
        want = " or ".join(["[T, Hq, D]", "[B, T, Hq, D]"][r - 3] for r in ranks)
        raise ValueError(f"{fn}: q has shape {list(shape)}, expected {want}")
    if any(int(x) <= 0 for x in shape):
        raise ValueError(f"{fn}: q has shape {list(shape)}: every extent must be positive")
    return int(shape[-3])


def forward(q, k, v, mask=None, softmax_scale=None, *, threads=0, precision="auto", out=None,
            lse=None):
    """(o, lse) of softmax(scale q k^T + mask) v. ``out`` and ``lse``, when given, are written in
    place (contiguous; o's dtype is q's, lse float32). ``threads`` 0: every core of the host."""
    m = as_mask(mask).bind(_tokens(q, "longseq.attention.forward"))
    if out is None:
        out = empty_like_framework(q, q.shape)
    if lse is None:
        lse = empty_like_framework(q, q.shape[:-1], "float32")
    _core.attention_forward(q, k, v, out, lse, m, _scale(softmax_scale), threads, precision)
    return out, lse


def backward(do, q, k, v, o, lse, mask=None, softmax_scale=None, *, threads=0, precision="auto",
             dq=None, dk=None, dv=None, dlse=None):
    """(dq, dk, dv) of the forward that gave (o, lse), for the output gradient ``do``. ``dq``,
    ``dk`` and ``dv``, when given, are written in place (contiguous, like q, k and v): they are
    overwritten, not added to. ``dlse`` (float32, like lse; host tensors only), when given, is
    the loss's gradient with respect to lse, for losses that use lse as well as o."""
    m = as_mask(mask).bind(_tokens(q, "longseq.attention.backward"))
    if dq is None:
        dq = empty_like_framework(q, q.shape)
    if dk is None:
        dk = empty_like_framework(k, k.shape)
    if dv is None:
        dv = empty_like_framework(v, v.shape)
    _core.attention_backward(do, q, k, v, o, lse, dq, dk, dv, m, _scale(softmax_scale), threads,
                             precision, dlse)
    return dq, dk, dv


Distributed = collections.namedtuple("Distributed", "o lse dq dk dv stats")
Distributed.__doc__ = """What ``distributed`` returns: global outputs (dq, dk, dv None without
``do``) and ``stats``: every rank's bytes sent (intra/inter node), compute and wait seconds, and
the mask's visible pairs and FLOPs (the stats.json of ``longseq attention``)."""


def distributed(q, k, v, *, world, algo="burst", balance="zigzag", mask=None, do=None, nodes=0,
                link="none", precision="f32", threads=0, head_groups=True, softmax_scale=None,
                timeout=300.0):
    """The distributed attention of ``world`` ranks (threads of this process, the local backend)
    over global float32 q ``[N, Hq, D]``, k, v ``[N, Hkv, D]`` in global token order: each rank
    takes its shard by the layout, runs ``algo`` (the --algo grammar: ring, burst,
    double-ring[:I][:burst|:ring], startrail:C[:teams|:rings], ulysses, usp:U[:burst|:ring]),
    and rank 0 gathers the results. With ``do`` the backward runs too. ``nodes`` declares nodes
    (double rings, StarTrail's placement); ``link`` a modelled link (``--link`` grammar)."""
    m = as_mask(mask).bind(_tokens(q, "longseq.attention.distributed", ranks=(3,)))
    o = empty_like_framework(q, q.shape)
    lse = empty_like_framework(q, q.shape[:-1], "float32")
    dq = dk = dv = None
    if do is not None:
        dq = empty_like_framework(q, q.shape)
        dk = empty_like_framework(k, k.shape)
        dv = empty_like_framework(v, v.shape)
    fn = "longseq.attention.distributed"
    stats = _core.attention_distributed(q, k, v, do, o, lse, dq, dk, dv, m,
                                        as_int(fn, "world", world), algo, balance,
                                        nodes=as_int(fn, "nodes", nodes), link=link,
                                        precision=precision, threads=threads,
                                        head_groups=bool(head_groups),
                                        scale=_scale(softmax_scale), timeout=float(timeout))
    return Distributed(o, lse, dq, dk, dv, json.loads(stats))
