"""The emitted-code model of the Ascend C backend: the kernels ``tilegen generate`` emits for an Ascend
target, priced helper by helper from the target's ``[timeline]`` table (see the comment below)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilegen.core.errors import TilegenError
from tilegen.models.analysis import count
from tilegen.models.cost import hbm_floor_s, matmul_dtype, start_overhead_s
from tilegen.passes.ascend.snake_deal import deal_of
from tilegen.passes.ascend.stream_programs import Stream

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
# compute helper starts when they are done (a copy with the knob @wait_at_read: when its WaitLoaded
# is reached, so the helpers in between overlap it; a store with @wait_at_rewrite: at the
# WaitMte3ToV before its tile's next writer, op wait_stored); the AIC
# and the AIVs run concurrently and meet only at the hand-offs (a GM slot, a ready and a free flag with
# the cross-core flag latency each; a hand-off with several slots waits for a free flag only when it
# reuses one, and each ready flag id is its own queue). A software-pipelined loop (plan op ``ploop``,
# @pipelined) is unrolled as each unit issues it: its earlier stage of the first d pairs (d =
# @pipelined lookahead), then per pair k its earlier stage of pair k + d before its later stage of pair k (a
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
    """The column widths of a product of n columns computed in chunks of ``width`` (@n_chunk)."""
    return [min(width, n - n0) for n0 in range(0, n, width)]


def _unrolled(ops: list[dict], pattern: list[bool]) -> list[tuple[dict, bool]]:
    """The ops of one kernel instance in program order, the innermost loop's body once per entry of
    ``pattern`` (True: a tile pair the mask cuts); outer loops' own ops once."""
    out: list[tuple[dict, bool]] = []
    for op in ops:
        if op["kind"] == "stream":  # @stream: one instance alone is its openings, its loop, its closing
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
                out.extend((o, cut) for o in op.get("hoisted", []))  # @hoist: beside the rest of the earlier stage
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
    # @wait_at_read joins it at its WaitLoaded, not at its issue
    gate = {s: 0.0 for s in sides}
    deferred: dict[str, dict[str, float]] = {s: {} for s in sides}  # tile -> end of its deferred copy
    freed: dict[str, float] = {}  # @free_early: tile -> when its last access raised its V -> MTE2 event

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
                if op.get("wait_done", -1) >= 0 and not op.get("done_waited"):  # @wait_done: the cube's done flag first
                    q = ready.get((s, "done"))
                    if not q:
                        break
                    t = clock[s] = max(t + issue, q.pop(0))
                    op = dict(op, done_waited=True)
                    sides[s][pos[s]] = (op, cut)
                if kind == "done_signal":  # @signal_done: set on FIX after the program's stores
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
                        pass  # @wait_at_rewrite: waited for at its tile's next writer (wait_stored)
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
                elif kind == "free_mte2":  # @free_early: the tile's event, raised after the vector work before it
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
                    # the copy runs on MTE2 while the scalar unit issues on (with @free_early from its
                    # tile's last access, not after the vector work before it); the free flag is set on
                    # MTE2 after it, and the next compute helper waits for it
                    end = copy(s, "MTE2", t if start is None else start, op, cut)
                    if op.get("defer"):  # @wait_at_read: waited for at its tile's first reader (wait_received)
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
        TilegenError: the target has no ``[timeline]`` table (``tilegen.backends.ascendc.timeline.TimelineError``).
        SpecError: ``program`` is not ``"fwd"`` or ``"bwd"``.
        TargetError, SpecError: as :func:`tilegen.backends.ascendc.plan_programs`.
    """
    from tilegen.backends import ascendc
    from tilegen.core.errors import SpecError
    from tilegen.core.ir import grid_loops
    from tilegen.backends.ascendc.timeline import Costs, TimelineError, deal, tile_counts

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
        if kir.has(Stream):
            # @stream: a core's instances overlap; each costs its pairs at the steady period (a cut
            # pair's from four cut pairs after four full ones) and its opening and closing helpers on the
            # busier side; the pipeline fills once per core
            p_cut = p_full + (sim(4, 4) - sim(8, 0)) / 4
            stream = {side: kplan_side.ops[0] for side, kplan_side in (("cube", kplan.aic), ("vector", kplan.aiv))}
            p_prog = max(sum(_helper_cycles(o, costs, side, False, k_step) for o in op["open_a"] + op["open_b"] + op["close"]
                             if o["kind"] not in ("done_signal", "wait_stored", "wait_loaded", "wait_received", "rotate", "free_mte2"))
                         for side, op in stream.items())
            fill = sim(4, 0) - 4 * p_full - p_prog  # an instance alone: its fill, its pairs, its opening and closing
            per_tile = np.array([int(f) * p_full + int(c) * p_cut + p_prog for f, c in zip(pairs - cut, cut)])
            t = (deal(per_tile, counts[kir.name].programs, tgt.parallel_units, deal_of(kir)) + fill) / clock
        else:
            per_tile = np.array([sim(min(int(f), 4), int(c), v) + max(int(f) - 4, 0) * p_full
                                 for f, c, v in zip(pairs - cut, cut, valid)])
            t = deal(per_tile, counts[kir.name].programs, tgt.parallel_units, deal_of(kir)) / clock
        out.append((kplan.name, max(t, hbm_floor_s(prog, kir, counts[kir.name], tgt))))
        flops += counts[kir.name].flops.get("matmul", 0)
    time_s = sum(t for _, t in out) + sum(start_overhead_s(k, tgt) for k in prog.kernels)
    util = flops / (time_s * tgt.matmul_flops(matmul_dtype(prog))) if time_s > 0 else 0.0
    return EmittedPrediction(tuple(out), time_s, util)
