"""GPU pass pipelined-loads (right after placement, before the tile search reads the footprints): every
kernel gets :class:`PipelinedLoads` (``@pipelined_loads``): Triton's software pipeliner keeps all
``num_stages`` copies of a tile loaded in a loop live over the whole loop, which the footprints count
(:func:`tilegen.models.footprint.live_intervals`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Program
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class PipelinedLoads(Annotation, key="pipelined_loads", on=("Kernel",)):
    """The kernel's loops are software-pipelined by the compiler (Triton's pipeliner issues the loads of
    the next ``num_stages − 1`` iterations while this one computes: triton-lang/triton,
    lib/Dialect/TritonGPU/Transforms/Pipeliner), so every copy of a tile loaded with several stages is
    live over its whole loop (:meth:`pipelined_loads`, read by :func:`tilegen.models.footprint.live_intervals`)."""

    def pipelined_loads(self) -> bool:
        return True

    def note(self, node) -> str:
        return "staged loads live over their loop (software pipelining)"


def pipelined_loads(program: Program) -> Program:
    """``program`` with :class:`PipelinedLoads` on every kernel."""
    return dataclasses.replace(program, kernels=tuple(k.annotate(PipelinedLoads()) for k in program.kernels))


PIPELINED_LOADS = Pass(
    "pipelined-loads", lambda p, c: pipelined_loads(p),
    "Triton's pipeliner: a tile loaded with several stages lives over its whole loop, as the footprints count (@pipelined_loads)",
)
