"""Queries on a scheduled program that passes, the footprints and the backends share: the buffers a
statement (with its nested loops) reads and writes, the unit that runs it, the stages of a
software-pipelined loop (:class:`~tilegen.core.ir.Pipelined`), the direction of a hand-off, and how a
kernel's programs could run as one stream (the Ascend knob ``@stream``, DESIGN §2)."""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.ir import Load, Loop, Program, Stmt, Store, grid_loops, lookahead_of, stages_of, walk


def reads_in(stmt: Stmt) -> set[str]:
    """The buffers ``stmt`` reads, with everything a loop's body reads."""
    if isinstance(stmt, Loop):
        return {b for s, _ in walk(stmt.body) for b in s.buffers_read()}
    return set(stmt.buffers_read())


def writes_in(stmt: Stmt) -> set[str]:
    """The buffers ``stmt`` writes, with everything a loop's body writes."""
    if isinstance(stmt, Loop):
        return {b for s, _ in walk(stmt.body) for b in s.buffers_written()}
    return set(stmt.buffers_written())


def stmt_unit(stmt: Stmt, units) -> str | None:
    """The unit that runs ``stmt`` (the owner of the buffer it loads into, stores from, or writes);
    ``units``: buffer name -> its unit (``Buffer.unit``)."""
    if isinstance(stmt, Load):
        return units.get(stmt.dst)
    if isinstance(stmt, Store):
        return units.get(stmt.src)
    written = stmt.buffers_written()
    return units.get(written[0]) if written else None


def handoff_direction(program: Program, name: str) -> str:
    """``c2v`` when the cube stores into hand-off ``name``, else ``v2c``."""
    for k in program.kernels:
        units = {b.name: b.unit for b in k.buffers}
        for s, _ in walk(k.body):
            if isinstance(s, Store) and s.dst.tensor == name:
                return "c2v" if units.get(s.src) == "cube" else "v2c"
    return "v2c"


def unit_stages(loop: Loop, units, unit: str) -> tuple[list, list] | None:
    """``unit``'s statements of a pipelined loop as (earlier stage, later stage), in body order; None
    where the unit runs fewer than two stages of it."""
    mine = [(s, g) for s, g in zip(loop.body, stages_of(loop)) if stmt_unit(s, units) == unit]
    stages = sorted({g for _, g in mine})
    if len(stages) != 2:
        return None
    return [s for s, g in mine if g == stages[0]], [s for s, g in mine if g == stages[1]]


@dataclasses.dataclass(frozen=True)
class StreamSplit:
    """How a program body runs as a stream (the Ascend knob ``@stream``): the body (the innermost grid loop's)
    is opening statements, one software-pipelined loop (``loop``; or a serial ``head`` loop holding it
    alone, whose bounds it does not read: the pairs are then (head, tile) in that order) and closing
    statements. Per unit
    (``"cube"``, ``"vector"``; the unit's own statements, in body order): ``early`` its statements of the
    stream that runs the loop's earlier stage (the opening statements that stage needs: those that access
    a buffer it accesses or a later such statement accesses; then that stage's statements), ``late`` those of the other stream (the other
    opening statements, which open a program before its first later stage, that stage's statements, the
    closing statements), and ``cross`` the buffers both streams access per program (not the per-tile
    copies the loop already carries from one stage to the other): each needs ``lookahead + 1`` copies,
    one per program in flight."""

    loop: Loop
    head: Loop | None  # a serial loop (over the query heads of a KV head) whose body is ``loop`` alone
    early: dict[str, tuple[tuple[Stmt, ...], tuple[Stmt, ...]]]  # unit -> (opening statements, loop stage)
    late: dict[str, tuple[tuple[Stmt, ...], tuple[Stmt, ...], tuple[Stmt, ...]]]  # unit -> (opening, stage, closing)
    cross: dict[str, frozenset[str]]


def accessed(stmts) -> set[str]:
    """The buffers ``stmts`` (and the statements nested in them) read or write."""
    return set().union(*(reads_in(st) | writes_in(st) for st in stmts))


def carried(first, later, staged) -> set[str]:
    """The tiles a pipelined loop carries from a unit's earlier stage (statements ``first``) to its later
    one (``later``): written in the one, read in the other, and among ``staged`` (several copies)."""
    return {b for st in first for b in st.buffers_written()} & {b for st in later for b in st.buffers_read()} & set(staged)


def stream_split(kernel) -> StreamSplit | None:
    """The :class:`StreamSplit` of ``kernel``, or None where its program body is not one pipelined loop
    (:class:`~tilegen.core.ir.Pipelined`; alone in a head loop or not) between
    statements that are not loops, or where an opening or closing statement accesses a tile the loop
    carries from one stage to the other."""
    grid = grid_loops(kernel)
    if not grid:
        return None
    body = grid[-1].body
    at = [n for n, st in enumerate(body) if isinstance(st, Loop)]
    if len(at) != 1:
        return None
    index, loop, head = at[0], body[at[0]], None
    if not stages_of(loop) and len(loop.body) == 1 and isinstance(loop.body[0], Loop):
        head, loop = loop, loop.body[0]
        if head.var in (sympy.sympify(loop.start).free_symbols | sympy.sympify(loop.stop).free_symbols):
            return None
    if not stages_of(loop) or lookahead_of(loop) < 1:
        return None
    units = {b.name: b.unit for b in kernel.buffers}
    if any(stmt_unit(st, units) not in ("cube", "vector") for n, st in enumerate(body) if n != index):
        return None
    staged = {b.name for b in kernel.buffers if b.stages > 1}
    early, late, cross = {}, {}, {}
    for unit in ("cube", "vector"):
        split = unit_stages(loop, units, unit)
        if split is None:  # a unit that runs the loop in one stage: all of it early, its closing late
            split = ([s for s in loop.body if stmt_unit(s, units) == unit], [])
        first, later = split
        mine = [st for st in body[:index] if stmt_unit(st, units) == unit]
        need, in_a = accessed(first), set()
        for n in reversed(range(len(mine))):  # an opening statement the earlier stage (or one it needs) depends on
            if accessed(mine[n:n + 1]) & need:
                in_a.add(n)
                need |= accessed(mine[n:n + 1])
        opening_a = tuple(st for n, st in enumerate(mine) if n in in_a)
        opening_b = tuple(st for n, st in enumerate(mine) if n not in in_a)
        closing = tuple(st for st in body[index + 1:] if stmt_unit(st, units) == unit)
        carry = carried(first, later, staged)
        if carry & accessed(opening_a + opening_b + closing):
            return None  # a carried tile's ring holds the stream's newest pairs, not the program's own
        early[unit] = (opening_a, tuple(first))
        late[unit] = (opening_b, tuple(later), closing)
        cross[unit] = frozenset((accessed(opening_a + tuple(first)) & accessed(opening_b + tuple(later) + closing)) - carry)
    return StreamSplit(loop, head, early, late, cross)
