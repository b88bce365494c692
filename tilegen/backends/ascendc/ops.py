"""The typed ops of the Ascend C lowering: what :func:`tilegen.backends.ascendc.lower_program` produces, what
``templates/ascendc/kernels.asc.jinja`` renders (one macro per class, named like the class: :attr:`Op.macro`)
and what the emitted-code model (:mod:`tilegen.backends.ascendc.cost`) prices (:meth:`Op.cycles`).

Each class is one call of the emitted kernels (mostly a helper of ``runtime/ascendc/tilegen_runtime.h``,
which calls the Ascend C API its docstring names), frozen, every field typed: C++ expressions are ``str``
(rendered as they are), tile sizes ``int`` (elements), buffers the names of their ``LocalTensor`` views.
Control ops (:class:`Loop`, :class:`PipelinedLoop`, :class:`Stream`) hold the ops of their bodies.

The software pipeline of a :class:`PipelinedLoop` is expanded once, here (:func:`expand`): its prologue,
steady state and epilogue as runs of stage ops (:class:`StageRun`), which the template renders as C++
loops and :meth:`Expansion.order` unrolls for the cost model.

Cycle costs (:meth:`Op.cycles`) take the target's ``[timeline]`` figures (:class:`tilegen.backends.ascendc.
timeline.Costs`); the per-instruction figures they share with the timeline of the traced twin (a vector
instruction, a GM copy, a Fixpipe, a LoadData, an Mmad) are :class:`~tilegen.backends.ascendc.timeline.Costs`'
methods, the timeline's :meth:`~tilegen.backends.ascendc.timeline.Costs.duration` included. The model of the
costs is described in :mod:`tilegen.backends.ascendc.cost`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from tilegen.core.errors import TilegenError

ESIZE = {"half": 2, "bfloat16_t": 2, "float": 4}  # bytes of an element by C type (others: 4)


def _esize(ctype: str) -> int:
    return ESIZE.get(ctype, 4)


@dataclass(frozen=True)
class Op:
    """An op of the emitted kernels. ``macro``: the kernels.asc.jinja macro that renders it (the class
    name); ``unit``: ``cube`` (AIC), ``vector`` (AIV) or ``""`` (either); ``kind``: its name in messages."""

    macro: ClassVar[str] = "Op"
    unit: ClassVar[str] = ""
    kind: ClassVar[str] = "op"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.macro = cls.__name__

    def cycles(self, c, cut: bool = False, valid: int | None = None) -> float:
        """Cycles of this op (one runtime helper call) on its core: its instructions on their pipes, its
        scalar issue overlapping them unless the helper makes the scalar unit wait (see
        :mod:`tilegen.backends.ascendc.cost`); ``c``: the target's figures
        (:class:`tilegen.backends.ascendc.timeline.Costs`); ``cut``: on a tile pair the mask cuts;
        ``valid``: the rows inside Sq of an AIV tile that also holds padding rows (None: no padding).

        Raises:
            TilegenError: the emitted-code model has no cost for this op."""
        raise TilegenError(f"the emitted-code model has no cost for the {self.unit or 'plan'} op {self.kind}")

    def buffer_fields(self) -> tuple[str, ...]:
        """The names of this op's fields that name an on-chip buffer (a fused product's not included)."""
        return tuple(f for f in _BUFFER_FIELDS if f in self.__dataclass_fields__)

    def renamed(self, names: dict[str, str]) -> Op:
        """This op with the buffers of ``names`` renamed (its fused product's too)."""
        changes = {f: names[getattr(self, f)] for f in self.buffer_fields() if getattr(self, f) in names}
        product = getattr(self, "product", None)
        if product is not None:
            changes["product"] = product.renamed(names)
        return dataclasses.replace(self, **changes) if changes else self

    def buffers(self) -> set[str]:
        """The on-chip buffers this op names (its fused product's included)."""
        out = {getattr(self, f) for f in self.buffer_fields()}
        product = getattr(self, "product", None)
        return out | (product.buffers() if product is not None else set())


_BUFFER_FIELDS = ("a", "b", "c", "src", "dst", "buf", "vec")


def _issue_only(c) -> float:
    return c.issue()


def _l1_load_cycles(c, rows: int, cols: int, esize: int, l2: bool, rowwise: bool) -> float:
    """LoadNz: its flag pairs and the ND -> NZ copy (one per row when ``rowwise``) on MTE2, each row a GM
    run."""
    issue, fl = c.issue(), c["flag_cycles"]
    if rowwise:
        return max((4 + rows) * issue, 2 * fl + rows * c.copy_cycles(cols * esize, False, l2, 1))
    return max(5 * issue, 2 * fl + c.copy_cycles(rows * cols * esize, False, l2, rows))


def _ub_copy_cycles(c, rows: int, cols: int, esize: int, vector: bool, l2: bool, write: bool, atomic: bool) -> float:
    """LoadRows / StoreRows (LoadVector / StoreVector for a row vector): flag pairs and the DataCopyPad on
    MTE2 / MTE3 (``write``), each row a GM run, two more instructions for an atomic store; the other AIV's
    copy shares the AI Core's port (``sharers`` 2, :meth:`tilegen.backends.ascendc.timeline.Costs.copy_cycles`)."""
    issue, fl = c.issue(), c["flag_cycles"]
    n = rows * esize if vector else rows * cols * esize
    extra = 2 * issue if atomic else 0.0
    return max(5 * issue + extra, 2 * fl + c.copy_cycles(n, write, l2, 1 if vector else rows, atomic, sharers=2))


def _fix_store_cycles(c, nbytes: int, l2: bool, atomic: bool, rows: int = 0) -> float:
    """FixpipeRows: flag pairs and the Fixpipe on FIX (``rows`` GM runs), two more instructions for an
    atomic store."""
    issue, fl = c.issue(), c["flag_cycles"]
    extra = 2 * issue if atomic else 0.0
    return max(5 * issue + extra, c.fixpipe_cycles(nbytes, l2, 2 * fl, rows, atomic))


# --- control -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loop(Op):
    """A ``for`` loop of the kernel (``for (int64_t var = start; var < stop; ++var)``); ``skip``: a C++
    condition under which an iteration is skipped (an empty tile of the host's block table), or ""."""

    kind: ClassVar[str] = "loop"
    var: str
    start: str
    stop: str
    note: str
    body: tuple[Op, ...]
    skip: str = ""


@dataclass(frozen=True)
class Carry:
    """A buffer the earlier stage of a pipelined loop writes and the later one reads: a ring of
    ``LocalTensor<ctype>`` views, lookahead + 1 of them."""

    name: str
    ctype: str


@dataclass(frozen=True)
class StageRun:
    """Ops of one stage of a pipelined loop, run within a step of the loop for iteration step + ``ahead``.

    ``stage``: the stage's number (@pipelined stages); ``part``: ``"its first receive"`` / ``"the rest"`` when the
    earlier stage is cut around a hoisted receive, else ""; ``hoisted``: the later stage's receives issued
    beside the earlier stage's rest (@hoist); ``carry_out``: the carried buffers' current views are
    stored into their rings after the ops; ``carry_in``: the iteration's copies are read from the rings
    before them."""

    ops: tuple[Op, ...]
    ahead: int
    stage: int
    part: str = ""
    hoisted: bool = False
    carry_out: bool = False
    carry_in: bool = False


@dataclass(frozen=True)
class Expansion:
    """A software-pipelined loop of ``lookahead`` d, expanded: ``prologue``, run for each of the first d
    iterations (the earlier stage alone); ``steady``, run per step k of the loop: a run with ``ahead`` d
    is for iteration k + d and is left out of the last d steps, which is the ``epilogue`` (the runs of
    ``steady`` with ``ahead`` 0)."""

    lookahead: int
    prologue: tuple[StageRun, ...]
    steady: tuple[StageRun, ...]

    @property
    def epilogue(self) -> tuple[StageRun, ...]:
        return tuple(r for r in self.steady if r.ahead == 0)

    def order(self, n: int) -> list[tuple[Op, int]]:
        """The ops of ``n`` iterations in the order the unit issues them: (op, iteration)."""
        out: list[tuple[Op, int]] = []
        for k in range(min(self.lookahead, n)):
            out.extend((op, k + r.ahead) for r in self.prologue for op in r.ops)
        for k in range(n):
            for r in self.steady:
                if k + r.ahead < n:
                    out.extend((op, k + r.ahead) for op in r.ops)
        return out


@dataclass(frozen=True)
class PipelinedLoop(Op):
    """A software-pipelined loop (@pipelined stages, @pipelined lookahead): the unit's earlier stage ``stages[0]`` of
    iteration j + lookahead issued before its later stage ``stages[1]`` of iteration j (C++: a prologue
    loop and a steady loop, see :func:`expand`). ``carry``: the buffers read through rings of views;
    ``hoisted``: the later stage's receives with @hoist, issued between the earlier stage's first
    ``head`` ops and its rest; ``skip``: as :class:`Loop` (both stages of an empty tile)."""

    kind: ClassVar[str] = "ploop"
    lookahead: int
    head: int
    hoisted: tuple[Op, ...]
    stages: tuple[int, int]
    var: str
    start: str
    stop: str
    note: str
    carry: tuple[Carry, ...]
    skip: str
    stage0: tuple[Op, ...]
    stage1: tuple[Op, ...]

    @property
    def expansion(self) -> Expansion:
        return expand(self)


def expand(loop: PipelinedLoop) -> Expansion:
    """The prologue, steady state and epilogue of ``loop`` (see :class:`Expansion`): the prologue is its
    earlier stage (the carried views stored after it); a step of the steady state is the earlier stage of
    iteration k + d, cut after its first ``head`` ops when receives are hoisted, with the hoisted
    receives of iteration k between the two parts, then the later stage of iteration k."""
    d, (s0, s1) = loop.lookahead, loop.stages
    prologue = (StageRun(loop.stage0, 0, s0, carry_out=True),)
    if loop.hoisted:
        steady = (
            StageRun(loop.stage0[: loop.head], d, s0, part="its first receive"),
            StageRun(loop.hoisted, 0, s1, hoisted=True),
            StageRun(loop.stage0[loop.head :], d, s0, part="the rest", carry_out=True),
        )
    else:
        steady = (StageRun(loop.stage0, d, s0, carry_out=True),)
    return Expansion(d, prologue, steady + (StageRun(loop.stage1, 0, s1, carry_in=True),))


@dataclass(frozen=True)
class StreamHead:
    """The loop around a streamed kernel's pipelined loop (``var`` from ``start`` to ``stop``, C++)."""

    var: str
    start: str
    stop: str


@dataclass(frozen=True)
class Cross:
    """A buffer both streams of a streamed kernel use per program: ``stages`` copies, chosen by the
    program's ordinal in the stream."""

    name: str
    ctype: str
    stages: int


@dataclass(frozen=True)
class Stream(Op):
    """A unit's part of a streamed kernel (@stream): the programs a core runs as one stream of tile
    pairs; ``ploop`` the pipelined loop, ``open_a`` / ``open_b`` the program's opening ops before the earlier
    / later stage of its first pair, ``close`` its closing ops after the later stage of its last pair;
    ``grid``: the kernel's grid loops (variable, C++ extent) whose programs it streams, dealt over the
    cores as ``deal`` says (@deal: ``cyclic`` or ``snake``)."""

    kind: ClassVar[str] = "stream"
    ploop: PipelinedLoop
    head: StreamHead | None
    open_a: tuple[Op, ...]
    open_b: tuple[Op, ...]
    close: tuple[Op, ...]
    cross: tuple[Cross, ...]
    grid: tuple[tuple[str, str], ...]
    deal: str


# --- cube (AIC) ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class L1Load(Op):
    """GM -> L1 as NZ: ``tilegen::LoadNz`` / ``LoadNzAsync`` (``defer``: @wait_at_read, waited for by
    :class:`WaitLoaded`) / ``LoadNzIn`` (``ids``: a packed batch's row guard), i.e. ``DataCopy`` with
    ``Nd2NzParams`` (one burst per row when ``rowwise``: the row pitch does not fit srcDValue), the tail
    zeroed with ``InitConstValue`` when ``zero_tail``; ``stages`` > 1: the view of the next copy first."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "l1_load"
    ids: str
    rowwise: bool
    dst: str
    stages: int
    ctype: str
    gm: str
    offset: str
    valid: str
    rows: int
    cols: int
    pitch: str
    zero_tail: bool
    l2: bool
    defer: bool = False

    def cycles(self, c, cut=False, valid=None):
        return _l1_load_cycles(c, self.rows, self.cols, _esize(self.ctype), self.l2, self.rowwise)


@dataclass(frozen=True)
class V2CRecv(Op):
    """A hand-off tile received on the AIC: ``CrossCoreWaitFlag(ready)`` (when ``wait``), ``tilegen::LoadNz``
    from the GM slot at ``address`` (DataCopy, ND -> NZ), ``CrossCoreSetFlag<2, PIPE_MTE2>(free)``."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "v2c_recv"
    dst: str
    ctype: str
    gm: str
    rows: int
    cols: int
    rowwise: bool
    ready: str
    free: str
    slots: int
    counter: str
    address: str
    wait: bool

    def cycles(self, c, cut=False, valid=None):
        return _l1_load_cycles(c, self.rows, self.cols, _esize(self.ctype), True, self.rowwise)


@dataclass(frozen=True)
class Matmul(Op):
    """``c (+)= op(a) x op(b)`` of an m x k by k x n product on the cube: ``tilegen::MatmulTile`` (per
    k-step ``LoadData`` of both operands into an L0A/L0B half, ``Mmad`` into L0C); with ``n_chunk`` it is
    fused into the store after it (:class:`FixStore` / :class:`C2VSend` ``product``: ``MatmulStore``)."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "matmul"
    n_chunk: int
    c: str
    a: str
    b: str
    ctype: str
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    accumulate: bool

    def steps(self, c, k_step: int, n: int | None = None) -> tuple[float, list[tuple[float, float]]]:
        """(scalar issue cycles, [(MTE1, M) cycles per k-step]) of MatmulTile for ``n`` columns (None: all):
        per k-step the LoadData of both operands (MTE1) into one half of L0A/L0B, then the Mmad (M)."""
        issue, fl = c.issue(), c["flag_cycles"]
        m1, n1 = math.ceil(self.m / 16), math.ceil((self.n if n is None else n) / 16)
        steps = []
        s_cycles = 2 * issue
        for k0 in range(0, self.k, k_step):
            kc1 = math.ceil(min(k_step, self.k - k0) / 16)
            load_a = m1 * c.load_data_cycles(kc1, False)
            load_b = kc1 * c.load_data_cycles(n1, True)
            steps.append((fl + load_a + load_b, c.mmad_cycles(m1 * n1 * kc1, fl)))
            s_cycles += (5 + m1 + kc1) * issue
        return s_cycles, steps


@dataclass(frozen=True)
class ZeroAcc(Op):
    """An m x n L0C accumulator zeroed: ``tilegen::ZeroAcc`` (``InitConstValue`` of a zero tile into L0A/L0B
    halves, an ``Mmad`` with cmatrixInitVal)."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "zero_acc"
    c: str
    m: int
    n: int

    def cycles(self, c, cut=False, valid=None):
        issue, fl = c.issue(), c["flag_cycles"]
        m1, n1 = math.ceil(self.m / 16), math.ceil(self.n / 16)
        fill = 2 * c["mte1_startup_cycles"] + (m1 + n1) * 512 / c["l0a_bytes_per_cycle"]
        return max(9 * issue, 3 * fl + fill + c["mmad_startup_cycles"] + m1 * n1)


@dataclass(frozen=True)
class FixStore(Op):
    """L0C -> GM: ``tilegen::FixpipeRows`` (``Fixpipe`` with ``FixpipeParamsV220``, ``SetAtomicAdd`` when
    ``atomic``: True, or a C++ condition such as ``tilegen::AddAfterFirst``), or with ``product`` a fused
    chunked product and its store: ``tilegen::MatmulStore``."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "fix_store"
    src: str
    gm: str
    offset: str
    m: int
    valid: str
    cols: int
    pitch: str
    atomic: bool | str
    l2: bool
    product: Matmul | None = None

    def cycles(self, c, cut=False, valid=None):
        return _fix_store_cycles(c, self.m * self.cols * 4, self.l2, bool(self.atomic), self.m)


@dataclass(frozen=True)
class C2VSend(Op):
    """A hand-off tile sent from the AIC: a wait for a free slot (``CrossCoreWaitFlag(free)``),
    ``tilegen::FixpipeRows`` (or with ``product`` ``tilegen::MatmulStore``) into the GM slot at ``address``,
    ``CrossCoreSetFlag<2, PIPE_FIX>(ready)`` when ``signal`` (the last store of a group)."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "c2v_send"
    src: str
    gm: str
    m: int
    cols: int
    atomic: bool
    ready: str
    free: str
    slots: int
    counter: str
    address: str
    signal: bool
    product: Matmul | None = None

    def cycles(self, c, cut=False, valid=None):
        return _fix_store_cycles(c, self.m * self.cols * 4, True, self.atomic, self.m)


@dataclass(frozen=True)
class DoneSignal(Op):
    """``CrossCoreSetFlag<2, PIPE_FIX>(flag)`` after a program's owned-tile stores (@signal_done), under
    the C++ condition ``cond`` > 0 when it is not ""."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "done_signal"
    flag: int
    cond: str


@dataclass(frozen=True)
class WaitLoaded(Op):
    """``tilegen::WaitLoaded`` (``WaitFlag<MTE2_MTE1>`` of the event :class:`L1Load` ``defer`` returned)
    before ``buf``'s first reader (@wait_at_read)."""

    unit: ClassVar[str] = "cube"
    kind: ClassVar[str] = "wait_loaded"
    buf: str
    ctype: str


@dataclass(frozen=True)
class Rotate(Op):
    """``buf`` switched to its next copy (a scalar select of the ``LocalTensor`` views; ``stages`` copies)."""

    kind: ClassVar[str] = "rotate"
    buf: str
    stages: int

    def cycles(self, c, cut=False, valid=None):
        return _issue_only(c)


# --- vector (AIV) --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UbLoad(Op):
    """GM -> UB of this AIV's rows: ``tilegen::LoadRows`` / ``LoadVector`` (a row vector: ``vector``) or
    their packed-batch forms ``LoadRowsIn`` / ``LoadVectorIn`` (``ids``), i.e. ``DataCopyPad`` with
    ``DataCopyExtParams`` (padding ``pad_value`` when ``pad``); zeros by ``Duplicate`` when the C++
    ``zero_unless`` <= 0 (@zero_unless); after ``CrossCoreWaitFlag(wait_done)`` when it is >= 0."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "ub_load"
    ctype: str
    buf: str
    gm: str
    offset: str
    pitch: str
    valid: str
    rows: int
    cols: int
    cpad: int
    vector: bool
    ids: str
    l2: bool
    pad: bool
    pad_value: str
    zero_unless: str
    wait_done: int

    def cycles(self, c, cut=False, valid=None):
        return _ub_copy_cycles(c, self.rows, self.cols, _esize(self.ctype), self.vector, self.l2, False, False)


@dataclass(frozen=True)
class C2VRecv(Op):
    """A hand-off tile received on the AIV: ``CrossCoreWaitFlag(ready)`` (when ``wait``),
    ``tilegen::LoadRows`` (DataCopyPad) from the GM slot at ``address``, ``CrossCoreSetFlag<2, PIPE_MTE2>(free)``;
    ``defer``: its MTE2 -> V wait left to :class:`WaitReceived` (@wait_at_read); ``free_event``: the
    copy first waits for the V -> MTE2 event of the tile's last access (@free_early), or ""."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "c2v_recv"
    ctype: str
    buf: str
    gm: str
    pitch: str
    rows: int
    cols: int
    cpad: int
    vector: bool
    ready: str
    free: str
    slots: int
    counter: str
    address: str
    wait: bool
    free_event: str
    defer: bool = False

    def cycles(self, c, cut=False, valid=None):
        return _ub_copy_cycles(c, self.rows, self.cols, _esize(self.ctype), self.vector, True, False, False)


@dataclass(frozen=True)
class UbStore(Op):
    """UB -> GM of this AIV's rows: ``tilegen::StoreRows`` / ``StoreVector`` (or ``StoreRowsIn`` /
    ``StoreVectorIn`` with ``ids``), i.e. ``DataCopyPad`` (``SetAtomicAdd`` when ``atomic``); ``closing``
    False: its MTE3 -> V wait is left to :class:`WaitStored` (@wait_at_rewrite)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "ub_store"
    ctype: str
    buf: str
    gm: str
    offset: str
    pitch: str
    valid: str
    rows: int
    cols: int
    cpad: int
    vector: bool
    ids: str
    l2: bool
    atomic: bool
    closing: bool

    def cycles(self, c, cut=False, valid=None):
        return _ub_copy_cycles(c, self.rows, self.cols, _esize(self.ctype), self.vector, self.l2, True, self.atomic)


@dataclass(frozen=True)
class V2CSend(Op):
    """A hand-off tile sent from the AIV: a wait for a free slot (``CrossCoreWaitFlag(free)``),
    ``tilegen::StoreRows`` (DataCopyPad) into the GM slot at ``address``, ``CrossCoreSetFlag<2,
    PIPE_MTE3>(ready)`` when ``signal``; ``closing`` as :class:`UbStore`."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "v2c_send"
    ctype: str
    buf: str
    gm: str
    pitch: str
    rows: int
    cols: int
    cpad: int
    vector: bool
    atomic: bool
    closing: bool
    ready: str
    free: str
    slots: int
    counter: str
    address: str
    signal: bool

    def cycles(self, c, cut=False, valid=None):
        return _ub_copy_cycles(c, self.rows, self.cols, _esize(self.ctype), self.vector, True, True, self.atomic)


@dataclass(frozen=True)
class ScalarLoad(Op):
    """A 0-d tile read from GM: ``tilegen::LoadScalar`` (``GlobalTensor::GetValue``, ``LocalTensor::SetValue``)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "scalar_load"
    buf: str
    ctype: str
    gm: str
    offset: str

    def cycles(self, c, cut=False, valid=None):
        """Its two flag pairs (``flag_cycles`` each), the scalar read from GM at HBM's first-byte latency
        (``gm_hbm_latency_cycles``, an upper bound: the twin's trace does not time GlobalTensor::GetValue)
        and the SetValue into UB (``scalar_ub_write_cycles``)."""
        return 2 * c["flag_cycles"] + c["gm_hbm_latency_cycles"] + c["scalar_ub_write_cycles"]


@dataclass(frozen=True)
class ClassStore(Op):
    """A tile pair's block class stored by AIV 0: ``tilegen::StoreVector`` (DataCopyPad) of one float."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "class_store"
    gm: str
    offset: str

    def cycles(self, c, cut=False, valid=None):
        """StoreVector of 4 bytes: its two flag pairs (``flag_cycles`` each) and one DataCopyPad on MTE3 to
        HBM (``gm_hbm_latency_cycles`` + 4 B / ``mte3_bytes_per_cycle``), or its 5 issued instructions
        (``issue_cycles``) if longer; the model prices AIV 0, the one that stores."""
        return _ub_copy_cycles(c, 1, 1, 4, True, False, True, False)


@dataclass(frozen=True)
class ModTable(Op):
    """A parameter tensor of ``n`` elements (C type ``ctype``) copied once into the UB view ``view`` as
    floats at the start of the AIV's work: ``tilegen::ModLoadFloats`` (DataCopyPad GM -> UB, an int32
    tensor converted in place by Cast); the mods' reads along the row then ``Gather`` from it."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "mod_table"
    view: str
    gm: str
    n: int
    ctype: str

    def cycles(self, c, cut=False, valid=None):
        """The copy (HBM: read once per core) between its two waits, and the int32 tensor's Cast."""
        cast = c.vector_cycles(math.ceil(self.n * 4 / 256)) if self.ctype == "int32_t" else 0.0
        return 2 * c["flag_cycles"] + c.copy_cycles(self.n * _esize(self.ctype), False, False) + cast


@dataclass(frozen=True)
class ModStore(Op):
    """A tile's parameter-gradient window (``n`` floats) stored by each AIV: ``tilegen::StoreVector``."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "mod_store"
    gm: str
    offset: str
    n: int

    def cycles(self, c, cut=False, valid=None):
        """StoreVector of ``n`` floats: its two flag pairs (``flag_cycles`` each) and one DataCopyPad on MTE3
        to HBM (``gm_hbm_latency_cycles`` + 4 ``n`` B / ``mte3_bytes_per_cycle``), or its 5 issued
        instructions (``issue_cycles``) if longer."""
        return _ub_copy_cycles(c, self.n, 1, 4, True, False, True, False)


@dataclass(frozen=True)
class WaitStored(Op):
    """``tilegen::WaitMte3ToV`` (``SetFlag``/``WaitFlag<MTE3_V>``) before the next writer of ``bufs``, whose
    stores left their wait (@wait_at_rewrite)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "wait_stored"
    bufs: tuple[str, ...]


@dataclass(frozen=True)
class WaitReceived(Op):
    """``tilegen::WaitMte2ToV`` (``SetFlag``/``WaitFlag<MTE2_V>``) before ``buf``'s first reader
    (@wait_at_read of a :class:`C2VRecv`)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "wait_received"
    buf: str
    ctype: str


@dataclass(frozen=True)
class FreeMte2(Op):
    """``tilegen::FreeForMte2`` (``SetFlag<V_MTE2>(event)``) after ``buf``'s last access (@free_early)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "free_mte2"
    buf: str
    event: str

    def cycles(self, c, cut=False, valid=None):
        return _issue_only(c)


@dataclass(frozen=True)
class Fill(Op):
    """``Duplicate(buf, value, count)``."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "fill"
    buf: str
    ctype: str
    value: str
    count: int

    def cycles(self, c, cut=False, valid=None):
        return max(c.issue(), c.vector_cycles(math.ceil(self.count * _esize(self.ctype) / 256)))


@dataclass(frozen=True)
class Reduce(Op):
    """A row max / sum of this AIV's rows: ``tilegen::RowsReduce`` (``WholeReduceMax``/``WholeReduceSum``
    per 64 columns, ``Max``/``Add``), or of the fold ``fold`` when it is not "": ``tilegen::RowsReduceFolded``
    (one ``WholeReduceMax``/``WholeReduceSum``); ``src`` "" then."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "reduce"
    dst: str
    src: str
    rows: int
    cols: int
    cpad: int
    is_max: bool
    fold: str

    def cycles(self, c, cut=False, valid=None):
        issue = c.issue()
        if self.fold:  # RowsReduceFolded: one ReduceRepeat over every row
            return max(issue, c.vector_cycles(self.rows, "vector_reduce_repeat_cycles"))
        # a ReduceRepeat per 64 columns over every row, the later chunks combined with Max/Add
        n = math.ceil(self.cols / 64)
        v_cycles = n * c.vector_cycles(self.rows, "vector_reduce_repeat_cycles") + (n - 1) * c.vector_cycles(math.ceil(self.rows * 4 / 256))
        return max((2 * n - 1) * issue, v_cycles)


@dataclass(frozen=True)
class Fold(Op):
    """The 64-column fold of a row reduction (Reduce.fold): ``tilegen::RowsFold`` (``Max``/``Add`` per 64
    columns after the first, over every row)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "fold"
    dst: str
    src: str
    rows: int
    cols: int
    cpad: int
    is_max: bool
    fold: str

    def cycles(self, c, cut=False, valid=None):
        n = math.ceil(self.cols / 64)
        return max((n - 1) * c.issue(), (n - 1) * c.vector_cycles(self.rows))


@dataclass(frozen=True)
class MaskTile(Op):
    """The causal / window mask of this AIV's rows of a score tile: ``tilegen::MaskTile`` (``CreateVecIndex``,
    ``Brcb``, ``Compare``, ``Select`` with -inf; a padding row one ``Duplicate``); ``cut_only``: it returns
    at once on a tile the mask does not cut (@cut_only)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "mask"
    buf: str
    rows: int
    cpad: int
    row0: str
    col0: str
    off: str
    left: int
    right: int
    cut_only: bool

    def cycles(self, c, cut=False, valid=None):
        if self.cut_only and not cut:
            return 0.0  # MaskTile returns before any instruction on a tile it does not cut
        issue, fl, vs, vr, wr = c.issue(), c["flag_cycles"], c["vector_startup_cycles"], c["vector_repeat_cycles"], c["scalar_ub_write_cycles"]
        rows, cpad, chunks = self.rows, self.cpad, math.ceil(self.cpad / 64)
        add = max(2 * issue, vs + vr)

        def vec(n):
            return c.vector_cycles(math.ceil(n * 4 / 256))

        def index(n):  # CreateVecIndex: scalar writes of the first block, an S->V pair, then Adds on V
            return 2 * fl + min(n, 8) * (issue + wr) + (math.ceil(min(n, 64) / 8) - 1 + max(math.ceil(n / 64) - 1, 0)) * add

        sel_pre = vec(1) + vs  # a Select in VSEL_TENSOR_SCALAR_MODE: a Duplicate of the scalar and a set_cmpmask first
        live = rows if valid is None else min(max(valid, 0), rows)
        pad = vec((rows - live) * cpad) if live < rows else 0.0
        # on a cut tile: the lower bound where it is finite, and the upper one (the window's, or Sk - 1 on
        # a tile past Sk): the model does not tell which of them cuts, it counts both
        bounds = (self.left >= 0) + 1
        n = math.ceil(live / 8) * 8
        # per bound (MaskBound): the thresholds (CreateVecIndex and Mins), then one group of rows (the
        # scratch holds 64): Brcb, and per 64 columns a Compare and a Select over the rows
        bound = (index(n) + vec(n) + vs + math.ceil(live / 8) * c["vector_brcb_repeat_cycles"]
                 + chunks * (2 * c.vector_cycles(live) + sel_pre))
        work = (index(cpad) + bounds * bound) if live > 0 and bounds else 0.0
        return pad + work


@dataclass(frozen=True)
class Elementwise(Op):
    """An elementwise op into ``dst`` (``count`` elements: this AIV's ``rows`` rows, padded)."""

    unit: ClassVar[str] = "vector"
    dst: str
    count: int
    rows: int


@dataclass(frozen=True)
class Broadcast(Elementwise):
    """A 0-d tile broadcast into a row vector: ``tilegen::BroadcastScalar`` (``GetValue``, ``Duplicate``)."""

    kind: ClassVar[str] = "broadcast"
    src: str

    def cycles(self, c, cut=False, valid=None):
        """Its flag pair (``flag_cycles``), the GetValue from UB (``scalar_ub_read_cycles``), then one
        Duplicate of ``count`` floats (``vector_cycles``: 256 B a repeat)."""
        return c["flag_cycles"] + c["scalar_ub_read_cycles"] + c.vector_cycles(math.ceil(self.count * 4 / 256))


@dataclass(frozen=True)
class Adds(Elementwise):
    """``Adds(dst, src, scalar, count)`` (a copy: scalar 0)."""

    kind: ClassVar[str] = "adds"
    src: str
    scalar: str

    def cycles(self, c, cut=False, valid=None):
        return max(c.issue(), c.vector_cycles(math.ceil(self.count * 4 / 256)))


@dataclass(frozen=True)
class Scalar(Elementwise):
    """``fn(dst, src, scalar, count)``: ``Muls`` or ``Adds``."""

    kind: ClassVar[str] = "scalar"
    fn: str
    src: str
    scalar: str

    def cycles(self, c, cut=False, valid=None):
        return max(c.issue(), c.vector_cycles(math.ceil(self.count * 4 / 256)))


@dataclass(frozen=True)
class Cast(Elementwise):
    """``tilegen::CastRows`` (``Cast`` with RoundMode ``mode``, one call per row of ``crows`` when the padded
    widths ``dpad`` and ``spad`` differ)."""

    kind: ClassVar[str] = "cast"
    src: str
    dtype_dst: str
    dtype_src: str
    mode: str
    cols: int
    dpad: int
    spad: int
    crows: int

    def cycles(self, c, cut=False, valid=None):
        esz = max(ESIZE[self.dtype_dst], ESIZE[self.dtype_src])
        if self.dpad == self.spad:
            return max(c.issue(), c.vector_cycles(math.ceil(self.count * esz / 256)))
        return self.crows * max(c.issue(), c.vector_cycles(math.ceil(self.cols * esz / 256)))


@dataclass(frozen=True)
class Unary(Elementwise):
    """``fn(dst, src, count)``: ``Exp`` or ``Ln``."""

    kind: ClassVar[str] = "unary"
    fn: str
    src: str

    def cycles(self, c, cut=False, valid=None):
        per = "vector_exp_repeat_cycles" if self.fn in ("Exp", "Ln") else "vector_repeat_cycles"
        return max(c.issue(), c.vector_cycles(math.ceil(self.count * 4 / 256), per))


@dataclass(frozen=True)
class ZeroIfNegInf(Elementwise):
    """``tilegen::ZeroIfNegInf`` (``Compare``, ``Select``: -inf -> 0)."""

    kind: ClassVar[str] = "zero_if_neginf"
    src: str

    def cycles(self, c, cut=False, valid=None):
        # copy to the 64-aligned row, Compares, Select, copy back (vector ops, issued ahead)
        n = self.count

        def vec(k):
            return c.vector_cycles(math.ceil(k * 4 / 256))

        sel_pre = vec(1) + c["vector_startup_cycles"]
        return max(4 * c.issue(), 2 * vec(n) + 2 * vec(math.ceil(n / 64) * 64) + sel_pre)


def _rows_op_cycles(c, rows: int, cpad: int, div: bool) -> float:
    # Brcb of the row factors (one group: the scratch holds every row on the built-in specs), then an
    # Add/Sub/Mul over the rows per 64 columns
    def vec(k):
        return c.vector_cycles(math.ceil(k * 4 / 256))

    chunks = math.ceil(cpad / 64)
    v_cycles = c["vector_startup_cycles"] + math.ceil(rows / 8) * c["vector_brcb_repeat_cycles"] + chunks * c.vector_cycles(rows)
    n_issue = 1 + chunks
    if div:  # the factors 1 / v first: copy, Compares, Reciprocal, Select
        v_cycles += vec(rows) + 3 * vec(math.ceil(rows / 64) * 64) + (vec(1) + c["vector_startup_cycles"])
        n_issue += 4
    return max(n_issue * c.issue(), v_cycles)


@dataclass(frozen=True)
class RowsAdd(Elementwise):
    """``dst = src + sign * vec`` per row: ``tilegen::RowsAddScalar`` (``Brcb``, ``Add``/``Sub`` per 64 columns)."""

    kind: ClassVar[str] = "rows_add"
    src: str
    vec: str
    sign: str
    cpad: int

    def cycles(self, c, cut=False, valid=None):
        return _rows_op_cycles(c, self.rows, self.cpad, False)


@dataclass(frozen=True)
class RowsMul(Elementwise):
    """``dst = src * vec`` per row: ``tilegen::RowsMulScalar`` (``Brcb``, ``Mul`` per 64 columns)."""

    kind: ClassVar[str] = "rows_mul"
    src: str
    vec: str
    cpad: int

    def cycles(self, c, cut=False, valid=None):
        return _rows_op_cycles(c, self.rows, self.cpad, False)


@dataclass(frozen=True)
class RowsDiv(Elementwise):
    """``dst = src / vec`` per row, 0 where vec is 0: ``tilegen::RowsSafeDiv`` (``Compare``, ``Reciprocal``,
    ``Select``, ``Brcb``, ``Mul``)."""

    kind: ClassVar[str] = "rows_div"
    src: str
    vec: str
    cpad: int

    def cycles(self, c, cut=False, valid=None):
        return _rows_op_cycles(c, self.rows, self.cpad, True)


@dataclass(frozen=True)
class Binary(Elementwise):
    """``fn(dst, a, b, count)``: ``Add``, ``Sub``, ``Mul`` or ``Max``."""

    kind: ClassVar[str] = "binary"
    fn: str
    a: str
    b: str

    def cycles(self, c, cut=False, valid=None):
        return max(c.issue(), c.vector_cycles(math.ceil(self.count * 4 / 256)))


@dataclass(frozen=True)
class ModWindow:
    """The attention window of a block classification (MaskInfo: ``off`` C++, ``left``/``right``, -1 unbounded)."""

    off: str
    left: int
    right: int


@dataclass(frozen=True)
class Mod(Op):
    """A score or mask mod on this AIV's rows of ``buf`` (:mod:`tilegen.backends.ascendc.mods`): the
    per-tile lines ``tile``, per row the lines ``body``, then ``post`` (each one runtime call:
    ``tilegen::Mod*``, ``Duplicate``, ``Mul``, ``Max``: :class:`ModLine`)."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "mod"
    note: str
    buf: str
    rows: int
    cpad: int
    row0: str
    col0: str
    tile: tuple[ModLine, ...]
    body: tuple[ModLine, ...]
    post: tuple[ModLine, ...]

    def cycles(self, c, cut=False, valid=None):
        """Its lines, the body once per row (``valid`` rows when the tile holds padding rows)."""
        return _lines_cycles(c, self.tile + self.post, self.body, self.rows if valid is None else valid)


@dataclass(frozen=True)
class Classify(Op):
    """The block class of a tile pair on AIV 0 (0 none visible, 1 some, 2 all ``full`` entries): the mask
    mod's lines per row (``tile``, ``body``), ``tilegen::ModWindow`` and ``tilegen::ModRowCount``
    (``ReduceSum``), the class written by ``Duplicate`` into ``sm_g``."""

    unit: ClassVar[str] = "vector"
    kind: ClassVar[str] = "classify"
    note: str
    rows: int
    cpad: int
    row0: str
    col0: str
    tile: tuple[ModLine, ...]
    body: tuple[ModLine, ...]
    post: tuple[ModLine, ...]
    blocks: str
    window: ModWindow
    cols: int
    full: int

    def cycles(self, c, cut=False, valid=None):
        """Its lines per row, ModWindow (two compares, selects and products) and ModRowCount (ReduceSum)."""
        vec = max(c.issue(), c.vector_cycles(math.ceil(self.cpad * 4 / 256)))
        row = 8 * vec + c.vector_cycles(1, "vector_reduce_repeat_cycles") + c["vector_reduce_cycles"] + c["scalar_ub_read_cycles"]
        return _lines_cycles(c, self.tile + self.post, self.body, self.rows) + self.rows * row


# --- the lines of a mod op -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModLine:
    """One line of a :class:`Mod` or :class:`Classify` op's C++ (a runtime call or a scalar statement, on
    this AIV's row ``row`` or the tile's scratch rows); ``macro``: the kernels.asc.jinja macro that renders
    it (the class name)."""

    macro: ClassVar[str] = "ModLine"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.macro = cls.__name__

    def cycles(self, c) -> float:
        """Cycles of this line (its vector instruction, or its scalar work) on the AIV."""
        return c.issue()


@dataclass(frozen=True)
class LineColumns(ModLine):
    """The tile's key indices mcol0 + c as floats in ``sc_col``: ``tilegen::ModColumns`` (``CreateVecIndex``)."""

    cpad: int

    def cycles(self, c):
        return max(c.issue(), c.vector_cycles(math.ceil(self.cpad * 4 / 256)))


@dataclass(frozen=True)
class LineDecl(ModLine):
    """``const ctype name = value;``: a scalar of the mod (C++ ``value``: integer arithmetic, floor
    division, bit operations, parameter reads through ``GlobalTensor::GetValue``) on the scalar unit."""

    name: str
    ctype: str
    value: str

    def cycles(self, c):
        return c.issue() + self.value.count("GetValue(") * c["scalar_ub_read_cycles"]


# vector ops of LineVec: the API call each renders (count form, ``cpad`` elements) and its repeat rate key
VEC_OPS = {
    "dup": ("Duplicate", "vector_repeat_cycles"), "adds": ("Adds", "vector_repeat_cycles"), "muls": ("Muls", "vector_repeat_cycles"),
    "maxs": ("Maxs", "vector_repeat_cycles"), "mins": ("Mins", "vector_repeat_cycles"), "add": ("Add", "vector_repeat_cycles"),
    "sub": ("Sub", "vector_repeat_cycles"), "mul": ("Mul", "vector_repeat_cycles"), "div": ("Div", "vector_exp_repeat_cycles"),
    "max": ("Max", "vector_repeat_cycles"), "min": ("Min", "vector_repeat_cycles"), "exp": ("Exp", "vector_exp_repeat_cycles"),
    "ln": ("Ln", "vector_exp_repeat_cycles"), "abs": ("Abs", "vector_repeat_cycles"), "sqrt": ("Sqrt", "vector_exp_repeat_cycles"),
    "rec": ("Reciprocal", "vector_exp_repeat_cycles"), "floor": ("Cast", "vector_repeat_cycles"),
    "cmps": ("Compares", "vector_repeat_cycles"), "cmp": ("Compare", "vector_repeat_cycles"), "sel": ("Select", "vector_repeat_cycles"),
    "gather": ("tilegen::ModGather", ""), "f2i": ("Cast", "vector_repeat_cycles"), "i2f": ("Cast", "vector_repeat_cycles"),
    "dupi": ("Duplicate", "vector_repeat_cycles"), "and": ("And", "vector_repeat_cycles"), "or": ("Or", "vector_repeat_cycles"),
    "span": ("tilegen::ModLoadFloats", ""), "gatherub": ("Gather", "vector_repeat_cycles"),
}


@dataclass(frozen=True)
class LineVec(ModLine):
    """One vector instruction of a compiled mod (:mod:`tilegen.backends.ascendc.mods`), count form over
    ``cpad`` floats: ``op`` (a key of :data:`VEC_OPS`) writing row ``dst`` from rows ``a``, ``b`` and the
    C++ scalar ``x`` (``mode``: a CMPMODE; ``gm``: the parameter a ``gather`` reads, a scalar loop of
    ``GetValue`` from GM at the offsets in row ``a``). ``cmps``/``cmp`` write the bit row ``sc_bits``,
    which ``sel`` (Select, VSEL_TENSOR_SCALAR_MODE) reads. ``span``: ``x`` elements of the GM tensor
    ``gm`` (an indexed GlobalTensor, dtype ``mode``) into row ``dst`` as floats; ``gatherub``: ``Gather``
    from row ``b`` (a span) or the UB table ``gm`` at the byte offsets of the int32 row ``a``."""

    op: str
    dst: str
    a: str = ""
    b: str = ""
    x: str = ""
    mode: str = ""
    gm: str = ""
    cpad: int = 0

    def cycles(self, c):
        if self.op == "gather":  # per element: a UB read of the offset, a GM read, a UB write
            return 2 * c["flag_cycles"] + self.cpad * (c["scalar_ub_read_cycles"] + c["gm_l2_latency_cycles"] / 8 + c["scalar_ub_write_cycles"])
        if self.op == "span":  # V -> MTE2 and MTE2 -> V waits, a DataCopyPad of up to cpad elements (the tensor
            # is read again by every tile: L2), an int32 span's Cast to float
            cast = max(c.issue(), c.vector_cycles(math.ceil(self.cpad * 4 / 256))) if self.mode == "int32" else 0.0
            return 2 * c["flag_cycles"] + c.copy_cycles(self.cpad * 4, False, True) + cast
        per = VEC_OPS[self.op][1]
        return max(c.issue(), c.vector_cycles(math.ceil(self.cpad * 4 / 256), per))


@dataclass(frozen=True)
class LineRaw(ModLine):
    """``mraw``: this row of the raw-score tile ``buf`` (the unmodified scores a derivative reads)."""

    buf: str


@dataclass(frozen=True)
class LineFull(ModLine):
    """``mfull``: the tile is all visible (C++ ``cond``, the block table), the mask mod not evaluated."""

    cond: str


@dataclass(frozen=True)
class LineOpen(ModLine):
    """``if (cond) {``."""

    cond: str


@dataclass(frozen=True)
class LineClose(ModLine):
    """``}``."""


@dataclass(frozen=True)
class LineHide(ModLine):
    """-inf where the mask row ``sm_v0`` is 0: ``tilegen::ModHide`` (``Compares``, ``Select``)."""

    cpad: int

    def cycles(self, c):
        return 2 * max(c.issue(), c.vector_cycles(math.ceil(self.cpad * 4 / 256)))


@dataclass(frozen=True)
class LineZero(ModLine):
    """The gradient window ``sm_g`` of ``n`` entries zeroed: ``Duplicate``."""

    n: int


@dataclass(frozen=True)
class LineScatter(ModLine):
    """The row ``a`` (contributions) added into the gradient window ``sm_g`` of ``width`` entries at the
    slots in row ``b`` (clipped into it), for the row's valid keys, in column order: ``tilegen::ModScatterAdd`` (``GetValue``/``SetValue``)."""

    a: str
    b: str
    cpad: int = 0
    width: int = 1

    def cycles(self, c):
        return 2 * c["flag_cycles"] + self.cpad * (3 * c["scalar_ub_read_cycles"] + c["scalar_ub_write_cycles"])


@dataclass(frozen=True)
class LineToStore(ModLine):
    """The window's scalar writes ordered before its store: ``tilegen::ModWindowToStore`` (``S -> MTE3``)."""


def _lines_cycles(c, tile, body, rows: int) -> float:
    return sum(t.cycles(c) for t in tile) + rows * sum(t.cycles(c) for t in body)


# --- walking -------------------------------------------------------------------------------------------


def children(op: Op) -> Iterator[Op]:
    """The ops directly inside ``op`` (a loop's body, a pipelined loop's stages and hoisted receives, a
    stream's openings, its loop and its closing)."""
    if isinstance(op, Loop):
        yield from op.body
    elif isinstance(op, PipelinedLoop):
        yield from op.stage0
        yield from op.hoisted
        yield from op.stage1
    elif isinstance(op, Stream):
        yield from op.open_a
        yield from op.open_b
        yield op.ploop
        yield from op.close


def walk(ops) -> Iterator[Op]:
    """Every op of ``ops`` and, depth first, those inside them."""
    for op in ops:
        yield op
        yield from walk(children(op))


OP_CLASSES: tuple[type[Op], ...] = tuple(
    cls for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, Op) and cls not in (Op, Elementwise)
)
LINE_CLASSES: tuple[type[ModLine], ...] = tuple(
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, ModLine) and cls is not ModLine
)
