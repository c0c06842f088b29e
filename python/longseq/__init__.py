"""longseq from Python: exact context-parallel attention, the planner and the tokenizer.

The engine is C++ (``longseq._core``, pybind11 over the libraries the ``longseq`` command uses);
this package converts arguments and allocates outputs with the caller's framework. Tensors cross
by DLPack without copies, so torch tensors and numpy arrays both work. docs/python.md is the
guide; the modules are

* ``longseq.attention``: attention of whole sequences in this process (``forward``/``backward``),
  and ``distributed``: P ranks as threads, what ``longseq attention`` computes;
* ``longseq.torch``: the same as autograd functions, and ``ContextParallel``: one Python process
  per rank under mpirun, the sequence sharded by a balanced layout;
* ``longseq.comm``: this process's rank of an MPI world (``mpi()``) and its collectives;
* here: ``Mask``, ``Tokenizer``, ``plan`` (what ``longseq plan --json`` prints), ``info``,
  safetensors and token files.
"""

import json as _json
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))


def _data_dir():
    # Where the presets and hardware profiles are, when core::data_dir() cannot find them from an
    # interpreter: a pip install ships them in the package, `cmake --install` beside it.
    shipped = _os.path.join(_here, "data")
    if _os.path.isdir(shipped):
        return shipped
    marker = _os.path.join(_here, "_data_dir.txt")
    if _os.path.isfile(marker):
        with open(marker) as f:
            return _os.path.normpath(_os.path.join(_here, f.read().strip()))
    return None  # a build tree: the engine falls back to the source tree's data/


if "LONGSEQ_DATA_DIR" not in _os.environ and _data_dir() is not None:
    _os.environ["LONGSEQ_DATA_DIR"] = _data_dir()


def _load_core():
    # OpenMPI opens its components with dlopen and expects libmpi's symbols to be global; Python
    # loads extension modules RTLD_LOCAL, after which MPI_Init fails in the component loader. The
    # module is loaded RTLD_GLOBAL for that; its own symbols are hidden (pybind11's default).
    flags = _sys.getdlopenflags()
    _sys.setdlopenflags(flags | _os.RTLD_GLOBAL)
    try:
        from . import _core
    finally:
        _sys.setdlopenflags(flags)
    return _core


_core = _load_core()

__version__ = _core.version()
RankFailed = _core.RankFailed

from ._mask import Mask  # noqa: E402
from . import attention, comm  # noqa: E402
from ._plan import plan  # noqa: E402
from ._files import (  # noqa: E402
    Tokenizer,
    load_checkpoint,
    load_safetensors,
    read_tokens,
    save_safetensors,
)


def data_file(name):
    """The path of a file longseq ships (presets/, hardware/, kjv-genesis-exodus.txt), from the
    data directory the engine uses (core/data_path.hpp; $LONGSEQ_DATA_DIR first).
    FileNotFoundError naming the directory when it holds no such file."""
    path = _os.path.join(_core.data_dir(), name)
    if not _os.path.exists(path):
        raise FileNotFoundError(f"longseq.data_file: no {name!r} in longseq's data directory "
                                f"{_core.data_dir()} (presets/, hardware/, "
                                f"kjv-genesis-exodus.txt; $LONGSEQ_DATA_DIR overrides it)")
    return path


def info():
    """What ``longseq info --json`` prints, as a dict: version, GEMM library, MPI and NCCL, the
    CPU and its kernel variant, bf16 mode, CUDA (runtime, driver, GPUs)."""
    return _json.loads(_core.info())


__all__ = [
    "Mask",
    "RankFailed",
    "Tokenizer",
    "attention",
    "comm",
    "data_file",
    "info",
    "load_checkpoint",
    "load_safetensors",
    "plan",
    "read_tokens",
    "save_safetensors",
    "__version__",
]
