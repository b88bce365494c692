"""The host side of the emitted Ascend C type-checks against real public headers.

``tilegen_ops.asc`` (the TORCH_LIBRARY binding, the tensor checks, the launches) and ``tiling.h`` of
every folder under generated/ are compiled with ``-fsyntax-only`` against torch's own headers
(``torch.utils.cpp_extension.include_paths()``), and torch_npu's and ACL's headers as the torch-npu
wheel ships them (``torch_npu/include``, holding ``torch_npu/csrc/core/npu/NPUStream.h`` and
``acl/acl_rt.h``). Where is that: ``$TORCH_NPU_INCLUDE``, else the include folder of an installed
torch_npu; e.g. ``pip download --no-deps torch-npu==2.13.0 -d /tmp/w && unzip -q /tmp/w/*.whl
'torch_npu/include/*' -d /tmp/w`` and ``TORCH_NPU_INCLUDE=/tmp/w/torch_npu/include`` (2.13.0: the release
for torch 2.13, the version the test extra pins; .ci/run does this).

Without clang++-16, torch's headers or torch_npu's, the tests skip with one line naming what is missing;
with ``TILEGEN_REQUIRE_HOST_CHECK=1`` (CI sets it) they fail instead, so that the check cannot be
skipped silently. torch's and torch_npu's headers are precompiled once per session (shared by the
pytest-xdist workers), with their templates instantiated in the precompiled header; the units are
compiled two at a time.

The device kernels are not part of this pass (tests/test_ascend_headers.py checks them): their
``#include`` lines become ``extern "C"`` declarations with the kernels' own parameter lists, and
bisheng's ``kernel<<<numBlocks, dynUBufSize, stream>>>(args)`` becomes a call of a function with the
launch's documented parameters (asc-devkit@0da921b9 docs/zh/guide/编程指南/编程模型/AI-Core-SIMD编程/
核函数.md: numBlocks, dynUBufSize in bytes, an aclrtStream), which checks the kernel's argument count and
types too. What stays unchecked: the ``<<<>>>`` syntax itself and the host/device split (bisheng only),
linking, CMakeLists.txt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = sorted((ROOT / "generated").glob("*/ascend910b*"))
KERNEL_FILES = ("fwd_kernels.asc", "bwd_kernels.asc")


def torch_npu_include() -> Path | None:
    """The folder with torch_npu's and ACL's headers (``torch_npu/csrc/...``, ``acl/acl_rt.h``), or None."""
    env = os.environ.get("TORCH_NPU_INCLUDE")
    candidates = [Path(env)] if env else []
    spec = importlib.util.find_spec("torch_npu") if not env else None
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "include")
    for c in candidates:
        if (c / "torch_npu" / "csrc" / "core" / "npu" / "NPUStream.h").is_file() and (c / "acl" / "acl_rt.h").is_file():
            return c
    return None


def torch_includes() -> list[str] | None:
    """torch's C++ include folders (those of ``torch.utils.cpp_extension.include_paths()``) and Python's,
    found without importing torch; None when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    inc = Path(spec.origin).parent / "include"
    if not (inc / "torch" / "extension.h").is_file():
        return None
    return [str(inc), str(inc / "torch" / "csrc" / "api" / "include"), sysconfig.get_paths()["include"]]


CXX = shutil.which(os.environ.get("ASC_CXX", "clang++-16"))
NPU_INC = torch_npu_include()
TORCH_INC = torch_includes()
PY_INC = Path(sysconfig.get_paths()["include"])  # torch/extension.h includes pybind11, which includes Python.h
_MISSING = [what for what, ok in (("clang++-16", CXX), ("torch's C++ headers", TORCH_INC),
                                  ("Python's C headers (Python.h)", (PY_INC / "Python.h").is_file()),
                                  ("torch_npu's headers (TORCH_NPU_INCLUDE)", NPU_INC)) if not ok]
REQUIRED = os.environ.get("TILEGEN_REQUIRE_HOST_CHECK", "") not in ("", "0")


def _require() -> None:
    """Skip the check (fail it under TILEGEN_REQUIRE_HOST_CHECK=1) when something it needs is missing."""
    if _MISSING:
        why = "host code check needs " + ", ".join(_MISSING) + " (see tests/test_ascend_host.py's docstring)"
        if REQUIRED:
            pytest.fail(f"TILEGEN_REQUIRE_HOST_CHECK=1 and the {why}", pytrace=False)
        pytest.skip(why)


# What bisheng provides to the host pass of an .asc file, and nothing more.
PRELUDE = """#include <cstdint>
#include <type_traits>
#include <torch/extension.h>
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "acl/acl_rt.h"
// GM_ADDR as asc-devkit defines it (impl/basic_api/utils/kernel_utils_macros.h:24; __gm__ is empty on the host)
#define GM_ADDR uint8_t*
namespace tilegen_host_check {
template <class... T> struct Types {};
template <bool sameLength, class P, class A> struct Accepts : std::false_type {};
template <class... P, class... A>
struct Accepts<true, Types<P...>, Types<A...>> : std::bool_constant<(std::is_convertible_v<A, P> && ...)> {};
// kernel<<<numBlocks, dynUBufSize, stream>>>(args...) (asc-devkit docs: 核函数.md, SIMD-BuiltIn关键字.md 核函数配置);
// a wrong launch parameter, argument count or argument type leaves no matching Launch at the call
template <typename... P, typename... A,
          typename = std::enable_if_t<Accepts<sizeof...(P) == sizeof...(A), Types<P...>, Types<std::decay_t<A>...>>::value>>
inline void Launch(void (*)(P...), uint32_t numBlocks, uint32_t dynUBufSize, aclrtStream stream, A&&...)
{
    (void)numBlocks; (void)dynUBufSize; (void)stream;
}
}  // namespace tilegen_host_check
"""
KERNEL = re.compile(r'extern "C" (?:__schedmode__\(\d\) )?__global__ __aicore__ void (\w+)\(([^)]*)\)')
LAUNCH = re.compile(r"(\w+)<<<([^,>]+),([^,>]+),([^>]+)>>>\(")


def host_view(files: dict[str, str]) -> str:
    """tilegen_ops.asc as the host pass sees it: kernels declared, launches as calls (see the docstring)."""
    src = files["tilegen_ops.asc"]
    for name in KERNEL_FILES:
        decls = [f'extern "C" void {m.group(1)}({m.group(2)});' for m in KERNEL.finditer(files[name])]
        assert decls, f"no kernel in {name}"
        line = f'#include "{name}"'
        assert line in src, f"tilegen_ops.asc does not include {name}"
        src = src.replace(line, "\n".join(decls))
    src, n = LAUNCH.subn(r"tilegen_host_check::Launch(\1, \2,\3,\4, ", src)
    assert n > 0, "no <<<>>> launch in tilegen_ops.asc"
    return src


def _flags() -> list[str]:
    return ["-std=c++17", "-Wno-everything", *[f"-I{p}" for p in TORCH_INC], f"-I{NPU_INC}"]


@pytest.fixture(scope="module")
def pch(tmp_path_factory) -> Path:
    """torch, torch_npu and ACL headers precompiled once per session (clang -x c++-header, templates
    instantiated in the PCH so that each unit does not instantiate them again); under pytest-xdist the
    workers share it (built by the first, under a file lock: pytest-xdist's documented pattern)."""
    _require()
    from filelock import FileLock  # a dependency of torch, whose headers this check needs anyway

    flags = ["-x", "c++-header", *_flags(), "-fpch-instantiate-templates"]
    key = hashlib.sha256("\0".join([CXX, PRELUDE, *flags]).encode()).hexdigest()[:16]
    base = tmp_path_factory.getbasetemp()
    d = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's folder, shared by its workers
    out = d / f"tilegen-host-{key}.pch"
    with FileLock(str(out) + ".lock"):
        if not out.is_file():
            (d / f"tilegen-host-{key}.h").write_text(PRELUDE)
            tmp = d / f"tilegen-host-{key}.pch.tmp"
            r = subprocess.run([CXX, *flags, str(d / f"tilegen-host-{key}.h"), "-o", str(tmp)], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.fail("precompiling torch/torch_npu headers failed:\n" + r.stderr[-3000:])
            os.replace(tmp, out)
    return out


def syntax(pch: Path, work: Path, units: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """Errors per unit: each unit's host view in its own translation unit (torch's headers come
    precompiled), next to its own tiling.h (every tiling.h defines TilegenTiling); each tiling.h also
    compiled on its own."""
    work.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for key, files in units.items():
        unit = work / key
        unit.mkdir(parents=True, exist_ok=True)
        (unit / f"host_{key}.h").write_text(host_view(files))
        (unit / "tiling.h").write_text(files["tiling.h"])
        (work / f"tiling_{key}.h").write_text(files["tiling.h"])
        (unit / "host.cpp").write_text(f'#include "host_{key}.h"\n')
        jobs[key] = [CXX, "-x", "c++", "-fsyntax-only", *_flags(), "-include-pch", str(pch), f"-I{unit}", str(unit / "host.cpp")]
        jobs[f"{key}:tiling"] = [CXX, "-x", "c++", "-std=c++17", "-fsyntax-only", str(work / f"tiling_{key}.h")]
    def run(cmd: list[str]) -> list[str]:
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "error:" in ln]
        if r.returncode != 0 and not lines:
            lines = [f"exit status {r.returncode}: {r.stderr[-500:]}"]
        return lines

    errors = {key: [] for key in units}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for job, lines in zip(jobs, pool.map(run, jobs.values())):
            errors.setdefault(job.split(":")[0], []).extend(lines)
    return errors


@pytest.mark.slow
def test_host_code_type_checks(tmp_path, pch):
    """tilegen_ops.asc and tiling.h of every generated/ Ascend C folder: 0 errors."""
    units = {f.parent.name.replace("-", "_"): {p.name: p.read_text() for p in f.iterdir() if p.is_file()} for f in FOLDERS}
    assert units
    errors = syntax(pch, tmp_path, units)
    assert not any(errors.values()), "\n".join(f"{k or 'host.cpp'}: {e}" for k, v in errors.items() for e in v[:6])


def test_parameters_named_like_identifiers_of_the_host_code_type_check(tmp_path, pch):
    """A spec's parameter arrays are the op's arguments: named like the binding's own identifiers (``s``,
    ``stream``, ``Ptr``, ...), they must not shadow them (the binding names them ``param_<name>``)."""
    from helpers import host_code_names_spec
    from tilegen.backends import ascendc

    errors = syntax(pch, tmp_path, {"names": ascendc.generate(host_code_names_spec(), "ascend910b2").files})
    assert not any(errors.values()), errors


# Controls: the launch's second argument as older releases took it (an l2ctrl pointer), a kernel
# launched with one argument too few, a wrong torch API name; each must be reported in its own unit.
PLANTED = {
    "launch_nullptr": ("<<<kBlocks, 0, stream>>>", "<<<kBlocks, nullptr, stream>>>", "no matching function"),
    "launch_arity": ("Ptr(ws), Ptr(tiling));", "Ptr(tiling));", "no matching function"),
    "torch_api": ("TORCH_CHECK(t.is_contiguous()", "TORCH_CHECK(t.is_contiguos()", "is_contiguos"),
}


@pytest.mark.slow
def test_host_check_reports_planted_misuses(tmp_path, pch):
    folder = ROOT / "generated" / "tiny" / "ascend910b2"
    base = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    units = {"clean": {n: t.replace("tilegen_tiny", "tilegen_clean") for n, t in base.items()}}
    for name, (old, new, _) in PLANTED.items():
        files = {n: t.replace("tilegen_tiny", f"tilegen_{name}") for n, t in base.items()}
        assert old in files["tilegen_ops.asc"], name
        files["tilegen_ops.asc"] = files["tilegen_ops.asc"].replace(old, new)
        units[name] = files
    errors = syntax(pch, tmp_path, units)
    assert not errors["clean"] and not errors.get(""), errors
    for name, (_, _, fragment) in PLANTED.items():
        assert any(fragment in e for e in errors[name]), f"{name}: not reported: {errors[name][:5]}"


def _run_check_alone(tmp_path: Path, required: str | None) -> subprocess.CompletedProcess:
    """pytest on test_host_code_type_checks alone, in a fresh process, with torch_npu's headers missing
    (TORCH_NPU_INCLUDE names an empty folder) and TILEGEN_REQUIRE_HOST_CHECK as given (None: unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TILEGEN_REQUIRE_"))}
    (tmp_path / "empty").mkdir(exist_ok=True)
    env["TORCH_NPU_INCLUDE"] = str(tmp_path / "empty")
    if required is not None:
        env["TILEGEN_REQUIRE_HOST_CHECK"] = required
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", "--basetemp", str(tmp_path / "run"),
            f"{Path(__file__).resolve()}::test_host_code_type_checks"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_required_check_fails_where_it_would_skip(tmp_path):
    """CI sets TILEGEN_REQUIRE_HOST_CHECK=1: a prerequisite missing there is a failure naming it, not a
    skip; unset, the same run skips with the same reason."""
    r = _run_check_alone(tmp_path, "1")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-2000:]
    assert "TILEGEN_REQUIRE_HOST_CHECK=1 and the host code check needs torch_npu's headers (TORCH_NPU_INCLUDE)" in out, out[-2000:]
    r = _run_check_alone(tmp_path, None)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "1 skipped" in out, out[-2000:]
    assert "host code check needs torch_npu's headers (TORCH_NPU_INCLUDE)" in out, out[-2000:]
