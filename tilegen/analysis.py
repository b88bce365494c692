"""Static counts of a bound program: bytes per HBM tensor and FLOPs per kind, without running it.

The counts follow the interpreter's accounting exactly (:mod:`tilegen.backends.interp`): a load or
store moves the elements of its tile that lie inside the tensor's extent; an atomic add counts as a
write; a matmul costs 2·M·N·K on whole tiles; every other elementwise op (``copy`` excepted),
reduction and mask costs one operation per tile element (``exp`` and ``log`` counted as ``exp``).

The loop nest is walked once: loops over batch and heads multiply (their trip counts never depend on
the data), tile loops are enumerated as NumPy tables of (i, j) values, so a 128k-token causal problem
with a million tile pairs costs a few array operations.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import dtypes
from .exprs import evaluate
from .ir import Elementwise, Kernel, Load, Loop, Mask, MatMul, Program, RowReduce, Store, grid_loops

UNIFORM_ROLES = ("batch", "head")


@dataclass
class Counts:
    """Bytes read/written per tensor and FLOPs per kind, plus the number of program instances."""

    bytes_read: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes_written: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    programs: int = 0

    def tensor_bytes(self, name: str) -> int:
        return int(self.bytes_read.get(name, 0) + self.bytes_written.get(name, 0))

    def add(self, other: "Counts") -> None:
        for mine, theirs in ((self.bytes_read, other.bytes_read), (self.bytes_written, other.bytes_written), (self.flops, other.flops)):
            for k, v in theirs.items():
                mine[k] += v
        self.programs += other.programs


class _Walker:
    def __init__(self, program: Program, kernel: Kernel, env: dict[str, int]):
        self.program = program
        self.kernel = kernel
        self.env = env
        self.counts = Counts()
        self.tensors = {t.name: t for t in program.tensors}
        self.shapes = {b.name: tuple(evaluate(d, env) for d in b.shape) for b in kernel.buffers}
        self.extents = {t.name: tuple(evaluate(d, env) for d in t.shape) for t in program.tensors}

    def run(self) -> Counts:
        programs, values = 1, dict(self.env)
        for loop in grid_loops(self.kernel):
            values[str(loop.var)] = evaluate(loop.start, values)
            programs *= max(evaluate(loop.stop, values) - values[str(loop.var)], 0)
        self.counts.programs = programs
        self.body(self.kernel.body, {}, 1, 1)
        return self.counts

    def body(self, stmts, table: dict[str, Any], rows: int, mult: int) -> None:
        for stmt in stmts:
            if isinstance(stmt, Loop):
                self.loop(stmt, table, rows, mult)
            else:
                self.stmt(stmt, table, rows, mult)

    def loop(self, loop: Loop, table, rows: int, mult: int) -> None:
        values = {**self.env, **table}
        start = evaluate(loop.start, values)
        stop = evaluate(loop.stop, values)
        if loop.role in UNIFORM_ROLES:
            trips = np.unique(np.asarray(stop) - np.asarray(start))
            if trips.size != 1:
                raise ValueError(f"loop {loop.var}: trip count varies, cannot treat it as uniform")
            new = dict(table)
            new[str(loop.var)] = start
            self.body(loop.body, new, rows, mult * max(int(trips[0]), 0))
            return
        start_a = np.broadcast_to(np.asarray(start, dtype=np.int64), (rows,))
        stop_a = np.broadcast_to(np.asarray(stop, dtype=np.int64), (rows,))
        trips = np.maximum(stop_a - start_a, 0)
        total = int(trips.sum())
        if total == 0:
            return
        parent = np.repeat(np.arange(rows), trips)
        first = np.cumsum(trips) - trips
        offset = np.arange(total) - np.repeat(first, trips)
        new = {k: (np.asarray(v)[parent] if isinstance(v, np.ndarray) else v) for k, v in table.items()}
        new[str(loop.var)] = start_a[parent] + offset
        self.body(loop.body, new, total, mult)

    def _valid(self, access, table, rows: int) -> np.ndarray:
        values = {**self.env, **table}
        ntile = len(access.tile)
        extents = self.extents[access.tensor][len(access.index) - ntile :]
        valid = np.ones(rows, dtype=np.int64)
        for start_e, size_e, extent in zip(access.index[len(access.index) - ntile :], access.tile, extents):
            start = np.broadcast_to(np.asarray(evaluate(start_e, values), dtype=np.int64), (rows,))
            size = evaluate(size_e, values)
            valid = valid * np.clip(np.minimum(size, extent - start), 0, None)
        return valid

    def stmt(self, stmt, table, rows: int, mult: int) -> None:
        c = self.counts
        if isinstance(stmt, Load):
            item = dtypes.itemsize(self.tensors[stmt.src.tensor].dtype)
            c.bytes_read[stmt.src.tensor] += int(self._valid(stmt.src, table, rows).sum()) * item * mult
        elif isinstance(stmt, Store):
            item = dtypes.itemsize(self.tensors[stmt.dst.tensor].dtype)
            c.bytes_written[stmt.dst.tensor] += int(self._valid(stmt.dst, table, rows).sum()) * item * mult
        elif isinstance(stmt, MatMul):
            a, b = self.shapes[stmt.a], self.shapes[stmt.b]
            m, k = (a[1], a[0]) if stmt.trans_a else a
            n = b[0] if stmt.trans_b else b[1]
            c.flops["matmul"] += 2 * m * n * k * rows * mult
        elif isinstance(stmt, Elementwise):
            if stmt.op != "copy":
                kind = "exp" if stmt.op in ("exp", "log") else "vector"
                c.flops[kind] += int(np.prod(self.shapes[stmt.dst])) * rows * mult
        elif isinstance(stmt, (RowReduce, Mask)):
            c.flops["vector"] += int(np.prod(self.shapes[stmt.src])) * rows * mult


def count(program: Program) -> dict[str, Counts]:
    """Counts per kernel (by name) of a bound program (every size symbol in ``program.env``)."""
    env = {str(k): v for k, v in program.env}
    return {kernel.name: _Walker(program, kernel, env).run() for kernel in program.kernels}


def total(counts: dict[str, Counts]) -> Counts:
    out = Counts()
    for c in counts.values():
        out.add(c)
    return out
