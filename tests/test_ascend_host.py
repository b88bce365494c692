"""The host side of the emitted Ascend C type-checks against real public headers.

``tilegen_ops.asc`` (the TORCH_LIBRARY binding, the tensor checks, the launches) and ``tiling.h`` of
every folder under generated/ are compiled with ``-fsyntax-only`` against torch's own headers
(``torch.utils.cpp_extension.include_paths()``), and torch_npu's and ACL's headers as the torch-npu
wheel ships them (``torch_npu/include``, holding ``torch_npu/csrc/core/npu/NPUStream.h`` and
``acl/acl_rt.h``). Where is that: ``$TORCH_NPU_INCLUDE``, else the include folder of an installed
torch_npu; e.g. ``pip download --no-deps torch-npu -d /tmp/w && unzip -q /tmp/w/*.whl 'torch_npu/include/*'
-d /tmp/w`` and ``TORCH_NPU_INCLUDE=/tmp/w/torch_npu/include``.

The device kernels are not part of this pass (tests/test_ascend_headers.py checks them): their
``#include`` lines become ``extern "C"`` declarations with the kernels' own parameter lists, and
bisheng's ``kernel<<<numBlocks, dynUBufSize, stream>>>(args)`` becomes a call of a function with the
launch's documented parameters (asc-devkit@0da921b9 docs/zh/guide/编程指南/编程模型/AI-Core-SIMD编程/
核函数.md: numBlocks, dynUBufSize in bytes, an aclrtStream), which checks the kernel's argument count and
types too. What stays unchecked: the ``<<<>>>`` syntax itself and the host/device split (bisheng only),
linking, CMakeLists.txt.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig
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
_MISSING = [what for what, ok in (("clang++-16", CXX), ("torch's C++ headers", TORCH_INC),
                                  ("torch_npu's headers (TORCH_NPU_INCLUDE)", NPU_INC)) if not ok]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason="host code check needs " + ", ".join(_MISSING) + " (see this test's docstring)")

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
    """torch, torch_npu and ACL headers precompiled once (clang -x c++-header)."""
    d = tmp_path_factory.mktemp("host-pch")
    (d / "prelude.h").write_text(PRELUDE)
    out = d / "prelude.pch"
    r = subprocess.run([CXX, "-x", "c++-header", *_flags(), str(d / "prelude.h"), "-o", str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("precompiling torch/torch_npu headers failed:\n" + r.stderr[-3000:])
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
    errors = {key: [] for key in units}
    for job, cmd in jobs.items():
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "error:" in ln]
        if r.returncode != 0 and not lines:
            lines = [f"exit status {r.returncode}: {r.stderr[-500:]}"]
        errors.setdefault(job.split(":")[0], []).extend(lines)
    return errors


def test_host_code_type_checks(tmp_path, pch):
    """tilegen_ops.asc and tiling.h of every generated/ Ascend C folder: 0 errors."""
    units = {f.parent.name.replace("-", "_"): {p.name: p.read_text() for p in f.iterdir() if p.is_file()} for f in FOLDERS}
    assert units
    errors = syntax(pch, tmp_path, units)
    assert not any(errors.values()), "\n".join(f"{k or 'host.cpp'}: {e}" for k, v in errors.items() for e in v[:6])


# Controls: the launch's second argument as older releases took it (an l2ctrl pointer), a kernel
# launched with one argument too few, a wrong torch API name; each must be reported in its own unit.
PLANTED = {
    "launch_nullptr": ("<<<kBlocks, 0, stream>>>", "<<<kBlocks, nullptr, stream>>>", "no matching function"),
    "launch_arity": ("Ptr(ws), Ptr(tiling));", "Ptr(tiling));", "no matching function"),
    "torch_api": ("TORCH_CHECK(t.is_contiguous()", "TORCH_CHECK(t.is_contiguos()", "is_contiguos"),
}


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
