"""The main job: run a spec's programs in the interpreter on seeded random data and check them.

:func:`check_spec` draws Q, K, V (and dO) from a seeded standard normal in the spec's dtype, runs the
compiled forward (and backward) programs, and compares every output with the float64 reference under
DESIGN §3's accuracy rule. The CLI's ``tilegen run`` prints what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import dtypes, reference
from .backends.interp import Measurement, interpret
from .check import Comparison, compare, longest_sum, lse_rel_floor
from .errors import SpecError
from .ir import Program
from .passes import pipeline
from .spec import AttentionSpec

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
    """

    spec: AttentionSpec
    comparisons: list[Comparison] = field(default_factory=list)
    measurements: dict[str, Measurement] = field(default_factory=dict)
    twin_schedule: dict[str, Any] | None = None  # the manifest "schedule" of the kernels run on the twin
    programs: dict[str, Program] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)


def random_inputs(spec: AttentionSpec, seed: int) -> dict[str, np.ndarray]:
    """Q, K, V, dO in logical BNSD order, standard normal, rounded to the spec's dtype."""
    rng = np.random.default_rng(seed)
    nd = dtypes.numpy_dtype(spec.dtype)
    shapes = spec.logical_shapes
    return {name: rng.standard_normal(shapes[name], dtype=np.float32).astype(nd) for name in INPUTS}


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
) -> None:
    """Reject, before any work, every request :func:`check_spec` cannot run.

    Raises:
        SpecError: the spec is too large for the dense reference, bad tile sizes or dQ strategy,
            ``data`` lacks a tensor or has a wrong shape (each named), or ``asc_devkit`` is not an
            asc-devkit snapshot.
        TargetError: ``twin_target`` is not an Ascend 910B target.
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
    if data is not None:
        cast_inputs(spec, data)
    if twin_target is not None:
        from .backends import ascendc

        ascendc.check_request(spec, twin_target)
    if asc_devkit is not None:
        from .backends import twin

        twin.check_devkit(asc_devkit)


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
        backward: ``"both"`` (the fused backward with ``dq_strategy`` and the unfused one, both checked,
            so their traffic can be compared), ``"fused"``, ``"unfused"`` or ``"none"``.
        data: Q, K, V, dO (logical BNSD, any float dtype: cast to the spec's) instead of random inputs.
        twin_target: also generate the Ascend C kernels for this target and run them on the CPU twin;
            their outputs join the comparisons as ``O (twin)``, ``dQ (twin)``, ...
        asc_devkit: run them on the real-API twin instead (Huawei's headers from this asc-devkit
            snapshot over tilegen's CCE intrinsics; see tilegen/twin/cce/README.md); the comparisons
            are labelled ``O (real-API twin)``, ...
        progress: called as ``progress(program label, kernel, trips done, trips in all)`` while the
            interpreter runs (see :func:`tilegen.backends.interp.interpret`).

    Raises:
        SpecError: the spec is too large for the dense reference (shrink it with --seq/--heads/--batch).
    """
    validate_run(spec, tile_sizes=tile_sizes, dq_strategy=dq_strategy, data=data, twin_target=twin_target, asc_devkit=asc_devkit)
    data = random_inputs(spec, seed) if data is None else cast_inputs(spec, data)
    report = RunReport(spec)
    kw = dict(scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)

    fwd = pipeline.compile_forward(spec, target=target, tile_sizes=tile_sizes)
    outputs, measured = interpret(fwd, {"Q": data["Q"], "K": data["K"], "V": data["V"]}, progress=_tagged(progress, "forward"))
    report.programs["forward"] = fwd
    report.measurements["forward"] = measured
    o_ref, l_ref = reference.forward(data["Q"], data["K"], data["V"], **kw)
    o_pl, l_pl = reference.plain_forward(data["Q"], data["K"], data["V"], dtype=spec.dtype, **kw)
    report.comparisons.append(compare("O", outputs["O"], o_ref, o_pl, spec.dtype, terms=longest_sum(spec)))
    report.comparisons.append(compare("L", outputs["L"], l_ref, l_pl, "fp32", terms=longest_sum(spec)))
    if backward == "none":
        return report

    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": outputs["O"], "L": outputs["L"], "dO": data["dO"]}
    ref = reference.backward(data["Q"], data["K"], data["V"], data["dO"], **kw)
    plain = reference.plain_backward(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    forms = {"both": ("fused", "unfused"), "fused": ("fused",), "unfused": ("unfused",)}[backward]
    for form in forms:
        label = f"backward {form}" + (f" ({dq_strategy})" if form == "fused" else "")
        program = pipeline.compile_backward(
            spec, fused=form == "fused", dq_strategy=dq_strategy, target=target, tile_sizes=tile_sizes
        )
        grads, measured = interpret(program, feeds, progress=_tagged(progress, label))
        report.programs[label] = program
        report.measurements[label] = measured
        for name, r, p in zip(("dQ", "dK", "dV"), ref, plain):
            tag = name if len(forms) == 1 or form == "fused" else f"{name}*"
            report.comparisons.append(compare(tag, grads[name], r, p, spec.dtype, rel_floor=lse_rel_floor(outputs["L"]), terms=longest_sum(spec)))
    if twin_target is not None:
        _check_on_twin(report, spec, data, twin_target, dq_strategy, (o_ref, l_ref, o_pl, l_pl), (ref, plain), asc_devkit)
    return report


def _tagged(progress, label: str):
    return None if progress is None else (lambda kernel, done, total: progress(label, kernel, done, total))


def _check_on_twin(
    report: RunReport, spec: AttentionSpec, data, target: str, dq_strategy: str, fwd_refs, bwd_refs, asc_devkit=None
) -> None:
    """Generate the Ascend C kernels, run them on the CPU twin (the real-API one with ``asc_devkit``)
    and compare their outputs too."""
    from .backends import ascendc, twin

    generated = ascendc.generate(spec, target, dq_strategy=dq_strategy)
    files = generated.files
    report.twin_schedule = generated.manifest["schedule"]
    exe = twin.build_real(files, asc_devkit) if asc_devkit is not None else twin.build(files)
    tag = "real-API twin" if asc_devkit is not None else "twin"
    fwd, grads = twin.run_attention(exe, spec, data)
    o_ref, l_ref, o_pl, l_pl = fwd_refs
    report.comparisons.append(compare(f"O ({tag})", fwd["O"], o_ref, o_pl, spec.dtype, terms=longest_sum(spec)))
    report.comparisons.append(compare(f"L ({tag})", fwd["L"], l_ref, l_pl, "fp32", terms=longest_sum(spec)))
    ref, plain = bwd_refs
    for name, r, p in zip(("dQ", "dK", "dV"), ref, plain):
        report.comparisons.append(
            compare(f"{name} ({tag})", grads[name], r, p, spec.dtype, rel_floor=lse_rel_floor(fwd["L"]), terms=longest_sum(spec))
        )


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
