"""On-chip footprints: bytes per level, as sympy expressions of the tile sizes and head dims.

For a placed program, each kernel's statements are numbered in program order and every buffer is live
from its first to its last access; a buffer accessed inside a loop and outside it, or read in a loop
before the loop writes it (an accumulator), is live over the whole loop. A software-pipelined loop
(:class:`~tilegen.core.ir.Pipelined`) is numbered in the order its units issue it, stage 0, 1, then 2,
and a buffer two stages access is live over the whole loop (the next iteration's copy is written while
this one's is still read: such a buffer has two stages). A buffer a statement's annotation holds
(:meth:`~tilegen.core.annotations.Annotation.held`: a store waited for at the buffer's next writer, a
receive issued ahead or freed early) is live over every loop that accesses it; in a kernel whose
annotation streams its programs (:meth:`~tilegen.core.annotations.Annotation.streams`), what lives over
the pipelined loop, and what both streams use per program, lives over the whole body. The footprint of a level is
the largest sum, over program points, of the live buffers placed there:

    bytes(buffer) = align(prod(padded dims) · itemsize) · stages

with dims padded to the level's fractal (16 on cube levels: L1 holds NZ fractals of 16 rows × 32 B,
L0C fractals of 16 × 16 fp32; ascend-910b.md §1.2), or to a power of two on a level with ``pow2`` (a
GPU's shared memory and registers: the Triton module sizes every tile with ``tl.arange`` extents, head
dims padded to a power of two, 72 → 128), a vector level's rows divided over the vector cores sharing
them and its rows padded to 32 B, and the total rounded up to the level's alignment. ``stages`` is the
number of copies the schedule keeps (double buffering on Ascend; a Triton kernel's ``num_stages``).

Matmul staging levels (``left``/``right`` of the placement table: L0A, L0B) hold, per matmul, the
operand tile of M × min(K, k_step) (left) and min(K, k_step) × N (right) elements, double-buffered;
the footprint is the largest over the kernel's matmuls.

One formula serves both uses: evaluated on sympy symbols it gives the expression reports show; on the
integers of a tile-size candidate it gives the bytes directly (no symbolic work in the search).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from tilegen.core import dtypes
from tilegen.core.exprs import Pow2, evaluate, next_pow2
from tilegen.core.ir import Buffer, Kernel, Loop, MatMul, Program, stages_of, walk
from tilegen.core.targets import Level, Target


def _ceil_to(x, m):
    """x rounded up to a multiple of m (ints, or an unsimplified sympy expression)."""
    if isinstance(x, int) and isinstance(m, int):
        return -(-x // m) * m
    return sympy.Mul(sympy.ceiling(sympy.Mul(x, sympy.Rational(1, m), evaluate=False), evaluate=False), m, evaluate=False)


def _ceil_div(x, m):
    if isinstance(x, int):
        return -(-x // m)
    return sympy.ceiling(sympy.Mul(x, sympy.Rational(1, m), evaluate=False), evaluate=False)


def _prod(*factors):
    if all(isinstance(f, int) for f in factors):
        out = 1
        for f in factors:
            out *= f
        return out
    return sympy.Mul(*factors, evaluate=False)


def _dims(shape, env: Mapping[str, int] | None):
    return [evaluate(d, env) if env is not None else sympy.sympify(d) for d in shape]


def buffer_bytes(buf: Buffer, level: Level, env: Mapping[str, int] | None = None):
    """Bytes ``buf`` takes on ``level`` (padding, row split, alignment and stages counted): an int when
    ``env`` binds the sizes, else a sympy expression."""
    item = dtypes.itemsize(buf.dtype)
    dims = _dims(buf.shape, env)
    if buf.row_split > 1 and dims:
        dims[0] = _ceil_div(dims[0], buf.row_split)
    if level.pow2 is not None:
        least = int(level.pow2.value)
        dims = [next_pow2(d, least) if isinstance(d, int) else Pow2(d, least) for d in dims]
    if level.fractal is not None:
        f = int(level.fractal.value)
        dims = [_ceil_to(d, f) for d in dims]
    elif dims and 32 % item == 0:
        dims[-1] = _ceil_to(dims[-1], 32 // item)
    raw = _prod(*dims, item)
    return _prod(_ceil_to(raw, int(level.alignment.value)), buf.stages)


def staging_bytes(role: str, m, k, n, step: int, item: int, level: Level, env: Mapping[str, int] | None = None):
    """Bytes of a double-buffered matmul operand tile on a staging level: M × min(K, step) for the
    ``left`` operand (L0A), min(K, step) × N for the ``right`` one (L0B)."""
    m, k, n = _dims((m, k, n), env)
    kc = min(k, step) if isinstance(k, int) else sympy.Min(k, step, evaluate=False)
    rows, cols = (m, kc) if role == "left" else (kc, n)
    f = int(level.fractal.value) if level.fractal else 1
    raw = _prod(_ceil_to(rows, f), _ceil_to(cols, f), item)
    return _prod(_ceil_to(raw, int(level.alignment.value)), 2)


@dataclass(frozen=True)
class Footprint:
    """The peak bytes of one level in one kernel.

    ``terms``: each a set of buffers live together (or one matmul's staged operand), named for reports;
    the largest term is the liveness bound (:attr:`expr`, symbolic). :meth:`value` is what the code
    generator allocates: buffers get offsets by first fit over their live intervals (:func:`plan`),
    which reaches the bound unless fragmentation costs a little more.
    """

    kernel: str
    level: Level
    terms: tuple[tuple[tuple[str, ...], tuple], ...]  # (names, parts); parts: buffers or staging dims
    intervals: tuple[tuple[Buffer, int, int], ...] = ()  # (buffer, first, last) of the level's buffers

    def _term_bytes(self, parts, env):
        if parts and parts[0] == "staging":
            return staging_bytes(*parts[1:], self.level, env)
        if parts and parts[0] == "zero":
            (dim,) = _dims((parts[1],), env)
            return _prod(_ceil_to(dim, 16), 16 * 2 * 2)
        if parts and parts[0] == "whole":
            return self.level.usable
        values = [buffer_bytes(b, self.level, env) for b in parts]
        return sum(values) if env is not None else sympy.Add(*values, self.level.scratch_bytes, evaluate=False)

    def bound(self, env: Mapping[str, int], without: frozenset[str] | set[str] = frozenset()) -> int:
        """The liveness bound for bound sizes: the largest set of buffers live together (plus the
        level's backend scratch when any buffer uses the level); ``without``: buffers left out (ones a
        backend keeps elsewhere, for :func:`tilegen.models.cost.predict_gpu`)."""
        def keep(parts):
            return parts if parts and parts[0] in ("staging", "zero", "whole") else tuple(b for b in parts if b.name not in without)

        peak = max((self._term_bytes(keep(parts), env) for _, parts in self.terms), default=0)
        return peak + (self.level.scratch_bytes if peak and self.intervals else 0)

    def value(self, env: Mapping[str, int]) -> int:
        """Bytes the planned allocation needs, scratch included (staging levels: the largest
        double-buffered operand)."""
        if not self.intervals:
            return self.bound(env)
        return plan(self.intervals, self.level, env)[1] + self.level.scratch_bytes

    def peak_term(self, env: Mapping[str, int]) -> tuple[str, ...]:
        """The names of the term that reaches the peak."""
        if not self.terms:
            return ()
        return max(self.terms, key=lambda t: self._term_bytes(t[1], env))[0]

    @property
    def expr(self) -> sympy.Expr:
        """The footprint as a sympy expression of the sizes."""
        exprs = list(dict.fromkeys(self._term_bytes(parts, None) for _, parts in self.terms))
        if not exprs:
            return sympy.Integer(0)
        return exprs[0] if len(exprs) == 1 else sympy.Max(*exprs, evaluate=False)


def plan(intervals, level: Level, env: Mapping[str, int]) -> tuple[dict[str, int], int]:
    """Offsets (bytes) of buffers in one level: in order of first use, each takes the lowest aligned
    offset that does not overlap a buffer whose live interval meets its own. Returns (offsets, peak)."""
    placed: list[tuple[int, int, int, int]] = []  # (first, last, offset, size)
    offsets: dict[str, int] = {}
    align = int(level.alignment.value)
    for buf, first, last in sorted(intervals, key=lambda x: (x[1], x[0].name)):
        size = buffer_bytes(buf, level, env)
        busy = sorted((off, off + sz) for f, l, off, sz in placed if not (l < first or f > last))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, -(-hi // align) * align)
        placed.append((first, last, offset, size))
        offsets[buf.name] = offset
    peak = max((off + sz for _, _, off, sz in placed), default=0)
    return offsets, peak


def live_intervals(kernel: Kernel, widen_staged: bool = False) -> dict[str, tuple[int, int]]:
    """Live interval (first, last program-point) of every buffer, loops widened as described above;
    ``widen_staged``: a buffer with several stages is live over every loop it is accessed in (a
    software pipeliner that loads later iterations' tiles while this one computes keeps all copies)."""
    spans: dict[str, list[int]] = {}
    loop_spans: list[tuple[int, int]] = []
    reads: set[tuple[int, str]] = set()
    crossing: set[str] = set()  # accessed in both stages of a pipelined loop: live over the whole loop
    pipelined: list[tuple[int, int]] = []  # spans of the pipelined loops
    position = 0

    def visit(body):
        nonlocal position
        for stmt in body:
            if isinstance(stmt, Loop):
                start = position
                stages = stages_of(stmt)
                if stages:  # a pipelined loop runs a unit's earlier stage (of the next iteration) first
                    for stage in sorted(set(stages)):
                        visit(tuple(s for s, g in zip(stmt.body, stages) if g == stage))
                    crossing.update(_crossing(stmt))
                else:
                    visit(stmt.body)
                # what a statement's annotation holds over its loop (Annotation.held: a store waited for at
                # its source's next writer, a receive issued ahead of its stage or freed at its last access)
                crossing.update(b for s in stmt.body for a in s.ann for b in a.held(s))
                loop_spans.append((start, position - 1))
                if stages:
                    pipelined.append((start, position - 1))
                continue
            for name in stmt.buffers_read() + stmt.buffers_written():
                spans.setdefault(name, []).append(position)
            for name in stmt.buffers_read():
                reads.add((position, name))
            position += 1

    visit(kernel.body)
    staged = {b.name for b in kernel.buffers if b.stages > 1} if widen_staged else set()
    out: dict[str, tuple[int, int]] = {}
    for name, points in spans.items():
        lo, hi = min(points), max(points)
        for start, end in loop_spans:
            inside = [p for p in points if start <= p <= end]
            if inside and (len(inside) != len(points) or (inside[0], name) in reads or name in staged or name in crossing):
                lo, hi = min(lo, start), max(hi, end)
        out[name] = (lo, hi)
    if any(a.streams() for a in kernel.ann) and pipelined:
        # a streamed kernel (Annotation.streams) runs a program's opening and closing statements between tile
        # pairs, of other programs too: what lives over the whole pipelined loop, and what both streams use
        # per program, lives over the body (a buffer only opening or closing statements use lives where
        # they run, beside tiles that live within a pair)
        from tilegen.models.stages import stream_split

        split = stream_split(kernel)
        cross = set().union(*split.cross.values()) if split else set()
        start, end = pipelined[0]
        out = {name: ((0, position - 1) if (lo <= start and hi >= end) or name in cross else (lo, hi)) for name, (lo, hi) in out.items()}
    return out


def _crossing(loop: Loop) -> set[str]:
    """The buffers statements of two stages of a pipelined loop access."""
    seen: dict[int, set[str]] = {}
    for stmt, stage in zip(loop.body, stages_of(loop)):
        for s, _ in walk((stmt,)):
            seen.setdefault(stage, set()).update(s.buffers_read() + s.buffers_written())
    sets = list(seen.values())
    return {b for n, a in enumerate(sets) for o in sets[n + 1:] for b in a & o}


def chunk_columns(stmt) -> int:
    """The columns a matmul computes at a time (:meth:`~tilegen.core.annotations.Annotation.chunk_columns`
    of its annotations), 0 when whole."""
    return max((a.chunk_columns() for a in stmt.ann), default=0)


def _counted(a, node) -> bool:
    """Whether the annotation ``a`` of ``node`` changes a footprint: one of the hooks this module reads
    (or the scratch buffers a statement also writes) is not its default."""
    held = a.held(node) if not isinstance(node, (Kernel, Buffer)) else ()
    return bool(a.scratch() or held or a.streams() or a.chunk_columns() or a.pipelined_loads())


def footprint_view(program: Program) -> tuple:
    """What the footprints of ``program`` read: its kernels with the annotations that change no
    footprint left out (:func:`_counted`), and its tensors. Two programs with equal views have equal
    footprints (the tile search reuses a candidate's footprints when the passes after it only added
    annotations that change none: the GPU's rendering annotations)."""
    import dataclasses

    from tilegen.core.ir import map_body

    def keep(node):
        kept = tuple(a for a in node.ann if _counted(a, node))
        return node if len(kept) == len(node.ann) else dataclasses.replace(node, ann=kept)

    kernels = tuple(
        keep(dataclasses.replace(k, body=map_body(k.body, keep), buffers=tuple(keep(b) for b in k.buffers))) for k in program.kernels
    )
    return kernels, program.tensors


def kernel_fits(kernel: Kernel, target: Target, env: dict) -> bool:
    """Whether every level's footprint of ``kernel`` fits the level's usable bytes at the bound sizes
    ``env`` (symbol name -> int)."""
    return all(fp.value(env) <= fp.level.usable for fp in kernel_footprints(kernel, target))


def kernel_footprints(kernel: Kernel, target: Target) -> list[Footprint]:
    """Footprints of every level of ``target`` in ``kernel``. In a kernel whose annotation says its loads
    are software-pipelined (:meth:`~tilegen.core.annotations.Annotation.pipelined_loads`: a GPU target's
    ``@pipelined_loads``, Triton's pipeliner issues the loads of the next ``num_stages − 1`` iterations
    while this one computes, triton-lang/triton, lib/Dialect/TritonGPU/Transforms/Pipeliner),
    multi-staged tiles are live across their loop."""
    intervals = live_intervals(kernel, widen_staged=any(a.pipelined_loads() for a in kernel.ann))
    buffers = {b.name: b for b in kernel.buffers}
    points = sorted({p for lo, hi in intervals.values() for p in (lo, hi)})
    staging = {target.placement.get("left"), target.placement.get("right")} - {None}
    out: list[Footprint] = []
    matmuls = [stmt for stmt, _ in walk(kernel.body) if isinstance(stmt, MatMul)]
    chunked = any(chunk_columns(m) for m in matmuls)
    for level in target.levels:
        if level.name in staging:
            continue
        if chunked and level.name == target.placement.get("result"):
            # a chunked product (Annotation.chunk_columns, @n_chunk of l0c-pingpong): the products take the level's two halves in turn, all of it
            out.append(Footprint(kernel.name, level, (((f"{level.name} halves of the chunked products",), ("whole",)),)))
            continue
        sets: dict[tuple[str, ...], tuple] = {}
        for p in points:
            live = tuple(n for n, (lo, hi) in intervals.items() if lo <= p <= hi and buffers[n].scope == level.name)
            if live and live not in sets:
                sets[live] = tuple(buffers[n] for n in live)
        # drop sets contained in another one: they can never be the peak
        keys = [k for k in sets if not any(set(k) < set(o) for o in sets)]
        spans = tuple((buffers[n], lo, hi) for n, (lo, hi) in intervals.items() if buffers[n].scope == level.name)
        out.append(Footprint(kernel.name, level, tuple((k, sets[k]) for k in keys), spans))
    for role in ("left", "right"):
        name = target.placement.get(role)
        if name is None:
            continue
        level = target.level(name)
        step = int(target.placement["k_step"].value)
        terms = []
        for stmt in matmuls:
            a, b = buffers[stmt.a], buffers[stmt.b]
            m, k = (a.shape[1], a.shape[0]) if stmt.trans_a else (a.shape[0], a.shape[1])
            n = b.shape[0] if stmt.trans_b else b.shape[1]
            if chunk_columns(stmt):  # a chunked product loads a chunk's columns at a time
                n = sympy.Min(n, chunk_columns(stmt))
            operand = stmt.a if role == "left" else stmt.b
            label = f"{operand} tile of {stmt.dst} = {stmt.a} @ {stmt.b}, x2 stages"
            terms.append(((label,), ("staging", role, m, k, n, step, dtypes.itemsize(a.dtype))))
        if terms and not chunked:
            # zeroing an accumulator on the result level takes a 16-wide zero tile of its rows (left) or
            # columns (right), two copies (the Ascend runtime's ZeroAcc)
            for buf in kernel.buffers:
                if buf.scope == target.placement.get("result") and len(buf.shape) == 2:
                    terms.append(((f"zero tile of {buf.name}",), ("zero", buf.shape[0] if role == "left" else buf.shape[1])))
        out.append(Footprint(kernel.name, level, tuple(terms)))
    return out


def footprints(program: Program, target: Target) -> list[Footprint]:
    """Footprints of every kernel of a placed program."""
    return [fp for kernel in program.kernels for fp in kernel_footprints(kernel, target)]
