"""Target lowering passes, run between fusion and placement.

- :func:`split_matmul_scale` (Ascend): the cube's Mmad has no scale factor, so ``dst = alpha · a @ b``
  becomes ``dst = a @ b`` followed by ``dst = dst · alpha`` on the vector unit. Both forms compute the
  fp32 product and then multiply by alpha in fp32: the interpreter gives bitwise the same result.
- :func:`mask_cut_tiles_only` (Ascend): every ``Mask`` gets the schedule knob ``cut_only``: the emitted
  code skips the mask's work (the column-index vector, the compares and selects) on the tiles whose
  every pair is visible, which are the most tiles of a long causal or windowed sequence. The values are
  unchanged (a mask of such a tile writes nothing).
"""

from __future__ import annotations

import dataclasses

from ..ir import Elementwise, Mask, MatMul, Program, map_body


def split_matmul_scale(program: Program) -> Program:
    """Move every matmul's ``alpha`` into a following elementwise multiplication."""

    def edit(stmt):
        if isinstance(stmt, MatMul) and stmt.alpha != 1.0:
            if stmt.accumulate:
                raise ValueError(f"cannot split the scale of an accumulating matmul into {stmt.dst}")
            return (dataclasses.replace(stmt, alpha=1.0), Elementwise(stmt.dst, "mul", (stmt.dst, stmt.alpha)))
        return stmt

    kernels = tuple(dataclasses.replace(k, body=map_body(k.body, edit)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


def mask_cut_tiles_only(program: Program) -> Program:
    """Set the ``cut_only`` knob on every ``Mask`` (see the module docstring)."""

    def edit(stmt):
        return dataclasses.replace(stmt, cut_only=True) if isinstance(stmt, Mask) else stmt

    kernels = tuple(dataclasses.replace(k, body=map_body(k.body, edit)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)
