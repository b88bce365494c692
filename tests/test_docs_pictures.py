"""The documentation's pictures are current, and the timeline picture shows what DESIGN §4 says.

Each docs/NAME.png has a sidecar docs/NAME.json (tools/regen_docs_pictures.py writes both): the numbers
the figure draws and the PNG's SHA-256. Here the numbers are recomputed from the current code and
compared with the sidecar, so a change that alters a picture fails until the pictures are redrawn.
"""

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("regen_docs_pictures", ROOT / "tools" / "regen_docs_pictures.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the timeline runs the twin (g++)")


@pytest.fixture(scope="module")
def timeline_report():
    if shutil.which("g++") is None:
        pytest.skip("the timeline runs the twin (g++)")
    return regen._report("timeline-tiny-ascend910b2")


@pytest.mark.parametrize("name", list(regen.PICTURES))
def test_committed_picture_is_current(name, request):
    sidecar = json.loads((ROOT / "docs" / f"{name}.json").read_text())
    png = ROOT / "docs" / f"{name}.png"
    assert hashlib.sha256(png.read_bytes()).hexdigest() == sidecar["png_sha256"], f"docs/{name}.png was not drawn with its sidecar"
    report = request.getfixturevalue("timeline_report") if regen._kind(name) == "timeline" else None
    assert regen.data(name, report) == sidecar["data"], f"docs/{name}.png is stale: python tools/regen_docs_pictures.py {name}"
    pages = "".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    assert f"{name}.png" in pages, f"no docs page shows {name}.png"


def _legends_clear_of_data(fig):
    fig.canvas.draw()
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and ax.axison:
            assert not leg.get_window_extent().overlaps(ax.get_window_extent()), f"legend over the data of {ax.get_title()!r}"


def test_timeline_shows_the_whole_steady_state_with_a_labelled_axis(timeline_report):
    from tilegen.harness.plot import GANTT_ROWS, timeline_figure

    fig, data = timeline_figure(timeline_report)
    progs = [p for p in timeline_report["programs"] if p.get("_timeline") is not None]
    assert len(fig.axes) == len(progs) >= 1
    for ax, prog in zip(fig.axes, progs):
        tl = prog["_timeline"]
        block = max(tl.kernels, key=lambda k: k.time_s).block
        us = 1e6 / tl.clock_hz
        # the steady state from the schedule's items: every drawn pipe but S started, until the first is done
        rows = {(c, p) for c, ps in GANTT_ROWS for p in ps if p != "S"}
        spans = {}
        for it in block.items:
            if it.work and it.kind != "issue" and (it.core, it.pipe) in rows:
                a, b = spans.get((it.core, it.pipe), (it.start, it.end))
                spans[(it.core, it.pipe)] = (min(a, it.start), max(b, it.end))
        t0, t1 = max(a for a, _ in spans.values()) * us, min(b for _, b in spans.values()) * us
        assert t0 < t1
        lo, hi = ax.get_xlim()
        # the drawn numbers keep 6 significant digits (timeline_data): within 5e-6 of the schedule's
        assert lo <= t0 + 1e-9 and hi >= t1 - 1e-9 and hi >= block.end * us * (1 - 5e-6), (lo, hi, t0, t1)
        assert f"{t0:.2f}" in ax.get_title() and f"{t1:.2f}" in ax.get_title()
        assert "µs" in ax.get_xlabel()
        # every drawn instruction falls in a drawn bar of its row (the bar: while it holds its pipe)
        names = [t.get_text() for t in ax.get_yticklabels()]
        for it in block.items[:: max(len(block.items) // 200, 1)]:
            if it.work and it.kind != "issue" and f"{it.core} {it.pipe}" in names:
                bars = data["programs"][fig.axes.index(ax)]["rows"][f"{it.core} {it.pipe}"]
                assert any(a <= it.start * us * (1 + 1e-5) + 1e-6 and it.busy_end * us <= b * (1 + 1e-5) + 1e-6 for a, b in bars)
    _legends_clear_of_data(fig)
    assert any(ax.get_legend() is not None for ax in fig.axes)


def test_inspect_legends_are_clear_of_the_data():
    from tilegen.harness.plot import inspect_figure

    fig, _ = inspect_figure(regen._report("inspect-tiny-window-h200"))
    _legends_clear_of_data(fig)
    assert sum(ax.get_legend() is not None for ax in fig.axes) >= 3
