"""DESIGN §3's accuracy rule.

A tilegen result x passes against the float64 reference r when

    max|x − r|  <=  2 · max|p − r|  +  floor,
    floor = (eps(dtype) + 2·sqrt(n)·eps(fp32)) · max(max|r|, unit)

The floor is one unit in the last place at the result's scale, or at ``unit`` (1.0, the scale of the
inputs) when the result is smaller: rounding a result to its dtype, or cancelling O(unit) terms such
as dP − D, costs that much even where the plain implementation happens to be exact (a single key, for
instance, makes dQ exactly 0 in exact arithmetic). The 2·sqrt(n) ulps of fp32, n the longest sum in
the computation (the head dim or a sequence length), cover the different order in which tiles
accumulate in fp32 (online softmax, blocked matmuls): two fp32 sums of n terms taken in different orders
differ by about sqrt(n) ulps. Negligible for fp16/bf16 (under 0.5% of their ulp for n ≤ 600), they
keep fp32 results from failing at their own noise floor.

Gradients get one more term, ``rel_floor · max|r|`` with ``rel_floor = eps(fp32) · max|L|``: the
recompute backward reads P as exp(S − L) through the stored fp32 logsumexp, and L's own rounding (an
ulp of |L|) is a relative error of P that a plain implementation, which normalises P itself, does not
have. It is far below the fp16/bf16 budgets and dominates only in fp32.

where p is the same-precision plain implementation (:mod:`tilegen.core.reference`). A NaN or an inf where
the reference is finite fails. Reported per tensor: max-abs error, relative error ‖x − r‖/‖r‖, the plain
implementation's max-abs error and the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilegen.core import dtypes


@dataclass(frozen=True)
class Comparison:
    """One tensor's errors against the float64 reference (max-abs and relative, both float)."""

    name: str
    max_abs: float
    rel: float
    plain_max_abs: float
    bound: float
    finite: bool

    @property
    def ok(self) -> bool:
        return self.finite and self.max_abs <= self.bound

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return (
            f"{self.name:<4} max-abs {self.max_abs:.3e}  rel {self.rel:.3e}  "
            f"(plain {self.plain_max_abs:.3e}, bound {self.bound:.3e})  {verdict}"
        )


def longest_sum(spec) -> int:
    """n of the rule for a spec: the longest contraction (head dims, sequence lengths)."""
    return max(spec.head_dim_qk, spec.head_dim_v, spec.seq_q, spec.seq_k)


def lse_rel_floor(lse: np.ndarray) -> float:
    """eps(fp32) · max|L| over the finite entries of a logsumexp array (0 when none)."""
    finite = np.asarray(lse, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    return dtypes.eps("fp32") * float(np.abs(finite).max(initial=0.0))


def compare(
    name: str,
    ours: np.ndarray,
    ref: np.ndarray,
    plain: np.ndarray,
    dtype: str,
    unit: float = 1.0,
    rel_floor: float = 0.0,
    terms: int = 16,
) -> Comparison:
    """Compare ``ours`` with the reference under the rule above (all arrays the same shape); ``terms``
    is n, the longest sum of the computation."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    plain = np.asarray(plain, dtype=np.float64)
    if ours.shape != ref.shape:
        raise ValueError(f"{name}: shape {ours.shape} != reference shape {ref.shape}")
    ref_finite = np.isfinite(ref)
    # Where the reference is -inf (L of an empty row) ours must be exactly that.
    finite = bool(np.array_equal(np.isfinite(ours), ref_finite) and np.array_equal(ours[~ref_finite], ref[~ref_finite]))
    if not finite:
        return Comparison(name, float("inf"), float("inf"), float("nan"), 0.0, False)
    with np.errstate(invalid="ignore"):
        diff = np.abs(np.where(ref_finite, ours - ref, 0.0))
        plain_diff = np.abs(np.where(ref_finite & np.isfinite(plain), plain - ref, 0.0))
    scale = float(np.abs(np.where(ref_finite, ref, 0.0)).max(initial=0.0))
    norm = float(np.linalg.norm(np.where(ref_finite, ref, 0.0)))
    max_abs = float(diff.max(initial=0.0))
    rel = float(np.linalg.norm(diff) / norm) if norm > 0 else max_abs
    plain_max = float(plain_diff.max(initial=0.0))
    fp32_floor = 2.0 * float(np.sqrt(max(terms, 16))) * dtypes.eps("fp32")
    bound = 2.0 * plain_max + (dtypes.eps(dtype) + fp32_floor) * max(scale, unit) + rel_floor * scale
    return Comparison(name, max_abs, rel, plain_max, bound, True)
