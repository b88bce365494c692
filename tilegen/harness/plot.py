"""Pictures of a schedule: ``tilegen inspect --plot FILE`` (PNG or SVG, by the file's extension).

One figure, drawn from the numbers :func:`tilegen.harness.report.inspect_report` already computes (no count is
made here twice):

- per program (forward, backward), the (Q tile, K/V tile) pairs by class (:func:`tile_classes`):
  *visited* (every query-key pair of the tile visible: no mask applied), *masked* (some visible: the
  mask is applied to the tile) or *skipped* (none visible: the loop bounds leave it out);
- the footprint of each on-chip level per kernel against its usable capacity (the report's
  ``footprints``, bytes);
- the HBM (Ascend: GM) traffic per tensor (the report's ``hbm_bytes_by_tensor``, bytes read + written).

The classes follow DESIGN §3's visibility rule: key c is visible to query r iff
r + off − left ≤ c ≤ r + off + right (−1 unbounded; off = Sk − Sq bottom-right, 0 top-left). Over the
real elements of a tile (rows r0..r1, columns c0..c1, clipped at Sq and Sk: tail padding is not
counted), c − r takes every value in [c0 − r1, c1 − r0]; the tile has a visible pair iff that range
meets [off − left, off + right], and all pairs are visible iff the range lies inside it. Exact counts
per class use one binary search per Q tile over the K/V tile boundaries (time O(nq log nk), memory
O(nq + nk)); the drawn grid has at most ``max_cells`` × ``max_cells`` cells, each a block of tiles
classified by the same rule over the block's elements, so a cell is *visited* or *skipped* only when
every tile in it is, and a mixed cell is drawn as *masked*. A 2^23-token spec is drawn without the tile
grid ever being allocated.

With a mask mod, :func:`plot_inspect` draws the block classes of one (b, h) instead (when known before
the run), and :func:`plot_tiles_map` (``tilegen inspect --tiles-map FILE``) draws them alone, one
panel per program, in tile indices (Q tile, K/V tile), as :func:`tilegen.models.analysis.block_classes`
computes them.

matplotlib is the ``plot`` extra (``pip install tilegen[plot]``); it is imported only when drawing, on
the Agg backend.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilegen.core.errors import SpecError, TilegenError
from tilegen.core.fileio import check_output_file, write_atomic
from tilegen.core.spec import visible_band

SKIPPED, MASKED, VISITED = 0, 1, 2
CLASS_NAMES = {VISITED: "visited", MASKED: "masked", SKIPPED: "skipped"}
MAX_CELLS = 512
FORMATS = (".png", ".svg")


@dataclass(frozen=True)
class TileGrid:
    """The tile classes of one program, for drawing.

    Attributes:
        cells: uint8 [len(row_edges) − 1, len(col_edges) − 1], SKIPPED / MASKED / VISITED per cell.
        row_edges, col_edges: int64 tile indices bounding the cells (cell a covers Q tiles
            row_edges[a] .. row_edges[a+1] − 1); one tile per cell when the grid is not downsampled.
        counts: exact number of tiles per class name ("visited", "masked", "skipped").
        q_tiles, kv_tiles: ceil(Sq / Br), ceil(Sk / Bc).
    """

    cells: np.ndarray
    row_edges: np.ndarray
    col_edges: np.ndarray
    counts: dict[str, int]
    q_tiles: int
    kv_tiles: int

    @property
    def downsampled(self) -> bool:
        return self.cells.shape != (self.q_tiles, self.kv_tiles)


def _edges(n: int, cells: int) -> np.ndarray:
    k = min(n, cells)
    return (np.arange(k + 1, dtype=np.int64) * n) // k


def tile_classes(seq_q: int, seq_k: int, br: int, bc: int, window=(-1, -1), alignment: str = "bottom_right", max_cells: int = MAX_CELLS) -> TileGrid:
    """The classes of the (Q tile, K/V tile) pairs of Br × Bc tiles; see the module docstring.

    Args:
        seq_q, seq_k: Sq, Sk (tokens, ≥ 1); br, bc: tile sizes (≥ 1); window: (left, right), −1 unbounded;
        alignment: "bottom_right" or "top_left"; max_cells: the most cells drawn per side (≥ 1).
    """
    dl, dh = visible_band(seq_q, seq_k, window, alignment)
    nq, nk = -(-seq_q // br), -(-seq_k // bc)
    # exact counts: per Q tile, the K/V tiles with a visible pair, and those with all pairs visible
    i = np.arange(nq, dtype=np.int64)
    r0, r1 = i * br, np.minimum((i + 1) * br, seq_q) - 1
    j = np.arange(nk, dtype=np.int64)
    c0, c1 = j * bc, np.minimum((j + 1) * bc, seq_k) - 1  # both nondecreasing in j
    anyv = np.maximum(np.searchsorted(c0, dh + r1, "right") - np.searchsorted(c1, dl + r0, "left"), 0)
    allv = np.maximum(np.searchsorted(c1, dh + r0, "right") - np.searchsorted(c0, dl + r1, "left"), 0)
    n_any, n_all = int(anyv.sum()), int(allv.sum())
    counts = {"visited": n_all, "masked": n_any - n_all, "skipped": nq * nk - n_any}
    # the drawn cells: blocks of tiles, classified over the block's elements
    re, ce = _edges(nq, max_cells), _edges(nk, max_cells)
    rmin = (re[:-1] * br)[:, None]
    rmax = (np.minimum(re[1:] * br, seq_q) - 1)[:, None]
    cmin = (ce[:-1] * bc)[None, :]
    cmax = (np.minimum(ce[1:] * bc, seq_k) - 1)[None, :]
    lo, hi = cmin - rmax, cmax - rmin
    cells = np.where((lo >= dl) & (hi <= dh), VISITED, np.where((hi >= dl) & (lo <= dh), MASKED, SKIPPED)).astype(np.uint8)
    return TileGrid(cells, re, ce, counts, nq, nk)


def _window(spec: dict) -> tuple[int, int]:
    if "window" in spec:
        return tuple(spec["window"])
    return {"none": (-1, -1), "causal": (-1, 0)}[spec["mask"]]


def _scaled(values, unit_of=None) -> tuple[list[float], str]:
    """Values in the binary unit (B, KiB, MiB, GiB, TiB) that suits the largest."""
    top = max([abs(v) for v in values] + [1])
    for power, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if top < 1024 ** (power + 1) or unit == "TiB":
            return [v / 1024**power for v in values], unit
    raise AssertionError


def _share(part: int, whole: int) -> str:
    """``part / whole`` as a percentage, with two significant digits below 0.1 % (never "0.0%" for a
    nonzero part)."""
    x = 100 * part / whole
    return f"{x:.1f}%" if x == 0 or x >= 0.1 else f"{x:.2g}%"


COLORS = {VISITED: "#3b7dd8", MASKED: "#f2a93b", SKIPPED: "#e6e6e6"}


def _draw_tiles(ax, grid: TileGrid, spec: dict, tiles: dict, label: str) -> None:
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    sq, sk = spec["seq_q"], spec["seq_k"]
    cmap = ListedColormap([COLORS[SKIPPED], COLORS[MASKED], COLORS[VISITED]])
    norm = BoundaryNorm([-0.5, 0.5, 1.5, 2.5], 3)
    x = np.minimum(grid.col_edges * tiles["Bc"], sk)
    y = np.minimum(grid.row_edges * tiles["Br"], sq)
    few = max(grid.cells.shape) <= 40
    ax.pcolormesh(x, y, grid.cells, cmap=cmap, norm=norm, edgecolors="white" if few else "face", linewidth=0.5 if few else 0)
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.yaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlim(0, sk)
    ax.set_ylim(sq, 0)  # query 0 at the top, as the score matrix is written
    ax.set_aspect("equal" if 0.25 <= sq / sk <= 4 else "auto")
    ax.set_xlabel(f"key position (K/V tiles of Bc = {tiles['Bc']})")
    ax.set_ylabel(f"query position (Q tiles of Br = {tiles['Br']})")
    title = f"{label}\n{grid.q_tiles:,} x {grid.kv_tiles:,} tile pairs (Br x Bc = {tiles['Br']} x {tiles['Bc']})"
    if grid.downsampled:
        title += f", drawn as {grid.cells.shape[0]} x {grid.cells.shape[1]} cells"
    ax.set_title(title, fontsize=10)
    total = max(grid.q_tiles * grid.kv_tiles, 1)
    masked = "masked: some pairs visible" + (", or a cell of mixed tiles" if grid.downsampled else "")
    handles = [
        Patch(facecolor=COLORS[VISITED], label=f"visited: every pair visible: {grid.counts['visited']:,} ({_share(grid.counts['visited'], total)})"),
        Patch(facecolor=COLORS[MASKED], label=f"{masked}: {grid.counts['masked']:,} ({_share(grid.counts['masked'], total)})"),
        Patch(facecolor=COLORS[SKIPPED], edgecolor="#999999", label=f"skipped: no pair visible: {grid.counts['skipped']:,} ({_share(grid.counts['skipped'], total)})"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, frameon=False)


def _footprint_rows(report: dict) -> list[tuple[str, int, int]]:
    """(label, bytes at the peak, usable bytes) per kernel and on-chip level, as drawn."""
    return [(f"{prog['label'].split(' ')[0]} {fp['kernel']} {fp['level']}", fp["bytes"], fp["usable"]) for prog in report["programs"] for fp in prog.get("footprints", [])]


def _traffic_names(report: dict) -> list[str]:
    names: list[str] = []
    for prog in report["programs"]:
        names += [n for n in prog["hbm_bytes_by_tensor"] if n not in names]
    return names


def _draw_footprints(ax, report: dict) -> None:
    rows = _footprint_rows(report)
    if not rows:
        ax.text(0.5, 0.5, "no target: no footprint against capacity", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    rows = rows[::-1]  # first at the top
    labels = [r[0] for r in rows]
    used, unit = _scaled([r[1] for r in rows] + [r[2] for r in rows])
    n = len(rows)
    y = np.arange(n)
    ax.barh(y, used[n:], color="none", edgecolor="#555555", hatch="//", label="usable capacity")
    ax.barh(y, used[:n], color="#3b7dd8", label="footprint at the peak")
    for k, (_, b, cap) in enumerate(rows):
        ax.text(used[k], k, f" {b / cap:.0%}" if cap else "", va="center", fontsize=7, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel(f"{unit} {report['backend']['footprint_per']}")
    ax.set_title("on-chip footprint per kernel and level vs usable capacity", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2, frameon=False)  # below the axes: never over a bar


def _draw_traffic(ax, report: dict, gm_handoff: bool) -> None:
    progs = report["programs"]
    names = _traffic_names(report)[::-1]
    values = [prog["hbm_bytes_by_tensor"].get(n, 0) for prog in progs for n in names]
    scaled, unit = _scaled(values)
    height = 0.8 / max(len(progs), 1)
    y = np.arange(len(names))
    for k, prog in enumerate(progs):
        part = scaled[k * len(names) : (k + 1) * len(names)]
        ax.barh(y + (len(progs) - 1 - 2 * k) * height / 2, part, height=height, label=prog["label"].split(" (")[0], color="#3b7dd8" if prog["label"].startswith("forward") else "#d8603b")
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlabel(f"{unit} read + written")
    where = "GM (ws_*: per-core hand-off tiles, L2-resident)" if gm_handoff else "HBM"
    ax.set_title(f"{where} traffic per tensor", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2, frameon=False)  # below the axes: never over a bar


def check_path(path: str, flag: str = "--plot") -> Path:
    """The output path, if its extension is one matplotlib is asked to write here and a file can be
    written there (:func:`tilegen.fileio.check_output_file`; missing folders are made when the picture
    is written): checked before the report is made.

    Raises:
        SpecError: another extension, a path under a file, a folder that cannot be written, a path that
            is a folder (names the option ``flag``, the value and what is accepted).
    """
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise SpecError(flag, path, "a file name ending in .png or .svg")
    return check_output_file(p, flag, make_folders=True)


def _save(fig, out: Path, flag: str) -> Path:
    """Render ``fig`` in memory, then write it to ``out`` atomically, its missing folders made: a write
    that fails is one line naming ``flag`` and the path, and leaves no partial picture and no folder."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=out.suffix.lower()[1:], dpi=110)
    finally:
        _matplotlib().close(fig)
    write_atomic(out, buf.getvalue(), flag, make_folders=True)
    return out


def require_matplotlib():
    """pyplot on the Agg backend. Raises TilegenError (one line) when matplotlib is not installed."""
    return _matplotlib()


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise TilegenError("--plot and --timeline need matplotlib, which is not installed: pip install 'tilegen[plot]'") from None
    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, smaller)
    import matplotlib.pyplot as plt

    return plt


def plot_inspect(report: dict, path: str, *, max_cells: int = MAX_CELLS, block_maps: list[dict] | None = None) -> Path:
    """Draw ``report`` (:func:`tilegen.harness.report.inspect_report`'s dict) to ``path`` (.png or .svg).

    ``block_maps`` (one per program, :func:`tilegen.harness.report.tiles_map_data`) replaces the window's tile
    classes by a mask mod's block classes of one (b, h): full drawn as visited, partial as masked,
    empty as skipped.

    Returns the path written. Raises SpecError for another extension or a path that cannot be written
    (one line; nothing left behind), TilegenError without matplotlib.
    """
    out = check_path(path)
    fig, _ = inspect_figure(report, max_cells=max_cells, block_maps=block_maps)
    return _save(fig, out, "--plot")


def _panels(report: dict, max_cells: int, block_maps: list[dict] | None) -> list[tuple[TileGrid, str]]:
    """(tile classes, title) per program, as :func:`plot_inspect` draws them."""
    spec = report["spec"]
    window = _window(spec)
    out = []
    for k, prog in enumerate(report["programs"]):
        tiles = prog["tiles"]
        if block_maps is not None:
            m = block_maps[k]
            cells, re, ce = downsample_classes(m["cells"], max_cells)
            counts = {"visited": m["counts"]["full"], "masked": m["counts"]["partial"], "skipped": m["counts"]["empty"]}
            out.append((TileGrid(cells, re, ce, counts, *m["cells"].shape), f"{prog['label']}, block classes of {m['label'].rsplit(' (', 1)[1][:-1]}"))
        else:
            out.append((tile_classes(spec["seq_q"], spec["seq_k"], tiles["Br"], tiles["Bc"], window, spec["alignment"], max_cells), prog["label"]))
    return out


def _suptitle(report: dict) -> str:
    spec, tgt = report["spec"], report["target"]
    window = _window(spec)
    mask = spec["mask"] if spec["mask"] != "window" else f"window {tuple(window)}"
    where = f"on {tgt['name']}" if tgt else "(no target: default tile sizes)"
    return (f"tilegen inspect: {spec['name']} {where}\nB={spec['batch']}, Hq={spec['heads_q']}, Hkv={spec['heads_kv']}, "
            f"Sq={spec['seq_q']}, Sk={spec['seq_k']}, Dqk={spec['head_dim_qk']}, Dv={spec['head_dim_v']}, {spec['dtype']}, "
            f"{mask} {spec['alignment']}")


def inspect_data(report: dict, *, max_cells: int = MAX_CELLS, block_maps: list[dict] | None = None) -> dict:
    """The numbers :func:`plot_inspect` draws, JSON-able, without drawing: the title; per program its
    panel title, Br, Bc, the exact tile counts per class, the drawn grid's shape and the SHA-256 of its
    cells (uint8, C order) and edges (int64); the footprint rows (label, bytes, usable bytes); the
    HBM/GM bytes per program and tensor."""
    import hashlib

    progs = []
    for (grid, label), prog in zip(_panels(report, max_cells, block_maps), report["programs"]):
        digest = hashlib.sha256()
        for a in (np.ascontiguousarray(grid.cells, np.uint8), np.asarray(grid.row_edges, np.int64), np.asarray(grid.col_edges, np.int64)):
            digest.update(a.tobytes())
        progs.append({"title": label, "Br": prog["tiles"]["Br"], "Bc": prog["tiles"]["Bc"], "counts": dict(grid.counts),
                      "cells_shape": list(grid.cells.shape), "cells_sha256": digest.hexdigest()})
    names = _traffic_names(report)
    return {
        "title": _suptitle(report),
        "programs": progs,
        "footprints": [list(r) for r in _footprint_rows(report)],
        "traffic_bytes": {p["label"]: {n: p["hbm_bytes_by_tensor"].get(n, 0) for n in names} for p in report["programs"]},
    }


def inspect_figure(report: dict, *, max_cells: int = MAX_CELLS, block_maps: list[dict] | None = None):
    """The matplotlib figure of :func:`plot_inspect` (not saved)."""
    plt = _matplotlib()
    spec = report["spec"]
    progs = report["programs"]
    fig = plt.figure(figsize=(12.4, 12.4), layout="constrained")
    grid = fig.add_gridspec(2, max(len(progs), 1), height_ratios=[1.25, 1])
    for k, ((classes, label), prog) in enumerate(zip(_panels(report, max_cells, block_maps), progs)):
        _draw_tiles(fig.add_subplot(grid[0, k]), classes, spec, prog["tiles"], label)
    bottom = grid[1, :].subgridspec(1, 2)
    _draw_footprints(fig.add_subplot(bottom[0, 0]), report)
    _draw_traffic(fig.add_subplot(bottom[0, 1]), report, report["backend"]["gm_handoff"])
    fig.suptitle(_suptitle(report), fontsize=12)
    return fig, None


# --- the block classes of a mask mod: ``tilegen inspect --tiles-map FILE`` ------------------------------

BLOCK_COLORS = {0: COLORS[SKIPPED], 1: COLORS[MASKED], 2: COLORS[VISITED]}  # empty, partial, full
BLOCK_LABELS = {0: "empty: skipped", 1: "partial: mask applied", 2: "full: no mask arithmetic"}


def downsample_classes(cells: np.ndarray, max_cells: int = MAX_CELLS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(drawn cells, row edges, column edges) of a [nQ, nK] class grid (0 empty, 1 partial, 2 full):
    at most ``max_cells`` per side, a cell of several tiles being empty (full) only when all its tiles
    are, else partial; edges are tile indices."""
    nq, nk = cells.shape
    re, ce = _edges(nq, max_cells), _edges(nk, max_cells)
    if len(re) - 1 == nq and len(ce) - 1 == nk:
        return cells, re, ce
    lo = np.minimum.reduceat(np.minimum.reduceat(cells, re[:-1], axis=0), ce[:-1], axis=1)
    hi = np.maximum.reduceat(np.maximum.reduceat(cells, re[:-1], axis=0), ce[:-1], axis=1)
    return np.where(lo == hi, lo, 1).astype(np.uint8), re, ce


def plot_tiles_map(maps: list[dict], path: str, title: str, *, flag: str = "--tiles-map", max_cells: int = MAX_CELLS) -> Path:
    """Draw the block classes of one (b, h) per program to ``path`` (.png or .svg), one panel each.

    ``maps``: dicts with ``label``, ``cells`` (uint8 [nQ, nK]: 0 empty, 1 partial, 2 full), ``Br``,
    ``Bc``, ``counts`` (by class name, over the drawn (b, h)) and ``source`` (where the classes come
    from). Axes: Q tile (rows, 0 at the top) and K/V tile (columns), in tile indices.

    Raises:
        SpecError: another extension, a path that cannot be written (one line; nothing left behind).
        TilegenError: matplotlib is not installed.
    """
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    out = check_path(path, flag)
    plt = _matplotlib()
    fig, axes = plt.subplots(1, len(maps), figsize=(6.2 * len(maps), 6.4), layout="constrained", squeeze=False)
    cmap = ListedColormap([BLOCK_COLORS[0], BLOCK_COLORS[1], BLOCK_COLORS[2]])
    norm = BoundaryNorm([-0.5, 0.5, 1.5, 2.5], 3)
    for ax, m in zip(axes[0], maps):
        cells, re, ce = downsample_classes(np.asarray(m["cells"], dtype=np.uint8), max_cells)
        few = max(cells.shape) <= 40
        ax.pcolormesh(ce, re, cells, cmap=cmap, norm=norm, edgecolors="white" if few else "face", linewidth=0.5 if few else 0)
        nq, nk = m["cells"].shape
        ax.set_xlim(0, nk)
        ax.set_ylim(nq, 0)  # Q tile 0 at the top, as the score matrix is written
        ax.set_aspect("equal" if 0.25 <= nq / max(nk, 1) <= 4 else "auto")
        ax.set_xlabel(f"K/V tile (Bc = {m['Bc']} keys each)")
        ax.set_ylabel(f"Q tile (Br = {m['Br']} queries each)")
        sub = f"{m['label']}\n{nq:,} x {nk:,} tile pairs, classes: {m['source']}"
        if cells.shape != (nq, nk):
            sub += f"\ndrawn as {cells.shape[0]} x {cells.shape[1]} cells (a cell of mixed tiles is partial)"
        ax.set_title(sub, fontsize=9)
        total = max(nq * nk, 1)
        names = {0: "empty", 1: "partial", 2: "full"}
        handles = [
            Patch(facecolor=BLOCK_COLORS[c], edgecolor="#999999", label=f"{BLOCK_LABELS[c]}: {m['counts'][names[c]]:,} ({_share(m['counts'][names[c]], total)})")
            for c in (2, 1, 0)
        ]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return _save(fig, out, flag)


# --- the timeline of one core (tilegen inspect --timeline FILE) ----------------------------------------

GANTT_ROWS = (("AIC", ("S", "MTE2", "MTE1", "M", "FIX")), ("AIV0", ("S", "MTE2", "V", "MTE3")))
GANTT_PIXELS = 2000  # bars of a row closer than (drawn window) / GANTT_PIXELS are drawn as one (below a pixel)
PIPE_COLORS = {"S": "#7f7f7f", "MTE1": "#9467bd", "MTE2": "#1f77b4", "MTE3": "#17becf", "M": "#d62728", "FIX": "#ff7f0e", "V": "#2ca02c"}


def _round(x: float) -> float:
    """``x`` to 6 significant digits: the numbers a sidecar records (:mod:`tools.regen_docs_pictures`)."""
    return float(f"{x:.6g}")


def steady_window(block, rows=None) -> tuple[float, float]:
    """The steady state of one AI Core's schedule ``block`` (:class:`tilegen.backends.ascendc.timeline.BlockSchedule`),
    cycles: from the end of the prologue, the time by which every pipe of ``rows`` (default
    :data:`GANTT_ROWS`) that does any work, S aside (its scalar accesses are sporadic), has started
    its first instruction, to the start of the epilogue, the time at which the first of them has
    finished its last. (0, ``block.end``) when the
    two cross (a run too short to have every pipe busy at once) or nothing was traced."""
    rows = [(c, p) for c, ps in (rows or GANTT_ROWS) for p in ps if p != "S"]
    first: dict = {}
    last: dict = {}
    for it in block.items if block is not None else ():
        key = (it.core, it.pipe)
        if it.work and it.kind != "issue" and key in rows:
            first[key] = min(first.get(key, it.start), it.start)
            last[key] = max(last.get(key, it.end), it.end)
    if not first:
        return 0.0, float(block.end if block is not None else 0.0)
    t0, t1 = max(first.values()), min(last.values())
    return (t0, t1) if t1 > t0 else (0.0, float(block.end))


def _merged(bars: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, end) bars sorted by start, those less than ``gap`` apart joined (what a pixel shows)."""
    out: list[list[float]] = []
    for a, b in sorted(bars):
        if out and a - out[-1][1] < gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def timeline_data(report: dict) -> dict:
    """The numbers :func:`plot_timeline` draws, JSON-able (µs, 6 significant digits): per program with a
    timeline, its label, the kernel drawn (the slowest), what its block is, the whole run (0, end),
    the steady state (:func:`steady_window`), the drawn window (the whole run; the steady state is
    marked in it) and per row (``core pipe``) the bars (start, end) of its work, bars closer than a
    pixel (window / :data:`GANTT_PIXELS`) joined."""
    out = {"target": report["target"], "programs": []}
    for prog in report["programs"]:
        tl = prog.get("_timeline")
        if tl is None:
            continue
        kernel = max(tl.kernels, key=lambda k: k.time_s)
        block = kernel.block
        what = ("the AI Core that ran every instance of one head as one stream (the run the streamed time is fitted through)"
                if "streamed:" in kernel.form else f"one AI Core ({kernel.form.split(':')[0]})")
        entry = {"label": prog["label"], "kernel": kernel.name, "block": what, "rows": {}}
        if block is None or not block.items:
            out["programs"].append(entry)
            continue
        us = 1e6 / tl.clock_hz
        t0, t1 = steady_window(block)
        entry["run_us"] = [0.0, _round(block.end * us)]
        entry["steady_us"] = [_round(t0 * us), _round(t1 * us)]
        entry["window_us"] = entry["run_us"]
        gap = block.end * us / GANTT_PIXELS
        for core, pipes in GANTT_ROWS:
            for pipe in pipes:
                bars = [(it.start * us, max(it.busy_end, it.start + 0.5) * us) for it in block.items
                        if it.work and it.kind != "issue" and it.core == core and it.pipe == pipe]
                entry["rows"][f"{core} {pipe}"] = [[_round(a), _round(b)] for a, b in _merged(bars, gap)]
        out["programs"].append(entry)
    return out


def timeline_figure(report: dict):
    """The matplotlib figure of :func:`plot_timeline` (not saved) and its :func:`timeline_data`."""
    plt = _matplotlib()
    data = timeline_data(report)
    progs = data["programs"]
    fig, axes = plt.subplots(len(progs), 1, figsize=(13, 3.4 * max(len(progs), 1)), layout="constrained", squeeze=False)
    for ax, prog in zip(axes[:, 0], progs):
        rows = list(prog["rows"]) or [f"{c} {p}" for c, ps in GANTT_ROWS for p in ps]
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row at the top
        if "window_us" not in prog:
            ax.set_title(f"{prog['label']}: no instructions traced", fontsize=10)
            continue
        for n, name in enumerate(rows):
            bars = [(a, b - a) for a, b in prog["rows"][name]]
            if bars:
                ax.broken_barh(bars, (n - 0.4, 0.8), facecolors=PIPE_COLORS.get(name.split()[1], "#333333"), linewidth=0)
        (w0, w1), (s0, s1) = prog["window_us"], prog["steady_us"]
        for a, b in ((w0, s0), (s1, w1)):
            if b > a:
                ax.axvspan(a, b, color="#000000", alpha=0.07, linewidth=0, label="prologue / epilogue (outside the steady state)")
        ax.set_xlim(w0, w1)
        ax.set_xlabel("time (µs, simulated)", fontsize=9)
        steady = (f"steady state {s0:.2f}–{s1:.2f} µs (every pipe but S started … first one done; unshaded)"
                  if (s0, s1) != (w0, w1) else "too short for a steady state: the whole run")
        ax.set_title(f"{prog['label']}: {prog['kernel']}, {prog['block']}\nwhole run 0–{w1:.2f} µs; {steady}", fontsize=10)
        handles, labels = ax.get_legend_handles_labels()
        if handles:  # outside the axes, right of them: never over a bar
            ax.legend(handles[:1], labels[:1], loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    fig.suptitle(f"simulated timeline of the emitted code on {data['target']} (twin trace, [timeline] cost table)", fontsize=11)
    return fig, data


def plot_timeline(report: dict, path: str) -> Path:
    """Draw one AI Core's pipes as a Gantt chart per program of ``report``
    (:func:`tilegen.harness.report.timeline_report`): the simulated block of the program's slowest kernel
    (of a streamed kernel, the core that ran one head's instances as one stream), one row per pipe of
    its AIC and of its first AIV (the second mirrors it), a bar per instruction's work (flag waits are
    the gaps; bars closer than a pixel drawn as one), the whole run on a time axis in µs with the
    steady state (:func:`steady_window`) unshaded and its bounds in the title; the legend sits right of
    the axes. The numbers drawn are :func:`timeline_data`'s.

    Returns the path written. Raises SpecError for another extension or a path that cannot be written
    (one line; nothing left behind), TilegenError without matplotlib.
    """
    out = check_path(path, "--timeline")
    fig, _ = timeline_figure(report)
    return _save(fig, out, "--timeline")
