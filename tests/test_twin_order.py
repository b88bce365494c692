"""Faults planted one at a time in emitted kernels: pipe-ordering waits deleted, and ZeroAcc's L0A
zero-fill cut short. Each must fail the hand twin (the twin CI runs), and where it applies the timeline's
race check and the real-API twin (Huawei's headers over tilegen/twin/cce; only where ASC_DEVKIT is set,
skipped otherwise). The unplanted kernels pass all of them (the controls).

Pipe ordering. The pipes of a core run concurrently; the vector may read a UB tile that MTE2 loaded only
after an MTE2 -> V flag, and rewrite a tile that an MTE3 copy reads only after an MTE3 -> V flag
(asc-devkit docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md, whose example takes
MTE2_V; the static-Tensor guide's double-buffer example takes both). The faults, in tiny at Sq = Sk = 300
(5 K/V tiles: the forward's steady loop runs its hoisted P·V receive and its deferred P stores):
- ``mte2_v_receive``: the MTE2 -> V wait before acc += P·V reads the received PV tile (@wait_at_read);
- ``mte3_v_rewrite_prologue``, ``mte3_v_rewrite_steady``: the MTE3 -> V wait before a cast rewrites Pc,
  whose store to the hand-off slot the wait was left for (@wait_at_rewrite), in the pipeline's
  prologue or in its steady loop;
- ``mte3_v_closing``: StoreRows' own closing MTE3 -> V wait (the tile is rewritten by the next vector op, or
  loaded into by MTE2 after a V -> MTE2 flag that no longer follows the store). In the forward every store
  it closes is followed by a later MTE3 -> V wait before its tile is written again (@wait_at_next_store
  leaves O's to L's; MTE3 copies in order), so the cut shows in the backward, which the timeline traces.
(Before the twins' ordering rule the hand twin passed all four, and the timeline, which then reported
only accesses that overlapped in its schedule, missed both @wait_at_rewrite cuts.)
The hand twin names the two pipes and the event missing (tilegen/twin/include/twin/order.h); the
timeline's race check, on the trace taken with that check off (TWIN_ORDER_CHECK=0), names the two
instructions; the real-API twin names its intrinsic.

L0A zero-fill. ZeroAcc zeroes an accumulator as a zero L0A tile times a zero L0B tile (Fill with blockNum
= ceil(m / 16) fractals; blockNum = 0 fills nothing, Fill.md). With only the L0A fill cut, the product
reads what L0A held in the unfilled fractals: at tiny's D = 32 the forward products before it left Q's
finite tile there, and finite x 0 = 0 (the accumulator is right by luck, on the NPU too). At D = 16
those products fill two fractals of an L0A half, so the first ZeroAcc of a core reads the launch's
poison (NaN) in fractals 2-3 of its m = 64 rows: the dK and dV rows of those fractals come out NaN, and
both twins must fail the run.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from helpers import assert_backward_ok, assert_forward_ok, inputs
from tilegen import builtin_spec
from tilegen.backends import ascendc
from tilegen.backends.ascendc import twin
from tilegen.backends.ascendc.timeline import Costs, TimelineError, simulate_block, trace_run
from tilegen.core.targets import load_target

pytestmark = pytest.mark.skipif(twin.compiler() is None, reason="no C++ compiler for the CPU twin")

SPEC = builtin_spec("tiny").replace(seq_q=300, seq_k=300)

READ_AFTER_MTE2 = (r"twin: \w+: PIPE_V reads UB bytes \[\d+, \d+\) that DataCopyPad on PIPE_MTE2 wrote, with no "
                   r"SetFlag/WaitFlag \(HardEvent::MTE2_V, or a chain of them\) between the two")
REWRITE_BEFORE_MTE3 = (r"twin: \w+: PIPE_V overwrites UB bytes \[\d+, \d+\) that DataCopyPad on PIPE_MTE3 reads, with no "
                       r"SetFlag/WaitFlag \(HardEvent::MTE3_V, or a chain of them\) between the two")
# the closing wait cut: the first unordered access the run meets is a vector rewrite or an MTE2 load
WRITE_BEFORE_MTE3 = (r"twin: \w+: PIPE_(V|MTE2) overwrites UB bytes \[\d+, \d+\) that DataCopyPad on PIPE_MTE3 reads, with no "
                     r"SetFlag/WaitFlag \(HardEvent::MTE3_(V|MTE2), or a chain of them\) between the two")
# fault -> (file, the deleted line, the next line's text and which of those matches (None: the one match),
#           hand twin's failure, timeline's race, real twin's failure)
PLANTED = {
    "mte2_v_receive": (
        "fwd_kernels.asc", r" *tilegen::WaitMte2ToV<float>\(\);  // PV_vector received \(@wait_at_read\)", None,
        READ_AFTER_MTE2,
        r"race on AIV[01]: \w+ on V \(reads U \[\d+, \d+\)\) may start before DataCopyPad on MTE2 \(writing",
        r"twin\(real API\): \w+: PIPE_V accesses UB bytes \[\d+, \+32\) written by PIPE_MTE2 without a SetFlag/WaitFlag",
    ),
    "mte3_v_rewrite_prologue": (
        "fwd_kernels.asc", r" *tilegen::WaitMte3ToV\(\);  // the store of Pc has read it \(@wait_at_rewrite\)",
        ("tilegen::CastRows<half, float>(Pc, ", 0),
        REWRITE_BEFORE_MTE3,
        r"race on AIV[01]: \w+ on V \(writes U \[\d+, \d+\)\) may start before DataCopyPad on MTE3 \(reading",
        r"twin\(real API\): \w+: PIPE_V overwrites UB bytes \[\d+, \+32\) that PIPE_MTE3 reads, without a SetFlag/WaitFlag",
    ),
    "mte3_v_rewrite_steady": (
        "fwd_kernels.asc", r" *tilegen::WaitMte3ToV\(\);  // the store of Pc has read it \(@wait_at_rewrite\)",
        ("tilegen::CastRows<half, float>(Pc, ", 1),
        REWRITE_BEFORE_MTE3,
        r"race on AIV[01]: \w+ on V \(writes U \[\d+, \d+\)\) may start before DataCopyPad on MTE3 \(reading",
        r"twin\(real API\): \w+: PIPE_V overwrites UB bytes \[\d+, \+32\) that PIPE_MTE3 reads, without a SetFlag/WaitFlag",
    ),
    "mte3_v_closing": (
        "tilegen_runtime.h", r"    if \(closing\) WaitMte3ToV\(\);", None,
        WRITE_BEFORE_MTE3,
        r"race on AIV[01]: \w+ on (V|MTE2) \(writes U \[\d+, \d+\)\) may start before DataCopyPad on MTE3 \(reading",
        r"twin\(real API\): \w+: PIPE_(V|MTE2) overwrites UB bytes \[\d+, \+32\) that PIPE_MTE3 reads, without a SetFlag/WaitFlag",
    ),
}
# the program whose trace the timeline checks for a fault (the forward unless named here)
TRACED = {"mte3_v_closing": "bwd"}


@functools.lru_cache(maxsize=None)
def _files() -> dict[str, str]:
    return dict(ascendc.generate(SPEC, "ascend910b2").files)


def _planted(fault: str) -> dict[str, str]:
    """The emitted files with the fault's one line deleted. The @wait_at_rewrite waits before a cast
    into Pc are two, the prologue's then the steady loop's."""
    name, line, before, *_ = PLANTED[fault]
    lines = _files()[name].split("\n")
    at = [n for n, text in enumerate(lines) if re.fullmatch(line, text)]
    pick = 0
    if before is not None:
        at = [n for n in at if before[0] in lines[n + 1]]
        pick = before[1]
    assert len(at) == (1 if before is None else 2), at
    del lines[at[pick]]
    return dict(_files(), **{name: "\n".join(lines)})


def _one_line(exc: twin.TwinError) -> str:
    """The failure line of a twin run (run_program joins the last stderr lines with ' | ')."""
    m = re.fullmatch(r"twin run of \w+ failed \(exit -?\d+\): (.*)", str(exc))
    assert m and " | " not in m.group(1), str(exc)
    return m.group(1)


@pytest.fixture
def devkit():
    from helpers import real_api_devkit

    return real_api_devkit()  # skips the test with one line without a snapshot or clang++-16


@pytest.mark.slow
def test_unplanted_kernels_pass_the_hand_twin_and_the_timeline():
    exe = twin.build(_files())
    data = inputs(SPEC)
    fwd, bwd = twin.run_attention(exe, SPEC, data, blocks=2)
    assert_forward_ok(SPEC, fwd["O"], fwd["L"], data)
    assert_backward_ok(SPEC, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    costs = Costs(load_target("ascend910b2").timeline)
    for program in ("fwd", "bwd"):
        for kernel in trace_run(exe, SPEC, program, 2).values():
            for block in kernel.values():
                simulate_block(block, costs)


@pytest.mark.parametrize("fault", sorted(PLANTED))
def test_hand_twin_fails_a_missing_wait(fault):
    with pytest.raises(twin.TwinError) as exc:
        twin.run_attention(twin.build(_planted(fault)), SPEC, inputs(SPEC), blocks=2)
    line = _one_line(exc.value)
    assert re.match(PLANTED[fault][3], line), line
    assert re.search(r"\[AIV \d+ \(block \d+, sub [01]\)\]$", line), line


@pytest.mark.parametrize("fault", sorted(PLANTED))
def test_timeline_reports_a_missing_wait(fault, monkeypatch):
    monkeypatch.setenv("TWIN_ORDER_CHECK", "0")  # the trace of the planted kernel, for the race check alone
    traces = trace_run(twin.build(_planted(fault)), SPEC, TRACED.get(fault, "fwd"), 2)
    costs = Costs(load_target("ascend910b2").timeline)
    with pytest.raises(TimelineError, match=PLANTED[fault][4]):
        for kernel in traces.values():
            for block in kernel.values():
                simulate_block(block, costs)


@pytest.mark.parametrize("fault", sorted(PLANTED))
def test_real_api_twin_fails_a_missing_wait(fault, devkit):
    with pytest.raises(twin.TwinError) as exc:
        twin.run_attention(twin.build_real(_planted(fault), devkit), SPEC, inputs(SPEC), blocks=2)
    line = _one_line(exc.value)
    assert re.match(PLANTED[fault][5], line), line


# ---------------------------------------------------------------------------------------------------
# ZeroAcc's L0A fill cut short

L0A_SPEC = builtin_spec("tiny").replace(head_dim_qk=16, head_dim_v=16)
L0A_FILL = "Fill(cube.l0a, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv(m, 16)), 0, T(0)));"
# cut -> (the fill, the accumulator rows (mod Bc = 64) it leaves unfilled: 16 rows per 512-byte fractal)
L0A_CUTS = {
    "blocknum_0": ("Fill(cube.l0a, InitConstValueParams<T>(1, 0, 0, T(0)));", range(0, 64)),
    "one_block_short": (
        "Fill(cube.l0a, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv(m, 16) - 1), 0, T(0)));",
        range(48, 64),
    ),
}


@functools.lru_cache(maxsize=None)
def _l0a_files() -> dict[str, str]:
    files = dict(ascendc.generate(L0A_SPEC, "ascend910b2", dkv_strategy="on-chip").files)  # atomic zeroes no accumulator
    src = files["bwd_kernels.asc"]
    assert "// Tiles: Br = 32, Bc = 64;" in src and src.count("tilegen::ZeroAcc<half>(cube, ") == 2
    assert "ZeroAcc<half>(cube, dV_acc, 64, 16)" in src and "ZeroAcc<half>(cube, dK_acc, 64, 16)" in src
    return files


def _l0a_cut(cut: str) -> dict[str, str]:
    files = _l0a_files()
    assert files["tilegen_runtime.h"].count(L0A_FILL) == 1
    return dict(files, **{"tilegen_runtime.h": files["tilegen_runtime.h"].replace(L0A_FILL, L0A_CUTS[cut][0])})


def _assert_depends_on_the_unfilled_fractals(cut: str, data: dict, fwd: dict, bwd: dict) -> None:
    """The run fails the accuracy rule through NaN in dK and dV, and only in accumulator rows the cut
    left unfilled (dQ does not use ZeroAcc)."""
    assert not np.isnan(np.asarray(bwd["dQ"], dtype=np.float32)).any()
    for name in ("dK", "dV"):
        rows = np.argwhere(np.isnan(np.asarray(bwd[name], dtype=np.float32)).any(axis=-1))[:, 2]
        assert rows.size, f"no NaN in {name}: the accumulator did not read the unfilled L0A fractals"
        assert set((rows % 64).tolist()) <= set(L0A_CUTS[cut][1]), sorted(set((rows % 64).tolist()))
    with pytest.raises(AssertionError, match="NaN in dK"):
        assert_backward_ok(L0A_SPEC, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


def test_zeroacc_control_passes_the_hand_twin():
    data = inputs(L0A_SPEC)
    fwd, bwd = twin.run_attention(twin.build(_l0a_files()), L0A_SPEC, data, blocks=2)
    assert_backward_ok(L0A_SPEC, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


def test_zeroacc_control_passes_the_real_api_twin(devkit):
    data = inputs(L0A_SPEC)
    fwd, bwd = twin.run_attention(twin.build_real(_l0a_files(), devkit), L0A_SPEC, data, blocks=2)
    assert_backward_ok(L0A_SPEC, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


@pytest.mark.parametrize("cut", sorted(L0A_CUTS))
def test_hand_twin_fails_an_l0a_fill_cut_short(cut):
    data = inputs(L0A_SPEC)
    fwd, bwd = twin.run_attention(twin.build(_l0a_cut(cut)), L0A_SPEC, data, blocks=2)
    _assert_depends_on_the_unfilled_fractals(cut, data, fwd, bwd)


@pytest.mark.parametrize("cut", sorted(L0A_CUTS))
def test_real_api_twin_fails_an_l0a_fill_cut_short(cut, devkit):
    """The real-API twin stops at the store of a poisoned element (all-ones: NaN from poison) or, had the
    NaN changed bits on the way, the gradients fail the same way as on the hand twin."""
    data = inputs(L0A_SPEC)
    try:
        fwd, bwd = twin.run_attention(twin.build_real(_l0a_cut(cut), devkit), L0A_SPEC, data, blocks=2)
    except twin.TwinError as exc:
        assert "stores uninitialised local memory (0xFF poison) to GM" in _one_line(exc), str(exc)
        return
    _assert_depends_on_the_unfilled_fractals(cut, data, fwd, bwd)
