"""Semantic misuse the header check cannot see (it type-checks against the real headers) fails on both
twins at run time, with one line naming the rule and the asc-devkit page that states it.

The planted kernels (tests/twin_real/rules_kernels.asc, harness rules_main.cpp) are one source for both
twins: the hand twin builds it with g++ against tilegen/twin/include, the real-API twin with clang against
``$ASC_DEVKIT`` over tilegen/twin/cce (skipped with one line without a snapshot or clang++-16). Each
kernel breaks one rule; ``rules_ok`` breaks none and must compute its result on both. The pages below are
written here from the documentation, not taken from the twins, and must exist in the snapshot when one is
set.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
from pathlib import Path

import pytest

from tilegen.backends.ascendc import twin

HERE = Path(__file__).resolve().parent
FILES = {
    "rules_kernels.asc": (HERE / "twin_real" / "rules_kernels.asc").read_text(),
    "twin_main.cpp": (HERE / "twin_real" / "rules_main.cpp").read_text(),
}

# The pages (relative to the asc-devkit root) that state each rule.
ARCH_2201 = "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md"  # Cube on the AIC, Vector on the AIVs
SYNC_TABLES = "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/核内同步能力概述.md"  # 表2: no PIPE_S pair on the AIC
CROSS_CORE = "docs/zh/api/SIMD-API/基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md"  # modes 0-2, ids 0-15, SyncAll 11-14
INIT_BUFFER = "docs/zh/api/SIMD-API/基础API/资源管理/Pipe和Que框架/TPipe/InitBuffer.md"

# planted kernel -> (rule, page)
RULES = {
    "vector_on_aic": ("core-type", ARCH_2201),
    "mmad_on_aiv": ("core-type", ARCH_2201),
    "loaddata_on_aiv": ("core-type", ARCH_2201),
    "fixpipe_on_aiv": ("core-type", ARCH_2201),
    "s_pair_on_aic": ("pipe-s-pair", SYNC_TABLES),
    "mode_3": ("cross-core-mode", CROSS_CORE),
    "flag_16": ("cross-core-flag-id", CROSS_CORE),
    "flag_11": ("cross-core-flag-id", CROSS_CORE),
    "ub_430k": ("local-capacity", INIT_BUFFER),
    "l0a_80k": ("local-capacity", INIT_BUFFER),
}
# Huawei's headers compile Mmad, LoadData and Fixpipe out of the vector pass (MmadCal, LoadData2DL12L0ACal,
# the Fixpipe impls under `if ASCEND_IS_AIC`, impl/basic_api/dav_c220/kernel_operator_mm_impl.h,
# kernel_operator_fixpipe_v2_impl.h) and report none of them through the sanitizer hook the real-API twin
# reads (`__MSTX_DFX_REPORT__`, impl/basic_api/mstx_local_tensor_info.h): on the NPU and on the real-API
# twin such a call does nothing, so only the hand twin can stop it.
REAL_API_UNSEEN = {"mmad_on_aiv", "loaddata_on_aiv", "fixpipe_on_aiv"}


def _no_core_dumps():  # the hand twin ends a failure with abort()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run(exe: Path, which: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TWIN_THROW", None)
    env["TWIN_WAIT_TIMEOUT_S"] = "20"
    return subprocess.run([str(exe), which], capture_output=True, text=True, timeout=120, env=env,
                          preexec_fn=_no_core_dumps, cwd=tempfile.gettempdir())


@pytest.fixture(scope="module")
def hand_exe() -> Path:
    if twin.compiler() is None:
        pytest.skip("hand twin: no g++")
    return twin.build(FILES)


@pytest.fixture(scope="module")
def real_exe() -> Path:
    devkit = os.environ.get("ASC_DEVKIT")
    if not devkit or not (Path(devkit) / "include" / "kernel_operator.h").is_file():
        pytest.skip("real-API twin: ASC_DEVKIT is not set to an asc-devkit snapshot (include/kernel_operator.h)")
    if twin.real_compiler() is None:
        pytest.skip("real-API twin: clang++-16 is not installed")
    return twin.build_real({**FILES, "tiling.h": ""}, devkit)


def _one_line(proc: subprocess.CompletedProcess, prefix: str) -> str:
    assert proc.returncode != 0, f"the twin did not stop the misuse:\n{proc.stdout}{proc.stderr}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("exe_fixture", ["hand_exe", "real_exe"])
def test_control_kernel_runs(request, exe_fixture):
    """The control breaks no rule (PIPE_S pairs on the AIV, SyncAll's own use of flags 11-14, a mode-2
    flag, a UB buffer inside UB) and computes y = 2 on both twins."""
    proc = _run(request.getfixturevalue(exe_fixture), "ok")
    assert proc.returncode == 0 and "completed ok" in proc.stdout, proc.stderr


@pytest.mark.parametrize("kernel", sorted(RULES))
def test_hand_twin_names_rule_and_page(hand_exe, kernel):
    from test_twin import parse_failure

    rule, page = RULES[kernel]
    line = _one_line(_run(hand_exe, kernel), "twin: ")
    parsed = parse_failure(line)
    assert parsed, line
    _, what, source, _ = parsed
    assert what.startswith(f"rule {rule}: "), line
    assert source.split("; ")[0] == page, line


@pytest.mark.parametrize("kernel", sorted(set(RULES) - REAL_API_UNSEEN))
def test_real_api_twin_names_rule_and_page(real_exe, kernel):
    rule, page = RULES[kernel]
    line = _one_line(_run(real_exe, kernel), "twin(real API): ")
    assert f": rule {rule}: " in line and f"({page}" in line, line
    assert (Path(os.environ["ASC_DEVKIT"]) / page).is_file(), f"{page} is not in the snapshot"
