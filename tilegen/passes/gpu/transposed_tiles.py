"""GPU pass transposed-tiles: in a kernel whose launch grid walks K/V tiles (the backward's main nest),
every [Br, Bc] tile is held transposed, [Bc, Br], so that ``dV += Pᵀ dO`` and ``dK += dSᵀ Q`` take P
and dS straight from registers as the left operand of ``tl.dot``; S = Q Kᵀ becomes Sᵀ = K Qᵀ. The
kernel gets :class:`TransposedTiles` (``@transposed_tiles``) naming them; the values are unchanged."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Bc, Br, Kernel, Program, grid_loops
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class TransposedTiles(Annotation, key="transposed_tiles", on=("Kernel",)):
    """The kernel holds these [Br, Bc] buffers transposed, [Bc, Br] (its grid walks K/V tiles: ``dV +=
    Pᵀ dO`` and ``dK += dSᵀ Q`` then take P and dS straight from registers as ``tl.dot``'s left
    operand; S = Q Kᵀ is computed as Sᵀ = K Qᵀ). Rendering only: every hook keeps its default."""

    buffers: tuple[str, ...]

    def note(self, node) -> str:
        return "[Br, Bc] tiles held transposed"


def held_transposed(kernel: Kernel) -> tuple[str, ...]:
    """The buffers ``kernel`` holds transposed, sorted: every [Br, Bc] tile when a grid axis walks K/V
    tiles, else none."""
    if not any(loop.role == "kv_tile" for loop in grid_loops(kernel)):
        return ()
    return tuple(sorted(buf.name for buf in kernel.buffers if tuple(buf.shape) == (Br, Bc)))


def transposed_tiles(program: Program) -> Program:
    """``program`` with :class:`TransposedTiles` on each kernel that holds tiles
    transposed (:func:`held_transposed`)."""
    kernels = tuple(k.annotate(TransposedTiles(names)) if (names := held_transposed(k)) else k for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


TRANSPOSED_TILES = Pass(
    "transposed-tiles", lambda p, c: transposed_tiles(p),
    "a K/V-tile grid holds its [Br, Bc] tiles as [Bc, Br]: P and dS feed tl.dot from registers (@transposed_tiles)",
    annotates=True,
)
