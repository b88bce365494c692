"""Attention sinks (DESIGN §3): the gradient of the per-head sink logits, which every backend forms on
the host from the stored O, dO and L (their check: :func:`tilegen.core.validate.sinks`)."""

from __future__ import annotations

import numpy as np

from tilegen.core.hoststeps import dsinks


def sink_grad(o, do, lse, sinks, rows=None) -> np.ndarray:
    """dσ_h = −Σ_rows exp(σ_h − L_row)·D_row with D = rowsum(dO∘O) (DESIGN §3), float32 [Hq].

    ``o``, ``do``: [..., Hq, S, Dv] logical (BNSD or [Hq, S, Dv]); ``lse``: [..., Hq, S] fp32 from the
    forward; ``rows``: optional bool [S] of the rows that take part (varlen: tokens inside a sequence).
    D is formed in fp32 from the stored O as the backward's pre kernel does; the rest is
    :func:`tilegen.core.hoststeps.dsinks`, the one implementation the generated Triton modules carry too
    (float64, the sum over rows and batch in one fixed order: bitwise reproducible). An O(B·Hq·S) step
    after the kernels.
    """
    d = np.sum(np.asarray(do, dtype=np.float32) * np.asarray(o, dtype=np.float32), axis=-1, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # rows left out may hold lse = -inf
        return dsinks(d, np.asarray(lse), np.asarray(sinks), None if rows is None else np.asarray(rows))
