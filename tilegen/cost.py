"""Cost model: FLOPs by unit, bytes by level, and a predicted time per kernel and in total.

For each kernel of a bound, placed program (counts from :mod:`tilegen.analysis`, which equal what the
interpreter measures):

- work: matmul FLOPs on the cube / tensor cores; vector element-operations and exp/log operations on
  the vector unit; bytes of HBM tensors (inputs, outputs, workspaces) over HBM; bytes of per-core
  hand-off tiles over L2 (they stay L2-resident: their size does not depend on N);
- parallelism: the kernel's program instances run on ``P`` cores (AIC count or SMs) in waves; with
  ``n`` instances the busy fraction is ``n / (ceil(n / P) · P)``, and every rate is scaled by it;
- time = max(cube time, vector time (plain + exp, one unit), HBM time, L2 time) + launch overhead.
  Each unit is assumed to overlap the others perfectly (a roofline), load imbalance between programs
  (causal masks) is ignored; both make the prediction a lower bound.

Utilization = matmul FLOPs / (time · peak matmul rate).

With a mask mod the counts cover the non-empty tile pairs only (empty ones are skipped), the partial
ones carrying the mask's vector work (:func:`tilegen.analysis.count`); when the classes are known only
at run time (a mask of parameters without values) every tile in the window's bounds counts as visited
and partial, an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .analysis import Counts, count
from .errors import TilegenError
from .ir import MatMul, Program, walk
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


def predict(program: Program, target: Target, counts: dict[str, Counts] | None = None) -> Prediction:
    """The cost model's prediction for a bound program on ``target`` (see the module docstring)."""
    counts = counts if counts is not None else count(program)
    kinds = {t.name: t.kind for t in program.tensors}
    dtype = _matmul_dtype(program)
    cores = target.parallel_units
    launch = target.overhead["launch_us"].value * 1e-6 if "launch_us" in target.overhead else 0.0
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
        time_s = times[bound] + launch
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
# copies whose closing wait is on the consuming pipe, not on the scalar unit (LoadNz, LoadRows, StoreRows,
# FixpipeRows: _ASYNC): the scalar unit issues on past them, their pipe runs them in order, and the next
# compute helper starts when they are done (a copy with the knob Load.wait_at_read: when its WaitLoaded
# is reached, so the helpers in between overlap it); the AIC
# and the AIVs run concurrently and meet only at the hand-offs (a GM slot, a ready and a free flag with
# the cross-core flag latency each). Per kernel instance that is a two-process schedule at helper
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
    es = _ESIZE.get(op.get("ctype", "float"), 4)
    if side == "vector":
        rows = int(op.get("rows", 1))
        if kind in ("ub_load", "c2v_recv", "ub_store", "v2c_send"):
            n = rows * es if op.get("vector") else rows * int(op["cols"]) * es
            write = kind in ("ub_store", "v2c_send")
            extra = 2 * issue if op.get("atomic") else 0.0
            return max(5 * issue + extra, 2 * fl + dma(n, kind in ("c2v_recv", "v2c_send"), write))
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
        if kind == "reduce":
            # a ReduceRepeat per 64 columns over every row, the later chunks combined with Max/Add
            n = math.ceil(int(op["cols"]) / 64)
            v_cycles = n * (vs + rows * c["vector_reduce_repeat_cycles"]) + (n - 1) * vec(rows)
            return max((2 * n - 1) * issue, v_cycles)
        if kind == "zero_if_neginf":
            # copy to the 64-aligned row, Compares, Select, copy back (vector ops, issued ahead)
            n = int(op["count"])
            return max(4 * issue, 2 * vec(n) + 2 * vec(math.ceil(n / 64) * 64))
        if kind in ("rows_add", "rows_mul", "rows_div"):
            # Brcb of the row factors (one group: the scratch holds every row on the built-in specs),
            # then an Add/Sub/Mul over the rows per 64 columns
            chunks = math.ceil(int(op["cpad"]) / 64)
            v_cycles = vs + math.ceil(rows / 8) * c["vector_brcb_repeat_cycles"] + chunks * (vs + rows * vr)
            n_issue = 1 + chunks
            if kind == "rows_div":  # the factors 1 / v first: copy, Compares, Reciprocal, Select
                v_cycles += vec(rows) + 3 * vec(math.ceil(rows / 64) * 64)
                n_issue += 4
            return max(n_issue * issue, v_cycles)
        if kind == "mask":
            if op.get("cut_only") and not cut:
                return 0.0  # MaskTile returns before any instruction on a tile it does not cut
            cpad = int(op["cpad"])
            # CreateVecIndex (tilegen_runtime.h): 8 scalar writes, an S->V pair, then 7 block and
            # cpad / 64 - 1 repeat Adds on V, each issued after the barrier of the one before
            adds = 7 + max(math.ceil(cpad / 64) - 1, 0)
            fixed = 2 * issue + 2 * fl + 8 * (issue + wr) + adds * max(2 * issue, vs + vr)
            if valid is None:
                per_rows = rows * max(4 * issue, 4 * vec(cpad))
            else:
                per_rows = (rows - min(max(valid, 0), rows)) * max(issue, vec(cpad))
            return fixed + (per_rows if cut else 0.0)
        raise TilegenError(f"the emitted-code model has no cost for the vector op {kind}")
    if kind in ("l1_load", "v2c_recv"):
        rows, cols = int(op["rows"]), int(op["cols"])
        l2 = kind == "v2c_recv"
        if op.get("rowwise"):
            return max((4 + rows) * issue, 2 * fl + rows * dma(cols * es, l2, False))
        return max(5 * issue, 2 * fl + dma(rows * cols * es, l2, False))
    if kind == "matmul":
        m, n, k = int(op["m"]), int(op["n"]), int(op["k"])
        m1, n1 = math.ceil(m / 16), math.ceil(n / 16)
        s_cycles = chain = 0.0
        for k0 in range(0, k, k_step):
            kc1 = math.ceil(min(k_step, k - k0) / 16)
            load_a = m1 * (c["mte1_startup_cycles"] + kc1 * 512 / c["l0a_bytes_per_cycle"])
            load_b = kc1 * (c["mte1_startup_cycles"] + n1 * 512 / c["l0b_bytes_per_cycle"])
            mmad = c["mmad_startup_cycles"] + m1 * n1 * kc1 / c["mmad_fractals_per_cycle"]
            chain += fl + load_a + load_b + fl + mmad
            s_cycles += (5 + m1 + kc1) * issue
        return max(s_cycles + 2 * issue, chain + fl)
    if kind == "zero_acc":
        m1, n1 = math.ceil(int(op["m"]) / 16), math.ceil(int(op["n"]) / 16)
        fill = 2 * c["mte1_startup_cycles"] + (m1 + n1) * 512 / c["l0a_bytes_per_cycle"]
        return max(9 * issue, 3 * fl + fill + c["mmad_startup_cycles"] + m1 * n1)
    if kind in ("fix_store", "c2v_send"):
        nbytes = int(op["m"]) * int(op["cols"]) * 4
        l2 = kind == "c2v_send"
        lat = c["gm_l2_latency_cycles"] if l2 else c["gm_hbm_latency_cycles"]
        rate = c["fix_l2_bytes_per_cycle"] if l2 else c["fix_hbm_bytes_per_cycle"]
        extra = 2 * issue if op.get("atomic") else 0.0
        return max(5 * issue + extra, 2 * fl + c["fix_startup_cycles"] + lat + nbytes / rate)
    raise TilegenError(f"the emitted-code model has no cost for the cube op {kind}")


def _unrolled(ops: list[dict], pattern: list[bool]) -> list[tuple[dict, bool]]:
    """The ops of one kernel instance in program order, the innermost loop's body once per entry of
    ``pattern`` (True: a tile pair the mask cuts); outer loops' own ops once."""
    out: list[tuple[dict, bool]] = []
    for op in ops:
        if op["kind"] != "loop":
            out.append((op, False))
        elif any(o["kind"] == "loop" for o in op["body"]):
            out.extend(_unrolled(op["body"], pattern))
        else:
            for cut in pattern:
                out.extend((o, cut) for o in op["body"])
    return out


# Copies that do not stop the scalar unit (tilegen_runtime.h: their last wait is a SetFlag/WaitFlag pair
# whose wait runs on the consuming pipe), by side and plan op, with the pipe they occupy.
_ASYNC = {("cube", "l1_load"): "MTE2", ("cube", "fix_store"): "FIX", ("vector", "ub_load"): "MTE2", ("vector", "ub_store"): "MTE3"}
_ASYNC_ISSUE = 5  # instructions a copy helper issues (two flag pairs and the copy)


def _instance_cycles(kplan, costs, pattern: list[bool], k_step: int, valid: int | None = None) -> float:
    """The two-process schedule (AIC, one AIV: the other is its mirror) of one kernel instance;
    ``valid``: the Q rows of the instance's tile inside Sq on the first AIV (a forward instance of the
    last Q tile), None: all."""
    x_lat, issue = costs["cross_core_flag_cycles"], costs.issue()
    sides = {"cube": _unrolled(kplan.aic.ops, pattern), "vector": _unrolled(kplan.aiv.ops, pattern)}
    pos = {s: 0 for s in sides}
    clock = {s: 0.0 for s in sides}
    ready = {"cube": [], "vector": []}  # tokens for the side that receives: times
    free: dict[str, list[float]] = {}  # free flag id -> times set by the receiver
    sent: dict[str, int] = {}
    other = {"cube": "vector", "vector": "cube"}
    pipe_free: dict[str, dict[str, float]] = {s: {} for s in sides}  # the copies' pipes: free from (cycles)
    # the end of the copies waited for (every later compute helper waits for them); a copy with
    # Load.wait_at_read joins it at its WaitLoaded, not at its issue
    gate = {s: 0.0 for s in sides}
    deferred: dict[str, dict[str, float]] = {s: {} for s in sides}  # tile -> end of its deferred copy

    def after_copies(s: str, t: float) -> float:
        return max(t, gate[s])

    while any(pos[s] < len(sides[s]) for s in sides):
        progressed = False
        for s in sides:
            while pos[s] < len(sides[s]):
                op, cut = sides[s][pos[s]]
                kind = op["kind"]
                t = clock[s]
                pipe = _ASYNC.get((s, kind))
                if pipe is not None:
                    start = max(t + _ASYNC_ISSUE * issue, pipe_free[s].get(pipe, 0.0))
                    pipe_free[s][pipe] = end = start + _helper_cycles(op, costs, s, cut, k_step, valid)
                    if op.get("defer"):
                        deferred[s][op["dst"]] = end
                    else:
                        gate[s] = max(gate[s], *pipe_free[s].values())  # its flag orders after the pipe's earlier copies
                    t += _ASYNC_ISSUE * issue
                elif kind == "wait_loaded":  # a WaitFlag on MTE1: the scalar unit issues on
                    gate[s] = max(gate[s], deferred[s].pop(op["buf"]))
                    t += issue
                elif kind in ("c2v_recv", "v2c_recv"):
                    if op.get("wait", True):  # a load of a group whose flag was waited for: no wait
                        if not ready[s]:
                            break
                        t = max(after_copies(s, t) + issue, ready[s].pop(0))
                    else:
                        t = after_copies(s, t)
                    t += _helper_cycles(op, costs, s, cut, k_step, valid) + issue
                    free.setdefault(op["free"], []).append(t + x_lat)
                elif kind in ("c2v_send", "v2c_send"):
                    if sent.get(op["free"], 0) > 0:
                        q = free.get(op["free"], [])
                        if not q:
                            break
                        t = max(t + issue, q.pop(0))
                    t = after_copies(s, t)
                    sent[op["free"]] = sent.get(op["free"], 0) + 1
                    t += _helper_cycles(op, costs, s, cut, k_step, valid) + issue
                    if op.get("signal", True):  # the last store of a group sets its one ready flag
                        ready[other[s]].append(t + x_lat)
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
    """The emitted-code model of one program: seconds per kernel (in launch order, launch overhead
    excluded), total seconds (launch overhead included) and the matmul utilisation."""

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
    launch = tgt.overhead["launch_us"].value * 1e-6 if "launch_us" in tgt.overhead else 0.0
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
        p_full = sim(3, 0) - sim(2, 0)  # the steady period of a pair the mask does not cut
        per_tile = np.array([sim(min(int(f), 2), int(c), v) + max(int(f) - 2, 0) * p_full
                             for f, c, v in zip(pairs - cut, cut, valid)])
        out.append((kplan.name, deal(per_tile, counts[kir.name].programs, tgt.parallel_units) / clock))
        flops += counts[kir.name].flops.get("matmul", 0)
    time_s = sum(t for _, t in out) + launch * len(out)
    util = flops / (time_s * tgt.matmul_flops(_matmul_dtype(prog))) if time_s > 0 else 0.0
    return EmittedPrediction(tuple(out), time_s, util)
