"""The compiler on one screen: spec → logical IR → passes → a bound, verified program.

Each step is a function IR → IR, and the verifier runs after every one (``PassLog`` keeps the program
after each pass, for ``tilegen inspect --print-after-all``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..build import build_backward, build_forward
from ..errors import SpecError
from ..ir import Bc, Br, Program
from ..spec import AttentionSpec

DEFAULT_TILE = 128  # Br = Bc = 128 when no target chooses: FA2's common tile (flash_fwd_launch_template.h)


@dataclass
class PassLog:
    """The program after each pass, in order (name, program)."""

    steps: list[tuple[str, Program]] = field(default_factory=list)

    def record(self, name: str, program: Program) -> Program:
        self.steps.append((name, program))
        return program


def default_tiles(spec: AttentionSpec) -> dict[sympy.Symbol, int]:
    """Br = Bc = 128, shrunk to the sequence rounded up to 16 when it is shorter."""

    def clamp(n: int) -> int:
        return min(DEFAULT_TILE, -(-n // 16) * 16)

    return {Br: clamp(spec.seq_q), Bc: clamp(spec.seq_k)}


def parse_tile_sizes(tile_sizes) -> dict[sympy.Symbol, int]:
    """``{"Br": 64, "Bc": 32}`` or ``(64, 32)`` → {Br: 64, Bc: 32}.

    Raises:
        SpecError: not two positive integers.
    """
    if isinstance(tile_sizes, dict):
        unknown = set(tile_sizes) - {"Br", "Bc"}
        if unknown or len(tile_sizes) != 2:
            raise SpecError("tile_sizes", tile_sizes, 'a mapping with exactly the keys "Br" and "Bc", or a pair (Br, Bc)')
        pair = (tile_sizes["Br"], tile_sizes["Bc"])
    elif isinstance(tile_sizes, (tuple, list)) and len(tile_sizes) == 2:
        pair = tuple(tile_sizes)
    else:
        raise SpecError("tile_sizes", tile_sizes, 'a pair (Br, Bc) or a mapping {"Br": ..., "Bc": ...}')
    for value in pair:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise SpecError("tile_sizes", tile_sizes, "two integers from 1 to 4096 (Br, Bc)")
    return {Br: pair[0], Bc: pair[1]}


def compile_forward(spec: AttentionSpec, target=None, tile_sizes=None, log: PassLog | None = None) -> Program:
    """The forward program of ``spec`` with tile sizes bound (``tile_sizes`` or the defaults)."""
    log = log or PassLog()
    if target is not None:
        from ..errors import TargetError

        raise TargetError(f"target {target!r}: no targets are defined yet")
    program = log.record("build", build_forward(spec))
    tiles = parse_tile_sizes(tile_sizes) if tile_sizes is not None else default_tiles(spec)
    return log.record("bind-tiles", program.bind(tiles))


def compile_backward_unfused(spec: AttentionSpec, tile_sizes=None, log: PassLog | None = None) -> Program:
    """The unfused ("store P") backward of ``spec`` with tile sizes bound."""
    log = log or PassLog()
    program = log.record("build", build_backward(spec))
    tiles = parse_tile_sizes(tile_sizes) if tile_sizes is not None else default_tiles(spec)
    return log.record("bind-tiles", program.bind(tiles))
