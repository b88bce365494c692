"""The text of ``tilegen inspect`` (and ``--compare``) from the plain-data reports of
:mod:`tilegen.harness.report`: light on purpose (no compiler import), so that a report served from the
compile cache is formatted without loading the passes. Every line at most :data:`WIDTH` columns."""

from __future__ import annotations

from tilegen.core import dtypes
from tilegen.harness.memory import format_bytes, format_seconds

WIDTH = 100  # the columns of inspect's text (wrap_lines)


def wrap_lines(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` columns broken at spaces (a word longer than a
    line is cut), its continuation lines indented four columns more than the line itself; shorter lines,
    their inner runs of spaces (table columns) included, are kept as they are."""
    import textwrap

    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: min(len(line) - len(line.lstrip(" ")), width // 2)]
        out.extend(textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ", break_on_hyphens=False))
    return "\n".join(out)


def format_inspect(
    report: dict, *, candidates: int = 8, show_nest: bool = True, verbose: bool = True, simulated: dict | None = None, width: int = WIDTH
) -> str:
    """The text ``tilegen inspect`` prints, every line at most ``width`` columns (:func:`wrap_lines`):
    the target, then a summary per program (:func:`format_summary`: tiles, on-chip use against
    capacity, predicted time, the mods' tile pairs), then with ``verbose`` the details: the tile
    candidates (``candidates`` of each kind), footprints with the buffers live at the peak, the
    prediction per kernel, the traffic by tensor and, with ``show_nest``, the loop nest with
    placements. ``simulated``: {program label's first word ("forward", "backward"): (seconds, (fast, slow
    seconds))} from
    ``inspect --simulate``, shown in the summary."""
    tgt = report["target"]
    lines = [f"target {tgt['name']}: {tgt['description']}"] if tgt else []
    lines.extend(format_summary(report, simulated))
    if verbose:
        lines.extend(_format_details(report, candidates=candidates, show_nest=show_nest))
    else:
        lines.append("")
        lines.append("details (tile candidates, the buffers behind each footprint, the prediction per kernel, traffic by tensor, "
                     "the loop nest): --verbose; all of it as data: --json")
    return wrap_lines("\n".join(lines) + "\n", width)


def format_summary(report: dict, simulated: dict | None = None) -> list[str]:
    """The summary lines of :func:`format_inspect`: per program its kernels and tile sizes (and where
    they come from), the predicted time (the roofline of :func:`tilegen.models.cost.predict`; the GPU
    cost model's where the target has one; the simulated time where ``simulated`` gives it), HBM bytes,
    the fullest use of each on-chip level against its usable capacity per core, the mods' tile pairs
    and notes on 64-bit offsets. Times are labelled predicted or simulated: none is measured."""
    tgt = report["target"]
    head = "summary (times predicted by tilegen's cost models, not measured" + ("; simulated: the twin's trace scheduled per pipe" if simulated else "") + "):"
    lines = ["", head if tgt else "summary (no --target: default tile sizes, no footprint or time):"]
    for prog in report["programs"]:
        if "error" in prog:
            lines.append(f"  {prog['label']}: no schedule: {prog['error']}")
            continue
        tiles = prog["tiles"]
        sched = prog.get("schedule")
        emitted = prog.get("emitted")
        fastest = f"the fastest predicted of {sum(c['feasible'] for c in sched['candidates'])} feasible" if sched else ""
        if not sched:
            why = "defaults; give --target to choose them for hardware"
        elif emitted:  # a program that records its schedule (a GPU target's rows)
            source = emitted["tiles_source"]
            why = "forced by --tiles" if source == "given by the caller" else fastest if source.startswith("the cost model") else f"from {source}"
        else:
            why = "forced by --tiles" if sched["forced"] else fastest
        lines.append(f"  {prog['label']}: kernels {', '.join(prog['kernels'])}; tiles Br={tiles['Br']}, Bc={tiles['Bc']} ({why})")
        if sched:
            pred = prog["prediction"]
            text = f"predicted {format_seconds(pred['time_s'])} (roofline, {pred['utilization']:.1%} of matmul peak)"
            model = prog.get("model")
            if model:
                text += f", {format_seconds(model['time_s'])} (GPU cost model)"
            first = prog["label"].split()[0]
            if simulated and first in simulated:
                sim, (lo, hi) = simulated[first]
                text += f"; simulated {format_seconds(sim)} ({format_seconds(lo)} .. {format_seconds(hi)} over the cost table's ranges; twin trace)"
            lines.append(f"    time: {text}; HBM {format_bytes(pred['hbm_bytes'])}")
            fullest: dict[str, dict] = {}
            for fp in prog["footprints"]:
                if fp["level"] not in fullest or fp["bytes"] / max(fp["usable"], 1) > fullest[fp["level"]]["bytes"] / max(fullest[fp["level"]]["usable"], 1):
                    fullest[fp["level"]] = fp
            use = ", ".join(f"{lv} {_of(fullest[lv]['bytes'], fullest[lv]['usable'])}" for lv in tgt["levels"] if lv in fullest)
            lines.append(f"    on chip per core, fullest kernel / usable: {use}")
        else:
            work = ", ".join(f"{k} {v:.3e}" for k, v in sorted(prog["flops"].items()))
            lines.append(f"    work: {work}; HBM {format_bytes(sum(prog['hbm_bytes_by_tensor'].values()))}")
        lines.extend("    " + line for line in _format_blocks(prog))
        for w in prog.get("offsets_past_int32", []):
            lines.append(
                f"    note: {w['tensor']} has {w['elements']:,} elements, past 2^31: element offsets need 64 bits "
                "(the generated code computes every offset in int64)"
            )
    return lines


def _of(used: int, usable: int) -> str:
    """``183.00/184.00 KiB (99%)``: bytes used of a capacity (each with its unit when they differ)."""
    a, b = format_bytes(used), format_bytes(usable)
    pair = f"{a.split()[0]}/{b}" if a.split()[1] == b.split()[1] else f"{a}/{b}"
    return f"{pair} ({used / max(usable, 1):.0%})"


def _format_details(report: dict, *, candidates: int, show_nest: bool) -> list[str]:
    """The details of :func:`format_inspect` (``--verbose``), per program."""
    lines = []
    tgt = report["target"]
    words = report["backend"]
    for prog in report["programs"]:
        lines.append("")
        if "error" in prog:
            lines.extend(_format_no_fit(prog, list(tgt["levels"]) if tgt else []))
            continue
        lines.append(f"== {prog['label']}: kernels {', '.join(prog['kernels'])}")
        sched = prog.get("schedule")
        tiles = prog["tiles"]
        if sched:
            cands = sched["candidates"]
            feasible = sorted((c for c in cands if c["feasible"]), key=lambda c: c["predicted_s"])
            rejected = [c for c in cands if not c["feasible"]]
            how = "forced by the user" if sched["forced"] else (
                f"the fastest predicted of {len(feasible)} feasible candidates ({len(rejected)} rejected)"
            )
            rows = prog.get("triton_rows")
            emitted = prog.get("emitted")
            if emitted:
                how = "forced by the user" if emitted["tiles_source"] == "given by the caller" else f"from {emitted['tiles_source']}"
                if emitted["tiles_source"].startswith("the cost model"):
                    how = f"the cost model: the fastest predicted of {len(feasible)} feasible candidates ({len(rejected)} rejected)"
            origin = prog.get("origin")
            lines.append(f"tile sizes: Br={tiles['Br']}, Bc={tiles['Bc']}: {how}" + (f" [{origin['tiles']}]" if origin else ""))
            for line in (rows or {}).get("skipped", []):
                lines.append(f"  {line}")
            if emitted and "group_split" in emitted:
                heavy = ", heavy first" if emitted["heavy_first"] else ""
                lines.append(f"  group split: {emitted['group_split']}{heavy} ({emitted['group_split_source']})")
            if prog.get("dq_direct"):
                dd = prog["dq_direct"]
                lines.append(f"  direct-dq: {'D and dQ in main, no pre or post' if dd['folded'] else 'not applied: ' + dd['why']}")
            if emitted and "heavy_first_source" in emitted:
                lines.append(f"  heavy first: {'yes' if emitted['heavy_first'] else 'no'} ({emitted['heavy_first_source']})")
            for name, launch in (emitted or {}).get("launch", {}).items():
                tag = f" [{origin['launch'][name]}]" if origin else ""
                lines.append(f"  launch {name}: num_warps={launch['num_warps']}, num_stages={launch['num_stages']} ({launch['source']}){tag}")
            model = prog.get("model")
            if model:
                per = ", ".join(f"{k['name']} {format_seconds(k['time_s'])}" for k in model["kernels"])
                lines.append(f"  {model['label']}: {format_seconds(model['time_s'])}, {model['tflops']:.0f} TFLOP/s of matmul "
                             f"for this schedule (GPU cost model, tilegen.models.cost.predict_gpu; {per}; launches included)")
            levels = list(tgt["levels"])
            scored = "model" if model else "roofline"
            if model:
                lines.append("  (the tile search: each candidate scored at [triton.default] num_warps)")
            lines.append("  " + f"{'Br':>4} {'Bc':>4} {scored:>11}  " + "  ".join(f"{lv:>9}" for lv in levels))
            for c in feasible[:candidates]:
                mark = "*" if (c["Br"], c["Bc"]) == (tiles["Br"], tiles["Bc"]) else " "
                peaks = "  ".join(f"{format_bytes(c['peak_bytes'].get(lv, 0)):>9}" for lv in levels)
                lines.append(f"{mark} {c['Br']:>4} {c['Bc']:>4} {format_seconds(c['predicted_s']):>11}  {peaks}")
            if len(feasible) > candidates:
                lines.append(f"  ... {len(feasible) - candidates} more feasible")
            for c in rejected[:candidates]:
                over = ", ".join(f"{lv} over by {format_bytes(v)}" for lv, v in c["overflow_bytes"].items())
                lines.append(f"  {c['Br']:>4} {c['Bc']:>4} rejected: {over}")
            if len(rejected) > candidates:
                lines.append(f"  ... {len(rejected) - candidates} more rejected")
            lines.append("footprint vs usable capacity per core (bytes: the allocation plan, first fit in order of first use, "
                         "gaps included; listed: the buffers live at the peak; --json gives the expressions):")
            for fp in prog["footprints"]:
                share = fp["bytes"] / fp["usable"] if fp["usable"] else 0
                lines.append(
                    f"  {fp['kernel']:<5} {fp['level']:<4} {format_bytes(fp['bytes']):>11} of {format_bytes(fp['usable']):>11} ({share:5.1%})  "
                    + " + ".join(fp["peak_buffers"])
                    + (" (every extent padded to a power of two)" if fp.get("pow2") else "")
                )
            pred = prog["prediction"]
            units = words["units"]
            lines.append(f"predicted on {pred['target']} (roofline per kernel: the slowest of {units}, HBM, L2):")
            kw = max([6] + [len(k["name"]) for k in pred["kernels"]])
            lines.append(
                f"  {'kernel':<{kw}}  {'programs':>8}  {'busy':>4}  {'matmul FLOP':>11} {'vector op':>9} {'exp op':>9} {'HBM':>10} {'L2':>10} {'time':>9}  bound"
            )
            for k in pred["kernels"]:
                f = k["flops"]
                lines.append(
                    f"  {k['name']:<{kw}}  {k['programs']:>8}  {k['busy_fraction']:>4.2f}  {f.get('matmul', 0):>11.3e} {f.get('vector', 0):>9.3e} "
                    f"{f.get('exp', 0):>9.3e} {format_bytes(k['bytes']['hbm']):>10} {format_bytes(k['bytes']['l2']):>10} {format_seconds(k['time_s']):>9}  {k['bound']}"
                )
            lines.append(
                f"  roofline total {format_seconds(pred['time_s'])}; matmul {pred['matmul_flops']:.3e} FLOP at {pred['utilization']:.1%} of peak; "
                f"HBM {format_bytes(pred['hbm_bytes'])}, L2 {format_bytes(pred['l2_bytes'])}"
            )
        else:
            lines.append(f"tile sizes: Br={tiles['Br']}, Bc={tiles['Bc']} (defaults; give --target to choose them for hardware)")
            flops = prog["flops"]
            lines.append("work: " + ", ".join(f"{k} {v:.3e}" for k, v in sorted(flops.items())))
        lines.append(words["traffic"] + ", ".join(f"{n} {format_bytes(v)}" for n, v in prog["hbm_bytes_by_tensor"].items()))
        if show_nest:
            lines.append("loop nest with placements:")
            lines.append(prog["loop_nest"].rstrip())
    return lines


def _format_blocks(prog: dict) -> list[str]:
    """The lines on a program's mods and block classes (none without mods)."""
    if "mods" not in prog:
        return []
    m = prog["mods"]
    lines = []
    if "score_mod" in m:
        lines.append(f"score_mod: {m['score_mod']}   (d score'/d score = {m['dscore']})")
    if "mask_mod" in m:
        lines.append(f"mask_mod: {m['mask_mod']}   (and-ed with the window)")
    blk = prog.get("block_classes")
    if blk is None:
        lines.append("tile pairs: no mask mod: the window's loop bounds decide which tiles run")
        return lines
    shape = "x".join(map(str, blk["table_shape"]))
    if blk["empty"] is None:
        lines.append(f"tile pairs ({blk['total']:,} in the block table [{shape}]): classes {blk['source']}: a classify pre-kernel "
                     "computes them; counts and prediction assume every tile in the window's bounds is visited and partial")
        return lines
    total = max(blk["total"], 1)
    lines.append(
        f"tile pairs ({blk['source']}; {blk['per']}, table [{shape}]): {blk['empty']:,} empty ({blk['empty'] / total:.1%}, skipped), "
        f"{blk['partial']:,} partial (masked), {blk['full']:,} full (mask skipped) of {blk['total']:,}"
    )
    return lines


def _format_no_fit(prog: dict, levels: list[str]) -> list[str]:
    """A program without a schedule: the reason, then every rejected candidate's peak per level, or
    ``+N`` where it overflows the level by N bytes (its peak is the usable capacity + N)."""
    lines = [f"== {prog['label']}: no schedule", f"  {prog['error']}",
             "  rejected candidates (peak bytes per core; +N: over the usable capacity by N):"]
    lines.append("  " + f"{'Br':>4} {'Bc':>4}  " + " ".join(f"{lv:>12}" for lv in levels))
    for c in prog["rejected"]:
        cells = []
        for lv in levels:
            over = c["overflow_bytes"].get(lv)
            cells.append(f"{'+' + format_bytes(over) if over else format_bytes(c['peak_bytes'].get(lv, 0)):>12}")
        lines.append("  " + f"{c['Br']:>4} {c['Bc']:>4}  " + " ".join(cells))
    return lines


def format_tradeoff(r: dict) -> str:
    """The store-P-versus-recompute report as text, with the checks of the usual argument."""
    ph = r["per_head"]
    lines = [
        (f"store P versus recompute: {r['spec']['name']} (Sq={r['spec']['seq_q']}, Sk={r['spec']['seq_k']}, "
        f"D={r['spec']['head_dim_qk']}, {r['spec']['dtype']}, {r['heads_per_layer']} heads x {r['layers']} layers) "
        f"on {r['target']} ({r['peak_tflops']:.0f} TFLOP/s, {r['hbm_tb_s']:.2f} TB/s)"),
        "",
        "the per-head argument:",
        f"  P of one head            {format_bytes(ph['P_bytes'])}  (Sq x Sk x {dtypes.itemsize(r['spec']['dtype'])} B)",
        f"  reading it once          {format_seconds(ph['read_P_once_s'])}  at {r['hbm_tb_s']:.2f} TB/s",
        f"  recomputing S = QK^T     {format_seconds(ph['recompute_S_on_cube_s'])}  (2 Sq Sk D FLOP at {r['peak_tflops']:.0f} TFLOP/s)",
        "",
        "where that argument is incomplete (and the report disagrees with it):",
        "  - storing P is not one read: the backward writes P and reads it back, and does the same for dS;",
        "    P is kept in fp32 (dS = P o (dP - D) must not read a rounded P), dS in the input dtype:",
        f"    Sq x Sk x 2 x (4 + {dtypes.itemsize(r['spec']['dtype'])}) B = {format_bytes(ph['store_P_traffic_bytes'])} per head, {format_seconds(ph['store_P_traffic_s'])} of HBM time.",
        "  - recomputing P is not only QK^T on the cube: P = exp(S - L) costs Sq x Sk exponentials on the",
        f"    vector unit, {format_seconds(ph['recompute_exp_on_vector_s'])} per head at the target's exp rate"
        + (" (an estimate)" if r["exp_rate_estimate"] else "")
        + "; the cube and vector units overlap, so the slower of the two sets the pace.",
        "  - per head in isolation, neither number is the cost: the full programs below count every byte",
        "    and FLOP of both backwards and divide the layer's predicted time by its heads.",
        "",
        "HBM held = what the forward keeps for the backward (P, or only L) for every layer, plus the",
        "backward's own workspaces (dS, D, the fp32 dQ accumulator) for the layer being processed.",
        "",
        f"{'':<20}{'':<19}{'HBM held':>12}{'HBM moved':>12}{'predicted':>12}",
    ]
    for form, scopes in r["forms"].items():
        for scope, v in scopes.items():
            lines.append(f"{form:<20}{scope:<19}{format_bytes(v['held_bytes']):>12}{format_bytes(v['moved_bytes']):>12}{format_seconds(v['time_s']):>12}")
    model = f"model ({r['layers']} layers)"
    sp, rc = r["forms"]["store P (unfused)"], r["forms"]["recompute (fused)"]
    lines.append("")
    lines.append(
        f"for the model, recompute holds {sp[model]['held_bytes'] / max(rc[model]['held_bytes'], 1):.0f}x less HBM "
        f"({format_bytes(sp[model]['held_bytes'])} vs {format_bytes(rc[model]['held_bytes'])}), moves "
        f"{sp[model]['moved_bytes'] / max(rc[model]['moved_bytes'], 1):.1f}x fewer bytes and is predicted "
        f"{sp[model]['time_s'] / max(rc[model]['time_s'], 1e-30):.2f}x faster than storing P."
    )
    return "\n".join(lines) + "\n"
