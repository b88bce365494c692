"""Ascend pass ``split-matmul-scale``: the cube's Mmad has no scale factor, so ``dst = alpha · a @ b`` becomes
``dst = a @ b`` followed by ``dst = dst · alpha`` on the vector unit. Both forms compute the fp32 product and
then multiply by alpha in fp32: the interpreter gives bitwise the same result.
"""

from __future__ import annotations

import dataclasses

from tilegen.core.ir import Elementwise, MatMul, Program, map_body
from tilegen.passes.driver import Pass


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


PASS = Pass("split-matmul-scale", lambda p, c: split_matmul_scale(p), "each matmul's scale moved to a vector multiply (Mmad has none)")
