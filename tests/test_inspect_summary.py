"""`tilegen inspect` opens with a summary per program, every line at most 100 columns; --verbose adds
the details. The summary's figures are checked against the --json report (the same compile, read as
data); the wrap against the text it wraps (nothing lost, short lines untouched)."""

from __future__ import annotations

import json
import re

import pytest
from helpers import unwrapped

from tilegen.cli import main
from tilegen.harness.memory import format_bytes, format_seconds
from tilegen.harness.text import format_inspect, wrap_lines

CASES = [
    ["--spec", "tiny", "--target", "ascend910b2"],
    ["--spec", "llama3-8b", "--target", "h200", "--program", "bwd"],
    ["--spec", "document"],
    ["--spec", "alibi", "--target", "ascend910b2", "--program", "fwd"],
]


def _run(capsys, *argv):
    rc = main(["inspect", *argv])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return cap.out


@pytest.mark.parametrize("argv", CASES, ids=lambda a: " ".join(a))
def test_summary_first_then_details_with_verbose_all_within_100_columns(argv, capsys):
    short = _run(capsys, *argv)
    full = _run(capsys, *argv, "--verbose")
    for text in (short, full):
        assert max(len(line) for line in text.splitlines()) <= 100
    assert "summary (" in short and "loop nest with placements:" not in short and "--verbose" in short
    assert "loop nest with placements:" in full and "summary (" in full
    assert full.index("summary (") < full.index("loop nest with placements:")
    # the summary is the same with or without the details
    assert full.split("\n\n== ")[0] == short.split("\n\ndetails (")[0]


def test_other_reports_wrap_at_100_columns(capsys):
    for argv in (["--spec", "seed", "--target", "ascend910", "--compare"], ["--spec", "tiny", "--seq", "256", "--target", "h200", "--cp", "4"]):
        out = _run(capsys, *argv)
        assert max(len(line) for line in out.splitlines()) <= 100, argv


@pytest.mark.parametrize("argv", CASES[:2] + CASES[3:], ids=lambda a: " ".join(a))
def test_summary_figures_are_those_of_the_report(argv, capsys):
    text = unwrapped(_run(capsys, *argv))
    report = json.loads(_run(capsys, *argv, "--json"))
    levels = report["target"]["levels"]
    assert "summary (times predicted by tilegen's cost models, not measured)" in text
    for prog in report["programs"]:
        tiles = prog["tiles"]
        assert f"{prog['label']}: kernels {', '.join(prog['kernels'])}; tiles Br={tiles['Br']}, Bc={tiles['Bc']} (" in text
        pred = prog["prediction"]
        assert f"time: predicted {format_seconds(pred['time_s'])} (roofline, {pred['utilization']:.1%} of matmul peak)" in text
        assert f"HBM {format_bytes(pred['hbm_bytes'])}" in text
        if prog.get("model"):
            assert f", {format_seconds(prog['model']['time_s'])} (GPU cost model)" in text
        for level in levels:
            shares = [fp["bytes"] / fp["usable"] for fp in prog["footprints"] if fp["level"] == level]
            if shares:
                assert re.search(rf"\b{level} [0-9.]+(?: [KMG]?i?B)?/[0-9.]+ [KMG]?i?B \({max(shares):.0%}\)", text), (level, max(shares))


def test_simulated_times_are_labelled_in_the_summary():
    report = {
        "target": {"name": "t", "description": "a target", "levels": {"UB": {"capacity": 1024, "usable": 1024, "unit": "vector"}}},
        "backend": {"name": "ascendc"},
        "programs": [{
            "label": "forward", "kernels": ["fwd"], "tiles": {"Br": 64, "Bc": 64},
            "schedule": {"forced": False, "candidates": [{"feasible": True}, {"feasible": False}]},
            "prediction": {"time_s": 2e-3, "utilization": 0.5, "hbm_bytes": 2048},
            "footprints": [{"kernel": "fwd", "level": "UB", "bytes": 512, "usable": 1024}],
        }],
    }
    text = format_inspect(report, verbose=False, simulated={"forward": (3e-3, (2e-3, 5e-3))})
    assert "times predicted by tilegen's cost models, not measured; simulated: the twin's trace" in unwrapped(text)
    assert "time: predicted 2.000 ms (roofline, 50.0% of matmul peak); simulated 3.000 ms (2.000 ms .. 5.000 ms over the cost table's ranges; twin trace); HBM 2.00 KiB" in unwrapped(text)
    assert "UB 512 B/1.00 KiB (50%)" in text and "(the fastest predicted of 1 feasible)" in text


def test_wrap_keeps_short_lines_and_loses_nothing():
    table = "  kernel  programs   busy\n  fwd         2048   0.99"
    prose = "    " + " ".join(f"word{n}" for n in range(60))
    out = wrap_lines(table + "\n" + prose + "\n" + "x" * 250)
    lines = out.splitlines()
    assert lines[:2] == table.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert lines[2].startswith("    word0") and all(line.startswith("        ") for line in lines[3:-3])
    assert unwrapped(out).replace(" ", "") == unwrapped(table + prose + "x" * 250).replace(" ", "")
