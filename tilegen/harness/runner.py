"""The main job: run a spec's programs in the interpreter on seeded random data and check them.

:func:`check_spec` draws Q, K, V (and dO) from a seeded standard normal in the spec's dtype, runs the
compiled forward (and backward) programs, and compares every output with the float64 reference under
DESIGN §3's accuracy rule. The CLI's ``tilegen run`` prints what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilegen.core import dtypes, reference
from tilegen.backends.interp import Measurement, interpret
from tilegen.harness.check import Comparison, compare, longest_sum, lse_rel_floor
from tilegen.core.errors import SpecError
from tilegen.core.ir import Program
from tilegen.passes import pipeline
from tilegen.core.spec import AttentionSpec
from tilegen.backends import compile_backward, compile_forward
from tilegen.passes.driver import PassLog

INPUTS = ("Q", "K", "V", "dO")  # the tensors a run is fed (logical BNSD)
REFERENCE_BUDGET_BYTES = 3 << 30  # the dense float64 reference holds a few [B, Hq, Sq, Sk] arrays


@dataclass
class RunReport:
    """What :func:`check_spec` found.

    Attributes:
        comparisons: one per output tensor (``O``, ``L``, then ``dQ``, ``dK``, ``dV``).
        measurements: interpreter measurements by program label (``forward``, ``backward unfused``,
            ``backward fused``...).
        programs: the programs that ran, by the same labels.
        twin_schedule: with a twin run, the schedule of the Ascend C kernels it ran ({"forward":
            {"Br", "Bc", "kernels"}, "backward": ...}, as in the generated manifest); else None.
        target: the name of the target whose schedule the interpreter ran, or None (its defaults).
        tiles_source: by program label, where its tile sizes come from (see :func:`compile_run`).
        params_note: with mods or sinks, where each parameter array came from (:func:`mod_params`), else None.
        outside: in a packed batch (``spec.packed_ids``), (tensor label, whether every row outside every
            sequence still holds the NaN the run started it with: never written), else empty.
    """

    spec: AttentionSpec
    comparisons: list[Comparison] = field(default_factory=list)
    measurements: dict[str, Measurement] = field(default_factory=dict)
    twin_schedule: dict[str, Any] | None = None  # the manifest "schedule" of the kernels run on the twin
    programs: dict[str, Program] = field(default_factory=dict)
    target: str | None = None
    tiles_source: dict[str, str] = field(default_factory=dict)
    params_note: str | None = None
    outside: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons) and all(ok for _, ok in self.outside)


def random_inputs(spec: AttentionSpec, seed: int) -> dict[str, np.ndarray]:
    """Q, K, V, dO in logical BNSD order, standard normal, rounded to the spec's dtype."""
    rng = np.random.default_rng(seed)
    nd = dtypes.numpy_dtype(spec.dtype)
    shapes = spec.logical_shapes
    return {name: rng.standard_normal(shapes[name], dtype=np.float32).astype(nd) for name in INPUTS}


PARAM_SCALE = 0.1  # standard deviation of generated fp32 parameter values
SINK_SCALE = 1.0  # standard deviation of generated sink logits (O(1), as a row's largest scores)
MAX_DOCS = 4  # generated document ids: 1..MAX_DOCS documents per row


def mod_params(spec: AttentionSpec, seed: int, given: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], str | None]:
    """The parameter arrays of ``spec``'s mods (and its sink logits, ``"sinks"``, for a spec with sinks)
    for a run, and a line saying where each came from.

    Each array is ``given`` (by name), else the spec's ``values``, else generated from ``seed``: fp32
    parameters N(0, PARAM_SCALE²); int32 parameters whose last axis is a sequence (Sq or Sk long)
    sorted document ids, 1..MAX_DOCS documents per row with random boundaries; other int32
    parameters uniform integers in [0, min(Sq, Sk)); sinks float32 [Hq] N(0, SINK_SCALE²). ({}, None)
    without mods and sinks.

    Raises:
        ModError: a given array of the wrong shape or dtype kind, or a name no mod reads.
    """
    from tilegen.core import validate
    from tilegen.core.mods import check_param_arrays

    mods = spec.mods
    given = dict(given or {})
    sinks, notes = None, []
    if spec.sinks:
        if "sinks" in given:
            sinks = validate.sinks(np.asarray(given.pop("sinks")), spec.heads_q)
            notes.append(f"sinks [{spec.heads_q}] given")
        else:
            sinks = (SINK_SCALE * np.random.default_rng([seed, 2]).standard_normal(spec.heads_q)).astype(np.float32)
            notes.append(f"sinks [{spec.heads_q}] random N(0, {SINK_SCALE}^2)")
    extra = {} if sinks is None else {"sinks": sinks}
    if mods is None or not mods.params:
        return extra, (f"parameters (seed {seed}): " + "; ".join(notes)) if notes else None
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    rng = np.random.default_rng([seed, 1])
    arrays = {}
    for p in mods.params:
        shape = p.concrete_shape(sizes)
        if p.name in given:
            arrays[p.name] = given.pop(p.name)
            notes.append(f"{p.name} {list(shape)} given")
        elif p.generator is not None:
            value = p.generator.spec_value()
            shown = "true" if value is True else repr(value)
            notes.append(f"{p.name} {list(shape)} from the spec's generator {p.generator.kind} = {shown}")
        elif p.values is not None:
            notes.append(f"{p.name} {list(shape)} from the spec's values")
        elif p.dtype == "fp32":
            arrays[p.name] = (PARAM_SCALE * rng.standard_normal(shape)).astype(np.float32)
            notes.append(f"{p.name} {list(shape)} random N(0, {PARAM_SCALE}^2)")
        elif shape[-1] in (spec.seq_q, spec.seq_k):
            rows = int(np.prod(shape[:-1], dtype=np.int64))
            ids = np.zeros((rows, shape[-1]), dtype=np.int32)
            docs = []
            for r in range(rows):
                n = int(rng.integers(1, MAX_DOCS + 1))
                cuts = np.sort(rng.choice(np.arange(1, shape[-1]), size=min(n - 1, shape[-1] - 1), replace=False))
                ids[r] = np.searchsorted(cuts, np.arange(shape[-1]), side="right")
                docs.append(len(cuts) + 1)
            arrays[p.name] = ids.reshape(shape)
            notes.append(f"{p.name} {list(shape)} random sorted document ids ({', '.join(map(str, docs))} documents)")
        else:
            arrays[p.name] = rng.integers(0, min(spec.seq_q, spec.seq_k), size=shape).astype(np.int32)
            notes.append(f"{p.name} {list(shape)} random integers in [0, {min(spec.seq_q, spec.seq_k)})")
    arrays = check_param_arrays(mods, {**arrays, **given}, sizes)
    return {**arrays, **extra}, f"parameters (seed {seed}): " + "; ".join(notes)


def reference_bytes(spec: AttentionSpec) -> int:
    """Rough bytes the dense references need: a handful of float64 [B, Hq, Sq, Sk] arrays."""
    return 6 * 8 * spec.batch * spec.heads_q * spec.seq_q * spec.seq_k


def validate_run(
    spec: AttentionSpec,
    *,
    tile_sizes=None,
    dq_strategy: str = "atomic",
    data: dict[str, np.ndarray] | None = None,
    twin_target: str | None = None,
    asc_devkit: str | None = None,
    target=None,
) -> None:
    """Reject, before any work, every request :func:`check_spec` cannot run.

    Raises:
        SpecError: the spec is too large for the dense reference, bad tile sizes or dQ strategy,
            ``data`` lacks a tensor or has a wrong shape (each named), or ``asc_devkit`` is not an
            asc-devkit snapshot.
        ScheduleError: ``tile_sizes`` do not fit ``twin_target``.
        TargetError: ``target`` is unknown (the message lists the known ones), or ``twin_target`` is
            not an Ascend 910B target.
    """
    if reference_bytes(spec) > REFERENCE_BUDGET_BYTES:
        raise SpecError(
            "spec",
            f"{spec.name} (B={spec.batch}, Hq={spec.heads_q}, Sq={spec.seq_q}, Sk={spec.seq_k})",
            f"a size whose dense float64 reference fits {REFERENCE_BUDGET_BYTES >> 30} GiB; shrink it with --seq, --heads or --batch",
        )
    if tile_sizes is not None:
        pipeline.parse_tile_sizes(tile_sizes)
    if dq_strategy not in pipeline.DQ_STRATEGIES:
        raise SpecError("dq_strategy", dq_strategy, "one of " + ", ".join(pipeline.DQ_STRATEGIES))
    if target is not None:
        from tilegen.core.targets import load_target

        load_target(target)
    if data is not None:
        cast_inputs(spec, data)
    if twin_target is not None:
        from tilegen.backends import ascendc

        ascendc.check_request(spec, twin_target)
        if tile_sizes is not None:  # the twin's kernels take the forced tiles too: they must fit its target
            compile_forward(spec, target=twin_target, tile_sizes=tile_sizes)
            compile_backward(spec, dq_strategy=dq_strategy, target=twin_target, tile_sizes=tile_sizes)
    if asc_devkit is not None:
        from tilegen.backends.ascendc import twin

        twin.check_devkit(asc_devkit)


FORMS = {"both": ("fused", "unfused"), "fused": ("fused",), "unfused": ("unfused",), "none": ()}  # check_spec(backward=)


def program_label(form: str, dq_strategy: str) -> str:
    """``backward fused (atomic)`` or ``backward unfused``: the label of a backward program in a run."""
    return f"backward {form}" + (f" ({dq_strategy})" if form == "fused" else "")


def compile_run(
    spec: AttentionSpec, *, target=None, tile_sizes=None, dq_strategy: str = "atomic", backward: str = "both"
) -> dict[str, tuple[Program, str]]:
    """The programs :func:`check_spec` runs, by label (``forward``, then ``backward fused (atomic)``
    and/or ``backward unfused``), each with the source of its tile sizes.

    Without a target: ``tile_sizes`` or the interpreter's defaults (:func:`pipeline.default_tiles`).
    With one: the schedule that target gets from its backend, the one ``tilegen inspect`` shows and
    ``tilegen generate`` emits (:meth:`~tilegen.backends.compiler.Backend.emitted`: on a GPU target the
    target's ``[[triton.schedule]]`` rows, else the cost model, as the program records; on an Ascend
    target the pass list's choice, the cost model). ``tile_sizes`` then forces both programs'
    sizes, still checked against the target's on-chip capacities. No backend emits the unfused
    backward: it runs with the fused backward's tile sizes, compiled for the target.

    Raises:
        TargetError: an unknown target. ScheduleError: forced tile sizes that do not fit the target,
            or no tile sizes fit. SpecError: bad tile sizes or dq strategy.
    """
    forms = FORMS[backward]
    if target is None:
        source = "given by the caller" if tile_sizes is not None else (
            "the interpreter's defaults: 128, or the sequence rounded up to 16 when shorter"
        )
        out = {"forward": (compile_forward(spec, tile_sizes=tile_sizes), source)}
        for form in forms:
            program = compile_backward(spec, fused=form == "fused", dq_strategy=dq_strategy, tile_sizes=tile_sizes)
            out[program_label(form, dq_strategy)] = (program, source)
        return out
    from tilegen.backends import backend_for
    from tilegen.core.targets import load_target

    tgt = load_target(target)
    backend = backend_for(tgt)
    checked = f"given by the caller, checked against {tgt.name}'s on-chip capacities"

    def emitted(which: str) -> tuple[Program, str]:
        log = PassLog()
        program = backend.emitted(spec, which, tgt, dq_strategy=dq_strategy, tile_sizes=tile_sizes, log=log)
        recorded = program.attr("tiles_source")  # a GPU program records where its tiles come from
        if recorded == "given by the caller" or (recorded is None and log.schedule.forced):
            return program, checked
        if recorded is not None:
            return program, f"{tgt.name}: {recorded}"
        n = sum(c.feasible for c in log.schedule.candidates)
        return program, f"{tgt.name}: the cost model: the fastest predicted of {n} feasible candidates"

    fwd, bwd = emitted("fwd"), emitted("bwd")
    out = {"forward": fwd}
    for form in forms:
        if form == "fused":
            out[program_label(form, dq_strategy)] = bwd
        else:
            env = {str(k): v for k, v in bwd[0].env}
            tiles = (env["Br"], env["Bc"])
            program = compile_backward(spec, fused=False, dq_strategy=dq_strategy, target=tgt, tile_sizes=tiles)
            out[program_label(form, dq_strategy)] = (program, f"{tgt.name}: the fused backward's tile sizes; no backend emits this form")
    return out


def check_spec(
    spec: AttentionSpec,
    *,
    seed: int = 0,
    tile_sizes=None,
    target=None,
    dq_strategy: str = "atomic",
    backward: str = "both",
    data: dict[str, np.ndarray] | None = None,
    twin_target: str | None = None,
    asc_devkit: str | None = None,
    progress=None,
) -> RunReport:
    """Run and check the forward and the backward of ``spec``.

    Args:
        target: run the schedule this target gets (see :func:`compile_run`); None: the interpreter's
            default tile sizes (or ``tile_sizes``).
        backward: ``"both"`` (the fused backward with ``dq_strategy`` and the unfused one, both checked,
            so their traffic can be compared), ``"fused"``, ``"unfused"`` or ``"none"``.
        data: Q, K, V, dO (logical BNSD, any float dtype: cast to the spec's) instead of random inputs;
            with mods, also parameter arrays by name (else the spec's values, else generated:
            :func:`mod_params`).
        twin_target: also generate the Ascend C kernels for this target (with ``tile_sizes`` forced
            when given) and run them on the CPU twin; their outputs join the comparisons as
            ``O (twin)``, ``dQ (twin)``, ...
        asc_devkit: run them on the real-API twin instead (Huawei's headers from this asc-devkit
            snapshot over tilegen's CCE intrinsics; see tilegen/twin/cce/README.md); the comparisons
            are labelled ``O (real-API twin)``, ...
        progress: called as ``progress(program label, kernel, trips done, trips in all)`` while the
            interpreter runs (see :func:`tilegen.backends.interp.interpret`).

    With mods or sinks the truth is :func:`tilegen.core.reference.mod_attention` (float64 torch, autograd)
    and the plain one :func:`tilegen.core.reference.plain_mod_attention`; the gradient of every fp32
    parameter (reduced from the backward's per-tile partials, :func:`tilegen.mods.param_grads`) and of
    the sinks (:func:`tilegen.core.sinks.sink_grad`, on the host) joins the comparisons as ``d<name>`` with
    n = Sq·Sk terms. In a packed batch (``spec.packed_ids``) the comparisons cover the tokens inside a
    sequence, and :attr:`RunReport.outside` says whether the others were left unwritten.

    Raises:
        SpecError: the spec is too large for the dense reference (shrink it with --seq/--heads/--batch).
        ModError: a parameter array of the wrong shape or dtype kind.
        TargetError, ScheduleError: as :func:`compile_run`.
    """
    validate_run(
        spec, tile_sizes=tile_sizes, dq_strategy=dq_strategy, data=data, twin_target=twin_target, asc_devkit=asc_devkit, target=target
    )
    if backward not in FORMS:
        raise SpecError("backward", backward, "one of " + ", ".join(FORMS))
    programs = compile_run(spec, target=target, tile_sizes=tile_sizes, dq_strategy=dq_strategy, backward=backward)
    given = {k: v for k, v in (data or {}).items() if k not in INPUTS}
    data = random_inputs(spec, seed) if data is None else cast_inputs(spec, data)
    params, report_params = mod_params(spec, seed, given)
    report = RunReport(spec, target=None if target is None else _target_name(target))
    report.params_note = report_params
    report.tiles_source = {label: source for label, (_, source) in programs.items()}
    kw = dict(scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)

    fwd = programs["forward"][0]
    outputs, measured = interpret(fwd, {"Q": data["Q"], "K": data["K"], "V": data["V"], **params}, progress=_tagged(progress, "forward"))
    report.programs["forward"] = fwd
    report.measurements["forward"] = measured
    sinks = params.get("sinks")
    mparams = {k: v for k, v in params.items() if k != "sinks"}
    qrows, krows = packed_rows(spec, params)
    if spec.has_mods or spec.sinks:
        dO = None if backward == "none" else data["dO"]
        mod_ref = reference.mod_attention(spec, data["Q"], data["K"], data["V"], dO, mparams, sinks=sinks)
        mod_pl = reference.plain_mod_attention(spec, data["Q"], data["K"], data["V"], dO, mparams, sinks=sinks)
        o_ref, l_ref, o_pl, l_pl = mod_ref["O"], mod_ref["L"], mod_pl["O"], mod_pl["L"]
    else:
        o_ref, l_ref = reference.forward(data["Q"], data["K"], data["V"], **kw)
        o_pl, l_pl = reference.plain_forward(data["Q"], data["K"], data["V"], dtype=spec.dtype, **kw)
    report.comparisons.append(_compare_rows("O", outputs["O"], o_ref, o_pl, qrows, spec.dtype, terms=longest_sum(spec)))
    report.comparisons.append(_compare_rows("L", outputs["L"], l_ref, l_pl, qrows, "fp32", terms=longest_sum(spec)))
    report.outside += _outside("", {"O": outputs["O"], "L": outputs["L"]}, qrows)
    if backward == "none":
        return report

    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": outputs["O"], "L": outputs["L"], "dO": data["dO"], **params}
    if spec.has_mods:
        ref = (mod_ref["dQ"], mod_ref["dK"], mod_ref["dV"])
        plain = (mod_pl["dQ"], mod_pl["dK"], mod_pl["dV"])
    else:
        ref = reference.backward(data["Q"], data["K"], data["V"], data["dO"], **kw)
        plain = reference.plain_backward(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    forms = FORMS[backward]
    for form in forms:
        label = program_label(form, dq_strategy)
        program = programs[label][0]
        grads, measured = interpret(program, feeds, progress=_tagged(progress, label))
        report.programs[label] = program
        report.measurements[label] = measured
        for name, r, p in zip(("dQ", "dK", "dV"), ref, plain):
            tag = name if len(forms) == 1 or form == "fused" else f"{name}*"
            rows = qrows if name == "dQ" else krows
            report.comparisons.append(_compare_rows(tag, grads[name], r, p, rows, spec.dtype, rel_floor=lse_rel_floor(l_ref), terms=longest_sum(spec)))
            report.outside += _outside("" if tag == name else "*", {name: grads[name]}, rows)
        if spec.has_mods and program.mods.grads:
            from tilegen.core.mods import param_grads

            dparams = param_grads(program, grads)
            for name in sorted(dparams):
                tag = f"d{name}" + ("" if len(forms) == 1 or form == "fused" else "*")
                # a sum over every (query, key) pair: n = Sq·Sk terms
                report.comparisons.append(compare(
                    tag, dparams[name], mod_ref["dparams"][name], mod_pl["dparams"][name], spec.dtype,
                    rel_floor=lse_rel_floor(outputs["L"]), terms=spec.seq_q * spec.seq_k,
                ))
    if spec.sinks:  # dσ on the host from the forward's O and L (the same for every backward form)
        from tilegen.core.sinks import sink_grad

        dsinks = sink_grad(outputs["O"], data["dO"], outputs["L"], sinks, rows=qrows)
        report.comparisons.append(compare("dsinks", dsinks, mod_ref["dparams"]["sinks"], mod_pl["dparams"]["sinks"], "fp32",
                                          rel_floor=lse_rel_floor(l_ref), terms=spec.seq_q * spec.seq_k))
    if twin_target is not None:
        _check_on_twin(report, spec, data, twin_target, dq_strategy, (o_ref, l_ref, o_pl, l_pl), (ref, plain), asc_devkit, params,
                       mod_ref if spec.sinks else None, mod_pl if spec.sinks else None, tile_sizes)
    return report


def packed_rows(spec: AttentionSpec, params: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(query rows, key rows): bool [Sq] and [Sk] masks of the tokens inside a sequence of a packed batch
    (``spec.packed_ids``: sequence id >= 0), or (None, None) for a spec that is not one."""
    if not spec.packed_ids:
        return None, None
    return tuple(np.asarray(params[n]).reshape(-1) >= 0 for n in spec.packed_ids)


def _compare_rows(name, ours, ref, plain, rows, dtype, **kw) -> Comparison:
    """:func:`compare` over the rows (axis 2 of a logical BNSD / [B, H, S] array) inside a sequence."""
    if rows is None:
        return compare(name, ours, ref, plain, dtype, **kw)
    return compare(name, ours[:, :, rows], ref[:, :, rows], plain[:, :, rows], dtype, **kw)


def _outside(suffix: str, arrays: dict, rows) -> list[tuple[str, bool]]:
    """(name, every row outside a sequence still NaN) per array; [] when not a packed batch."""
    if rows is None:
        return []
    return [(name + suffix, bool(np.isnan(np.asarray(x[:, :, ~rows], dtype=np.float32)).all())) for name, x in arrays.items()]


def _target_name(target) -> str:
    from tilegen.core.targets import load_target

    return load_target(target).name


def _tagged(progress, label: str):
    return None if progress is None else (lambda kernel, done, total: progress(label, kernel, done, total))


def _check_on_twin(
    report: RunReport, spec: AttentionSpec, data, target: str, dq_strategy: str, fwd_refs, bwd_refs, asc_devkit=None, params=None,
    sink_ref=None, sink_plain=None, tile_sizes=None,
) -> None:
    """Generate the Ascend C kernels (``tile_sizes`` forced when given), run them on the CPU twin (the
    real-API one with ``asc_devkit``) and compare their outputs too (with ``params``: the mods' arrays
    and the sinks; with sinks, ``sink_ref``/``sink_plain`` the references holding ``dparams["sinks"]``)."""
    from tilegen.backends import ascendc
    from tilegen.backends.ascendc import twin
    from tilegen.core.progress import step

    with step(f"generate the Ascend C for {target}"):
        generated = ascendc.generate(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes)
    files = generated.files
    report.twin_schedule = generated.manifest["schedule"]
    exe = twin.build_real(files, asc_devkit) if asc_devkit is not None else twin.build(files)
    tag = "real-API twin" if asc_devkit is not None else "twin"
    with step(f"run the kernels on the {tag}"):
        fwd, grads = twin.run_attention(exe, spec, data, params=params)
    qrows, krows = packed_rows(spec, params or {})
    o_ref, l_ref, o_pl, l_pl = fwd_refs
    report.comparisons.append(_compare_rows(f"O ({tag})", fwd["O"], o_ref, o_pl, qrows, spec.dtype, terms=longest_sum(spec)))
    report.comparisons.append(_compare_rows(f"L ({tag})", fwd["L"], l_ref, l_pl, qrows, "fp32", terms=longest_sum(spec)))
    report.outside += _outside(f" ({tag})", {"O": fwd["O"], "L": fwd["L"]}, qrows)
    ref, plain = bwd_refs
    for name, r, p in zip(("dQ", "dK", "dV"), ref, plain):
        rows = qrows if name == "dQ" else krows
        report.comparisons.append(
            _compare_rows(f"{name} ({tag})", grads[name], r, p, rows, spec.dtype, rel_floor=lse_rel_floor(l_ref), terms=longest_sum(spec))
        )
        report.outside += _outside(f" ({tag})", {name: grads[name]}, rows)
    if sink_ref is not None:
        report.comparisons.append(compare(f"dsinks ({tag})", grads["dparams"]["sinks"], sink_ref["dparams"]["sinks"],
                                          sink_plain["dparams"]["sinks"], "fp32", rel_floor=lse_rel_floor(l_ref),
                                          terms=spec.seq_q * spec.seq_k))


def cast_inputs(spec: AttentionSpec, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Q, K, V, dO from ``data`` in the spec's dtype, checked against the spec's shapes.

    Raises:
        SpecError: a tensor is missing or has the wrong shape (named).
    """
    nd = dtypes.numpy_dtype(spec.dtype)
    out = {}
    for name in INPUTS:
        shape = spec.logical_shapes[name]
        if name not in data:
            raise SpecError(f"--data[{name}]", None, f"an array {name} of shape {shape} in the .npz file")
        array = np.asarray(data[name])
        if array.shape != shape:
            raise SpecError(f"--data[{name}].shape", array.shape, f"{shape} (logical BNSD for this spec)")
        out[name] = array.astype(np.float32).astype(nd)
    return out
