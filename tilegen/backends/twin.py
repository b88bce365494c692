"""Run generated Ascend C kernels on the CPU twin (g++ against ``tilegen/twin/include``).

:func:`build` compiles a generated kernel set's ``twin_main.cpp`` once (cached by the sources' hash);
:func:`run_program` writes the inputs as raw files, runs the forward or backward kernels with the
given number of AI Cores and reads the outputs back as NumPy arrays in logical BNSD order.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .. import dtypes
from ..errors import TilegenError
from ..spec import AttentionSpec

TWIN_INCLUDE = Path(__file__).resolve().parent.parent / "twin" / "include"


class TwinError(TilegenError):
    """The twin build failed, or a kernel broke an Ascend C rule at run time (the twin's one line)."""


def compiler() -> str | None:
    """The C++ compiler used for twin builds (``$CXX`` or g++), or None when there is none."""
    return shutil.which(os.environ.get("CXX", "g++"))


def build(files: dict[str, str], cache_dir: str | Path | None = None) -> Path:
    """Compile ``twin_main.cpp`` of a generated kernel set; returns the executable.

    Raises:
        TwinError: no compiler, or the build failed (the compiler's first error lines).
    """
    cxx = compiler()
    if cxx is None:
        raise TwinError("no C++ compiler (g++) for the CPU twin")
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    for header in sorted(TWIN_INCLUDE.rglob("*.h")):
        digest.update(header.read_bytes())
    key = digest.hexdigest()[:16]
    root = Path(cache_dir or os.environ.get("TILEGEN_TWIN_CACHE", Path(tempfile.gettempdir()) / "tilegen-twin"))
    out = root / key
    exe = out / "twin_main"
    cmd = [cxx, "-std=c++17", "-O1", "-pthread", f"-I{TWIN_INCLUDE}", f"-I{out}", str(out / "twin_main.cpp"), "-o", str(exe) + ".tmp"]
    # A build is reused only for the very request it was made for (full digest, compiler and flags),
    # with its sources and executable intact: a colliding or damaged folder is built again.
    request = "\0".join([digest.hexdigest(), *cmd])
    stamp = out / "request.txt"
    try:
        if (
            stamp.read_text() == request + "\0" + hashlib.sha256(exe.read_bytes()).hexdigest()
            and all((out / n).read_text() == t for n, t in files.items())
        ):
            return exe
    except (OSError, UnicodeDecodeError):
        pass
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln][:8] or proc.stderr.splitlines()[:8]
        raise TwinError("twin build failed:\n" + "\n".join(lines))
    os.replace(str(exe) + ".tmp", exe)
    stamp.write_text(request + "\0" + hashlib.sha256(exe.read_bytes()).hexdigest())
    return exe


def run_attention(
    exe: Path, spec: AttentionSpec, data: dict[str, np.ndarray], blocks: int = 4, timeout: float = 600.0
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run a twin build's forward, then its backward on the forward's O and L.

    Args:
        spec: the sizes to run (head dims, dtype, mask and layout as the build's spec).
        data: logical BNSD Q, K, V, dO in the spec's dtype.

    Returns:
        ({"O", "L"}, {"dQ", "dK", "dV"}): logical BNSD arrays (O and the gradients in the spec's
        dtype, L float32).

    Raises:
        TwinError: a run failed; the message is the twin's failure line.
    """
    shapes = spec.logical_shapes
    layouts = {n: spec.layout for n in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV")}
    fwd = run_program(
        exe, spec, "fwd", {n: data[n] for n in "QKV"},
        {"O": (shapes["O"], spec.dtype), "L": (shapes["L"], "fp32")}, layouts, blocks=blocks, timeout=timeout,
    )
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"]}
    bwd = run_program(
        exe, spec, "bwd", feeds, {n: (shapes[n], spec.dtype) for n in ("dQ", "dK", "dV")}, layouts,
        blocks=blocks, timeout=timeout,
    )
    return fwd, bwd


def _physical(x: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(x if layout == "BNSD" or x.ndim != 4 else x.transpose(0, 2, 1, 3))


def run_program(
    exe: Path,
    spec: AttentionSpec,
    program: str,
    inputs: dict[str, np.ndarray],
    outputs: dict[str, tuple[tuple[int, ...], str]],
    layouts: dict[str, str],
    blocks: int = 4,
    timeout: float = 600.0,
) -> dict[str, np.ndarray]:
    """Run the ``program`` (``"fwd"``/``"bwd"``) kernels of a twin build.

    Args:
        inputs: logical BNSD arrays by tensor name (written in each tensor's layout).
        outputs: tensor name → (logical shape, dtype name) to read back.
        layouts: tensor name → ``BNSD``/``BSND``.

    Raises:
        TwinError: the run failed; the message is the twin's failure line.
    """
    with tempfile.TemporaryDirectory(prefix="tilegen-twin-run-") as tmp:
        for name, array in inputs.items():
            _physical(np.asarray(array), layouts.get(name, "BNSD")).tofile(os.path.join(tmp, f"{name}.bin"))
        args = [str(exe), program, tmp, str(blocks), str(spec.batch), str(spec.heads_q), str(spec.heads_kv), str(spec.seq_q), str(spec.seq_k)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            msg = [ln for ln in proc.stderr.splitlines() if ln.strip()][-3:]
            raise TwinError(f"twin run of {program} failed (exit {proc.returncode}): " + " | ".join(msg))
        result = {}
        for name, (shape, dtype) in outputs.items():
            layout = layouts.get(name, "BNSD")
            phys = shape if layout == "BNSD" or len(shape) != 4 else (shape[0], shape[2], shape[1], shape[3])
            data = np.fromfile(os.path.join(tmp, f"{name}.out"), dtype=dtypes.numpy_dtype(dtype)).reshape(phys)
            result[name] = data if layout == "BNSD" or len(shape) != 4 else data.transpose(0, 2, 1, 3)
        return result
