"""GPU pass pipelined-loads (right after placement, before the tile search reads the footprints): every
kernel gets :class:`~tilegen.core.gpu.PipelinedLoads`: Triton's software pipeliner keeps all
``num_stages`` copies of a tile loaded in a loop live over the whole loop, which the footprints count
(:func:`tilegen.models.footprint.live_intervals`)."""

from __future__ import annotations

import dataclasses

from tilegen.core.gpu import PipelinedLoads
from tilegen.core.ir import Program, annotate
from tilegen.passes.driver import Pass


def pipelined_loads(program: Program) -> Program:
    """``program`` with :class:`~tilegen.core.gpu.PipelinedLoads` on every kernel."""
    return dataclasses.replace(program, kernels=tuple(annotate(k, PipelinedLoads()) for k in program.kernels))


PIPELINED_LOADS = Pass(
    "pipelined-loads", lambda p, c: pipelined_loads(p),
    "Triton's pipeliner: a tile loaded with several stages lives over its whole loop, as the footprints count (PipelinedLoads)",
)
