"""Huawei's FlashAttentionScore forward as the peer on tilegen's real-API twin and timeline
(tilegen/harness/ascend_peer.py), and the CCE intrinsics and timeline records it needs.

The kernel runs only with ``$OPS_TRANSFORMER`` (a hicann/ops-transformer snapshot), ``$ASC_DEVKIT`` (an
asc-devkit snapshot) and clang++-16: those tests skip with one line without them (CI has none). The
spec checks and the timeline's handling of the records the peer's trace adds need nothing and run always.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_forward_ok
from tilegen.backends.ascendc import timeline, twin
from tilegen.core.errors import SpecError
from tilegen.core.spec import AttentionSpec, builtin_spec
from tilegen.core.targets import load_target
from tilegen.harness import ascend_peer

HERE = Path(__file__).resolve().parent


def _env(*names: str) -> dict:
    """The snapshots named (``ASC_DEVKIT``, ``OPS_TRANSFORMER``); skips the calling test with one line when
    one is unset or clang++-16 is missing."""
    out = {}
    for name in names:
        value = os.environ.get(name)
        if not value:
            pytest.skip(f"official-kernel peer: {name} is not set")
        out[name] = value
    if twin.real_compiler() is None:
        pytest.skip("official-kernel peer: clang++-16 is not installed")
    return out


def _small(**kw) -> AttentionSpec:
    base = dict(batch=1, heads_q=4, heads_kv=2, seq_q=1152, seq_k=1152, head_dim_qk=128, head_dim_v=128, dtype="fp16",
                window=(-1, 0), layout="BSND", name="peer-small")
    base.update(kw)
    return AttentionSpec(**base)


# ---------------------------------------------------------------------------------------------------
# always


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(dtype="fp32"), "dtype"),
        (dict(head_dim_v=64), "head_dim_v"),
        (dict(window=(64, 0)), "window"),
        (dict(seq_k=2048), "window"),  # causal with Sq != Sk
        (dict(score_mod="score * 0.5"), "spec"),
    ],
)
def test_specs_the_peer_does_not_build_are_refused_in_one_line(change, field):
    with pytest.raises(SpecError) as err:
        ascend_peer.check_spec(_small(**change))
    assert err.value.field == field and "\n" not in str(err.value)


def _ins(pipe, kind, a=0, b=0, c=0, writes=(), reads=()):
    return timeline.Instr(pipe, kind, a, b, c, tuple(writes), tuple(reads))


def test_timeline_pipe_all_barrier_orders_every_pipe():
    """PipeBarrier<PIPE_ALL> (the trace's ``ALL PipeBarrier``, recorded by the real-API twin) makes the next
    instruction of any pipe start after every earlier one ended (PipeBarrier(ISASI).md), with no flag."""
    costs = timeline.Costs(load_target("ascend910b2").timeline)
    copy = _ins("MTE2", "DataCopyPad", 4096, 1, 0, writes=[("U", 0, 4096)], reads=[("G", 1 << 20, (1 << 20) + 4096)])
    add = _ins("V", "vadd", 16, writes=[("U", 0, 4096)], reads=[("U", 0, 4096)])
    sched = timeline.simulate_block({"AIV0": [copy, _ins("ALL", "PipeBarrier"), add]}, costs)
    end_copy = next(it.end for it in sched.items if it.kind == "DataCopyPad")
    start_add = next(it.start for it in sched.items if it.kind == "vadd")
    assert start_add >= end_copy == pytest.approx(costs.issue() + costs.copy_cycles(4096, False, False))


def test_timeline_aic_waits_for_one_aiv_when_the_record_names_it():
    """A ``CrossCoreWaitFlag`` whose c is 1 + sub waits for that AIV's set alone (a matmul-server message
    the real-API twin records as a flag, tilegen/twin/cce/trace.h); c = 0 keeps mode 2: both AIVs."""
    costs = timeline.Costs(load_target("ascend910b2").timeline)
    x = costs["cross_core_flag_cycles"]
    traces = {
        "AIV1": [_ins("MTE3", "CrossCoreSetFlag", 2, 17)],
        "AIV0": [],
        "AIC": [_ins("S", "CrossCoreWaitFlag", 0, 17, 2), _ins("M", "Mmad2", 16, 16, 16)],
    }
    sched = timeline.simulate_block(traces, costs)
    wait = next(it for it in sched.items if it.kind == "CrossCoreWaitFlag")
    assert wait.end == pytest.approx(costs.issue() + x)
    traces["AIC"][0] = _ins("S", "CrossCoreWaitFlag", 0, 17, 0)  # mode 2 needs AIV0's set too: none comes
    with pytest.raises(timeline.TimelineError, match="deadlock"):
        timeline.simulate_block(traces, costs)


# ---------------------------------------------------------------------------------------------------
# the CCE intrinsics the official kernel adds (real-API twin)


@pytest.fixture(scope="module")
def more_exe():
    env = _env("ASC_DEVKIT")
    files = {
        "cce_more_kernels.asc": (HERE / "twin_real" / "cce_more_kernels.asc").read_text(),
        "twin_main.cpp": (HERE / "twin_real" / "cce_more_main.cpp").read_text(),
        "tiling.h": "",
    }
    return twin.build_real(files, env["ASC_DEVKIT"])


@pytest.mark.parametrize("which", ["fold", "blocks", "gather", "cast", "copy_and"])
def test_added_vector_intrinsics_follow_the_documented_semantics(more_exe, which):
    """Max folding repeat after repeat (dst = src1, repeat strides 0: 通用地址重叠约束), ReduceDataBlock
    (vcgmax / vcgadd), GatherMask (vreducev2, pattern 7, counter mode) with RSVD_CNT, Cast uint8 -> half,
    DataCopy UB -> UB and And, each checked against its doc's semantics computed directly."""
    proc = subprocess.run([str(more_exe), which], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------------------------------
# the official kernel


@pytest.fixture(scope="module")
def snapshots():
    return _env("ASC_DEVKIT", "OPS_TRANSFORMER")


@pytest.mark.parametrize(
    "spec",
    [
        _small(),  # causal (sparse_mode 2), fp16 high precision, BSND, GQA 4/2: each AIV its own matmul objects
        _small(dtype="bf16", window=(-1, -1), layout="BNSD", name="peer-small-bf16"),  # no mask: L1 reuse, shared B
    ],
    ids=["causal-fp16-bsnd", "full-bf16-bnsd"],
)
def test_official_forward_matches_the_float64_reference(snapshots, spec):
    """Huawei's FlashAttentionScore (the S1s2Bn2gs1 template its tiling picks) on tilegen's CCE layer: O and
    L = softmax_max + log(softmax_sum) pass DESIGN §3's rule against the float64 reference."""
    data = ascend_peer.random_inputs(spec, seed=3)
    out = ascend_peer.run_forward(spec, data, devkit=snapshots["ASC_DEVKIT"], ops=snapshots["OPS_TRANSFORMER"])
    assert out["tiling"]["template"] == "FlashAttentionScoreS1s2Bn2gs1"
    assert bool(out["tiling"]["key"][14]) == (spec.window == (-1, -1))  # L1 reuse: the tiling's SetEnableL1Reuse
    assert_forward_ok(spec, out["O"], out["L"], data)


def test_official_forward_is_scheduled_by_the_timeline(snapshots):
    """The trace of chosen blocks schedules without a race or a deadlock (every matmul-server message the
    AIVs post is received); the launch takes the median of its heavy blocks, and a block's cube time is at
    least its Mmads' share of the cost table (2 x 128^3 MACs per 128 x 128 score tile, bmm1 and bmm2)."""
    spec = _small(heads_q=8, heads_kv=8, name="peer-trace")
    res = ascend_peer.simulate_forward(spec, devkit=snapshots["ASC_DEVKIT"], ops=snapshots["OPS_TRANSFORMER"], heavy=2)
    tgt = load_target("ascend910b2")
    clock = tgt.cores["clock_ghz"].value * 1e9
    mid = float(np.median([res["sampled"][b][1] for b in res["heavy"]]))
    assert res["time_s"] == pytest.approx(max(mid / clock, res["hbm_floor_s"]) + tgt.overhead["launch_us"].value * 1e-6)
    assert res["range_s"]["fast"] < res["time_s"] < res["range_s"]["slow"]  # the same trace at the ends of the cost table's ranges
    costs = timeline.Costs(tgt.timeline)
    for pairs, cycles in res["sampled"].values():
        assert cycles >= pairs * 2 * (128 // 16) ** 3 / costs["mmad_fractals_per_cycle"]
    assert len(res["heavy"]) == 2 and res["busy"]["AIC.M"] > 0 and res["busy"]["AIV0.V"] > 0


def test_a_shape_of_another_template_is_refused_in_one_line(snapshots):
    """S2 <= 1024 takes the S1 or B template (FlashAttentionScoreTilingS1s2Bn2gs1::IsCapable), not built."""
    with pytest.raises(SpecError, match="S1s2Bn2gs1::IsCapable") as err:
        ascend_peer.forward_tiling(_small(seq_q=512, seq_k=512), devkit=snapshots["ASC_DEVKIT"], ops=snapshots["OPS_TRANSFORMER"])
    assert "\n" not in str(err.value)
