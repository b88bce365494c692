"""The tile IR: plain immutable data.

A :class:`Program` is a sequence of :class:`Kernel` s (launched one after another) over HBM
:class:`Tensor` s. A kernel declares its on-chip :class:`Buffer` s and has a body of statements:
:class:`Loop` (``parallel`` loops form the launch grid; ``serial`` loops run inside one program
instance, and their bounds may depend on outer loop variables) and tile ops:

==============  ===========================================================================
``Load``        HBM tile -> on-chip buffer (rows past the tensor's extent are padding; ``rows`` names an
                int32 row-id tensor whose negative rows load as 0)
``Store``       on-chip buffer -> HBM tile, clipped to the extent; ``accumulate=True`` is an atomic add;
                ``rows`` names an int32 row-id tensor whose negative rows it skips
``Fill``        buffer <- constant
``MatMul``      dst (+)= alpha * op(a) @ op(b), fp32 accumulation, optional transposes
``Elementwise`` dst <- f(args), with [R] vectors broadcast along the rows of [R, C] tiles and 0-d
                buffers (one value per program instance, e.g. a head's sink logit) over anything
``RowReduce``   dst[R] <- max or sum over the columns of src[R, C]
``Mask``        dst <- src with -inf where DESIGN §3's window hides a key or a row/column is padding
``ModOp``       a score/mask mod of ``Program.mods`` at a tile: the modified score, its derivative,
                a parameter's per-tile gradient partial, or a tile's block class (see :class:`ModOp`)
==============  ===========================================================================

A tile ``Loop`` with ``blocks`` set visits only the tiles the block-class tensor of that name marks
non-empty (block sparsity, DESIGN §3).

Statements, loops, kernels, tensors and buffers carry ``ann``: the :class:`~tilegen.core.annotations.Annotation`
s passes attach to them (a target's schedule knobs, defined beside their passes under
``tilegen/passes/<target>/``; the software pipelining of a loop, :class:`Pipelined`, is the one defined
here). A node reads them with ``get``/``has`` and passes add them with ``annotate`` (:class:`~tilegen.core.annotations.Annotated`).

Sizes are sympy expressions of the shape symbols (``B, Hq, Hkv, G, Sq, Sk, Dqk, Dv``) and the tile
sizes (``Br, Bc``) until a schedule binds them in ``Program.env``. Scopes: ``HBM`` for tensors,
``LOCAL`` for an on-chip buffer no pass has placed yet, else the name of a level of the target (``UB``,
``L1``, ``L0A``, ``L0B``, ``L0C`` on Ascend; ``SMEM``, ``RF`` on a GPU). Passes never mutate a node; they
build new ones with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Union

import sympy

from tilegen.core.annotations import Annotated, Annotation, Site

# --- symbols -----------------------------------------------------------------------------------------


def size_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, positive=True)


def index_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


B, Hq, Hkv, G, Sq, Sk, Dqk, Dv = (size_symbol(n) for n in ("B", "Hq", "Hkv", "G", "Sq", "Sk", "Dqk", "Dv"))
Br, Bc = size_symbol("Br"), size_symbol("Bc")
SHAPE_SYMBOLS = (B, Hq, Hkv, G, Sq, Sk, Dqk, Dv)
TILE_SYMBOLS = (Br, Bc)
b, hq, hkv, i, j = (index_symbol(n) for n in ("b", "hq", "hkv", "i", "j"))

Expr = sympy.Expr
Operand = Union[str, float]


def ceil_div(a: Expr, d: Expr) -> Expr:
    """ceil(a / d) as a sympy expression."""
    return sympy.ceiling(sympy.sympify(a) / d)


def q_tiles() -> Expr:
    """Number of Q tiles: ceil(Sq / Br)."""
    return ceil_div(Sq, Br)


def kv_tiles() -> Expr:
    """Number of K/V tiles: ceil(Sk / Bc)."""
    return ceil_div(Sk, Bc)


# --- data --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskInfo:
    """The visibility rule of DESIGN §3: key c visible to query r iff r+off-left <= c <= r+off+right.

    ``left``/``right`` are -1 for unbounded; ``offset`` is Sk - Sq (bottom-right) or 0 (top-left).
    """

    left: int = -1
    right: int = -1
    offset: Expr = sympy.Integer(0)

    @property
    def is_none(self) -> bool:
        return self.left < 0 and self.right < 0


@dataclass(frozen=True)
class Tensor(Annotated):
    """An HBM (Ascend: GM) tensor.

    Attributes:
        name: unique in the program.
        shape: sizes, logical BNSD order for the attention operands.
        dtype: ``fp16``/``bf16``/``fp32``.
        kind: ``input``, ``output``, ``workspace`` (program-internal), ``handoff`` (a per-core GM slot
            through which the cube and the vector units pass a tile; its size does not depend on N),
            ``tiles`` (one entry per tile pair: the block-class table) or ``partial`` (one parameter
            window per tile pair: gradient partials, zero-filled by the launcher, read by the host's
            fixed-order reduction).
        layout: for 4-d operands, the memory order the user's arrays have (``BNSD`` or ``BSND``).
        ann: annotations (a hand-off's GM slots and flag id on Ascend: ``@handoff_slots``).
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    kind: str
    layout: str = "BNSD"
    ann: tuple[Annotation, ...] = ()

    @property
    def numel(self) -> Expr:
        return sympy.Mul(*self.shape)


@dataclass(frozen=True)
class Buffer(Annotated):
    """An on-chip tile buffer of one program instance.

    Attributes:
        scope: ``LOCAL`` before placement, else a level of the target.
        stages: 2 when the buffer is double-buffered (its load overlaps the previous iteration's use, or
            the next iteration's stage of a pipelined loop writes it while this one's still reads it).
        unit: the compute unit that owns it after placement (``cube``/``vector`` on Ascend).
        row_split: how many vector cores share its rows (2 on Ascend's AIV pair), 1 otherwise.
        ann: annotations.
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    scope: str = "LOCAL"
    stages: int = 1
    unit: str | None = None
    row_split: int = 1
    ann: tuple[Annotation, ...] = ()


@dataclass(frozen=True)
class Access:
    """A tile of an HBM tensor: start index per dim; ``tile`` gives the extents of the trailing dims.

    Leading dims without an extent are single indices (batch, head). Rows past the tensor's size are
    padding on a load and are not written by a store.
    """

    tensor: str
    index: tuple[Expr, ...]
    tile: tuple[Expr, ...]


class Stmt(Annotated):
    """Base of every statement (each a frozen dataclass whose last field is ``ann``).

    A subclass says what it reads, writes and indexes with (``reads``, ``writes``, ``index_exprs``);
    :meth:`buffers_written` and :meth:`exprs` add what its annotations name (a scratch buffer, a value
    rule's expression: :meth:`~tilegen.core.annotations.Annotation.scratch`,
    :meth:`~tilegen.core.annotations.Annotation.exprs`)."""

    __slots__ = ()

    def reads(self) -> tuple[str, ...]:
        return ()

    def writes(self) -> tuple[str, ...]:
        return ()

    def index_exprs(self) -> tuple[Expr, ...]:
        return ()

    def buffers_read(self) -> tuple[str, ...]:
        """The buffers the statement reads (a loop: none of its own)."""
        return self.reads()

    def buffers_written(self) -> tuple[str, ...]:
        """The buffers the statement writes, its annotations' scratch buffers included."""
        return self.writes() + tuple(b for a in self.ann for b in a.scratch())  # type: ignore[attr-defined]

    def exprs(self) -> tuple[Expr, ...]:
        """The index expressions of the statement (a loop: its bounds), then its annotations'."""
        return self.index_exprs() + tuple(e for a in self.ann for e in a.exprs())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Load(Stmt):
    """dst <- src. ``pad`` is the value rows/columns past the tensor's extent get; None means the
    program does not depend on it (the interpreter then loads a large sentinel to prove that).
    ``rows``: as :class:`Store`'s, the name of an int32 row-id tensor over the first tiled dimension;
    rows whose id is negative are not read and load as 0 (a packed batch's tokens outside every
    sequence, whatever they hold)."""

    dst: str
    src: Access
    pad: float | None = None
    rows: str = ""
    ann: tuple[Annotation, ...] = ()

    def writes(self):
        return (self.dst,)

    def index_exprs(self):
        return self.src.index + self.src.tile


@dataclass(frozen=True)
class Store(Stmt):
    """dst <- src, clipped to the tensor's extent; ``accumulate`` makes it an atomic add.

    ``rows``: the name of an int32 input tensor [S] of row ids over the store's first tiled dimension
    (a packed batch's sequence id per token, DESIGN §3); rows whose id is negative are not written
    (tokens outside every sequence). "" writes every row.
    """

    dst: Access
    src: str
    accumulate: bool = False
    rows: str = ""
    ann: tuple[Annotation, ...] = ()

    def reads(self):
        return (self.src,)

    def index_exprs(self):
        return self.dst.index + self.dst.tile


@dataclass(frozen=True)
class Fill(Stmt):
    dst: str
    value: float
    ann: tuple[Annotation, ...] = ()

    def writes(self):
        return (self.dst,)


@dataclass(frozen=True)
class MatMul(Stmt):
    """dst (+)= alpha * op(a) @ op(b); op(x) = xᵀ when the flag is set. Inputs fp16/bf16/fp32, dst fp32."""

    dst: str
    a: str
    b: str
    trans_a: bool = False
    trans_b: bool = False
    accumulate: bool = False
    alpha: float = 1.0
    ann: tuple[Annotation, ...] = ()

    def reads(self):
        return (self.a, self.b) + ((self.dst,) if self.accumulate else ())

    def writes(self):
        return (self.dst,)


ELEMENTWISE_OPS: dict[str, int] = {
    "copy": 1,  # dst = a
    "cast": 1,  # dst = a rounded to dst's dtype
    "exp": 1,
    "log": 1,
    "zero_if_neginf": 1,  # dst = 0 where a == -inf, else a (the "safe max" of an empty row)
    "add": 2,
    "sub": 2,
    "mul": 2,
    "max": 2,
    "safe_div": 2,  # dst = a / b where b != 0, else 0 (O of a row with no visible key)
}


@dataclass(frozen=True)
class Elementwise(Stmt):
    """dst <- op(*args). An arg is a buffer name or a float; a [R] buffer broadcasts over [R, C], a 0-d
    buffer over any shape."""

    dst: str
    op: str
    args: tuple[Operand, ...]
    ann: tuple[Annotation, ...] = ()

    def reads(self):
        return tuple(a for a in self.args if isinstance(a, str))

    def writes(self):
        return (self.dst,)


@dataclass(frozen=True)
class RowReduce(Stmt):
    """dst[r] = max or sum over the columns of src row r (fp32)."""

    dst: str
    src: str
    op: str  # "max" | "sum"
    ann: tuple[Annotation, ...] = ()

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.dst,)


@dataclass(frozen=True)
class Mask(Stmt):
    """dst <- src, with -inf at (row0 + r, col0 + c) where the program's MaskInfo hides the key, or
    where the row is >= Sq or the column >= Sk (padding)."""

    dst: str
    src: str
    row0: Expr
    col0: Expr
    ann: tuple[Annotation, ...] = ()

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.dst,)

    def index_exprs(self):
        return (self.row0, self.col0)


MOD_OPS = ("score", "dscore", "pgrad", "classify")
BLOCK_EMPTY, BLOCK_PARTIAL, BLOCK_FULL = 0, 1, 2


@dataclass(frozen=True)
class ModOp(Stmt):
    """One use of the program's mods (:class:`tilegen.mods.ModSet`) on the tile whose element (r, c) is
    the pair (query row0 + r, key col0 + c) of batch ``b`` and query head ``hq``:

    - ``score``:    dst <- score_mod(args[0]) where mask_mod holds, −inf elsewhere; when ``blocks`` names
      the block-class tensor and the tile's class is full, the mask is not evaluated.
    - ``dscore``:   dst <- args[0] · ∂score′/∂score evaluated at the unmodified score args[1]
      (args[1] absent when the derivative does not read the score); 0 where args[0] is 0.
    - ``pgrad``:    dst [W] <- the tile's partial of term ``term`` of ``ModSet.grads``:
      Σ over the tile of args[0] · coef, binned by the parameter index relative to the tile's window
      origin (:func:`tilegen.mods.grad_window`); args[1] the unmodified score when coef reads it.
    - ``classify``: dst [1] <- the tile's block class: 0 empty (no visible pair), 2 full (every pair
      inside the extents and visible under the window and mask_mod), 1 partial.

    ``tensors`` names the parameter tensors (HBM) the op reads.
    """

    dst: str
    op: str
    args: tuple[str, ...]
    row0: Expr
    col0: Expr
    term: int = -1
    blocks: str = ""
    tensors: tuple[str, ...] = ()
    ann: tuple[Annotation, ...] = ()

    def reads(self):
        return self.args

    def writes(self):
        return (self.dst,)

    def index_exprs(self):
        return (self.row0, self.col0)


@dataclass(frozen=True)
class Loop(Stmt):
    """``for var in [start, stop)``.

    Attributes:
        kind: ``parallel`` (a launch-grid axis: instances run independently) or ``serial``.
        role: what the variable walks: ``batch``, ``head``, ``q_tile``, ``kv_tile`` (for the
            interpreter, which runs ``batch``/``head`` axes as vector lanes, and for reports).
        note: a word for printers (``"visible KV tiles"``).
        domain: the name of the set of (Q tile, K/V tile) pairs a tile loop belongs to: loops built from
            the same mask rule share it (``"visible"``), whichever tile index is outer, so a pass can
            tell that two nests iterate the same pairs.
        blocks: for a tile loop, the name of the block-class tensor [Bm, Hm, nQ, nK] (fp32 0/1/2) whose
            empty tiles the loop skips; "" for a dense loop.
        ann: annotations (:class:`Pipelined`: a software-pipelined loop).
    """

    var: sympy.Symbol
    start: Expr
    stop: Expr
    body: tuple[Stmt, ...]
    kind: str = "serial"
    role: str = ""
    note: str = ""
    domain: str = ""
    blocks: str = ""
    ann: tuple[Annotation, ...] = ()

    def index_exprs(self):
        return (self.start, self.stop)


@dataclass(frozen=True)
class Pipelined(Annotation, key="pipelined", on=("Loop",)):
    """A software-pipelined loop: the stage of each statement of the loop's body, in order, and how far
    ahead the earlier stages run. Each unit (a target's compute unit that runs the statement: on Ascend
    the cube's statements are stages 0 and 1, the vector's 1 and 2) issues its earlier stage of
    iteration j + ``lookahead`` before its later stage of iteration j; a prologue runs the earlier stage
    of the first ``lookahead`` iterations, the last ones run the later stage alone. The values are those
    of the loop in order.

    It is generic (not a target's knob): the footprints number a pipelined loop's statements in that
    issue order (a buffer two stages access is live over the loop), and the shared IR queries
    (:mod:`tilegen.models.stages`), the verifier, the printer and the backends read it. A target's pass
    sets it (Ascend: ``pipeline-handoffs``, ``pipeline-lookahead``).

    Attributes:
        stages: one stage (an integer >= 0) per statement of the body.
        lookahead: iterations between a unit's earlier and later stage (>= 1).
    """

    stages: tuple[int, ...]
    lookahead: int = 1

    def check(self, node, at: Site) -> str:
        if len(self.stages) != len(node.body) or any(not isinstance(g, int) or g < 0 for g in self.stages):
            return f"stages {self.stages} do not give a stage >= 0 to each of its {len(node.body)} statements"
        if self.lookahead < 1:
            return f"lookahead {self.lookahead} is less than 1"
        return ""

    def note(self, node) -> str:
        return f"pipelined: each unit issues its earlier stage of {node.var} + {self.lookahead} before its later stage of {node.var}"


def stages_of(loop: Loop) -> tuple[int, ...]:
    """The stage of each statement of ``loop``'s body (:class:`Pipelined`), () when it is not pipelined."""
    p = loop.get(Pipelined)
    return p.stages if p is not None else ()


def lookahead_of(loop: Loop) -> int:
    """How many iterations a pipelined ``loop``'s earlier stages run ahead (:class:`Pipelined`), 1 otherwise."""
    p = loop.get(Pipelined)
    return p.lookahead if p is not None else 1


@dataclass(frozen=True)
class Kernel(Annotated):
    """One launch: its buffers and its body (outer ``parallel`` loops are the grid).

    ``phase`` names the kernel's place in the algorithm (``fwd``, ``pre``, ``dv``, ``ds``, ``dqdk``,
    ``main``, ``dq``, ``post``).

    ``ann``: annotations (on Ascend how the cores deal the programs, whether the kernel joins the
    previous launch, whether a core streams its programs).
    """

    name: str
    phase: str
    buffers: tuple[Buffer, ...]
    body: tuple[Stmt, ...]
    ann: tuple[Annotation, ...] = ()

    def buffer(self, name: str) -> Buffer:
        for buf in self.buffers:
            if buf.name == name:
                return buf
        raise KeyError(name)


@dataclass(frozen=True)
class Program:
    """A whole computation: tensors, kernels in launch order, and what is known of its sizes.

    Attributes:
        env: bound values of symbols (shape symbols from the spec; tile sizes once chosen).
        attrs: facts passes record (``form``: ``forward``/``unfused``/``fused``; ``dq_strategy``; ...).
    """

    name: str
    tensors: tuple[Tensor, ...]
    kernels: tuple[Kernel, ...]
    mask: MaskInfo
    scale: float
    env: tuple[tuple[sympy.Symbol, int], ...] = ()
    attrs: tuple[tuple[str, object], ...] = ()
    mods: object = None  # tilegen.mods.ModSet or None

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def env_map(self) -> dict[sympy.Symbol, int]:
        return dict(self.env)

    @property
    def attr_map(self) -> dict[str, object]:
        return dict(self.attrs)

    def attr(self, key: str, default: object = None) -> object:
        return self.attr_map.get(key, default)

    def with_attrs(self, **values: object) -> "Program":
        merged = self.attr_map
        merged.update(values)
        return dataclasses.replace(self, attrs=tuple(sorted(merged.items())))

    def bind(self, values: Mapping[sympy.Symbol, int]) -> "Program":
        merged = self.env_map
        merged.update({k: int(v) for k, v in values.items()})
        return dataclasses.replace(self, env=tuple(sorted(merged.items(), key=lambda kv: kv[0].name)))

    def map_stmts(self, fn: Callable[[Stmt], Stmt | tuple[Stmt, ...] | None]) -> "Program":
        """The program with every kernel's body rebuilt by :func:`map_body` with ``fn``."""
        return dataclasses.replace(self, kernels=tuple(dataclasses.replace(k, body=map_body(k.body, fn)) for k in self.kernels))

    def evaluate(self, expr: Expr) -> int:
        """An expression of bound symbols as an int (raises ValueError when a symbol is unbound)."""
        value = sympy.sympify(expr).subs(self.env_map)
        if value.free_symbols:
            raise ValueError(f"unbound symbols {sorted(map(str, value.free_symbols))} in {expr}")
        return int(value)


# --- traversal helpers -------------------------------------------------------------------------------


def walk(body: tuple[Stmt, ...], loops: tuple[Loop, ...] = ()) -> Iterator[tuple[Stmt, tuple[Loop, ...]]]:
    """Every statement of ``body`` in program order, with the loops that enclose it (outermost first)."""
    for stmt in body:
        yield stmt, loops
        if isinstance(stmt, Loop):
            yield from walk(stmt.body, loops + (stmt,))


def map_body(body: tuple[Stmt, ...], fn: Callable[[Stmt], Stmt | tuple[Stmt, ...] | None]) -> tuple[Stmt, ...]:
    """Rebuild ``body`` bottom-up: ``fn`` gets each statement (loops after their bodies were rebuilt) and
    returns a replacement, a tuple of replacements, or None to delete it."""
    out: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, Loop):
            stmt = dataclasses.replace(stmt, body=map_body(stmt.body, fn))
        new = fn(stmt)
        if new is None:
            continue
        if isinstance(new, tuple):
            out.extend(new)
        else:
            out.append(new)
    return tuple(out)


def substitute(stmt: Stmt, mapping: Mapping, simultaneous: bool = False) -> Stmt:
    """``stmt`` with every index expression (and loop bound, recursively; and its annotations'
    expressions) substituted by ``mapping``; ``simultaneous``: all at once (sympy's
    ``subs(..., simultaneous=True)``), so that a mapping may exchange symbols (Br -> Bc, Bc -> Br)."""

    def sub(e: Expr) -> Expr:
        return sympy.sympify(e).subs(mapping, simultaneous=simultaneous)

    def sub_access(a: Access) -> Access:
        return Access(a.tensor, tuple(sub(x) for x in a.index), tuple(sub(x) for x in a.tile))

    if stmt.ann:
        stmt = dataclasses.replace(stmt, ann=tuple(a.map_exprs(sub) for a in stmt.ann))
    if isinstance(stmt, Load):
        return dataclasses.replace(stmt, src=sub_access(stmt.src))
    if isinstance(stmt, Store):
        return dataclasses.replace(stmt, dst=sub_access(stmt.dst))
    if isinstance(stmt, (Mask, ModOp)):
        return dataclasses.replace(stmt, row0=sub(stmt.row0), col0=sub(stmt.col0))
    if isinstance(stmt, Loop):
        return dataclasses.replace(
            stmt, start=sub(stmt.start), stop=sub(stmt.stop), body=tuple(substitute(s, mapping, simultaneous) for s in stmt.body)
        )
    return stmt


def rename_buffers(stmt: Stmt, names: Mapping[str, str]) -> Stmt:
    """``stmt`` with buffer names replaced per ``names`` (recursively through loops; and in its
    annotations' buffer fields)."""

    def r(x):
        return names.get(x, x) if isinstance(x, str) else x

    if stmt.ann:
        stmt = dataclasses.replace(stmt, ann=tuple(a.rename(names) for a in stmt.ann))
    if isinstance(stmt, Load):
        return dataclasses.replace(stmt, dst=r(stmt.dst))
    if isinstance(stmt, Store):
        return dataclasses.replace(stmt, src=r(stmt.src))
    if isinstance(stmt, Fill):
        return dataclasses.replace(stmt, dst=r(stmt.dst))
    if isinstance(stmt, MatMul):
        return dataclasses.replace(stmt, dst=r(stmt.dst), a=r(stmt.a), b=r(stmt.b))
    if isinstance(stmt, Elementwise):
        return dataclasses.replace(stmt, dst=r(stmt.dst), args=tuple(r(a) for a in stmt.args))
    if isinstance(stmt, RowReduce):
        return dataclasses.replace(stmt, dst=r(stmt.dst), src=r(stmt.src))
    if isinstance(stmt, Mask):
        return dataclasses.replace(stmt, dst=r(stmt.dst), src=r(stmt.src))
    if isinstance(stmt, ModOp):
        return dataclasses.replace(stmt, dst=r(stmt.dst), args=tuple(r(a) for a in stmt.args))
    if isinstance(stmt, Loop):
        return dataclasses.replace(stmt, body=tuple(rename_buffers(s, names) for s in stmt.body))
    return stmt


def tensors_read(stmt: Stmt) -> tuple[str, ...]:
    return (stmt.src.tensor,) if isinstance(stmt, Load) else ()


def tensors_written(stmt: Stmt) -> tuple[str, ...]:
    return (stmt.dst.tensor,) if isinstance(stmt, Store) else ()


def used_buffers(body: tuple[Stmt, ...]) -> set[str]:
    names: set[str] = set()
    for stmt, _ in walk(body):
        names.update(stmt.buffers_read())
        names.update(stmt.buffers_written())
    return names


def used_tensors(kernels: tuple[Kernel, ...]) -> set[str]:
    names: set[str] = set()
    for kernel in kernels:
        for stmt, _ in walk(kernel.body):
            names.update(tensors_read(stmt))
            names.update(tensors_written(stmt))
    return names


def grid_loops(kernel: Kernel) -> tuple[Loop, ...]:
    """The kernel's outer ``parallel`` loops (its launch grid), outermost first."""
    out: list[Loop] = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "parallel":
        out.append(body[0])
        body = body[0].body
    return tuple(out)


def straight_grid_body(kernel: Kernel) -> tuple[Stmt, ...] | None:
    """The statements inside ``kernel``'s grid when they hold no loop, else None."""
    grid = grid_loops(kernel)
    if not grid or any(isinstance(st, Loop) for st in grid[-1].body):
        return None
    return grid[-1].body
