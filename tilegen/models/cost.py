"""Cost model: FLOPs by unit, bytes by level, and a predicted time per kernel and in total.

For each kernel of a bound, placed program (counts from :mod:`tilegen.models.analysis`, which equal what the
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
ones carrying the mask's vector work (:func:`tilegen.models.analysis.count`); when the classes are known only
at run time (a mask of parameters without values) every tile in the window's bounds counts as visited
and partial, an upper bound.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


from tilegen.core import dtypes
from tilegen.models.analysis import Counts, count
from tilegen.core.errors import TilegenError
from tilegen.core.ir import Load, Loop, MatMul, Program, Store, walk
from tilegen.core.targets import Target


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


def matmul_dtype(program: Program) -> str:
    for kernel in program.kernels:
        buffers = {b.name: b for b in kernel.buffers}
        for stmt, _ in walk(kernel.body):
            if isinstance(stmt, MatMul):
                return buffers[stmt.a].dtype
    return "fp16"


def start_overhead_s(kernel, target: Target) -> float:
    """Seconds before ``kernel``'s first instruction: a launch (``[overhead] launch_us``), or for a
    kernel that runs in the previous one's launch (an annotation's ``joins_launch``: Ascend's ``@sync_all``) the all-core barrier
    ``SyncAll<false>()``, three cross-core flag hops (the AIVs to their AIC, all AICs, the AIC to its
    AIVs: impl/basic_api/dav_c220/kernel_operator_sync_impl.h SyncAllImpl) at ``[timeline]
    cross_core_flag_cycles`` each (an estimate; the launch's figure where the table has none). The
    barrier's PipeBarrier<PIPE_ALL> is the previous kernel's end."""
    launch = target.overhead["launch_us"].value * 1e-6 if "launch_us" in target.overhead else 0.0
    hop = target.timeline.get("cross_core_flag_cycles")
    if not any(a.joins_launch() for a in kernel.ann) or hop is None:
        return launch
    return 3 * hop.value / (target.cores["clock_ghz"].value * 1e9)


def predict(program: Program, target: Target, counts: dict[str, Counts] | None = None) -> Prediction:
    """The cost model's prediction for a bound program on ``target`` (see the module docstring)."""
    counts = counts if counts is not None else count(program)
    kinds = {t.name: t.kind for t in program.tensors}
    dtype = matmul_dtype(program)
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


def hbm_floor_s(program, kernel, counts: Counts, target) -> float:
    """The least time (s) of one launch of ``kernel`` set by the chip's HBM bandwidth: every GM tensor
    it touches (hand-off workspaces excepted) crosses HBM once, whole (its later accesses are the L2
    hits of :func:`tilegen.models.analysis.l2_reuse`). Used by both the emitted-code model and the timeline,
    whose per-core rates alone would let L2-resident re-reads outrun the chip's HBM."""
    from tilegen.core.exprs import evaluate

    env = {str(k): v for k, v in program.env}
    tensors = {t.name: t for t in program.tensors}
    nbytes = 0
    for name in set(counts.bytes_read) | set(counts.bytes_written):
        t = tensors[name]
        if t.kind != "handoff":
            nbytes += int(evaluate(t.numel, env)) * dtypes.itemsize(t.dtype)
    return nbytes / target.bytes_per_s("hbm")


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
#   vec   = ``vector_issue`` · vector ops / R_vec + exp ops / R_exp  (counts of tilegen.models.analysis per
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
# (:func:`unheld_products`: the matmuls the pass fuse-accumulation annotated).
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


def unheld_products(kernel) -> set[str]:
    """Dot results of ``kernel`` the emitted module never holds: a matmul whose annotation says so
    (:meth:`~tilegen.core.annotations.Annotation.unheld`: the GPU pass fuse-accumulation's
    ``@accumulate_into``, emitted at its add as ``X = tl.dot(a, b, X)``), so its result ``T`` takes no
    registers (PV of the forward)."""
    return {stmt.dst for stmt, _ in walk(kernel.body) if isinstance(stmt, MatMul) and any(a.unheld() for a in stmt.ann)}


def uses_gpu_model(target: Target, compiled: bool = False) -> bool:
    """Whether block-size selection scores ``target``'s candidates with :func:`predict_gpu` (a target
    whose ``[gpu_model]`` table has every parameter: a GPU's) rather than the roofline; with ``compiled``, whether
    its ``[gpu_model_compiled]`` table has every parameter the model takes with the compiler's figures."""
    table = target.gpu_model_compiled if compiled else target.gpu_model
    return bool(table) and all(k in table for k in GPU_MODEL_PARAMS if not (compiled and k == "base_registers"))


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
            program (:func:`tilegen.backends.triton.compile.compile_resources` reads them from an
            sm_90 compile with Triton's ptxas).
            A phase given here takes them in place of the footprint's estimate (``base_registers`` is
            then unused for it), and the parameters come from ``[gpu_model_compiled]``.

    Returns: seconds per kernel and in total, launch overhead ([overhead] launch_us) included per kernel.

    Raises:
        TilegenError: the target lacks a ``[gpu_model]`` (with ``compiled``: ``[gpu_model_compiled]``)
            parameter (a target that is not a GPU has none).
    """
    from tilegen.core import dtypes
    from tilegen.core.exprs import evaluate
    from tilegen.models.footprint import footprints

    p = gpu_params(target, params, compiled=compiled is not None)  # a target without the table is refused here
    counts = counts if counts is not None else count(program)
    roof = {k.name: k for k in predict(program, target, counts).kernels}
    env = {str(k): v for k, v in program.env}
    sms = target.parallel_units
    clock = target.cores["clock_ghz"].value * 1e9
    launch = target.overhead["launch_us"].value * 1e-6 if "launch_us" in target.overhead else 0.0
    dtype = matmul_dtype(program)
    r_tc = target.matmul_flops(dtype) / sms / clock
    r_vec, r_exp = target.rate("vector") / sms / clock, target.rate("exp") / sms / clock
    r_l2 = target.bytes_per_s("l2") / sms / clock
    smem = target.level(target.placement["operand"])
    rf = target.level(target.placement["result"])
    peaks: dict[tuple[str, str], int] = {}
    absent = {}  # per kernel, per level: buffers the emitted module does not keep there
    for kernel in program.kernels:
        absent[kernel.name, smem.name] = register_operands(kernel)
        absent[kernel.name, rf.name] = unheld_products(kernel)
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
