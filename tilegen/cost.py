"""Cost model: FLOPs by unit, bytes by level, and a predicted time per kernel and in total.

For each kernel of a bound, placed program (counts from :mod:`tilegen.analysis`, which equal what the
interpreter measures):

- work: matmul FLOPs on the cube / tensor cores; vector element-operations and exp/log operations on
  the vector unit; bytes of HBM tensors (inputs, outputs, workspaces) over HBM; bytes of per-core
  hand-off tiles over L2 (they stay L2-resident: their size does not depend on N);
- parallelism: the kernel's program instances run on ``P`` cores (AIC count or SMs) in waves; with
  ``n`` instances the busy fraction is ``n / (ceil(n / P) · P)``, and every rate is scaled by it;
- time = max(cube time, vector time (plain + exp, one unit), HBM time, L2 time) + launch overhead (or,
  for a kernel in the previous one's launch, its SyncAll: :func:`start_overhead_s`).
  Each unit is assumed to overlap the others perfectly (a roofline), load imbalance between programs
  (causal masks) is ignored; both make the prediction a lower bound.

Utilization = matmul FLOPs / (time · peak matmul rate).

With a mask mod the counts cover the non-empty tile pairs only (empty ones are skipped), the partial
ones carrying the mask's vector work (:func:`tilegen.analysis.count`); when the classes are known only
at run time (a mask of parameters without values) every tile in the window's bounds counts as visited
and partial, an upper bound.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .analysis import Counts, count
from .errors import TilegenError
from .ir import Elementwise, Load, Loop, MatMul, Program, Store, walk
from .targets import Target


@dataclass(frozen=True)
class KernelPrediction:
    """One kernel: programs, work, and times in seconds per resource."""

    name: str
    phase: str
    programs: int
    busy: float
    flops: dict
    bytes: dict
    times: dict
    time_s: float
    bound: str


@dataclass(frozen=True)
class Prediction:
    """A program's predicted time (seconds), work (FLOPs, bytes) and matmul utilization."""

    kernels: tuple[KernelPrediction, ...]
    time_s: float
    matmul_flops: int
    hbm_bytes: int
    l2_bytes: int
    utilization: float
    target: str

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "time_s": self.time_s,
            "matmul_flops": self.matmul_flops,
            "hbm_bytes": self.hbm_bytes,
            "l2_bytes": self.l2_bytes,
            "utilization": self.utilization,
            "kernels": [
                {
                    "name": k.name,
                    "phase": k.phase,
                    "programs": k.programs,
                    "busy_fraction": k.busy,
                    "flops": k.flops,
                    "bytes": k.bytes,
                    "times_s": k.times,
                    "time_s": k.time_s,
                    "bound": k.bound,
                }
                for k in self.kernels
            ],
        }


def _matmul_dtype(program: Program) -> str:
    for kernel in program.kernels:
        buffers = {b.name: b for b in kernel.buffers}
        for stmt, _ in walk(kernel.body):
            if isinstance(stmt, MatMul):
                return buffers[stmt.a].dtype
    return "fp16"


def start_overhead_s(kernel, target: Target) -> float:
    """Seconds before ``kernel``'s first instruction: a launch (``[overhead] launch_us``), or for a
    kernel that runs in the previous one's launch (``Kernel.sync_all``) the all-core barrier
    ``SyncAll<false>()``, three cross-core flag hops (the AIVs to their AIC, all AICs, the AIC to its
    AIVs: impl/basic_api/dav_c220/kernel_operator_sync_impl.h SyncAllImpl) at ``[timeline]
    cross_core_flag_cycles`` each (an estimate; the launch's figure where the table has none). The
    barrier's PipeBarrier<PIPE_ALL> is the previous kernel's end."""
    launch = target.overhead["launch_us"].value * 1e-6 if "launch_us" in target.overhead else 0.0
    hop = target.timeline.get("cross_core_flag_cycles")
    if not kernel.sync_all or hop is None:
        return launch
    return 3 * hop.value / (target.cores["clock_ghz"].value * 1e9)


def predict(program: Program, target: Target, counts: dict[str, Counts] | None = None) -> Prediction:
    """The cost model's prediction for a bound program on ``target`` (see the module docstring)."""
    counts = counts if counts is not None else count(program)
    kinds = {t.name: t.kind for t in program.tensors}
    dtype = _matmul_dtype(program)
    cores = target.parallel_units
    out = []
    total_flops = 0
    hbm_total = l2_total = 0
    for kernel in program.kernels:
        c = counts[kernel.name]
        n = max(c.programs, 1)
        busy = n / (math.ceil(n / cores) * cores)
        hbm = sum(c.tensor_bytes(t) for t in set(c.bytes_read) | set(c.bytes_written) if kinds[t] != "handoff")
        l2 = sum(c.tensor_bytes(t) for t in set(c.bytes_read) | set(c.bytes_written) if kinds[t] == "handoff")
        times = {
            "cube": c.flops.get("matmul", 0) / (target.matmul_flops(dtype) * busy),
            "vector": (c.flops.get("vector", 0) / target.rate("vector") + c.flops.get("exp", 0) / target.rate("exp")) / busy,
            "hbm": hbm / (target.bytes_per_s("hbm") * busy),
            "l2": l2 / (target.bytes_per_s("l2") * busy),
        }
        bound = max(times, key=times.get)
        time_s = times[bound] + start_overhead_s(kernel, target)
        out.append(
            KernelPrediction(
                name=kernel.name,
                phase=kernel.phase,
                programs=c.programs,
                busy=busy,
                flops={k: int(v) for k, v in c.flops.items()},
                bytes={"hbm": int(hbm), "l2": int(l2)},
                times=times,
                time_s=time_s,
                bound=bound,
            )
        )
        total_flops += c.flops.get("matmul", 0)
        hbm_total += hbm
        l2_total += l2
    time_s = sum(k.time_s for k in out)
    util = total_flops / (time_s * target.matmul_flops(dtype)) if time_s > 0 else 0.0
    return Prediction(tuple(out), time_s, int(total_flops), int(hbm_total), int(l2_total), util, target.name)


# --- the emitted code's model (Ascend C) -------------------------------------------------------------
#
# The roofline above assumes every unit overlaps every other. The model below describes the kernels
# `tilegen generate` emits for an Ascend target as they are written: each runtime helper
# (tilegen_runtime.h) costs what its instructions cost on their pipes (the [timeline] table of the
# target), its scalar issue overlapping its pipe work unless a helper makes the scalar unit wait; the
# helpers of one core run one after another (each begins by waiting for the pipe before it), except the
# cube's products (their k-steps' LoadData on MTE1 beside the Mmads on M, one L0A/L0B half each; a
# chunked product's Mmads into an L0C half after that half's last Fixpipe, its Fixpipes on FIX beside
# the next chunk's Mmads: tilegen::Cube), and except the
# copies whose closing wait is on the consuming pipe, not on the scalar unit (LoadNz, LoadRows, StoreRows,
# FixpipeRows: _ASYNC, and the hand-offs' copies after their flag waits): the scalar unit issues on past
# them, their pipe runs them in order (a hand-off's flag is set on that pipe after its copy), and the next
# compute helper starts when they are done (a copy with the knob Load.wait_at_read: when its WaitLoaded
# is reached, so the helpers in between overlap it; a store with Store.wait_at_rewrite: at the
# WaitMte3ToV before its tile's next writer, op wait_stored); the AIC
# and the AIVs run concurrently and meet only at the hand-offs (a GM slot, a ready and a free flag with
# the cross-core flag latency each; a hand-off with several slots waits for a free flag only when it
# reuses one, and each ready flag id is its own queue). A software-pipelined loop (plan op ``ploop``,
# Loop.stages) is unrolled as each unit issues it: its earlier stage of the first d pairs (d =
# Loop.lookahead), then per pair k its earlier stage of pair k + d before its later stage of pair k (a
# hoisted receive of pair k between the earlier stage's first receive and its rest), so the model
# overlaps the cube and the vector exactly where the schedule does. Per kernel instance that is a two-process schedule at helper
# granularity; its period per tile pair (cut by the mask or not) and its fixed part give every
# instance, and the instances are dealt over the cores as the kernels deal them.

_ESIZE = {"half": 2, "bfloat16_t": 2, "float": 4}


def _helper_cycles(op: dict, c, side: str, cut: bool, k_step: int, valid: int | None = None) -> float:
    """Cycles of one plan op (one runtime helper call) on its core (see the comment above); ``valid``:
    the rows inside Sq of an AIV tile that also holds padding rows (None: no padding). MaskTile gives a
    padding row one Duplicate; on such a tile the pairs are cut by the padding, and the model takes its
    rows inside Sq as uncut (they are cut only on the band's tiles, at most two of the instance)."""
    issue, fl = c.issue(), c["flag_cycles"]
    vs, vr = c["vector_startup_cycles"], c["vector_repeat_cycles"]
    rd, wr = c["scalar_ub_read_cycles"], c["scalar_ub_write_cycles"]

    def vec(n, esize=4, per=vr):
        return vs + math.ceil(n * esize / 256) * per

    def dma(nbytes, l2, write):
        lat = c["gm_l2_latency_cycles"] if l2 else c["gm_hbm_latency_cycles"]
        if write:
            rate = c["mte3_bytes_per_cycle"]
        else:
            rate = c["mte2_l2_bytes_per_cycle"] if l2 else c["mte2_hbm_bytes_per_cycle"]
        return lat + nbytes / rate

    kind = op["kind"]
    if kind in ("rotate", "free_mte2"):  # a scalar select of the buffer's other copy; a SetFlag
        return issue
    es = _ESIZE.get(op.get("ctype", "float"), 4)
    if side == "vector":
        rows = int(op.get("rows", 1))
        if kind in ("ub_load", "c2v_recv", "ub_store", "v2c_send"):
            n = rows * es if op.get("vector") else rows * int(op["cols"]) * es
            write = kind in ("ub_store", "v2c_send")
            extra = 2 * issue if op.get("atomic") else 0.0
            return max(5 * issue + extra, 2 * fl + dma(n, kind in ("c2v_recv", "v2c_send") or op.get("l2", False), write))
        if kind == "fill":
            return max(issue, vec(int(op["count"]), es))
        if kind in ("scalar", "adds", "binary"):
            return max(issue, vec(int(op["count"])))
        if kind == "unary":
            per = c["vector_exp_repeat_cycles"] if op["fn"] in ("Exp", "Ln") else vr
            return max(issue, vec(int(op["count"]), 4, per))
        if kind == "cast":
            esz = max(_ESIZE[op["dtype_dst"]], _ESIZE[op["dtype_src"]])
            if op["dpad"] == op["spad"]:
                return max(issue, vec(int(op["count"]), esz))
            return int(op["crows"]) * max(issue, vec(int(op["cols"]), esz))
        if kind == "fold":
            # RowsFold: a Max/Add per 64 columns after the first over every row (plain repeats)
            n = math.ceil(int(op["cols"]) / 64)
            return max((n - 1) * issue, (n - 1) * (vs + rows * vr))
        if kind == "reduce" and op.get("fold"):
            # RowsReduceFolded: one ReduceRepeat over every row
            return max(issue, vs + rows * c["vector_reduce_repeat_cycles"])
        if kind == "reduce":
            # a ReduceRepeat per 64 columns over every row, the later chunks combined with Max/Add
            n = math.ceil(int(op["cols"]) / 64)
            v_cycles = n * (vs + rows * c["vector_reduce_repeat_cycles"]) + (n - 1) * vec(rows)
            return max((2 * n - 1) * issue, v_cycles)
        # a Select in VSEL_TENSOR_SCALAR_MODE is preceded by a Duplicate of the scalar and a set_cmpmask
        # (the dav-c220 VselIntrinsicsImplPre)
        sel_pre = vec(1) + vs
        if kind == "zero_if_neginf":
            # copy to the 64-aligned row, Compares, Select, copy back (vector ops, issued ahead)
            n = int(op["count"])
            return max(4 * issue, 2 * vec(n) + 2 * vec(math.ceil(n / 64) * 64) + sel_pre)
        if kind in ("rows_add", "rows_mul", "rows_div"):
            # Brcb of the row factors (one group: the scratch holds every row on the built-in specs),
            # then an Add/Sub/Mul over the rows per 64 columns
            chunks = math.ceil(int(op["cpad"]) / 64)
            v_cycles = vs + math.ceil(rows / 8) * c["vector_brcb_repeat_cycles"] + chunks * (vs + rows * vr)
            n_issue = 1 + chunks
            if kind == "rows_div":  # the factors 1 / v first: copy, Compares, Reciprocal, Select
                v_cycles += vec(rows) + 3 * vec(math.ceil(rows / 64) * 64) + sel_pre
                n_issue += 4
            return max(n_issue * issue, v_cycles)
        if kind == "mask":
            if op.get("cut_only") and not cut:
                return 0.0  # MaskTile returns before any instruction on a tile it does not cut
            cpad, chunks = int(op["cpad"]), math.ceil(int(op["cpad"]) / 64)
            add = max(2 * issue, vs + vr)

            def index(n):  # CreateVecIndex: scalar writes of the first block, an S->V pair, then Adds on V
                return 2 * fl + min(n, 8) * (issue + wr) + (math.ceil(min(n, 64) / 8) - 1 + max(math.ceil(n / 64) - 1, 0)) * add

            live = rows if valid is None else min(max(valid, 0), rows)
            pad = vec((rows - live) * cpad) if live < rows else 0.0
            # on a cut tile: the lower bound where it is finite, and the upper one (the window's, or Sk - 1 on
            # a tile past Sk): the model does not tell which of them cuts, it counts both
            bounds = (int(op["left"]) >= 0) + 1
            n = math.ceil(live / 8) * 8
            # per bound (MaskBound): the thresholds (CreateVecIndex and Mins), then one group of rows (the
            # scratch holds 64): Brcb, and per 64 columns a Compare and a Select over the rows
            bound = index(n) + vec(n) + vs + math.ceil(live / 8) * c["vector_brcb_repeat_cycles"] + chunks * (2 * (vs + live * vr) + sel_pre)
            work = (index(cpad) + bounds * bound) if live > 0 and bounds else 0.0
            return pad + work
        raise TilegenError(f"the emitted-code model has no cost for the vector op {kind}")
    if kind in ("l1_load", "v2c_recv"):
        rows, cols = int(op["rows"]), int(op["cols"])
        l2 = kind == "v2c_recv" or op.get("l2", False)
        if op.get("rowwise"):
            return max((4 + rows) * issue, 2 * fl + rows * dma(cols * es, l2, False))
        return max(5 * issue, 2 * fl + dma(rows * cols * es, l2, False))
    if kind == "zero_acc":
        m1, n1 = math.ceil(int(op["m"]) / 16), math.ceil(int(op["n"]) / 16)
        fill = 2 * c["mte1_startup_cycles"] + (m1 + n1) * 512 / c["l0a_bytes_per_cycle"]
        return max(9 * issue, 3 * fl + fill + c["mmad_startup_cycles"] + m1 * n1)
    if kind in ("fix_store", "c2v_send"):
        nbytes = int(op["m"]) * int(op["cols"]) * 4
        l2 = kind == "c2v_send" or op.get("l2", False)
        lat = c["gm_l2_latency_cycles"] if l2 else c["gm_hbm_latency_cycles"]
        rate = c["fix_l2_bytes_per_cycle"] if l2 else c["fix_hbm_bytes_per_cycle"]
        extra = 2 * issue if op.get("atomic") else 0.0
        return max(5 * issue + extra, 2 * fl + c["fix_startup_cycles"] + lat + nbytes / rate)
    raise TilegenError(f"the emitted-code model has no cost for the cube op {kind}")


def _matmul_steps(m: int, n: int, k: int, c, k_step: int) -> tuple[float, list[tuple[float, float]]]:
    """(scalar issue cycles, [(MTE1, M) cycles per k-step]) of MatmulTile for an m x k by k x n product:
    per k-step the LoadData of both operands (MTE1) into one half of L0A/L0B, then the Mmad (M)."""
    issue, fl = c.issue(), c["flag_cycles"]
    m1, n1 = math.ceil(m / 16), math.ceil(n / 16)
    steps = []
    s_cycles = 2 * issue
    for k0 in range(0, k, k_step):
        kc1 = math.ceil(min(k_step, k - k0) / 16)
        load_a = m1 * (c["mte1_startup_cycles"] + kc1 * 512 / c["l0a_bytes_per_cycle"])
        load_b = kc1 * (c["mte1_startup_cycles"] + n1 * 512 / c["l0b_bytes_per_cycle"])
        steps.append((fl + load_a + load_b, fl + c["mmad_startup_cycles"] + m1 * n1 * kc1 / c["mmad_fractals_per_cycle"]))
        s_cycles += (5 + m1 + kc1) * issue
    return s_cycles, steps


def _chunks(n: int, width: int) -> list[int]:
    """The column widths of a product of n columns computed in chunks of ``width`` (MatMul.n_chunk)."""
    return [min(width, n - n0) for n0 in range(0, n, width)]


def _unrolled(ops: list[dict], pattern: list[bool]) -> list[tuple[dict, bool]]:
    """The ops of one kernel instance in program order, the innermost loop's body once per entry of
    ``pattern`` (True: a tile pair the mask cuts); outer loops' own ops once."""
    out: list[tuple[dict, bool]] = []
    for op in ops:
        if op["kind"] == "stream":  # Kernel.stream: one instance alone is its openings, its loop, its closing
            out.extend((o, False) for o in op["open_a"] + op["open_b"])
            out.extend(_unrolled([op["ploop"]], pattern))
            out.extend((o, False) for o in op["close"])
        elif op["kind"] == "ploop":  # software-pipelined: the earlier stage of pair k + d before the later one of pair k
            d = op.get("lookahead", 1)
            for k in range(min(d, len(pattern))):  # the prologue: the earlier stage of the first d pairs
                out.extend((o, pattern[k]) for o in op["stage0"])
            h = op.get("head", 0) if op.get("hoisted") else len(op["stage0"])
            for k, cut in enumerate(pattern):
                if k + d < len(pattern):
                    out.extend((o, pattern[k + d]) for o in op["stage0"][:h])
                out.extend((o, cut) for o in op.get("hoisted", []))  # Load.hoist: beside the rest of the earlier stage
                if k + d < len(pattern):
                    out.extend((o, pattern[k + d]) for o in op["stage0"][h:])
                out.extend((o, cut) for o in op["stage1"])
        elif op["kind"] != "loop":
            out.append((op, False))
        elif any(o["kind"] in ("loop", "ploop") for o in op["body"]):
            out.extend(_unrolled(op["body"], pattern))
        else:
            for cut in pattern:
                out.extend((o, cut) for o in op["body"])
    return out


# Copies that do not stop the scalar unit (tilegen_runtime.h: their last wait is a SetFlag/WaitFlag pair
# whose wait runs on the consuming pipe), by side and plan op, with the pipe they occupy.
_ASYNC = {("cube", "l1_load"): "MTE2", ("cube", "fix_store"): "FIX", ("vector", "ub_load"): "MTE2", ("vector", "ub_store"): "MTE3"}
_ASYNC_ISSUE = 5  # instructions a copy helper issues (two flag pairs and the copy)
_SEND_PIPE = {"cube": "FIX", "vector": "MTE3"}  # the pipe of a hand-off's send (FixpipeRows, StoreRows)


def _instance_cycles(kplan, costs, pattern: list[bool], k_step: int, valid: int | None = None) -> float:
    """The two-process schedule (AIC, one AIV: the other is its mirror) of one kernel instance;
    ``valid``: the Q rows of the instance's tile inside Sq on the first AIV (a forward instance of the
    last Q tile), None: all."""
    x_lat, issue = costs["cross_core_flag_cycles"], costs.issue()
    sides = {"cube": _unrolled(kplan.aic.ops, pattern), "vector": _unrolled(kplan.aiv.ops, pattern)}
    pos = {s: 0 for s in sides}
    clock = {s: 0.0 for s in sides}
    ready: dict[tuple[str, str], list[float]] = {}  # (receiving side, ready flag id) -> times set
    free: dict[str, list[float]] = {}  # free flag id -> times set by the receiver
    sent: dict[str, int] = {}
    other = {"cube": "vector", "vector": "cube"}
    pipe_free: dict[str, dict[str, float]] = {s: {} for s in sides}  # the copies' pipes: free from (cycles)
    # the end of the copies waited for (every later compute helper waits for them); a copy with
    # Load.wait_at_read joins it at its WaitLoaded, not at its issue
    gate = {s: 0.0 for s in sides}
    deferred: dict[str, dict[str, float]] = {s: {} for s in sides}  # tile -> end of its deferred copy
    freed: dict[str, float] = {}  # Load.free_early: tile -> when its last access raised its V -> MTE2 event

    def after_copies(s: str, t: float) -> float:
        return max(t, gate[s])

    half_free = [0.0, 0.0]  # the AIC's L0C halves (tilegen::Cube): free from (cycles)
    ring = [0]  # the half the next chunk takes
    ab_free = [0.0, 0.0]  # the AIC's L0A/L0B halves: free from (the end of the Mmad that last read them)
    ab_ring = [0]  # the half the next k-step takes

    def matmul(s: str, op: dict, ready: float, m_ready: float = 0.0, n: int | None = None) -> float:
        """Schedule a MatmulTile's k-steps on the AIC: each step's loads on MTE1 after ``ready``, the
        MTE1 before and the Mmad that last read its half; its Mmad on M after them, the Mmads before and
        ``m_ready`` (an L0C half's last Fixpipe). Returns the end of its last Mmad."""
        _, steps = _matmul_steps(int(op["m"]), int(op["n"]) if n is None else n, int(op["k"]), costs, k_step)
        end = 0.0
        for load, mmad in steps:
            h = ab_ring[0]
            start = max(ready, pipe_free[s].get("MTE1", 0.0), ab_free[h])
            pipe_free[s]["MTE1"] = loaded = start + load
            pipe_free[s]["M"] = end = ab_free[h] = max(loaded, pipe_free[s].get("M", 0.0), m_ready) + mmad
            ab_ring[0] = 1 - h
        return end

    def copy(s: str, pipe: str, t: float, op: dict, cut: bool) -> float:
        """Issue ``op``'s copy at ``t`` on ``pipe`` of side ``s`` (after the pipe's earlier copies): its end.
        A store with a chunked product (MatmulStore) computes each chunk on M when its L0C half is free
        and drains it on FIX: the end of the last Fixpipe; M stays busy until the last chunk's Mmad."""
        product = op.get("product")
        if product is None:
            start = max(t + _ASYNC_ISSUE * issue, pipe_free[s].get(pipe, 0.0))
            if pipe == "FIX":  # FixpipeRows waits for the Mmads before it (M -> FIX)
                start = max(start, pipe_free[s].get("M", 0.0))
            pipe_free[s][pipe] = end = start + _helper_cycles(op, costs, s, cut, k_step, valid)
            return end
        end = t
        for nc in _chunks(int(product["n"]), int(product["n_chunk"])):
            h = ring[0]
            done = matmul(s, product, after_copies(s, t), half_free[h], nc)
            start = max(done, pipe_free[s].get(pipe, 0.0))
            part = dict(op, cols=nc)
            pipe_free[s][pipe] = end = half_free[h] = start + _helper_cycles(part, costs, s, cut, k_step, valid)
            ring[0] = 1 - h
        return end

    def issued(op: dict) -> float:
        """Scalar cycles to issue ``op`` when it is a copy (a chunked product's Mmads included)."""
        product = op.get("product")
        if product is None:
            return _ASYNC_ISSUE * issue
        m, k = int(product["m"]), int(product["k"])
        return sum(_ASYNC_ISSUE * issue + _matmul_steps(m, nc, k, costs, k_step)[0]
                   for nc in _chunks(int(product["n"]), int(product["n_chunk"])))

    while any(pos[s] < len(sides[s]) for s in sides):
        progressed = False
        for s in sides:
            while pos[s] < len(sides[s]):
                op, cut = sides[s][pos[s]]
                kind = op["kind"]
                t = clock[s]
                pipe = _ASYNC.get((s, kind))
                if op.get("wait_done", -1) >= 0 and not op.get("done_waited"):  # Load.wait_done: the cube's done flag first
                    q = ready.get((s, "done"))
                    if not q:
                        break
                    t = clock[s] = max(t + issue, q.pop(0))
                    op = dict(op, done_waited=True)
                    sides[s][pos[s]] = (op, cut)
                if kind == "done_signal":  # Store.signal_done: set on FIX after the program's stores
                    ready.setdefault((other[s], "done"), []).append(max(t, pipe_free[s].get("FIX", 0.0)) + x_lat)
                    t += issue
                elif pipe is not None and op.get("product"):  # MatmulStore: nothing on the AIC waits for its Fixpipes
                    copy(s, pipe, t, op, cut)
                    t += issued(op)
                elif pipe is not None:
                    end = copy(s, pipe, t, op, cut)
                    if op.get("defer"):
                        deferred[s][op["dst"]] = end
                    elif op.get("closing", True) is False:
                        pass  # Store.wait_at_rewrite: waited for at its tile's next writer (wait_stored)
                    else:
                        gate[s] = max(gate[s], *pipe_free[s].values())  # its flag orders after the pipe's earlier copies
                    t += _ASYNC_ISSUE * issue
                elif kind == "wait_stored":  # an MTE3 -> V wait: the next vector helper after the stores before it
                    gate[s] = max(gate[s], pipe_free[s].get("MTE3", 0.0))
                    t += issue
                elif kind == "wait_loaded":  # a WaitFlag on MTE1: the scalar unit issues on
                    gate[s] = max(gate[s], deferred[s].pop(op["buf"]))
                    t += issue
                elif kind == "wait_received":  # an MTE2 -> V SetWait: every copy issued on MTE2 before it
                    gate[s] = max(gate[s], deferred[s].pop(op["buf"]), pipe_free[s].get("MTE2", 0.0))
                    t += issue
                elif kind == "free_mte2":  # Load.free_early: the tile's event, raised after the vector work before it
                    freed[op["buf"]] = t
                    t += issue
                elif kind in ("c2v_recv", "v2c_recv"):
                    start = freed.get(op["buf"]) if op.get("free_event") else None
                    if op.get("wait", True):  # a load of a group whose flag was waited for: no wait
                        q = ready.get((s, op["ready"]))
                        if not q:
                            break
                        flag = q.pop(0)
                        t = max(t + issue, flag)
                        start = None if start is None else max(start, flag)
                    # the copy runs on MTE2 while the scalar unit issues on (with Load.free_early from its
                    # tile's last access, not after the vector work before it); the free flag is set on
                    # MTE2 after it, and the next compute helper waits for it
                    end = copy(s, "MTE2", t if start is None else start, op, cut)
                    if op.get("defer"):  # Load.wait_at_read: waited for at its tile's first reader (wait_received)
                        deferred[s][op["buf"]] = end
                    else:
                        gate[s] = max(gate[s], end)
                    t += _ASYNC_ISSUE * issue + issue
                    free.setdefault(op["free"], []).append(end + x_lat)
                elif kind in ("c2v_send", "v2c_send"):
                    if sent.get(op["free"], 0) >= op["slots"]:  # a slot reused: wait for its free flag
                        q = free.get(op["free"], [])
                        if not q:
                            break
                        t = max(t + issue, q.pop(0))
                    sent[op["free"]] = sent.get(op["free"], 0) + 1
                    # the copy runs on its pipe (Fixpipe, MTE3) while the scalar unit issues on; the ready
                    # flag is set on that pipe after it, and the next compute helper waits for it (not
                    # after a chunked product: the next Mmads wait for their L0C half only)
                    end = copy(s, _SEND_PIPE[s], t, op, cut)
                    if not op.get("product") and op.get("closing", True):  # else: at its wait_stored
                        gate[s] = max(gate[s], end)
                    t += issued(op) + issue
                    if op.get("signal", True):  # the last store of a group sets its one ready flag
                        ready.setdefault((other[s], op["ready"]), []).append(end + x_lat)
                elif s == "cube" and kind == "matmul":  # MTE1 and M as the k-steps allow; the scalar unit issues on
                    matmul(s, op, after_copies(s, t))
                    t += _matmul_steps(int(op["m"]), int(op["n"]), int(op["k"]), costs, k_step)[0]
                elif s == "cube" and kind == "zero_acc":  # waits for every Mmad before it (M -> MTE1), and they for it
                    t = max(after_copies(s, t), pipe_free[s].get("M", 0.0)) + _helper_cycles(op, costs, s, cut, k_step, valid)
                    pipe_free[s]["M"] = pipe_free[s]["MTE1"] = ab_free[0] = ab_free[1] = t
                else:
                    t = after_copies(s, t) + _helper_cycles(op, costs, s, cut, k_step, valid)
                clock[s] = t
                pos[s] += 1
                progressed = True
        if not progressed:
            raise TilegenError(f"the emitted-code model of {kplan.name} deadlocks (a hand-off without its partner)")
    # the drains at kernel end: each sender waits for its copies and the last free flag of every slot it used
    for s in sides:
        clock[s] = max([after_copies(s, clock[s]), *pipe_free[s].values()])
        for op, _ in sides[s]:
            if op["kind"] in ("c2v_send", "v2c_send") and free.get(op["free"]):
                clock[s] = max(clock[s], free[op["free"]][-1])
    return max(clock.values())


def hbm_floor_s(program, kernel, counts: Counts, target) -> float:
    """The least time (s) of one launch of ``kernel`` set by the chip's HBM bandwidth: every GM tensor
    it touches (hand-off workspaces excepted) crosses HBM once, whole (its later accesses are the L2
    hits of :func:`tilegen.analysis.l2_reuse`). Used by both the emitted-code model and the timeline,
    whose per-core rates alone would let L2-resident re-reads outrun the chip's HBM."""
    from .exprs import evaluate

    env = {str(k): v for k, v in program.env}
    tensors = {t.name: t for t in program.tensors}
    nbytes = 0
    for name in set(counts.bytes_read) | set(counts.bytes_written):
        t = tensors[name]
        if t.kind != "handoff":
            nbytes += int(evaluate(t.numel, env)) * dtypes.itemsize(t.dtype)
    return nbytes / target.bytes_per_s("hbm")


@dataclass(frozen=True)
class EmittedPrediction:
    """The emitted-code model of one program: seconds per kernel (in launch order, launch or SyncAll
    overhead excluded), total seconds (those included: :func:`start_overhead_s`) and the matmul
    utilisation."""

    kernels: tuple[tuple[str, float], ...]
    time_s: float
    utilization: float


def predict_emitted(spec, target, program: str = "bwd", dq_strategy: str = "atomic", tile_sizes=None, dkv_strategy: str | None = None) -> EmittedPrediction:
    """The emitted-code model (see the comment above) of ``spec``'s forward (``"fwd"``) or backward
    for an Ascend ``target`` with a ``[timeline]`` table.

    Raises:
        TilegenError: the target has no ``[timeline]`` table (``tilegen.timeline.TimelineError``).
        SpecError: ``program`` is not ``"fwd"`` or ``"bwd"``.
        TargetError, SpecError: as :func:`tilegen.backends.ascendc.plan_programs`.
    """
    from .backends import ascendc
    from .errors import SpecError
    from .ir import grid_loops
    from .timeline import Costs, TimelineError, deal, tile_counts

    if program not in ("fwd", "bwd"):
        raise SpecError("program", program, "'fwd' or 'bwd'")
    tgt, plans = ascendc.plan_programs(spec, target, dq_strategy, tile_sizes, dkv_strategy)
    if not tgt.timeline:
        raise TimelineError(f"target {tgt.name} has no [timeline] cost table; the emitted-code model needs one")
    costs = Costs(tgt.timeline)
    plan = plans[0 if program == "fwd" else 1]
    prog = plan.program
    counts = count(prog)
    k_step = int(tgt.placement["k_step"].value)
    clock = tgt.cores["clock_ghz"].value * 1e9
    out = []
    flops = 0
    for kir, kplan in zip(prog.kernels, plan.kernels):
        tiles, pairs, cut = tile_counts(prog, kir, spec)
        # the cut pairs of an instance are at the diagonal end of its tile loop: the last K/V tiles of a
        # Q tile (forward), the first Q tiles of a K/V tile (backward)
        cut_last = grid_loops(kir)[-1].role == "q_tile"
        memo: dict[tuple[int, int, int | None], float] = {}

        def sim(n_full: int, n_cut: int, valid: int | None = None) -> float:
            if (n_full, n_cut, valid) not in memo:
                pattern = [False] * n_full + [True] * n_cut if cut_last else [True] * n_cut + [False] * n_full
                memo[n_full, n_cut, valid] = _instance_cycles(kplan, costs, pattern, k_step, valid)
            return memo[n_full, n_cut, valid]

        # a forward instance of a Q tile past Sq: the rows inside Sq of the first AIV tile that holds
        # padding rows (the AIVs split the tile's rows in halves)
        env = {str(k): v for k, v in prog.env}
        br, split = int(env["Br"]), int(tgt.cores["aiv_per_aic"].value)
        half = -(-br // split)
        valid: list[int | None] = [None] * tiles
        if cut_last:
            inside = [spec.seq_q - t * br for t in range(tiles)]
            valid = [None if v >= br else (v - half if v >= half else v) for v in inside]
        # the steady period of a pair the mask does not cut, past the pipeline's fill (the third pair
        # alone still carries some of it: the software-pipelined loops run two or three pairs deep)
        p_full = (sim(8, 0) - sim(4, 0)) / 4
        if kir.stream:
            # Kernel.stream: a core's instances overlap; each costs its pairs at the steady period (a cut
            # pair's from four cut pairs after four full ones) and its opening and closing helpers on the
            # busier side; the pipeline fills once per core
            p_cut = p_full + (sim(4, 4) - sim(8, 0)) / 4
            stream = {side: kplan_side.ops[0] for side, kplan_side in (("cube", kplan.aic), ("vector", kplan.aiv))}
            p_prog = max(sum(_helper_cycles(o, costs, side, False, k_step) for o in op["open_a"] + op["open_b"] + op["close"]
                             if o["kind"] not in ("done_signal", "wait_stored", "wait_loaded", "wait_received", "rotate", "free_mte2"))
                         for side, op in stream.items())
            fill = sim(4, 0) - 4 * p_full - p_prog  # an instance alone: its fill, its pairs, its opening and closing
            per_tile = np.array([int(f) * p_full + int(c) * p_cut + p_prog for f, c in zip(pairs - cut, cut)])
            t = (deal(per_tile, counts[kir.name].programs, tgt.parallel_units, kir.deal) + fill) / clock
        else:
            per_tile = np.array([sim(min(int(f), 4), int(c), v) + max(int(f) - 4, 0) * p_full
                                 for f, c, v in zip(pairs - cut, cut, valid)])
            t = deal(per_tile, counts[kir.name].programs, tgt.parallel_units, kir.deal) / clock
        out.append((kplan.name, max(t, hbm_floor_s(prog, kir, counts[kir.name], tgt))))
        flops += counts[kir.name].flops.get("matmul", 0)
    time_s = sum(t for _, t in out) + sum(start_overhead_s(k, tgt) for k in prog.kernels)
    util = flops / (time_s * tgt.matmul_flops(_matmul_dtype(prog))) if time_s > 0 else 0.0
    return EmittedPrediction(tuple(out), time_s, util)


# --- the GPU model (Triton) --------------------------------------------------------------------------
#
# The roofline above gives every tile size the same time when the work is the same, so on a GPU it ties
# every backward Br. The model below describes one Triton kernel with a tile loop as it runs on an SM:
# the program's tile pairs go one after another, each a chain of tensor-core and CUDA-core work (partly
# overlapped: wgmma is asynchronous), a fixed per-tile cost, and whatever part of the operand loads the
# pipeline stages do not hide; several programs resident on one SM overlap each other's chains, down to
# the busiest unit's throughput. Per tile pair, in SM cycles (parameters in ``quotes``, from the
# target's ``[gpu_model]`` table):
#
#   mma   = Σ over the loop's dots of 2·M·N·K / (R_tc · e),  R_tc = [peak] matmul rate / (SMs · clock),
#           e = mma_efficiency(M, N, warps) (below)
#   vec   = ``vector_issue`` · vector ops / R_vec + exp ops / R_exp  (counts of tilegen.analysis per
#           pair; R_vec, R_exp: the [peak] vector and exp rates per SM and cycle)
#   chain = (max(mma, vec) + (1 − ``overlap``) · min(mma, vec) + ``tile_cycles``) · (1 + ``spill_cost`` · spill)
#   l2    = (bytes loaded in the loop + ``atomic_cost`` · bytes added atomically) / (L2 bytes/s / SMs / clock)
#   latency = chain + max(0, l2 + ``load_latency_cycles`` − (num_stages − 1) · chain)
#   with c programs resident, c pairs take max(latency, c · max(mma, vec, l2))
#
# Registers per thread: the kernel's RF footprint over its 32·num_warps threads plus ``base_registers``
# (addresses, operand fragments); spill = max(0, registers − 255) / 255. Where the compiler's own
# figures are given (``compiled``: registers, spilled bytes per thread, shared bytes, from an sm_90
# compile of the generated kernel), they replace these estimates: spill = stack bytes / 4 / 255. Resident programs c =
# min(⌊SMEM / shared bytes⌋, ⌊64K / (32 · warps · min(255, registers))⌋, ⌊64 / warps⌋), at least 1,
# the shared bytes being the SMEM footprint less the dots' register operands (:func:`register_operands`),
# the registers the RF footprint less the dot results the module fuses into an accumulator
# (:func:`fused_temporaries`).
# Programs fill the SMs in waves of SMs·c; the last, partial wave puts ⌈rest / SMs⌉ programs on its
# busiest SM (wave quantisation). A kernel without a tile loop (the backward's pre and post kernels)
# keeps the roofline's time. Every kernel adds the launch overhead. The model ignores load imbalance
# between programs (causal masks: it spreads the pairs evenly) and L2 misses (every re-read hits).

GPU_MODEL_PARAMS = ("mma_small_m_efficiency", "mma_half_n", "tile_cycles", "load_latency_cycles", "atomic_cost", "spill_cost", "overlap", "base_registers", "vector_issue")


@dataclass(frozen=True)
class GpuKernelPrediction:
    """One kernel on the GPU model: programs, warps, stages, resident programs per SM, registers per
    thread, the per-tile terms (SM cycles) and the time (seconds, launch excluded)."""

    name: str
    phase: str
    programs: int
    warps: int
    stages: int
    resident: int
    registers: float
    tiles_per_program: float
    terms: dict
    time_s: float


@dataclass(frozen=True)
class GpuPrediction:
    """The GPU model of a program: per kernel, total seconds (launches included), matmul FLOPs and
    TFLOP/s (matmul FLOPs over the time)."""

    kernels: tuple[GpuKernelPrediction, ...]
    time_s: float
    matmul_flops: int

    @property
    def tflops(self) -> float:
        return self.matmul_flops / self.time_s / 1e12 if self.time_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "time_s": self.time_s,
            "matmul_flops": self.matmul_flops,
            "tflops": self.tflops,
            "kernels": [dataclasses.asdict(k) for k in self.kernels],
        }


def gpu_params(target: Target, overrides: dict | None = None, compiled: bool = False) -> dict[str, float]:
    """The GPU model's free parameters from ``target``'s ``[gpu_model]`` table, or with ``compiled``
    its ``[gpu_model_compiled]`` table (fitted with the compiler's registers, spills and shared bytes
    in place of the footprint's estimates); ``overrides`` replace some, for fitting.

    Raises:
        TilegenError: the table lacks one (names the table, the parameter and the target)."""
    table, name = (target.gpu_model_compiled, "gpu_model_compiled") if compiled else (target.gpu_model, "gpu_model")
    out = {}
    for key in GPU_MODEL_PARAMS:
        if overrides and key in overrides:
            out[key] = float(overrides[key])
        elif key in table:
            out[key] = table[key].value
        elif compiled and key == "base_registers":  # unused with the compiler's figures
            out[key] = 0.0
        else:
            raise TilegenError(f"target {target.name} has no {name}.{key}; the GPU cost model needs {', '.join(GPU_MODEL_PARAMS)}")
    return out


def _innermost_tile_loop(kernel) -> Loop | None:
    """The innermost serial tile loop holding the kernel's dots, or None."""
    found = None
    for stmt, loops in walk(kernel.body):
        if isinstance(stmt, MatMul) and loops and loops[-1].kind == "serial":
            found = loops[-1]
    return found


def mma_efficiency(m: int, n: int, warps: int, params: dict) -> float:
    """The tensor cores' share of their peak for one dot of an M x N result on ``warps`` warps.

    M < 64: no warp-group MMA (wgmma needs 64 rows per warp group), Triton falls back to mma.sync:
    ``mma_small_m_efficiency``. Otherwise the warp groups (warps / 4) go along M first (64 rows each,
    Triton's Hopper MMA layout), the rest split N; each wgmma instruction then covers n = N / (groups
    along N) columns and reaches n / (n + ``mma_half_n``) of its rate, relative to n = 256 (the
    instruction's widest, which the measured peak's large matrix product uses)."""
    if m < 64:
        return params["mma_small_m_efficiency"]
    groups = max(warps // 4, 1)
    along_m = max(min(groups, m // 64), 1)
    cols = min(max(n // max(groups // along_m, 1), 8), 256)
    half = params["mma_half_n"]
    return (cols / (cols + half)) / (256 / (256 + half))


def register_operands(kernel) -> set[str]:
    """Buffers of ``kernel`` computed on chip (not loaded) and read only as the untransposed left
    operand of dots: Hopper's wgmma reads that operand from registers, so Triton keeps no shared-memory
    copy (P of the forward: benchmarks/NOTES.md, issue 12, Triton's 114688 B for the D 128 forward at
    64×64 / 3 stages against 122880 B counted, the difference being P's 8 KiB)."""
    loaded, written, other = set(), set(), set()
    left = set()
    for stmt, _ in walk(kernel.body):
        if isinstance(stmt, Load):
            loaded.add(stmt.dst)
            continue
        written.update(stmt.buffers_written())
        if isinstance(stmt, MatMul) and not stmt.trans_a:
            left.add(stmt.a)
            other.update(n for n in stmt.buffers_read() if n != stmt.a)
        else:
            other.update(stmt.buffers_read())
    return (left & written) - loaded - other


def fused_temporaries(kernel) -> set[str]:
    """Buffers ``T`` of ``kernel`` that are a dot's result (no accumulate, alpha 1) read once, by an add
    into an accumulator ``X = X + T``: the Triton module emits ``X = tl.dot(a, b, X)`` instead
    (:func:`tilegen.backends.triton.fuse_accumulation`), so ``T`` takes no registers (PV of the
    forward)."""
    reads: dict[str, int] = {}
    for stmt, _ in walk(kernel.body):
        for name in stmt.buffers_read():
            reads[name] = reads.get(name, 0) + 1
    dots = {stmt.dst for stmt, _ in walk(kernel.body) if isinstance(stmt, MatMul) and not stmt.accumulate and stmt.alpha == 1.0}
    out = set()
    for stmt, _ in walk(kernel.body):
        if isinstance(stmt, Elementwise) and stmt.op == "add" and len(set(stmt.args)) == 2 and stmt.dst in stmt.args:
            out.update(a for a in stmt.args if a != stmt.dst and a in dots and reads.get(a) == 1)
    return out


def uses_gpu_model(target: Target, compiled: bool = False) -> bool:
    """Whether block-size selection scores ``target``'s candidates with :func:`predict_gpu` (a GPU target
    whose ``[gpu_model]`` table has every parameter) rather than the roofline; with ``compiled``, whether
    its ``[gpu_model_compiled]`` table has every parameter the model takes with the compiler's figures."""
    table = target.gpu_model_compiled if compiled else target.gpu_model
    return target.kind == "gpu" and all(k in table for k in GPU_MODEL_PARAMS if not (compiled and k == "base_registers"))


def default_warps(target: Target) -> int:
    """``[triton.default] num_warps`` of ``target`` (4 when absent: Triton's default)."""
    return int(target.sections.get("triton", {}).get("default", {}).get("num_warps", 4))


def predict_gpu(program: Program, target: Target, warps: dict[str, int] | None = None, params: dict | None = None,
                counts: dict[str, Counts] | None = None, compiled: dict[str, dict] | None = None) -> GpuPrediction:
    """The GPU model (see the comment above) of a bound, placed program on a GPU ``target``.

    Args:
        warps: num_warps per kernel phase (``fwd``, ``main``, ``dq``...); a phase not given takes
            ``[triton.default]``. Stages come from the IR (each buffer's ``stages``, the placement's
            copy of ``num_stages``).
        params: overrides of the ``[gpu_model]`` parameters (for fitting).
        compiled: per kernel phase, what the compiler allocated for the kernel as generated:
            ``registers`` per thread, ``stack_bytes`` per thread (spills) and ``shared_bytes`` per
            program (:func:`tilegen.backends.triton_compile.compile_resources` reads them from an
            sm_90 compile with Triton's ptxas).
            A phase given here takes them in place of the footprint's estimate (``base_registers`` is
            then unused for it), and the parameters come from ``[gpu_model_compiled]``.

    Returns: seconds per kernel and in total, launch overhead ([overhead] launch_us) included per kernel.

    Raises:
        TilegenError: the target is not a GPU, or lacks a ``[gpu_model]`` (with ``compiled``:
            ``[gpu_model_compiled]``) parameter.
    """
    from . import dtypes
    from .exprs import evaluate
    from .passes.footprint import footprints

    if target.kind != "gpu":
        raise TilegenError(f"the GPU cost model needs a GPU target; {target.name} is kind {target.kind!r}")
    p = gpu_params(target, params, compiled=compiled is not None)
    counts = counts if counts is not None else count(program)
    roof = {k.name: k for k in predict(program, target, counts).kernels}
    env = {str(k): v for k, v in program.env}
    sms = target.parallel_units
    clock = target.cores["clock_ghz"].value * 1e9
    launch = target.overhead["launch_us"].value * 1e-6 if "launch_us" in target.overhead else 0.0
    dtype = _matmul_dtype(program)
    r_tc = target.matmul_flops(dtype) / sms / clock
    r_vec, r_exp = target.rate("vector") / sms / clock, target.rate("exp") / sms / clock
    r_l2 = target.bytes_per_s("l2") / sms / clock
    smem = target.level(target.placement["operand"])
    rf = target.level(target.placement["result"])
    peaks: dict[tuple[str, str], int] = {}
    absent = {}  # per kernel, per level: buffers the emitted module does not keep there
    for kernel in program.kernels:
        absent[kernel.name, smem.name] = register_operands(kernel)
        absent[kernel.name, rf.name] = fused_temporaries(kernel)
    for fp in footprints(program, target):
        key = (fp.kernel, fp.level.name)
        peaks[key] = max(peaks.get(key, 0), int(fp.bound(env, absent.get(key, set()))))
    tensors = {t.name: t for t in program.tensors}
    out = []
    flops = 0
    for kernel in program.kernels:
        c = counts[kernel.name]
        flops += c.flops.get("matmul", 0)
        loop = _innermost_tile_loop(kernel)
        w = (warps or {}).get(kernel.phase, default_warps(target))
        if loop is None or not c.flops.get("matmul"):
            t = roof[kernel.name].time_s - launch
            out.append(GpuKernelPrediction(kernel.name, kernel.phase, c.programs, w, 1, 1, 0.0, 0.0, {"roofline": t}, t))
            continue
        bufs = {b.name: b for b in kernel.buffers}
        numel = lambda name: math.prod(int(evaluate(d, env)) for d in bufs[name].shape)  # noqa: E731
        mma = per_pair = 0.0
        loaded = atomic = 0.0
        for stmt, _ in walk(loop.body):
            if isinstance(stmt, MatMul):
                m, n = (int(evaluate(d, env)) for d in bufs[stmt.dst].shape)
                a = bufs[stmt.a].shape
                kk = int(evaluate(a[0] if stmt.trans_a else a[1], env))
                per_pair += 2 * m * n * kk
                mma += 2 * m * n * kk / (r_tc * mma_efficiency(m, n, w, p))
            elif isinstance(stmt, Load):
                loaded += numel(stmt.dst) * dtypes.itemsize(tensors[stmt.src.tensor].dtype)
            elif isinstance(stmt, Store) and stmt.accumulate:
                atomic += numel(stmt.src) * dtypes.itemsize(tensors[stmt.dst.tensor].dtype)
        pairs = c.flops["matmul"] / per_pair
        per_program = pairs / max(c.programs, 1)
        vec = (p["vector_issue"] * c.flops.get("vector", 0) / r_vec + c.flops.get("exp", 0) / r_exp) / pairs
        l2 = (loaded + p["atomic_cost"] * atomic) / r_l2
        stages = max(b.stages for b in kernel.buffers)
        threads = 32 * w
        facts = (compiled or {}).get(kernel.phase)
        if facts is not None:
            regs = float(facts["registers"])
            spill = float(facts["stack_bytes"]) / 4 / 255
        else:
            regs = peaks.get((kernel.name, rf.name), 0) / 4 / threads + p["base_registers"]
            spill = max(0.0, regs - 255) / 255
        chain = (max(mma, vec) + (1 - min(p["overlap"], 1.0)) * min(mma, vec) + p["tile_cycles"]) * (1 + p["spill_cost"] * spill)
        latency = chain + max(0.0, l2 + p["load_latency_cycles"] - (stages - 1) * chain)
        busiest = max(mma, vec, l2)
        alloc = min(255, math.ceil(max(regs, 1) / 8) * 8)
        shared = max(int(facts["shared_bytes"]) if facts is not None else peaks.get((kernel.name, smem.name), 0), 1)
        resident = max(1, min(smem.usable // shared, int(rf.capacity.value) // 4 // (threads * alloc), 64 // w))
        n = max(c.programs, 1)
        full, rest = divmod(n, sms * resident)
        cycles = full * per_program * max(latency, resident * busiest)
        if rest:
            last = math.ceil(rest / sms)
            cycles += per_program * max(latency, last * busiest)
        terms = {"mma": mma, "vec": vec, "l2": l2, "tile": p["tile_cycles"], "latency": latency, "busiest": busiest}
        out.append(GpuKernelPrediction(kernel.name, kernel.phase, c.programs, w, stages, resident, regs, per_program, terms, cycles / clock))
    time_s = sum(k.time_s for k in out) + launch * len(out)
    return GpuPrediction(tuple(out), time_s, int(flops))
