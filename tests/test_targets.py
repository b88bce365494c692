"""Targets, placement, footprints, block-size selection, the cost model and `tilegen inspect`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import inputs, make_spec, unwrapped
from tilegen.models.analysis import count, total
from tilegen.backends.interp import interpret
from tilegen.cli import main
from tilegen.core.errors import ScheduleError, TargetError
from tilegen.harness.report import tradeoff_report
from tilegen.core.spec import builtin_spec
from tilegen.core.targets import load_target, target_names
from tilegen.backends import compile_backward, compile_forward
from tilegen.passes.driver import PassLog

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
        compile_forward(make_spec(), target="nope")


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
    log = PassLog()
    fwd = compile_forward(spec, target=target, log=log)
    out, m = interpret(fwd, {n: data[n] for n in "QKV"})
    _check_equal(fwd, m, log.schedule.prediction)
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": out["O"], "L": out["L"], "dO": data["dO"]}
    for fused in (False, True):
        log = PassLog()
        bwd = compile_backward(spec, fused=fused, target=target, log=log)
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
    program = compile_backward(make_spec(seq_q=128, seq_k=128), target="ascend910b2")
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
    plain, _ = interpret(compile_forward(spec, tile_sizes=(32, 64)), feeds)
    placed, _ = interpret(compile_forward(spec, target="ascend910b2", tile_sizes=(32, 64)), feeds)
    np.testing.assert_array_equal(plain["O"], placed["O"])
    np.testing.assert_array_equal(plain["L"], placed["L"])


@pytest.mark.parametrize("target", ["ascend910b1", "ascend910b4", "ascend910", "h200"])
@pytest.mark.parametrize("name", ["llama2-7b", "llama3-8b", "tiny-gqa"])
def test_every_chosen_schedule_fits_every_level(target, name):
    spec = builtin_spec(name)
    for compile_ in (compile_forward, compile_backward):
        log = PassLog()
        compile_(spec, target=target, log=log)  # the verifier checks every level after choose-tiles
        chosen = log.schedule.chosen_candidate()
        usable = dict(log.schedule.capacities)
        assert chosen.feasible and all(v <= usable[k] for k, v in chosen.peaks)
        assert all(c.time_s is None for c in log.schedule.candidates if not c.feasible)


def test_shrunken_capacities_force_smaller_tiles():
    spec = builtin_spec("llama2-7b")
    full = PassLog()
    compile_forward(spec, target="ascend910b2", log=full)
    small_target = load_target("ascend910b2").with_capacity("L0C", 32 * KIB)
    small = PassLog()
    compile_forward(spec, target=small_target, log=small)
    (br1, bc1), (br2, bc2) = full.schedule.chosen, small.schedule.chosen
    assert br2 * bc2 < br1 * bc1
    assert dict(small.schedule.chosen_candidate().peaks)["L0C"] <= 32 * KIB
    rejected = [c for c in small.schedule.candidates if (c.Br, c.Bc) == (br1, bc1)][0]
    assert dict(rejected.overflow)["L0C"] == dict(full.schedule.chosen_candidate().peaks)["L0C"] - 32 * KIB


def test_impossible_specs_get_a_clear_error():
    spec = make_spec(head_dim_qk=1024, head_dim_v=1024, seq_q=512, seq_k=512)
    with pytest.raises(ScheduleError, match="no tile sizes fit target ascend910b2: .* overflows level (L1|L0A|L0B|L0C|UB)"):
        compile_backward(spec, target="ascend910b2")
    with pytest.raises(ScheduleError, match="Br=256, Bc=512 do not fit target ascend910b2: level"):
        compile_forward(builtin_spec("llama2-7b"), target="ascend910b2", tile_sizes=(256, 512))


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
    assert main(["inspect", "--spec", "tiny-gqa", "--target", "ascend910b2", "--verbose"]) == 0
    out = unwrapped(capsys.readouterr().out)
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


# --- GPU shared memory: what the Triton module allocates (issue 12, item 4) ------------------------------


def _pow2(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def _smem_by_hand(kind: str, br: int, bc: int, d: int, dtype: str, stages: int) -> int:
    """Shared memory of the Triton module's kernel, counted by hand from its tl.dot operands (checked
    against the module's text in the test below): every operand tile with the head dim padded to a
    power of two, in the input dtype; tiles the loop loads are held ``num_stages`` times.

    - fwd: Qi [Br, D] once; Kj, Vj [Bc, D] loaded in the loop, x stages; P [Br, Bc] cast for P V.
    - bwd main: Kj, Vj [Bc, D] once; Qi, dOi [Br, D] loaded in the loop, x stages; P or dS [Br, Bc]
      (cast in registers for their dots, never at the same time).
    """
    item = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    dp = _pow2(d)
    if kind == "fwd":
        return item * (br * dp + stages * 2 * bc * dp + br * bc)
    return item * (2 * bc * dp + stages * 2 * br * dp + br * bc)


def _main_smem(sched) -> tuple[int, int]:
    """(counted SMEM bytes of the program's heaviest kernel, its usable capacity)."""
    env = {str(k): v for k, v in sched.program.env}
    fps = [fp for fp in sched.log.schedule.footprints if fp.level.name == "SMEM"]
    return max(int(fp.value(env)) for fp in fps), fps[0].level.usable


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("d", [72, 80, 96, 192])
def test_gpu_schedule_fits_shared_memory_by_hand_count(d, dtype):
    """The chosen fwd and bwd configurations fit 227 KiB by a hand count of the module's tiles, and the
    footprint model counts exactly that (before: 72-wide tiles, and a bf16 row used for fp32)."""
    from tilegen.backends import triton as tb

    spec = make_spec(seq_q=4096, seq_k=4096, head_dim_qk=d, head_dim_v=d, dtype=dtype, window=(-1, 0))
    for sched in tb.schedule(spec, "h200", dq_strategy="atomic"):
        env = {str(k): v for k, v in sched.program.env}
        phase = "fwd" if sched.kind == "fwd" else "main"
        stages = sched.knobs[phase].num_stages
        hand = _smem_by_hand(sched.kind, env["Br"], env["Bc"], d, dtype, stages)
        counted, usable = _main_smem(sched)
        assert hand <= usable, f"{sched.kind} Br={env['Br']} Bc={env['Bc']} x{stages}: {hand} B of shared memory > {usable}"
        assert counted == hand, (sched.kind, env["Br"], env["Bc"], stages, counted, hand)


@pytest.mark.parametrize("strategy", ["atomic", "separate"])
def test_gpu_footprint_counts_separate_and_forced_configs(strategy):
    """D = 72, fp32 at the measured 64 x 128 (and 64 x 64) forced: the count is the hand count, far over
    227 KiB, and the forced sizes are refused with the level named."""
    from tilegen.backends import triton as tb

    spec = make_spec(seq_q=4096, seq_k=4096, head_dim_qk=72, head_dim_v=72, dtype="fp32", window=(-1, 0))
    tiles = (64, 128) if strategy == "atomic" else (64, 64)
    with pytest.raises(ScheduleError, match="do not fit target h200: level SMEM"):
        tb.schedule(spec, "h200", dq_strategy=strategy, tile_sizes={"fwd": (32, 32), "bwd": tiles})
    # the same sizes in bf16 fit; the count matches the hand count of the main kernel
    spec16 = make_spec(seq_q=4096, seq_k=4096, head_dim_qk=72, head_dim_v=72, dtype="bf16", window=(-1, 0))
    _, bwd = tb.schedule(spec16, "h200", dq_strategy=strategy, tile_sizes={"fwd": (32, 32), "bwd": tiles})
    main = [fp for fp in bwd.log.schedule.footprints if fp.level.name == "SMEM" and fp.kernel == "main"][0]
    env = {str(k): v for k, v in bwd.program.env}
    assert int(main.value(env)) == _smem_by_hand("bwd", *tiles, 72, "bf16", bwd.knobs["main"].num_stages)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_hand_count_matches_the_modules_dot_operands(dtype):
    """The hand count's tiles are the module's: the operands of every tl.dot of the main and fwd kernels,
    which of them the K/V- or Q-tile loop loads, and the padded head dim the module declares (in fp32
    the cast of dS is a copy the module drops: the dots read dP)."""
    from tilegen.backends import triton as tb

    spec = make_spec(seq_q=256, seq_k=256, head_dim_qk=72, head_dim_v=72, dtype=dtype, window=(-1, 0))
    source = tb.render(spec, "h200", dq_strategy="atomic")
    assert '"Dqk_p": 128' in source and '"Dv_p": 128' in source
    ds = "dSc" if dtype != "fp32" else "dP"

    def kernel_text(name):
        start = source.index(f"def {name}_kernel(")
        return source[start : source.index("\n\n\n", start)]

    for name, operands, in_loop in (
        ("main", {"Kj", "Vj", "Qi", "dOi", "Pc", ds}, {"Qi", "dOi"}),
        ("fwd", {"Qi", "Kj", "Vj", "Pc"}, {"Kj", "Vj"}),
    ):
        text = kernel_text(name)
        dots = set()
        for line in text.splitlines():
            if "tl.dot(" in line:
                args = line.split("tl.dot(", 1)[1].rsplit(")", 1)[0]
                for a in args.split(",")[:2]:
                    dots.add(a.strip().replace("tl.trans(", "").rstrip(")"))
        assert dots == operands, (name, dots)
        body = text.split("    for ", 1)[1]  # the first serial loop and what follows it
        loaded_in_loop = {ln.split("=")[0].strip() for ln in body.splitlines() if "= tl.load(" in ln and ln.startswith("        ")}
        assert in_loop <= loaded_in_loop and not (operands - in_loop) & loaded_in_loop, (name, loaded_in_loop)


def test_a_schedule_row_that_does_not_fit_is_skipped(tmp_path):
    """A planted [[triton.schedule]] row whose tiles overflow shared memory is not used: the next row
    (or the search) decides, and inspect names the skipped row and the level it overflows."""
    from tilegen.backends import triton as tb

    base = (Path(load_target("h200").path)).read_text()
    planted = base.replace(
        "[[triton.schedule]]\nprogram = \"bwd-atomic\"",
        '[[triton.schedule]]\nprogram = "bwd-atomic"\nhead_dim = 128\nBr = 256\nBc = 256\n'
        'main = { num_warps = 8, num_stages = 4 }\nsource = "planted: too large"\n\n'
        '[[triton.schedule]]\nprogram = "bwd-atomic"',
        1,
    )
    assert planted != base
    path = tmp_path / "h200-planted.toml"
    path.write_text(planted)
    spec = make_spec(seq_q=4096, seq_k=4096, head_dim_qk=128, head_dim_v=128, dtype="bf16")
    _, bwd = tb.schedule(spec, str(path), dq_strategy="atomic")
    env = {str(k): v for k, v in bwd.program.env}
    assert (env["Br"], env["Bc"]) == (64, 128) and bwd.row.source.startswith("measured")
    assert [sk.row.source for sk in bwd.skipped] == ["planted: too large"]
    assert "SMEM" in bwd.skipped[0].reason
    assert bwd.knobs["main"].num_stages == 3  # the knobs of the row used (64x128/8w/3s), not the skipped one (4)
    from tilegen.harness.report import format_inspect, inspect_report

    text = unwrapped(format_inspect(inspect_report(spec, str(path), dq_strategy="atomic", programs=("bwd",)), show_nest=False))
    assert "Br 256 x Bc 256) skipped: tile sizes Br=256, Bc=256 do not fit target h200: level SMEM" in text
    assert "from the target's triton.schedule[" in text


def test_a_row_with_min_seq_k_applies_from_that_key_length(tmp_path):
    """h200's forward row "min_seq_k = 8192" (128x64/8w/3s) is taken at Sk = 8192 and above, and the
    unconditional row below it (64x64/4w/3s) at shorter keys; inspect names the row with its condition.
    A bad value is refused in one line naming the key."""
    from tilegen.backends import triton as tb

    picks = {}
    for sk in (4096, 8191, 8192, 32768):
        spec = make_spec(seq_q=sk, seq_k=sk, head_dim_qk=128, head_dim_v=128, dtype="bf16")
        fwd, _ = tb.schedule(spec, "h200")
        env = {str(k): v for k, v in fwd.program.env}
        picks[sk] = (env["Br"], env["Bc"], fwd.knobs["fwd"].num_warps, fwd.knobs["fwd"].num_stages, fwd.row.min_seq_k)
    assert picks == {4096: (64, 64, 4, 3, None), 8191: (64, 64, 4, 3, None), 8192: (128, 64, 8, 3, 8192), 32768: (128, 64, 8, 3, 8192)}
    from tilegen.harness.report import format_inspect, inspect_report

    spec = make_spec(seq_q=8192, seq_k=8192, head_dim_qk=128, head_dim_v=128, dtype="bf16")
    text = unwrapped(format_inspect(inspect_report(spec, "h200", programs=("fwd",)), show_nest=False))
    assert "(fwd, head_dim 128, Sk >= 8192, Br 128 x Bc 64)" in text
    bad = Path(load_target("h200").path).read_text().replace("min_seq_k = 8192", "min_seq_k = 0", 1)
    path = tmp_path / "bad-min-seq.toml"
    path.write_text(bad)
    with pytest.raises(TargetError, match=r"min_seq_k = 0 is invalid; accepted: a positive integer"):
        tb.triton_config(load_target(str(path)))


def test_level_pow2_must_be_a_power_of_two(tmp_path):
    text = Path(load_target("h200").path).read_text().replace("pow2 = { value = 16,", "pow2 = { value = 24,", 1)
    path = tmp_path / "bad-pow2.toml"
    path.write_text(text)
    with pytest.raises(TargetError, match=r"levels\[0\]\.pow2 = 24\.0 is invalid; accepted: a power of two"):
        load_target(str(path))


def test_h100_figures_are_the_datasheets_and_every_figure_has_a_source():
    """targets/h100.toml against NVIDIA's H100 SXM5 datasheet and whitepaper: 132 SMs, 227 KiB of shared
    memory per block, 64K registers, 50 MB L2, 80 GB HBM3, FP32 67 TFLOPS, NVLink 900 GB/s (450 each
    way); every figure and row names its source."""
    t = load_target("h100")
    assert (t.kind, t.arch, t.generate, t.devices) == ("gpu", "sm_90", True, ("H100",))
    assert load_target("h200").devices == ("H200",)
    assert t.cores["sm"].value == 132 and t.cores["clock_ghz"].value == 1.98
    assert t.level("SMEM").capacity.value == 227 * KIB and t.level("RF").capacity.value == 64 * 1024 * 4
    assert t.bandwidth["l2_bytes"].value == 50 * KIB * KIB and t.bandwidth["hbm_bytes"].value == 80 * KIB**3
    assert t.peak["cube_fp32"].value == 67 and t.bandwidth["interconnect"].value == 900 / 2
    assert "3.35 TB/s" in t.bandwidth["hbm"].source and t.bandwidth["hbm"].value < 3350  # below the datasheet's peak
    figures = [f for table in (t.cores, t.peak, t.bandwidth, t.overhead, t.gpu_model, t.gpu_model_compiled) for f in table.values()]
    figures += [f for lvl in t.levels for f in (lvl.capacity, lvl.alignment, lvl.pow2)]
    assert all(f.source for f in figures)


def test_h100_carries_the_h200_measurements_marked_as_such():
    """What was measured or fitted on an H200 is marked an estimate on the H100 and says where it was
    measured; the rows are the H200's rows (the same die: the same tiles and knobs fit)."""
    from tilegen.passes.gpu.rows import triton_config

    h100, h200 = load_target("h100"), load_target("h200")
    rows, theirs = triton_config(h100).rows, triton_config(h200).rows
    assert rows and [(r.program, r.head_dim, r.tiles, r.knobs.keys()) for r in rows] == [(r.program, r.head_dim, r.tiles, r.knobs.keys()) for r in theirs]
    assert all(r.estimate and "measured on an H200" in r.source and "not yet measured on an H100" in r.source for r in rows)
    assert not any(r.estimate for r in theirs)
    for name in ("cube_fp16", "cube_bf16"):
        assert h100.peak[name].estimate and "measured on an H200" in h100.peak[name].source
    fitted = {**{f"gpu_model.{k}": f for k, f in h100.gpu_model.items()}, **{f"gpu_model_compiled.{k}": f for k, f in h100.gpu_model_compiled.items()}}
    assert fitted.keys() == {f"gpu_model.{k}" for k in h200.gpu_model} | {f"gpu_model_compiled.{k}" for k in h200.gpu_model_compiled}
    for key, fig in fitted.items():
        if key.endswith("fitted_max_stack_bytes") or key.endswith("base_registers"):  # compile figures for sm_90: the same on an H100
            assert "sm_90" in fig.source, key
        else:
            assert fig.estimate and "H200" in fig.source and "not yet fitted on an H100" in fig.source, key


def test_inspect_names_a_row_measured_elsewhere_an_estimated_row(capsys):
    """`tilegen inspect --json` says where the emitted tiles come from: a row of h200.toml is a measured
    row, the same row in h100.toml (estimate = true) an estimated row."""
    origins = {}
    for target in ("h200", "h100"):
        assert main(["inspect", "--spec", "llama3-8b", "--target", target, "--json", "--no-nest"]) == 0
        progs = json.loads(capsys.readouterr().out)["programs"]
        origins[target] = {p["label"].split(" ")[0]: p["origin"]["tiles"] for p in progs}
    assert origins == {"h200": {"forward": "measured row", "backward": "measured row"},
                       "h100": {"forward": "estimated row", "backward": "estimated row"}}


def test_bad_devices_and_row_estimate_are_named(tmp_path):
    from tilegen.passes.gpu.rows import triton_config

    text = Path(load_target("h100").path).read_text()
    path = tmp_path / "bad-devices.toml"
    path.write_text(text.replace('devices = ["H100"]', 'devices = "H100"', 1))
    with pytest.raises(TargetError, match=r"devices = 'H100' is invalid; accepted: a list of non-empty strings"):
        load_target(str(path))
    path = tmp_path / "bad-estimate.toml"
    path.write_text(text.replace("estimate = true\n", 'estimate = "yes"\n', 1))
    with pytest.raises(TargetError, match=r"triton\.schedule\[0\]\.estimate = 'yes' is invalid; accepted: true"):
        triton_config(load_target(str(path)))


def test_cli_inspect_and_generate_take_target_h100(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "0")
    assert main(["inspect", "--spec", "tiny", "--target", "h100"]) == 0
    assert "target h100: NVIDIA H100 SXM5" in capsys.readouterr().out
    assert main(["generate", "--spec", "tiny", "--target", "h100", "-o", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["target"] == "h100"
    module = (tmp_path / "tilegen_tiny.py").read_text()
    assert "on the target `h100`" in module
    compile(module, "tilegen_tiny.py", "exec")  # a Python module (its kernels run in tests/test_triton.py's way on a GPU)
