"""Ascend pass ``mask-cut-tiles-only`` and its knob ``@cut_only``: every ``Mask`` gets :class:`CutOnly`: the
emitted code skips the mask's work (the column-index vector, the compares and selects) on the tiles whose
every pair is visible, which are the most tiles of a long causal or windowed sequence. The values are
unchanged (a mask of such a tile writes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Mask, Program
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class CutOnly(Annotation, key="cut_only", on=("Mask",)):
    """The generated code does the mask's work only on a tile the mask cuts (some pair hidden or
    padded); on a tile whose every pair is visible it issues nothing. The result is the same either way."""

    def note(self, node) -> str:
        return "cut tiles only"


def mask_cut_tiles_only(program: Program) -> Program:
    """Put :class:`CutOnly` on every ``Mask`` (see the module docstring)."""
    return program.map_stmts(lambda stmt: stmt.annotate(CutOnly()) if isinstance(stmt, Mask) else stmt)


PASS = Pass("mask-cut-tiles-only", lambda p, c: mask_cut_tiles_only(p), "a Mask does its work only on the tiles it cuts (@cut_only)")
