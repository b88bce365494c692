"""Cost model: FLOPs by unit, bytes by level, and a predicted time per kernel and in total.

For each kernel of a bound, placed program (counts from :mod:`tilegen.analysis`, which equal what the
interpreter measures):

- work: matmul FLOPs on the cube / tensor cores; vector element-operations and exp/log operations on
  the vector unit; bytes of HBM tensors (inputs, outputs, workspaces) over HBM; bytes of per-core
  hand-off tiles over L2 (they stay L2-resident: their size does not depend on N);
- parallelism: the kernel's program instances run on ``P`` cores (AIC count or SMs) in waves; with
  ``n`` instances the busy fraction is ``n / (ceil(n / P) · P)``, and every rate is scaled by it;
- time = max(cube time, vector time (plain + exp, one unit), HBM time, L2 time) + launch overhead.
  Each unit is assumed to overlap the others perfectly (a roofline), load imbalance between programs
  (causal masks) is ignored; both make the prediction a lower bound.

Utilization = matmul FLOPs / (time · peak matmul rate).

With a mask mod the counts cover the non-empty tile pairs only (empty ones are skipped), the partial
ones carrying the mask's vector work (:func:`tilegen.analysis.count`); when the classes are known only
at run time (a mask of parameters without values) every tile in the window's bounds counts as visited
and partial, an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .analysis import Counts, count
from .ir import MatMul, Program, walk
from .targets import Target


@dataclass(frozen=True)
class KernelPrediction:
    """One kernel: programs, work, and times in seconds per resource."""

    name: str
    phase: str
    programs: int
    busy: float
    flops: dict
    bytes: dict
    times: dict
    time_s: float
    bound: str


@dataclass(frozen=True)
class Prediction:
    """A program's predicted time (seconds), work (FLOPs, bytes) and matmul utilization."""

    kernels: tuple[KernelPrediction, ...]
    time_s: float
    matmul_flops: int
    hbm_bytes: int
    l2_bytes: int
    utilization: float
    target: str

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "time_s": self.time_s,
            "matmul_flops": self.matmul_flops,
            "hbm_bytes": self.hbm_bytes,
            "l2_bytes": self.l2_bytes,
            "utilization": self.utilization,
            "kernels": [
                {
                    "name": k.name,
                    "phase": k.phase,
                    "programs": k.programs,
                    "busy_fraction": k.busy,
                    "flops": k.flops,
                    "bytes": k.bytes,
                    "times_s": k.times,
                    "time_s": k.time_s,
                    "bound": k.bound,
                }
                for k in self.kernels
            ],
        }


def _matmul_dtype(program: Program) -> str:
    for kernel in program.kernels:
        buffers = {b.name: b for b in kernel.buffers}
        for stmt, _ in walk(kernel.body):
            if isinstance(stmt, MatMul):
                return buffers[stmt.a].dtype
    return "fp16"


def predict(program: Program, target: Target, counts: dict[str, Counts] | None = None) -> Prediction:
    """The cost model's prediction for a bound program on ``target`` (see the module docstring)."""
    counts = counts if counts is not None else count(program)
    kinds = {t.name: t.kind for t in program.tensors}
    dtype = _matmul_dtype(program)
    cores = target.parallel_units
    launch = target.overhead["launch_us"].value * 1e-6 if "launch_us" in target.overhead else 0.0
    out = []
    total_flops = 0
    hbm_total = l2_total = 0
    for kernel in program.kernels:
        c = counts[kernel.name]
        n = max(c.programs, 1)
        busy = n / (math.ceil(n / cores) * cores)
        hbm = sum(c.tensor_bytes(t) for t in set(c.bytes_read) | set(c.bytes_written) if kinds[t] != "handoff")
        l2 = sum(c.tensor_bytes(t) for t in set(c.bytes_read) | set(c.bytes_written) if kinds[t] == "handoff")
        times = {
            "cube": c.flops.get("matmul", 0) / (target.matmul_flops(dtype) * busy),
            "vector": (c.flops.get("vector", 0) / target.rate("vector") + c.flops.get("exp", 0) / target.rate("exp")) / busy,
            "hbm": hbm / (target.bytes_per_s("hbm") * busy),
            "l2": l2 / (target.bytes_per_s("l2") * busy),
        }
        bound = max(times, key=times.get)
        time_s = times[bound] + launch
        out.append(
            KernelPrediction(
                name=kernel.name,
                phase=kernel.phase,
                programs=c.programs,
                busy=busy,
                flops={k: int(v) for k, v in c.flops.items()},
                bytes={"hbm": int(hbm), "l2": int(l2)},
                times=times,
                time_s=time_s,
                bound=bound,
            )
        )
        total_flops += c.flops.get("matmul", 0)
        hbm_total += hbm
        l2_total += l2
    time_s = sum(k.time_s for k in out)
    util = total_flops / (time_s * target.matmul_flops(dtype)) if time_s > 0 else 0.0
    return Prediction(tuple(out), time_s, int(total_flops), int(hbm_total), int(l2_total), util, target.name)
