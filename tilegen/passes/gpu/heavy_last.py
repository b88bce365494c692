"""GPU pass heavy-last: a Q-tile grid axis whose programs grow with the tile index (a causal-like window:
right bounded, left unbounded, so Q tile i visits about i + 1 K/V tiles) gets
:class:`HeavyLast` (``@heavy_last``): its programs are numbered from the last tile down, so the longest
ones start first and the short ones fill the tail of the launch (a load-balancing step; each program
computes the same thing). On launch axis 0 by default, among the tiles of one head; on axis 2, across
all heads, when the forward's ``heavy_first`` made it outermost. Only an axis with a launch axis of its
own: past three grid axes the outer ones share launch axis 2 and keep their order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Kernel, Loop, Program, grid_loops, walk
from tilegen.passes.driver import Pass

LAUNCH_AXES = 3  # CUDA's grid: x, y, z


@dataclass(frozen=True)
class HeavyLast(Annotation, key="heavy_last", on=("Loop",)):
    """A Q-tile grid axis whose programs grow with the tile index (causal): its programs are numbered from
    the last tile down, so the longest ones start first. Rendering only: every hook keeps its default."""

    def note(self, node) -> str:
        return "numbered from the last tile down"


def heavy_last_axis(program: Program, loop: Loop) -> bool:
    """Whether the grid loop ``loop`` (with a launch axis of its own) is numbered from the last tile down:
    it walks Q tiles, the window is causal-like, and it holds a K/V-tile loop."""
    return (
        loop.role == "q_tile"
        and program.mask.right >= 0
        and program.mask.left < 0
        and any(isinstance(s, Loop) and s.role == "kv_tile" for s, _ in walk(loop.body))
    )


def _kernel(program: Program, kernel: Kernel) -> Kernel:
    grid = grid_loops(kernel)
    own = grid if len(grid) <= LAUNCH_AXES else grid[len(grid) - (LAUNCH_AXES - 1):]  # the rest share launch axis 2
    marked = {id(lp) for lp in own if heavy_last_axis(program, lp)}
    if not marked:
        return kernel

    def rebuild(body):
        out = []
        for st in body:
            if isinstance(st, Loop) and st.kind == "parallel":
                new = dataclasses.replace(st, body=rebuild(st.body))
                out.append(new.annotate(HeavyLast()) if id(st) in marked else new)
            else:
                out.append(st)
        return tuple(out)

    return dataclasses.replace(kernel, body=rebuild(kernel.body))


def heavy_last(program: Program) -> Program:
    """``program`` with :class:`HeavyLast` on each Q-tile grid axis whose heaviest
    programs are last (:func:`heavy_last_axis`)."""
    return dataclasses.replace(program, kernels=tuple(_kernel(program, k) for k in program.kernels))


HEAVY_LAST = Pass(
    "heavy-last", lambda p, c: heavy_last(p),
    "a causal Q-tile grid axis numbered from the last tile down: the longest programs start first (@heavy_last)",
    annotates=True,
)
