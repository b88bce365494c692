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
class Tensor:
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
        slots: schedule knob of a ``handoff`` (set by :func:`tilegen.passes.lower.pipeline_handoffs`):
            how many copies of the tile each core's workspace holds; the n-th tile passed goes to slot
            n mod slots, and its producer waits for the slot to be free only when it reuses one
            (n >= slots). 1: one slot, today's lock-step hand-off.
        ready: schedule knob of a ``handoff`` (same pass): the cross-core flag id of its "data ready"
            flag; -1: the id its direction shares with every other hand-off of that direction.
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    kind: str
    layout: str = "BNSD"
    slots: int = 1
    ready: int = -1

    @property
    def numel(self) -> Expr:
        return sympy.Mul(*self.shape)


@dataclass(frozen=True)
class Buffer:
    """An on-chip tile buffer of one program instance.

    Attributes:
        scope: ``LOCAL`` before placement, else a level of the target.
        stages: 2 when the buffer is double-buffered (its load overlaps the previous iteration's use, or
            the next iteration's stage of a pipelined loop writes it while this one's still reads it).
        unit: the compute unit that owns it after placement (``cube``/``vector`` on Ascend).
        row_split: how many vector cores share its rows (2 on Ascend's AIV pair), 1 otherwise.
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    scope: str = "LOCAL"
    stages: int = 1
    unit: str | None = None
    row_split: int = 1


@dataclass(frozen=True)
class Access:
    """A tile of an HBM tensor: start index per dim; ``tile`` gives the extents of the trailing dims.

    Leading dims without an extent are single indices (batch, head). Rows past the tensor's size are
    padding on a load and are not written by a store.
    """

    tensor: str
    index: tuple[Expr, ...]
    tile: tuple[Expr, ...]


class Annotation:
    """Base of the typed facts a pass attaches to the node it governs (``annotations`` of a statement, a
    loop or a kernel): how the node is rendered, never what the program computes, so the interpreter and
    the counts ignore them. Each subclass is a frozen dataclass a backend (and its cost model) reads by
    type (:func:`annotation`); rewrites keep them (they build nodes with :func:`dataclasses.replace`).
    The GPU's are in :mod:`tilegen.core.gpu`."""

    def text(self) -> str:
        """The annotation in the printed IR (:mod:`tilegen.core.printer`)."""
        return type(self).__name__


def annotation(node, kind: type):
    """The annotation of type ``kind`` on ``node`` (a statement, loop or kernel), or None."""
    return next((a for a in node.annotations if isinstance(a, kind)), None)


def annotate(node, *annotations: "Annotation"):
    """``node`` with ``annotations`` added, each replacing one of its own type."""
    kinds = tuple(type(a) for a in annotations)
    kept = tuple(a for a in node.annotations if not isinstance(a, kinds))
    return dataclasses.replace(node, annotations=kept + tuple(annotations))


def without_annotations(program: "Program", keep: tuple[type, ...] = ()) -> "Program":
    """``program`` with every annotation of its kernels, loops and statements removed but those of the
    types ``keep``: what the interpreter, the counts and the verifier read of it."""

    def bare(node):
        kept = tuple(a for a in node.annotations if isinstance(a, keep))
        return node if kept == node.annotations else dataclasses.replace(node, annotations=kept)

    kernels = tuple(bare(dataclasses.replace(k, body=map_body(k.body, bare))) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


class Stmt:
    """Base of every statement."""

    def buffers_read(self) -> tuple[str, ...]:
        return ()

    def buffers_written(self) -> tuple[str, ...]:
        return ()

    def exprs(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True)
class Load(Stmt):
    """dst <- src. ``pad`` is the value rows/columns past the tensor's extent get; None means the
    program does not depend on it (the interpreter then loads a large sentinel to prove that).
    ``rows``: as :class:`Store`'s, the name of an int32 row-id tensor over the first tiled dimension;
    rows whose id is negative are not read and load as 0 (a packed batch's tokens outside every
    sequence, whatever they hold).

    ``wait_at_read`` is a schedule knob (set by :func:`tilegen.passes.lower.wait_at_first_read`, and by
    :func:`tilegen.passes.lower.receive_early` on a vector hand-off load): the generated code waits for
    the copy just before the first later statement of the same body that reads ``dst`` (at the end of
    the body, or of its stage of a pipelined loop, when none does), not right after the copy. The
    result is the same either way.

    ``wait_signal`` is a schedule knob of a load from a hand-off tile (set by
    :func:`tilegen.passes.handoff.one_handoff_per_direction`): False when an earlier load of the same
    body already waited for the one ready flag of this tile's group of hand-offs.

    ``hoist`` is a schedule knob of a vector hand-off load in the later stage of a pipelined loop (set by
    :func:`tilegen.passes.lower.receive_ahead`, with ``wait_at_read``): in each iteration the generated
    code issues it, with its flag wait, right after the earlier stage's first hand-off receive (of the
    tile ``Loop.lookahead`` ahead) and before the rest of that stage's work, so that the copy runs beside
    it; the tile is live over the loop. The result is the same either way.

    ``zero_unless`` (set by :func:`tilegen.passes.lower.write_first_plain` with a writer's
    ``Store.first_plain``): an integer expression of the grid (the fewest iterations of the loops
    around the tile's one writer, in an earlier kernel); where it is <= 0 the writer never ran, the
    tile holds nothing it wrote, and the load gives zeros, as it would have read from a tile zeroed
    beforehand.

    ``wait_done`` is a schedule knob (set by :func:`tilegen.passes.lower.own_tile_epilogue`) of a load
    of a tile the other unit wrote earlier in the same program instance (a ``Store.signal_done``):
    the generated code first waits for that unit's done flag, set once its program's stores have
    landed; where ``zero_unless`` says the writer ran no iteration neither unit touches the flag (a
    run of empty programs would otherwise pile up more sets than the flag's counter holds). The result is the same either way in the interpreter, which runs one statement at a time.

    ``free_early`` is a schedule knob of a vector hand-off load into a one-copy UB tile inside one stage
    of a pipelined loop (set by :func:`tilegen.passes.lower.receive_free_early`): the generated code
    raises a V -> MTE2 event of its own right after the tile's last access in that stage, and the copy
    of the next tile waits for that event only, not for all vector work issued before it, so that MTE2
    refills the tile while the vector finishes the iteration's other work (the forward's O update). The
    tile is live over the loop (nothing else may take its bytes). The result is the same either way."""

    dst: str
    src: Access
    pad: float | None = None
    rows: str = ""
    wait_at_read: bool = False
    wait_signal: bool = True
    hoist: bool = False
    zero_unless: Expr | None = None
    wait_done: bool = False
    free_early: bool = False
    annotations: tuple["Annotation", ...] = ()

    def buffers_written(self):
        return (self.dst,)

    def exprs(self):
        return self.src.index + self.src.tile + ((self.zero_unless,) if self.zero_unless is not None else ())


@dataclass(frozen=True)
class Store(Stmt):
    """dst <- src, clipped to the tensor's extent; ``accumulate`` makes it an atomic add.

    ``rows``: the name of an int32 input tensor [S] of row ids over the store's first tiled dimension
    (a packed batch's sequence id per token, DESIGN §3); rows whose id is negative are not written
    (tokens outside every sequence). "" writes every row.

    ``signal`` is a schedule knob of a store into a hand-off tile (set by
    :func:`tilegen.passes.handoff.one_handoff_per_direction`): False when a later store of the same
    group of hand-offs sets the one ready flag the receiver waits for.

    ``wait_at_rewrite`` is a schedule knob (set by :func:`tilegen.passes.lower.wait_at_rewrite`): the
    copy's closing wait (its source buffer free again) is not taken at once but just before the next
    statement that writes the buffer (in a loop: the next iteration's writer), and the buffer stays live
    over its loop, so that the compute in between overlaps the copy.

    ``first_plain`` is a knob of an accumulating store (set by
    :func:`tilegen.passes.lower.write_first_plain`) into a tile that only its own program instance (one
    iteration of the kernel's grid) touches: the instance's first execution of the store writes the
    tile, the later ones add into it, so nothing has to zero the tile beforehand.

    ``signal_done`` is a schedule knob (set by :func:`tilegen.passes.lower.own_tile_epilogue`): at the
    end of each program instance whose loops ran (the waiting load's ``zero_unless`` > 0) the unit that
    runs the store sets a done flag, once all its stores of the instance have landed, for a later load
    of the tile on the other unit (``Load.wait_done``).
    """

    dst: Access
    src: str
    accumulate: bool = False
    rows: str = ""
    signal: bool = True
    wait_at_rewrite: bool = False
    first_plain: bool = False
    signal_done: bool = False
    annotations: tuple["Annotation", ...] = ()

    def buffers_read(self):
        return (self.src,)

    def exprs(self):
        return self.dst.index + self.dst.tile


@dataclass(frozen=True)
class Fill(Stmt):
    dst: str
    value: float
    annotations: tuple["Annotation", ...] = ()

    def buffers_written(self):
        return (self.dst,)


@dataclass(frozen=True)
class MatMul(Stmt):
    """dst (+)= alpha * op(a) @ op(b); op(x) = xᵀ when the flag is set. Inputs fp16/bf16/fp32, dst fp32.

    ``n_chunk`` is a schedule knob (set by :func:`tilegen.passes.lower.l0c_pingpong`): 0 computes dst
    whole; n > 0 (a multiple of 16) computes it in column chunks of n, each in one half of the result
    level (L0C) in turn, and the next statement (the Store of dst, the only reader) drains each chunk
    while the other half accumulates the next. The values are unchanged: each column of dst is the same
    dot products.
    """

    dst: str
    a: str
    b: str
    trans_a: bool = False
    trans_b: bool = False
    accumulate: bool = False
    alpha: float = 1.0
    n_chunk: int = 0
    annotations: tuple["Annotation", ...] = ()

    def buffers_read(self):
        return (self.a, self.b) + ((self.dst,) if self.accumulate else ())

    def buffers_written(self):
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
    annotations: tuple["Annotation", ...] = ()

    def buffers_read(self):
        return tuple(a for a in self.args if isinstance(a, str))

    def buffers_written(self):
        return (self.dst,)


@dataclass(frozen=True)
class RowReduce(Stmt):
    """dst[r] = max or sum over the columns of src row r (fp32).

    ``fold`` is a schedule knob (set by :func:`tilegen.passes.lower.fold_row_reductions`): the name of an
    fp32 scratch buffer of src's rows x 64 columns. The emitted code first folds src's 64-column blocks
    into it with elementwise Max/Add (one repeat per row), then reduces the 64 columns of each row once,
    instead of one in-repeat reduction per block; "" reduces block by block. The result is the same up
    to the order of a sum's additions.
    """

    dst: str
    src: str
    op: str  # "max" | "sum"
    fold: str = ""
    annotations: tuple["Annotation", ...] = ()

    def buffers_read(self):
        return (self.src,)

    def buffers_written(self):
        return (self.dst, self.fold) if self.fold else (self.dst,)


@dataclass(frozen=True)
class Mask(Stmt):
    """dst <- src, with -inf at (row0 + r, col0 + c) where the program's MaskInfo hides the key, or
    where the row is >= Sq or the column >= Sk (padding).

    ``cut_only`` is a schedule knob (set by :func:`tilegen.passes.lower.mask_cut_tiles_only`): the
    generated code does the mask's work only on a tile the mask cuts (some pair hidden or padded); on a
    tile whose every pair is visible it issues nothing. The result is the same either way.
    """

    dst: str
    src: str
    row0: Expr
    col0: Expr
    cut_only: bool = False
    annotations: tuple["Annotation", ...] = ()

    def buffers_read(self):
        return (self.src,)

    def buffers_written(self):
        return (self.dst,)

    def exprs(self):
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
    annotations: tuple["Annotation", ...] = ()

    def buffers_read(self):
        return self.args

    def buffers_written(self):
        return (self.dst,)

    def exprs(self):
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
        stages: schedule knob (set by :func:`tilegen.passes.lower.pipeline_handoffs`): the software-
            pipelining stage (0, 1 or 2) of each statement of ``body``, in order; () when the loop is
            not pipelined. Each unit runs its own statements in two stages: the cube's are 0 and 1, the
            vector's 1 and 2 (all 1 where the vector is not skewed). A unit issues its earlier stage of
            iteration j + 1 before its later stage of iteration j (a prologue runs the earlier stage
            of the first iteration, the last iteration runs the later stage alone). The values are
            those of the loop in order.
        lookahead: schedule knob (set by :func:`tilegen.passes.lower.pipeline_lookahead`): how many
            iterations ahead of its later stage each unit issues its earlier stage (1: the earlier
            stage of j + 1 before the later stage of j; 2: of j + 2, after a prologue of two).
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
    stages: tuple[int, ...] = ()
    lookahead: int = 1
    annotations: tuple["Annotation", ...] = ()

    def exprs(self):
        return (self.start, self.stop)


@dataclass(frozen=True)
class Kernel:
    """One launch: its buffers and its body (outer ``parallel`` loops are the grid).

    ``phase`` names the kernel's place in the algorithm (``fwd``, ``pre``, ``dv``, ``ds``, ``dqdk``,
    ``main``, ``dq``, ``post``).

    ``deal`` is a schedule knob (set by :func:`tilegen.passes.lower.snake_deal`): how a target whose
    cores loop over the grid's programs (Ascend: ``pid`` in row-major grid order) deals them.
    ``"cyclic"``: core c takes pid = c, c + cores, c + 2·cores, ...; ``"snake"``: in round r core c
    takes pid = r·cores + c when r is even, r·cores + cores − 1 − c when r is odd, so that a core that
    drew a heavy program of a round draws a light one the next (the grid's fastest axis is a tile
    index whose work grows or shrinks along it under a causal mask).

    ``sync_all`` is a schedule knob (set by :func:`tilegen.passes.lower.one_launch`): the kernel runs
    in the previous kernel's launch, after a barrier of every core of that launch (Ascend
    ``SyncAll<false>()``: every store of the earlier kernels has landed before any core goes on), in
    place of a launch of its own. The program's values are unchanged: the barrier orders the kernels
    as the launch boundary did.

    ``stream`` is a schedule knob (set by :func:`tilegen.passes.lower.stream_programs`): the programs a
    core runs form one stream of tile pairs, and the software-pipelined loop of the program body
    (``Loop.stages``, ``Loop.lookahead``) runs across program boundaries: a unit's earlier stage (and
    each program's opening statements that it needs) of the pair ``lookahead`` pairs ahead is issued
    before its later stage (and, after a program's last pair, the program's closing statements) of this
    one, even when the two pairs belong to different programs. The buffers both streams use per program
    get ``lookahead + 1`` copies (:func:`tilegen.models.stages.stream_split`). The values are unchanged.
    """

    name: str
    phase: str
    buffers: tuple[Buffer, ...]
    body: tuple[Stmt, ...]
    deal: str = "cyclic"
    sync_all: bool = False
    stream: bool = False
    annotations: tuple["Annotation", ...] = ()

    def buffer(self, name: str) -> Buffer:
        for buf in self.buffers:
            if buf.name == name:
                return buf
        raise KeyError(name)


DEALS = ("cyclic", "snake")  # Kernel.deal


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
    """``stmt`` with every index expression (and loop bound, recursively) substituted by ``mapping``;
    ``simultaneous``: all at once (sympy's ``subs(..., simultaneous=True)``), so that a mapping may
    exchange symbols (Br -> Bc, Bc -> Br)."""

    def sub(e: Expr) -> Expr:
        return sympy.sympify(e).subs(mapping, simultaneous=simultaneous)

    def sub_access(a: Access) -> Access:
        return Access(a.tensor, tuple(sub(x) for x in a.index), tuple(sub(x) for x in a.tile))

    if isinstance(stmt, Load):
        zero = sub(stmt.zero_unless) if stmt.zero_unless is not None else None
        return dataclasses.replace(stmt, src=sub_access(stmt.src), zero_unless=zero)
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
    """``stmt`` with buffer names replaced per ``names`` (recursively through loops)."""

    def r(x):
        return names.get(x, x) if isinstance(x, str) else x

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
        return dataclasses.replace(stmt, dst=r(stmt.dst), src=r(stmt.src), fold=r(stmt.fold))
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
