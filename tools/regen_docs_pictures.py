"""Redraw the pictures of the documentation and write the sidecar of each: ``python tools/regen_docs_pictures.py``.

Each picture ``docs/NAME.png`` has ``docs/NAME.json``: the numbers the figure draws
(:func:`tilegen.harness.plot.inspect_data` or :func:`tilegen.harness.plot.timeline_data`) and the
SHA-256 of the PNG written with them. ``tests/test_docs_pictures.py`` recomputes the numbers from
the current code and compares them with the sidecar (and the PNG with its hash), so a change that
alters a picture fails until this tool is run again. ``--check`` only compares (exit 1 on a
difference, naming the picture).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# picture name -> the tilegen command that draws it (as docs/guide/inspect.md shows it, less the file)
PICTURES = {
    "inspect-llama3-8b-ascend910b2": ["inspect", "--spec", "llama3-8b", "--target", "ascend910b2"],
    "inspect-tiny-window-h200": ["inspect", "--spec", "tiny", "--window", "64,0", "--seq", "512", "--target", "h200"],
    "timeline-tiny-ascend910b2": ["inspect", "--spec", "tiny", "--target", "ascend910b2", "--simulate"],
}


def _kind(name: str) -> str:
    return "timeline" if "--simulate" in PICTURES[name] else "plot"


def _report(name: str) -> dict:
    """The report the command of picture ``name`` draws, as ``tilegen inspect`` makes it."""
    from tilegen.cli import (
        INSPECT_PROGRAMS,
        _inspect_timeline,
        build_parser,
        resolve_spec,
    )
    from tilegen.harness.report import inspect_report

    args = build_parser().parse_args(PICTURES[name])
    spec = resolve_spec(args)
    programs = INSPECT_PROGRAMS[args.program]
    if _kind(name) == "plot":
        return inspect_report(spec, args.target, dq_strategy=args.dq_strategy, tile_sizes=args.tiles, programs=programs, dkv_strategy=args.dkv_strategy)
    return _inspect_timeline(spec, args)


def data(name: str, report: dict | None = None) -> dict:
    """The numbers picture ``name`` draws, from the current code (no drawing)."""
    from tilegen.harness.plot import inspect_data, timeline_data

    report = report if report is not None else _report(name)
    return json.loads(json.dumps(inspect_data(report) if _kind(name) == "plot" else timeline_data(report)))


def regenerate(name: str) -> None:
    """Draw ``docs/NAME.png`` and write ``docs/NAME.json``."""
    from tilegen.harness.plot import plot_inspect, plot_timeline

    report = _report(name)
    png = DOCS / f"{name}.png"
    (plot_inspect if _kind(name) == "plot" else plot_timeline)(report, str(png))
    sidecar = {"picture": png.name, "png_sha256": hashlib.sha256(png.read_bytes()).hexdigest(), "data": data(name, report)}
    (DOCS / f"{name}.json").write_text(json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {png.relative_to(ROOT)} and its sidecar")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 naming a stale picture")
    ap.add_argument("names", nargs="*", choices=[[], *PICTURES], help="pictures (default: all)")
    args = ap.parse_args(argv)
    stale = []
    for name in args.names or PICTURES:
        if args.check:
            committed = json.loads((DOCS / f"{name}.json").read_text())
            if committed["data"] != data(name):
                stale.append(name)
        else:
            regenerate(name)
    for name in stale:
        print(f"stale: docs/{name}.png (run python tools/regen_docs_pictures.py {name})", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
