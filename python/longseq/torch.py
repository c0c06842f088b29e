"""longseq's attention as PyTorch autograd functions, and context parallelism from PyTorch.

``attention(q, k, v, mask=...)``: exact attention of whole sequences on this process; CPU tensors
run the engine's CPU kernels in place, CUDA tensors (CUDA builds) its GPU executor. The backward
is the engine's (deterministic: the same bits every run).

``ContextParallel(group, algo=..., balance=..., seq=N)``: one process per rank (under mpirun
with ``longseq.comm.mpi()`` on host tensors; with ``longseq.comm.nccl()`` over torch.distributed's
processes on CUDA tensors, one GPU each), each holding its shard of every sequence under a
balanced layout. ``shard``/``unshard`` move
tensors between global and local order, ``positions()`` are the global positions of the local
tokens (RoPE, labels), and ``attention`` is the engine's distributed attention with any algorithm
of the --algo grammar, autograd included.
"""

import torch as _torch

from . import _core
from . import attention as _attn
from ._args import as_int
from ._mask import Mask, as_mask

__all__ = ["attention", "ContextParallel", "Mask"]


def _detached(*ts):
    # torch refuses to export a tensor that requires grad through DLPack; detach() is a view.
    return [t.detach() if isinstance(t, _torch.Tensor) else t for t in ts]


if hasattr(_torch, "get_autocast_dtype"):  # torch >= 2.4: one function for every device
    def _autocast_dtype(device_type):
        """torch.autocast's dtype for ``device_type`` ("cpu" | "cuda") where it is on, else
        None."""
        on = _torch.is_autocast_enabled(device_type)
        return _torch.get_autocast_dtype(device_type) if on else None
else:  # torch 1.13: one function per device
    def _autocast_dtype(device_type):
        if device_type == "cpu":
            return _torch.get_autocast_cpu_dtype() if _torch.is_autocast_cpu_enabled() else None
        return _torch.get_autocast_gpu_dtype() if _torch.is_autocast_enabled() else None


def _under_autocast(q, k, v):
    """q, k and v in torch.autocast's bfloat16 where it is on for their device, as torch's own
    attention runs under autocast: a model whose RoPE multiplied q and k by float32 tables while v
    came out of an autocast linear in bfloat16 runs instead of meeting a dtype refusal. The casts
    are torch ops, so gradients flow back in each input's dtype. Off (or another autocast dtype:
    float16 has no kernels here), the tensors are passed as they are."""
    if _autocast_dtype("cuda" if q.is_cuda else "cpu") != _torch.bfloat16:
        return q, k, v
    return tuple(t.to(_torch.bfloat16) if t.dtype == _torch.float32 else t for t in (q, k, v))


def _check_tensors(fn, **ts):
    for name, t in ts.items():
        if not isinstance(t, _torch.Tensor):
            raise TypeError(f"{fn}: {name} is a {type(t).__name__}, not a torch.Tensor")


def _gpu_float32(q, k, v):
    """q, k, v as the GPU executor takes them (its API is float32, python/src/device.hpp):
    bfloat16 CUDA tensors widened on the GPU, and whether they were (then they still run the bf16
    kernels). Anything else as it is."""
    if q.is_cuda and q.dtype == _torch.bfloat16:
        return q.float(), k.float(), v.float(), True
    return q, k, v, False


class _Attention(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, threads):
        q_, k_, v_, widen = _gpu_float32(*_detached(q, k, v))
        precision = "bf16" if widen else "auto"
        o, lse = _attn.forward(q_, k_, v_, mask, scale, threads=threads, precision=precision)
        ctx.save_for_backward(q_, k_, v_, o, lse)
        ctx.cfg = (mask, scale, threads, precision, q.dtype)
        ctx.set_materialize_grads(False)  # an unused lse (or o) brings None, not zeros
        return o.to(q.dtype), lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = _detached(*ctx.saved_tensors)
        mask, scale, threads, precision, dtype = ctx.cfg
        do, dlse = _output_grads(do, dlse, o)
        dq, dk, dv = _attn.backward(do, q, k, v, o, lse, mask, scale, threads=threads,
                                    precision=precision, dlse=dlse)
        grads = _graded("longseq.torch.attention", dq.to(dtype), dk.to(dtype), dv.to(dtype))
        return (*grads, None, None, None)


class _NoSecondDerivative(_torch.autograd.Function):
    """Hands the engine's gradients to a graph that ``create_graph=True`` is building. The
    engine's backward (attention's; unshard's collective) is not itself differentiable, so a
    loss that differentiates through those gradients (a gradient penalty, a Hessian-vector
    product) must fail naming longseq: left without a graph, torch would take them as constants
    and give a second derivative that is silently wrong wherever the loss also reaches the
    inputs another way."""

    @staticmethod
    def forward(ctx, fn, *grads):
        ctx.fn = fn
        return tuple(g.detach() for g in grads)  # the same memory: no copy

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(f"{ctx.fn}: a second derivative was asked for (a loss over "
                           f"gradients built with create_graph=True, e.g. a gradient penalty); "
                           f"this backward of longseq's has no derivative of its own. First "
                           f"derivatives with create_graph=True work")


def _graded(fn, *grads):
    """The gradients as they are, or, while a backward with create_graph=True runs (grad mode
    is on only then), behind _NoSecondDerivative."""
    if not _torch.is_grad_enabled():
        return grads
    return _NoSecondDerivative.apply(fn, *(g.detach().requires_grad_() for g in grads))


def _output_grads(do, dlse, o):
    """The engine's dO (zeros when the loss does not use o) and dlse (None when it does not use
    lse), contiguous, in the dtypes the engine reads."""
    do = _torch.zeros_like(o) if do is None else do.detach().to(o.dtype).contiguous()
    if dlse is not None:
        dlse = dlse.detach().to(_torch.float32).contiguous()
    return do, dlse


def attention(q, k, v, mask=None, softmax_scale=None, return_lse=False, *, threads=0):
    """softmax(scale q k^T + mask) v over whole sequences, differentiable.

    q ``[T, Hq, D]`` or ``[B, T, Hq, D]``, k and v ``[.., T, Hkv, D]`` (Hkv divides Hq), float32
    or bfloat16, contiguous; ``mask`` None (full), a string of the --mask grammar ("causal",
    "window:W", "causal,window:W", ...) or a ``longseq.Mask`` (document ids, cu_seqlens, block
    masks). Returns o like q, and with ``return_lse`` also the float32 lse ``[.., T, Hq]``,
    differentiable as well (a loss may use it, e.g. to merge partial attentions) for CPU
    tensors; on CUDA tensors a gradient reaching lse raises ValueError. ``softmax_scale`` None
    (or 0) means 1/sqrt(D).
    """
    _check_tensors("longseq.torch.attention", q=q, k=k, v=v)
    q, k, v = _under_autocast(q, k, v)
    o, lse = _Attention.apply(q, k, v, as_mask(mask), softmax_scale, threads)
    return (o, lse) if return_lse else o


class _CpAttention(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cp, mask, scale):
        q_, k_, v_, widen = _gpu_float32(*_detached(q, k, v))
        o = _torch.empty_like(q_)
        lse = _torch.empty(q_.shape[:-1], dtype=_torch.float32, device=q_.device)
        m = mask.bind(cp.seq)
        s = 0.0 if scale is None else float(scale)
        cp._core.forward(q_, k_, v_, o, lse, m, s, bf16_kernels=widen)
        ctx.save_for_backward(q_, k_, v_, o, lse)
        ctx.cfg = (cp, m, s, q.dtype, widen)
        ctx.set_materialize_grads(False)  # an unused lse (or o) brings None, not zeros
        return o.to(q.dtype), lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = _detached(*ctx.saved_tensors)
        cp, m, s, dtype, widen = ctx.cfg
        do, dlse = _output_grads(do, dlse, o)
        dq, dk, dv = _torch.empty_like(q), _torch.empty_like(k), _torch.empty_like(v)
        cp._core.backward(do, q, k, v, o, lse, dq, dk, dv, m, s, dlse, bf16_kernels=widen)
        grads = (dq.to(dtype), dk.to(dtype), dv.to(dtype))
        return (*_graded("longseq.torch.ContextParallel.attention", *grads), None, None, None)


class _Shard(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cp, dim):
        ctx.cfg = (cp, dim, x.shape)
        return cp._move("shard", x, dim)

    @staticmethod
    def backward(ctx, g):
        # This rank's copy of x fed its own tokens only: their gradients go back to their global
        # positions, zeros elsewhere; padding rows belong to no token. torch's index ops keep a
        # create_graph backward differentiable.
        cp, dim, shape = ctx.cfg
        real, pos = (t.to(g.device) for t in cp._rank_rows(cp.rank))
        gx = g.new_zeros(shape)
        return gx.index_copy(dim, pos, g.index_select(dim, real)), None, None


class _Unshard(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cp, dim):
        ctx.cfg = (cp, dim)
        return cp._move("unshard", x, dim)

    @staticmethod
    def backward(ctx, g):
        # Every rank's loss may read the whole tensor: the gradient of a rank's shard is its
        # tokens of the sum over ranks (what a reduce-scatter gives; the padding rows get zero).
        cp, dim = ctx.cfg
        total = g.detach().contiguous().clone()
        cp.group.all_reduce(total)
        gx = cp._move("shard", total, dim)
        return (*_graded("longseq.torch.ContextParallel.unshard", gx), None, None)


def _dim(fn, x, dim):
    """dim of x (negative counts from the end, as torch's), or the error naming both."""
    if not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        raise ValueError(f"{fn}: dim {dim} of x {list(x.shape)} ({x.dim()} dims)")
    return dim % x.dim()


def _group_of(group):
    from .comm import Group
    if isinstance(group, Group):
        return group, group._g
    if isinstance(group, _core.Group):
        return Group(group), group
    raise TypeError(f"longseq.torch.ContextParallel: group must be a longseq.comm.Group (e.g. "
                    f"longseq.comm.mpi()), got {type(group).__name__}")


class ContextParallel:
    """Context parallelism over ``group``: every rank holds ``local_len`` tokens of each
    ``seq``-token sequence, chosen by ``balance`` (contiguous | zigzag | striped |
    block-striped). Any ``seq`` works: the layout pads internally, and padding tokens (position
    -1) see nothing and are seen by nobody.

    ``algo``: the --algo grammar (ring, burst, double-ring[:I][:burst|:ring],
    startrail:C[:teams|:rings], ulysses, usp:U[:burst|:ring]). ``mask``: the default mask of
    ``attention`` ("causal"), a string or a ``longseq.Mask``; packed sequences by ``doc_ids``
    ``[seq]`` or ``cu_seqlens`` (flash-attn's offsets). ``precision`` "bf16" runs float32
    tensors through the bf16 kernels (bfloat16 tensors always do). ``threads`` 0: the host's
    cores shared by the ranks on it.
    """

    def __init__(self, group, algo="burst", balance="zigzag", seq=None, mask="causal", *,
                 doc_ids=None, cu_seqlens=None, block_mask=None, block_size=0, precision="f32",
                 threads=0, head_groups=True, softmax_scale=None):
        if seq is None:
            raise ValueError("longseq.torch.ContextParallel: seq (the global sequence length) is "
                             "required")
        fn = "longseq.torch.ContextParallel"
        seq = as_int(fn, "seq", seq)
        self.group, g = _group_of(group)
        if any(x is not None for x in (doc_ids, cu_seqlens, block_mask)) or block_size:
            if isinstance(mask, Mask):
                raise ValueError("longseq.torch.ContextParallel: give doc_ids/cu_seqlens/"
                                 "block_mask inside the Mask, or a mask string beside them")
            mask = Mask(mask or "full", doc_ids=doc_ids, cu_seqlens=cu_seqlens,
                        block_mask=block_mask, block_size=block_size)
        self.mask = as_mask(mask, "causal")
        ids = self.mask.doc_ids
        if ids is not None and len(ids.shape) == 2 and ids.shape[0] > 1:
            raise ValueError(f"longseq.torch.ContextParallel: doc_ids {list(ids.shape)} give each "
                             f"sequence of a batch its own documents; under context parallelism "
                             f"every sequence of the batch shares one mask (one ContextParallel "
                             f"per packing, or doc_ids [seq])")
        self.softmax_scale = softmax_scale
        bound = self.mask.bind(seq)
        self._core = _core.ContextParallel(g, algo, balance, seq, block=bound.block_size,
                                           precision=precision,
                                           threads=as_int(fn, "threads", threads),
                                           head_groups=bool(head_groups))

    rank = property(lambda self: self._core.rank)
    world = property(lambda self: self._core.world)
    seq = property(lambda self: self._core.seq)
    local_len = property(lambda self: self._core.local_len, doc="tokens per rank, padding included")
    padded_len = property(lambda self: self._core.padded_len)
    algo = property(lambda self: self._core.algo)
    balance = property(lambda self: self._core.balance)

    def __repr__(self):
        return (f"ContextParallel(rank {self.rank} of {self.world}, algo={self.algo!r}, "
                f"balance={self.balance!r}, seq={self.seq}, local_len={self.local_len}, "
                f"mask={self.mask!r})")

    def positions(self):
        """int64 ``[local_len]``: the global position of each local token, -1 for padding."""
        p = _torch.empty(self.local_len, dtype=_torch.int64)
        self._core.positions(p)
        return p

    def valid(self):
        """bool ``[local_len]``: which local tokens are real (not padding)."""
        return self.positions() >= 0

    def shard(self, x, dim=0):
        """This rank's tokens of the global ``x`` (``seq`` long along ``dim``), in local order;
        padding rows are zero. Differentiable: the gradient of this rank's copy of ``x`` holds
        its tokens' gradients at their global positions and zeros elsewhere (sum the ranks'
        gradients, ``all_reduce``, for the whole sequence's)."""
        return self._differentiable(_Shard, "shard", x, dim)

    def unshard(self, x, dim=0):
        """The global tensor from every rank's shard (a collective: all ranks call it).
        Differentiable: every rank's loss may read the whole tensor, so the backward sums the
        ranks' gradients of it and keeps this rank's tokens (a reduce-scatter, as the backward
        of torch.distributed.nn's all_gather), itself a collective."""
        return self._differentiable(_Unshard, "unshard", x, dim)

    def _differentiable(self, fn_class, op, x, dim):
        fn = f"longseq.torch.ContextParallel.{op}"
        _check_tensors(fn, x=x)
        dim = _dim(fn, x, dim)
        if x.requires_grad and _torch.is_grad_enabled():
            return fn_class.apply(x, self, dim)
        return self._move(op, x, dim)

    def _move(self, op, x, dim):
        """shard or unshard of x along dim (checked), untracked."""
        x = x.detach()
        length = self.local_len if op == "shard" else self.seq
        shape = list(x.shape)
        shape[dim] = length
        if x.is_cuda:
            return self._move_on_gpu(op, x, dim, shape)
        out = _torch.empty(shape, dtype=x.dtype)
        getattr(self._core, op)(x, dim, out)
        return out

    def _rank_rows(self, rank):
        """(local rows, global positions) of rank's real tokens, int64 on the CPU."""
        p = _torch.empty(self.local_len, dtype=_torch.int64)
        self._core.positions(p, rank)
        real = (p >= 0).nonzero().squeeze(1)
        return real, p[real]

    def _move_on_gpu(self, op, x, dim, shape):
        """CUDA tensors (an nccl group): the same rows as the engine's host copies, moved by
        torch's index ops on x's device; unshard's gather is the group's (NCCL)."""
        fn = f"longseq.torch.ContextParallel.{op}"
        self._check_device(fn, "x", x)
        want = self.seq if op == "shard" else self.local_len
        if x.shape[dim] != want:
            raise ValueError(f"{fn}: x {list(x.shape)} has {x.shape[dim]} tokens along dim {dim}, "
                             f"expected {want}")
        out = x.new_zeros(shape)
        if op == "shard":
            rows, pos = (t.to(x.device) for t in self._rank_rows(self.rank))
            return out.index_copy_(dim, rows, x.index_select(dim, pos))
        parts = self.group.all_gather(x.contiguous())
        for r in range(self.world):
            rows, pos = (t.to(x.device) for t in self._rank_rows(r))
            out.index_copy_(dim, pos, parts[r].index_select(dim, rows))
        return out

    def _check_device(self, fn, name, t):
        """A CUDA tensor must be on the nccl group's GPU (NCCL and the executor run there)."""
        want = self.group.device
        if t.is_cuda and want is not None and t.device.index != want:
            raise ValueError(f"{fn}: {name} is on {t.device}, and this rank's nccl group runs on "
                             f"cuda:{want}")

    def attention(self, q, k, v, mask=None, softmax_scale=None, return_lse=False):
        """The distributed attention of this rank's shards q ``[L, Hq, D]`` or ``[B, L, Hq, D]``
        (L = local_len), k and v ``[.., L, Hkv, D]``, differentiable (o and, with
        ``return_lse``, the float32 lse ``[.., L, Hq]``); a collective over the group (every rank
        calls it with the same shapes). ``mask`` None: the ContextParallel's."""
        fn = "longseq.torch.ContextParallel.attention"
        _check_tensors(fn, q=q, k=k, v=v)
        for name, t in (("q", q), ("k", k), ("v", v)):
            self._check_device(fn, name, t)
        q, k, v = _under_autocast(q, k, v)
        m = self.mask if mask is None else as_mask(mask)
        scale = self.softmax_scale if softmax_scale is None else softmax_scale
        o, lse = _CpAttention.apply(q, k, v, self, m, scale)
        return (o, lse) if return_lse else o

    def stats(self, reset=False):
        """This rank's seconds computing and waiting, steps and chunk pairs, summed over the
        attention calls' forward and backward passes since the last reset."""
        import json
        return json.loads(self._core.stats(reset))

    # The collectives a training loop needs, on this group.
    def all_reduce(self, x, op="sum"):
        return self.group.all_reduce(x, op)

    def broadcast(self, x, root=0):
        return self.group.broadcast(x, root)

    def all_gather(self, x):
        return self.group.all_gather(x)

    def barrier(self):
        self.group.barrier()
