"""Attention sinks (DESIGN §3): the gradient of the per-head sink logits, which every backend forms on
the host from the stored O, dO and L (their check: :func:`tilegen.core.validate.sinks`)."""

from __future__ import annotations

import numpy as np


def sink_grad(o, do, lse, sinks, rows=None) -> np.ndarray:
    """dσ_h = −Σ_rows exp(σ_h − L_row)·D_row with D = rowsum(dO∘O) (DESIGN §3), float32 [Hq].

    ``o``, ``do``: [..., Hq, S, Dv] logical (BNSD or [Hq, S, Dv]); ``lse``: [..., Hq, S] fp32 from the
    forward; ``rows``: optional bool [S] of the rows that take part (varlen: tokens inside a sequence).
    D is formed in fp32 from the stored O as the backward's pre kernel does; the sum over rows (and
    batch) runs in float64 in one fixed order (NumPy's pairwise sum over a fixed shape): the result is
    bitwise reproducible. An O(B·Hq·S) step after the kernels.
    """
    d = np.sum(np.asarray(do, dtype=np.float32) * np.asarray(o, dtype=np.float32), axis=-1, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # rows left out may hold lse = -inf
        w = np.exp(np.asarray(sinks, dtype=np.float64).reshape(-1, 1) - np.asarray(lse, dtype=np.float64)) * d
    if rows is not None:
        w = np.where(rows, w, 0.0)
    axes = tuple(range(w.ndim - 2)) + (w.ndim - 1,)
    return (-np.sum(w, axis=axes)).astype(np.float32)
