"""Target lowering passes, run between fusion and placement.

- :func:`split_matmul_scale` (Ascend): the cube's Mmad has no scale factor, so ``dst = alpha · a @ b``
  becomes ``dst = a @ b`` followed by ``dst = dst · alpha`` on the vector unit. Both forms compute the
  fp32 product and then multiply by alpha in fp32: the interpreter gives bitwise the same result.
- :func:`mask_cut_tiles_only` (Ascend): every ``Mask`` gets the schedule knob ``cut_only``: the emitted
  code skips the mask's work (the column-index vector, the compares and selects) on the tiles whose
  every pair is visible, which are the most tiles of a long causal or windowed sequence. The values are
  unchanged (a mask of such a tile writes nothing).
- :func:`wait_at_first_read` (Ascend, after placement): a load into a level of ``levels`` (the cube's
  L1) whose next statement does not read its tile gets the schedule knob ``wait_at_read``: the emitted
  code waits for the copy just before the first statement that reads the tile (LoadNzAsync/WaitLoaded),
  so that the statements in between (another copy, a matmul of tiles already there) overlap it.
"""

from __future__ import annotations

import dataclasses

from ..ir import Elementwise, Load, Loop, Mask, MatMul, Program, Stmt, map_body, walk


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


def _reads(stmt: Stmt) -> set[str]:
    """The buffers ``stmt`` reads, with everything a loop's body reads."""
    if isinstance(stmt, Loop):
        return {b for s, _ in walk(stmt.body) for b in s.buffers_read()}
    return set(stmt.buffers_read())


def _writes(stmt: Stmt) -> set[str]:
    if isinstance(stmt, Loop):
        return {b for s, _ in walk(stmt.body) for b in s.buffers_written()}
    return set(stmt.buffers_written())


def wait_at_first_read(program: Program, levels: frozenset[str]) -> Program:
    """Set ``wait_at_read`` on every unguarded ``Load`` (no ``rows``) into a buffer placed on one of
    ``levels`` whose first reader, later in the same body, is not the next statement, and that nothing
    between writes again (see the module docstring)."""
    scope = {b.name: b.scope for k in program.kernels for b in k.buffers}
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}  # their copies wait on a cross-core flag

    def fix(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        out = [dataclasses.replace(s, body=fix(s.body)) if isinstance(s, Loop) else s for s in body]
        for n, stmt in enumerate(out):
            if not isinstance(stmt, Load) or scope.get(stmt.dst) not in levels or stmt.src.tensor in handoff or stmt.rows:
                continue  # a guarded load (packed batch) reads its rows' ids on the scalar unit and waits at once
            readers = [m for m in range(n + 1, len(out)) if stmt.dst in _reads(out[m])]
            if not readers or readers[0] == n + 1:
                continue
            if any(stmt.dst in _writes(out[m]) for m in range(n + 1, readers[0])):
                continue
            out[n] = dataclasses.replace(stmt, wait_at_read=True)
        return tuple(out)

    kernels = tuple(dataclasses.replace(k, body=fix(k.body)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)
