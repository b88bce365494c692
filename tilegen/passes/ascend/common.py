"""What the Ascend passes share: whether a kernel still fits the target's levels, a kernel's launch grid as data,
the statements of a grid without inner loops, the hand-off tensors of a program, and the buffers and GM
tensors a statement reads and writes.
"""

from __future__ import annotations

import sympy

from tilegen.core.ir import Load, Loop, Program, Stmt, Store, grid_loops
from tilegen.models.footprint import kernel_footprints


def fits(kernel, target, env) -> bool:
    """Whether every level's footprint of ``kernel`` fits its usable bytes at the bound sizes ``env``
    (symbol name -> int)."""
    return all(fp.value(env) <= fp.level.usable for fp in kernel_footprints(kernel, target))


def env_of(program: Program) -> dict[str, int]:
    """The program's bound sizes by symbol name."""
    return {str(k): v for k, v in program.env}


def handoffs(program: Program) -> set[str]:
    """The names of the program's hand-off tensors (kind ``handoff``)."""
    return {t.name for t in program.tensors if t.kind == "handoff"}


def grid_key(kernel) -> tuple:
    """A kernel's launch grid as comparable data: (variable, start, stop) of each grid loop, outermost
    first. Two kernels with equal keys have the same program instances."""
    return tuple((str(lp.var), sympy.sympify(lp.start), sympy.sympify(lp.stop)) for lp in grid_loops(kernel))


def straight_grid_body(kernel) -> tuple[Stmt, ...] | None:
    """The statements inside ``kernel``'s grid when they hold no loop, else None."""
    grid = grid_loops(kernel)
    if not grid or any(isinstance(st, Loop) for st in grid[-1].body):
        return None
    return grid[-1].body


def access(stmt: Stmt, handoff: set[str]) -> tuple[set[str], set[str]]:
    """What ``stmt`` reads and writes: its buffers, and the GM tensors it loads or stores as ``gm:NAME``
    (not the hand-offs ``handoff``, which the slots and flags order)."""
    reads, writes = set(stmt.buffers_read()), set(stmt.buffers_written())
    if isinstance(stmt, Load) and stmt.src.tensor not in handoff:
        reads.add(f"gm:{stmt.src.tensor}")
    if isinstance(stmt, Store) and stmt.dst.tensor not in handoff:
        writes.add(f"gm:{stmt.dst.tensor}")
    return reads, writes


def resources(stmt: Stmt) -> tuple[set[str], set[str]]:
    """(read, written): buffer names and ``@tensor`` names (HBM tensors and hand-off tiles)."""
    reads, writes = set(stmt.buffers_read()), set(stmt.buffers_written())
    if isinstance(stmt, Load):
        reads.add("@" + stmt.src.tensor)
    elif isinstance(stmt, Store):
        writes.add("@" + stmt.dst.tensor)
    reads |= {"@" + t for t in getattr(stmt, "tensors", ()) or ()}
    return reads, writes


def depends(a: tuple[set[str], set[str]], b: tuple[set[str], set[str]]) -> bool:
    """Whether the later statement ``b`` depends on the earlier ``a`` (flow, anti or output)."""
    return bool(a[1] & (b[0] | b[1]) or a[0] & b[1])
