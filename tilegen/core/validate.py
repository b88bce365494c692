"""The argument checks of tilegen's user APIs: the NumPy API (:mod:`tilegen.api`) and the torch entry
points (:mod:`tilegen.torch`) check the same things here, once.

Each check takes the argument as given and returns it normalised (a window as two ints, a scale as a
float or None, ...), or raises a one-line error naming the argument, the value and what is accepted:
:class:`~tilegen.core.errors.SpecError` (a ``ValueError``) for a bad value,
:class:`~tilegen.core.errors.UnsupportedArgument` (a ``NotImplementedError``) for an argument the
kernels do not implement. Arrays are NumPy arrays or torch tensors; an :class:`ArrayKind` says which
(:data:`NUMPY` here, ``tilegen.torch.call.TENSORS`` for torch, which this module does not import).

The checks of q, k and v read only types, dtypes, devices and shapes (never values), so
``torch.compile`` traces them with symbolic sizes. Semantics of every argument: DESIGN §3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from tilegen.core.errors import SpecError, UnsupportedArgument
from tilegen.core.spec import ALIGNMENTS, LAYOUTS


@dataclass(frozen=True)
class ArrayKind:
    """How the arrays of one front-end are recognised and named in messages.

    Attributes:
        cls: the array type (``numpy.ndarray``, ``torch.Tensor``).
        noun: its name in messages.
        names: attention dtype -> short name (``"fp16"``, ``"bf16"``, ``"fp32"``, :mod:`tilegen.core.dtypes`).
        dtypes: the attention dtypes, in words.
        floats: the floating-point dtypes a learnt parameter (sinks, ALiBi slopes) may have.
        float_words: those, in words.
        int32: the int32 dtype (sequence offsets).
        devices: whether arrays have a device that must be q's (torch).
    """

    cls: type
    noun: str
    names: Mapping[Any, str]
    dtypes: str
    floats: frozenset
    float_words: str
    int32: Any
    devices: bool = False


NUMPY = ArrayKind(
    cls=np.ndarray,
    noun="numpy.ndarray",
    names={np.dtype(np.float16): "fp16", np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float32): "fp32"},
    dtypes="numpy.float16, ml_dtypes.bfloat16 or numpy.float32",
    floats=frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.longdouble)),
    float_words="numpy.float16, numpy.float32, numpy.float64",
    int32=np.dtype(np.int32),
)

TND = "TND"  # packed variable-length batches: [total_tokens, heads, head_dim]


# --- scalars ----------------------------------------------------------------------------------------


def flag(name: str, value: Any) -> bool:
    """``value`` is True or False (a NumPy bool too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise SpecError(name, value, "True or False")
    return bool(value)


def choice(name: str, value: Any, accepted: tuple[str, ...]) -> str:
    """``value`` is one of ``accepted`` (strings)."""
    if not isinstance(value, str) or value not in accepted:
        raise SpecError(name, value, " or ".join(repr(a) for a in accepted))
    return value


def layout(value: Any) -> str:
    """A dense layout: ``"BNSD"`` or ``"BSND"``."""
    return choice("layout", value, LAYOUTS)


def alignment(value: Any) -> str:
    """A mask alignment: ``"bottom_right"`` (FlashAttention >= 2.1) or ``"top_left"``."""
    return choice("alignment", value, ALIGNMENTS)


def window(causal: Any, window: Any, *, causal_name: str = "causal", window_name: str = "window") -> tuple[int, int]:
    """(left, right) of a causal flag and a window, −1 unbounded (DESIGN §3): causal sets right = 0.

    Raises:
        SpecError: ``causal`` not a bool; ``window`` not two integers >= −1; causal with right > 0.
    """
    flag(causal_name, causal)
    if (
        not isinstance(window, (tuple, list))
        or len(window) != 2
        or any(isinstance(w, (bool, np.bool_)) or not isinstance(w, (int, np.integer)) or w < -1 for w in window)
    ):
        raise SpecError(window_name, window, "(left, right): two integers, each >= 0 or -1 for unbounded")
    left, right = int(window[0]), int(window[1])
    if causal:
        if right not in (-1, 0):
            raise SpecError(window_name, tuple(window), f"right = -1 or 0 when {causal_name}=True (causal sets right = 0)")
        right = 0
    return left, right


def scale(value: Any, name: str = "softmax_scale") -> float | None:
    """The softmax scale: None (1/√D) or a positive finite number."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) or not (math.isfinite(value) and value > 0):
        raise SpecError(name, value, "a positive finite number or None")
    return float(value)


def softcap(value: Any) -> float | None:
    """FlashAttention's softcap c: None for none (None or 0, FlashAttention's "off"), else c > 0 as a
    float (score′ = c·tanh(score/c), DESIGN §3)."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
    if value is None or (ok and value == 0):
        return None
    if not ok or not (math.isfinite(value) and value > 0):
        raise SpecError("softcap", value, "None or 0.0 (off), or a positive finite number")
    return float(value)


def no_dropout(value: Any, name: str = "dropout_p") -> None:
    """tilegen's kernels have no dropout: ``value`` must be 0."""
    if value != 0.0:
        raise UnsupportedArgument(name, value, "0.0 (tilegen's kernels have no dropout)")


def no_probabilities(value: Any, name: str = "return_attn_probs") -> None:
    """The attention probabilities P are never stored: ``value`` must be false."""
    if value:
        raise UnsupportedArgument(name, value, "False (the probabilities are never stored)")


# --- q, k and v ---------------------------------------------------------------------------------------


def array(name: str, x: Any, *, kind: ArrayKind, layout: str) -> Any:
    """``x`` is an array of ``kind`` with an attention dtype and the rank of ``layout`` (4; 3 for
    :data:`TND`). Returns ``x``.

    Raises:
        SpecError: ``name`` not such an array, naming its type, shape or dtype.
    """
    rank, where = (3, "[total_tokens, heads, head_dim] (TND)") if layout == TND else (4, f"({layout})")
    if not isinstance(x, kind.cls):
        raise SpecError(name, type(x).__name__, f"a {kind.noun} of {kind.dtypes}")
    if len(x.shape) != rank:
        raise SpecError(f"{name}.shape", tuple(x.shape), f"{rank} dimensions {where}")
    if x.dtype not in kind.names:
        raise SpecError(f"{name}.dtype", str(x.dtype), kind.dtypes)
    return x


def qkv(q: Any, k: Any, v: Any, *, kind: ArrayKind, layout: str) -> tuple[tuple, tuple, tuple]:
    """Check q, k and v of one call; return their logical shapes: BNSD [B, H, S, D] for ``"BNSD"`` and
    ``"BSND"`` ([B, S, H, D]), [T, H, D] for :data:`TND`.

    Reads types, dtypes, devices and shapes only (sizes may be symbolic, under ``torch.compile``).

    Raises:
        SpecError: not an array of ``kind`` with an attention dtype; the wrong rank; dtypes or devices
            that differ; k without q's batch and head dim (TND: head dim); v without k's batch, heads and
            length (TND: tokens and heads); a zero-sized dimension (TND: zero heads or head dim; zero
            tokens are legal); KV heads that do not divide the query heads.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        array(name, x, kind=kind, layout=layout)
    if not (q.dtype == k.dtype == v.dtype):
        raise SpecError("k.dtype", f"q {q.dtype}, k {k.dtype}, v {v.dtype}", "the same dtype for q, k and v")
    if kind.devices and not (q.device == k.device == v.device):
        raise SpecError("k.device", f"q {q.device}, k {k.device}, v {v.device}", "one device for q, k and v")
    if layout == TND:
        lq, lk, lv = tuple(q.shape), tuple(k.shape), tuple(v.shape)
        if lk[2] != lq[2]:
            raise SpecError("k.shape", tuple(k.shape), f"[total_k, Hkv, {lq[2]}] (q's head dim)")
        if lv[:2] != lk[:2]:
            raise SpecError("v.shape", tuple(v.shape), f"[{lk[0]}, {lk[1]}, Dv] (k's tokens and heads)")
        for name, lx in (("q", lq), ("k", lk), ("v", lv)):
            if min(lx[1:]) == 0:
                raise SpecError(f"{name}.shape", lx, "heads and head dim of at least 1 (TND)")
        heads_q, heads_kv = lq[1], lk[1]
    else:
        lq, lk, lv = ((x.shape[0], x.shape[2], x.shape[1], x.shape[3]) if layout == "BSND" else tuple(x.shape) for x in (q, k, v))
        bsz, dqk = lq[0], lq[3]
        if lk[0] != bsz or lk[3] != dqk:
            raise SpecError("k.shape", tuple(k.shape), f"batch {bsz} and head dim {dqk} like q ({layout})")
        if lv[:3] != lk[:3]:
            raise SpecError("v.shape", tuple(v.shape), f"the batch, heads and length of k {tuple(k.shape)} ({layout})")
        for name, x in (("q", q), ("k", k), ("v", v)):
            if min(x.shape) == 0:
                raise SpecError(f"{name}.shape", tuple(x.shape), "no zero-sized dimension")
        heads_q, heads_kv = lq[1], lk[1]
    if heads_q % heads_kv:
        raise SpecError("k.shape", tuple(k.shape), f"a head count that divides q's {heads_q} heads ({layout})")
    return lq, lk, lv


def backward_inputs(o: Any, do: Any, lse: Any, *, dtype: Any, shape: tuple, shape_note: str, lse_shape: tuple, kind: ArrayKind,
                    layout: str) -> None:
    """The forward's output ``o``, its gradient ``do`` and the logsumexp ``lse`` a backward call takes:
    ``o`` and ``do`` arrays of ``kind`` in ``layout``, of the dtype of q (``dtype``) and the physical
    ``shape`` (``shape_note`` says what it is made of); ``lse`` float32 of ``lse_shape``.

    Raises:
        SpecError: the first argument that is not so (names it, its value and what is accepted).
    """
    for name, x in (("o", o), ("do", do)):
        array(name, x, kind=kind, layout=layout)
        if x.dtype != dtype:
            raise SpecError(f"{name}.dtype", str(x.dtype), f"{dtype}, the dtype of q")
        if tuple(x.shape) != tuple(shape):
            raise SpecError(f"{name}.shape", tuple(x.shape), f"{tuple(shape)} ({shape_note})")
    accepted = f"a float32 array of shape {tuple(lse_shape)} (the forward's logsumexp)"
    if not isinstance(lse, np.ndarray):
        raise SpecError("lse", type(lse).__name__, accepted)
    if lse.dtype != np.float32:
        raise SpecError("lse.dtype", str(lse.dtype), accepted)
    if lse.shape != tuple(lse_shape):
        raise SpecError("lse.shape", lse.shape, accepted)


def score_mod_alone(score_mod: Any, cap: float | None, slopes: Any, *, error: type = SpecError) -> None:
    """FlashAttention's softcap (``cap``, as :func:`softcap` returns it) and ALiBi ``slopes`` are score
    mods of their own: not together with ``score_mod`` (write them in it: :func:`tilegen.mods.softcap`,
    :func:`tilegen.mods.alibi`). ``error``: the front-end's exception, with SpecError's arguments."""
    if score_mod is not None and (cap is not None or slopes is not None):
        which = "softcap" if cap is not None else "alibi_slopes"
        raise error(which, cap if cap is not None else f"a {type(slopes).__module__.split('.')[0]}.{type(slopes).__name__}",
                    "its default when score_mod is given (write it in the score mod: tilegen.mods.softcap, tilegen.mods.alibi)")


# --- learnt per-head parameters: sinks and ALiBi slopes -------------------------------------------------


def _float_array(name: str, x: Any, kind: ArrayKind, device: Any, accepted: str) -> None:
    if not isinstance(x, kind.cls):
        raise SpecError(name, type(x).__name__, accepted)
    if x.dtype not in kind.floats:
        raise SpecError(f"{name}.dtype", str(x.dtype), f"a floating-point dtype ({kind.float_words})")
    if kind.devices and x.device != device:
        raise SpecError(f"{name}.device", str(x.device), f"q's device {device}")


def sinks(x: Any, heads_q: int, *, kind: ArrayKind = NUMPY, device: Any = None) -> Any:
    """Learnable sink logits (gpt-oss; DESIGN §3): None, or a float array [Hq] (on q's ``device``).

    Returns: None; NumPy: the logits as float32 [Hq], checked finite; torch: the tensor (its values are
    checked on the host copy the interpreter or a plan's miss makes).

    Raises:
        SpecError: not a float array of ``kind``, on another device, of another shape, or (NumPy) with
            a non-finite value.
    """
    if x is None:
        return None
    accepted = f"a float {kind.noun} of shape [{heads_q}] (one finite logit per query head) or None"
    _float_array("sinks", x, kind, device, accepted)
    if tuple(x.shape) != (heads_q,):
        raise SpecError("sinks.shape", tuple(x.shape), accepted)
    if kind is not NUMPY:
        return x
    out = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(out).all():
        raise SpecError("sinks", "a non-finite value", accepted)
    return out


def alibi_slopes(x: Any, heads_q: int, rows: int | None, *, rows_are: str = "batch", kind: ArrayKind = NUMPY, device: Any = None) -> Any:
    """FlashAttention's ALiBi slopes: None, or a float array [Hq] or [rows, Hq] (one row per batch entry,
    or per sequence of a packed batch: ``rows_are``), on q's ``device``. ``rows`` None: any row count
    (checked where it is known). Returns ``x``.

    Raises:
        SpecError: not a float array of ``kind``, on another device, or of another shape.
    """
    if x is None:
        return None
    two = f"[{'B' if rows is None else rows}, {heads_q}]"
    accepted = f"a float {kind.noun} of shape [{heads_q}] or {two} (one row per {'batch entry' if rows_are == 'batch' else 'sequence'}) or None"
    _float_array("alibi_slopes", x, kind, device, accepted)
    shape = tuple(x.shape)
    if not (shape == (heads_q,) or (len(shape) == 2 and shape[1] == heads_q and (rows is None or shape[0] == rows))):
        raise SpecError("alibi_slopes.shape", shape, accepted)
    return x


# --- packed batches: sequence offsets ------------------------------------------------------------------


def _offsets_accepted(kind: ArrayKind, total: int) -> str:
    return f"an int32 {kind.noun} [num_seqs + 1] of non-decreasing offsets from 0 to at most {total} (the tokens)"


def offsets_array(name: str, cu: Any, total: int, *, kind: ArrayKind = NUMPY) -> None:
    """``cu_seqlens_*`` is an int32 array of ``kind`` with one dimension of at least 2 entries (its
    values are :func:`offsets`' to check, on the host)."""
    accepted = _offsets_accepted(kind, total)
    if not isinstance(cu, kind.cls):
        raise SpecError(name, type(cu).__name__, accepted)
    if cu.dtype != kind.int32:
        raise SpecError(f"{name}.dtype", str(cu.dtype), accepted)
    if len(cu.shape) != 1 or cu.shape[0] < 2:
        raise SpecError(f"{name}.shape", tuple(cu.shape), accepted)


def offsets(name: str, cu: Any, total: int) -> np.ndarray:
    """``cu_seqlens_*`` (a NumPy array): int32 [nseq + 1], non-decreasing, from >= 0 to <= ``total``
    (FlashAttention's convention; tokens past the last entry belong to no sequence). Returns the
    offsets as int64."""
    offsets_array(name, cu, total)
    accepted = _offsets_accepted(NUMPY, total)
    c = cu.astype(np.int64)
    if c[0] < 0:
        raise SpecError(name, f"first entry {int(c[0])}", accepted)
    bad = np.nonzero(np.diff(c) < 0)[0]
    if bad.size:
        n = int(bad[0])
        raise SpecError(name, f"entries {n} and {n + 1} decrease ({int(c[n])} > {int(c[n + 1])})", accepted)
    if c[-1] > total:
        raise SpecError(name, f"last entry {int(c[-1])}", f"{accepted}; the tensor has {total} tokens")
    return c


def max_seqlen(name: str, value: Any, longest: int | None = None) -> int | None:
    """``max_seqlen_*``: None, or an integer at least the longest sequence (``longest``; None: its type
    only, the offsets not known yet)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or (longest is not None and value < longest):
        raise SpecError(name, value, "None or an integer at least the longest sequence" if longest is None else f"None or an integer >= {longest} (the longest sequence)")
    return int(value)
