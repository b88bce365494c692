"""``tilegen inspect --compile``: the emitted Triton kernels compiled for sm_90 on the CPU.

The kernels listed must be the ones the module ``generate`` writes launches through its
``_launch_<name>`` functions, with the warps and stages those pass (read here with a regular
expression; compile_resources reads them with ``ast``); the shared bytes are checked against the H200
in tests/test_gpu_compile.py. Bad input gets one line naming the flag.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tilegen import cli
from tilegen.core.errors import TilegenError
from helpers import unwrapped


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "0")


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["tiny", "softcap-doc", "varlen-sinks", "tiny-gqa"])
def test_compile_lists_each_launched_kernel_with_what_the_compiler_allocated(spec, tmp_path, capsys):
    pytest.importorskip("triton")
    assert cli.main(["generate", "--spec", spec, "--target", "h200", "-o", str(tmp_path)]) == 0
    source = next(tmp_path.glob("*.py")).read_text()
    launched = set(re.findall(r"^def _launch_(\w+)\(", source, re.M))
    capsys.readouterr()
    assert cli.main(["inspect", "--spec", spec, "--target", "h200", "--compile", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["compiled"]
    assert report["arch"] == "sm_90"
    kernels = {name: k for prog in report["programs"] for name, k in prog["kernels"].items()}
    assert set(kernels) == launched
    for name, k in kernels.items():
        warps, stages = re.search(rf"def _launch_{name}\(.*?num_warps=(\d+), num_stages=(\d+)", source, re.S).groups()
        assert (k["num_warps"], k["num_stages"]) == (int(warps), int(stages)), name
        assert 0 < k["registers"] <= 255 and k["stack_bytes"] >= 0 and k["shared_bytes"] >= 0
    for prog in report["programs"]:
        assert prog["model"]["time_s"] > 0 and prog["model_compiled"]["time_s"] > 0
        assert "prediction" in prog["model"]["label"] and "prediction" in prog["model_compiled"]["label"]
    assert cli.main(["inspect", "--spec", spec, "--target", "h200", "--compile", "--no-nest"]) == 0
    text = unwrapped(capsys.readouterr().out)
    assert "compiled for sm_90" in text and "what the compiler allocated" in text
    assert "with the compiler's figures ([gpu_model_compiled])" in text


def test_compile_of_one_program_compiles_only_its_kernels(capsys):
    pytest.importorskip("triton")
    assert cli.main(["inspect", "--spec", "tiny", "--target", "h200", "--compile", "--program", "fwd", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["compiled"]
    assert [p["program"] for p in report["programs"]] == ["fwd"] and set(report["programs"][0]["kernels"]) == {"fwd"}


def test_compile_needs_a_gpu_target(capsys):
    assert cli.main(["inspect", "--spec", "tiny", "--target", "ascend910b2", "--compile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--target" in err[0] and "ascend910b2" in err[0] and "--compile" in err[0] and "GPU" in err[0]
    assert cli.main(["inspect", "--spec", "tiny", "--target", "h200", "--compile", "--compare"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--compile" in err[0] and "--compare" in err[0]


def test_compile_without_triton_is_one_line(monkeypatch):
    from tilegen.backends.triton.compile import compile_resources
    from tilegen.core.spec import builtin_spec

    monkeypatch.setitem(sys.modules, "triton", None)
    with pytest.raises(TilegenError, match=r"needs Triton \(pip install"):
        compile_resources(builtin_spec("tiny"), "h200")


def test_a_prediction_past_the_fitted_spills_says_so(capsys):
    """fp32 at D 128 spills far past the sweep's largest stack frame (152 B, [gpu_model_compiled]
    fitted_max_stack_bytes): the prediction with the compiler's figures carries the note."""
    pytest.importorskip("triton")
    assert cli.main(["inspect", "--spec", "demo", "--dtype", "fp32", "--seq", "3000", "--target", "h200", "--compile", "--program", "fwd", "--json"]) == 0
    prog = json.loads(capsys.readouterr().out)["compiled"]["programs"][0]
    assert prog["kernels"]["fwd"]["stack_bytes"] > 152
    assert "flag, not a time" in prog["model_compiled"]["outside_fit"]
