"""Ascend pass ``snake-deal`` and its knob ``@deal``: a kernel whose programs' work depends on the grid's fastest
axis (the inner tile loop's bounds use that tile index: a causal or windowed mask) gets
:class:`Deal`\n``("snake")``: the cores take the programs in boustrophedon order, so that each core's share of
heavy and light tiles evens out (llama2-7b's causal forward: the slowest core's pairs 432 → 365 of an even
share of 363).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Kernel, Loop, Program, grid_loops, walk
from tilegen.passes.driver import Pass

DEALS = ("cyclic", "snake")  # Deal.order


@dataclass(frozen=True)
class Deal(Annotation, key="deal", on=("Kernel",)):
    """How a target whose cores loop over the grid's programs (Ascend: ``pid`` in row-major grid order)
    deals them. ``"cyclic"`` (also a kernel without the annotation): core c takes pid = c, c + cores,
    c + 2·cores, ...; ``"snake"``: in round r core c takes pid = r·cores + c when r is even,
    r·cores + cores − 1 − c when r is odd, so that a core that drew a heavy program of a round draws a
    light one the next (the grid's fastest axis is a tile index whose work grows or shrinks along it
    under a causal mask)."""

    order: str

    def check(self, node, at: Site) -> str:
        return "" if self.order in DEALS else f"order {self.order!r} is not one of {', '.join(DEALS)}"

    def note(self, node) -> str:
        return "programs dealt by turns (snake)" if self.order == "snake" else ""


def deal_of(kernel: Kernel) -> str:
    """How the cores deal ``kernel``'s programs (:class:`Deal`; ``"cyclic"`` without it)."""
    d = kernel.get(Deal)
    return d.order if d is not None else "cyclic"


def snake_deal(program: Program) -> Program:
    """Put ``Deal("snake")`` on every kernel whose innermost grid loop's body holds a tile loop
    with bounds that use that grid loop's variable (see the module docstring); the others keep
    the cyclic deal."""
    kernels = []
    for k in program.kernels:
        grid = grid_loops(k)
        varies = False
        if grid:
            var = grid[-1].var
            varies = any(isinstance(s, Loop) and s.kind == "serial" and var in (sympy.sympify(s.start).free_symbols | sympy.sympify(s.stop).free_symbols)
                         for s, _ in walk(grid[-1].body))
        kernels.append(k.annotate(Deal("snake")) if varies else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("snake-deal", lambda p, c: snake_deal(p), "programs of uneven work dealt over the cores by turns, odd turns from the last core down (@deal)")
