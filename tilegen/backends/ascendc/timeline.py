"""The timeline of the emitted Ascend C: a discrete-event schedule of the hand twin's instruction trace.

The hand CPU twin (``tilegen/twin/include``) records, with ``TWIN_TRACE=<file>``, every instruction
each core of a launch issues, in program order: its pipe (S, MTE1, MTE2, MTE3, M, FIX on the AIC; S,
MTE2, MTE3, V on an AIV), its kind and sizes, the byte ranges it writes and reads, and every
synchronisation (``SetFlag``/``WaitFlag``, ``PipeBarrier``, ``CrossCoreSetFlag``/``CrossCoreWaitFlag``);
``tilegen/twin/include/twin/trace.h`` gives the format. :func:`simulate_block` schedules the trace of
one AI Core (1 AIC + 2 AIVs) with the cost table of the target file (``[timeline]``, in cycles):

- the scalar unit (S) walks each core's trace in order; every instruction costs it ``issue_cycles``,
  a scalar UB access its own latency, and a wait on S (``WaitFlag<X_S>``, ``CrossCoreWaitFlag``)
  stalls it until the flag is set;
- every other instruction joins its pipe's queue and runs in order on that pipe, one at a time, from
  max(its issue, the pipe's previous instruction's end, the flags waited on that pipe) for its
  duration from the cost table (a GM copy's data phase also waits for room on its AI Core's read or
  write port, a vector instruction adds its UB bank conflicts, and a Fixpipe frees its pipe before its
  write lands: DESIGN §4, "What the timeline prices");
- ``SetFlag<A_B>`` fires when pipe A has finished everything issued to it before, and the next
  instruction on B starts no earlier than that plus ``flag_cycles``; ``CrossCoreSetFlag`` likewise on
  its pipe plus ``cross_core_flag_cycles``, with the mode-2 rules (an AIC set reaches both AIVs; the
  AIC's wait needs one set from each AIV, or from the one AIV its record names: the real-API twin's
  record of a matmul-server message, tilegen/twin/cce/trace.h); ``PipeBarrier`` on a pipe waits for
  its instructions to complete (a Fixpipe's landing; otherwise implied by the in-order pipe), and
  ``PipeBarrier<PIPE_ALL>`` (pipe ``ALL``): the scalar unit and every pipe go on
  from the end of the core's last instruction.

The real-API twin (tilegen/twin/cce) writes the same trace for kernels built on Huawei's headers;
tilegen/harness/ascend_peer.py maps its intrinsic names to the kinds priced here.

Checks: a wait that nothing ever sets (deadlock) and a **race** raise :class:`TimelineError`: a missing
flag is reported, it does not make the timeline faster. A race is two accesses of overlapping bytes on
one core, at least one a write, on different pipes, where
- on-chip memory (UB, L1, L0A, L0B, L0C; pipes other than S): the later in program order is not ordered
  after the earlier by a chain of SetFlag/WaitFlag pairs, wherever the two fall in the schedule (the
  twins' rule, ``tilegen/twin/include/twin/order.h``: per pipe, the last instruction of every other pipe
  it is ordered after; SetFlag takes its source pipe's, WaitFlag merges it into the destination pipe's);
- otherwise (GM, scalar accesses): the later starts before the earlier has finished.
(GM is checked per core; across the cores of a block the twin's own flag protocol checks apply.)

:func:`simulate_program` runs a spec's forward or backward on the twin and schedules it. Small
programs run whole (every block of the 24-core launch; the kernel time is its slowest block). Large
ones use the **cost-only** form: the twin runs chosen program instances alone (``TWIN_TRACE_BLOCKS``,
one head of one batch, full sequence lengths), each instance is scheduled, and each kernel's instance
time is fitted as ``a + b·pairs + c·cut pairs`` (pairs: the (Q tile, K/V tile) pairs the instance
visits; cut: those the mask cuts; the samples: the cheapest instance of each cut count, then
signatures spread from the lightest to the heaviest); the fit gives every instance of the full launch, the instances are
dealt over the cores as the kernel deals them (``pid = core, core + cores, …``), consecutive instances
on a core are added (no overlap across instance boundaries), and the kernel time is the slowest core.
The result says which form was used, which instances were scheduled and the fit's worst residual.
A streamed kernel (``@stream``: a core's instances overlap) also runs every instance of one head on
one core as one stream (a head of more than ``STREAM_PAIRS`` pairs at Sq and Sk scaled alike, whole
tiles), scheduled whole: an instance alone costs the pipeline's fill + a + b·pairs + c·cut pairs, in the
stream a + b·pairs + c·cut pairs, and one least-squares fit through the instances alone and the stream gives
all four; the instances are dealt as above without the fill, and every core pays it once (checked against
whole launches, causal and not, in tests/test_timeline.py).

GM levels: a copy into or out of the hand-off workspace is L2-resident (the trace says so); a copy of
an HBM tensor whose byte range another block of the launch also copies, or this block copied before,
is made L2-resident too (:func:`l2_levels`), unless the re-accessed tensors of the heads in flight
exceed the L2 (:func:`tilegen.models.analysis.l2_reuse`); each launch takes at least the chip's HBM floor
(:func:`tilegen.models.cost.hbm_floor_s`) and its L2 floor (every GM byte its copies move at
``chip_l2_bytes_per_cycle``), and its form says when one binds.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import os
import tempfile
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tilegen.core.errors import TilegenError
from tilegen.core.progress import step, steps
from tilegen.passes.ascend.one_launch import SyncAll
from tilegen.passes.ascend.snake_deal import deal_of
from tilegen.passes.ascend.stream_programs import Stream

PIPES = ("S", "MTE1", "MTE2", "MTE3", "M", "FIX", "V")
WORK_KINDS_OF_S = ("GetValue", "SetValue", "SetAtomic")
LOCAL_SPACES = frozenset("U1ABC")  # UB, L1, L0A, L0B, L0C: the on-chip memory the ordering check covers
_PIPE = {p: n for n, p in enumerate(PIPES)}


class TimelineError(TilegenError):
    """The trace cannot be scheduled: a race, a deadlock, or an instruction the cost table lacks."""


@dataclass(frozen=True)
class Instr:
    """One trace record: pipe, kind, sizes a/b/c (trace.h), written and read byte ranges."""

    pipe: str
    kind: str
    a: int
    b: int
    c: int
    writes: tuple = ()
    reads: tuple = ()
    shared: bool = False  # a GM copy whose bytes another block of the launch also accesses (l2_levels)


def parse_trace(text: str) -> dict[int, dict[int, dict[str, list[Instr]]]]:
    """``{kernel: {block: {"AIC" | "AIV0" | "AIV1": [Instr, ...]}}}`` from a trace file's text: the
    kernels in launch order, a launch that runs several (``@sync_all``) cut at each core's
    ``SyncAll`` records (a barrier of every core: what follows it starts when the last core arrives,
    :func:`tilegen.models.cost.start_overhead_s` prices the barrier)."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    cur = None
    for line in text.splitlines():
        if line.startswith("core "):
            _, launch, block, ctype, sub = line.split()
            key, seg = ("AIC" if ctype == "AIC" else f"AIV{sub}"), 0
            cur = []
            out[(int(launch), seg)][int(block)][key] = cur
            continue
        if line == "end":
            cur = None
            continue
        if not line or cur is None:
            continue
        f = line.split()
        if f[1] == "SyncAll" and f[2] == "1":  # SyncAll<false>: every core of the launch (SyncAll<true>: the AIVs only)
            seg += 1
            cur = []
            out[(int(launch), seg)][int(block)][key] = cur
            continue
        pos = 6
        nw = int(f[5])
        w = tuple((f[pos + 3 * k], int(f[pos + 3 * k + 1]), int(f[pos + 3 * k + 2])) for k in range(nw))
        pos += 3 * nw
        nr = int(f[pos])
        pos += 1
        r = tuple((f[pos + 3 * k], int(f[pos + 3 * k + 1]), int(f[pos + 3 * k + 2])) for k in range(nr))
        cur.append(Instr(f[0], f[1], int(f[2]), int(f[3]), int(f[4]), w, r))
    return {n: dict(out[k]) for n, k in enumerate(sorted(out))}


# ---------------------------------------------------------------------------------------------------
# cost table


ENDS = ("central", "fast", "slow")


class Costs:
    """The ``[timeline]`` table of a target as cycles per instruction (see targets/ascend910b2.toml).

    ``end`` picks each entry's figure: ``"central"`` its value, ``"fast"`` / ``"slow"`` the end of its
    range (``low``/``high``) that makes the kernel faster / slower: the high end of a rate (a key ending in
    ``_per_cycle``), the low end of anything else (cycles, bytes of a burst, a factor). A table of plain
    numbers (the tests' hand tables) has no ranges: every end is its value.

    Raises:
        ValueError: ``end`` is not one of :data:`ENDS`.
    """

    def __init__(self, table: dict, end: str = "central"):
        if end not in ENDS:
            raise ValueError(f"end {end!r}: expected one of {', '.join(ENDS)}")
        self.end = end
        self.t = {k: _pick(k, v, end) for k, v in table.items()}

    def __getitem__(self, key: str) -> float:
        try:
            return self.t[key]
        except KeyError:
            raise TimelineError(f"the target's [timeline] table has no {key!r}") from None

    def issue(self) -> float:
        return self["issue_cycles"]

    # The per-instruction figures, in cycles: the timeline prices the twin's traced instructions with them
    # (:meth:`duration`) and the emitted-code model its ops (:meth:`tilegen.backends.ascendc.ops.Op.cycles`).

    def vector_cycles(self, repeats: int, per: str = "vector_repeat_cycles") -> float:
        """A vector instruction of ``repeats`` repeats (256 B each, or 8 elements of a Brcb) at ``per``
        cycles a repeat (the table's key), after the startup."""
        return self["vector_startup_cycles"] + repeats * self[per]

    def burst_bytes(self, nbytes: float, runs: int) -> float:
        """The bytes a GM copy of ``nbytes`` in ``runs`` contiguous GM runs (rows) moves on the bus: each
        run is cut into ``gm_burst_bytes`` bursts, the rest rounded up to the next burst length from
        ``gm_burst_granule_bytes`` doubling (asc-devkit 硬件约束/NPU架构版本2201.md: copies are split into
        128/256/512-B bursts, a partial one rounded up), and a run shorter than a burst costs at least
        ``gm_min_run_bytes`` (``runs`` 0: the bytes as full bursts)."""
        if runs <= 0 or nbytes <= 0:
            return float(nbytes)
        full, gran, least = self["gm_burst_bytes"], self["gm_burst_granule_bytes"], self["gm_min_run_bytes"]
        row = nbytes / runs
        whole = math.floor(row / full)
        rest = row - whole * full
        tail = 0.0
        if rest > 0:
            tail = gran
            while tail < rest and tail < full:
                tail *= 2
        per = whole * full + tail
        if row < full:
            per = max(per, least)
        return runs * per

    def copy_phases(self, nbytes: float, runs: int, write: bool, l2: bool, atomic: bool = False, shared: bool = False) -> tuple[float, float]:
        """A GM copy by DMA (DataCopy, DataCopyPad, ND -> NZ) as (lead, data) cycles: the first-byte
        latency of HBM or L2 (``l2``), then the data phase on the AI Core's read port (MTE2) or write port
        (``write``: MTE3) at its rate, over :meth:`burst_bytes`; an ``atomic`` store's data phase costs
        ``atomic_rmw_factor`` times (the read-modify-write at the L2), and one to bytes another block of
        the launch also accesses (``shared``) ``same_address_factor`` times."""
        lat = self["gm_l2_latency_cycles"] if l2 else self["gm_hbm_latency_cycles"]
        if write:
            rate = self["mte3_bytes_per_cycle"]
        else:
            rate = self["mte2_l2_bytes_per_cycle"] if l2 else self["mte2_hbm_bytes_per_cycle"]
        return lat, self.burst_bytes(nbytes, runs) / rate * self._factor(atomic, shared)

    def copy_cycles(self, nbytes: float, write: bool, l2: bool, runs: int = 0, atomic: bool = False, sharers: int = 1) -> float:
        """A GM copy of ``nbytes`` on its pipe: :meth:`copy_phases` summed (``runs`` = 0: the bytes as one
        run of full bursts), its data phase at least ``sharers`` copies' time on the AI Core's port
        (:meth:`port_cycles`; the emitted-code model's AIV copies: 2, the other AIV's mirror copy runs at
        the same time)."""
        lead, data = self.copy_phases(nbytes, runs, write, l2, atomic)
        return lead + max(data, sharers * self.port_cycles(nbytes, runs, write, atomic))

    def fixpipe_phases(self, nbytes: float, runs: int, l2: bool, atomic: bool = False, shared: bool = False) -> tuple[float, float, float]:
        """A Fixpipe of ``nbytes`` from L0C into GM (HBM or L2) as (lead, data, tail) cycles: its start-up
        on the FIX pipe, the data phase on the write port at the Fixpipe rate (bursts, atomics and shared
        bytes as :meth:`copy_phases`), then the write latency, which the next Fixpipe overlaps (the pipe
        is free after the data phase)."""
        lat = self["gm_l2_latency_cycles"] if l2 else self["gm_hbm_latency_cycles"]
        rate = self["fix_l2_bytes_per_cycle"] if l2 else self["fix_hbm_bytes_per_cycle"]
        return self["fix_startup_cycles"], self.burst_bytes(nbytes, runs) / rate * self._factor(atomic, shared), lat

    def fixpipe_cycles(self, nbytes: float, l2: bool, before: float = 0.0, runs: int = 0, atomic: bool = False) -> float:
        """A Fixpipe of ``nbytes`` from L0C into GM (HBM or L2) alone, from its start-up to the write's
        landing, ``before`` cycles added first (the figures summed in this order)."""
        return before + sum(self.fixpipe_phases(nbytes, runs, l2, atomic))

    def port_cycles(self, nbytes: float, runs: int, write: bool, atomic: bool = False, shared: bool = False) -> float:
        """The cycles a GM copy holds its AI Core's read or write port (``write``), which the AIC's and
        both AIVs' copies share: its bus bytes (:meth:`burst_bytes`, atomic and shared factors as
        :meth:`copy_phases`) at ``ai_core_write_bytes_per_cycle`` or ``ai_core_read_bytes_per_cycle``."""
        rate = self["ai_core_write_bytes_per_cycle"] if write else self["ai_core_read_bytes_per_cycle"]
        return self.burst_bytes(nbytes, runs) * self._factor(atomic, shared) / rate

    def _factor(self, atomic: bool, shared: bool) -> float:
        return (self["atomic_rmw_factor"] if atomic else 1.0) * (self["same_address_factor"] if shared else 1.0)

    def load_data_cycles(self, fractals: int, l0b: bool) -> float:
        """A LoadData of ``fractals`` 512 B fractals from L1 into L0A or L0B (``l0b``)."""
        rate = self["l0b_bytes_per_cycle"] if l0b else self["l0a_bytes_per_cycle"]
        return self["mte1_startup_cycles"] + fractals * 512 / rate

    def mmad_cycles(self, blocks: int, before: float = 0.0) -> float:
        """An Mmad of ``blocks`` 16 x 16 x 16 MAC blocks, ``before`` cycles added first."""
        return before + self["mmad_startup_cycles"] + blocks / self["mmad_fractals_per_cycle"]

    def vector_repeat_key(self, kind: str) -> str:
        """The table key of a vector instruction's per-repeat cost."""
        if kind in ("Exp", "Ln"):
            return "vector_exp_repeat_cycles"
        if kind in ("ReduceRepeatMax", "ReduceRepeatSum", "WholeReduceMax", "WholeReduceSum", "ReduceMax", "ReduceSum"):
            return "vector_reduce_repeat_cycles"  # the count forms are composed of WholeReduce passes
        if kind == "Brcb":
            return "vector_brcb_repeat_cycles"
        return "vector_repeat_cycles"

    def duration(self, ins: Instr) -> float:
        """Cycles ``ins`` occupies its pipe alone (flags and barriers: 0; a GM copy: its phases summed, no
        port contention; a vector instruction: no bank conflict)."""
        k, c = ins.kind, self
        if k in ("SetFlag", "WaitFlag", "PipeBarrier", "CrossCoreSetFlag", "CrossCoreWaitFlag", "SetAtomic"):
            return 0.0
        if k == "GetValue":
            return c["scalar_ub_read_cycles"]
        if k == "SetValue":
            return c["scalar_ub_write_cycles"]
        if ins.pipe == "V":
            return c.vector_cycles(ins.a, c.vector_repeat_key(k)) + (c["vector_reduce_cycles"] if k in ("ReduceMax", "ReduceSum") else 0.0)
        if k in ("DataCopyPad", "DataCopy", "DataCopyNd2Nz"):
            return sum(c.copy_phases(ins.a, gm_runs(ins), ins.pipe != "MTE2", ins.c == 1))
        if k == "Fixpipe":
            return sum(c.fixpipe_phases(ins.a, gm_runs(ins), ins.c == 1))
        if k == "LoadData":
            return c.load_data_cycles(ins.a, ins.b == 1)
        if k == "Fill":
            rate = c["l1_fill_bytes_per_cycle"] if ins.pipe == "MTE2" else c["l0a_bytes_per_cycle"]
            return c["mte1_startup_cycles"] + ins.a / rate
        if k in ("Mmad2", "Mmad4"):
            blocks = math.ceil(ins.a / 16) * math.ceil(ins.b / 16) * math.ceil(ins.c / 16)
            if k == "Mmad4":
                blocks *= 4  # fp32 cube throughput is a quarter of fp16 (peak.cube_fp32)
            return c.mmad_cycles(blocks)
        raise TimelineError(f"no cost for the instruction {k} on pipe {ins.pipe} (add it to the [timeline] table)")


def gm_runs(ins: Instr) -> int:
    """The contiguous GM runs of a traced copy: one when its recorded GM range is exactly its bytes
    (rows back to back), else the trace's count (``b``: its rows, blockCount or mSize)."""
    gm = [hi - lo for sp, lo, hi in ins.writes + ins.reads if sp == "G"]
    return 1 if gm and gm[0] == ins.a else ins.b


def _pick(key: str, fig, end: str) -> float:
    if not hasattr(fig, "value"):
        return float(fig)
    if end == "central" or fig.low is None or fig.high is None:
        return float(fig.value)
    rate = key.endswith("_per_cycle")
    return float(fig.high if (end == "fast") == rate else fig.low)


UB_ROW_BYTES = 32  # a bank row, a repeat's data block (asc-devkit 避免bank冲突（NPU架构版本2201）.md)
UB_BANK_GROUPS = 16  # bank groups of the 192 KB UB, three 4 KB banks each (ibid.)
UB_BANK_SPAN = 65536  # the UB's three 64 KB thirds: bank = 16 * third + group (ibid., its address examples)


def ub_bank(addr: int) -> tuple[int, int]:
    """(bank group, bank) of a UB byte address on the 910B: 32-byte rows dealt round-robin over the 16
    bank groups, each 64 KB third of the UB its own bank of each group (the guide's examples: 0x10000 in
    bank 16, 0x10020 and 0x10E20 in bank 17, 0x20020 in bank 33; banks 15, 31, 47 form group 15)."""
    group = (addr // UB_ROW_BYTES) % UB_BANK_GROUPS
    return group, UB_BANK_GROUPS * (addr // UB_BANK_SPAN) + group


def _banks(lo: int, hi: int) -> set[int]:
    """The banks of one repeat of a UB operand recorded as [lo, hi): its first consecutive 32-byte
    data blocks, 8 or as many as the range holds (a Brcb source, a reduction's results: fewer)."""
    return {ub_bank(lo + k * UB_ROW_BYTES)[1] for k in range(max(1, min(8, -(-(hi - lo) // UB_ROW_BYTES))))}


def bank_conflicts(ins: Instr) -> tuple[int, int]:
    """(read-read, read-write) bank conflicts of each repeat of a vector instruction, by the rules and
    measurements of asc-devkit for the 910B (guide 避免bank冲突（NPU架构版本2201）.md; sample
    examples/01_simd_cpp_api/05_best_practices/04_memory_access/bank_conflict_ub, README: the vector
    unit reads or writes one 32-byte row of each bank group per cycle):

    - read-read: sources starting in one bank group (the sample's scenarios 2 and 3, 2.0 cycles a
      repeat measured; the guide: 0x10020 and 0x20020 conflict, 0x10020 and 0x10000 do not):
      ``max(sources starting in one group) - 1``;
    - read-write: the destination's blocks share a bank with a source's while the two start in
      different banks (scenario 5: 0x4020 written, 0 read; 1.77 cycles a repeat measured): 1. Starting
      in the same bank, or overlapping exactly (an in-place operation), the hardware delays the write
      by a repeat and nothing conflicts (scenarios 4 and 6; the guide's table 1 calls 0x10020 / 0x10E20 a
      conflict, the sample's measurement of the same case does not, and the measurement is taken).

    Each operand is read from the start of its recorded UB range with consecutive data blocks (block
    stride 1: the layout the emitted kernels use; 8 a repeat, or as many as a shorter range holds), so no
    operand conflicts with itself; only sources of a full repeat (256 B or more) count for read-read.
    Strided operands and repeats after the first are not examined."""
    reads = [(lo, hi) for sp, lo, hi in ins.reads if sp == "U"]
    writes = [(lo, hi) for sp, lo, hi in ins.writes if sp == "U"]
    per: dict[int, int] = defaultdict(int)
    for lo, hi in reads:
        if hi - lo >= 8 * UB_ROW_BYTES:  # a full repeat's source (not a mask, a scalar or a Brcb's 8 values)
            per[ub_bank(lo)[0]] += 1
    rw = any(ub_bank(w[0])[1] != ub_bank(r[0])[1] and _banks(*w) & _banks(*r) for w in writes for r in reads)
    return max(per.values(), default=1) - 1, int(rw)


# ---------------------------------------------------------------------------------------------------
# the schedule of one AI Core


@dataclass
class Item:
    """One scheduled instruction (or the issue slot of one on S): times in cycles."""

    core: str
    pipe: str
    kind: str
    start: float
    end: float
    pred: int  # index of the item whose end bound the start (-1: none)
    work: bool  # counts as busy time of its pipe
    free: float | None = None  # the pipe is free from here (None: at end); a Fixpipe's write lands at end

    @property
    def busy_end(self) -> float:
        """Where the instruction stops occupying its pipe."""
        return self.end if self.free is None else self.free


@dataclass
class BlockSchedule:
    """The schedule of one AI Core: every item, the end time (cycles) and per-core, per-pipe busy cycles."""

    items: list[Item]
    end: float
    busy: dict[tuple[str, str], float]
    gm_bytes: float = 0.0  # bytes the block's GM copies move through the L2 (bursts rounded, atomics twice)

    def critical_path(self) -> list[int]:
        """Item indices of the chain of binding predecessors ending at the last item to finish."""
        if not self.items:
            return []
        k = max(range(len(self.items)), key=lambda n: self.items[n].end)
        path = []
        while k >= 0:
            path.append(k)
            k = self.items[k].pred
        return path[::-1]

    def critical_share(self) -> dict[str, float]:
        """Fraction of the end time that the critical path spends on each pipe's work, on flag and
        hand-off latency (``latency``) and on scalar issue (``S``)."""
        share: dict[str, float] = defaultdict(float)
        prev_end = 0.0
        for k in self.critical_path():
            it = self.items[k]
            if it.start > prev_end:
                share["latency"] += it.start - prev_end
            if it.end > max(it.start, prev_end):
                t0 = max(it.start, prev_end)
                if not it.work:
                    share["latency"] += it.end - t0
                else:  # a Fixpipe's write landing after its pipe is free counts as latency
                    held = max(it.busy_end - t0, 0.0)
                    share[it.pipe] += held
                    if it.end - t0 - held > 0:
                        share["latency"] += it.end - t0 - held
            prev_end = max(prev_end, it.end)
        total = self.end or 1.0
        return {k: v / total for k, v in sorted(share.items(), key=lambda kv: -kv[1])}


class _Port:
    """A copy port of one AI Core (its GM reads, or its GM writes), shared by the AIC and both AIVs: each
    copy holds it for its share (its bytes at the port's rate), one at a time, and runs its data phase at
    its engine's rate from the start of that share, so copies overlap as far as the port's rate exceeds
    their engines'. A copy takes the earliest gap at or after the cycle it is ready (the cores of a block
    are scheduled one after another, not in time order, so a copy scheduled later may fill an earlier
    gap)."""

    def __init__(self):
        self.starts: list[float] = []  # disjoint busy intervals, sorted
        self.ends: list[float] = []

    def reserve(self, t: float, d: float) -> float:
        """Book ``d`` cycles from the earliest free gap at or after ``t``; returns the start."""
        if d <= 0:
            return t
        i = bisect.bisect_right(self.ends, t)
        while i < len(self.starts) and t + d > self.starts[i]:
            t = max(t, self.ends[i])
            i += 1
        if i > 0 and self.ends[i - 1] == t:  # joins the interval before
            self.ends[i - 1] = t + d
            if i < len(self.starts) and self.starts[i] == t + d:
                self.ends[i - 1] = self.ends.pop(i)
                self.starts.pop(i)
        elif i < len(self.starts) and self.starts[i] == t + d:
            self.starts[i] = t
        else:
            self.starts.insert(i, t)
            self.ends.insert(i, t + d)
        return t


class _Core:
    def __init__(self, name: str, trace: list[Instr]):
        self.name = name
        self.trace = trace
        self.pos = 0
        self.t_s = 0.0  # the scalar unit's clock
        self.last_s = -1  # item of the last S step
        self.ready = {p: 0.0 for p in PIPES}  # each pipe is free from (cycles)
        self.done = {p: 0.0 for p in PIPES}  # each pipe's instructions so far have completed by (a Fixpipe's write lands after its pipe is free)
        self.done_item = {p: -1 for p in PIPES}  # the item that completes last
        self.last = {p: -1 for p in PIPES}
        self.atomic = False  # SetAtomic: the GM stores that follow accumulate
        self.events: dict[tuple, deque] = defaultdict(deque)  # (event, id) -> (time, item, source pipe's clock)
        self.access: dict[str, list] = defaultdict(list)  # space -> [(lo, hi, write, start, end, pipe, item)]
        # happens-before: clock[p][q] = the last instruction of pipe q that pipe p is ordered after by
        # SetFlag/WaitFlag chains (clock[p][p]: p's instructions so far); on-chip accesses not yet ordered
        # before every pipe that touches on-chip memory here: space -> [(lo, hi, write, pipe, op, item)]
        self.clock = [[0] * len(PIPES) for _ in PIPES]
        self.open: dict[str, list] = defaultdict(list)
        self.local_pipes = sorted({_PIPE[i.pipe] for i in trace if i.pipe in _PIPE and i.pipe != "S"
                                   and any(r[0] in LOCAL_SPACES for r in i.writes + i.reads)})
        self.since_prune = 0


def simulate_block(traces: dict[str, list[Instr]], costs: Costs) -> BlockSchedule:
    """The schedule of one AI Core's traces (``AIC``, ``AIV0``, ``AIV1``; any may be missing).

    Raises:
        TimelineError: a race (names both instructions), a deadlock, or an instruction without a cost.
    """
    cores = {n: _Core(n, t) for n, t in traces.items()}
    items: list[Item] = []
    busy: dict[tuple[str, str], float] = defaultdict(float)
    ports = {"read": _Port(), "write": _Port()}
    gm_bytes = [0.0]
    xq: dict[tuple, deque] = defaultdict(deque)  # (dest core, flag[, from sub]) -> (time, item)
    issue = costs.issue()
    flag_lat = costs["flag_cycles"]
    x_lat = costs["cross_core_flag_cycles"]

    def add(core: _Core, pipe: str, kind: str, start: float, end: float, pred: int, work: bool, occupied: float | None = None) -> int:
        items.append(Item(core.name, pipe, kind, start, end, pred, work, None if occupied is None or occupied == end else occupied))
        if work:
            busy[(core.name, pipe)] += (end if occupied is None else occupied) - start
        return len(items) - 1

    def gm_copy(core: _Core, ins: Instr, start: float) -> tuple[float, float]:
        """(pipe free, completed) of a GM copy started at ``start``: its data phase at its engine's rate,
        begun when the AI Core's read or write port has room for its share (:meth:`Costs.port_cycles`)."""
        l2 = ins.c == 1
        write = ins.kind == "Fixpipe" or ins.pipe != "MTE2"
        atomic = core.atomic and write
        runs = gm_runs(ins)
        if ins.kind == "Fixpipe":
            lead, data, tail = costs.fixpipe_phases(ins.a, runs, l2, atomic, ins.shared)
        else:
            (lead, data), tail = costs.copy_phases(ins.a, runs, write, l2, atomic, ins.shared), 0.0
        gm_bytes[0] += costs.burst_bytes(ins.a, runs) * (2 if atomic else 1)
        held = costs.port_cycles(ins.a, runs, write, atomic, ins.shared)
        d0 = ports["write" if write else "read"].reserve(start + lead, held)
        return d0 + max(data, held), d0 + max(data, held) + tail

    def frontier(core: _Core) -> float:
        # every later instruction of this core is issued, so starts, no earlier than the scalar clock
        return core.t_s

    def check(core: _Core, ins: Instr, pipe: str, start: float, end: float, idx: int) -> None:
        for writes, ranges in ((True, ins.writes), (False, ins.reads)):
            for space, lo, hi in ranges:
                lst = core.access[space]
                for (plo, phi, pw, ps, pe, pp, pk) in lst:
                    if pp != pipe and (pw or writes) and plo < hi and lo < phi and pe > start:
                        a, b = items[pk], items[idx]
                        raise TimelineError(
                            f"race on {core.name}: {b.kind} on {pipe} ({'writes' if writes else 'reads'} {space} [{lo}, {hi})) starts at "
                            f"cycle {start:.0f} before {a.kind} on {pp} ({'writing' if pw else 'reading'} [{plo}, {phi})) ends at "
                            f"{pe:.0f}: a flag between them is missing"
                        )
                lst.append((lo, hi, writes, start, end, pipe, idx))
        f = frontier(core)
        for space in {r[0] for r in ins.writes + ins.reads}:
            core.access[space] = [e for e in core.access[space] if e[4] > f]

    def ordered(core: _Core, ins: Instr, pipe: str, idx: int) -> None:
        # the twins' rule (tilegen/twin/include/twin/order.h): an on-chip access must be ordered after
        # the last write of its bytes by another pipe, a write after their last read by another pipe,
        # by a chain of flags; where the two happen to fall in this schedule does not matter
        p = _PIPE[pipe]
        clk = core.clock[p]
        clk[p] += 1
        op = clk[p]
        for writes, ranges in ((False, ins.reads), (True, ins.writes)):
            for space, lo, hi in ranges:
                if space not in LOCAL_SPACES:
                    continue
                lst = core.open[space]
                for (plo, phi, pw, pp, pop, pk) in lst:
                    if pp != p and (pw or writes) and plo < hi and lo < phi and pop > clk[pp]:
                        a, b = items[pk], items[idx]
                        raise TimelineError(
                            f"race on {core.name}: {b.kind} on {pipe} ({'writes' if writes else 'reads'} {space} [{lo}, {hi})) may start "
                            f"before {a.kind} on {PIPES[pp]} ({'writing' if pw else 'reading'} [{plo}, {phi})) ends: no SetFlag/WaitFlag "
                            f"chain orders them (a flag between them is missing)"
                        )
                lst.append((lo, hi, writes, p, op, idx))
        core.since_prune += 1
        if core.since_prune >= 64:  # forget the accesses every other on-chip pipe is ordered after
            core.since_prune = 0
            seen = [min((core.clock[r][q] for r in core.local_pipes if r != q), default=math.inf) for q in range(len(PIPES))]
            for space, lst in core.open.items():
                core.open[space] = [e for e in lst if e[4] > seen[e[3]]]

    def set_flag(core: _Core, pipe: str) -> tuple:
        return tuple(core.clock[_PIPE[pipe]])

    def wait_flag(core: _Core, pipe: str, snap: tuple) -> None:
        d = _PIPE[pipe]
        clk = core.clock[d]
        for q, v in enumerate(snap):
            if q != d and v > clk[q]:
                clk[q] = v

    def step(core: _Core) -> bool:
        """Process the core's next record; False when it must wait for another core."""
        ins = core.trace[core.pos]
        p = ins.pipe
        if ins.kind == "CrossCoreWaitFlag":
            if core.name == "AIC":
                # c = 0: mode 2, a set from each AIV; c = 1 + sub: the one AIV (a matmul-server message, whose
                # hand-off through GM the real-API twin records as a flag: tilegen/twin/cce/trace.h)
                subs = (0, 1) if ins.c == 0 else (ins.c - 1,)
                have = [xq[("AIC", ins.b, k)] for k in subs if f"AIV{k}" in cores]
                if any(not q for q in have):
                    return False
                got = [q.popleft() for q in have]
            else:
                q = xq[(core.name, ins.b)]
                if not q:
                    return False
                got = [q.popleft()]
            t_set, src = max(got)
            start = core.t_s
            end = max(start + issue, t_set)
            pred = src if t_set > start + issue else core.last_s
            core.last_s = add(core, "S", ins.kind, start, end, pred, False)
            core.t_s = end
            core.pos += 1
            return True
        # the scalar unit issues the instruction
        s0 = core.t_s
        if p == "S":
            start, pred = s0, core.last_s
            if ins.kind == "WaitFlag":
                t_set, src, snap = core.events[(ins.a, ins.b)].popleft() if core.events[(ins.a, ins.b)] else (None, None, None)
                if t_set is None:
                    raise TimelineError(f"{core.name}: WaitFlag on event {ins.a} id {ins.b} that nothing set")
                wait_flag(core, "S", snap)
                end = max(start + issue, t_set + flag_lat)
                if t_set + flag_lat > start + issue:
                    pred = src
                core.last_s = add(core, "S", ins.kind, start, end, pred, False)
            elif ins.kind == "SetFlag":
                end = start + issue
                core.last_s = add(core, "S", ins.kind, start, end, pred, False)
                core.events[(ins.a, ins.b)].append((end, core.last_s, set_flag(core, "S")))
            else:
                if ins.kind == "SetAtomic":
                    core.atomic = ins.a != 0
                end = start + issue + costs.duration(ins)
                core.last_s = add(core, "S", ins.kind, start, end, pred, True)
                check(core, ins, "S", start + issue, end, core.last_s)
            core.t_s = end
            core.pos += 1
            return True
        if p == "ALL" and ins.kind == "PipeBarrier":
            # PipeBarrier<PIPE_ALL> (PipeBarrier(ISASI).md: waits for every earlier instruction of every pipe): the
            # scalar unit and every pipe continue from the end of the core's last instruction
            t = max([s0 + issue, *core.ready.values(), *core.done.values()])
            core.last_s = add(core, "S", ins.kind, s0, t, core.last_s, False)
            core.t_s = t
            for q in core.ready:
                core.ready[q] = core.done[q] = t
            n = len(PIPES)
            core.clock = [[core.clock[r][r] if q != r else core.clock[q][q] for r in range(n)] for q in range(n)]
            core.pos += 1
            return True
        if p not in core.ready:
            raise TimelineError(f"{core.name}: unknown pipe {p!r} in the trace")
        issued = s0 + issue
        core.last_s = add(core, "S", "issue", s0, issued, core.last_s, True)
        core.t_s = issued
        start = max(issued, core.ready[p])
        pred = core.last[p] if core.ready[p] >= issued else core.last_s
        if ins.kind == "SetFlag":  # fires when everything issued to the pipe before has completed
            if core.done[p] > start:
                start, pred = core.done[p], core.done_item[p]
            idx = add(core, p, ins.kind, start, start, pred, False)
            core.events[(ins.a, ins.b)].append((start, idx, set_flag(core, p)))
        elif ins.kind == "WaitFlag":
            q = core.events[(ins.a, ins.b)]
            if not q:
                raise TimelineError(f"{core.name}: WaitFlag on event {ins.a} id {ins.b} that nothing set")
            t_set, src, snap = q.popleft()
            wait_flag(core, p, snap)
            end = max(start, t_set + flag_lat)
            if t_set + flag_lat > start:
                pred = src
            idx = add(core, p, ins.kind, start, end, pred, False)
            core.ready[p] = end
        elif ins.kind == "PipeBarrier":  # the pipe's earlier instructions complete first
            if core.done[p] > start:
                start, pred = core.done[p], core.done_item[p]
            idx = add(core, p, ins.kind, start, start, pred, False)
            core.ready[p] = start
        elif ins.kind == "CrossCoreSetFlag":
            if core.done[p] > start:
                start, pred = core.done[p], core.done_item[p]
            idx = add(core, p, ins.kind, start, start, pred, False)
            t = start + x_lat
            if core.name == "AIC":
                for n in ("AIV0", "AIV1"):
                    if n in cores:
                        xq[(n, ins.b)].append((t, idx))
            else:
                xq[("AIC", ins.b, int(core.name[-1]))].append((t, idx))
        else:
            if ins.kind in _GM_COPIES:
                free, end = gm_copy(core, ins, start)
            else:
                free = end = start + costs.duration(ins)
                if p == "V":
                    rr, rw = bank_conflicts(ins)
                    if rr or rw:
                        free = end = end + ins.a * (rr * costs["ub_read_conflict_cycles"] + rw * costs["ub_rw_conflict_cycles"])
            idx = add(core, p, ins.kind, start, end, pred, True, free)
            core.ready[p] = free
            if end > core.done[p]:
                core.done[p], core.done_item[p] = end, idx
            ordered(core, ins, p, idx)
            check(core, ins, p, start, end, idx)
        core.last[p] = idx
        core.pos += 1
        return True

    live = [c for c in cores.values() if c.trace]
    while live:
        progressed = False
        for core in live:
            while core.pos < len(core.trace) and step(core):
                progressed = True
        live = [c for c in live if c.pos < len(c.trace)]
        if live and not progressed:
            waits = ", ".join(f"{c.name} at CrossCoreWaitFlag({c.trace[c.pos].b})" for c in live)
            raise TimelineError(f"deadlock: every core left waits for a cross-core flag nothing sets ({waits})")
    end = max((it.end for it in items), default=0.0)
    return BlockSchedule(items, end, dict(busy), gm_bytes[0])


# ---------------------------------------------------------------------------------------------------
# a spec's program on the twin, scheduled

def _floored(end: float, floor_s: float, clock: float, gm_bytes: float, costs: Costs) -> tuple[float, str]:
    """A launch's cycles raised to the chip's HBM floor (:func:`tilegen.models.cost.hbm_floor_s`) and to its
    L2 floor (``gm_bytes``, every GM byte the launch's copies move, at ``chip_l2_bytes_per_cycle``: each
    GM access passes the L2, the hand-off workspace's and the re-read tensors' as hits, HBM's as misses),
    and a note for its form when one binds."""
    l2 = gm_bytes / costs["chip_l2_bytes_per_cycle"]
    if floor_s * clock > max(end, l2):
        return floor_s * clock, f"; bound by the chip's HBM bandwidth ({floor_s * 1e6:.2f} us > {end / clock * 1e6:.2f} us scheduled)"
    if l2 > end:
        return l2, f"; bound by the chip's L2 bandwidth ({gm_bytes / 1e6:.1f} MB through the L2: {l2 / clock * 1e6:.2f} us > {end / clock * 1e6:.2f} us scheduled)"
    return end, ""


_GM_COPIES = ("DataCopyPad", "DataCopy", "DataCopyNd2Nz", "Fixpipe")


def l2_levels(blocks: dict[int, dict[str, list[Instr]]], l2: bool = True) -> dict[int, dict[str, list[Instr]]]:
    """The traces of one launch's blocks with every GM copy of an HBM tensor (level 0) that re-touches
    a region of the launch made L2-resident (level 1, priced at the L2 rates): a byte range that
    another block also copies (the instances run at about the same time and share the L2), or that the
    same block copied before. The first touch within a block that no other block shares stays HBM.
    Ranges are compared exactly (a tile copy's first and last byte, as the trace records it), so two
    strided tiles whose spans interleave are not mistaken for one. This reads the byte ranges of the
    trace alone; the emitted-code model finds its L2 accesses from the IR
    (:func:`tilegen.models.analysis.l2_reuse`, whose capacity check gates both: ``l2`` False when the
    re-accessed tensors do not fit, and every copy keeps its level). The two meet in
    tests/test_timeline.py only through the programs' times (model within ±20% of the timeline, the
    cost-only form within 2% of the whole launch).

    Either way a GM copy whose byte range another block also copies is marked ``shared`` (same-address
    accesses from several cores, priced by ``same_address_factor``)."""
    users: dict[tuple, set] = defaultdict(set)
    for b, cores in blocks.items():
        for ins_list in cores.values():
            for ins in ins_list:
                if ins.kind in _GM_COPIES:
                    for r in ins.reads + ins.writes:
                        if r[0] == "G":
                            users[r].add(b)
    out: dict[int, dict[str, list[Instr]]] = {}
    for b, cores in blocks.items():
        seen: set = set()
        new_cores = {}
        for core in sorted(cores):
            lst = []
            for ins in cores[core]:
                if ins.kind in _GM_COPIES:
                    gm = [r for r in ins.reads + ins.writes if r[0] == "G"]
                    shared = any(len(users[r]) > 1 for r in gm)
                    level = 1 if l2 and ins.c == 0 and gm and all(len(users[r]) > 1 or r in seen for r in gm) else ins.c
                    hbm = ins.c == 0
                    if shared or level != ins.c:
                        ins = dataclasses.replace(ins, c=level, shared=shared)
                    if hbm:
                        seen.update(gm)
                lst.append(ins)
            new_cores[core] = lst
        out[b] = new_cores
    return out


EXACT_RECORDS = 40_000  # programs whose trace is estimated at most this long are scheduled whole
RECORDS_PER_PAIR = 800  # trace records per visited tile pair (both sides), for that estimate
SAMPLES = 5  # program instances scheduled per kernel in the cost-only form


@dataclass
class KernelTimeline:
    """One kernel of a simulated program: time (s), busy fraction per ``core.pipe`` (``AIC.M``,
    ``AIV.V``, ...: busy cycles over cores x time), the critical-path share per pipe of the
    representative block, and how the time was obtained."""

    name: str
    programs: int
    time_s: float
    busy: dict[str, float]
    critical: dict[str, float]
    form: str  # "whole launch" or "cost-only: ..."
    samples: list[int] = field(default_factory=list)
    fit_residual: float = 0.0
    block: BlockSchedule | None = None  # the representative block (for the Gantt chart)


@dataclass
class ProgramTimeline:
    """A simulated program: its kernels in launch order, total time (s, launch overhead included)
    and the matmul utilisation against the target's cube peak."""

    label: str
    kernels: list[KernelTimeline]
    time_s: float
    matmul_flops: int
    utilization: float
    clock_hz: float
    launch_s: float
    launches: int = 0  # launches of the program (a launch may run several kernels: @sync_all)
    sync_alls: int = 0  # SyncAll barriers between the kernels of one launch
    overhead_s: float = 0.0  # what the launches and barriers add to time_s

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "time_s": self.time_s,
            "matmul_flops": self.matmul_flops,
            "utilization": self.utilization,
            "launch_s_per_kernel": self.launch_s,
            "launches": self.launches,
            "sync_alls": self.sync_alls,
            "overhead_s": self.overhead_s,
            "kernels": [
                {
                    "name": k.name,
                    "programs": k.programs,
                    "time_s": k.time_s,
                    "busy_fraction": k.busy,
                    "critical_path_share": k.critical,
                    "form": k.form,
                    "sampled_instances": k.samples,
                    "fit_residual": k.fit_residual,
                }
                for k in self.kernels
            ],
        }


def _busy_by_type(busy: dict[tuple[str, str], float]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for (core, pipe), v in busy.items():
        out[f"{'AIC' if core == 'AIC' else 'AIV'}.{pipe}"] += v
    return dict(out)


def _normalise_busy(total: dict[str, float], cores: int, cycles: float) -> dict[str, float]:
    """Busy cycles summed over a launch -> fraction of (cores of that type) x time."""
    if cycles <= 0:
        return {}
    return {k: v / ((2 if k.startswith("AIV") else 1) * cores * cycles) for k, v in sorted(total.items())}


def deal(per_tile: np.ndarray, programs: int, cores: int, order: str = "cyclic") -> float:
    """The slowest core's total when ``programs`` instances, instance ``pid`` costing
    ``per_tile[pid % len(per_tile)]`` (the kernel's fastest grid axis is its tile index), are dealt
    over ``cores`` as the emitted kernels deal them (``order``: the kernel's @deal): ``cyclic``,
    core c runs pid = c, c + cores, ...; ``snake``, in round r = pid // cores core c runs
    r·cores + c when r is even, r·cores + cores − 1 − c when r is odd."""
    pid = np.arange(programs)
    core = pid % cores
    if order == "snake":
        core = np.where((pid // cores) % 2 == 0, core, cores - 1 - core)
    return float(np.bincount(core, weights=np.asarray(per_tile, dtype=float)[pid % len(per_tile)], minlength=cores).max())


def tile_counts(program, kernel, spec) -> tuple[int, np.ndarray, np.ndarray]:
    """(tiles, pairs[t], cut[t]): for each value t of the kernel's last grid axis (a tile index), the
    (Q tile, K/V tile) pairs one program instance visits (its inner tile loop's trip count from the
    IR's own bounds, times the query heads of a KV head) and how many of them the mask cuts (DESIGN
    §3) or pads (a tile past Sq or Sk), as the generated MaskTile decides it. An instance without an
    inner tile loop counts one pair, none cut."""
    from tilegen.core.exprs import evaluate
    from tilegen.core.ir import Loop, grid_loops
    from tilegen.core.spec import visible_band

    env = {str(k): v for k, v in program.env}
    grid = grid_loops(kernel)
    last = grid[-1]
    tiles = int(evaluate(last.stop - last.start, env))
    t = np.arange(tiles, dtype=np.int64)
    env = dict(env, **{str(l.var): 0 for l in grid[:-1]}, **{str(last.var): t})
    heads, inner = 1, None
    body = last.body
    while True:
        loops = [s for s in body if isinstance(s, Loop)]
        if not loops:
            break
        loop = loops[0]
        if loop.role == "head":
            heads *= int(evaluate(loop.stop - loop.start, dict(env, **{str(loop.var): 0})))
            env[str(loop.var)] = 0
            body = loop.body
            continue
        inner = loop
        break
    if inner is None:
        return tiles, np.ones(tiles, dtype=np.int64), np.zeros(tiles, dtype=np.int64)
    start = np.broadcast_to(np.asarray(evaluate(inner.start, env), dtype=np.int64), t.shape)
    stop = np.broadcast_to(np.asarray(evaluate(inner.stop, env), dtype=np.int64), t.shape)
    br, bc = env["Br"], env["Bc"]
    sq, sk = spec.seq_q, spec.seq_k
    dl, dh = visible_band(sq, sk, spec.window, spec.alignment)
    nq, nk = -(-sq // br), -(-sk // bc)
    r0 = np.arange(nq) * br
    c0 = np.arange(nk) * bc
    # [i, j]: not cut, as MaskTile decides it: no padding row or column, every pair visible
    full = (c0[None, :] - (r0[:, None] + br - 1) >= dl) & ((c0[None, :] + bc - 1) - r0[:, None] <= dh)
    full &= (r0[:, None] + br <= sq) & (c0[None, :] + bc <= sk)
    if last.role == "q_tile":  # t = i, the inner loop walks j
        per = full
    else:  # t = j, the inner loop walks i
        per = full.T
    pairs = np.maximum(stop - start, 0)
    cum = np.concatenate([np.zeros((per.shape[0], 1), dtype=np.int64), np.cumsum(per, axis=1)], axis=1)
    lo = np.clip(start, 0, per.shape[1])
    hi = np.clip(stop, 0, per.shape[1])
    nfull = cum[t, np.maximum(hi, lo)] - cum[t, lo]
    return tiles, pairs * heads, (pairs - nfull) * heads


def _twin_inputs(spec, program: str, seed: int = 0) -> dict[str, np.ndarray]:
    from tilegen.core import dtypes

    rng = np.random.default_rng(seed)
    shapes = spec.logical_shapes
    npdt = dtypes.numpy_dtype(spec.dtype)
    names = ("Q", "K", "V") if program == "fwd" else ("Q", "K", "V", "O", "dO")
    out = {n: (0.5 * rng.standard_normal(shapes[n])).astype(npdt) for n in names}
    if program == "bwd":
        out["L"] = (np.log(spec.seq_k) + rng.random(shapes["L"])).astype(np.float32)
    if spec.sinks and program == "fwd":
        out["sinks"] = rng.standard_normal(spec.heads_q).astype(np.float32)
    if spec.mods is not None:  # the mods' parameters: the spec's values, random ones (zeros if int32) for those it leaves open
        from tilegen.core.mods import check_param_arrays

        sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
        open_ = {p.name: (np.zeros if p.dtype == "int32" else lambda s: 0.1 * rng.standard_normal(s))(p.concrete_shape(sizes))
                 for p in spec.mods.params if p.values is None}
        out.update(check_param_arrays(spec.mods, open_, sizes))
    return out


TRACE_WAIT_TIMEOUT_S = 600  # the twin's cross-core wait limit in trace_run's runs (seconds)


_TRACES: dict = {}  # trace_run's last traces: one trace scheduled at several ends of the cost table runs the twin once
_TRACES_KEPT = 4


def trace_run(exe, spec, program: str, blocks: int, select: list[int] | None = None) -> dict:
    """Run a hand-twin build's ``program`` (``"fwd"``/``"bwd"``) on generated data with ``blocks`` AI
    Cores (only the blocks in ``select`` when given: ``TWIN_TRACE_BLOCKS``) and return its instruction
    trace (:func:`parse_trace`). Raises TwinError when the run fails.

    The cores that reach a SyncAll first wait there for the rest; in a run of chosen instances at full
    sequence length those may be computing whole rows of tiles, on a loaded host for longer than the
    twin's default 60 s cross-core wait limit, so the run takes ``TRACE_WAIT_TIMEOUT_S`` unless the
    environment sets ``TWIN_WAIT_TIMEOUT_S`` (a core that never arrives still fails the run)."""
    from tilegen.backends.ascendc import twin

    key = (str(exe), spec, program, blocks, None if select is None else tuple(select),
           tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("TWIN_"))))
    if key in _TRACES:
        return _TRACES[key]
    with tempfile.TemporaryDirectory(prefix="tilegen-trace-") as tmp:
        trace = Path(tmp) / "trace.txt"
        env = {"TWIN_TRACE": str(trace), "TWIN_WAIT_TIMEOUT_S": os.environ.get("TWIN_WAIT_TIMEOUT_S", str(TRACE_WAIT_TIMEOUT_S))}
        if select is not None:
            env["TWIN_TRACE_BLOCKS"] = ",".join(map(str, select))
        shapes = spec.logical_shapes
        outs = {"O": (shapes["O"], spec.dtype), "L": (shapes["L"], "fp32")} if program == "fwd" else {
            n: (shapes[n], spec.dtype) for n in ("dQ", "dK", "dV")
        }
        layouts = {n: spec.layout for n in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV")}
        twin.run_program(exe, spec, program, _twin_inputs(spec, program), outs, layouts, blocks=blocks, env=env)
        out = parse_trace(trace.read_text()) if trace.exists() else {}
    while len(_TRACES) >= _TRACES_KEPT:
        _TRACES.pop(next(iter(_TRACES)))
    _TRACES[key] = out
    return out


STREAM_PAIRS = 400  # tile pairs of one head a one-core stream run (@stream) traces at most


def _stream_runs(exe, prog, small, program, kernels_ir, segments, l2_ok, costs) -> dict:
    """For each streamed kernel (``@stream``): (schedule, instances, pairs, cut pairs) of one core
    running every instance of one head of ``small`` as one stream; a head of more than ``STREAM_PAIRS``
    pairs at Sq and Sk scaled alike (whole tiles) to about ``STREAM_PAIRS`` / 2 pairs."""
    from tilegen.core.exprs import evaluate
    from tilegen.core.ir import grid_loops

    stream = [n for n, k in enumerate(kernels_ir) if k.has(Stream)]
    if not stream:
        return {}
    env = {str(k): v for k, v in prog.env}
    br, bc = int(env["Br"]), int(env["Bc"])

    def head(n: int, run) -> tuple[int, int, int]:  # instances, pairs, cut pairs of one head of `run`
        sized = dataclasses.replace(prog, env=tuple((k, run.seq_q if str(k) == "Sq" else run.seq_k if str(k) == "Sk" else v) for k, v in prog.env))
        t_n, pr, ct = tile_counts(sized, kernels_ir[n], run)
        sizes = dict(env, Sq=run.seq_q, Sk=run.seq_k, B=1, Hq=run.heads_q, Hkv=1)
        per_head = int(np.prod([evaluate(lp.stop - lp.start, sizes) for lp in grid_loops(kernels_ir[n])]))
        reps = per_head // t_n if t_n else 0
        return per_head, int(np.sum(pr)) * reps, int(np.sum(ct)) * reps

    run = small
    most = max(head(n, small)[1] for n in stream)
    if most > STREAM_PAIRS:
        f = math.sqrt(STREAM_PAIRS / 2 / most)
        run = small.replace(seq_q=max(br, round(small.seq_q * f / br) * br), seq_k=max(bc, round(small.seq_k * f / bc) * bc))
    traces = segments(trace_run(exe, run, program, 1))
    out: dict = {}
    for n in stream:
        blocks = traces.get(n, {})
        blocks = l2_levels(blocks, l2_ok[n])
        out[n] = (simulate_block(blocks[0], costs), *head(n, run), (run.seq_q, run.seq_k))
    return out


def simulate_program(
    spec, target, program: str = "bwd", *, dq_strategy: str = "atomic", tile_sizes=None, cache_dir=None, exact: bool | None = None,
    dkv_strategy: str | None = None, end: str = "central",
) -> ProgramTimeline:
    """The timeline of ``spec``'s forward (``"fwd"``) or backward (``"bwd"``) as ``tilegen generate``
    emits it for ``target`` (see the module docstring for the two forms; ``exact`` forces one), priced
    at the ``end`` of the cost table's ranges (:class:`Costs`; the twin's trace of the last few calls is
    kept, so the same program at another end is scheduled again, not run again).

    Raises:
        TimelineError: the target has no ``[timeline]`` table, or the trace cannot be scheduled.
        SpecError: ``program`` is not ``"fwd"`` or ``"bwd"``.
        TargetError, SpecError: as :func:`tilegen.backends.ascendc.generate`.
        TwinError: no C++ compiler, or the twin run failed.
    """
    from tilegen.models.analysis import count, target_l2_reuse
    from tilegen.backends import ascendc
    from tilegen.backends.ascendc import twin
    from tilegen.models.cost import matmul_dtype, hbm_floor_s, start_overhead_s
    from tilegen.core.targets import load_target

    from tilegen.core.errors import SpecError

    if program not in ("fwd", "bwd"):
        raise SpecError("program", program, "'fwd' or 'bwd'")
    tgt = load_target(target)
    if not tgt.timeline:
        raise TimelineError(f"target {tgt.name} has no [timeline] cost table; the timeline needs one (targets/ascend910b2.toml has it)")
    costs = Costs(tgt.timeline, end)
    label = "forward" if program == "fwd" else "backward"
    with step(f"{label}: generate the Ascend C"):
        gen = ascendc.generate(spec, tgt, dq_strategy, tile_sizes, dkv_strategy)
    _, plans = ascendc.plan_programs(spec, tgt, dq_strategy, tile_sizes, dkv_strategy)
    plan = plans[0 if program == "fwd" else 1]
    prog = plan.program
    exe = twin.build(gen.files, cache_dir)
    cores = tgt.parallel_units
    clock = tgt.cores["clock_ghz"].value * 1e9
    launch_s = tgt.overhead["launch_us"].value * 1e-6 if "launch_us" in tgt.overhead else 0.0
    counts = count(prog)
    kernels_ir = list(prog.kernels)
    info = [tile_counts(prog, k, spec) for k in kernels_ir]
    programs = [counts[k.name].programs for k in kernels_ir]
    pairs_total = sum(int(np.sum(p)) * (n // t if t else 0) for (t, p, _), n in zip(info, programs))
    if exact is None:
        exact = pairs_total * RECORDS_PER_PAIR <= EXACT_RECORDS
    out: list[KernelTimeline] = []
    l2_ok = [(r := target_l2_reuse(prog, k, tgt)) is not None and r.fits for k in kernels_ir]
    floors = [hbm_floor_s(prog, k, counts[k.name], tgt) for k in kernels_ir]
    def segments(traces: dict) -> dict:
        # one trace segment per kernel: a launch cut at its SyncAll records (parse_trace); a barrier
        # missing from the code (or one too many) leaves kernels to run into each other
        if traces and len(traces) != len(kernels_ir):
            raise TimelineError(
                f"the {program} trace has {len(traces)} kernel phases (launches, cut at SyncAll) for the program's "
                f"{len(kernels_ir)} kernels: a launch lacks a SyncAll between two kernels, or has one too many"
            )
        return traces

    if exact:
        with step(f"{label}: run the twin on {cores} cores, traced"):
            traces = segments(trace_run(exe, spec, program, cores))
        for n, (k, kp) in enumerate(zip(kernels_ir, plan.kernels)):
            blocks = traces.get(n, {})
            blocks = l2_levels(blocks, l2_ok[n])
            scheds = {b: simulate_block(c, costs) for b, c in steps(sorted(blocks.items()), f"{label} {k.name}: schedule the instances", unit="instance")}
            end = max((s.end for s in scheds.values()), default=0.0)
            total: dict[str, float] = defaultdict(float)
            for s in scheds.values():
                for key, v in _busy_by_type(s.busy).items():
                    total[key] += v
            rep = max(scheds.values(), key=lambda s: s.end) if scheds else None
            end, note = _floored(end, floors[n], clock, sum(s.gm_bytes for s in scheds.values()), costs)
            out.append(
                KernelTimeline(kp.name, programs[n], end / clock, _normalise_busy(total, cores, end), rep.critical_share() if rep else {},
                               f"whole launch ({len(scheds)} blocks){note}", block=rep)
            )
    else:
        g = spec.heads_q // spec.heads_kv
        small = spec.replace(batch=1, heads_q=g, heads_kv=1)
        tiles_main = max(range(len(info)), key=lambda n: int(np.sum(info[n][1])))
        tiles, pairs, cut = info[tiles_main]
        # the cheapest instance of every number of cut pairs first (so that the fit separates them),
        # then the other (pairs, cut) signatures spread evenly from the cheapest to the heaviest, up to
        # SAMPLES instances: the fit's slope then spans the launch's range of pairs (a lookahead
        # pipeline's first pairs cost less than its steady ones, so light samples alone underestimate it)
        order = [int(t) for t in np.lexsort((np.arange(tiles), pairs))]
        picks, seen, cuts = [], set(), set()
        for t in order:
            if int(cut[t]) not in cuts and len(picks) < SAMPLES:
                cuts.add(int(cut[t]))
                seen.add((int(pairs[t]), int(cut[t])))
                picks.append(t)
        rest: dict[tuple, int] = {}
        for t in order:
            rest.setdefault((int(pairs[t]), int(cut[t])), t)
        rest_t = [t for sig, t in rest.items() if sig not in seen]
        room = SAMPLES - len(picks)
        if room > 0 and rest_t:  # evenly from the lightest to the heaviest; one slot left: the heaviest
            at = np.unique(np.round(np.linspace(0, len(rest_t) - 1, min(room, len(rest_t)))).astype(int)) if room > 1 else [len(rest_t) - 1]
            picks.extend(rest_t[n] for n in at)
        need = max(t_n for t_n, _, _ in info) * g  # >= every kernel's instances at one batch, one KV head
        for n, (t_n, _, _) in enumerate(info):
            if not any(p < t_n for p in picks):
                picks.append(0)
        picks = sorted(set(picks))
        # beside each sample its neighbour with more pairs (traced, not fitted): what a sample shares
        # with the rest of the launch (a causal instance's K/V tiles are a subset of the next one's)
        # then shows in the trace, and l2_levels prices it as the full launch would
        near = {max((u for u in (t - 1, t + 1) if 0 <= u < tiles), key=lambda u: (pairs[u], u), default=t) for t in picks}
        traced = sorted(set(picks) | near)
        with step(f"{label}: run the twin on {len(traced)} instances of one head, traced"):
            traces = segments(trace_run(exe, small, program, max(need, max(traced) + 1), traced))
        with step(f"{label}: run the streamed kernels on one core, traced"):
            streams = _stream_runs(exe, prog, small, program, kernels_ir, segments, l2_ok, costs)
        for n, (k, kp) in enumerate(zip(kernels_ir, plan.kernels)):
            t_n, pr, ct = info[n]
            blocks = traces.get(n, {})
            blocks = l2_levels(blocks, l2_ok[n])
            samples = [t for t in picks if t < t_n and t in blocks]
            scheds = {t: simulate_block(blocks[t], costs) for t in steps(samples, f"{label} {k.name}: schedule the instances", unit="instance")}
            keys = sorted({key for s in scheds.values() for key in _busy_by_type(s.busy)})
            x = np.array([[1.0, pr[t] - ct[t], ct[t]] for t in samples])
            y = np.array([[scheds[t].end] + [_busy_by_type(scheds[t].busy).get(key, 0.0) for key in keys] + [scheds[t].gm_bytes]
                          for t in samples])
            coef, *_ = np.linalg.lstsq(x, y, rcond=None)
            fit = x @ coef
            resid = float(np.max(np.abs(fit[:, 0] - y[:, 0]) / np.maximum(y[:, 0], 1.0))) if len(samples) else 0.0
            xa = np.stack([np.ones(t_n), pr - ct, ct], axis=1)
            per_tile = xa @ coef  # [tile, 1 + len(keys)]
            fill, stream_note = 0.0, ""
            if k.has(Stream):
                # a core's instances overlap: an instance alone costs fill + a + b·pairs + c·cut, in the stream
                # a + b·pairs + c·cut, and the core pays the pipeline's fill once. One least-squares fit through
                # the instances alone and the one-core stream gives fill, a, b, c (where every instance has the
                # same pairs, a and b·pairs are not told apart, and need not be: the launch's are alike too)
                seq, s_inst, s_pairs, s_cut, (s_q, s_k) = streams[n]
                xs = np.vstack([np.column_stack([np.ones(len(samples)), x]), [1.0, s_inst, s_pairs - s_cut, s_cut]])
                ys = np.append(y[:, 0], seq.end)
                (fill, a, b, c), *_ = np.linalg.lstsq(xs, ys, rcond=None)
                per_tile[:, 0] = xa @ np.array([a, b, c])
                resid = max(resid, float(np.max(np.abs(xs @ np.array([fill, a, b, c]) - ys) / np.maximum(ys, 1.0))))
                stream_note = (f"; streamed: one core ran every instance of one head{'' if (s_q, s_k) == (small.seq_q, small.seq_k) else f' at Sq {s_q}, Sk {s_k}'} "
                               f"as one stream ({s_inst} instances, {s_pairs} pairs, {seq.end:.0f} cycles); fitted through it and the "
                               f"instances alone: time = fill + a + b*pairs + c*cut pairs alone, a + b*pairs + c*cut pairs in a stream "
                               f"(fill {fill:.0f}, a {a:.0f} cycles; worst residual {resid:.1%}), the fill once per core")
            end = deal(per_tile[:, 0], programs[n], cores, deal_of(k)) + fill
            tile_of = np.arange(programs[n]) % t_n
            total = {key: float(per_tile[tile_of, 1 + m].sum()) for m, key in enumerate(keys)}
            gm_bytes = float(per_tile[tile_of, -1].sum())
            rep_t = max(samples, key=lambda t: scheds[t].end) if samples else None
            rep = streams[n][0] if k.has(Stream) else scheds[rep_t] if rep_t is not None else None  # a stream: its one core's schedule
            end, note = _floored(end, floors[n], clock, gm_bytes, costs)
            form = (
                f"cost-only: instances {samples} of one head scheduled alone, the rest from the fit "
                f"time = a + b*pairs + c*cut pairs (worst residual {resid:.1%}){stream_note}; {programs[n]} instances dealt over {cores} cores{note}"
            )
            out.append(KernelTimeline(kp.name, programs[n], end / clock, _normalise_busy(total, cores, end),
                                      rep.critical_share() if rep else {}, form, samples, resid, rep))
    overhead_s = sum(start_overhead_s(k, tgt) for k in kernels_ir)
    time_s = sum(k.time_s for k in out) + overhead_s
    flops = sum(counts[k.name].flops.get("matmul", 0) for k in kernels_ir)
    peak = tgt.matmul_flops(matmul_dtype(prog))
    util = flops / (time_s * peak) if time_s > 0 else 0.0
    syncs = sum(k.has(SyncAll) for k in kernels_ir)
    return ProgramTimeline(label, out, time_s, int(flops), util, clock, launch_s, len(kernels_ir) - syncs, syncs, overhead_s)
