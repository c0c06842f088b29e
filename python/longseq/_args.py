"""Integer arguments (lengths, ranks, counts) taken exactly: Python ints and what behaves as one
(numpy and torch integers, through ``__index__``). A float or a string is a TypeError naming the
argument, never truncated by ``int()`` (``seq=30.5`` would otherwise build a 30-token layout)."""

import operator

__all__ = ["as_int"]


def as_int(fn, name, x):
    if not isinstance(x, bool):  # True is an int to Python, never a length or a rank here
        try:
            return operator.index(x)
        except TypeError:
            pass
    raise TypeError(f"{fn}: {name} {x!r} is a {type(x).__name__}, expected an int")
