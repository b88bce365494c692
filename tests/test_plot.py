"""`tilegen inspect --plot`: the tile classes against a dense classification from DESIGN §3's rule
(:func:`tilegen.core.reference.visible`, one boolean per query-key pair), the files written, the one-line
errors."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tilegen import cli
from tilegen.harness import plot
from tilegen.core.reference import visible

pytest.importorskip("matplotlib")

# (Sq, Sk, Br, Bc, window, alignment)
CASES = [
    (64, 64, 16, 16, (-1, -1), "bottom_right"),  # no mask
    (70, 70, 16, 16, (-1, 0), "bottom_right"),  # causal, tails in both
    (50, 90, 16, 32, (-1, 0), "bottom_right"),  # causal, Sq < Sk, bottom-right
    (50, 90, 16, 32, (-1, 0), "top_left"),  # causal, Sq < Sk, top-left
    (90, 50, 32, 16, (-1, 0), "bottom_right"),  # causal, Sq > Sk: leading rows see nothing
    (90, 50, 32, 16, (-1, 0), "top_left"),
    (100, 130, 16, 16, (20, 5), "bottom_right"),  # window
    (100, 130, 8, 32, (20, 5), "top_left"),
    (77, 61, 16, 8, (0, 0), "bottom_right"),  # only the diagonal
    (40, 40, 64, 64, (3, -1), "top_left"),  # one tile larger than the sequence
]


def dense_classes(sq, sk, br, bc, window, alignment) -> np.ndarray:
    """Per (Q tile, K/V tile): VISITED if every real pair is visible, MASKED if some, else SKIPPED."""
    vis = visible(sq, sk, window, alignment)
    nq, nk = -(-sq // br), -(-sk // bc)
    out = np.zeros((nq, nk), dtype=np.uint8)
    for i in range(nq):
        for j in range(nk):
            block = vis[i * br : (i + 1) * br, j * bc : (j + 1) * bc]
            out[i, j] = plot.VISITED if block.all() else (plot.MASKED if block.any() else plot.SKIPPED)
    return out


def mismatches(case) -> int:
    """Cells and counts of :func:`plot.tile_classes` that differ from the dense classification."""
    dense = dense_classes(*case)
    grid = plot.tile_classes(*case, max_cells=10_000)
    bad = int((grid.cells != dense).sum()) if grid.cells.shape == dense.shape else dense.size
    want = {name: int((dense == cls).sum()) for cls, name in plot.CLASS_NAMES.items()}
    return bad + sum(grid.counts[k] != want[k] for k in want)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-{c[2]}x{c[3]}-{c[4]}-{c[5]}" for c in CASES])
def test_classes_match_the_dense_rule(case):
    assert mismatches(case) == 0


def test_classes_match_on_random_cases():
    rng = np.random.default_rng(7)
    for _ in range(60):
        sq, sk = (int(x) for x in rng.integers(1, 120, 2))
        br, bc = (int(2 ** rng.integers(2, 6)) for _ in range(2))
        left, right = (int(x) for x in rng.integers(-1, 40, 2))
        case = (sq, sk, br, bc, (left, right), ["bottom_right", "top_left"][int(rng.integers(2))])
        assert mismatches(case) == 0, case


def test_a_planted_wrong_class_is_caught(monkeypatch):
    """An off-by-one in the band (a window one key too wide) must show up against the dense rule."""
    band = plot.visible_band
    monkeypatch.setattr(plot, "visible_band", lambda *a: (band(*a)[0] - 1, band(*a)[1]))
    assert sum(mismatches(c) for c in CASES) > 0


def test_downsampled_cells_aggregate_the_tiles():
    """With fewer cells than tiles, a cell is visited or skipped only when all its tiles are."""
    case = (300, 420, 8, 16, (60, 10), "bottom_right")
    dense = dense_classes(*case)
    grid = plot.tile_classes(*case, max_cells=7)
    assert grid.downsampled and grid.cells.shape == (7, 7)
    for a in range(7):
        for b in range(7):
            block = dense[grid.row_edges[a] : grid.row_edges[a + 1], grid.col_edges[b] : grid.col_edges[b + 1]]
            want = plot.VISITED if (block == plot.VISITED).all() else plot.SKIPPED if (block == plot.SKIPPED).all() else plot.MASKED
            assert grid.cells[a, b] == want, (a, b)
    assert grid.counts == {name: int((dense == cls).sum()) for cls, name in plot.CLASS_NAMES.items()}


def test_huge_spec_is_bounded():
    """2^23 tokens at 16 x 16 tiles: 2.7·10^11 tile pairs, counted exactly (n(n−1)/2 visited, n on the
    diagonal masked for a square causal mask) without allocating the grid."""
    n_tok = 1 << 23
    grid = plot.tile_classes(n_tok, n_tok, 16, 16, (-1, 0), "bottom_right")
    n = n_tok // 16
    assert grid.cells.shape == (plot.MAX_CELLS, plot.MAX_CELLS)
    assert grid.counts == {"visited": n * (n - 1) // 2, "masked": n, "skipped": n * (n - 1) // 2}


def _inspect(argv, capsys):
    capsys.readouterr()
    rc = cli.main(["inspect", *argv, "--no-nest"])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("target", ["h200", "ascend910b2"])
def test_png_and_svg_are_written(target, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "0")
    png, svg = tmp_path / "s.png", tmp_path / "sub" / "s.svg"
    rc, out, _ = _inspect(["--spec", "tiny", "--target", target, "--plot", str(png)], capsys)
    assert rc == 0 and f"wrote {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    rc, _, _ = _inspect(["--spec", "tiny", "--target", target, "--plot", str(svg)], capsys)
    assert rc == 0
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert f"tilegen inspect: tiny on {target}" in svg.read_text()  # the title names spec and target


def test_bad_extension_is_one_line(tmp_path, capsys):
    rc, _, err = _inspect(["--spec", "tiny", "--target", "h200", "--plot", str(tmp_path / "x.pdf")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--plot" in err and ".png or .svg" in err
    assert not (tmp_path / "x.pdf").exists()


def test_without_matplotlib_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    rc, _, err = _inspect(["--spec", "tiny", "--target", "h200", "--plot", str(tmp_path / "x.png")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "matplotlib" in err and "tilegen[plot]" in err


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-{c[2]}x{c[3]}-{c[4]}-{c[5]}" for c in CASES])
def test_visited_and_masked_are_the_tiles_the_loop_bounds_visit(case):
    """The kernels' K/V tile loop (build.kv_tile_range, per Q tile) covers exactly the tiles drawn as
    visited or masked: what the picture calls skipped, the kernel skips."""
    import sympy

    from tilegen.core.build import kv_tile_range
    from tilegen.core.exprs import evaluate
    from tilegen.core.ir import MaskInfo

    sq, sk, br, bc, window, alignment = case
    offset = sympy.Symbol("Sk", integer=True, positive=True) - sympy.Symbol("Sq", integer=True, positive=True) if alignment == "bottom_right" else sympy.Integer(0)
    qi = sympy.Symbol("qi", integer=True, nonnegative=True)
    start, stop = kv_tile_range(MaskInfo(window[0], window[1], offset), qi)
    grid = plot.tile_classes(*case, max_cells=10_000)
    for i in range(grid.q_tiles):
        env = {"Sq": sq, "Sk": sk, "Br": br, "Bc": bc, "qi": i}
        lo, hi = evaluate(start, env), evaluate(stop, env)
        drawn = np.flatnonzero(grid.cells[i] != plot.SKIPPED)
        assert list(drawn) == list(range(lo, max(hi, lo))), (i, lo, hi)


PROBE = r"""
import json, sys
from tilegen.cli import main
rc = main(["inspect", "--spec", "llama3-8b", "--seq", str(2**23), "--target", "h200", "--no-nest", "--plot", sys.argv[1]])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]  # this process's own peak
print(json.dumps({"rc": rc, "peak_kib": int(hwm[0].split()[1])}))
"""


@pytest.mark.slow
def test_a_2_23_token_picture_in_bounded_memory(tmp_path):
    """`inspect --plot` at Sq = Sk = 2^23 (1.7·10^10 forward tile pairs at 64 x 64) in a fresh process:
    the picture is written and the peak stays far below one byte per tile pair."""
    import json
    import os
    import subprocess
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "TILEGEN_CACHE": "0", "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp_path / "big.png"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out)], capture_output=True, text=True, env=env, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0 and out.read_bytes()[:4] == b"\x89PNG"
    assert result["peak_kib"] < 400 * 1024, result
