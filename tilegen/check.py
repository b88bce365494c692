"""DESIGN §3's accuracy rule.

A tilegen result x passes against the float64 reference r when

    max|x − r|  <=  2 · max|p − r|  +  floor,    floor = eps(dtype) / 2 · max|r|

(the floor is half a unit in the last place at the result's scale: the error of rounding the result
once to its dtype, which a result stored in that dtype cannot avoid)

where p is the same-precision plain implementation (:mod:`tilegen.reference`). A NaN or an inf where
the reference is finite fails. Reported per tensor: max-abs error, relative error ‖x − r‖/‖r‖, the plain
implementation's max-abs error and the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes


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


def compare(name: str, ours: np.ndarray, ref: np.ndarray, plain: np.ndarray, dtype: str) -> Comparison:
    """Compare ``ours`` with the reference under the rule above (all arrays the same shape)."""
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
    bound = 2.0 * plain_max + 0.5 * dtypes.eps(dtype) * scale
    return Comparison(name, max_abs, rel, plain_max, bound, True)
