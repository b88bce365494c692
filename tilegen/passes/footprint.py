"""On-chip footprints: bytes per level, as sympy expressions of the tile sizes and head dims.

For a placed program, each kernel's statements are numbered in program order and every buffer is live
from its first to its last access; a buffer accessed inside a loop and outside it, or read in a loop
before the loop writes it (an accumulator), is live over the whole loop. The footprint of a level is
the largest sum, over program points, of the live buffers placed there:

    bytes(buffer) = align(prod(padded dims) · itemsize) · stages

with dims padded to the level's fractal (16 on cube levels: L1 holds NZ fractals of 16 rows × 32 B,
L0C fractals of 16 × 16 fp32; ascend-910b.md §1.2), a vector level's rows divided over the vector cores
sharing them and its rows padded to 32 B, and the total rounded up to the level's alignment.

Matmul staging levels (``left``/``right`` of the placement table: L0A, L0B) hold, per matmul, the
operand tile of M × min(K, k_step) (left) and min(K, k_step) × N (right) elements, double-buffered;
the footprint is the largest over the kernel's matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .. import dtypes
from ..ir import Buffer, Kernel, Loop, MatMul, Program, walk
from ..targets import Level, Target


def _ceil_to(x, m) -> sympy.Expr:
    """x rounded up to a multiple of m (built without simplification: it is evaluated, not read)."""
    x = sympy.sympify(x)
    m = sympy.sympify(m)
    if x.is_Integer and m.is_Integer:
        return sympy.Integer(-(-int(x) // int(m)) * int(m))
    return sympy.Mul(sympy.ceiling(sympy.Mul(x, sympy.Pow(m, -1), evaluate=False), evaluate=False), m, evaluate=False)


def buffer_bytes(buf: Buffer, level: Level) -> sympy.Expr:
    """Bytes ``buf`` takes on ``level`` (padding, row split, alignment and stages counted)."""
    item = dtypes.itemsize(buf.dtype)
    dims = [sympy.sympify(d) for d in buf.shape]
    if buf.row_split > 1 and dims:
        dims[0] = sympy.ceiling(sympy.Mul(dims[0], sympy.Rational(1, buf.row_split), evaluate=False), evaluate=False)
    if level.fractal is not None:
        f = int(level.fractal.value)
        dims = [_ceil_to(d, f) for d in dims]
    elif dims:
        dims[-1] = _ceil_to(dims[-1], sympy.Integer(32) / item) if 32 % item == 0 else dims[-1]
    raw = sympy.Mul(*dims, item, evaluate=False)
    return sympy.Mul(_ceil_to(raw, int(level.alignment.value)), buf.stages, evaluate=False)


@dataclass(frozen=True)
class Footprint:
    """The peak bytes of one level in one kernel (``expr``), and the live sets that reach it."""

    kernel: str
    level: str
    expr: sympy.Expr
    peak_sets: tuple[tuple[str, ...], ...]


def _intervals(kernel: Kernel) -> dict[str, tuple[int, int]]:
    """Live interval (first, last program-point) of every buffer, loops widened as described above."""
    spans: dict[str, list[int]] = {}
    loop_spans: list[tuple[Loop, int, int]] = []
    reads_first: dict[tuple[int, str], bool] = {}
    position = 0

    def visit(body):
        nonlocal position
        for stmt in body:
            if isinstance(stmt, Loop):
                start = position
                visit(stmt.body)
                loop_spans.append((stmt, start, position - 1))
                continue
            for name in stmt.buffers_read() + stmt.buffers_written():
                spans.setdefault(name, []).append(position)
            for name in stmt.buffers_read():
                reads_first.setdefault((position, name), True)
            position += 1

    visit(kernel.body)
    out: dict[str, tuple[int, int]] = {}
    for name, points in spans.items():
        lo, hi = min(points), max(points)
        for _loop, start, end in loop_spans:
            inside = [p for p in points if start <= p <= end]
            if not inside:
                continue
            outside = len(inside) != len(points)
            first_is_read = (inside[0], name) in reads_first
            if outside or first_is_read:
                lo, hi = min(lo, start), max(hi, end)
        out[name] = (lo, hi)
    return out


def kernel_footprints(kernel: Kernel, target: Target) -> list[Footprint]:
    """Footprints of every level of ``target`` in ``kernel`` (levels the kernel does not use: 0)."""
    intervals = _intervals(kernel)
    buffers = {b.name: b for b in kernel.buffers}
    points = sorted({p for lo, hi in intervals.values() for p in (lo, hi)})
    out: list[Footprint] = []
    staging = {target.placement.get("left"), target.placement.get("right")} - {None}
    for level in target.levels:
        if level.name in staging:
            continue
        sums: dict[sympy.Expr, tuple[str, ...]] = {}
        sizes = {n: buffer_bytes(b, level) for n, b in buffers.items() if b.scope == level.name}
        for p in points:
            live = tuple(n for n, (lo, hi) in intervals.items() if lo <= p <= hi and buffers[n].scope == level.name)
            if live:
                expr = sympy.Add(*(sizes[n] for n in live), evaluate=False)
                sums.setdefault(expr, live)
        expr = sympy.Max(*sums, evaluate=False) if len(sums) > 1 else (next(iter(sums)) if sums else sympy.Integer(0))
        out.append(Footprint(kernel.name, level.name, expr, tuple(sums.values())))
    for role in ("left", "right"):
        name = target.placement.get(role)
        if name is None:
            continue
        level = target.level(name)
        step = int(target.placement["k_step"].value)
        needs = []
        for stmt, _ in walk(kernel.body):
            if not isinstance(stmt, MatMul):
                continue
            a, b = buffers[stmt.a], buffers[stmt.b]
            m, k = (a.shape[1], a.shape[0]) if stmt.trans_a else (a.shape[0], a.shape[1])
            n = b.shape[0] if stmt.trans_b else b.shape[1]
            kc = sympy.Min(k, step, evaluate=False)
            rows, cols = (m, kc) if role == "left" else (kc, n)
            f = int(level.fractal.value) if level.fractal else 1
            raw = sympy.Mul(_ceil_to(rows, f), _ceil_to(cols, f), dtypes.itemsize(a.dtype), evaluate=False)
            needs.append(sympy.Mul(_ceil_to(raw, int(level.alignment.value)), 2, evaluate=False))
        expr = sympy.Max(*set(needs), evaluate=False) if len(set(needs)) > 1 else (needs[0] if needs else sympy.Integer(0))
        out.append(Footprint(kernel.name, name, expr, ()))
    return out


def footprints(program: Program, target: Target) -> list[Footprint]:
    """Footprints of every kernel of a placed program."""
    return [fp for kernel in program.kernels for fp in kernel_footprints(kernel, target)]
