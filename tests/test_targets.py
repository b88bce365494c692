"""Targets, placement, footprints, block-size selection, the cost model and `tilegen inspect`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import inputs, make_spec
from tilegen.analysis import count, total
from tilegen.backends.interp import interpret
from tilegen.cli import main
from tilegen.errors import ScheduleError, TargetError
from tilegen.passes import pipeline
from tilegen.report import tradeoff_report
from tilegen.spec import builtin_spec
from tilegen.targets import load_target, target_names

KIB = 1024


def test_targets_load_with_a_source_for_every_figure():
    assert {"ascend910b1", "ascend910b2", "ascend910b3", "ascend910b4", "ascend910", "h200"} <= set(target_names())
    for name in target_names():
        t = load_target(name)
        figures = list(t.cores.values()) + list(t.peak.values()) + list(t.bandwidth.values())
        figures += [lvl.capacity for lvl in t.levels] + [lvl.alignment for lvl in t.levels]
        assert all(f.source for f in figures), name


@pytest.mark.parametrize("name,aic,aiv", [("ascend910b1", 24, 48), ("ascend910b2", 24, 48), ("ascend910b3", 20, 40), ("ascend910b4", 20, 40)])
def test_ascend_910b_figures(name, aic, aiv):
    t = load_target(name)
    assert (t.cores["aic"].value, t.cores["aiv"].value) == (aic, aiv)
    caps = {lvl.name: (int(lvl.capacity.value), int(lvl.alignment.value)) for lvl in t.levels}
    assert caps == {"UB": (192 * KIB, 32), "L1": (512 * KIB - 128, 32), "L0A": (64 * KIB, 512), "L0B": (64 * KIB, 512), "L0C": (128 * KIB, 64)}
    assert t.peak["cube_fp16"].estimate


def test_seed_and_gpu_figures():
    seed = load_target("ascend910")
    assert seed.peak["cube_fp16"].value == 256 and seed.bandwidth["hbm"].value == 1200 and not seed.generate
    gpu = load_target("h200")
    assert gpu.cores["sm"].value == 132 and gpu.peak["cube_bf16"].value == 790 and gpu.bandwidth["hbm"].value == 4300
    assert gpu.level("SMEM").capacity.value == 227 * KIB  # 228 KiB per SM, 1 KiB reserved per block


def test_unknown_target_is_named():
    with pytest.raises(TargetError, match="'tpu' is invalid; accepted: one of ascend910"):
        load_target("tpu")
    with pytest.raises(TargetError):
        pipeline.compile_forward(make_spec(), target="nope")


SPECS = [
    dict(window=(-1, 0), seq_q=150, seq_k=150),
    dict(heads_q=4, heads_kv=2, seq_q=100, seq_k=260, window=(40, 8), dtype="bf16"),
    dict(seq_q=70, seq_k=33, head_dim_qk=64, head_dim_v=40, dtype="fp32"),
]


@pytest.mark.parametrize("target", ["ascend910b2", "h200"])
@pytest.mark.parametrize("kw", SPECS)
def test_predicted_bytes_equal_measured_bytes(target, kw):
    """The cost model's HBM and hand-off bytes and FLOPs are exactly what the interpreter measures, for
    the forward and both backward forms of placed, scheduled programs."""
    spec = make_spec(**kw)
    data = inputs(spec)
    log = pipeline.PassLog()
    fwd = pipeline.compile_forward(spec, target=target, log=log)
    out, m = interpret(fwd, {n: data[n] for n in "QKV"})
    _check_equal(fwd, m, log.schedule.prediction)
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": out["O"], "L": out["L"], "dO": data["dO"]}
    for fused in (False, True):
        log = pipeline.PassLog()
        bwd = pipeline.compile_backward(spec, fused=fused, target=target, log=log)
        _, mb = interpret(bwd, feeds)
        _check_equal(bwd, mb, log.schedule.prediction)


def _check_equal(program, measured, prediction):
    counted = total(count(program))
    assert dict(measured.bytes_read) == dict(counted.bytes_read)
    assert dict(measured.bytes_written) == dict(counted.bytes_written)
    assert dict(measured.flops) == dict(counted.flops)
    kinds = {t.name: t.kind for t in program.tensors}
    hbm = sum(measured.tensor_bytes(n) for n in kinds if kinds[n] != "handoff")
    l2 = sum(measured.tensor_bytes(n) for n in kinds if kinds[n] == "handoff")
    assert (prediction.hbm_bytes, prediction.l2_bytes) == (hbm, l2)
    assert prediction.matmul_flops == measured.flops.get("matmul", 0)


def test_ascend_placement_hands_tiles_through_gm():
    program = pipeline.compile_backward(make_spec(seq_q=128, seq_k=128), target="ascend910b2")
    handoffs = {t.name: t for t in program.tensors if t.kind == "handoff"}
    assert {"ws_S", "ws_Pc", "ws_dP", "ws_dSc"} <= set(handoffs)
    for t in handoffs.values():
        assert not ({"Sq", "Sk", "B", "Hq"} & {str(s) for d in t.shape for s in d.free_symbols})
    main_kernel = program.kernel("main")
    scopes = {b.name: b.scope for b in main_kernel.buffers}
    assert scopes["S"] == "L0C" and scopes["S_vector"] == "UB" and scopes["Qi"] == "L1"
    assert scopes["dV_acc"] == "L0C" and scopes["Pc"] == "UB" and scopes["Pc_cube"] == "L1"
    assert all(b.row_split == 2 for b in main_kernel.buffers if b.scope == "UB")


def test_placed_programs_compute_the_same_result():
    spec = make_spec(heads_q=2, heads_kv=1, seq_q=90, seq_k=130, window=(-1, 0), dtype="bf16")
    data = inputs(spec)
    feeds = {n: data[n] for n in "QKV"}
    plain, _ = interpret(pipeline.compile_forward(spec, tile_sizes=(32, 64)), feeds)
    placed, _ = interpret(pipeline.compile_forward(spec, target="ascend910b2", tile_sizes=(32, 64)), feeds)
    np.testing.assert_array_equal(plain["O"], placed["O"])
    np.testing.assert_array_equal(plain["L"], placed["L"])


@pytest.mark.parametrize("target", ["ascend910b1", "ascend910b4", "ascend910", "h200"])
@pytest.mark.parametrize("name", ["llama2-7b", "llama3-8b", "tiny-gqa"])
def test_every_chosen_schedule_fits_every_level(target, name):
    spec = builtin_spec(name)
    for compile_ in (pipeline.compile_forward, pipeline.compile_backward):
        log = pipeline.PassLog()
        compile_(spec, target=target, log=log)  # the verifier checks every level after choose-tiles
        chosen = log.schedule.chosen_candidate()
        usable = dict(log.schedule.capacities)
        assert chosen.feasible and all(v <= usable[k] for k, v in chosen.peaks)
        assert all(c.time_s is None for c in log.schedule.candidates if not c.feasible)


def test_shrunken_capacities_force_smaller_tiles():
    spec = builtin_spec("llama2-7b")
    full = pipeline.PassLog()
    pipeline.compile_forward(spec, target="ascend910b2", log=full)
    small_target = load_target("ascend910b2").with_capacity("L0C", 32 * KIB)
    small = pipeline.PassLog()
    pipeline.compile_forward(spec, target=small_target, log=small)
    (br1, bc1), (br2, bc2) = full.schedule.chosen, small.schedule.chosen
    assert br2 * bc2 < br1 * bc1
    assert dict(small.schedule.chosen_candidate().peaks)["L0C"] <= 32 * KIB
    rejected = [c for c in small.schedule.candidates if (c.Br, c.Bc) == (br1, bc1)][0]
    assert dict(rejected.overflow)["L0C"] == dict(full.schedule.chosen_candidate().peaks)["L0C"] - 32 * KIB


def test_impossible_specs_get_a_clear_error():
    spec = make_spec(head_dim_qk=1024, head_dim_v=1024, seq_q=512, seq_k=512)
    with pytest.raises(ScheduleError, match="no tile sizes fit target ascend910b2: .* overflows level (L1|L0C|UB)"):
        pipeline.compile_backward(spec, target="ascend910b2")
    with pytest.raises(ScheduleError, match="Br=256, Bc=512 do not fit target ascend910b2: level"):
        pipeline.compile_forward(builtin_spec("llama2-7b"), target="ascend910b2", tile_sizes=(256, 512))


def test_seed_comparison_figures():
    report = tradeoff_report(builtin_spec("seed"), "ascend910", layers=32)
    ph = report["per_head"]
    assert ph["P_bytes"] == 8 * 2**20
    assert ph["read_P_once_s"] == pytest.approx(8 * 2**20 / 1.2e12)  # 6.99 us
    assert ph["recompute_S_on_cube_s"] == pytest.approx(2 * 2048 * 2048 * 128 / 256e12)  # 4.19 us
    store = report["forms"]["store P (unfused)"]
    fused = report["forms"]["recompute (fused)"]
    model = "model (32 layers)"
    assert store[model]["held_bytes"] > 8 * 2**30  # P of 32 heads x 32 layers alone is 8 GiB
    assert fused[model]["held_bytes"] < 64 * 2**20
    assert store["per layer"]["moved_bytes"] > fused["per layer"]["moved_bytes"]


def test_inspect_cli(capsys):
    assert main(["inspect", "--spec", "tiny-gqa", "--target", "ascend910b2"]) == 0
    out = capsys.readouterr().out
    for needle in ("tile sizes: Br=", "footprint vs usable capacity", "predicted on ascend910b2", "loop nest with placements", "@L0C", "ws_S"):
        assert needle in out
    assert main(["inspect", "--spec", "tiny", "--target", "h200", "--json", "--program", "bwd"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["programs"][0]["prediction"]["time_s"] > 0
    assert data["programs"][0]["footprints"][0]["expression"]
    assert main(["inspect", "--spec", "seed", "--target", "ascend910", "--compare"]) == 0
    out = capsys.readouterr().out
    assert "8.00 MiB" in out and "6.99 us" in out and "4.19 us" in out
    assert main(["inspect", "--spec", "tiny", "--target", "tpu"]) == 2
