"""The three element types tilegen handles, by their short names.

``fp16`` is IEEE binary16 (``numpy.float16``), ``bf16`` is bfloat16 (``ml_dtypes.bfloat16``), ``fp32``
is IEEE binary32. Matmuls accumulate in fp32; casts to fp16/bf16 round to nearest even, as the cube's
Fixpipe and the vector Cast with ``CAST_RINT`` do on Ascend (ascendc-api.md §5.6) and as ``tl.dot``'s
operand conversion does in Triton.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = ("fp16", "bf16", "fp32")

_NUMPY = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "fp32": np.dtype(np.float32)}
# int32: only for parameter arrays of score/mask mods (document ids, lengths), never an attention operand
_NUMPY_ALL = {**_NUMPY, "int32": np.dtype(np.int32)}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of ``name`` (one of :data:`DTYPES`, or ``int32`` for a mod's index parameter)."""
    return _NUMPY_ALL[name]


def itemsize(name: str) -> int:
    """Bytes per element of ``name``."""
    return _NUMPY_ALL[name].itemsize


def eps(name: str) -> float:
    """Machine epsilon of ``name`` (2**-10 for fp16, 2**-7 for bf16, 2**-23 for fp32)."""
    return float(ml_dtypes.finfo(_NUMPY[name]).eps)


def name_of(dtype: np.dtype) -> str | None:
    """The short name of a NumPy dtype, or None when tilegen does not handle it."""
    for key, value in _NUMPY.items():
        if np.dtype(dtype) == value:
            return key
    return None


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """Round float32 ``x`` to ``name``'s precision and return float32 (identity for fp32)."""
    if name == "fp32":
        return x.astype(np.float32, copy=False)
    return x.astype(_NUMPY[name]).astype(np.float32)
