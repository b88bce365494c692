"""Run generated Ascend C kernels on the CPU twin, in one of two modes.

- The hand twin: :func:`build` compiles a generated kernel set's ``twin_main.cpp`` with g++ against
  ``tilegen/twin/include``, tilegen's own emulation of the Ascend C API.
- The real-API twin: :func:`build_real` compiles each ``<label>_kernels.asc`` with clang++-16 against
  Huawei's public Ascend C headers (an asc-devkit snapshot: ``include/``, ``impl/``) in device mode for
  dav-c220, once per MIX pass (cube, vector), and links tilegen's CPU implementation of the CCE
  intrinsics those headers call (``tilegen/twin/cce/``); only that intrinsic layer is tilegen's model.

Both are cached by the sources' hash and run through the same harness (``twin_main.cpp``):
:func:`run_program` writes the inputs as raw files, runs the forward or backward kernels with the
given number of AI Cores and reads the outputs back as NumPy arrays in logical BNSD order.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from tilegen.core import dtypes
from tilegen.core.errors import SpecError, TilegenError
from tilegen.core.exprs import evaluate
from tilegen.core.progress import step, steps
from tilegen.core.resources import package_dir
from tilegen.core.spec import AttentionSpec

TWIN_INCLUDE = package_dir() / "twin" / "include"
CCE_DIR = package_dir() / "twin" / "cce"
RULES_HEADER = TWIN_INCLUDE / "twin" / "rules.h"  # the rules both twins name; the CCE layer includes it
REAL_CXX = "clang++-16"  # the real-API twin needs clang (x86 GS address space, _Float16); $TILEGEN_CLANG overrides


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
    out = _cache_root(cache_dir) / key
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
        _write_atomic(out / name, text)
    tmp = _private(exe)  # two processes building the same key must not share a temporary file
    with step(f"build the CPU twin ({Path(cxx).name})"):
        proc = subprocess.run([*cmd[:-1], tmp], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln][:8] or proc.stderr.splitlines()[:8]
        raise TwinError("twin build failed:\n" + "\n".join(lines))
    os.replace(tmp, exe)
    stamp.write_text(request + "\0" + hashlib.sha256(exe.read_bytes()).hexdigest())
    return exe


def _private(path: Path) -> str:
    """A temporary name beside ``path`` that no other process building the same key uses."""
    return f"{path}.tmp{os.getpid()}-{threading.get_ident()}"


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a private temporary file, so that a concurrent build of the
    same key never reads a half-written source."""
    tmp = _private(path)
    Path(tmp).write_text(text)
    os.replace(tmp, path)


def real_compiler() -> str | None:
    """The clang++ used for real-API twin builds (``$TILEGEN_CLANG`` or clang++-16), or None."""
    return shutil.which(os.environ.get("TILEGEN_CLANG", REAL_CXX))


def check_devkit(devkit: str | Path) -> Path:
    """The asc-devkit snapshot folder ``devkit`` as a resolved path.

    Raises:
        SpecError: ``devkit`` does not hold ``include/kernel_operator.h`` and ``impl/basic_api/dav_c220/``.
    """
    path = Path(devkit).expanduser()
    if not (path / "include" / "kernel_operator.h").is_file() or not (path / "impl" / "basic_api" / "dav_c220").is_dir():
        raise SpecError(
            "--asc-devkit", str(devkit),
            "a folder holding an asc-devkit snapshot (include/kernel_operator.h and impl/basic_api/dav_c220/), "
            "e.g. a checkout of cannmirror/asc-devkit",
        )
    return path.resolve()


def _cache_root(cache_dir) -> Path:
    return Path(cache_dir or os.environ.get("TILEGEN_TWIN_CACHE", Path(tempfile.gettempdir()) / "tilegen-twin"))


def tiling_header_dir(devkit: Path, cache_dir=None) -> Path:
    """A folder holding ``kernel_tiling/kernel_tiling.h``, the header CANN's build generates from the
    advanced API: ``$ASC_GEN`` when it has it, else made once with the snapshot's own script
    (``impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py``) in the twin cache.

    Raises:
        TwinError: ``$ASC_GEN`` lacks the header and the script failed.
    """
    env = os.environ.get("ASC_GEN")
    if env and (Path(env) / "kernel_tiling" / "kernel_tiling.h").is_file():
        return Path(env).resolve()
    out = _cache_root(cache_dir) / ("asc-gen-" + hashlib.sha256(str(devkit).encode()).hexdigest()[:12])
    header = out / "kernel_tiling" / "kernel_tiling.h"
    if not header.is_file():
        header.parent.mkdir(parents=True, exist_ok=True)
        script = devkit / "impl" / "adv_api" / "cmake" / "scripts" / "gen_kernel_tiling_data_def.py"
        proc = subprocess.run(
            [sys.executable, str(script), "include/adv_api", _private(header)], cwd=devkit, capture_output=True, text=True
        )
        if proc.returncode != 0 or not Path(_private(header)).is_file():
            raise TwinError(f"cannot make kernel_tiling.h with {script} (set ASC_GEN): " + (proc.stderr.strip().splitlines() or [""])[-1])
        os.replace(_private(header), header)
    return out


_KERNEL = re.compile(r'extern "C" (?:__schedmode__\(\d\) )?__global__ __aicore__ void (\w+)\(')


def _real_flags(devkit: Path, gen: Path, core: str) -> list[str]:
    """clang++ flags of one MIX pass (``core`` = CUBE or VEC) in NPU device mode for dav-c220, as the
    header check /work/shared/tools/ascend-headercheck/asc_check.sh sets them, with tilegen's CCE layer
    force-included instead of a type-checking stub, and the headers' sanitizer reports on
    (``__MSTX_DFX_REPORT__``: every vector API and DataCopy/DataCopyPad names itself and its tensors to
    ``__mstx_dfx_report_stub``, which the CCE layer checks; tilegen/twin/cce/rules.h)."""
    return [
        "-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-everything",
        "-D__NPU_ARCH__=2201", "-D__CCE_AICORE__=220", "-D__NPU_DEVICE__", f"-D__DAV_{core}__", "-D__MSTX_DFX_REPORT__",
        "-include", str(CCE_DIR / "cce.h"), f"-I{CCE_DIR}", f"-I{gen}",
        f"-I{devkit}", f"-I{devkit}/include", f"-I{devkit}/include/basic_api", f"-I{devkit}/include/utils",
        f"-I{devkit}/include/adv_api", f"-I{devkit}/impl", f"-I{devkit}/impl/basic_api", f"-I{devkit}/impl/utils",
    ]


def real_flags(devkit: Path, gen: Path, core: str) -> list[str]:
    """The clang++ flags of one MIX pass (``core`` = ``"CUBE"`` or ``"VEC"``) of a real-API twin build, for
    kernels built outside a generated kernel set (tilegen/harness/ascend_peer.py): ``devkit`` the snapshot
    (:func:`check_devkit`), ``gen`` the folder of ``kernel_tiling/kernel_tiling.h`` (:func:`tiling_header_dir`)."""
    return _real_flags(devkit, gen, core)


def devkit_fingerprint(devkit: Path) -> bytes:
    """A digest of the snapshot's include/ and impl/ files (paths, sizes, times): a build keyed by it is
    redone when the snapshot changes."""
    return _devkit_fingerprint(devkit)


def _devkit_fingerprint(devkit: Path) -> bytes:
    """Path, size and mtime of every file under the snapshot's include/ and impl/ (a changed snapshot
    rebuilds)."""
    digest = hashlib.sha256()
    for top in ("include", "impl"):
        for root, _, names in sorted(os.walk(devkit / top)):
            for name in sorted(names):
                st = os.stat(os.path.join(root, name))
                digest.update(f"{os.path.relpath(os.path.join(root, name), devkit)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.digest()


def _first_errors(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "error" in ln][:8] or stderr.splitlines()[:8]
    return "\n".join(lines)


def build_real(files: dict[str, str], devkit: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Compile a generated kernel set for the real-API twin; returns the harness executable.

    Each ``<label>_kernels.asc`` becomes ``<label>_cube.so`` (``__DAV_CUBE__``) and ``<label>_vec.so``
    (``__DAV_VEC__``), built against the snapshot's ``include/`` and ``impl/`` (read in place) with
    ``tilegen/twin/cce/cce.h``; ``twin_main.cpp`` is compiled with ``tilegen/twin/cce/runtime.cpp`` and
    loads them. Cached by the sources, the CCE layer and the snapshot (its files' paths, sizes, times).

    Raises:
        SpecError: ``devkit`` is not an asc-devkit snapshot.
        TwinError: no clang++-16, or a build failed (the compiler's first error lines).
    """
    devkit = check_devkit(devkit)
    cxx = real_compiler()
    if cxx is None:
        raise TwinError(f"no {os.environ.get('TILEGEN_CLANG', REAL_CXX)} for the real-API twin (apt-get install clang-16)")
    gen = tiling_header_dir(devkit, cache_dir)
    digest = hashlib.sha256(b"real-api\0" + str(devkit).encode() + b"\0" + _devkit_fingerprint(devkit))
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    for src in [*sorted(CCE_DIR.glob("*")), RULES_HEADER]:
        if src.suffix in (".h", ".cpp"):
            digest.update(src.name.encode() + src.read_bytes())
    out = _cache_root(cache_dir) / ("real-" + digest.hexdigest()[:16])
    exe = out / "twin_main"
    if exe.is_file():
        return exe
    src_dir, stub_dir = out / "src", out / "stub"
    src_dir.mkdir(parents=True, exist_ok=True)
    stub_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        _write_atomic(src_dir / name, text)
    labels = sorted(n[: -len("_kernels.asc")] for n in files if n.endswith("_kernels.asc"))
    jobs = []
    for label in labels:
        for core, tag in (("CUBE", "cube"), ("VEC", "vec")):
            so = out / f"{label}_{tag}.so"
            cmd = [cxx, *_real_flags(devkit, gen, core), f"-I{src_dir}", str(src_dir / f"{label}_kernels.asc"), "-o", _private(so)]
            jobs.append((so, cmd))
        # the harness includes <label>_kernels.asc: here it only names the kernels of the two passes
        names = _KERNEL.findall(files[f"{label}_kernels.asc"])
        stub = ['#include "host.h"', '#include "tiling.h"'] + [f'inline const twin::Kernel {n}{{"{n}", "{label}"}};' for n in names]
        _write_atomic(stub_dir / f"{label}_kernels.asc", "\n".join(stub) + "\n")
    for name in ("twin_main.cpp", "tiling.h"):
        _write_atomic(stub_dir / name, files[name])
    jobs.append((exe, [cxx, "-std=c++17", "-O1", "-pthread", "-rdynamic", f"-I{stub_dir}", f"-I{CCE_DIR}",
                       str(stub_dir / "twin_main.cpp"), str(CCE_DIR / "runtime.cpp"), "-ldl", "-o", _private(exe)]))
    width = max(1, min(2, os.cpu_count() or 1))
    for start in steps(range(0, len(jobs), width), f"build the real-API twin ({Path(cxx).name}, {len(jobs)} objects, {width} at a time)", unit="batch"):
        batch = jobs[start : start + width]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _, cmd in batch]
        for (target, _), proc in zip(batch, procs):
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise TwinError(f"real-API twin build of {target.name} failed:\n" + _first_errors(err))
    for target, _ in jobs:
        if target != exe:
            os.replace(_private(target), target)
    os.replace(_private(exe), exe)
    return exe


def run_attention(
    exe: Path, spec: AttentionSpec, data: dict[str, np.ndarray], blocks: int = 4, timeout: float = 600.0,
    params: dict[str, np.ndarray] | None = None, programs=None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run a twin build's forward, then its backward on the forward's O and L.

    Args:
        spec: the sizes to run (head dims, dtype, mask and layout as the build's spec).
        data: logical BNSD Q, K, V, dO in the spec's dtype.
        params: for a spec with mods, its parameter arrays by name (spec values where absent); for a
            spec with sinks, ``"sinks"``: float32 [Hq], the sink logits (required).
        programs: for a spec with mods, the compiled (forward, backward) programs the build was
            generated from (``ascendc.plan_programs``; compiled here when None): the host reduces the
            parameter-gradient partials in fixed order.

    Returns:
        ({"O", "L"}, {"dQ", "dK", "dV"}): logical BNSD arrays (O and the gradients in the spec's
        dtype, L float32); with a mask mod, the forward's dict has the block table ``BM`` its classify
        kernel wrote; with float parameters or sinks, the backward's has ``dparams`` (name → fp32
        gradient, reduced on the host in fixed order; ``"sinks"``: dσ_h = −Σ_rows exp(σ_h − L)·D over the
        rows inside a sequence, :func:`tilegen.core.sinks.sink_grad`). In a packed batch (``spec.packed_ids``)
        the rows outside every sequence hold what the harness put there (NaN): the kernels never write
        them.

    Raises:
        SpecError: a spec with sinks and no ``params["sinks"]`` of shape [Hq].

    Raises:
        TwinError: a run failed; the message is the twin's failure line.
    """
    shapes = spec.logical_shapes
    layouts = {n: spec.layout for n in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV")}
    mods = spec.mods
    extra: list[dict] = [{}, {}]
    tables: list[dict] = [{}, {}]
    partials: dict = {}
    params = dict(params or {})
    sinks = params.pop("sinks", None)
    if spec.sinks:
        from tilegen.core import validate

        if sinks is None:
            raise SpecError("params[sinks]", None, f"a float32 array of shape [{spec.heads_q}] for a spec with sinks")
        sinks = validate.sinks(np.asarray(sinks), spec.heads_q)
    if mods is not None:
        from tilegen.backends import ascendc
        from tilegen.core.mods import check_param_arrays

        if programs is None:
            programs = [p.program for p in ascendc.plan_programs(spec)[1]]
        arrays = check_param_arrays(mods, params or {}, {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv,
                                                         "Sq": spec.seq_q, "Sk": spec.seq_k})
        for n, prog in enumerate(programs):
            extra[n] = {t.name: arrays[t.name] for t in prog.tensors if t.name in arrays}
            penv = {str(k): int(v) for k, v in prog.env}
            for t in prog.tensors:
                if t.kind == "tiles":  # the block table its classify kernel wrote
                    tables[n][t.name] = (tuple(int(evaluate(d, penv)) for d in t.shape), "fp32")
        env = {str(k): int(v) for k, v in programs[1].env}
        nq, nk = -(-spec.seq_q // env["Br"]), -(-spec.seq_k // env["Bc"])
        for t in programs[1].tensors:
            if t.kind == "partial":
                width = int(evaluate(t.shape[-1], env))
                partials[t.name] = ((spec.batch, spec.heads_q, nq, nk, 2, width), "fp32")
    if spec.sinks:
        extra[0]["sinks"] = sinks
    fwd = run_program(
        exe, spec, "fwd", {**{n: data[n] for n in "QKV"}, **extra[0]},
        {"O": (shapes["O"], spec.dtype), "L": (shapes["L"], "fp32"), **tables[0]}, layouts, blocks=blocks, timeout=timeout,
    )
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"], **extra[1]}
    bwd = run_program(
        exe, spec, "bwd", feeds, {**{n: (shapes[n], spec.dtype) for n in ("dQ", "dK", "dV")}, **partials}, layouts,
        blocks=blocks, timeout=timeout,
    )
    if partials:
        bwd["dparams"] = ascendc.reduce_partials(programs[1], {n: bwd[n] for n in partials})
    if spec.sinks:
        from tilegen.core.sinks import sink_grad

        rows = None
        if spec.packed_ids:
            ids = extra[0].get(spec.packed_ids[0])
            rows = np.asarray(ids if ids is not None else mods.param(spec.packed_ids[0]).values).reshape(-1) >= 0
        dsinks = sink_grad(fwd["O"], data["dO"], fwd["L"], sinks, rows=rows)
        bwd["dparams"] = {**bwd.get("dparams", {}), "sinks": dsinks}
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
    env: dict[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """Run the ``program`` (``"fwd"``/``"bwd"``) kernels of a twin build.

    Args:
        inputs: logical BNSD arrays by tensor name (written in each tensor's layout).
        outputs: tensor name → (logical shape, dtype name) to read back.
        layouts: tensor name → ``BNSD``/``BSND``.
        env: variables added to the run's environment (e.g. ``TWIN_TRACE``, tilegen/twin/README.md).

    Raises:
        TwinError: the run failed; the message is the twin's failure line.
    """
    with tempfile.TemporaryDirectory(prefix="tilegen-twin-run-") as tmp:
        for name, array in inputs.items():
            _physical(np.asarray(array), layouts.get(name, "BNSD")).tofile(os.path.join(tmp, f"{name}.bin"))
        args = [str(exe), program, tmp, str(blocks), str(spec.batch), str(spec.heads_q), str(spec.heads_kv), str(spec.seq_q), str(spec.seq_k)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env} if env else None)
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
