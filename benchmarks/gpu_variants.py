"""Schedule variants of tilegen's backward and forward on rows of the GPU table, beside SDPA flash and
compiled flex_attention, in one run.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=. python benchmarks/gpu_variants.py --budget 420 --out $OUT       # all rounds, as the budget allows
    PYTHONPATH=. python benchmarks/gpu_variants.py --rounds 1 2 3 --budget 420 --out $OUT        # causal rows
    PYTHONPATH=. python benchmarks/gpu_variants.py --rounds 4 5 --stem gpu_variants_full --budget 420 --out $OUT
    PYTHONPATH=. python benchmarks/gpu_variants.py --rounds 6 7 9 8 10 --stem gpu_variants_mha --budget 400 --out $OUT
    PYTHONPATH=. python benchmarks/gpu_variants.py --dry-run      # CPU: list the variants, check their rows
    PYTHONPATH=. python benchmarks/gpu_variants.py --dry-run --compile --rounds 7   # and screen them: registers, spills

Rows: bf16 rows of benchmarks/gpu_table.py (B·N = 16384, H·D = 2048): the GQA rows (Hkv = H/8, so
G = 8; D 64 and 128, N 1k / 4k / 16k, causal and not; rounds 1-5, 7, 8), the causal MHA rows (D 128
and 64; rounds 6, 9, 10) and the non-causal MHA rows of D 128 (rounds 7, 8).

Variants: a variant is one ``[[triton.schedule]]`` row at the row's head dim, mask and G
(``group = G``), for ``bwd-atomic`` (tile sizes Br, Bc, the main kernel's warps and stages,
``group_split``: programs sharing the query heads of one KV head, ``heavy_first``: the K/V-tile grid
axis outermost) or for ``fwd`` (Br, Bc, the fwd kernel's warps and stages, ``heavy_first``: the Q-tile
grid axis outermost, last tiles first; ``group_split`` stays 1). Each variant is written into a copy of ``targets/h200.toml`` before the file's own rows
(the first matching row wins) and run through the user's path,
``tilegen.torch.scaled_dot_product_attention(q, k, v, is_causal=, enable_gqa=True, target=<that file>)``;
the schedule the module emits is read back (``tilegen.backends.triton.schedule``) and recorded, and a
variant whose emitted schedule differs from what it asked for is marked ``mismatch``. Rounds, so that
the most telling measurements come first and ``--budget`` cuts the least telling ones:

1. causal rows: group_split 1, 2, 4, 8 at the target's current tiles (the first config of CONFIGS);
2. causal rows: the same with heavy_first;
3. causal rows: the other CONFIGS at group_split 1 and at the row's best (group_split, heavy_first);
4. non-causal rows: group_split 1, 2, 4, 8 at the current tiles;
5. non-causal rows: the other CONFIGS at group_split 1 and at the row's best split;
6. causal MHA rows of D 128 (N 4k, 1k, 16k): the backward and the forward at the target's current
   tiles (MHA_CONFIGS' first), heavy_first off and on;
7. non-causal rows of D 128, MHA and GQA (N 4k, 1k, 16k): the backward at the current tiles and the
   first two others of WIDE["bwd"], the forward at the current tiles and the first two of WIDE["fwd"];
8. the same rows: the rest of WIDE;
9. causal MHA rows of D 128: the other MHA_CONFIGS at the row's better heavy_first (per program);
10. causal MHA rows of D 64 (N 4k, 1k, 16k): rounds 6 and 9 for D 64 together;
11. the forward of D 128 at N 8k (MHA and GQA, causal and not): the first two of WIDE["fwd"], which
    trade places between N 4k and 16k (the target's ``min_seq_k`` row).

Per variant: TFLOP/s of its program's phase (bwd, or fwd for a forward variant) and of f+b (FLOPs and
timings as benchmarks/gpu_table.py: 2.5×, 1× and 3.5× of 4·B·H·N²·D, halved when causal;
``do_bench`` medians, L2 flushed), and the max-abs errors of O, dQ, dK, dV on batch 0, the query heads
of KV head 0 against SDPA math in fp32 (gpu_table.reference), ``ok`` when within twice flash's error
plus half an ulp (gpu_table.check_ok). SDPA flash is measured once per row in the same run (fwd, bwd,
f+b), and so is compiled flex_attention (gpu_table's ``Impl("flex", ...)``, a causal BlockMask on
causal rows) until its compilations have taken ``--flex-budget`` seconds; a row without a Flex run of
its own takes Flex's figures from benchmarks/results/gpu_table.json (an earlier run on the same kind of
GPU; marked ``table``), or none with ``--no-flex``.

Budget: a variant starts only if the time spent plus the longest variant so far (with its row's
inputs, reference and flash run; Flex's compile counted apart) stays within ``--budget`` seconds; the
others are listed as skipped. Flex starts on a row only if its longest run so far (25 s before the
first) also fits. Each line is printed when it finishes. Writes ``<stem>.json`` and ``<stem>.md``
(``--stem``, default gpu_variants) into ``--out`` (default benchmarks/results/), with per row and
program the best checked variant and its ratios to flash and Flex, and per (program, D, causal, G)
the variant with the best geometric mean over the rows that measured it (bwd/flash for the backward,
fwd/flash for the forward), as the ``[[triton.schedule]]`` row to put into targets/h200.toml. Without
CUDA (and without ``--dry-run``) it prints one line and exits with status 2.
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
TABLE = HERE / "results" / "gpu_table.json"  # Flex's figures for rows without a Flex run of their own
SPLITS = (1, 2, 4, GQA_GROUP)
# (Br, Bc, num_warps, num_stages) of the main kernel per head dim; the first is the target's current
# bwd-atomic row, the others the next best of benchmarks/results/gpu_sweep.json (non-causal, N = 4k)
CONFIGS = {
    128: ((64, 128, 8, 3), (64, 128, 8, 2), (64, 64, 4, 3), (32, 64, 4, 3)),
    64: ((32, 128, 4, 3), (64, 64, 4, 3), (64, 128, 8, 2)),
}
ROW_ORDER = ((128, 4096), (64, 4096), (128, 16384), (64, 16384), (128, 1024), (64, 1024))
# (Br, Bc, num_warps, num_stages) per program and head dim for the causal MHA rows (rounds 6, 9, 10):
# the first is the target's current row, the others the next candidates (gpu_sweep.json, the GQA runs)
MHA_CONFIGS = {
    "bwd": {128: ((64, 128, 8, 3), (64, 128, 8, 2), (32, 64, 4, 3)), 64: ((32, 128, 4, 3), (64, 64, 4, 3), (64, 128, 8, 2))},
    "fwd": {128: ((64, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2)), 64: ((128, 64, 8, 3), (64, 64, 4, 4), (128, 64, 4, 3))},
}
# the non-causal rows of D 128 (rounds 7, 8): the current configs first, then the candidates in order.
# 128x128 with 3 stages (fwd) and 128x128 (bwd) do not fit the target's footprint check (--dry-run
# lists such a variant as a mismatch), so the sweep's fwd 128x128/8w/3s is run with 2 stages.
WIDE = {
    "bwd": ((64, 128, 8, 3), (64, 128, 8, 2), (128, 64, 8, 2), (64, 64, 4, 3), (32, 128, 4, 3), (64, 64, 8, 3)),
    "fwd": ((64, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 128, 4, 3)),
}
WIDE_FIRST = 3  # round 7 takes the first three of each (the current one and two others), round 8 the rest
MHA_ORDER = (4096, 1024, 16384)
# the rows of each round in run order: (d, n, causal, gqa)
ROUND_ROWS = {
    6: [(128, n, True, False) for n in MHA_ORDER],
    7: [(128, n, False, g) for n in MHA_ORDER for g in (False, True)],
    8: [(128, n, False, g) for n in MHA_ORDER for g in (False, True)],
    9: [(128, n, True, False) for n in MHA_ORDER],
    10: [(64, n, True, False) for n in MHA_ORDER],
    11: [(128, 8192, c, g) for c in (False, True) for g in (False, True)],
}
ROUNDS = tuple(range(1, 12))


def rows() -> list[dict]:
    """The GQA rows, causal first, in the order of ROW_ORDER; then the causal MHA rows (D 128, D 64),
    the non-causal MHA rows of D 128, and round 11's rows of D 128 at N 8k."""
    out = [dict(dtype="bf16", d=d, n=n, causal=c, gqa=True) for c in (True, False) for d, n in ROW_ORDER]
    out += [dict(dtype="bf16", d=d, n=n, causal=True, gqa=False) for d in (128, 64) for n in MHA_ORDER]
    out += [dict(dtype="bf16", d=128, n=n, causal=False, gqa=False) for n in MHA_ORDER]
    out += [dict(dtype="bf16", d=d, n=n, causal=c, gqa=g) for d, n, c, g in ROUND_ROWS[11]]
    return out


def variant_key(v: dict) -> tuple:
    return (v.get("program", "bwd"), v["Br"], v["Bc"], v["num_warps"], v["num_stages"], v["group_split"], v["heavy_first"])


KEYS = ("program", "Br", "Bc", "num_warps", "num_stages", "group_split", "heavy_first")


def variant_name(v: dict) -> str:
    hf = " hf" if v["heavy_first"] else ""
    if v.get("program", "bwd") == "fwd":
        return f"fwd {v['Br']}x{v['Bc']}/{v['num_warps']}w/{v['num_stages']}s{hf}"
    return f"{v['Br']}x{v['Bc']}/{v['num_warps']}w/{v['num_stages']}s split {v['group_split']}{hf}"


def variant(cfg, split: int, heavy: bool, program: str = "bwd") -> dict:
    br, bc, w, s = cfg
    return dict(program=program, Br=br, Bc=bc, num_warps=w, num_stages=s, group_split=split, heavy_first=heavy)


def group_of(row: dict) -> int:
    return GQA_GROUP if row["gqa"] else 1


def toml_row(row: dict, v: dict, source: str) -> str:
    """The ``[[triton.schedule]]`` row that sets variant ``v`` on ``row``'s head dim, mask and G
    (a ``bwd-atomic`` row, or a ``fwd`` row for a forward variant: no group_split)."""
    fwd = v.get("program", "bwd") == "fwd"
    return "\n".join(
        [
            "[[triton.schedule]]",
            f'program = "{"fwd" if fwd else "bwd-atomic"}"',
            f"head_dim = {row['d']}",
            f"causal = {'true' if row['causal'] else 'false'}",
            f'dtype = "{row["dtype"]}"',
            f"group = {group_of(row)}",
            f"Br = {v['Br']}",
            f"Bc = {v['Bc']}",
            *([] if fwd else [f"group_split = {v['group_split']}"]),
            f"heavy_first = {'true' if v['heavy_first'] else 'false'}",
            f"{'fwd' if fwd else 'main'} = {{ num_warps = {v['num_warps']}, num_stages = {v['num_stages']} }}",
            f"source = {json.dumps(source)}",
        ]
    )


def target_file(folder: Path, row: dict, v: dict) -> str:
    """A copy of targets/h200.toml with the variant's row before the file's own rows."""
    text = H200.read_text()
    at = text.index("\n[[triton.schedule]]") + 1
    name = (f"h200_d{row['d']}_{'causal' if row['causal'] else 'full'}_g{group_of(row)}_{v.get('program', 'bwd')}_"
            + "_".join(str(int(x)) for x in variant_key(v)[1:]) + ".toml")
    path = folder / name
    if not path.exists():
        path.write_text(text[:at] + toml_row(row, v, "gpu_variants.py variant") + "\n\n" + text[at:])
    return str(path)


def spec_of(row: dict):
    """The spec tilegen.torch builds for the row's call (BNSD, is_causal: top-left causal)."""
    from tilegen.core.spec import AttentionSpec

    b, h, hkv = shape(row)
    return AttentionSpec(
        batch=b, heads_q=h, heads_kv=hkv, seq_q=row["n"], seq_k=row["n"], head_dim_qk=row["d"], head_dim_v=row["d"],
        dtype=row["dtype"], window=(-1, 0) if row["causal"] else (-1, -1), alignment="top_left", layout="BNSD", name="torch",
    )


def emitted(row: dict, target: str, program: str = "bwd") -> dict:
    """The schedule of ``program`` ("bwd" or "fwd") the module for ``row`` on ``target`` is emitted
    with (tiles, the main or fwd kernel's knobs, group_split, heavy_first), to check it is the variant's."""
    from tilegen.backends import triton as tb

    fwd, bwd = tb.schedule(spec_of(row), target)
    if program == "fwd":
        c = fwd.choice()
        k = c["launch"]["fwd"]
        return {
            "program": "fwd", "Br": c["Br"], "Bc": c["Bc"], "num_warps": k["num_warps"], "num_stages": k["num_stages"],
            "group_split": 1, "heavy_first": c["heavy_first"], "kernels": c["kernels"], "source": c["heavy_first_source"],
        }
    c = bwd.choice()
    main = c["launch"]["main"]
    return {
        "program": "bwd", "Br": c["Br"], "Bc": c["Bc"], "num_warps": main["num_warps"], "num_stages": main["num_stages"],
        "group_split": c["group_split"], "heavy_first": c["heavy_first"], "kernels": c["kernels"], "source": c["group_split_source"],
    }


def matches(v: dict, got: dict) -> bool:
    return all(got[k] == v.get(k, "bwd") if k == "program" else got[k] == v[k] for k in KEYS)


class Variant(Impl):
    """tilegen through its user path on one target file (the variant's row)."""

    def __init__(self, target: str, *args):
        self.target = target
        super().__init__("tilegen", *args)

    def run(self):
        import tilegen.torch as tt

        return tt.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=self.gqa, target=self.target)


MULT = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}


def measure(path, f: float, args, phases=("bwd", "fwdbwd")) -> dict:
    res = {}
    for phase in phases:
        ms = bench(getattr(path, phase), args.warmup, args.rep)
        res[phase] = {"ms": ms, "tflops": MULT[phase] * f / (ms * 1e-3) / 1e12}
    return res


def main_phase(v: dict) -> str:
    """The phase a variant changes: "fwd" for a forward variant, else "bwd"."""
    return "fwd" if v.get("program", "bwd") == "fwd" else "bwd"


def round_variants(rec: dict, rnd: int) -> list[dict]:
    """The variants of rounds 6..10 on row ``rec`` (see the module docstring); [] where the row is not
    one of the round's."""
    if (rec["d"], rec["n"], rec["causal"], rec["gqa"]) not in ROUND_ROWS[rnd]:
        return []
    if rnd == 11:
        return [variant(c, 1, False, "fwd") for c in WIDE["fwd"][:2]]
    if rnd in (7, 8):
        part = slice(0, WIDE_FIRST) if rnd == 7 else slice(WIDE_FIRST, None)
        split = 1
        return [variant(c, split, False, prog) for prog in ("bwd", "fwd") for c in WIDE[prog][part]]
    out = []
    for prog in ("bwd", "fwd"):
        cfgs = MHA_CONFIGS[prog][rec["d"]]
        if rnd in (6, 10):
            out += [variant(cfgs[0], 1, h, prog) for h in (False, True)]
        if rnd in (9, 10):
            best = best_variant(rec, prog)
            heavy = best["heavy_first"] if best else True
            out += [variant(c, 1, heavy, prog) for c in cfgs[1:]]
    return out


def plan(state: dict, rnd: int) -> list[tuple[dict, dict]]:
    """(row record, variant) pairs of round ``rnd`` (1..11, see the module docstring)."""
    out = []
    if rnd >= 6:
        order = {key: n for n, key in enumerate(ROUND_ROWS[rnd])}
        recs = sorted((r for r in state["rows"] if (r["d"], r["n"], r["causal"], r["gqa"]) in order),
                      key=lambda r: order[r["d"], r["n"], r["causal"], r["gqa"]])
        for rec in recs:
            seen = {variant_key(x) for x in rec["variants"]}
            out += [(rec, v) for v in round_variants(rec, rnd) if variant_key(v) not in seen and not seen.add(variant_key(v))]
        return out
    causal = rnd <= 3
    for rec in state["rows"]:
        if rec["causal"] != causal or not rec["gqa"] or (rec["d"], rec["n"]) not in ROW_ORDER:
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


def best_variant(rec: dict, program: str = "bwd") -> dict | None:
    """The checked variant of ``program`` with the highest TFLOP/s of its phase, or None."""
    phase = "fwd" if program == "fwd" else "bwd"
    ok = [v for v in rec["variants"] if v.get("check") == "ok" and phase in v and main_phase(v) == phase]
    return max(ok, key=lambda v: v[phase]["tflops"]) if ok else None


def run_flash(rec: dict, data: dict, args, log) -> None:
    q, k, v, do = data["inputs"]
    try:
        path = Impl("flash", q, k, v, do, rec["causal"], rec["gqa"])
        res = measure(path, rec["flops_fwd"], args, ("fwd", "bwd", "fwdbwd"))
        res["max_abs"] = errors(path, data["ref"], data["slices"])
        rec["flash"] = res
        del path
    except Exception as exc:
        rec["flash"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  flash: {rec['flash']['error'][:160]}")


def table_flex(rec: dict) -> dict | None:
    """Flex's fwd/bwd/f+b of ``rec``'s row in benchmarks/results/gpu_table.json (marked "table"), or None."""
    try:
        rows = json.loads(TABLE.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return None
    for r in rows:
        if all(r.get(k) == rec[k] for k in ("dtype", "d", "n", "causal", "gqa")):
            flex = r.get("results", {}).get("flex", {})
            if all(p in flex for p in ("fwd", "bwd", "fwdbwd")):
                return {p: flex[p] for p in ("fwd", "bwd", "fwdbwd")} | {"source": "table"}
    return None


def run_flex(rec: dict, data: dict, args, log) -> None:
    """Compiled flex_attention on the row (fwd, bwd, f+b), as benchmarks/gpu_table.py runs it."""
    import torch

    q, k, v, do = data["inputs"]
    try:
        path = Impl("flex", q, k, v, do, rec["causal"], rec["gqa"])
        rec["flex"] = measure(path, rec["flops_fwd"], args, ("fwd", "bwd", "fwdbwd")) | {"source": "this run"}
        del path
    except Exception as exc:
        rec["flex"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  flex: {rec['flex']['error'][:160]}")
        if args.debug:
            traceback.print_exc()
    torch.cuda.empty_cache()


def run_variant(rec: dict, v: dict, data: dict, folder: Path, args, log) -> dict:
    import torch

    row = {k: rec[k] for k in ("dtype", "d", "n", "causal", "gqa")}
    out = dict(v)
    t0 = time.time()
    try:
        target = target_file(folder, row, v)
        got = emitted(row, target, v.get("program", "bwd"))
        out["emitted"] = got
        if not matches(v, got):
            out["check"] = "mismatch"
            out["error"] = f"the module is emitted with {variant_name(got)}, not the variant (its row does not fit or apply); not measured"
            out["setup_s"] = time.time() - t0
            return out
        q, k, vv, do = data["inputs"]
        path = Variant(target, q, k, vv, do, rec["causal"], rec["gqa"])
        out.update(measure(path, rec["flops_fwd"], args, (main_phase(v), "fwdbwd")))
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
    heads = f"GQA {rec['H']}/{rec['Hkv']}" if rec["gqa"] else f"MHA {rec['H']}/{rec['Hkv']}"
    return f"{rec['dtype']} D{rec['d']} N{rec['n'] // 1024}k {'causal' if rec['causal'] else 'full'} {heads}"


def flex_of(rec: dict) -> dict:
    """The row's Flex figures: this run's, else gpu_table.json's (``rec["flex_table"]``), else {}."""
    fx = rec.get("flex", {})
    if "bwd" in fx:
        return fx
    return rec.get("flex_table") or {}


def _flex_mark(rec: dict) -> str:
    return " (table)" if flex_of(rec).get("source") == "table" else ""


def line(rec: dict, v: dict) -> str:
    fl, fx = rec.get("flash", {}), flex_of(rec)
    if "error" in v:
        return f"{row_label(rec)} {variant_name(v)}: {v['error'][:160]}"
    ph = main_phase(v)
    return (
        f"{row_label(rec)} {variant_name(v)}: {ph} {_fmt(_tf(v, ph))} (flash {_fmt(_tf(fl, ph))}, "
        f"{_fmt(_ratio(_tf(v, ph), _tf(fl, ph)), 2)}x; Flex{_flex_mark(rec)} {_fmt(_tf(fx, ph))}, {_fmt(_ratio(_tf(v, ph), _tf(fx, ph)), 2)}x), "
        f"f+b {_fmt(_tf(v, 'fwdbwd'))} (flash {_fmt(_ratio(_tf(v, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)}x, "
        f"Flex {_fmt(_ratio(_tf(v, 'fwdbwd'), _tf(fx, 'fwdbwd')), 2)}x) TFLOP/s; check {v.get('check')}"
    )


def best_line(rec: dict) -> str:
    """The row's best checked variant per program, with its ratios to flash and Flex."""
    fl, fx = rec.get("flash", {}), flex_of(rec)
    parts = []
    for prog in ("bwd", "fwd"):
        best = best_variant(rec, prog)
        if best is not None:
            parts.append(
                f"{variant_name(best) if prog == 'fwd' else 'bwd ' + variant_name(best)}: {_fmt(_ratio(_tf(best, prog), _tf(fl, prog)), 2)}x flash, "
                f"{_fmt(_ratio(_tf(best, prog), _tf(fx, prog)), 2)}x Flex{_flex_mark(rec)}; f+b {_fmt(_ratio(_tf(best, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)}x flash, "
                f"{_fmt(_ratio(_tf(best, 'fwdbwd'), _tf(fx, 'fwdbwd')), 2)}x Flex"
            )
    return f"best {row_label(rec)}: " + (" | ".join(parts) if parts else "no checked variant")


def suggestions(table: list[dict]) -> list[dict]:
    """Per (program, D, causal, G): the variant with the best geometric mean of its phase's TFLOP/s
    over flash's (bwd for the backward, fwd for the forward) over the rows where it was measured and
    checked ok (only variants measured on every such row with variants of that program)."""
    out = []
    groups = sorted({(p, r["d"], r["causal"], group_of(r)) for r in table for p in ("bwd", "fwd")}, key=lambda k: (k[0], -k[1], not k[2], k[3]))
    for prog, d, causal, g in groups:
        recs = [r for r in table if r["d"] == d and r["causal"] == causal and group_of(r) == g
                and any(main_phase(v) == prog for v in r["variants"])]
        if not recs:
            continue
        scores = {}
        for r in recs:
            for v in r["variants"]:
                x = _ratio(_tf(v, prog), _tf(r.get("flash", {}), prog))
                if main_phase(v) == prog and v.get("check") == "ok" and x:
                    scores.setdefault(variant_key(v), []).append(math.log(x))
        full = {k: s for k, s in scores.items() if len(s) == len(recs)}
        if not full:
            continue
        key = max(full, key=lambda k: sum(full[k]) / len(full[k]))
        v = dict(zip(KEYS, key))
        gm = math.exp(sum(full[key]) / len(full[key]))
        per = ", ".join(
            f"N {r['n'] // 1024}k {_fmt(_tf(x, prog))} vs {_fmt(_tf(r.get('flash', {}), prog))}"
            for r in recs for x in r["variants"] if variant_key(x) == key
        )
        heads = f"GQA G = {g}" if g > 1 else "MHA"
        source = (f"measured on one H200 (benchmarks/gpu_variants.py, bf16, {heads}, B·N = 16k, H·D = 2048, "
                  f"{'causal' if causal else 'non-causal'}): {prog} TFLOP/s {per} against SDPA flash; geometric mean {gm:.2f}x")
        row = dict(dtype="bf16", d=d, causal=causal, gqa=g > 1)
        out.append({"program": prog, "d": d, "causal": causal, "group": g, "variant": v, "geomean_vs_flash": gm, "toml": toml_row(row, v, source)})
    return out


def markdown(table: list[dict], meta: dict, sugg: list[dict]) -> str:
    lines = [
        f"# Schedule variants of tilegen's backward and forward on {meta.get('device', '?')}",
        "",
        f"torch {meta.get('torch')}, Triton {meta.get('triton')}; `{meta.get('command')}`; {meta.get('date')}. "
        "bf16, B·N = 16384, H·D = 2048, GQA: Hkv = H/8. TFLOP/s fwd / bwd / f+b (FLOPs 1× / 2.5× / 3.5× of 4·B·H·N²·D, "
        "halved when causal), medians of CUDA-event timings; variant: Br×Bc/warps/stages of the backward's main "
        "kernel (or of the forward's fwd kernel: `fwd ...`), group_split, hf = heavy_first. Flex: compiled "
        "flex_attention in this run, or `(table)`: from benchmarks/results/gpu_table.json. check: tilegen's max-abs "
        "error against SDPA math fp32 within 2 × flash's + ½ ulp.",
        "",
        "| row | variant | fwd | bwd | f+b | phase / flash | phase / Flex | f+b / flash | f+b / Flex | err | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in table:
        fl, fx = rec.get("flash", {}), flex_of(rec)
        lines.append(f"| {row_label(rec)} | SDPA flash | {_fmt(_tf(fl, 'fwd'))} | {_fmt(_tf(fl, 'bwd'))} | {_fmt(_tf(fl, 'fwdbwd'))} | 1.00 | – | 1.00 | – | "
                     f"{_fmt(max(fl.get('max_abs', {}).values(), default=None), 4)} | – |")
        if fx:
            lines.append(f"| {row_label(rec)} | Flex{_flex_mark(rec)} | {_fmt(_tf(fx, 'fwd'))} | {_fmt(_tf(fx, 'bwd'))} | {_fmt(_tf(fx, 'fwdbwd'))} | – | 1.00 | – | 1.00 | – | – |")
        for v in rec["variants"]:
            err = max(v.get("max_abs", {}).values(), default=None)
            ph = main_phase(v)
            lines.append(
                f"| {row_label(rec)} | {variant_name(v)} | {_fmt(_tf(v, 'fwd'))} | {_fmt(_tf(v, 'bwd'))} | {_fmt(_tf(v, 'fwdbwd'))} | "
                f"{_fmt(_ratio(_tf(v, ph), _tf(fl, ph)), 2)} | {_fmt(_ratio(_tf(v, ph), _tf(fx, ph)), 2)} | "
                f"{_fmt(_ratio(_tf(v, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)} | {_fmt(_ratio(_tf(v, 'fwdbwd'), _tf(fx, 'fwdbwd')), 2)} | "
                f"{_fmt(err, 4)} | {v.get('check', '–')}{' (' + v['error'][:60] + ')' if 'error' in v else ''} |"
            )
    lines += ["", "## Best checked variant per row and program (by TFLOP/s of its phase)", "",
              "| row | program | best variant | phase / flash | phase / Flex | f+b / flash | f+b / Flex |", "|---|---|---|---|---|---|---|"]
    for rec in table:
        fl, fx = rec.get("flash", {}), flex_of(rec)
        for prog in ("bwd", "fwd"):
            best = best_variant(rec, prog)
            if best is None:
                continue
            lines.append(f"| {row_label(rec)} | {prog} | {variant_name(best)} | {_fmt(_ratio(_tf(best, prog), _tf(fl, prog)), 2)} | "
                         f"{_fmt(_ratio(_tf(best, prog), _tf(fx, prog)), 2)} | {_fmt(_ratio(_tf(best, 'fwdbwd'), _tf(fl, 'fwdbwd')), 2)} | "
                         f"{_fmt(_ratio(_tf(best, 'fwdbwd'), _tf(fx, 'fwdbwd')), 2)} |")
    if sugg:
        lines += ["", "## Rows for targets/h200.toml (best geometric mean of the phase / flash per program, head dim, mask and G)", "", "```toml"]
        lines += ["\n\n".join(s["toml"] for s in sugg), "```"]
    skipped = meta.get("skipped", [])
    if skipped:
        lines += ["", f"{len(skipped)} variants skipped (the {meta.get('budget_s')} s budget was spent): " + "; ".join(skipped)]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="schedule variants of tilegen's backward and forward beside SDPA flash and Flex on one GPU")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for all variants (default 420; see the docstring)")
    ap.add_argument("--out", default=str(HERE / "results"), help="folder for gpu_variants.json and .md")
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 3, 4, 5], choices=list(ROUNDS), help="rounds to run, in this order (see the docstring)")
    ap.add_argument("--stem", default="gpu_variants", help="output file stem (a second call with other --rounds: another stem)")
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetitions, ms")
    ap.add_argument("--no-flex", action="store_true", help="no compiled flex_attention runs (Flex's figures from gpu_table.json where it has the row)")
    ap.add_argument("--flex-budget", type=float, default=160.0, help="seconds of Flex runs (compiles) in all (default 160)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: list the variants and check that each target row emits them")
    ap.add_argument("--compile", action="store_true",
                    help="with --dry-run: also compile each variant's kernels for sm_90 on the CPU (needs Triton) and print the "
                         "registers, stack bytes (spills) and shared bytes the compiler allocated (inspect --compile)")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    if args.budget <= 0:
        ap.error(f"--budget {args.budget} is invalid; accepted: a positive number of seconds")
    if args.flex_budget < 0:
        ap.error(f"--flex-budget {args.flex_budget} is invalid; accepted: a number of seconds >= 0")
    return args


def dry_variants(row: dict) -> list[dict]:
    """Every variant any round may run on ``row`` (rounds 3, 5 and 9 at both of their best-variant
    outcomes)."""
    if row["gqa"] and (row["d"], row["n"]) in ROW_ORDER:
        cfgs = CONFIGS[row["d"]]
        vs = [variant(cfgs[0], s, h) for s in SPLITS for h in (False, True)] + [variant(c, s, row["causal"]) for c in cfgs[1:] for s in (1, SPLITS[-1])]
    else:
        vs = []
    key = (row["d"], row["n"], row["causal"], row["gqa"])
    for rnd in (6, 7, 8, 10, 11):
        if key in ROUND_ROWS[rnd]:
            vs += round_variants({**row, "variants": []}, rnd)
    if key in ROUND_ROWS[9] or key in ROUND_ROWS[10]:
        vs += [variant(c, 1, h, p) for p in ("bwd", "fwd") for c in MHA_CONFIGS[p][row["d"]][1:] for h in (False, True)]
    seen: set = set()
    return [v for v in vs if variant_key(v) not in seen and not seen.add(variant_key(v))]


def dry_run(args) -> int:
    """Every variant of every round (:func:`dry_variants`) on the rows of the rounds asked for: its
    target row parses, the module it emits has the variant's schedule, and the module renders."""
    from tilegen.backends import triton as tb

    folder = Path(tempfile.mkdtemp(prefix="gpu_variants_"))
    bad = 0
    n = 0
    asked = set(args.rounds)
    for row in rows():
        key = (row["d"], row["n"], row["causal"], row["gqa"])
        if not (row["gqa"] and (row["d"], row["n"]) in ROW_ORDER and asked & {1, 2, 3, 4, 5}) and not any(key in ROUND_ROWS[r] for r in asked if r >= 6):
            continue
        for v in dry_variants(row):
            target = target_file(folder, row, v)
            got = emitted(row, target, v["program"])
            if not args.compile:  # (--compile renders the module itself)
                tb.render(spec_of(row), target)  # the module's lowering (grid limits, expressions) on the CPU
            n += 1
            label = f"{row_label({**row, 'H': shape(row)[1], 'Hkv': shape(row)[2]})} {variant_name(v)}"
            if not matches(v, got):
                bad += 1
                print(f"MISMATCH {label}: emitted {got}")
            if args.compile:  # the screening on the CPU: what the compiler allocates for this variant's kernels
                from tilegen.backends.triton.compile import compile_resources

                facts = compile_resources(spec_of(row), target, programs=(v["program"],))["kernels"]
                print(f"{label}: " + "; ".join(
                    f"{name} {k['registers']} reg, {k['stack_bytes']} B stack{' (spills)' if k['stack_bytes'] else ''}, {k['shared_bytes']} B shared"
                    for name, k in facts.items() if name in ("fwd", "main", "dq")), flush=True)
    print(f"gpu_variants --dry-run: {n} variants, {bad} mismatches; target files in {folder}")
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
        "mha_configs": {p: {str(k): v for k, v in c.items()} for p, c in MHA_CONFIGS.items()}, "wide": WIDE,
        "rounds": args.rounds, "flex_budget_s": 0.0 if args.no_flex else args.flex_budget, "skipped": [], "flex_skipped": [],
    }
    folder = Path(tempfile.mkdtemp(prefix="gpu_variants_"))
    state = {"rows": []}
    data = {}
    for row in rows():
        b, h, hkv = shape(row)
        state["rows"].append({**row, "B": b, "H": h, "Hkv": hkv, "flops_fwd": flops(b, h, row["n"], row["d"], row["causal"]), "variants": []})
    longest = 0.0  # the longest variant so far (with its row's setup, Flex apart), s: none starts unless it fits
    flex = {"spent": 0.0, "longest": 25.0}  # Flex's runs so far and the longest (a guess before the first)
    prev, ran = None, False  # the row of the last variant, and whether one ran on it since its last summary
    for rnd in args.rounds:
        for rec, v in plan(state, rnd):
            if prev is not None and prev is not rec and ran:
                log(best_line(prev))
                ran = False
            prev = rec
            if time.time() - t_start + longest > args.budget:
                meta["skipped"].append(f"{row_label(rec)} {variant_name(v)}")
                continue
            t_variant = time.time()
            key = id(rec)
            if key not in data:
                q, k, vv, do = make_inputs(rec["B"], rec["H"], rec["Hkv"], rec["n"], rec["d"], rec["dtype"])
                ref, slices = reference(q, k, vv, do, rec["causal"], rec["gqa"])
                data[key] = {"inputs": (q, k, vv, do), "ref": ref, "slices": slices}
                run_flash(rec, data[key], args, log)
                fl = rec["flash"]
                log(f"{row_label(rec)} SDPA flash: fwd {_fmt(_tf(fl, 'fwd'))}, bwd {_fmt(_tf(fl, 'bwd'))}, f+b {_fmt(_tf(fl, 'fwdbwd'))} TFLOP/s")
                rec["flex_table"] = table_flex(rec)
                fits = time.time() - t_start + flex["longest"] + longest <= args.budget
                if not args.no_flex and fits and flex["spent"] + flex["longest"] <= args.flex_budget:
                    t_flex = time.time()
                    run_flex(rec, data[key], args, log)
                    took = time.time() - t_flex
                    flex["spent"] += took
                    flex["longest"] = took if flex["spent"] == took else max(flex["longest"], took)
                    t_variant += took  # Flex's compile is counted apart from the variant's time
                    fx = rec["flex"]
                    log(f"{row_label(rec)} Flex: fwd {_fmt(_tf(fx, 'fwd'))}, bwd {_fmt(_tf(fx, 'bwd'))}, f+b {_fmt(_tf(fx, 'fwdbwd'))} TFLOP/s ({took:.0f} s)")
                elif not args.no_flex:
                    meta["flex_skipped"].append(row_label(rec))
            res = run_variant(rec, v, data[key], folder, args, log)
            ran = True
            rec["variants"].append(res)
            longest = max(longest, time.time() - t_variant)
            log(f"round {rnd}: " + line(rec, res))
    if prev is not None and ran:
        log(best_line(prev))
    meta["wall_s"] = time.time() - t_start
    meta["flex_s"] = flex["spent"]
    table = [r for r in state["rows"] if r["variants"] or "flash" in r]
    sugg = suggestions(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.json").write_text(json.dumps({"meta": meta, "rows": table, "suggested_rows": sugg}, indent=1, default=str) + "\n")
    md = markdown(table, meta, sugg)
    (out / f"{args.stem}.md").write_text(md)
    print(md)
    print("best per row (by the phase's TFLOP/s, checked ok):")
    for rec in table:
        print("  " + best_line(rec))
    log(f"wrote {out / args.stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
