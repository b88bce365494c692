"""The backward's group-split knobs on the GQA rows of the GPU table, beside SDPA flash, in one run.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=. python benchmarks/gpu_variants.py --budget 420 --out $OUT       # all rounds, as the budget allows
    PYTHONPATH=. python benchmarks/gpu_variants.py --rounds 1 2 3 --budget 420 --out $OUT        # causal rows
    PYTHONPATH=. python benchmarks/gpu_variants.py --rounds 4 5 --stem gpu_variants_full --budget 420 --out $OUT
    PYTHONPATH=. python benchmarks/gpu_variants.py --dry-run      # CPU: list the variants, check their rows

Rows: the GQA rows of benchmarks/gpu_table.py in bf16 (D 64 and 128, N 1k / 4k / 16k, causal and not;
B·N = 16384, H·D = 2048, Hkv = H/8, so G = 8), causal rows first.

Variants: a variant is one ``[[triton.schedule]]`` row for ``bwd-atomic`` at the row's head dim,
mask and G = 8 (``group = 8``): tile sizes Br, Bc, the main kernel's warps and stages, ``group_split``
(programs sharing the query heads of one KV head) and ``heavy_first`` (the K/V-tile grid axis
outermost). Each variant is written into a copy of ``targets/h200.toml`` before the file's own rows
(the first matching row wins) and run through the user's path,
``tilegen.torch.scaled_dot_product_attention(q, k, v, is_causal=, enable_gqa=True, target=<that file>)``;
the schedule the module emits is read back (``tilegen.backends.triton.schedule``) and recorded, and a
variant whose emitted schedule differs from what it asked for is marked ``mismatch``. Rounds, so that
the most telling measurements come first and ``--budget`` cuts the least telling ones:

1. causal rows: group_split 1, 2, 4, 8 at the target's current tiles (the first config of CONFIGS);
2. causal rows: the same with heavy_first;
3. causal rows: the other CONFIGS at group_split 1 and at the row's best (group_split, heavy_first);
4. non-causal rows: group_split 1, 2, 4, 8 at the current tiles;
5. non-causal rows: the other CONFIGS at group_split 1 and at the row's best split.

Per variant: bwd and f+b TFLOP/s (FLOPs and timings as benchmarks/gpu_table.py: 2.5× and 3.5× of
4·B·H·N²·D, halved when causal; ``do_bench`` medians, L2 flushed), and the max-abs errors of O, dQ, dK,
dV on batch 0, the query heads of KV head 0 against SDPA math in fp32 (gpu_table.reference), ``ok``
when within twice flash's error plus half an ulp (gpu_table.check_ok). SDPA flash (``enable_gqa=True``)
is measured once per row in the same run.

Budget: a variant starts only if the time spent plus the longest variant so far (with its row's
inputs, reference and flash run) stays within ``--budget`` seconds; the others are listed as skipped.
Each line is printed when it finishes. Writes ``<stem>.json`` and ``<stem>.md`` (``--stem``, default
gpu_variants) into ``--out`` (default benchmarks/results/), with per row the best checked variant by bwd TFLOP/s and
its ratios to flash, and per (D, causal) the variant with the best geometric mean of bwd/flash over the
rows that measured it, as the ``[[triton.schedule]]`` row to put into targets/h200.toml. Without CUDA
(and without ``--dry-run``) it prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from gpu_attention import bench, flops  # noqa: E402  do_bench medians; FLOPs 4·B·H·N²·D (½ causal)
from gpu_table import GQA_GROUP, Impl, check_ok, errors, make_inputs, reference, shape  # noqa: E402

H200 = HERE.parent / "targets" / "h200.toml"
SPLITS = (1, 2, 4, GQA_GROUP)
# (Br, Bc, num_warps, num_stages) of the main kernel per head dim; the first is the target's current
# bwd-atomic row, the others the next best of benchmarks/results/gpu_sweep.json (non-causal, N = 4k)
CONFIGS = {
    128: ((64, 128, 8, 2), (64, 64, 4, 3), (32, 64, 4, 3)),
    64: ((32, 128, 4, 3), (64, 64, 4, 3), (64, 128, 8, 2)),
}
ROW_ORDER = ((128, 4096), (64, 4096), (128, 16384), (64, 16384), (128, 1024), (64, 1024))


def rows() -> list[dict]:
    """The GQA rows, causal first, in the order of ROW_ORDER."""
    return [dict(dtype="bf16", d=d, n=n, causal=c, gqa=True) for c in (True, False) for d, n in ROW_ORDER]


def variant_key(v: dict) -> tuple:
    return (v["Br"], v["Bc"], v["num_warps"], v["num_stages"], v["group_split"], v["heavy_first"])


def variant_name(v: dict) -> str:
    hf = " hf" if v["heavy_first"] else ""
    return f"{v['Br']}x{v['Bc']}/{v['num_warps']}w/{v['num_stages']}s split {v['group_split']}{hf}"


def variant(cfg, split: int, heavy: bool) -> dict:
    br, bc, w, s = cfg
    return dict(Br=br, Bc=bc, num_warps=w, num_stages=s, group_split=split, heavy_first=heavy)


def toml_row(row: dict, v: dict, source: str) -> str:
    """The ``[[triton.schedule]]`` row that sets variant ``v`` on ``row``'s head dim and mask, G = 8."""
    return "\n".join(
        [
            "[[triton.schedule]]",
            'program = "bwd-atomic"',
            f"head_dim = {row['d']}",
            f"causal = {'true' if row['causal'] else 'false'}",
            f'dtype = "{row["dtype"]}"',
            f"group = {GQA_GROUP}",
            f"Br = {v['Br']}",
            f"Bc = {v['Bc']}",
            f"group_split = {v['group_split']}",
            f"heavy_first = {'true' if v['heavy_first'] else 'false'}",
            f"main = {{ num_warps = {v['num_warps']}, num_stages = {v['num_stages']} }}",
            f"source = {json.dumps(source)}",
        ]
    )


def target_file(folder: Path, row: dict, v: dict) -> str:
    """A copy of targets/h200.toml with the variant's row before the file's own rows."""
    text = H200.read_text()
    at = text.index("\n[[triton.schedule]]") + 1
    name = f"h200_d{row['d']}_{'causal' if row['causal'] else 'full'}_" + "_".join(str(int(x)) for x in variant_key(v)) + ".toml"
    path = folder / name
    if not path.exists():
        path.write_text(text[:at] + toml_row(row, v, "gpu_variants.py variant") + "\n\n" + text[at:])
    return str(path)


def spec_of(row: dict):
    """The spec tilegen.torch builds for the row's call (BNSD, is_causal: top-left causal)."""
    from tilegen.spec import AttentionSpec

    b, h, hkv = shape(row)
    return AttentionSpec(
        batch=b, heads_q=h, heads_kv=hkv, seq_q=row["n"], seq_k=row["n"], head_dim_qk=row["d"], head_dim_v=row["d"],
        dtype=row["dtype"], window=(-1, 0) if row["causal"] else (-1, -1), alignment="top_left", layout="BNSD", name="torch",
    )


def emitted(row: dict, target: str) -> dict:
    """The backward schedule the module for ``row`` on ``target`` is emitted with, and whether it is
    the variant's (tiles, main's knobs, group_split, heavy_first)."""
    from tilegen.backends import triton as tb

    _, bwd = tb.schedule(spec_of(row), target)
    c = bwd.choice()
    main = c["launch"]["main"]
    return {
        "Br": c["Br"], "Bc": c["Bc"], "num_warps": main["num_warps"], "num_stages": main["num_stages"],
        "group_split": c["group_split"], "heavy_first": c["heavy_first"], "kernels": c["kernels"], "source": c["group_split_source"],
    }


def matches(v: dict, got: dict) -> bool:
    return all(got[k] == v[k] for k in ("Br", "Bc", "num_warps", "num_stages", "group_split", "heavy_first"))


class Variant(Impl):
    """tilegen through its user path on one target file (the variant's row)."""

    def __init__(self, target: str, *args):
        self.target = target
        super().__init__("tilegen", *args)

    def run(self):
        import tilegen.torch as tt

        return tt.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=self.gqa, target=self.target)


def measure(path, f: float, args) -> dict:
    res = {}
    for phase, mult in (("bwd", 2.5), ("fwdbwd", 3.5)):
        ms = bench(getattr(path, phase), args.warmup, args.rep)
        res[phase] = {"ms": ms, "tflops": mult * f / (ms * 1e-3) / 1e12}
    return res


def plan(state: dict, rnd: int) -> list[tuple[dict, dict]]:
    """(row record, variant) pairs of round ``rnd`` (1..5, see the module docstring)."""
    out = []
    causal = rnd <= 3
    for rec in state["rows"]:
        if rec["causal"] != causal:
            continue
        cfgs = CONFIGS[rec["d"]]
        if rnd in (1, 4):
            vs = [variant(cfgs[0], s, False) for s in SPLITS]
        elif rnd == 2:
            vs = [variant(cfgs[0], s, True) for s in SPLITS]
        else:
            best = best_variant(rec)
            split, heavy = (best["group_split"], best["heavy_first"]) if best else (SPLITS[-1], causal)
            vs = [variant(c, s, h) for c in cfgs[1:] for s, h in ((1, False), (split, heavy))]
        seen = {variant_key(x) for x in rec["variants"]}
        out += [(rec, v) for v in vs if variant_key(v) not in seen and not seen.add(variant_key(v))]
    return out


def best_variant(rec: dict) -> dict | None:
    ok = [v for v in rec["variants"] if v.get("check") == "ok" and "bwd" in v]
    return max(ok, key=lambda v: v["bwd"]["tflops"]) if ok else None


def run_flash(rec: dict, data: dict, args, log) -> None:
    q, k, v, do = data["inputs"]
    try:
        path = Impl("flash", q, k, v, do, rec["causal"], True)
        res = measure(path, rec["flops_fwd"], args)
        res["max_abs"] = errors(path, data["ref"], data["slices"])
        rec["flash"] = res
        del path
    except Exception as exc:
        rec["flash"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  flash: {rec['flash']['error'][:160]}")


def run_variant(rec: dict, v: dict, data: dict, folder: Path, args, log) -> dict:
    import torch

    row = {k: rec[k] for k in ("dtype", "d", "n", "causal", "gqa")}
    out = dict(v)
    t0 = time.time()
    try:
        target = target_file(folder, row, v)
        got = emitted(row, target)
        out["emitted"] = got
        if not matches(v, got):
            out["check"] = "mismatch"
        q, k, vv, do = data["inputs"]
        path = Variant(target, q, k, vv, do, rec["causal"], True)
        out.update(measure(path, rec["flops_fwd"], args))
        out["max_abs"] = errors(path, data["ref"], data["slices"])
        fl = rec.get("flash", {})
        if out.get("check") != "mismatch":
            out["check"] = check_ok(out["max_abs"], fl.get("max_abs"), data["ref"], rec["dtype"]) if "max_abs" in fl else "–"
        del path
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out["check"] = "error"
        if args.debug:
            traceback.print_exc()
    out["setup_s"] = time.time() - t0
    torch.cuda.empty_cache()
    return out


def _fmt(x, nd=0):
    return "–" if x is None else f"{x:.{nd}f}"


def _tf(res, phase):
    return res[phase]["tflops"] if isinstance(res, dict) and phase in res else None


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def row_label(rec: dict) -> str:
    return f"{rec['dtype']} D{rec['d']} N{rec['n'] // 1024}k {'causal' if rec['causal'] else 'full'} GQA {rec['H']}/{rec['Hkv']}"


def line(rec: dict, v: dict) -> str:
    fl = rec.get("flash", {})
    if "error" in v:
        return f"{row_label(rec)} {variant_name(v)}: {v['error'][:160]}"
    return (
        f"{row_label(rec)} {variant_name(v)}: bwd {_fmt(_tf(v, 'bwd'))} (flash {_fmt(_tf(fl, 'bwd'))}, "
        f"{_fmt(_ratio(_tf(v, 'bwd'), _tf(fl, 'bwd')), 2)}x), f+b {_fmt(_tf(v, 'fwdbwd'))} (flash {_fmt(_tf(fl, 'fwdbwd'))}, "
        f"{_fmt(_ratio(_tf(v, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)}x) TFLOP/s; check {v.get('check')}"
    )


def suggestions(table: list[dict]) -> list[dict]:
    """Per (D, causal): the variant with the best geometric mean of bwd/flash over the rows where it
    was measured and checked ok (only variants measured on every such row of that D and mask)."""
    out = []
    for d in sorted({r["d"] for r in table}, reverse=True):
        for causal in (True, False):
            recs = [r for r in table if r["d"] == d and r["causal"] == causal and r["variants"]]
            if not recs:
                continue
            scores = {}
            for r in recs:
                for v in r["variants"]:
                    x = _ratio(_tf(v, "bwd"), _tf(r.get("flash", {}), "bwd"))
                    if v.get("check") == "ok" and x:
                        scores.setdefault(variant_key(v), []).append(math.log(x))
            full = {k: s for k, s in scores.items() if len(s) == len(recs)}
            if not full:
                continue
            key = max(full, key=lambda k: sum(full[k]) / len(full[k]))
            v = dict(zip(("Br", "Bc", "num_warps", "num_stages", "group_split", "heavy_first"), key))
            gm = math.exp(sum(full[key]) / len(full[key]))
            per = ", ".join(
                f"N {r['n'] // 1024}k {_fmt(_tf(x, 'bwd'))} vs {_fmt(_tf(r.get('flash', {}), 'bwd'))}"
                for r in recs for x in r["variants"] if variant_key(x) == key
            )
            source = (f"measured on one H200 (benchmarks/gpu_variants.py, bf16, GQA G = {GQA_GROUP}, B·N = 16k, H·D = 2048, "
                      f"{'causal' if causal else 'non-causal'}): bwd TFLOP/s {per} against SDPA flash; geometric mean {gm:.2f}x")
            row = dict(dtype="bf16", d=d, causal=causal)
            out.append({"d": d, "causal": causal, "variant": v, "geomean_vs_flash": gm, "toml": toml_row(row, v, source)})
    return out


def markdown(table: list[dict], meta: dict, sugg: list[dict]) -> str:
    lines = [
        f"# Group-split variants of the GQA backward on {meta.get('device', '?')}",
        "",
        f"torch {meta.get('torch')}, Triton {meta.get('triton')}; `{meta.get('command')}`; {meta.get('date')}. "
        "bf16, B·N = 16384, H·D = 2048, Hkv = H/8. TFLOP/s bwd / f+b (FLOPs 2.5× / 3.5× of 4·B·H·N²·D, halved "
        "when causal), medians of CUDA-event timings; variant: Br×Bc/warps/stages of the main kernel, group_split, "
        "hf = heavy_first. check: tilegen's max-abs error against SDPA math fp32 within 2 × flash's + ½ ulp.",
        "",
        "| row | variant | bwd | f+b | bwd / flash | f+b / flash | err | check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in table:
        fl = rec.get("flash", {})
        lines.append(f"| {row_label(rec)} | SDPA flash | {_fmt(_tf(fl, 'bwd'))} | {_fmt(_tf(fl, 'fwdbwd'))} | 1.00 | 1.00 | "
                     f"{_fmt(max(fl.get('max_abs', {}).values(), default=None), 4)} | – |")
        for v in rec["variants"]:
            err = max(v.get("max_abs", {}).values(), default=None)
            lines.append(
                f"| {row_label(rec)} | {variant_name(v)} | {_fmt(_tf(v, 'bwd'))} | {_fmt(_tf(v, 'fwdbwd'))} | "
                f"{_fmt(_ratio(_tf(v, 'bwd'), _tf(fl, 'bwd')), 2)} | {_fmt(_ratio(_tf(v, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)} | "
                f"{_fmt(err, 4)} | {v.get('check', '–')}{' (' + v['error'][:60] + ')' if 'error' in v else ''} |"
            )
    lines += ["", "## Best checked variant per row (by bwd TFLOP/s)", "", "| row | best variant | bwd / flash | f+b / flash | split-1 bwd / flash |", "|---|---|---|---|---|"]
    for rec in table:
        best, fl = best_variant(rec), rec.get("flash", {})
        base = [v for v in rec["variants"] if v["group_split"] == 1 and not v["heavy_first"] and v.get("check") == "ok"
                and (v["Br"], v["Bc"], v["num_warps"], v["num_stages"]) == CONFIGS[rec["d"]][0]]
        b1 = _ratio(_tf(base[0], "bwd"), _tf(fl, "bwd")) if base else None
        if best is None:
            lines.append(f"| {row_label(rec)} | – | – | – | {_fmt(b1, 2)} |")
            continue
        lines.append(f"| {row_label(rec)} | {variant_name(best)} | {_fmt(_ratio(_tf(best, 'bwd'), _tf(fl, 'bwd')), 2)} | "
                     f"{_fmt(_ratio(_tf(best, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)} | {_fmt(b1, 2)} |")
    if sugg:
        lines += ["", "## Rows for targets/h200.toml (best geometric mean of bwd / flash per head dim and mask)", "", "```toml"]
        lines += ["\n\n".join(s["toml"] for s in sugg), "```"]
    skipped = meta.get("skipped", [])
    if skipped:
        lines += ["", f"{len(skipped)} variants skipped (the {meta.get('budget_s')} s budget was spent): " + "; ".join(skipped)]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="group_split variants of tilegen's GQA backward beside SDPA flash on one GPU")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for all variants (default 420; see the docstring)")
    ap.add_argument("--out", default=str(HERE / "results"), help="folder for gpu_variants.json and .md")
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 3, 4, 5], choices=[1, 2, 3, 4, 5], help="rounds to run (see the docstring)")
    ap.add_argument("--stem", default="gpu_variants", help="output file stem (a second call with other --rounds: another stem)")
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetitions, ms")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: list the variants and check that each target row emits them")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    if args.budget <= 0:
        ap.error(f"--budget {args.budget} is invalid; accepted: a positive number of seconds")
    return args


def dry_run(args) -> int:
    """Every variant of rounds 1, 2 and 4 and the configs of 3 and 5 (at split 1 and 8): its target row
    parses, the module it emits has the variant's schedule, and the module renders."""
    from tilegen.backends import triton as tb

    folder = Path(tempfile.mkdtemp(prefix="gpu_variants_"))
    bad = 0
    n = 0
    for row in rows():
        cfgs = CONFIGS[row["d"]]
        vs = [variant(cfgs[0], s, h) for s in SPLITS for h in (False, True)] + [variant(c, s, row["causal"]) for c in cfgs[1:] for s in (1, SPLITS[-1])]
        for v in vs:
            target = target_file(folder, row, v)
            got = emitted(row, target)
            tb.render(spec_of(row), target)  # the module's lowering (grid limits, expressions) on the CPU
            n += 1
            if not matches(v, got):
                bad += 1
                print(f"MISMATCH {row_label({**row, 'H': shape(row)[1], 'Hkv': shape(row)[2]})} {variant_name(v)}: emitted {got}")
    print(f"gpu_variants --dry-run: {n} variants over {len(rows())} rows, {bad} mismatches; target files in {folder}")
    return 1 if bad else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    try:
        import torch
    except ImportError:
        print("gpu_variants: needs torch with CUDA (torch cannot be imported)")
        return 2
    if not torch.cuda.is_available():
        print("gpu_variants: needs a CUDA GPU (torch.cuda.is_available() is False); --dry-run checks the variants on a CPU")
        return 2
    import platform

    import triton

    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.1f} s] {msg}", flush=True)

    meta = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python benchmarks/gpu_variants.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "warmup_ms": args.warmup, "rep_ms": args.rep, "budget_s": args.budget, "configs": {str(k): v for k, v in CONFIGS.items()},
        "skipped": [],
    }
    folder = Path(tempfile.mkdtemp(prefix="gpu_variants_"))
    state = {"rows": []}
    data = {}
    for row in rows():
        b, h, hkv = shape(row)
        state["rows"].append({**row, "B": b, "H": h, "Hkv": hkv, "flops_fwd": flops(b, h, row["n"], row["d"], row["causal"]), "variants": []})
    longest = 0.0  # the longest variant so far (with its row's setup), s: none starts unless it fits
    for rnd in args.rounds:
        for rec, v in plan(state, rnd):
            if time.time() - t_start + longest > args.budget:
                meta["skipped"].append(f"{row_label(rec)} {variant_name(v)}")
                continue
            t_variant = time.time()
            key = id(rec)
            if key not in data:
                q, k, vv, do = make_inputs(rec["B"], rec["H"], rec["Hkv"], rec["n"], rec["d"], rec["dtype"])
                ref, slices = reference(q, k, vv, do, rec["causal"], True)
                data[key] = {"inputs": (q, k, vv, do), "ref": ref, "slices": slices}
                run_flash(rec, data[key], args, log)
                log(f"{row_label(rec)} SDPA flash: bwd {_fmt(_tf(rec['flash'], 'bwd'))}, f+b {_fmt(_tf(rec['flash'], 'fwdbwd'))} TFLOP/s")
            res = run_variant(rec, v, data[key], folder, args, log)
            rec["variants"].append(res)
            longest = max(longest, time.time() - t_variant)
            log(f"round {rnd}: " + line(rec, res))
    meta["wall_s"] = time.time() - t_start
    table = [r for r in state["rows"] if r["variants"] or "flash" in r]
    sugg = suggestions(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.json").write_text(json.dumps({"meta": meta, "rows": table, "suggested_rows": sugg}, indent=1, default=str) + "\n")
    md = markdown(table, meta, sugg)
    (out / f"{args.stem}.md").write_text(md)
    print(md)
    print("best per row (by bwd TFLOP/s, checked ok):")
    for rec in table:
        best, fl = best_variant(rec), rec.get("flash", {})
        if best is None:
            print(f"  {row_label(rec)}: no checked variant")
            continue
        print(f"  {row_label(rec)}: {variant_name(best)}: bwd {_fmt(_ratio(_tf(best, 'bwd'), _tf(fl, 'bwd')), 2)}x flash, "
              f"f+b {_fmt(_ratio(_tf(best, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)}x flash")
    log(f"wrote {out / args.stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
