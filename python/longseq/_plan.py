"""longseq.plan: the planner from Python."""

import json

from . import _core

__all__ = ["plan"]


def plan(**flags):
    """What ``longseq plan --json`` prints for the same flags, as Python objects: keywords are
    the flags without "--", '-' as '_' (``gpus_per_node=8`` is ``--gpus-per-node 8``), with the
    values the flags take (``seq="16M"`` or ``seq=16777216``, ``algo="burst,usp:2"``,
    ``global_batch="64M"``). The cluster search gives {"configs", "search", "winner",
    "warnings"}; ``train=PRESET`` the host trainer's memory instead (``plan --train``).
    A flag that does not exist is a TypeError naming it; a value the command refuses, a
    ValueError with the command's message."""
    return json.loads(_core.plan_json(flags))
