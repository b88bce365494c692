"""The GPU cost model (:func:`tilegen.models.cost.predict_gpu`) against measurement, and `tilegen inspect`
against the generated Triton module.

The reference for the model is ``benchmarks/results/gpu_sweep.json``: 27 variants (tiles, warps,
stages; forward, atomic and separate backward; head dims 64 and 128) timed on one H200, committed.
The model's parameters were fitted on its even-numbered variants (benchmarks/gpu_model.py --fit), so
the held-out part (the odd ones) is checked on its own as well as the whole.

The reference for inspect is the module source ``generate`` writes: each kernel's launch function
sets ``Br, Bc`` and passes ``num_warps``, ``num_stages`` to the launch; these are read from the text.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tilegen import cli
from tilegen.backends import triton as tb
from tilegen.models.cost import predict, predict_gpu
from tilegen.harness.report import inspect_report
from tilegen.core.spec import AttentionSpec, builtin_spec
from tilegen.core.targets import load_target
from tilegen.backends import compile_backward

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gpu_model  # noqa: E402
from helpers import unwrapped


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "0")


@pytest.fixture(scope="module")
def sweep():
    return gpu_model.evaluate()


def test_model_ranks_the_sweep_and_predicts_it(sweep):
    """What the model reaches today (a guard: a change that makes it worse fails here)."""
    s = sweep["summary"]
    assert s["all"]["variants"] == 27
    assert s["all"]["spearman"] >= 0.72, s["all"]
    assert s["held-out"]["spearman"] >= 0.65, s["held-out"]
    assert s["all"]["within_25pct"] >= 23, s["all"]
    assert s["all"]["mean_abs_error"] <= 0.18, s["all"]


@pytest.mark.xfail(strict=True, reason="the issue 17 goal, not reached yet: see benchmarks/NOTES.md (GPU cost model)")
def test_model_meets_the_issue_goal(sweep):
    s = sweep["summary"]["all"]
    assert s["spearman"] >= 0.8 and s["max_abs_error"] <= 0.25, s


@pytest.fixture(scope="module")
def sweep_compiled():
    return gpu_model.evaluate(compiled=gpu_model.COMPILED)


def test_model_with_the_compilers_figures_ranks_the_sweep(sweep_compiled):
    """With each kernel's registers, spills and shared bytes from the sm_90 compile
    (results/gpu_compile.json) and the parameters fitted to them (the target's [gpu_model_compiled]),
    the ranking part of the goal is
    reached, on the held-out variants too; the ±25% part is not (see the xfail below)."""
    s = sweep_compiled["summary"]
    assert s["all"]["variants"] == 27
    assert s["all"]["spearman"] >= 0.8, s["all"]
    assert s["held-out"]["spearman"] >= 0.8, s["held-out"]
    assert s["all"]["within_25pct"] >= 23, s["all"]


@pytest.mark.xfail(strict=True, reason="the issue 17 goal, not reached with the compiler's figures either: 4 of 27 variants beyond ±25%")
def test_model_with_the_compilers_figures_meets_the_issue_goal(sweep_compiled):
    s = sweep_compiled["summary"]["all"]
    assert s["spearman"] >= 0.8 and s["max_abs_error"] <= 0.25, s


def test_compiled_figures_replace_the_footprints_estimates():
    """predict_gpu with ``compiled``: the resident programs follow the compiler's shared bytes and
    registers (hand arithmetic on the H200's 232448 usable shared bytes and 64K registers)."""
    target = load_target("h200")
    spec = gpu_model.sweep_spec(128, 4096)
    prog = compile_backward(spec, dq_strategy="atomic", target=target.with_capacity("SMEM", 1 << 30), tile_sizes=(64, 64), num_stages={"*": 2})
    two = predict_gpu(prog, target, {"main": 4}, compiled={"main": {"registers": 128, "stack_bytes": 0, "shared_bytes": 100_000}})
    one = predict_gpu(prog, target, {"main": 4}, compiled={"main": {"registers": 128, "stack_bytes": 0, "shared_bytes": 131_584}})
    by_regs = predict_gpu(prog, target, {"main": 4}, compiled={"main": {"registers": 255, "stack_bytes": 0, "shared_bytes": 50_000}})
    main = lambda p: next(k for k in p.kernels if k.phase == "main")  # noqa: E731
    assert main(two).resident == 2  # 232448 // 100000
    assert main(one).resident == 1  # 232448 // 131584
    assert main(by_regs).resident == 2  # 65536 // (128 threads * 256 registers)
    assert main(by_regs).registers == 255
    spilled = predict_gpu(prog, target, {"main": 4}, compiled={"main": {"registers": 255, "stack_bytes": 1020, "shared_bytes": 131_584}})
    assert main(spilled).time_s > main(one).time_s


def test_spearman_against_hand_computed_ranks():
    """The rank correlation of the benchmark against values worked out by hand."""
    assert gpu_model.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert gpu_model.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (1, 2, 3, 4) against (2, 1, 4, 3): 1 - 6·Σd² / (n(n²-1)) = 1 - 6·4/60 = 0.6
    assert gpu_model.spearman([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(0.6)


def test_model_does_not_tie_the_backward_tiles():
    """The roofline gives every Br of one Bc the same backward time (the same bytes and FLOPs); the
    GPU model tells them apart, and ranks the two measured D 128 variants 64x128/8w/2s (332 TFLOP/s)
    and 32x128/8w/2s (264) the way the sweep does."""
    target = load_target("h200")
    spec = gpu_model.sweep_spec(128, 4096)
    times, roof = {}, {}
    for br in (32, 64):
        prog = compile_backward(spec, dq_strategy="atomic", target=target, tile_sizes=(br, 128), num_stages={"*": 2})
        roof[br] = predict(prog, target).time_s
        times[br] = predict_gpu(prog, target, {"main": 8}).time_s
    assert roof[32] == pytest.approx(roof[64], rel=0.02)
    assert times[64] < times[32]


def _module_schedule(source: str) -> dict:
    """{kernel: (Br, Bc, num_warps, num_stages)} read from a generated module's launch functions."""
    found = re.findall(r"def _launch_(\w+)\(t(?:, record=None)?\):\n.*?Br, Bc = (\d+), (\d+)\n.*?num_warps=(\d+), num_stages=(\d+),", source, flags=re.S)
    return {k: tuple(int(x) for x in v) for k, *v in found}


def _spec(name):
    if isinstance(name, str):
        return builtin_spec(name)
    d, n, causal, dtype = name
    return AttentionSpec(batch=2, heads_q=8, heads_kv=8, seq_q=n, seq_k=n, head_dim_qk=d, head_dim_v=d, dtype=dtype,
                         window=(-1, 0) if causal else (-1, -1), name=f"model_d{d}_n{n}")


# builtin specs whose rows apply (D 128, D 64 padded), one clamped to a short sequence, and specs
# without a row (D 32, D 256: tiles from the model, knobs from [triton.default])
CASES = ["llama3-8b", "llama2-7b", "tiny-gqa", "varlen-sinks", (32, 2048, True, "bf16"), (256, 1024, False, "fp16")]


@pytest.mark.parametrize("case", CASES, ids=[c if isinstance(c, str) else f"d{c[0]}-n{c[1]}" for c in CASES])
def test_inspect_shows_the_module_schedule(case, capsys):
    spec = _spec(case)
    if isinstance(case, str):
        capsys.readouterr()
        assert cli.main(["inspect", "--spec", case, "--target", "h200", "--json", "--no-nest"]) == 0
        report = json.loads(capsys.readouterr().out)
    else:
        report = inspect_report(spec, "h200")  # what `inspect --json` prints, for a spec given as fields
    module = _module_schedule(tb.render(spec, "h200"))
    shown = {}
    for prog in report["programs"]:
        side = "fwd" if prog["label"].startswith("forward") else "bwd"
        for k in prog["kernels"]:
            launch = prog["emitted"]["launch"][k]
            name = f"{side}_{k}" if f"{side}_{k}" in module else k  # the module prefixes a name both programs use
            shown[name] = (prog["tiles"]["Br"], prog["tiles"]["Bc"], launch["num_warps"], launch["num_stages"])
        rows = tb.triton_config(load_target("h200")).rows
        origin = prog["origin"]
        if prog["emitted"]["tiles_source"].startswith("the target's triton.schedule"):
            assert origin["tiles"] == "measured row"
        else:
            assert origin["tiles"] == "model" and not any(r.head_dim == tb._pow2(spec.head_dim_qk) for r in rows if r.program == "fwd")
        assert prog["model"]["label"] == "model (prediction)" and prog["model"]["tflops"] > 0
    assert shown == module


def test_inspect_text_tags_each_value_with_its_origin(capsys):
    """llama3-8b takes its tiles and main-kernel knobs from measured rows; tiny (head dim 32, no row)
    takes its tiles from the model and its knobs from [triton.default]; both print the model's
    prediction of what they emit."""
    capsys.readouterr()
    assert cli.main(["inspect", "--spec", "llama3-8b", "--target", "h200", "--no-nest", "--verbose"]) == 0
    text = unwrapped(capsys.readouterr().out)
    assert "(fwd, head_dim 128, Sk >= 8192, Br 128 x Bc 64)) [measured row]" in text
    assert "launch pre: num_warps=4, num_stages=2 (the target's triton.default) [default]" in text
    assert text.count("model (prediction): ") == 2
    assert cli.main(["inspect", "--spec", "tiny", "--target", "h200", "--no-nest", "--verbose"]) == 0
    text = unwrapped(capsys.readouterr().out)
    assert "tile sizes: Br=" in text and "rejected) [model]" in text
    assert "[measured row]" not in text
