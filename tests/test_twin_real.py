"""The real-API twin: generated kernels compiled against Huawei's public Ascend C headers (an asc-devkit
snapshot, dav-c220 device mode) over tilegen's CCE intrinsics (tilegen/twin/cce), checked against the
float64 reference; an API misreading (InitConstValue with blockNum = 0) and intrinsic-level misuses
must fail there.

Needs ``$ASC_DEVKIT`` (a snapshot holding include/ and impl/) and clang++-16; ``$ASC_GEN`` (the folder
with kernel_tiling/kernel_tiling.h) is used when set, else the header is made from the snapshot. CI
has no snapshot: every test here skips with one line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import assert_backward_ok, assert_forward_ok, inputs, real_api_devkit
from tilegen.backends import ascendc
from tilegen.backends.ascendc import twin
from tilegen.core.spec import builtin_spec

DEVKIT = real_api_devkit()  # skips the module with one line without a snapshot or clang++-16
HERE = Path(__file__).resolve().parent


# ZeroAcc's fills as the runtime wrote them before: InitConstValueParams(repeatTimes, value) leaves
# blockNum = 0 (include/basic_api/kernel_struct_mm.h), a NOP on A2 (Fill.md).
ZERO_ACC_FIXED = (
    "Fill(cube.l0a, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv(m, 16)), 0, T(0)));\n"
    "    Fill(cube.l0b, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv(n, 16)), 0, T(0)));"
)
ZERO_ACC_BLOCKNUM_0 = (
    "Fill(cube.l0a, InitConstValueParams<T>(static_cast<uint16_t>(CeilDiv(m, 16)), T(0)));\n"
    "    Fill(cube.l0b, InitConstValueParams<T>(static_cast<uint16_t>(CeilDiv(n, 16)), T(0)));"
)


def run_real(spec, files=None, blocks=4, dkv_strategy=None):
    files = files or ascendc.generate(spec, "ascend910b2", dkv_strategy=dkv_strategy).files
    exe = twin.build_real(files, DEVKIT)
    data = inputs(spec)
    fwd, bwd = twin.run_attention(exe, spec, data, blocks=blocks)
    return data, fwd, bwd


@pytest.mark.parametrize(
    "spec",
    [
        builtin_spec("tiny"),  # MHA, causal with tails, fp16
        builtin_spec("tiny-gqa").replace(window=(-1, 0), alignment="top_left", name="gqa-causal"),  # GQA, bf16, BSND, Dv != Dqk
        # D = 160: D = rowsum(dO∘O) folds blocks 0 and 1, then a 32-column tail under a lane mask (@fold)
        builtin_spec("tiny").replace(head_dim_qk=160, head_dim_v=160, name="d160-fold"),
        # K/V tiles no query sees: atomic dK/dV read there as zeros nothing stored (@zero_unless), the
        # others written by their first store (@first_plain, Fixpipe without SetAtomicAdd)
        builtin_spec("tiny").replace(seq_q=40, seq_k=300, window=(8, 0), name="empty-kv-tiles"),
    ],
    ids=["tiny", "gqa-causal", "d160-fold", "empty-kv-tiles"],
)
@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_forward_and_backward_match_the_reference(spec, dkv_strategy):
    """Both dK/dV strategies (atomic: dK_ws, dV_ws through Fixpipe with SetAtomicAdd<float>, the GQA
    group's heads into one tile) on the real headers, against the float64 reference."""
    data, fwd, bwd = run_real(spec, dkv_strategy=dkv_strategy)
    assert_forward_ok(spec, fwd["O"], fwd["L"], data)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


def _blocknum_zero_files():
    files = dict(ascendc.generate(builtin_spec("tiny"), "ascend910b2", dkv_strategy="on-chip").files)  # atomic zeroes no accumulator
    assert ZERO_ACC_FIXED in files["tilegen_runtime.h"]
    files["tilegen_runtime.h"] = files["tilegen_runtime.h"].replace(ZERO_ACC_FIXED, ZERO_ACC_BLOCKNUM_0)
    return files


def test_real_api_twin_catches_blocknum_zero():
    """ZeroAcc with blockNum = 0 fills nothing: the dK/dV accumulators start from whatever L0A/L0B hold
    (NaN poison at first use). The real headers pass blockNum through to the fill, so the run must fail:
    a poisoned store or wrong gradients."""
    spec = builtin_spec("tiny")
    try:
        data, fwd, bwd = run_real(spec, _blocknum_zero_files())
    except twin.TwinError as exc:
        assert "poison" in str(exc), str(exc)
        return
    with pytest.raises(AssertionError):
        assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


@pytest.fixture(scope="module")
def strict_exe():
    files = {
        "strict_kernels.asc": (HERE / "twin_real" / "strict_kernels.asc").read_text(),
        "twin_main.cpp": (HERE / "twin_real" / "strict_main.cpp").read_text(),
        "tiling.h": "",
    }
    return twin.build_real(files, DEVKIT)


def _strict(exe, which):
    return subprocess.run([str(exe), which], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("which", ["ok", "reduce"])
def test_strict_control_kernels_run(strict_exe, which):
    """The correct kernel computes y = x + 1; ReduceMax/ReduceSum over 100 floats (a full repeat and a
    tail through the headers' multi-step reduction) give the max and the (exact, integer) sum."""
    proc = _strict(strict_exe, which)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "which, message",
    [
        ("ub_out_of_bounds", "outside the 196608-byte buffer"),
        ("uninitialised", "uninitialised local memory"),
        ("missing_wait", "without a SetFlag/WaitFlag"),
        ("scalar_out_of_bounds", "a scalar access outside this core's UB"),
    ],
)
def test_strict_misuse_fails_with_one_line(strict_exe, which, message):
    proc = _strict(strict_exe, which)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("twin(real API): "), proc.stderr
