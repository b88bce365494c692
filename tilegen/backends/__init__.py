"""Backends: the NumPy interpreter, Ascend C (with its CPU twin) and Triton.

Code generators return a :class:`Generated` (file name -> text, and the manifest facts) that
:func:`write` puts on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError


@dataclass
class Generated:
    """Generated files (name -> text); ``manifest`` is also rendered as ``manifest.json``."""

    files: dict[str, str]
    manifest: dict[str, Any]


def launch_label(name: str, phases: list[str]) -> str:
    """How the Ascend C kernel files and ``tilegen generate`` name one launch: ``name`` (its symbol),
    and for a launch of several kernels the program's names for them (``phases``: the IR's
    ``Kernel.name`` in launch order, the manifest schedule's ``phases``) with SyncAll between, e.g.
    ``tilegen_tiny_bwd (kernels pre, main, post, SyncAll between)``. The names are not cut out of the
    kernels' symbols, which need not be ``<name>_<phase>``: the forward's own kernel is called like its
    program (``tilegen_x_fwd``), which is the launch's symbol too when a classify kernel runs first.
    Here, not in the Ascend C backend, so that ``generate`` served from the compile cache imports no
    compiler."""
    if len(phases) == 1:
        return name
    return f"{name} (kernels {', '.join(phases)}, SyncAll between)"


def with_manifest(files: dict[str, str], manifest: dict[str, Any]) -> Generated:
    """Add the SHA-256 of every file to ``manifest`` and ``manifest.json`` to the files."""
    manifest = dict(manifest, files={n: hashlib.sha256(t.encode()).hexdigest() for n, t in sorted(files.items())})
    files = dict(files)
    files["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    return Generated(files, manifest)


def check_gpu_dkv(dkv_strategy: str | None, target) -> None:
    """A GPU target's Triton backward keeps dK, dV on chip: ``dkv_strategy`` must resolve to on-chip.

    Raises:
        SpecError: ``"atomic"`` (or an unknown strategy)."""
    from ..passes.pipeline import resolve_dkv_strategy

    if resolve_dkv_strategy(dkv_strategy, target) != "on-chip":
        raise SpecError("dkv_strategy", dkv_strategy, "on-chip or auto for a GPU target (its Triton backward keeps dK, dV on chip)")


def dq_strategy_for(spec, target, dq_strategy: str | None = None, tile_sizes=None) -> str:
    """The backward's dQ strategy for ``spec`` on ``target``: ``dq_strategy`` when given; on a GPU target
    the one its schedule takes (:func:`tilegen.backends.triton.schedule`: the first backward
    ``[[triton.schedule]]`` row that applies, else ``triton.dq_strategy``); otherwise (an Ascend
    target, or none) ``"atomic"``. What ``generate``, ``inspect`` and ``run`` use when no strategy is
    named, so that the three agree with ``tilegen.torch``.

    Raises:
        TargetError: an unknown target; ScheduleError: ``tile_sizes`` that do not fit it."""
    if dq_strategy is not None or target is None:
        return dq_strategy or "atomic"
    from ..targets import load_target

    tgt = load_target(target)
    if tgt.kind != "gpu":
        return "atomic"
    from . import triton as backend

    return backend.schedule(spec, tgt, None, tile_sizes)[1].program.attr("dq_strategy")


def generate(spec, target, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None) -> Generated:
    """The file set of ``spec`` for ``target``: Triton for a GPU target, Ascend C for an Ascend one
    (see :func:`tilegen.backends.triton.generate` and :func:`tilegen.backends.ascendc.generate`).
    ``dq_strategy`` None: the target's choice (:func:`dq_strategy_for`).
    ``dkv_strategy`` (Ascend C only; the Triton backward keeps dK, dV on chip): as
    :func:`tilegen.passes.pipeline.resolve_dkv_strategy`.

    Raises:
        SpecError: ``dkv_strategy="atomic"`` for a GPU target, or an unknown strategy.
    """
    from ..targets import load_target

    if load_target(target).kind == "gpu":
        from . import triton as backend

        check_gpu_dkv(dkv_strategy, target)
        return backend.generate(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes)
    from . import ascendc as backend

    return backend.generate(spec, target, dq_strategy=dq_strategy or "atomic", tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)


def write(generated: Generated, out_dir) -> list[str]:
    """Write a generated file set into ``out_dir`` (created if needed).

    Every file is first written to a staging folder next to ``out_dir``, then moved into place one
    rename at a time, ``manifest.json`` last: an error before the moves leaves the previous output as
    it was, and each file is replaced atomically.

    Raises:
        SpecError: ``out_dir`` exists and is not a folder, or cannot be created or written.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SpecError("-o", str(out), "a folder (it exists and is a file)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    except OSError as exc:
        raise SpecError("-o", str(out), f"a folder tilegen can create and write ({exc.strerror or exc})") from None
    try:
        names = sorted(n for n in generated.files if n != "manifest.json") + ["manifest.json"]
        for name in names:
            (stage / name).write_text(generated.files[name], encoding="utf-8")
        for name in names:
            os.replace(stage / name, out / name)
    except OSError as exc:
        raise SpecError("-o", str(out), f"a writable folder ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return names
