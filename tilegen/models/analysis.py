"""Static counts of a bound program: bytes per HBM tensor and FLOPs per kind, without running it.

The counts follow the interpreter's accounting exactly (:mod:`tilegen.backends.interp`): a load or
store moves the elements of its tile that lie inside the tensor's extent; an atomic add counts as a
write; a matmul costs 2·M·N·K on whole tiles; every other elementwise op (``copy`` excepted),
reduction and mask costs one operation per tile element (``exp`` and ``log`` counted as ``exp``).

The loop nest is walked once, and never enumerates tile pairs: loops over batch and heads multiply
(their trip counts never depend on the data); the innermost tile loop of a nest is summed in closed form
per value of the outer tile loop (a tile dimension ``a·j + c : +size`` of an extent E holds
clip(E − c − a·j, 0, size) elements, whose sum over j in [start, stop) is a difference of two prefix
sums: full tiles, the partial ones as an arithmetic series, then zeros); an outer tile loop is
enumerated as NumPy rows in chunks of :data:`CHUNK`. Time is linear in the outer tile count and memory
is bounded: a 2^23-token causal program at 32×64 tiles (1.7·10^10 tile pairs) is counted in about
0.1 s.

A program with a mask mod skips the empty tiles of its block-class table (DESIGN §3):
:func:`block_classes` computes the table (at compile time for a mask of indices alone, from the
parameters' values otherwise), and the tile loop that reads it is enumerated over its non-empty tiles,
each weighted by the (b, h) for which it is non-empty. A ``ModOp`` costs one vector operation per
element and pass: ``score`` one for the score mod on every visited tile plus one for the mask on the
partial ones, ``classify`` one per tile element, ``dscore`` and ``pgrad`` one. These are the
interpreter's counts too whenever the table does not depend on b or h (its lanes then agree).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import sympy

from tilegen.core import dtypes
from tilegen.core.exprs import UnboundSymbol, evaluate
from tilegen.core.ir import Elementwise, Kernel, Load, Loop, Mask, MatMul, ModOp, Program, RowReduce, Store, grid_loops, walk

UNIFORM_ROLES = ("batch", "head", "head_split")  # loops whose every trip does the same work


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


CHUNK = 1 << 15  # rows of an enumerated tile loop processed at once (bounds the walker's memory)


@lru_cache(maxsize=None)
def _affine(expr: sympy.Expr, var: sympy.Symbol) -> tuple[sympy.Expr, sympy.Expr] | None:
    """(a, c) with ``expr == a·var + c`` and neither depending on ``var``, or None."""
    expr = sympy.sympify(expr)
    c, rest = expr.as_independent(var, as_Add=True)
    a = sympy.cancel(rest / var)
    if a.has(var):
        return None
    return a, c


def _prefix(n, k, a, size):
    """Σ_{x=0}^{n-1} clip(k − a·x, 0, size) elementwise for int64 arrays (or ints), ``a`` > 0, n ≥ 0:
    ``size`` for the x whose interval lies inside the extent, k − a·x on the partial ones, 0 past it."""
    full = np.clip((k - size) // a + 1, 0, None)  # x with k - a·x >= size
    zero = np.maximum(-((-k) // a), 0)  # first x with k - a·x <= 0
    n_full = np.minimum(n, full)
    m = np.maximum(np.minimum(n, zero) - full, 0)  # partial x: full, ..., full + m - 1
    return size * n_full + m * k - a * (m * full + m * (m - 1) // 2)


def _ident(value):
    """A memo key part for a table value: the int itself, or the array's identity (the memo keeps the
    array alive, so the identity is not reused while the entry exists)."""
    return id(value) if isinstance(value, np.ndarray) else value


class _Walker:
    """Walks one kernel's loop nest; see the module docstring.

    ``table`` maps loop variables to their values on the current rows (ints, or int64 arrays of
    length ``rows``); ``inner`` is None or (var, start, stop) of the innermost tile loop, which is
    summed in closed form instead of enumerated.
    """

    def __init__(self, program: Program, kernel: Kernel, env: dict[str, int], classes: "BlockClasses | None" = None):
        self.program = program
        self.classes = classes if classes is not None and classes.known else None
        self.weights = None  # in a loop over block classes: (visits, partial visits) per row, of wscale
        self.wscale = 1
        self.kernel = kernel
        self.env = env
        self.counts = Counts()
        self.tensors = {t.name: t for t in program.tensors}
        self.shapes = {b.name: tuple(evaluate(d, env) for d in b.shape) for b in kernel.buffers}
        self.extents = {t.name: tuple(evaluate(d, env) for d in t.shape) for t in program.tensors}
        self.memo: dict = {}  # per-dimension element counts on the current rows (reset with the rows)

    def run(self) -> Counts:
        programs, values = 1, dict(self.env)
        for loop in grid_loops(self.kernel):
            values[str(loop.var)] = evaluate(loop.start, values)
            programs *= max(evaluate(loop.stop, values) - values[str(loop.var)], 0)
        self.counts.programs = programs
        self.body(self.kernel.body, {}, 1, 1, None)
        return self.counts

    def body(self, stmts, table: dict[str, Any], rows: int, mult: int, inner) -> None:
        for stmt in stmts:
            if isinstance(stmt, Loop):
                self.loop(stmt, table, rows, mult, inner)
            else:
                self.stmt(stmt, table, rows, mult, inner)

    def _eval(self, expr, table, rows: int):
        try:
            value = evaluate(expr, {**self.env, **table})
        except UnboundSymbol as exc:  # such as the closed-form inner loop's variable, which has no rows
            raise ValueError(f"{self.kernel.name}: {expr}: symbol {exc.args[0]} has no value here") from None
        return np.broadcast_to(np.asarray(value, dtype=np.int64), (rows,))

    def loop(self, loop: Loop, table, rows: int, mult: int, inner) -> None:
        start = self._eval(loop.start, table, rows)
        stop = self._eval(loop.stop, table, rows)
        if loop.role in UNIFORM_ROLES:
            trips = np.unique(stop - start)
            if trips.size != 1:
                raise ValueError(f"loop {loop.var}: trip count varies, cannot treat it as uniform")
            new = dict(table)
            new[str(loop.var)] = start if rows > 1 else int(start[0])
            self.body(loop.body, new, rows, mult * max(int(trips[0]), 0), inner)
            return
        if inner is not None:
            raise ValueError(f"{self.kernel.name}: tile loop {loop.var} inside the closed-form loop {inner[0]}")
        if loop.blocks and self.classes is not None:
            self._blocked(loop, table, start, stop, mult)
            return
        if not any(isinstance(s, Loop) and s.role not in UNIFORM_ROLES for s, _ in walk(loop.body)):
            # innermost tile loop: summed over its range in closed form, per row of the outer loops
            self.memo = {}
            self.body(loop.body, table, rows, mult, (loop.var, start, np.maximum(stop, start)))
            self.memo = {}
            return
        trips = np.maximum(stop - start, 0)
        ends = np.cumsum(trips)
        firsts = ends - trips
        total = int(ends[-1])
        for lo in range(0, total, CHUNK):
            flat = np.arange(lo, min(total, lo + CHUNK), dtype=np.int64)
            parent = np.searchsorted(ends, flat, side="right")
            new = {k: (v[parent] if isinstance(v, np.ndarray) else v) for k, v in table.items()}
            new[str(loop.var)] = start[parent] + flat - firsts[parent]
            self.memo = {}
            self.body(loop.body, new, flat.size, mult, None)
        self.memo = {}

    def _blocked(self, loop: Loop, table, start, stop, mult: int) -> None:
        """A tile loop that skips the empty tiles of the block table: its (outer row, tile) pairs are
        enumerated, the empty ones dropped, each kept one weighted by the number of table entries
        ((b, h) of the mask) for which it is non-empty (``weights[0]``) and partial (``weights[1]``);
        counts are scaled by 1 / (entries of the table), exact since B·Hq multiplies every statement
        of the loop."""
        if any(isinstance(s, Loop) and s.role not in UNIFORM_ROLES for s, _ in walk(loop.body)):
            raise ValueError(f"{self.kernel.name}: tile loop inside the block-class loop {loop.var}")
        t = self.classes.table
        visits = (t != 0).sum(axis=(0, 1)).astype(np.int64)
        partial = (t == 1).sum(axis=(0, 1)).astype(np.int64)
        trips = np.maximum(stop - start, 0)
        ends = np.cumsum(trips)
        firsts = ends - trips
        total = int(ends[-1])
        self.wscale = t.shape[0] * t.shape[1]
        for lo in range(0, total, CHUNK):
            flat = np.arange(lo, min(total, lo + CHUNK), dtype=np.int64)
            parent = np.searchsorted(ends, flat, side="right")
            new = {k: (v[parent] if isinstance(v, np.ndarray) else v) for k, v in table.items()}
            new[str(loop.var)] = start[parent] + flat - firsts[parent]
            ii = np.broadcast_to(np.asarray(new["i"], dtype=np.int64), flat.shape)
            jj = np.broadcast_to(np.asarray(new["j"], dtype=np.int64), flat.shape)
            keep = visits[ii, jj] > 0
            if not keep.any():
                continue
            new = {k: (v[keep] if isinstance(v, np.ndarray) and v.shape == flat.shape else v) for k, v in new.items()}
            self.weights = (visits[ii[keep], jj[keep]], partial[ii[keep], jj[keep]])
            self.memo = {}
            self.body(loop.body, new, int(keep.sum()), mult, None)
        self.weights, self.wscale = None, 1
        self.memo = {}

    def _times(self, value: int, mult: int) -> int:
        """``value`` (a per-row sum, weighted in a block-class loop) times the enclosing trips."""
        return int(value) * mult // self.wscale

    def _elements(self, access, table, rows: int, inner) -> int:
        """Elements of ``access`` inside its tensor's extent, summed over the rows and the inner loop."""
        ntile = len(access.tile)
        extents = self.extents[access.tensor][len(access.index) - ntile :]
        other = np.ones(rows, dtype=np.int64)
        along = None  # the sum over the inner loop of the one dimension that depends on it
        for start_e, size_e, extent in zip(access.index[len(access.index) - ntile :], access.tile, extents):
            size = evaluate(size_e, self.env)
            start_e = sympy.sympify(start_e)
            used = tuple(table.get(str(s)) for s in sorted(start_e.free_symbols, key=str))
            key = (start_e, size, extent, tuple(_ident(v) for v in used))
            hit = self.memo.get(key)  # (the table values it was computed from, kept alive, and the counts)
            if inner is not None and start_e.has(inner[0]):
                if along is not None:
                    raise ValueError(f"{self.kernel.name}: access {access.tensor}{list(access.index)} has two dimensions along {inner[0]}")
                if hit is None:
                    hit = self.memo[key] = (used, self._along(access, start_e, size, extent, table, rows, inner))
                along = hit[1]
            else:
                if hit is None:
                    start = self._eval(start_e, table, rows)
                    hit = self.memo[key] = (used, np.clip(np.minimum(size, extent - start), 0, None))
                other = other * hit[1]
        if along is None and inner is not None:
            along = inner[2] - inner[1]
        per_row = other if along is None else other * along
        if self.weights is not None:
            per_row = per_row * self.weights[0]
        return int(per_row.sum())

    def _along(self, access, start_e, size: int, extent: int, table, rows: int, inner) -> np.ndarray:
        """Per row, Σ over the inner loop's range of one dimension's elements inside the extent."""
        form = _affine(start_e, inner[0])
        if form is None:
            raise ValueError(f"{self.kernel.name}: access {access.tensor}: {start_e} is not affine in {inner[0]}")
        a = self._eval(form[0], table, rows)
        if (a <= 0).any():
            raise ValueError(f"{self.kernel.name}: access {access.tensor}: step {form[0]} of {inner[0]} is not positive")
        k = extent - self._eval(form[1], table, rows)
        return _prefix(inner[2], k, a, size) - _prefix(inner[1], k, a, size)

    def _iterations(self, rows: int, inner) -> int:
        if self.weights is not None:
            return int(self.weights[0].sum())
        return rows if inner is None else int((inner[2] - inner[1]).sum())

    def stmt(self, stmt, table, rows: int, mult: int, inner) -> None:
        c = self.counts
        if isinstance(stmt, Load):
            item = dtypes.itemsize(self.tensors[stmt.src.tensor].dtype)
            c.bytes_read[stmt.src.tensor] += self._times(self._elements(stmt.src, table, rows, inner) * item, mult)
        elif isinstance(stmt, Store):
            item = dtypes.itemsize(self.tensors[stmt.dst.tensor].dtype)
            c.bytes_written[stmt.dst.tensor] += self._times(self._elements(stmt.dst, table, rows, inner) * item, mult)
        elif isinstance(stmt, MatMul):
            a, b = self.shapes[stmt.a], self.shapes[stmt.b]
            m, k = (a[1], a[0]) if stmt.trans_a else a
            n = b[0] if stmt.trans_b else b[1]
            c.flops["matmul"] += self._times(2 * m * n * k * self._iterations(rows, inner), mult)
        elif isinstance(stmt, Elementwise):
            if stmt.op != "copy":
                kind = "exp" if stmt.op in ("exp", "log") else "vector"
                c.flops[kind] += self._times(math.prod(self.shapes[stmt.dst]) * self._iterations(rows, inner), mult)
        elif isinstance(stmt, (RowReduce, Mask)):
            c.flops["vector"] += self._times(math.prod(self.shapes[stmt.src]) * self._iterations(rows, inner), mult)
        elif isinstance(stmt, ModOp):
            elements = math.prod(self._tile_shape() if stmt.op == "classify" else self.shapes[stmt.args[0]])
            c.flops["vector"] += self._times(elements * self._modop_passes(stmt, rows, inner), mult)

    def _tile_shape(self) -> tuple[int, int]:
        return self.env["Br"], self.env["Bc"]

    def _modop_passes(self, stmt, rows: int, inner) -> int:
        """Element passes of a ModOp over its iterations: ``score`` one for the score mod on every tile
        visited and one for the mask on the partial ones (every tile when the classes are not
        known); the others one per tile (DESIGN §2)."""
        visits = self._iterations(rows, inner)
        if stmt.op != "score":
            return visits
        mods = self.program.mods
        has_score, has_mask = mods.score is not None, mods.mask is not None
        if self.weights is not None and stmt.blocks:
            return has_score * visits + has_mask * int(self.weights[1].sum())
        return (has_score + has_mask) * visits


def count(program: Program, classes: "BlockClasses | None" = None) -> dict[str, Counts]:
    """Counts per kernel (by name) of a bound program (every size symbol in ``program.env``).

    A program with a mask mod skips the empty tiles of its block table: ``classes`` gives them
    (:class:`BlockClasses`), else :func:`program_block_classes` computes them when the mask reads no
    parameter or its parameters carry values; when they are unknown every tile in the window's loop
    bounds is counted as visited and partial (an upper bound).
    """
    env = {str(k): v for k, v in program.env}
    if classes is None and program.mods is not None and program.mods.mask is not None:
        classes = program_block_classes(program)
    return {kernel.name: _Walker(program, kernel, env, classes).run() for kernel in program.kernels}


def total(counts: dict[str, Counts]) -> Counts:
    out = Counts()
    for c in counts.values():
        out.add(c)
    return out


# --- block classes of a mask mod ------------------------------------------------------------------------

CLASS_NAMES = ("empty", "partial", "full")  # indices BLOCK_EMPTY, BLOCK_PARTIAL, BLOCK_FULL
DENSE_CHUNK = 1 << 24  # elements of undecided tiles evaluated at once
DENSE_LIMIT = 1 << 31  # elements of undecided tiles past which the classes are not computed


@dataclass(frozen=True)
class BlockClasses:
    """The class of every (Q tile, K/V tile) pair of a program with a mask mod (DESIGN §2, §3).

    Attributes:
        table: uint8 [Bm, Hm, nQ, nK] of 0 empty / 1 partial / 2 full (``BLOCK_*`` of :mod:`tilegen.core.ir`;
            Bm = B only if the mask reads b, Hm = Hq only if it reads h), or None when not computed.
        source: where the classes come from, in words (``compile time``, the spec's parameter values,
            or why they are run-time only).
        scale: how many (b, h) each table entry stands for: B·Hq / (Bm·Hm).
    """

    table: np.ndarray | None
    source: str
    scale: int = 1

    @property
    def known(self) -> bool:
        return self.table is not None

    def counts(self) -> dict[str, int] | None:
        """Tile pairs per class over one table entry set: ``{"empty", "partial", "full", "total"}``
        (per (b, h) when the mask reads neither b nor h, else summed over the table's (b, h))."""
        if self.table is None:
            return None
        n = np.bincount(self.table.reshape(-1), minlength=3)
        return {"empty": int(n[0]), "partial": int(n[1]), "full": int(n[2]), "total": int(self.table.size)}


def _three_valued(expr, corners, point):
    """The truth of ``expr`` over every tile rectangle: 1 true everywhere, 0 false everywhere, −1
    undecided (int8 arrays). Relations between expressions affine in q_idx and kv_idx are decided from
    their extremes, at the rectangle's corners; And, Or, Not combine three-valued; anything else is
    undecided. ``corners`` is a list of the four corners' (q_idx, kv_idx) arrays; ``point(f, q, k)``
    evaluates an index expression."""
    import sympy

    from tilegen.core.mods import KV_IDX, Q_IDX

    shape = np.broadcast_shapes(*(np.shape(c[0]) for c in corners), *(np.shape(c[1]) for c in corners))
    if expr is sympy.true or expr == sympy.true:
        return np.ones(shape, dtype=np.int8)
    if expr is sympy.false or expr == sympy.false:
        return np.zeros(shape, dtype=np.int8)
    if isinstance(expr, sympy.And) or isinstance(expr, sympy.Or):
        parts = [_three_valued(a, corners, point) for a in expr.args]
        stack = np.stack(np.broadcast_arrays(*parts))
        if isinstance(expr, sympy.And):
            return np.where((stack == 0).any(0), 0, np.where((stack == 1).all(0), 1, -1)).astype(np.int8)
        return np.where((stack == 1).any(0), 1, np.where((stack == 0).all(0), 0, -1)).astype(np.int8)
    if isinstance(expr, sympy.Not):
        inner = _three_valued(expr.args[0], corners, point)
        return np.where(inner == -1, -1, 1 - inner).astype(np.int8)
    undecided = np.full(shape, -1, dtype=np.int8)
    if not isinstance(expr, sympy.core.relational.Relational) or expr.atoms(sympy.Indexed):
        return undecided
    f = sympy.expand(expr.lhs - expr.rhs)
    if f.has(sympy.floor, sympy.ceiling, sympy.Mod, sympy.Abs, sympy.Min, sympy.Max, sympy.Piecewise):
        return undecided
    try:
        poly = sympy.Poly(f, Q_IDX, KV_IDX)
    except sympy.PolynomialError:
        return undecided
    if poly.total_degree() > 1:
        return undecided
    values = np.stack(np.broadcast_arrays(*(np.asarray(point(f, q, k), dtype=np.float64) for q, k in corners)))
    lo, hi = values.min(0), values.max(0)
    kind = type(expr).__name__
    if kind in ("GreaterThan", "StrictGreaterThan", "LessThan", "StrictLessThan"):
        if kind in ("LessThan", "StrictLessThan"):  # f <= 0  <=>  -f >= 0
            lo, hi = -hi, -lo
        strict = kind.startswith("Strict")
        true_all = lo > 0 if strict else lo >= 0
        false_all = hi <= 0 if strict else hi < 0
    elif kind in ("Equality", "Unequality"):
        eq_all = (lo == 0) & (hi == 0)
        eq_none = (lo > 0) | (hi < 0)
        true_all, false_all = (eq_all, eq_none) if kind == "Equality" else (eq_none, eq_all)
    else:
        return undecided
    return np.where(true_all, 1, np.where(false_all, 0, -1)).astype(np.int8)


def block_classes(mods, *, sizes: dict, window, offset: int, br: int, bc: int, params=None, source: str = "") -> BlockClasses:
    """The block classes of ``mods``' mask and the window on Br × Bc tiles, as the classify kernel
    computes them: a tile is empty when no element inside the extents (q_idx < Sq, kv_idx < Sk) is
    visible, full when every element of the whole tile is (a tile that reaches past Sq or Sk is never
    full: its padding is not visible), partial otherwise.

    Tiles are first decided per rectangle (three-valued logic on the relations, affine ones judged at
    the tile corners: exact for the window, causal, prefix and band masks); only the tiles left
    undecided (those a boundary crosses, or every tile for a mask of parameters or of non-affine
    indices) are evaluated element by element, in chunks of :data:`DENSE_CHUNK` elements.

    Args:
        mods: a :class:`tilegen.mods.ModSet` with a mask. sizes: ``B, Hq, Hkv, Sq, Sk`` (ints).
        window: (left, right), −1 unbounded. offset: off of DESIGN §3 (Sk − Sq or 0).
        params: the parameter arrays the mask reads (by name), or None: a mask that reads a
            parameter then has no table (``source`` says it is known at run time only).

    Returns:
        :class:`BlockClasses`; ``table`` None also when the undecided tiles hold more than
        :data:`DENSE_LIMIT` elements.
    """
    import sympy

    from tilegen.core import mods as M

    b_, hq, sq, sk = int(sizes["B"]), int(sizes["Hq"]), int(sizes["Sq"]), int(sizes["Sk"])
    dep_b, dep_h = mods.mask_depends()
    bm, hm = (b_ if dep_b else 1), (hq if dep_h else 1)
    scale = (b_ // bm) * (hq // hm)
    reads = sorted({str(x.base.label) for x in mods.mask.atoms(sympy.Indexed)})
    if reads and params is None:
        return BlockClasses(None, f"run-time (depends on {', '.join(reads)})", scale)
    nq, nk = -(-sq // br), -(-sk // bc)
    left, right = window
    conds = [mods.mask]
    if left >= 0:
        conds.append(M.KV_IDX >= M.Q_IDX + offset - left)
    if right >= 0:
        conds.append(M.KV_IDX <= M.Q_IDX + offset + right)
    expr = sympy.And(*conds)
    bb = np.arange(bm, dtype=np.int64).reshape(bm, 1, 1, 1)
    hh = np.arange(hm, dtype=np.int64).reshape(1, hm, 1, 1)
    r0 = (np.arange(nq, dtype=np.int64) * br).reshape(1, 1, nq, 1)
    c0 = (np.arange(nk, dtype=np.int64) * bc).reshape(1, 1, 1, nk)
    r1, c1 = np.minimum(r0 + br, sq) - 1, np.minimum(c0 + bc, sk) - 1  # the last real row / column
    padded = (r0 + br > sq) | (c0 + bc > sk)

    def point(f, q, k):
        return M.evaluate(f, b=bb, h=hh, q_idx=q, kv_idx=k, sizes=sizes, params={})

    # relations that read a parameter stay undecided: only the window (and index relations) decide
    truth = np.broadcast_to(_three_valued(expr, [(r0, c0), (r0, c1), (r1, c0), (r1, c1)], point), (bm, hm, nq, nk))
    table = np.where(truth == 1, np.where(padded, 1, 2), np.where(truth == 0, 0, 255)).astype(np.uint8)
    todo = np.argwhere(table == 255)
    if len(todo) * br * bc > DENSE_LIMIT:
        return BlockClasses(None, f"not computed: {len(todo):,} tiles would be evaluated element by element", scale)
    step = max(1, DENSE_CHUNK // (br * bc))
    rows = np.arange(br, dtype=np.int64).reshape(1, br, 1)
    cols = np.arange(bc, dtype=np.int64).reshape(1, 1, bc)
    for lo in range(0, len(todo), step):
        t = todo[lo : lo + step]
        tb, th = t[:, 0].reshape(-1, 1, 1), t[:, 1].reshape(-1, 1, 1)
        q = t[:, 2].reshape(-1, 1, 1) * br + rows
        k = t[:, 3].reshape(-1, 1, 1) * bc + cols
        valid = (q < sq) & (k < sk)
        vis = np.broadcast_to(M.evaluate(expr, b=tb, h=th, q_idx=q, kv_idx=k, sizes=sizes, params=params or {}, valid=valid), valid.shape) & valid
        flat = vis.reshape(len(t), -1)
        cls = np.where(flat.any(1), np.where(flat.all(1), 2, 1), 0).astype(np.uint8)
        table[t[:, 0], t[:, 1], t[:, 2], t[:, 3]] = cls
    if not source:
        source = f"counted from the spec's values of {', '.join(reads)} (at run time the device counts them again)" if reads else "compile time (the mask reads no parameter)"
    return BlockClasses(table, source, scale)


def program_block_classes(program: Program, params=None) -> BlockClasses | None:
    """:func:`block_classes` of a bound program with a mask mod (None without one); ``params`` the
    arrays the mask reads, else the values its declarations carry (spec files), else none."""
    mods = program.mods
    if mods is None or mods.mask is None:
        return None
    env = {str(k): int(v) for k, v in program.env}
    sizes = {k: env[k] for k in ("B", "Hq", "Hkv", "Sq", "Sk")}
    source = ""
    if params is None:
        import sympy

        reads = sorted({str(x.base.label) for x in mods.mask.atoms(sympy.Indexed)})
        decls = {p.name: p for p in mods.params}
        if reads and all(decls[n].values is not None for n in reads):
            params = {n: np.asarray(decls[n].values).reshape(decls[n].concrete_shape(sizes)) for n in reads}
    offset = int(evaluate(program.mask.offset, env))
    return cached_classes(mods, tuple(sorted(sizes.items())), (program.mask.left, program.mask.right), offset, env["Br"], env["Bc"], params, source)


_CLASS_CACHE: dict = {}


BASE_TILE = 16  # tile sizes that are multiples of it are classified from one table of BASE_TILE tiles
BASE_LIMIT = 1 << 22  # the most entries of that table


def aggregate_classes(base: np.ndarray, fr: int, fc: int) -> np.ndarray:
    """The classes of tiles ``fr`` × ``fc`` times larger from a table of small tiles ([..., nq, nk]):
    small tiles past the table are padding (empty); a large tile is empty iff all its small tiles
    are, full iff all are full, partial otherwise. Exact, since a tile's class depends only on which
    of its pairs are visible."""
    *lead, nq, nk = base.shape
    NQ, NK = -(-nq // fr), -(-nk // fc)
    pad = np.zeros((*lead, NQ * fr, NK * fc), dtype=np.uint8)
    pad[..., :nq, :nk] = base
    blocks = pad.reshape(*lead, NQ, fr, NK, fc)
    lo, hi = blocks.min(axis=(-3, -1)), blocks.max(axis=(-3, -1))
    return np.where(hi == 0, 0, np.where(lo == 2, 2, 1)).astype(np.uint8)


def cached_classes(mods, sizes, window, offset, br, bc, params, source):
    """block_classes memoised on its arguments (parameter arrays by content): the schedule pass asks for
    the classes once per candidate and program. For a mask evaluated element by element (one that
    reads parameters, or non-affine index functions: floor, %, abs, min, max, where), tile sizes that
    are multiples of :data:`BASE_TILE` come from one table of BASE_TILE tiles
    (:func:`aggregate_classes`), evaluated once per mask and values."""
    import sympy

    pkey = None if params is None else tuple((n, np.asarray(a).tobytes()) for n, a in sorted(params.items()))
    key = (mods.mask, sizes, window, offset, br, bc, pkey)
    hit = _CLASS_CACHE.get(key)
    if hit is None:
        if len(_CLASS_CACHE) > 64:
            _CLASS_CACHE.clear()
        env = dict(sizes)
        g = BASE_TILE
        base_tiles = -(-env["Sq"] // g) * -(-env["Sk"] // g)
        # affine index masks are decided per tile from its corners, fast at any size; the others are
        # evaluated element by element, once, on the base table
        dense = bool(mods.mask.has(sympy.Indexed, sympy.floor, sympy.ceiling, sympy.Mod, sympy.Abs, sympy.Min, sympy.Max, sympy.Piecewise))
        if dense and (br, bc) != (g, g) and br % g == 0 and bc % g == 0 and base_tiles <= BASE_LIMIT:
            base = cached_classes(mods, sizes, window, offset, g, g, params, source)
            if base.known:
                hit = BlockClasses(aggregate_classes(base.table, br // g, bc // g), base.source, base.scale)
        if hit is None:
            hit = block_classes(mods, sizes=env, window=window, offset=offset, br=br, bc=bc, params=params, source=source)
        _CLASS_CACHE[key] = hit
    return hit


# --- L2 residency of re-accessed GM regions ---------------------------------------------------------


@dataclass(frozen=True)
class L2Reuse:
    """Which GM accesses of a kernel touch a region that the launch touches more than once.

    Attributes:
        stmts: ``id`` of each ``Load``/``Store`` on a GM tensor (not a hand-off workspace) with an
            enclosing loop (a grid axis or a serial loop of more than one trip) whose variable its
            indices do not depend on: another trip of that loop, on this core or on another core at
            about the same time, accesses the same region again.
        working_set: bytes of those tensors that the instances in flight hold at once: one (batch,
            head) slice of each, times that tensor's heads per head of the grid (a GQA backward's
            instance of one KV head touches the G query heads of Q), times the (batch, head) pairs of
            the grid in flight (the grid's instances are dealt over the cores in order, so ``cores``
            consecutive instances span at most ceil(cores / instances per head) + 1 of them).
        fits: ``working_set`` fits in the target's L2 (``memory.l2_bytes``); when it does not, no
            access is taken as L2-resident.
    """

    stmts: frozenset
    working_set: int
    fits: bool


def l2_reuse(program: Program, kernel: Kernel, cores: int, l2_bytes: int) -> L2Reuse:
    """The GM accesses of ``kernel`` whose regions are re-accessed within its launch (:class:`L2Reuse`).

    This is the rule the emitted-code cost model (:mod:`tilegen.models.cost`) uses to price a re-accessed
    region at the L2 rates: in the forward every Q-tile instance reads the same K and V tiles, in the
    backward every K/V-tile instance reads the same Q, dO, L and D tiles and adds into the same dQ rows.
    The timeline (:mod:`tilegen.backends.ascendc.timeline`) finds the same accesses independently, from the byte ranges
    of the twin's trace. ``cores``: the launch's parallel units; ``l2_bytes``: the L2 size in bytes
    (910B2: 192 MiB, CANN's Ascend910B2.ini ``l2_size``).
    """
    env = {str(k): v for k, v in program.env}
    tensors = {t.name: t for t in program.tensors}
    grid = grid_loops(kernel)
    values = dict(env)
    instances, per_head, grid_heads = 1, 1, 1
    for loop in grid:
        values[str(loop.var)] = evaluate(loop.start, values)
        n = max(int(evaluate(loop.stop, values)) - int(values[str(loop.var)]), 0)
        instances *= n
        if loop.role == "head":
            grid_heads *= n
        elif loop.role != "batch":
            per_head *= n
    heads = max(instances // max(per_head, 1), 1)
    in_flight = min(heads, -(-cores // max(per_head, 1)) + 1)

    def trips(loop: Loop, outer: tuple[Loop, ...]) -> int:
        """The most trips ``loop`` makes: outer tile loops over their whole range (a causal loop makes
        one trip at the first Q tile and many at the last), batch and head loops at their start."""
        try:
            table = dict(env)
            for o in outer:
                lo, hi = np.min(evaluate(o.start, table)), np.max(evaluate(o.stop, table))
                table[str(o.var)] = lo if o.role in UNIFORM_ROLES or hi - lo <= 1 else np.arange(int(lo), int(hi))
            return int(np.max(evaluate(loop.stop - loop.start, table)))
        except (UnboundSymbol, TypeError, ValueError):
            return 2  # bounds that cannot be evaluated so: taken as several trips

    def overlapping(inner: Loop, outer: Loop, enclosing: tuple[Loop, ...]) -> bool:
        """Whether ``inner``'s ranges at two consecutive values of ``outer``'s variable overlap (the
        causal K/V loop at Q tiles i and i + 1: yes; a GQA group's heads of KV heads h and h + 1: no),
        the other enclosing loops at their start; bounds that do not use the variable overlap."""
        names = sympy.sympify(inner.start).free_symbols | sympy.sympify(inner.stop).free_symbols
        if outer.var not in names:
            return True
        try:
            table = dict(env)
            for o in enclosing:
                table[str(o.var)] = evaluate(o.start, table)
            v0 = table[str(outer.var)]
            lo0, hi0 = evaluate(inner.start, table), evaluate(inner.stop, table)
            table[str(outer.var)] = v0 + 1
            lo1, hi1 = evaluate(inner.start, table), evaluate(inner.stop, table)
            return bool(max(lo0, lo1) < min(hi0, hi1))
        except (UnboundSymbol, TypeError, ValueError):
            return True

    stmts, reused = set(), set()
    for stmt, loops in walk(kernel.body):
        access = stmt.src if isinstance(stmt, Load) else stmt.dst if isinstance(stmt, Store) else None
        if access is None or tensors[access.tensor].kind == "handoff":
            continue
        # the variables the region depends on: those of its indices, and through an inner loop's bounds
        # those of the loops outside it (a GQA backward's hq runs over [G·hkv, G·hkv + G): Q[hq] depends on hkv)
        used = set().union(*(sympy.sympify(e).free_symbols for e in access.index))
        for k in range(len(loops) - 1, -1, -1):
            if loops[k].var in used:
                used |= {o.var for o in loops[:k] if not overlapping(loops[k], o, loops[:k])}
        if any(l.var not in used and trips(l, loops[:k]) > 1 for k, l in enumerate(loops)):
            stmts.add(id(stmt))
            reused.add(access.tensor)
    ws = 0
    for name in reused:
        t = tensors[name]
        shape = [int(evaluate(d, env)) for d in t.shape]
        if len(shape) >= 3:  # [B, H, ...]: one (b, h) slice, times the tensor's heads per grid head
            ws += math.prod(shape[2:]) * dtypes.itemsize(t.dtype) * max(1, -(-shape[1] // grid_heads))
        else:
            ws += math.prod(shape) * dtypes.itemsize(t.dtype)
    ws *= in_flight
    fits = ws <= l2_bytes
    return L2Reuse(frozenset(stmts) if fits else frozenset(), ws, fits)


def target_l2_reuse(program: Program, kernel: Kernel, target) -> L2Reuse | None:
    """:func:`l2_reuse` on ``target``'s parallel units and L2 size (``bandwidth.l2_bytes``); None for a
    target file that gives no L2 size (then no GM copy of an HBM tensor is taken as L2-resident)."""
    if "l2_bytes" not in target.bandwidth:
        return None
    return l2_reuse(program, kernel, target.parallel_units, int(target.bandwidth["l2_bytes"].value))
