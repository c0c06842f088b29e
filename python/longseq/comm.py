"""This process's rank of a world, and the collectives a training loop needs on tensors.

Under ``mpirun -np P python3 script.py`` each process is one rank: ``longseq.comm.mpi()`` opens
the world (the engine's MPI backend; without mpirun, a world of 1) and returns its Group. The
world is closed when the interpreter exits: every rank then waits until all have finished, as
the ``longseq`` command does. An exception that ends a rank's script fails the world: every other
rank's pending and next collective raises ``longseq.RankFailed`` naming that rank and its error,
so no rank hangs.

On GPUs, ``longseq.comm.nccl()`` opens an NCCL world over the processes of the caller's
``torch.distributed`` group instead (any launcher: torchrun, mpirun, ...), one rank per process
and GPU: NCCL's unique id travels over that group. Its Group moves CUDA tensors.

Collectives take contiguous tensors (torch or numpy; host memory for an MPI group, CUDA memory or
host memory staged through the GPU for an NCCL one) and work in place where they can:
``all_reduce`` and ``broadcast`` overwrite their argument and return it; ``all_gather`` returns a
new ``[P, *x.shape]`` tensor of x's framework.
"""

import atexit
import json
import sys

from . import _core
from ._args import as_int
from ._tensors import empty_like_framework

__all__ = ["Group", "mpi", "nccl"]


class Group:
    """A communicator: ``rank``, ``size``, ``backend``, ``node`` and the collectives. Every rank
    of the group calls a collective in the same order with matching shapes."""

    def __init__(self, core_group, device=None):
        self._g = core_group
        self._device = device  # an nccl group's CUDA device index, else None

    rank = property(lambda self: self._g.rank)
    size = property(lambda self: self._g.size)
    backend = property(lambda self: self._g.backend)
    node = property(lambda self: self._g.node, doc="this rank's node (by host name)")
    device = property(lambda self: self._device,
                      doc="an nccl group's CUDA device index (None for an mpi group)")
    nodes = property(lambda self: self._g.nodes)

    def barrier(self):
        self._g.barrier()

    def all_reduce(self, x, op="sum"):
        """x = op (sum | max) over ranks of x, in place; returns x."""
        self._g.all_reduce(x, op)
        return x

    def broadcast(self, x, root=0):
        """x = root's x on every rank, in place; returns x."""
        self._g.broadcast(x, as_int("longseq.comm.broadcast", "root", root))
        return x

    def all_gather(self, x):
        """[P, *x.shape]: rank r's x at index r."""
        out = empty_like_framework(x, (self.size,) + tuple(x.shape))
        self._g.all_gather(x, out)
        return out

    def split(self, color, key=0):
        """MPI_Comm_split: ranks of one color form a group, ordered by (key, rank)."""
        fn = "longseq.comm.split"
        return Group(self._g.split(as_int(fn, "color", color), as_int(fn, "key", key)),
                     self._device)

    def stats(self):
        """This rank's bytes and messages sent and received in this group."""
        return json.loads(self._g.stats())

    def __repr__(self):
        return f"<longseq.comm.Group rank {self.rank} of {self.size}, {self.backend}>"


_world = None
_group = None  # the one Group mpi() returns
_world_args = None  # the timeout and nodes it was opened with
_nccl_world = None
_nccl_group = None  # the one Group nccl() returns
_nccl_args = None
_failed = False


def _close():
    global _world, _nccl_world
    worlds = [w for w in (_nccl_world, _world) if w is not None]
    _world = _nccl_world = None
    for w in worlds:
        try:
            w.close()
        except _core.RankFailed as e:
            if not _failed:  # this rank did nothing wrong: say who did
                print(f"[longseq.comm] {e}", file=sys.stderr)
                sys.stderr.flush()
                # The interpreter must not report success for a failed world.
                import os
                os._exit(1)


def _fail_world(kind, value, tb):
    global _failed
    if not _failed:
        for w in (_nccl_world, _world):
            if w is not None:
                _failed = True
                w.fail(f"{kind.__name__}: {value}")
    _previous_hook(kind, value, tb)


def _hook_exit():
    """Once per process: close the worlds at exit, fail them on an uncaught exception."""
    global _previous_hook
    if _world is None and _nccl_world is None:
        atexit.register(_close)
        _previous_hook = sys.excepthook
        sys.excepthook = _fail_world


_previous_hook = sys.excepthook


def _refuse_other_launchers():
    """Without mpirun MPI starts a world of 1. A process that torchrun (or torch.distributed's
    env:// rendezvous) started as one rank of several would then compute alone, every rank the
    whole sequence, with no error: refused here, naming the launcher's variables."""
    import os
    if _core.launched_by_mpirun():
        return
    size = os.environ.get("WORLD_SIZE", "")
    try:
        several = int(size) > 1
    except ValueError:
        several = False
    if several:
        raise RuntimeError(
            f"longseq.comm.mpi: this process is rank {os.environ.get('RANK', '?')} of WORLD_SIZE="
            f"{size} (torchrun's or torch.distributed's environment) but was not started by "
            f"mpirun; longseq's ranks are MPI processes, so it would run as a world of 1: start "
            f"the script with mpirun -np {size} python3 script.py")


def mpi(timeout=None, nodes=None):
    """This process's rank of the MPI world: opened on the first call, the same Group object
    after. ``timeout``: seconds a blocked collective waits before the world fails (default 300);
    ``nodes`` > 0 declares that many nodes instead of the host names MPI reports (default 0).
    Both hold for the world's life: a later call that asks for other values raises ValueError
    naming both, rather than ignoring them."""
    global _world, _group, _world_args
    args = {"timeout": 300.0 if timeout is None else float(timeout),
            "nodes": 0 if nodes is None else as_int("longseq.comm.mpi", "nodes", nodes)}
    if _world is None:
        _refuse_other_launchers()
        world = _core.open_world("mpi", args["timeout"], args["nodes"])
        _hook_exit()
        _world = world
        _group, _world_args = Group(_world.group), args
        return _group
    _check_reopen("longseq.comm.mpi", {"timeout": timeout, "nodes": nodes}, args, _world_args)
    return _group


def _check_reopen(fn, given, args, opened):
    """A later call of mpi() or nccl() on an open world: ValueError naming both values for each
    argument given (not None) whose value (``args``, as the first call normalised it) differs
    from the world's (``opened``)."""
    asked = {k: args[k] for k, v in given.items() if v is not None and args[k] != opened[k]}
    if asked:
        raise ValueError(f"{fn}: the world is open with "
                         + ", ".join(f"{k} {opened[k]}" for k in asked)
                         + "; asked again for "
                         + ", ".join(f"{k} {v}" for k, v in asked.items())
                         + " (they hold for the world's life)")


def _node_ids(hosts):
    """Dense node ids of ranks from their host names, in order of first appearance."""
    first = {}
    return [first.setdefault(h, len(first)) for h in hosts]


def _check_gpus(fn, places):
    """places: (host, device) of every rank, device -1 for none. Raises on every rank alike (all
    hold the same list): a rank without a GPU, or two ranks of one host on one GPU, which NCCL
    refuses ("Duplicate GPU") once it is too late to say which."""
    none = [r for r, (_, d) in enumerate(places) if d < 0]
    if none:
        raise RuntimeError(f"{fn}: rank(s) {none} have no CUDA device (torch.cuda.is_available() "
                           f"is False there); the nccl backend runs one rank per process and GPU")
    seen = {}
    for r, place in enumerate(places):
        if place in seen:
            raise RuntimeError(f"{fn}: ranks {seen[place]} and {r} are both on GPU {place[1]} of "
                               f"host {place[0]!r}; NCCL runs one rank per GPU: call "
                               f"torch.cuda.set_device(local_rank) before longseq.comm.nccl()")
        seen[place] = r


def _global_rank(dist, pg, rank):
    if pg is None:
        return rank
    get = getattr(dist, "get_global_rank", None)  # torch >= 2.0
    if get is None:
        get = dist.distributed_c10d._get_global_rank  # torch 1.13
    return get(pg, rank)


def _bootstrap(fn, process_group, device):
    """A collective over torch.distributed's ``process_group``: every rank's (host, device),
    checked, and rank 0's NCCL unique id. Returns (id, rank, node ids)."""
    import socket
    import torch.distributed as dist
    rank, size = dist.get_rank(process_group), dist.get_world_size(process_group)
    places = [None] * size
    dist.all_gather_object(places, (socket.gethostname(), device), group=process_group)
    _check_gpus(fn, places)
    box = [_core.nccl_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=_global_rank(dist, process_group, 0), group=process_group)
    return box[0], rank, _node_ids([h for h, _ in places])


def nccl(process_group=None, timeout=None, device=None):
    """This process's rank of an NCCL world over the processes of ``torch.distributed``'s
    ``process_group`` (None: the default group, which must be initialised:
    ``torch.distributed.init_process_group``), for CUDA tensors: one rank per process and GPU.
    Opened on the first call (a collective over that group: rank 0's NCCL unique id is broadcast
    over it, the ranks' host names give the nodes), the same Group object after (a later call
    that asks for another value of an argument raises ValueError naming both). ``device``: this
    rank's CUDA device index (default ``torch.cuda.current_device()``; set it with
    ``torch.cuda.set_device(local_rank)`` first). ``timeout``: seconds a blocked wait lasts
    before it raises ``longseq.RankFailed`` (default 300). Ranks are those of the process group,
    whatever launched the processes (torchrun, mpirun)."""
    global _nccl_world, _nccl_group, _nccl_args
    fn = "longseq.comm.nccl"
    if not _core.nccl_built():
        raise RuntimeError(f"{fn}: this build of longseq has no NCCL (a CUDA build with nccl.h "
                           f"and libnccl builds it; longseq.info()['nccl'] says)")
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{fn}: torch.distributed is not initialised: call "
                           f"torch.distributed.init_process_group(...) first (its group carries "
                           f"NCCL's unique id to every rank)")
    if dist.get_rank(process_group) < 0:  # torch's answer for a process outside the group
        raise ValueError(f"{fn}: this process (global rank {dist.get_rank()}) is not a member of "
                         f"process_group; every member calls nccl(process_group), others not")
    if device is None:
        dev = torch.cuda.current_device() if torch.cuda.is_available() else -1
    elif isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"{fn}: device {device} is not a CUDA device")
        dev = torch.cuda.current_device() if device.index is None else device.index
    else:
        dev = as_int(fn, "device", device)
        if dev < 0:
            raise ValueError(f"{fn}: device {dev} must be a CUDA device index (>= 0)")
    args = {"timeout": 300.0 if timeout is None else float(timeout), "device": dev,
            "process_group": process_group}
    if not args["timeout"] > 0:
        raise ValueError(f"{fn}: timeout {args['timeout']} s must be positive")
    if _nccl_world is not None:
        _check_reopen(fn, {"timeout": timeout, "device": device, "process_group": process_group},
                      args, _nccl_args)
        return _nccl_group
    uid, rank, nodes = _bootstrap(fn, process_group, dev)
    world = _core.open_nccl_world(uid, rank, nodes, dev, args["timeout"])
    _hook_exit()
    _nccl_world, _nccl_args = world, args
    _nccl_group = Group(world.group, dev)
    return _nccl_group
