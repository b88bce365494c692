"""What a code generator returns and how it lands on disk: a :class:`Generated` file set (file name ->
text, and the manifest facts) that :func:`write` puts in a folder, all files or none."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilegen.core.errors import SpecError


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


def write(generated: Generated, out_dir) -> list[str]:
    """Write a generated file set into ``out_dir`` (created if needed).

    Every file is first written to a staging folder inside ``out_dir`` (hidden, ``.tilegen-staging-*``),
    then moved into place one rename at a time, ``manifest.json`` last, and the staging folder removed:
    the staging folder is on ``out_dir``'s file system even when ``out_dir`` is a mount point (a
    rename cannot cross file systems), so each file is replaced atomically. An error or an interrupt
    before the moves leaves the previous output as it was, and folders this call created are removed.
    Files an earlier output listed in its ``manifest.json`` that this one does not write (another
    spec's module, say) are removed after the moves, so the folder holds exactly one output; files the
    old manifest does not list are never touched.

    Raises:
        SpecError: ``out_dir`` exists and is not a folder, or cannot be created or written (names the
            path and the system's reason).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SpecError("-o", str(out), "a folder (it exists and is a file)")
    created = [p for p in (out, *out.parents) if not p.exists()]  # what mkdir makes, deepest first
    stage = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".tilegen-staging-", dir=out))
        names = sorted(n for n in generated.files if n != "manifest.json") + ["manifest.json"]
        for name in names:
            (stage / name).write_text(generated.files[name], encoding="utf-8")
        stale = sorted(set(_listed(out / "manifest.json")) - set(names))
        for name in names:
            os.replace(stage / name, out / name)
        for name in stale:
            (out / name).unlink(missing_ok=True)
    except BaseException as exc:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for folder in created:  # nothing partial: the folders made for this output go again
            if folder == out:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                _rmdir_quiet(folder)
        if isinstance(exc, OSError):
            raise SpecError("-o", str(out), f"a folder tilegen can create and write ({exc.strerror or exc})") from None
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return names


def _listed(manifest: Path) -> list[str]:
    """The plain file names an earlier output's manifest lists (none when it is absent or unreadable)."""
    try:
        files = json.loads(manifest.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in files if isinstance(n, str) and n == Path(n).name and not n.startswith(".")]


def _rmdir_quiet(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass
