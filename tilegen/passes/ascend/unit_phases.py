"""Ascend pass ``unit-phases`` (before placement, GM hand-off targets): in every loop body without inner loops, a
stable topological reorder of the statements by *unit phase*: a statement's phase is the number of changes of
unit (cube ↔ vector) along its longest chain of dependences inside the body. The backward's body then reads:
the cube computes S = Q Kᵀ and dP = dO Vᵀ back to back (phase 0), the vector P and dS (phase 1), the cube dV,
dK, dQ (phase 2): placement then inserts one batch of hand-offs per change of unit instead of one per tile
(before: S → P → dV, dP → dS → dK, dQ, two round trips). Loads, fills and stores have no unit of their own and
take the phase of what they depend on, so a load stays where it was unless a dependence moves it. The pass
only reorders; every dependence (through a buffer or an HBM tensor, read or write) keeps its order, so the
values are unchanged.
"""

from __future__ import annotations

import dataclasses

from tilegen.core.ir import Loop, Program, Stmt
from tilegen.passes.ascend.common import depends, resources
from tilegen.passes.driver import Pass
from tilegen.passes.place import op_unit


def _phases(body: tuple[Stmt, ...]) -> list[int]:
    res = [resources(s) for s in body]
    phase: list[int] = []
    unit: list[str | None] = []
    for n, stmt in enumerate(body):
        own = op_unit(stmt)
        best, best_unit = 0, None
        for m in range(n):
            if not depends(res[m], res[n]):
                continue
            step = 1 if own is not None and unit[m] is not None and unit[m] != own else 0
            if phase[m] + step > best or (phase[m] + step == best and best_unit is None):
                best, best_unit = phase[m] + step, unit[m]
        phase.append(best)
        unit.append(own if own is not None else best_unit)
    return phase


def _reorder(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    if any(isinstance(s, Loop) for s in body):
        return tuple(dataclasses.replace(s, body=_reorder(s.body)) if isinstance(s, Loop) else s for s in body)
    phase = _phases(body)
    return tuple(s for _, _, s in sorted(zip(phase, range(len(body)), body)))


def unit_phases(program: Program, forms: tuple[str, ...] = ("fused",)) -> Program:
    """Reorder every innermost loop body of ``program`` by unit phase (module docstring); programs
    whose ``form`` attribute is not in ``forms`` (the forward) are returned unchanged."""
    if program.attr("form") not in forms:
        return program
    kernels = tuple(dataclasses.replace(k, body=_reorder(k.body)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


PASS = Pass("unit-phases", lambda p, c: unit_phases(p), "each body reordered by cube/vector phase: the backward's S and dP share one cube step")
