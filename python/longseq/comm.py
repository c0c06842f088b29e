"""This process's rank of an MPI world, and the collectives a training loop needs on tensors.

Under ``mpirun -np P python3 script.py`` each process is one rank: ``longseq.comm.mpi()`` opens
the world (the engine's MPI backend; without mpirun, a world of 1) and returns its Group. The
world is closed when the interpreter exits: every rank then waits until all have finished, as
the ``longseq`` command does. An exception that ends a rank's script fails the world: every other
rank's pending and next collective raises ``longseq.RankFailed`` naming that rank and its error,
so no rank hangs.

Collectives take contiguous host tensors (torch or numpy) and work in place where they can:
``all_reduce`` and ``broadcast`` overwrite their argument and return it; ``all_gather`` returns a
new ``[P, *x.shape]`` tensor of x's framework.
"""

import atexit
import json
import sys

from . import _core
from ._args import as_int
from ._tensors import empty_like_framework

__all__ = ["Group", "mpi"]


class Group:
    """A communicator: ``rank``, ``size``, ``backend``, ``node`` and the collectives. Every rank
    of the group calls a collective in the same order with matching shapes."""

    def __init__(self, core_group):
        self._g = core_group

    rank = property(lambda self: self._g.rank)
    size = property(lambda self: self._g.size)
    backend = property(lambda self: self._g.backend)
    node = property(lambda self: self._g.node, doc="this rank's node (by host name)")
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
        return Group(self._g.split(as_int(fn, "color", color), as_int(fn, "key", key)))

    def stats(self):
        """This rank's bytes and messages sent and received in this group."""
        return json.loads(self._g.stats())

    def __repr__(self):
        return f"<longseq.comm.Group rank {self.rank} of {self.size}, {self.backend}>"


_world = None
_group = None  # the one Group mpi() returns
_world_args = None  # the timeout and nodes it was opened with
_failed = False


def _close():
    global _world
    w, _world = _world, None
    if w is None:
        return
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
    if _world is not None and not _failed:
        _failed = True
        _world.fail(f"{kind.__name__}: {value}")
    _previous_hook(kind, value, tb)


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
    global _world, _group, _world_args, _previous_hook
    args = {"timeout": 300.0 if timeout is None else float(timeout),
            "nodes": 0 if nodes is None else as_int("longseq.comm.mpi", "nodes", nodes)}
    if _world is None:
        _refuse_other_launchers()
        _world = _core.open_world("mpi", args["timeout"], args["nodes"])
        _group, _world_args = Group(_world.group), args
        atexit.register(_close)
        _previous_hook = sys.excepthook
        sys.excepthook = _fail_world
        return _group
    given = {"timeout": timeout, "nodes": nodes}
    asked = {k: args[k] for k, v in given.items() if v is not None and args[k] != _world_args[k]}
    if asked:
        raise ValueError("longseq.comm.mpi: the world is open with "
                         + ", ".join(f"{k} {_world_args[k]}" for k in asked)
                         + "; asked again for "
                         + ", ".join(f"{k} {v}" for k, v in asked.items())
                         + " (they hold for the world's life)")
    return _group
