"""The emitted-code model of the Ascend C backend: the kernels ``tilegen generate`` emits for an Ascend
target, priced helper by helper from the target's ``[timeline]`` table (see the comment below)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tilegen.backends.ascendc import ops as O
from tilegen.core.errors import TilegenError
from tilegen.models.analysis import count
from tilegen.models.cost import hbm_floor_s, matmul_dtype, start_overhead_s
from tilegen.passes.ascend.snake_deal import deal_of
from tilegen.passes.ascend.stream_programs import Stream

# --- the emitted code's model (Ascend C) -------------------------------------------------------------
#
# The roofline (tilegen.models.cost) assumes every unit overlaps every other. The model below describes the kernels
# `tilegen generate` emits for an Ascend target as they are written: each runtime helper
# (tilegen_runtime.h) costs what its instructions cost on their pipes (the [timeline] table of the
# target), its scalar issue overlapping its pipe work unless a helper makes the scalar unit wait (each
# typed op's cost is its own method, tilegen.backends.ascendc.ops.Op.cycles, Matmul.steps for a product's
# k-steps; the per-instruction figures are timeline.Costs', those the timeline prices traced instructions
# with); the
# helpers of one core run one after another (each begins by waiting for the pipe before it), except the
# cube's products (their k-steps' LoadData on MTE1 beside the Mmads on M, one L0A/L0B half each; a
# chunked product's Mmads into an L0C half after that half's last Fixpipe, its Fixpipes on FIX beside
# the next chunk's Mmads: tilegen::Cube), and except the
# copies whose closing wait is on the consuming pipe, not on the scalar unit (LoadNz, LoadRows, StoreRows,
# FixpipeRows: _ASYNC, and the hand-offs' copies after their flag waits): the scalar unit issues on past
# them, their pipe runs them in order (a hand-off's flag is set on that pipe after its copy), and the next
# compute helper starts when they are done (a copy with the knob @wait_at_read: when its WaitLoaded
# is reached, so the helpers in between overlap it; a store with @wait_at_rewrite: at the
# WaitMte3ToV before its tile's next writer, op WaitStored); the AIC
# and the AIVs run concurrently and meet only at the hand-offs (a GM slot, a ready and a free flag with
# the cross-core flag latency each; a hand-off with several slots waits for a free flag only when it
# reuses one, and each ready flag id is its own queue). A software-pipelined loop (ops.PipelinedLoop,
# @pipelined) is unrolled as each unit issues it, in the order of its one expansion (ops.expand, which
# the template renders too): its earlier stage of the first d pairs (d = @pipelined lookahead), then per
# pair k its earlier stage of pair k + d before its later stage of pair k (a hoisted receive of pair k
# between the earlier stage's first receive and its rest), so the model overlaps the cube and the
# vector exactly where the schedule does. Per kernel instance that is a two-process schedule at helper
# granularity; its period per tile pair (cut by the mask or not) and its fixed part give every
# instance, and the instances are dealt over the cores as the kernels deal them.


def _chunks(n: int, width: int) -> list[int]:
    """The column widths of a product of n columns computed in chunks of ``width`` (@n_chunk)."""
    return [min(width, n - n0) for n0 in range(0, n, width)]


def _unrolled(ops: list[O.Op], pattern: list[bool]) -> list[tuple[O.Op, bool]]:
    """The ops of one kernel instance in program order, the innermost loop's body once per entry of
    ``pattern`` (True: a tile pair the mask cuts); outer loops' own ops once; a pipelined loop in the
    order its expansion gives (:meth:`tilegen.backends.ascendc.ops.Expansion.order`)."""
    out: list[tuple[O.Op, bool]] = []
    for op in ops:
        if isinstance(op, O.Stream):  # @stream: one instance alone is its openings, its loop, its closing
            out.extend((o, False) for o in op.open_a + op.open_b)
            out.extend(_unrolled([op.ploop], pattern))
            out.extend((o, False) for o in op.close)
        elif isinstance(op, O.PipelinedLoop):
            out.extend((o, pattern[k]) for o, k in op.expansion.order(len(pattern)))
        elif not isinstance(op, O.Loop):
            out.append((op, False))
        elif any(isinstance(o, (O.Loop, O.PipelinedLoop)) for o in op.body):
            out.extend(_unrolled(list(op.body), pattern))
        else:
            for cut in pattern:
                out.extend((o, cut) for o in op.body)
    return out


# Copies that do not stop the scalar unit (tilegen_runtime.h: their last wait is a SetFlag/WaitFlag pair
# whose wait runs on the consuming pipe), by op class, with the pipe they occupy.
_ASYNC = {O.L1Load: "MTE2", O.FixStore: "FIX", O.UbLoad: "MTE2", O.UbStore: "MTE3"}
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

    def matmul(s: str, op: O.Matmul, ready: float, m_ready: float = 0.0, n: int | None = None) -> float:
        """Schedule a MatmulTile's k-steps on the AIC: each step's loads on MTE1 after ``ready``, the
        MTE1 before and the Mmad that last read its half; its Mmad on M after them, the Mmads before and
        ``m_ready`` (an L0C half's last Fixpipe). Returns the end of its last Mmad."""
        _, steps = op.steps(costs, k_step, n)
        end = 0.0
        for load, mmad in steps:
            h = ab_ring[0]
            start = max(ready, pipe_free[s].get("MTE1", 0.0), ab_free[h])
            pipe_free[s]["MTE1"] = loaded = start + load
            pipe_free[s]["M"] = end = ab_free[h] = max(loaded, pipe_free[s].get("M", 0.0), m_ready) + mmad
            ab_ring[0] = 1 - h
        return end

    def copy(s: str, pipe: str, t: float, op: O.Op, cut: bool) -> float:
        """Issue ``op``'s copy at ``t`` on ``pipe`` of side ``s`` (after the pipe's earlier copies): its end.
        A store with a chunked product (MatmulStore) computes each chunk on M when its L0C half is free
        and drains it on FIX: the end of the last Fixpipe; M stays busy until the last chunk's Mmad."""
        product = getattr(op, "product", None)
        if product is None:
            start = max(t + _ASYNC_ISSUE * issue, pipe_free[s].get(pipe, 0.0))
            if pipe == "FIX":  # FixpipeRows waits for the Mmads before it (M -> FIX)
                start = max(start, pipe_free[s].get("M", 0.0))
            pipe_free[s][pipe] = end = start + op.cycles(costs, cut, valid)
            return end
        end = t
        for nc in _chunks(product.n, product.n_chunk):
            h = ring[0]
            done = matmul(s, product, after_copies(s, t), half_free[h], nc)
            start = max(done, pipe_free[s].get(pipe, 0.0))
            part = dataclasses.replace(op, cols=nc)
            pipe_free[s][pipe] = end = half_free[h] = start + part.cycles(costs, cut, valid)
            ring[0] = 1 - h
        return end

    def issued(op: O.Op) -> float:
        """Scalar cycles to issue ``op`` when it is a copy (a chunked product's Mmads included)."""
        product = getattr(op, "product", None)
        if product is None:
            return _ASYNC_ISSUE * issue
        return sum(_ASYNC_ISSUE * issue + product.steps(costs, k_step, nc)[0] for nc in _chunks(product.n, product.n_chunk))

    done_waited: set[tuple[str, int]] = set()  # (side, position) of a @wait_done load whose done flag arrived

    while any(pos[s] < len(sides[s]) for s in sides):
        progressed = False
        for s in sides:
            while pos[s] < len(sides[s]):
                op, cut = sides[s][pos[s]]
                t = clock[s]
                pipe = _ASYNC.get(type(op))
                if isinstance(op, O.UbLoad) and op.wait_done >= 0 and (s, pos[s]) not in done_waited:  # @wait_done: the cube's done flag first
                    q = ready.get((s, "done"))
                    if not q:
                        break
                    t = clock[s] = max(t + issue, q.pop(0))
                    done_waited.add((s, pos[s]))
                if isinstance(op, O.DoneSignal):  # @signal_done: set on FIX after the program's stores
                    ready.setdefault((other[s], "done"), []).append(max(t, pipe_free[s].get("FIX", 0.0)) + x_lat)
                    t += issue
                elif pipe is not None and getattr(op, "product", None):  # MatmulStore: nothing on the AIC waits for its Fixpipes
                    copy(s, pipe, t, op, cut)
                    t += issued(op)
                elif pipe is not None:
                    end = copy(s, pipe, t, op, cut)
                    if isinstance(op, O.L1Load) and op.defer:
                        deferred[s][op.dst] = end
                    elif isinstance(op, O.UbStore) and not op.closing:
                        pass  # @wait_at_rewrite or @wait_at_next_store: waited for later (wait_stored, or the next store's wait)
                    else:
                        gate[s] = max(gate[s], *pipe_free[s].values())  # its flag orders after the pipe's earlier copies
                    t += _ASYNC_ISSUE * issue
                elif isinstance(op, O.WaitStored):  # an MTE3 -> V wait: the next vector helper after the stores before it
                    gate[s] = max(gate[s], pipe_free[s].get("MTE3", 0.0))
                    t += issue
                elif isinstance(op, O.WaitLoaded):  # a WaitFlag on MTE1: the scalar unit issues on
                    gate[s] = max(gate[s], deferred[s].pop(op.buf))
                    t += issue
                elif isinstance(op, O.WaitReceived):  # an MTE2 -> V SetWait: every copy issued on MTE2 before it
                    gate[s] = max(gate[s], deferred[s].pop(op.buf), pipe_free[s].get("MTE2", 0.0))
                    t += issue
                elif isinstance(op, O.FreeMte2):  # @free_early: the tile's event, raised after the vector work before it
                    freed[op.buf] = t
                    t += issue
                elif isinstance(op, (O.C2VRecv, O.V2CRecv)):
                    start = freed.get(op.buf) if isinstance(op, O.C2VRecv) and op.free_event else None
                    if op.wait:  # a load of a group whose flag was waited for: no wait
                        q = ready.get((s, op.ready))
                        if not q:
                            break
                        flag = q.pop(0)
                        t = max(t + issue, flag)
                        start = None if start is None else max(start, flag)
                    # the copy runs on MTE2 while the scalar unit issues on (with @free_early from its
                    # tile's last access, not after the vector work before it); the free flag is set on
                    # MTE2 after it, and the next compute helper waits for it
                    end = copy(s, "MTE2", t if start is None else start, op, cut)
                    if isinstance(op, O.C2VRecv) and op.defer:  # @wait_at_read: waited for at its tile's first reader (wait_received)
                        deferred[s][op.buf] = end
                    else:
                        gate[s] = max(gate[s], end)
                    t += _ASYNC_ISSUE * issue + issue
                    free.setdefault(op.free, []).append(end + x_lat)
                elif isinstance(op, (O.C2VSend, O.V2CSend)):
                    if sent.get(op.free, 0) >= op.slots:  # a slot reused: wait for its free flag
                        q = free.get(op.free, [])
                        if not q:
                            break
                        t = max(t + issue, q.pop(0))
                    sent[op.free] = sent.get(op.free, 0) + 1
                    # the copy runs on its pipe (Fixpipe, MTE3) while the scalar unit issues on; the ready
                    # flag is set on that pipe after it, and the next compute helper waits for it (not
                    # after a chunked product: the next Mmads wait for their L0C half only)
                    end = copy(s, _SEND_PIPE[s], t, op, cut)
                    closing = op.closing if isinstance(op, O.V2CSend) else True
                    if not getattr(op, "product", None) and closing:  # else: at its wait_stored
                        gate[s] = max(gate[s], end)
                    t += issued(op) + issue
                    if op.signal:  # the last store of a group sets its one ready flag
                        ready.setdefault((other[s], op.ready), []).append(end + x_lat)
                elif s == "cube" and isinstance(op, O.Matmul):  # MTE1 and M as the k-steps allow; the scalar unit issues on
                    matmul(s, op, after_copies(s, t))
                    t += op.steps(costs, k_step)[0]
                elif s == "cube" and isinstance(op, O.ZeroAcc):  # waits for every Mmad before it (M -> MTE1), and they for it
                    t = max(after_copies(s, t), pipe_free[s].get("M", 0.0)) + op.cycles(costs, cut, valid)
                    pipe_free[s]["M"] = pipe_free[s]["MTE1"] = ab_free[0] = ab_free[1] = t
                else:
                    t = after_copies(s, t) + op.cycles(costs, cut, valid)
                clock[s] = t
                pos[s] += 1
                progressed = True
        if not progressed:
            raise TilegenError(f"the emitted-code model of {kplan.name} deadlocks (a hand-off without its partner)")
    # the drains at kernel end: each sender waits for its copies and the last free flag of every slot it used
    for s in sides:
        clock[s] = max([after_copies(s, clock[s]), *pipe_free[s].values()])
        for op, _ in sides[s]:
            if isinstance(op, (O.C2VSend, O.V2CSend)) and free.get(op.free):
                clock[s] = max(clock[s], free[op.free][-1])
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
            p_prog = max(sum(o.cycles(costs) for o in op.open_a + op.open_b + op.close
                             if not isinstance(o, (O.DoneSignal, O.WaitStored, O.WaitLoaded, O.WaitReceived, O.Rotate, O.FreeMte2)))
                         for side, op in stream.items())
            fill = sim(4, 0) - 4 * p_full - p_prog  # an instance alone: its fill, its pairs, its opening and closing
            per_tile = np.array([int(f) * p_full + int(c) * p_cut + p_prog for f, c in zip(pairs - cut, cut)])
            t = (deal(per_tile, counts[kir.name].programs, tgt.parallel_units, deal_of(kir)) + fill) / clock
        else:
            per_tile = np.array([sim(min(int(f), 4), int(c), v) + max(int(f) - 4, 0) * p_full
                                 for f, c, v in zip(pairs - cut, cut, valid)])
            t = deal(per_tile, counts[kir.name].programs, tgt.parallel_units, deal_of(kir)) / clock
        t += sum(op.cycles(costs) for op in kplan.aiv.prologue) / clock  # once per core, every core at once
        out.append((kplan.name, max(t, hbm_floor_s(prog, kir, counts[kir.name], tgt))))
        flops += counts[kir.name].flops.get("matmul", 0)
    time_s = sum(t for _, t in out) + sum(start_overhead_s(k, tgt) for k in prog.kernels)
    util = flops / (time_s * tgt.matmul_flops(matmul_dtype(prog))) if time_s > 0 else 0.0
    return EmittedPrediction(tuple(out), time_s, util)
