"""The Python API: NumPy in, NumPy out, backed by the interpreter.

``attention`` and ``attention_backward`` build an :class:`~tilegen.spec.AttentionSpec` from the arrays,
run the whole pipeline (build, passes, schedule) and execute the program in the NumPy interpreter. They
are for checking and for small problems; the generated kernels are what runs fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dtypes
from .errors import SpecError
from .passes import pipeline
from .spec import ALIGNMENTS, LAYOUTS, AttentionSpec
from .backends.interp import interpret

_ACCEPTED_DTYPES = "numpy.float16, ml_dtypes.bfloat16 or numpy.float32"


def _check_array(name: str, x: Any, ndim: int) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise SpecError(name, type(x).__name__, f"a numpy.ndarray of {_ACCEPTED_DTYPES}")
    if dtypes.name_of(x.dtype) is None:
        raise SpecError(f"{name}.dtype", str(x.dtype), _ACCEPTED_DTYPES)
    if x.ndim != ndim:
        raise SpecError(f"{name}.shape", x.shape, f"{ndim} dimensions")
    return x


def _logical(x: np.ndarray, layout: str) -> np.ndarray:
    """A BNSD view of ``x`` (no copy): BSND arrays are transposed, their strides honoured."""
    return x if layout == "BNSD" else x.transpose(0, 2, 1, 3)


def _physical(x: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(x if layout == "BNSD" else x.transpose(0, 2, 1, 3))


def _window(causal: Any, window: Any) -> tuple[int, int]:
    if not isinstance(causal, (bool, np.bool_)):
        raise SpecError("causal", causal, "True or False")
    if (
        not isinstance(window, (tuple, list))
        or len(window) != 2
        or any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < -1 for w in window)
    ):
        raise SpecError("window", window, "(left, right): two integers, each >= 0 or -1 for unbounded")
    left, right = int(window[0]), int(window[1])
    if causal:
        if right not in (-1, 0):
            raise SpecError("window", tuple(window), "right = -1 or 0 when causal=True (causal sets right = 0)")
        right = 0
    return left, right


def make_spec(
    q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), alignment="bottom_right", layout="BNSD", score_mod=None, mask_mod=None
) -> AttentionSpec:
    """The spec of an attention call on these arrays (validated; errors name the argument).

    Args:
        q: [B, Hq, Sq, Dqk] (BNSD) or [B, Sq, Hq, Dqk] (BSND).
        k: [B, Hkv, Sk, Dqk] or [B, Sk, Hkv, Dqk]; v likewise with Dv.

    Raises:
        SpecError (a ValueError): wrong type, dtype, rank or shape, mismatched dtypes, heads not
            divisible, a bad window, scale, alignment or layout; an invalid mod
            (:class:`tilegen.mods.ModError`).
    """
    spec, _ = make_spec_and_params(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window=window, alignment=alignment, layout=layout, score_mod=score_mod, mask_mod=mask_mod
    )
    return spec


def make_spec_and_params(
    q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), alignment="bottom_right", layout="BNSD", score_mod=None, mask_mod=None
) -> tuple[AttentionSpec, dict]:
    """:func:`make_spec` and the parameter arrays the mods read, by name (checked against the spec's
    declarations: shapes, dtype kinds)."""
    from .mods import check_param_arrays, mods_from_api, _intersect
    if layout not in LAYOUTS:
        raise SpecError("layout", layout, " or ".join(repr(x) for x in LAYOUTS))
    if alignment not in ALIGNMENTS:
        raise SpecError("alignment", alignment, " or ".join(repr(x) for x in ALIGNMENTS))
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_array(name, x, 4)
    if not (q.dtype == k.dtype == v.dtype):
        raise SpecError("k.dtype", f"q {q.dtype}, k {k.dtype}, v {v.dtype}", "the same dtype for q, k and v")
    lq, lk, lv = (_logical(x, layout) for x in (q, k, v))
    bsz, hq, sq, dqk = lq.shape
    if lk.shape[0] != bsz or lk.shape[3] != dqk:
        raise SpecError("k.shape", k.shape, f"batch {bsz} and head dim {dqk} like q (layout {layout})")
    if lv.shape[:3] != lk.shape[:3]:
        raise SpecError("v.shape", v.shape, f"the batch, heads and length of k {k.shape} (layout {layout})")
    for name, size in (("q", bsz), ("q", hq), ("q", sq), ("q", dqk), ("k", lk.shape[2]), ("v", lv.shape[3])):
        if size == 0:
            raise SpecError(f"{name}.shape", {"q": q, "k": k, "v": v}[name].shape, "no zero-sized dimension")
    if hq % lk.shape[1]:
        raise SpecError("k.shape", k.shape, f"a head count that divides q's {hq} heads (layout {layout})")
    if softmax_scale is not None and (
        isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float, np.floating)) or not softmax_scale > 0 or not np.isfinite(softmax_scale)
    ):
        raise SpecError("softmax_scale", softmax_scale, "a positive finite number or None")
    score_text, mask_text, decls, mod_window, arrays = mods_from_api(score_mod, mask_mod)
    spec = AttentionSpec(
        batch=bsz,
        heads_q=hq,
        heads_kv=lk.shape[1],
        seq_q=sq,
        seq_k=lk.shape[2],
        head_dim_qk=dqk,
        head_dim_v=lv.shape[3],
        dtype=dtypes.name_of(q.dtype),
        scale=None if softmax_scale is None else float(softmax_scale),
        window=_intersect(_window(causal, window), mod_window),
        alignment=alignment,
        layout=layout,
        name="api",
        score_mod=score_text,
        mask_mod=mask_text,
        params=decls,
    )
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    params = check_param_arrays(spec.mods, arrays, sizes) if spec.has_mods else {}
    return spec, params


def attention(
    q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), alignment="bottom_right", layout="BNSD", target=None, tile_sizes=None,
    score_mod=None, mask_mod=None,
):
    """FlashAttention forward in the interpreter.

    Args:
        q, k, v: arrays of one dtype (float16, bfloat16, float32); BNSD: q [B, Hq, Sq, Dqk], k [B, Hkv,
            Sk, Dqk], v [B, Hkv, Sk, Dv]; BSND: [B, S, N, D]. GQA/MQA when Hkv divides Hq.
        softmax_scale: S = scale·QKᵀ; None → 1/sqrt(Dqk).
        causal: window (left, 0); window: (left, right), -1 unbounded (DESIGN §3).
        alignment: ``"bottom_right"`` (FlashAttention >= 2.1) or ``"top_left"``.
        target: a target name whose schedule to use (None: default tile sizes).
        tile_sizes: (Br, Bc) or {"Br": .., "Bc": ..} to force the tile sizes.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` or a :mod:`tilegen.mods` built-in
            (DESIGN §3: applied to the scaled score where the mask holds).
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx)`` or a built-in, and-ed with causal/window.

    Returns:
        (o in the input dtype and layout, lse float32 [B, Hq, Sq], natural log; -inf on empty rows).

    Raises:
        SpecError (ValueError): a bad argument, named.
    """
    spec, params = make_spec_and_params(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window=window, alignment=alignment, layout=layout, score_mod=score_mod, mask_mod=mask_mod
    )
    program = pipeline.compile_forward(spec, target=target, tile_sizes=tile_sizes)
    outputs, _ = interpret(program, {"Q": _logical(q, layout), "K": _logical(k, layout), "V": _logical(v, layout), **params})
    return _physical(outputs["O"], layout), outputs["L"]


def attention_backward(
    q,
    k,
    v,
    o,
    lse,
    do,
    *,
    softmax_scale=None,
    causal=False,
    window=(-1, -1),
    alignment="bottom_right",
    layout="BNSD",
    dq_strategy="atomic",
    target=None,
    tile_sizes=None,
    score_mod=None,
    mask_mod=None,
):
    """FlashAttention recompute backward in the interpreter (the fused program).

    Args:
        q, k, v: as for :func:`attention`; o: the forward output (input dtype, q's layout with Dv);
        lse: float32 [B, Hq, Sq] from the forward; do: dL/dO like o.
        dq_strategy: ``"atomic"`` (fp32 workspace, atomic adds) or ``"separate"`` (a second nest over Q
            tiles, deterministic); see ``tilegen.passes.pipeline.DQ_STRATEGIES``.

        score_mod, mask_mod: as for :func:`attention` (the same mods the forward ran with).

    Returns:
        (dq like q, dk like k, dv like v), in the input dtype and layout; dk and dv are summed over each
        GQA group. When a mod reads floating-point parameter arrays: (dq, dk, dv, dparams) with
        dparams a dict by parameter name of float32 arrays of the parameters' shapes, reduced from
        per-tile partials in a fixed order (deterministic).

    Raises:
        SpecError (ValueError): a bad argument, named.
    """
    spec, params = make_spec_and_params(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window=window, alignment=alignment, layout=layout, score_mod=score_mod, mask_mod=mask_mod
    )
    expect_o = spec.logical_shapes["O"]
    for name, x in (("o", o), ("do", do)):
        _check_array(name, x, 4)
        if x.dtype != q.dtype:
            raise SpecError(f"{name}.dtype", str(x.dtype), f"{q.dtype}, the dtype of q")
        if _logical(x, layout).shape != expect_o:
            raise SpecError(f"{name}.shape", x.shape, f"{_physical_shape(expect_o, layout)} (layout {layout})")
    accepted_lse = f"a float32 array of shape {expect_o[:3]} (the forward's logsumexp)"
    if not isinstance(lse, np.ndarray):
        raise SpecError("lse", type(lse).__name__, accepted_lse)
    if lse.dtype != np.float32:
        raise SpecError("lse.dtype", str(lse.dtype), accepted_lse)
    if lse.shape != expect_o[:3]:
        raise SpecError("lse.shape", lse.shape, accepted_lse)
    program = pipeline.compile_backward(spec, dq_strategy=dq_strategy, target=target, tile_sizes=tile_sizes)
    feeds = {
        "Q": _logical(q, layout),
        "K": _logical(k, layout),
        "V": _logical(v, layout),
        "O": _logical(o, layout),
        "L": lse,
        "dO": _logical(do, layout),
        **params,
    }
    grads, _ = interpret(program, feeds)
    out = tuple(_physical(grads[n], layout) for n in ("dQ", "dK", "dV"))
    mods = program.mods
    if mods is not None and mods.grads:
        from .mods import param_grads

        return out + (param_grads(program, grads),)
    return out


def _physical_shape(shape, layout):
    return shape if layout == "BNSD" else (shape[0], shape[2], shape[1], shape[3])


# --- generate and inspect ------------------------------------------------------------------------------


def _as_spec(spec) -> AttentionSpec:
    """An :class:`AttentionSpec`, a built-in spec's name or a spec file's path, as a spec."""
    from pathlib import Path

    from .spec import builtin_spec, builtin_specs, load_spec

    if isinstance(spec, AttentionSpec):
        return spec
    if isinstance(spec, (str, Path)):
        if isinstance(spec, str) and spec in builtin_specs():
            return builtin_spec(spec)
        if Path(spec).suffix.lower() in (".toml", ".yaml", ".yml"):
            return load_spec(spec)
    raise SpecError("spec", spec, "an AttentionSpec, a built-in spec name (" + ", ".join(builtin_specs()) + ") or a .toml/.yaml file")


@dataclass
class GenerateResult:
    """What :func:`generate` wrote.

    Attributes:
        spec, target: what was generated, for which target (its name).
        out_dir: the folder written; files: the file names in it.
        schedule: {"forward": {"Br", "Bc", "kernels"}, "backward": ...}, as in manifest.json.
        manifest: the whole manifest (backend, dq strategy, SHA-256 of each file, ...).
    """

    spec: AttentionSpec
    target: str
    out_dir: Any
    files: list
    schedule: dict
    manifest: dict

    def to_json(self) -> str:
        return json.dumps(
            {"spec": self.spec.to_dict(), "target": self.target, "out_dir": str(self.out_dir), "files": self.files,
             "schedule": self.schedule, "manifest": self.manifest},
            indent=2,
        )


@dataclass
class InspectResult:
    """What :func:`inspect` found: ``report`` is the plain data ``tilegen inspect --json`` prints.

    Attributes:
        spec, target: the problem and the target's name (None: default tile sizes, no prediction).
        programs: one dict per program (label, kernels, tiles, schedule candidates, footprints,
            prediction with ``time_s`` in seconds, HBM bytes by tensor); a program without a fitting
            tile has ``error`` and ``rejected`` instead.
    """

    spec: AttentionSpec
    target: str | None
    report: dict

    @property
    def programs(self) -> list:
        return self.report["programs"]

    def tiles(self, program: str = "forward") -> dict:
        """{"Br", "Bc"} of the program whose label starts with ``program`` ("forward", "backward")."""
        return self._program(program)["tiles"]

    def predicted_s(self, program: str = "forward") -> float:
        """The predicted time of a program in seconds (needs a target)."""
        return self._program(program)["prediction"]["time_s"]

    def _program(self, program: str) -> dict:
        for p in self.programs:
            if p["label"].startswith(program):
                return p
        raise SpecError("program", program, "one of " + ", ".join(p["label"] for p in self.programs))

    def to_json(self) -> str:
        return json.dumps(self.report, indent=2)

    def __str__(self) -> str:
        from .report import format_inspect

        return format_inspect(self.report)


def generate(spec, target: str = "ascend910b2", out_dir=None, *, dq_strategy: str = "atomic", tile_sizes=None) -> GenerateResult:
    """Write the kernels, host code, build files and manifest of ``spec`` for ``target`` into
    ``out_dir`` (created if needed), as ``tilegen generate`` does.

    Args:
        spec: an :class:`AttentionSpec`, a built-in spec's name or a spec file.
        target: ``ascend910b1``..``b4`` (Ascend C) or ``h200`` (Triton), or a target file.
        tile_sizes: (Br, Bc) to force for both programs.

    Raises:
        SpecError, TargetError, ScheduleError: a bad spec, target or output folder; no fitting tile.
    """
    from .backends import generate as generate_files, write

    spec = _as_spec(spec)
    if out_dir is None:
        raise SpecError("out_dir", None, "a folder to write the files into")
    generated = generate_files(spec, target, dq_strategy, tile_sizes)
    names = write(generated, out_dir)
    return GenerateResult(spec, generated.manifest["target"], out_dir, names, generated.manifest["schedule"], generated.manifest)


def inspect(spec, target: str | None = None, *, dq_strategy: str = "atomic", tile_sizes=None, programs=("fwd", "bwd")) -> InspectResult:
    """The schedule of ``spec`` on ``target`` as ``tilegen inspect`` reports it (tile sizes and every
    candidate, footprints against capacity, predicted traffic, FLOPs and time, the loop nest).

    Raises:
        SpecError, TargetError: a bad spec or target.
    """
    from .report import inspect_report

    spec = _as_spec(spec)
    report = inspect_report(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes, programs=tuple(programs))
    return InspectResult(spec, report["target"]["name"] if report["target"] else None, report)
