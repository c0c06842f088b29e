"""longseq.Mask: the project's mask grammar, with document ids and block masks as tensors."""

from . import _core
from ._args import as_int
from ._tensors import bool_bytes

__all__ = ["Mask", "as_mask"]


class Mask:
    """A mask over the global positions of a sequence (design.md §3), in the grammar of
    ``--mask``: comma-joined terms ``full | causal | window:W | document:FILE | blocks:FILE:B``.
    Tensors stand in for the files:

    * ``doc_ids`` (int32/int64, ``[N]``, or ``[B, N]`` per sequence of a batch in one process) or
      ``cu_seqlens`` (flash-attn's offsets of packed sequences, ``[D + 1]``): a token sees only
      its own document; as the grammar's document term, this implies causal;
    * ``block_mask`` (uint8/bool ``[ceil(N/B), ceil(N/B)]``, 1 = visible) with ``block_size`` B.

    The mask is checked against the sequence length when it is used; anything that does not fit
    raises ValueError naming the values. ``Mask("window:4096")`` is a causal sliding window: a
    token sees itself and the 4095 before it.
    """

    def __init__(self, text="full", *, doc_ids=None, cu_seqlens=None, block_mask=None,
                 block_size=0):
        if not isinstance(text, str):
            raise TypeError(f"longseq.Mask: text must be a str of the --mask grammar, got "
                            f"{type(text).__name__}")
        self.text = text
        self.doc_ids = doc_ids
        self.cu_seqlens = cu_seqlens
        self.block_mask = bool_bytes(block_mask)
        self.block_size = as_int("longseq.Mask", "block_size", block_size)
        self._bound = {}

    def bind(self, n):
        """The engine's mask over ``n`` tokens (built once per n)."""
        if n not in self._bound:
            if len(self._bound) >= 64:  # many lengths: keep the memory bounded
                self._bound.clear()
            self._bound[n] = _core.Mask(self.text, as_int("longseq.Mask", "n", n),
                                        doc_ids=self.doc_ids,
                                        cu_seqlens=self.cu_seqlens, block_mask=self.block_mask,
                                        block_size=self.block_size)
        return self._bound[n]

    def __repr__(self):
        extra = [f"{k}=..." for k in ("doc_ids", "cu_seqlens", "block_mask")
                 if getattr(self, k) is not None]
        if self.block_size:
            extra.append(f"block_size={self.block_size}")
        return f"longseq.Mask({self.text!r}{''.join(', ' + e for e in extra)})"


_by_text = {}


def as_mask(mask, default="full"):
    """None (the default), a grammar string or a Mask, as a Mask. A string's Mask is made once
    (with its engine masks per length), so a call with mask="causal" costs no parsing."""
    if mask is None:
        mask = default
    if isinstance(mask, Mask):
        return mask
    if isinstance(mask, str):
        if mask not in _by_text:
            if len(_by_text) > 256:
                _by_text.clear()
            _by_text[mask] = Mask(mask)
        return _by_text[mask]
    hint = ""
    if hasattr(mask, "__dlpack__") and len(getattr(mask, "shape", ())) == 2:
        # torch's attn_mask habit: say how such a mask is written here, rather than guess at
        # its convention (bool: True takes part; float: added to the scores).
        hint = (" (a dense [T, T] mask of which keys each query sees: "
                "longseq.Mask(block_mask=m, block_size=1), m bool or uint8, 1 = sees)")
    raise TypeError(f"mask must be None, a str of the --mask grammar or a longseq.Mask, got "
                    f"{type(mask).__name__}{hint}")
