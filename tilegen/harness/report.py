"""Reports for users: the scheduled program on a target, and the store-P-versus-recompute trade-off.

:func:`inspect_report` compiles a spec's forward and backward for a target and gathers what the CLI's
``tilegen inspect`` prints (and ``--json`` dumps): the chosen tile sizes and every candidate (feasible
with its predicted time, or rejected with the overflowing level), footprint against capacity per level
and kernel (with the symbolic expression), predicted traffic, FLOPs and time per kernel, and the loop
nest with placements, for the programs the target's backend emits. Where a program records its
schedule (a GPU target's, :mod:`tilegen.passes.gpu.rows`) the report reads it from the program: the
``[[triton.schedule]]`` row used, every row that applied but did not fit, with the reason, and
``emitted``: the schedule the generated module launches (tile sizes and their source,
``num_warps``/``num_stages`` per kernel and theirs), the same dict as the manifest's. The report's
``backend`` names the backend and how it words the target's parts. The picture of a report is
:func:`tilegen.harness.plot.plot_inspect`.

:func:`tradeoff_report` compares the unfused backward that stores P and dS in HBM with the fused
recompute backward: memory held, bytes moved and predicted time, per head, per layer and per model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilegen.core import dtypes
from tilegen.models.analysis import count, total
from tilegen.harness.memory import device_memory_warning, format_bytes, format_seconds, tensor_bytes  # noqa: F401 (re-exported)
from tilegen.core.errors import NoTileFits
from tilegen.core.printer import fmt_expr, format_program
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import Target, load_target
from tilegen.backends import compile_backward, compile_forward
from tilegen.passes.driver import PassLog
from tilegen.passes.gpu.rows import ESTIMATE_MARK
from tilegen.harness.text import WIDTH, format_inspect, format_summary, format_tradeoff, wrap_lines  # noqa: F401 (re-exported)

MIB = 1 << 20
INT32_MAX = 2**31 - 1


DQ_DIRECT = ", one K/V tile: D and dQ in main (pass direct-dq)"
DQ_TRANSPOSED = ", dq kernel on Bc x Br tiles (pass transpose-dq-tiles)"


def _dq_direct_entry(program) -> dict:
    """Whether the pass direct-dq folded the backward ``program`` and, where not, why (as the pass
    recorded it: attrs ``dq_direct``, ``dq_direct_kept``)."""
    return {"folded": bool(program.attr("dq_direct")), "why": program.attr("dq_direct_kept") or ""}


def block_report(program) -> dict | None:
    """The block classes of a program with a mask mod, as plain data (None without one): ``source``
    (compile time, the spec's parameter values, or run-time only), ``table_shape`` [Bm, Hm, nQ, nK],
    ``per`` (the (b, h) the counts cover), the counts ``empty``, ``partial``, ``full``, ``total`` (None
    when the classes are known only at run time) and ``visited`` (tile pairs the loops run: every
    non-empty one, or the window's upper bound)."""
    from tilegen.models.analysis import program_block_classes

    classes = program_block_classes(program)
    if classes is None:
        return None
    env = {str(k): int(v) for k, v in program.env}
    nq, nk = -(-env["Sq"] // env["Br"]), -(-env["Sk"] // env["Bc"])
    dep_b, dep_h = program.mods.mask_depends()
    shape = [env["B"] if dep_b else 1, env["Hq"] if dep_h else 1, nq, nk]
    per = "each (b, h)" if not (dep_b or dep_h) else ("all (b, h)" if dep_b and dep_h else ("each h, all b" if dep_b else "each b, all h"))
    out = {"source": classes.source, "table_shape": shape, "per": per, "empty": None, "partial": None, "full": None, "total": nq * nk * shape[0] * shape[1]}
    counts = classes.counts()
    if counts is not None:
        out.update(counts)
        out["visited"] = counts["partial"] + counts["full"]
    return out


def _program_report(label: str, program, log: PassLog, target: Target | None, expressions: bool) -> dict:
    counts = count(program)
    tot = total(counts)
    wide = [
        {"tensor": t.name, "elements": program.evaluate(t.numel)}
        for t in program.tensors
        if t.kind != "handoff" and program.evaluate(t.numel) > INT32_MAX
    ]
    entry: dict = {
        "offsets_past_int32": wide,
        "label": label,
        "kernels": [k.name for k in program.kernels],
        "tiles": {str(k): v for k, v in program.env if str(k) in ("Br", "Bc")},
        "hbm_bytes_by_tensor": {n: tot.tensor_bytes(n) for n in sorted(set(tot.bytes_read) | set(tot.bytes_written))},
        "flops": dict(tot.flops),
        "loop_nest": format_program(program),
    }
    if program.mods is not None:
        entry["mods"] = program.mods.describe()
        entry["block_classes"] = block_report(program)
    sched = log.schedule
    if target is not None and sched is not None:
        entry["schedule"] = {
            "chosen": {"Br": sched.chosen[0], "Bc": sched.chosen[1]},
            "forced": sched.forced,
            "candidates": [
                {
                    "Br": c.Br,
                    "Bc": c.Bc,
                    "feasible": c.feasible,
                    "predicted_s": c.time_s,
                    "peak_bytes": dict(c.peaks),
                    "overflow_bytes": dict(c.overflow),
                }
                for c in sched.candidates
            ],
        }
        env = {str(k): v for k, v in program.env}
        entry["footprints"] = []
        for fp in sched.footprints:
            value = int(fp.value(env))
            if value == 0:
                continue
            entry["footprints"].append(
                {
                    "kernel": fp.kernel,
                    "level": fp.level.name,
                    "bytes": value,
                    "usable": fp.level.usable,
                    "peak_buffers": [_describe(program, fp.kernel, n) for n in fp.peak_term(env)],
                    "expression": str(fp.expr) if expressions else None,
                    "pow2": bool(fp.level.pow2),
                }
            )
        entry["prediction"] = sched.prediction.as_dict()
    return entry


def _describe(program, kernel: str, name: str) -> str:
    """``name[dims] dtype`` (``xN`` when staged N times) for a buffer, or the label itself."""
    try:
        buf = program.kernel(kernel).buffer(name)
    except KeyError:
        return name
    dims = ",".join(fmt_expr(d) for d in buf.shape)
    stages = f" x{buf.stages}" if buf.stages > 1 else ""
    split = f" /{buf.row_split} rows" if buf.row_split > 1 else ""
    return f"{name}[{dims}] {buf.dtype}{stages}{split}"


def inspect_report(
    spec: AttentionSpec,
    target: str | None,
    *,
    dq_strategy: str | None = None,
    tile_sizes=None,
    programs=("fwd", "bwd"),
    expressions: bool = False,
    dkv_strategy: str | None = None,
) -> dict:
    """Everything ``tilegen inspect`` shows, as plain data (see the module docstring): the programs the
    target's backend emits (:meth:`~tilegen.backends.compiler.Backend.emitted`). ``dq_strategy`` None:
    the target's choice (on a GPU target the schedule rows', whose skipped ones the report names);
    ``dkv_strategy`` as :meth:`tilegen.backends.compiler.Backend.resolve` (one the backend takes: not
    ``atomic`` for a GPU target, whose Triton backward keeps dK, dV on chip). Where the program records
    its schedule (a GPU target's: the row used, the rows skipped, the launch knobs), the entry adds it."""
    from tilegen.backends import backend_for

    tgt = load_target(target) if target is not None else None
    backend = backend_for(tgt)
    backend.check_dkv(dkv_strategy)
    out: dict = {"spec": spec.to_dict(), "target": None}
    if tgt is not None:
        out["target"] = {
            "name": tgt.name,
            "kind": tgt.kind,
            "description": tgt.description,
            "levels": {lvl.name: {"capacity": int(lvl.capacity.value), "usable": lvl.usable, "unit": lvl.unit} for lvl in tgt.levels},
        }
    out["backend"] = {"name": backend.name, "gm_handoff": backend.gm_handoff, **backend.words}
    out["programs"] = []
    several_dkv = len(backend.dkv_strategies) > 1
    for which in ("fwd", "bwd"):
        if which not in programs:
            continue

        def compile_(log, which=which):
            return backend.emitted(spec, which, tgt, dq_strategy=dq_strategy, tile_sizes=tile_sizes, dkv_strategy=dkv_strategy, log=log)

        entry = _compiled_report("forward", compile_, tgt, expressions)
        program = entry.pop("_program", None)
        if which == "bwd":
            entry["label"] = _backward_label(program, dq_strategy, dkv_strategy, several_dkv)
        if program is not None and program.attr("tiles_source") is not None:  # the program records its schedule
            _schedule_entries(entry, program, which, tgt)
        out["programs"].append(entry)
    return out


def _backward_label(program, dq_strategy: str | None, dkv_strategy: str | None, several_dkv: bool) -> str:
    """``backward (fused, dq strategy ...)``, from the program where it compiled (else from the
    request), with its dK/dV strategy where the backend takes several."""
    if program is None:
        dkv = f", dK/dV strategy {dkv_strategy or 'auto'}" if several_dkv else ""
        return f"backward (fused, dq strategy {dq_strategy or 'atomic'}{dkv})"
    direct = DQ_DIRECT if program.attr("dq_direct") else ""
    transposed = DQ_TRANSPOSED if program.attr("dq_tiles") == "transposed" else ""
    dkv = f", dK/dV strategy {program.attr('dkv_strategy')}" if several_dkv else ""
    return f"backward (fused, dq strategy {program.attr('dq_strategy')}{direct}{transposed}{dkv})"


def _schedule_entries(entry: dict, program, which: str, target: Target) -> None:
    """The schedule a GPU program records (:mod:`tilegen.passes.gpu.rows`), added to its report entry:
    the rows used and skipped, the emitted choice (the manifest's), direct-dq's outcome, the origin of
    each value, and the GPU model's prediction."""
    from tilegen.passes.gpu.rows import recorded_row, recorded_skipped, schedule_choice

    row = recorded_row(program, target)
    entry["triton_rows"] = {
        "used": f"{row.describe()}: {row.source}" if row else None,
        "skipped": [sk.line() for sk in recorded_skipped(program, target)],
    }
    choice = schedule_choice(program)
    entry["emitted"] = choice  # what `tilegen generate` writes in its manifest
    if which != "fwd":
        entry["dq_direct"] = _dq_direct_entry(program)
    entry["origin"] = _origins(choice)
    entry["model"] = _gpu_model_entry(program, target)


def _origins(choice: dict) -> dict:
    """Where each emitted value comes from, in one word: ``measured row`` (a ``[[triton.schedule]]``
    row), ``estimated row`` (a row marked ``estimate = true``: measured on another device), ``model`` (the block-size search scored by the GPU cost model), ``default``
    (``[triton.default]``) or ``caller``; ``tiles`` and ``launch`` {kernel: origin}."""
    def of(source: str) -> str:
        if source == "given by the caller":
            return "caller"
        if source.startswith("the target's triton.schedule"):
            return "estimated row" if source.split(")", 1)[0].endswith(ESTIMATE_MARK) else "measured row"
        if source.startswith("the cost model"):
            return "model"
        return "default"

    return {"tiles": of(choice["tiles_source"]), "launch": {k: of(v["source"]) for k, v in choice["launch"].items()}}


def _gpu_model_entry(program, target: Target) -> dict | None:
    """The GPU cost model's prediction (:func:`tilegen.models.cost.predict_gpu`) of the schedule as emitted
    (its tiles, stages and num_warps per kernel, as the program records them), or None when the target
    has no ``[gpu_model]``."""
    from tilegen.models.cost import predict_gpu, uses_gpu_model
    from tilegen.passes.gpu.rows import launch_knobs

    if not uses_gpu_model(target):
        return None
    pred = predict_gpu(program, target, {phase: k.num_warps for phase, k in launch_knobs(program).items()})
    return {"label": "model (prediction)", **pred.as_dict()}
def _compiled_report(label: str, compile_, target: Target | None, expressions: bool) -> dict:
    """The report of one program; when no tile size fits, an entry with ``error`` and the table of
    rejected candidates (``rejected``: Br, Bc, peak bytes and overflow per level) instead, so that the
    other program is still reported."""
    log = PassLog()
    try:
        program = compile_(log)
    except NoTileFits as exc:
        return {
            "label": label,
            "error": str(exc),
            "rejected": [
                {"Br": c.Br, "Bc": c.Bc, "peak_bytes": dict(c.peaks), "overflow_bytes": dict(c.overflow)} for c in exc.candidates
            ],
        }
    return {**_program_report(label, program, log, target, expressions), "_program": program}


# --- store P versus recompute -------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One backward form, for a whole layer (all heads of the spec's batch), bytes and seconds.

    ``kept``: what the forward leaves in HBM for this layer's backward (P for store-P, L for
    recompute), held for every layer until its backward runs; ``transient``: workspaces the backward
    allocates and frees (dS, D, the dQ accumulator).
    """

    label: str
    kept_bytes: int
    transient_bytes: int
    moved_bytes: int
    time_s: float


def _bytes_of(program, names) -> int:
    return sum(program.evaluate(t.numel) * dtypes.itemsize(t.dtype) for t in program.tensors if t.name in names)


def tradeoff_report(spec: AttentionSpec, target: str, layers: int = 32, dq_strategy: str = "atomic") -> dict:
    """Store P versus recompute for ``spec`` on ``target``: per head, per layer (the spec's heads) and per
    model (``layers`` layers), plus the per-head back-of-envelope figures of the argument."""
    tgt = load_target(target)
    sides = []
    for label, fused in (("store P (unfused)", False), ("recompute (fused)", True)):
        log = PassLog()
        program = compile_backward(spec, fused=fused, dq_strategy=dq_strategy, target=tgt, log=log)
        pred = log.schedule.prediction
        kept = {"P"} if not fused else {"L"}
        workspaces = {t.name for t in program.tensors if t.kind == "workspace"} - kept
        sides.append(Side(label, _bytes_of(program, kept), _bytes_of(program, workspaces), pred.hbm_bytes, pred.time_s))
    heads = spec.batch * spec.heads_q
    item = dtypes.itemsize(spec.dtype)
    p_bytes = spec.seq_q * spec.seq_k * item
    bw = tgt.bytes_per_s("hbm")
    flops_qk = 2 * spec.seq_q * spec.seq_k * spec.head_dim_qk
    peak = tgt.matmul_flops(spec.dtype)
    exp_time = spec.seq_q * spec.seq_k / tgt.rate("exp")
    per_head = {
        "P_bytes": p_bytes,
        "read_P_once_s": p_bytes / bw,
        "recompute_S_on_cube_s": flops_qk / peak,
        "recompute_exp_on_vector_s": exp_time,
        # the unfused program writes P (fp32: dS reads the unrounded P, DESIGN §3) and reads it back,
        # and does the same for dS (the input dtype)
        "store_P_traffic_bytes": 2 * spec.seq_q * spec.seq_k * (4 + item),
        "store_P_traffic_s": 2 * spec.seq_q * spec.seq_k * (4 + item) / bw,
    }
    rows = {}
    for side in sides:
        rows[side.label] = {
            "per head": {
                "held_bytes": (side.kept_bytes + side.transient_bytes) / heads,
                "moved_bytes": side.moved_bytes / heads,
                "time_s": side.time_s / heads,
            },
            "per layer": {"held_bytes": side.kept_bytes + side.transient_bytes, "moved_bytes": side.moved_bytes, "time_s": side.time_s},
            f"model ({layers} layers)": {
                "held_bytes": side.kept_bytes * layers + side.transient_bytes,
                "moved_bytes": side.moved_bytes * layers,
                "time_s": side.time_s * layers,
            },
        }
    return {
        "spec": spec.to_dict(),
        "target": tgt.name,
        "layers": layers,
        "heads_per_layer": heads,
        "peak_tflops": peak / 1e12,
        "hbm_tb_s": bw / 1e12,
        "per_head": per_head,
        "forms": rows,
        "exp_rate_estimate": tgt.peak["exp"].estimate,
    }


def tiles_map_data(spec: AttentionSpec, target: str | None, *, at: tuple[int, int] = (0, 0), dq_strategy: str = "atomic", tile_sizes=None, programs=("fwd", "bwd")) -> list[dict]:
    """Per program (the schedule ``target`` gets, as :func:`tilegen.harness.runner.compile_run`), the block
    classes of batch ``at[0]``, query head ``at[1]``, for :func:`tilegen.harness.plot.plot_tiles_map`. Without
    a mask mod the classes are those of the window alone.

    Raises:
        SpecError: ``at`` outside the spec's batch or heads, or classes known at run time only (a mask
            of parameters that the spec gives no values for).
    """
    import sympy

    from tilegen.models.analysis import CLASS_NAMES, cached_classes, program_block_classes
    from tilegen.core.errors import SpecError
    from tilegen.core.mods import ModSet
    from tilegen.harness.runner import compile_run

    bi, hi = at
    if not (0 <= bi < spec.batch and 0 <= hi < spec.heads_q):
        raise SpecError("--tiles-at", f"{bi},{hi}", f"B,H with 0 <= B < {spec.batch} and 0 <= H < {spec.heads_q}")
    planned = compile_run(spec, target=target, tile_sizes=tile_sizes, dq_strategy=dq_strategy, backward="fused")
    out = []
    for label, (program, _) in planned.items():
        if ("fwd" if label == "forward" else "bwd") not in programs:
            continue
        classes = program_block_classes(program)
        if classes is None:  # no mask mod: the window's classes
            env = {str(k): int(v) for k, v in program.env}
            sizes = tuple(sorted((k, env[k]) for k in ("B", "Hq", "Hkv", "Sq", "Sk")))
            offset = spec.offset
            classes = cached_classes(ModSet(mask=sympy.true), sizes, spec.window, offset, env["Br"], env["Bc"], None, "compile time (the window alone)")
        if not classes.known:
            raise SpecError("--tiles-map", label, f"a mask whose classes are known before the run: {classes.source}; give the values in the spec's [params]")
        t = classes.table
        cells = t[bi if t.shape[0] > 1 else 0, hi if t.shape[1] > 1 else 0]
        n = np.bincount(cells.reshape(-1), minlength=3)
        env = {str(k): int(v) for k, v in program.env}
        out.append({"label": f"{label} (b={bi}, h={hi})", "cells": cells, "Br": env["Br"], "Bc": env["Bc"],
                    "counts": {CLASS_NAMES[c]: int(n[c]) for c in range(3)}, "source": classes.source})
    return out


# --- the timeline of the emitted code ------------------------------------------------------------------


def timeline_report(
    spec: AttentionSpec, target: str, *, dq_strategy: str = "atomic", tile_sizes=None, programs=("fwd", "bwd"), dkv_strategy: str | None = None
) -> dict:
    """Three figures per program of ``spec`` on an Ascend ``target``, each labelled with what it is:
    ``roofline`` (:func:`tilegen.models.cost.predict`: every unit overlapped), ``model``
    (:func:`tilegen.backends.ascendc.cost.predict_emitted`: the emitted code's helpers, cube and vector meeting at the
    hand-offs) and ``simulated`` (:func:`tilegen.backends.ascendc.timeline.simulate_program`: the twin's instruction trace
    scheduled per pipe), with busy fractions and the critical path of the simulated one, and the simulated
    time again at the fast and slow ends of the cost table's ranges (``simulated.range_s``: the same trace,
    every entry at the end of its ``low``/``high`` that makes the program faster, then slower). Seconds;
    utilisation = matmul FLOPs / (time x cube peak); ``dkv_strategy`` as
    :meth:`tilegen.backends.compiler.Backend.resolve`. Raises as the three functions do."""
    from tilegen.backends.ascendc.cost import predict_emitted
    from tilegen.backends.ascendc.timeline import simulate_program
    from tilegen.core.progress import steps
    from tilegen.models.cost import predict

    tgt = load_target(target)
    out: dict = {"target": tgt.name, "programs": [], "estimates": sorted(k for k, v in tgt.timeline.items() if v.estimate)}
    for prog in steps(programs, f"simulate on {tgt.name}", unit="program"):
        compile_ = compile_forward if prog == "fwd" else compile_backward
        kwargs = {} if prog == "fwd" else {"dq_strategy": dq_strategy, "dkv_strategy": dkv_strategy}
        program = compile_(spec, target=tgt, tile_sizes=tile_sizes, log=PassLog(), **kwargs)
        roof = predict(program, tgt)
        model = predict_emitted(spec, tgt, prog, dq_strategy, tile_sizes, dkv_strategy)
        sim = simulate_program(spec, tgt, prog, dq_strategy=dq_strategy, tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)
        ends = {end: simulate_program(spec, tgt, prog, dq_strategy=dq_strategy, tile_sizes=tile_sizes, dkv_strategy=dkv_strategy, end=end).time_s
                for end in ("fast", "slow")}
        entry = {
            "label": sim.label,
            "roofline": {"time_s": roof.time_s, "utilization": roof.utilization},
            "model": {"time_s": model.time_s, "utilization": model.utilization, "kernels": dict(model.kernels)},
            "simulated": dict(sim.as_dict(), range_s=ends),
        }
        entry["_timeline"] = sim  # for the Gantt chart; not in --json
        out["programs"].append(entry)
    return out


def _pct(x: float) -> str:
    return f"{x:.1%}"


def compiled_report(spec, target, *, dq_strategy: str | None = None, tile_sizes=None, programs=("fwd", "bwd")) -> dict:
    """``tilegen inspect --compile``: each emitted Triton kernel compiled for the GPU target's
    architecture on this machine (:func:`tilegen.backends.triton.compile.compile_resources`), what the
    compiler allocated (registers, spilled bytes, shared bytes), and per program the GPU model's
    prediction with those figures and ``[gpu_model_compiled]`` beside its prediction with the
    footprint's estimates and ``[gpu_model]``.

    Raises:
        TilegenError: as compile_resources (no Triton, not a CUDA target, a failed compile).
    """
    from tilegen.backends import triton as backend
    from tilegen.backends.triton.compile import compile_resources
    from tilegen.models.cost import predict_gpu, uses_gpu_model

    tgt = load_target(target)
    res = compile_resources(spec, tgt, dq_strategy, tile_sizes, programs=programs)
    out = {"target": tgt.name, "triton": res["triton"], "arch": res["arch"], "programs": []}
    for sched in backend.schedule(spec, tgt, dq_strategy, tile_sizes):
        if sched.kind.split("-")[0] not in programs:
            continue
        kernels = {name: k for name, k in res["kernels"].items() if k["program"] == sched.kind}
        warps = {ph: k.num_warps for ph, k in sched.knobs.items()}
        entry = {"program": sched.kind, "kernels": kernels}
        if uses_gpu_model(tgt):
            entry["model"] = {"label": "model (prediction), the footprint's estimates ([gpu_model])", "time_s": predict_gpu(sched.program, tgt, warps).time_s}
            if uses_gpu_model(tgt, compiled=True):
                facts = {k["phase"]: {f: k[f] for f in ("registers", "stack_bytes", "shared_bytes")} for k in kernels.values()}
                entry["model_compiled"] = {"label": "model (prediction), the compiler's figures ([gpu_model_compiled])",
                                           "time_s": predict_gpu(sched.program, tgt, warps, compiled=facts).time_s}
                fitted = tgt.gpu_model_compiled.get("fitted_max_stack_bytes")
                outside = [name for name, k in kernels.items() if fitted is not None and k["stack_bytes"] > fitted.value]
                if outside:
                    entry["model_compiled"]["outside_fit"] = (
                        f"{', '.join(outside)}: a stack frame past the {int(fitted.value)} B per thread the spill term was fitted on; "
                        "read this prediction as a flag, not a time")
        out["programs"].append(entry)
    return out


def format_compiled(report: dict) -> str:
    """The text of ``tilegen inspect --compile``."""
    lines = ["", f"== the emitted Triton kernels compiled for {report['arch']} on this machine (Triton {report['triton']}, its ptxas): "
             "what the compiler allocated"]
    for prog in report["programs"]:
        lines.append(f"{prog['program']}:")
        lines.append(f"  {'kernel':<12} {'warps':>5} {'stages':>6} {'registers':>9} {'stack B':>9} {'shared B':>9}  (per thread: registers, stack frame = spilled registers; per program: shared bytes)")
        for ph, k in prog["kernels"].items():
            spills = "  (spills to local memory)" if k["stack_bytes"] else ""
            lines.append(f"  {ph:<12} {k['num_warps']:>5} {k['num_stages']:>6} {k['registers']:>9} {k['stack_bytes']:>9} {k['shared_bytes']:>9}{spills}")
        if "model" in prog:
            text = f"  model (prediction): {format_seconds(prog['model']['time_s'])} with the footprint's estimates ([gpu_model])"
            if "model_compiled" in prog:
                text += f", {format_seconds(prog['model_compiled']['time_s'])} with the compiler's figures ([gpu_model_compiled])"
            lines.append(text)
            if "outside_fit" in prog.get("model_compiled", {}):
                lines.append(f"    note: {prog['model_compiled']['outside_fit']}")
    return "\n".join(lines) + "\n"


def format_timeline(report: dict) -> str:
    """The text of ``tilegen inspect --simulate``: per program the roofline, model and simulated time
    side by side, then per kernel the simulated and model time, how the simulated one was obtained, the
    simulated busy fraction of every pipe and the simulated critical path."""
    lines = [
        "",
        f"== timeline of the emitted code on {report['target']}, predicted (not measured): roofline (the tile chooser's "
        "ranking estimate: all units overlapped, every HBM tensor at the HBM rate, the hand-offs' writes and reads together "
        "at the chip's L2 read rate; it can be slower than the other two), model (the emitted helpers; cube and vector "
        "meet at the hand-offs), simulated (the twin's instruction trace scheduled per pipe); in parentheses the share "
        "of the cube's peak",
        "   cost table: the target's [timeline]; estimates: " + ", ".join(report["estimates"]),
        "   fast .. slow: the simulated time with every entry of the cost table at the end of its range that makes the "
        "program faster, then slower (the same trace)",
    ]
    for prog in report["programs"]:
        r, m, s = prog["roofline"], prog["model"], prog["simulated"]
        lines.append(
            f"{prog['label']}: roofline {format_seconds(r['time_s'])} ({_pct(r['utilization'])}) | "
            f"model {format_seconds(m['time_s'])} ({_pct(m['utilization'])}) | simulated {format_seconds(s['time_s'])} "
            f"({_pct(s['utilization'])})"
        )
        lo, hi = s["range_s"]["fast"], s["range_s"]["slow"]
        lines.append(f"  simulated over the cost table's ranges: fast {format_seconds(lo)} ({_pct(s['utilization'] * s['time_s'] / lo)}) .. "
                     f"central {format_seconds(s['time_s'])} .. slow {format_seconds(hi)} ({_pct(s['utilization'] * s['time_s'] / hi)})")
        lines.append(f"  model / simulated = {m['time_s'] / s['time_s']:.2f}")
        if s.get("sync_alls"):
            lines.append(
                f"  {s['launches']} launch(es), its kernels separated by {s['sync_alls']} SyncAll barrier(s): "
                f"{format_seconds(s['overhead_s'])} of the simulated time (a launch: the target's launch_us; a barrier: "
                "three cross-core flag hops; both estimates)"
            )
        for k in s["kernels"]:
            mk = m["kernels"].get(k["name"], 0.0)
            lines.append(f"  {k['name']}: simulated {format_seconds(k['time_s'])}, model {format_seconds(mk)}; {k['programs']} instances")
            lines.append(f"    simulated as: {k['form']}")
            for core in ("AIC", "AIV"):
                busy = {key.split('.')[1]: v for key, v in k["busy_fraction"].items() if key.startswith(core)}
                if busy:
                    lines.append(f"    simulated busy {core}: " + ", ".join(f"{p} {_pct(v)}" for p, v in sorted(busy.items(), key=lambda kv: -kv[1])))
            crit = k["critical_path_share"]
            if crit:
                lines.append("    simulated critical path (slowest block): " + ", ".join(f"{p} {_pct(v)}" for p, v in crit.items()))
    return wrap_lines("\n".join(lines) + "\n")
