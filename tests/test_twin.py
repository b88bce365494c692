"""Tests of the Ascend C CPU twin (tilegen/twin/include): compile tests/twin/*.cpp with g++ into one
binary and run each test in its own process.

Positive tests must print ``PASS <name>``; negative tests must be stopped by the twin with exactly one
``twin: <API>: <what> (<source>) [<core>]`` line on stderr and a non-zero exit. Skipped when g++ is
missing. The binary is cached by a hash of the sources (override the location with
TILEGEN_TWIN_CACHE).
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "tilegen" / "twin" / "include"
SRC_DIR = ROOT / "tests" / "twin"
SOURCES = ["main.cpp", "test_cube.cpp", "test_vector.cpp", "test_mix.cpp", "test_negative.cpp"]
CXXFLAGS = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-pthread", f"-I{INCLUDE}"]

POSITIVE = [
    "atomics_many_blocks",
    "cube_accumulate",
    "cube_bf16_aT",
    "cube_bf16_bT",
    "cube_bf16_odd",
    "cube_bf16_plain",
    "cube_float_bT",
    "cube_gemv_bf16_bT",
    "cube_gemv_half",
    "cube_half_aT",
    "cube_half_aT_bT",
    "cube_half_bT",
    "cube_half_odd",
    "cube_half_odd2",
    "cube_half_plain",
    "cube_fill_blocknum0_is_nop",
    "cube_initconst_l1_to_gm",
    "datacopy_params_gaps",
    "datacopypad_strides_padding",
    "identity_and_kernel_type",
    "order_chains_and_handovers",
    "mix_cube_to_vec",
    "pipe_layout_destroy_reset",
    "poison_reads_nan",
    "syncall_aiv_mix_1_0",
    "syncall_and_modes",
    "throw_mode",
    "vec_binary_float",
    "vec_bitwise_gather",
    "vec_cast",
    "vec_compare_select",
    "vec_exp_float_ftz",
    "vec_exp_ln_half",
    "vec_misc_masks",
    "vec_reduce",
    "vec_reduce_half_saturates",
    "vec_rowwise_highdim",
    "vec_scalar_ops_half",
]

# negative test -> (API named in the failure line, fragment of the message)
NEGATIVE = {
    "neg_ub_overalloc": ("TPipe::InitBuffer", "UB over-allocated"),
    "neg_l1_overalloc": ("TPipe::InitBuffer", "L1 over-allocated"),
    "neg_l0a_overalloc": ("TPipe::InitBuffer", "L0A over-allocated"),
    "neg_l0c_overalloc": ("TPipe::InitBuffer", "L0C over-allocated"),
    "neg_ub_on_aic": ("TPipe::InitBuffer", "does not exist on an AIC"),
    "neg_misaligned_vector": ("Add", "not 32-byte aligned"),
    "neg_datacopy_len": ("DataCopy", "not a multiple of 32"),
    "neg_datacopy_blockcount": ("DataCopy", "blockCount 0"),
    "neg_tensor_overflow": ("Exp", "tensor size overflow"),
    "neg_localtensor_offset": ("LocalTensor::operator[]", "is not < tensor length"),
    "neg_partial_overlap": ("Add", "partially overlaps"),
    "neg_and_int32": ("And", "data type int32_t is not supported on A2"),
    "neg_gather_dst_is_src": ("Gather", "dst overlaps src"),
    "neg_gather_misaligned_offset": ("Gather", "is not an aligned element of src"),
    "neg_deque_empty": ("TQue::DeQue", "empty queue"),
    "neg_double_free": ("TQue::FreeTensor", "double FreeTensor"),
    "neg_too_many_buffers": ("TPipe::InitBuffer", "at most 8 per TPosition"),
    "neg_alloc_exhausted": ("TQue::AllocTensor", "no FREE buffer"),
    "neg_enque_over_depth": ("TQue::EnQue", "queue depth"),
    "neg_queue_after_reset": ("TQue::AllocTensor", "destroyed or reset"),
    "neg_two_pipes": ("TPipe::TPipe", "another TPipe is active"),
    "neg_flag_16_pending": ("CrossCoreSetFlag", "16th pending"),
    "neg_flag_never_set": ("", "deadlock"),
    "neg_flag_id_11": ("CrossCoreSetFlag", "flagId 11 is one of SyncAll's"),
    "neg_flag_id_16": ("CrossCoreSetFlag", "flagId 16 out of range [0, 15]"),
    "neg_flag_unwaited": ("LaunchMix", "never waited"),
    "neg_mode0_missing_core": ("", "deadlock"),
    "neg_syncall_on_aic": ("SyncAll<true>", "AIC must not call it"),
    "neg_setflag_unpaired": ("SetFlag", "never waited at kernel end"),
    "neg_waitflag_unset": ("WaitFlag", "never set"),
    "neg_pipebarrier_s": ("PipeBarrier", "PIPE_S"),
    "neg_event_wrong_core": ("SetFlag", "has no PIPE_V"),
    "neg_gm_oob_read": ("DataCopy", "GM access out of bounds"),
    "neg_gm_oob_write": ("DataCopyPad", "GM access out of bounds"),
    "neg_gm_scalar_oob": ("GlobalTensor::SetValue", "GM access out of bounds"),
    "neg_gm_foreign_pointer": ("GlobalTensor::GetValue", "not inside any twin::GmAlloc block"),
    "neg_gm_guard": ("GmFree", "guard zone"),
    "neg_numblocks": ("LaunchMix", "numBlocks 25"),
    "neg_vector_on_aic": ("Add", "issued on an AIC"),
    "neg_cube_on_aiv": ("Mmad", "issued on an AIV"),
    "neg_bf16_arith": ("Add", "bf16 has no vector arithmetic"),
    "neg_bf16_exp": ("Exp", "bf16 has no vector arithmetic"),
    "neg_cast_half_bf16": ("Cast", "not a Cast pair"),
    "neg_cast_bad_mode": ("Cast", "CAST_NONE is not allowed"),
    "neg_field_wrap": ("Nd2NzParams.srcDValue", "value 66560 is outside the accepted range [1, 65535]"),
    "neg_syncall_aiv_only": ("SyncAll<true>", "deadlock: a vector-only kernel of type KERNEL_TYPE_AIV_ONLY"),
    "neg_syncall_missing_core": ("", "deadlock"),
    "neg_syncall_stalled_core": ("SyncAll<false>", "waited 1 s"),
    "neg_loaddata_misaligned": ("LoadData", "not 512-byte aligned"),
    "neg_fixpipe_quant": ("Fixpipe", "F322F16"),
    "neg_fixpipe_dststride": ("Fixpipe", "dstStride 16"),
    "neg_compare_count": ("Compares", "multiple of 256"),
    "neg_compares_after_masked_op": ("Compares", "runs under the mask register"),
    "neg_reducemax_tmp": ("ReduceMax", "sharedTmpBuffer"),
    "neg_select_scratch": ("Select", "scratch"),
    "neg_atomic_type_mismatch": ("DataCopy", "atomic type float does not match"),
    "neg_kernel_type": ("KERNEL_TASK_TYPE_DEFAULT", "LaunchMix"),
    "neg_ub_scalar_on_l1": ("LocalTensor::GetValue", "scalar access to L1"),
    "neg_use_after_free": ("Adds", "after FreeTensor"),
    "neg_tbuf_after_destroy": ("Duplicate", "reset or destroyed"),
    "neg_order_read_before_mte2": ("Muls", "PIPE_V reads UB bytes [0, 32) that DataCopy on PIPE_MTE2 wrote, with no SetFlag/WaitFlag (HardEvent::MTE2_V"),
    "neg_order_rewrite_before_mte3": ("Duplicate", "PIPE_V overwrites UB bytes [0, 32) that DataCopy on PIPE_MTE3 reads, with no SetFlag/WaitFlag (HardEvent::MTE3_V"),
    "neg_order_loaddata_before_mte2": ("LoadData", "PIPE_MTE1 reads L1 bytes [0, 32) that DataCopyNd2Nz on PIPE_MTE2 wrote, with no SetFlag/WaitFlag (HardEvent::MTE2_MTE1"),
}

def parse_failure(line: str):
    """Split ``twin: <API>: <what> (<source>) [<core>]`` -> (api, what, source, core) or None.
    The source is the last balanced parenthesised group (sources such as P:PipeBarrier(ISASI) nest)."""
    if not line.startswith("twin: ") or not line.endswith("]"):
        return None
    body = line[len("twin: "):]
    cut = body.rfind(" [")
    if cut < 0:
        return None
    body, core = body[:cut], body[cut + 2:-1]
    if not body.endswith(")"):
        return None
    depth = 0
    for i in range(len(body) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(body[i], 0)
        if depth == 0:
            break
    else:
        return None
    head, src = body[:i].rstrip(), body[i + 1:-1]
    api, sep, what = head.partition(": ")
    if not sep or not api or not what or not src:
        return None
    return api, what, src, core

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not found")


def _digest() -> str:
    h = hashlib.sha256()
    for p in sorted(INCLUDE.rglob("*.h")) + [SRC_DIR / s for s in SOURCES] + [SRC_DIR / "common.h"]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(" ".join(CXXFLAGS).encode())
    try:
        h.update(subprocess.run([GXX, "--version"], capture_output=True, text=True).stdout.encode())
    except OSError:
        pass
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def twin_bin() -> Path:
    """The test binary, built once for all processes: pytest-xdist's workers wait for the one building
    it (a file lock, xdist's documented pattern) instead of each compiling it again."""
    # filelock: a dependency of torch, which the test extra installs
    from filelock import FileLock

    base = Path(os.environ.get("TILEGEN_TWIN_CACHE", Path(tempfile.gettempdir()) / "tilegen-twin-cache"))
    out = base / _digest()
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        return _build_twin_tests(out)


def _build_twin_tests(out: Path) -> Path:
    exe = out / "twin_tests"
    if exe.exists():
        return exe
    build = Path(tempfile.mkdtemp(dir=out))
    procs = []
    for s in SOURCES:
        obj = build / (Path(s).stem + ".o")
        procs.append((s, subprocess.Popen([GXX, *CXXFLAGS, "-c", str(SRC_DIR / s), "-o", str(obj)],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    errors = []
    for s, p in procs:
        log, _ = p.communicate()
        if p.returncode != 0:
            errors.append(f"--- {s}\n{log}")
    if errors:
        pytest.fail("compiling the twin tests failed:\n" + "\n".join(errors))
    tmp_exe = build / "twin_tests"
    r = subprocess.run([GXX, "-pthread", *[str(build / (Path(s).stem + ".o")) for s in SOURCES], "-o", str(tmp_exe)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("linking the twin tests failed:\n" + r.stdout + r.stderr)
    os.replace(tmp_exe, exe)
    return exe


def _no_core_dumps():  # abort() must not leave core files behind
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run(exe: Path, name: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TWIN_THROW", None)
    env["TWIN_WAIT_TIMEOUT_S"] = "20"
    return subprocess.run([str(exe), name], capture_output=True, text=True, timeout=60, env=env,
                          preexec_fn=_no_core_dumps, cwd=tempfile.gettempdir())


@pytest.mark.slow
def test_every_test_is_listed(twin_bin):
    names = set(subprocess.run([str(twin_bin), "--list"], capture_output=True, text=True, check=True).stdout.split())
    assert names == set(POSITIVE) | set(NEGATIVE)


@pytest.mark.parametrize("name", POSITIVE)
def test_positive(twin_bin, name):
    r = _run(twin_bin, name)
    assert r.returncode == 0, f"{name} failed (rc={r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert f"PASS {name}" in r.stdout


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_negative(twin_bin, name):
    api, fragment = NEGATIVE[name]
    r = _run(twin_bin, name)
    assert r.returncode != 0, f"{name}: the twin did not stop the violation\n{r.stdout}\n{r.stderr}"
    assert "NOT CAUGHT" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("twin: ")]
    assert len(lines) == 1, f"{name}: expected one failure line, got:\n{r.stderr}"
    parsed = parse_failure(lines[0])
    assert parsed, f"{name}: malformed failure line: {lines[0]}"
    got_api, what, src, core = parsed
    if api:
        assert got_api == api, lines[0]
    assert fragment in what, lines[0]
    assert core == "host" or core.startswith(("AIC ", "AIV ")), lines[0]


@pytest.mark.parametrize("name", ["neg_syncall_aiv_only", "neg_syncall_missing_core", "neg_syncall_stalled_core"])
def test_deadlocks_are_reported_fast(twin_bin, name):
    """Every way a hard SyncAll hangs on the NPU ends on the twin with its one line within seconds: at once
    when no core can make progress, after TWIN_WAIT_TIMEOUT_S (1 s in the stalled-core test) otherwise."""
    import time

    t0 = time.monotonic()
    r = _run(twin_bin, name)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0 and "twin: " in r.stderr, r.stderr
    assert elapsed < 10, f"{name} took {elapsed:.1f} s"


# Kernel code that bisheng rejects must not compile against the twin either: (kernel body, fragment of
# g++'s error). ASCEND_IS_AIC/AIV expand to `constexpr(...)` on the device (impl/utils/sys_macros.h), valid
# only after `if`; the device headers give kernel code no <cmath>, so no INFINITY or NAN.
COMPILE_FAIL = {
    "ascend_is_aic_in_ternary": ("const int64_t core = ASCEND_IS_AIC ? 1 : 2; (void)core;", "expected primary-expression"),
    "ascend_is_aiv_as_value": ("bool v = ASCEND_IS_AIV; (void)v;", "expected primary-expression"),
    "ascend_is_aic_in_parens": ("if (ASCEND_IS_AIC) { }", "expected primary-expression"),
    "infinity_macro": ("float x = -INFINITY; (void)x;", "poisoned"),
    "nan_macro": ("float x = NAN; (void)x;", "poisoned"),
}
KERNEL_FRAME = """#include "kernel_operator.h"
using namespace AscendC;
extern "C" __global__ __aicore__ void k(GM_ADDR p)
{{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    (void)p;
    {body}
}}
"""


def _syntax(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    src = tmp_path / "kernel.cpp"
    src.write_text(KERNEL_FRAME.format(body=body))
    return subprocess.run([GXX, "-std=c++17", "-fsyntax-only", f"-I{INCLUDE}", str(src)], capture_output=True, text=True)


def test_kernel_frame_compiles(tmp_path):
    """The control of the compile-fail tests: the same kernel with the constructs used as on the device."""
    r = _syntax(tmp_path, "if ASCEND_IS_AIC { } if ASCEND_IS_NOT_AIV { } const float x = -__builtin_huge_valf(); (void)x;")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", sorted(COMPILE_FAIL))
def test_kernel_code_rejected_at_compile_time(tmp_path, name):
    body, fragment = COMPILE_FAIL[name]
    r = _syntax(tmp_path, body)
    assert r.returncode != 0, f"{name}: compiled against the twin, but bisheng rejects it"
    assert fragment in r.stderr, r.stderr
