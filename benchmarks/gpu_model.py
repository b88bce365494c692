"""The GPU cost model (:func:`tilegen.models.cost.predict_gpu`) against the committed H200 sweep.

``results/gpu_sweep.json`` holds 27 measured variants (bf16, N = 4096, B·N = 16k, H·D = 2048,
non-causal) of the forward, the atomic backward and the separate backward at head dims 64 and 128, each
a (Br, Bc) and per kernel phase a (num_warps, num_stages). For each variant this builds the program the
Triton backend compiles (the same passes, the variant's tiles and stages), predicts its time with the
target's ``[gpu_model]`` parameters and prints measured against predicted TFLOP/s (the sweep's
convention: 4·B·H·N²·D FLOPs for the forward, 2.5× that for a backward), then Spearman's rank
correlation and the relative errors: over the fit part (head dim 128), the held-out part (head dim 64)
and all. Writes ``results/gpu_model.json``.

``--fit`` instead searches the free parameters on the fit part (Nelder–Mead on the mean squared log
ratio of predicted to measured time) and prints them, for copying into targets/h200.toml.

``--compiled`` gives the model each kernel's registers, spilled bytes and shared bytes as the compiler
allocated them (``results/gpu_compile.json``, from benchmarks/gpu_compile.py: an sm_90 compile on the
CPU) instead of the footprint's estimates, with the parameters fitted to them (the target's
``[gpu_model_compiled]``; ``--fit --compiled`` fits them); it writes ``results/gpu_model_compiled.json``.
Block-size selection keeps the footprint's estimates and ``[gpu_model]`` (it scores many candidates,
a compile each would cost seconds); ``tilegen inspect --compile`` shows both for the emitted schedule.

Usage: PYTHONPATH=. python benchmarks/gpu_model.py [--fit] [--compiled]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tilegen.models.cost import GPU_MODEL_PARAMS, gpu_params, predict_gpu  # noqa: E402
from tilegen.core.ir import Bc, Br  # noqa: E402
from tilegen.core.spec import AttentionSpec  # noqa: E402
from tilegen.core.targets import load_target  # noqa: E402
from tilegen.backends import compile_backward, compile_forward  # noqa: E402

FITTED = tuple(k for k in GPU_MODEL_PARAMS if k != "base_registers")  # base_registers is sourced (NOTES: ptxas)
SWEEP = HERE / "results" / "gpu_sweep.json"
COMPILED = HERE / "results" / "gpu_compile.json"  # benchmarks/gpu_compile.py


def part_of(index: int) -> str:
    """The fit part: the sweep's even-numbered variants (file order); the odd ones are held out."""
    return "fit" if index % 2 == 0 else "held-out"
TOKENS, HIDDEN = 16384, 2048


def sweep_spec(d: int, n: int, dtype: str = "bf16", causal: bool = False) -> AttentionSpec:
    """The sweep's problem: B·N = 16k tokens, H·D = 2048 (as benchmarks/gpu_attention.py)."""
    h, b = HIDDEN // d, TOKENS // n
    return AttentionSpec(batch=b, heads_q=h, heads_kv=h, seq_q=n, seq_k=n, head_dim_qk=d, head_dim_v=d, dtype=dtype,
                         window=(-1, 0) if causal else (-1, -1), name=f"sweep_d{d}_n{n}")


def variant_program(var: dict, n: int, target):
    """The bound, placed program of one sweep variant (its tiles and stages), and num_warps per phase.
    The placement's capacity check is lifted (every variant ran; the footprint counts P and dS staging
    copies the compiler may not keep), the model takes the real capacities."""
    spec = sweep_spec(var["D"], n, var.get("dtype", "bf16"), var.get("causal", False))
    loose = target.with_capacity("SMEM", 1 << 30)
    stages = {"*": 2, **{ph: int(k[1]) for ph, k in var["knobs"].items()}}
    tiles = tuple(var["tiles"])
    if var["program"] == "fwd":
        prog = compile_forward(spec, target=loose, tile_sizes=tiles, num_stages=stages)
    else:
        prog = compile_backward(spec, dq_strategy=var["strategy"], target=loose, tile_sizes=tiles, num_stages=stages)
    return prog, {ph: int(k[0]) for ph, k in var["knobs"].items()}


def measured_flops(var: dict, n: int) -> float:
    """The sweep's FLOPs: 4·B·H·N²·D (forward), 2.5× for a backward; halved when causal."""
    d = var["D"]
    f = 4.0 * (TOKENS // n) * (HIDDEN // d) * n * n * d / (2 if var.get("causal") else 1)
    return f if var["program"] == "fwd" else 2.5 * f


def spearman(a, b) -> float:
    """Spearman's rank correlation (average ranks for ties), with NumPy."""
    def ranks(x):
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):
            r[x == v] = r[x == v].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def label(var: dict) -> str:
    prog = var["program"] if var["program"] == "fwd" else f"bwd-{var['strategy']}"
    knobs = " ".join(f"{ph} {k[0]}w/{k[1]}s" for ph, k in var["knobs"].items())
    return f"{prog:<12} D{var['D']:<3} {var['tiles'][0]:>3}x{var['tiles'][1]:<3} {knobs}"


def load_sweep(path: Path = SWEEP):
    data = json.loads(path.read_text())
    return data["n"], [v for v in data["variants"] if "ms" in v]


def load_compiled(path: Path | None = COMPILED) -> dict:
    """Per sweep variant label, per kernel phase: registers, stack_bytes, shared_bytes of an sm_90
    compile (benchmarks/gpu_compile.py); {} when ``path`` is None."""
    return json.loads(path.read_text())["variants"] if path is not None else {}


def evaluate(params: dict | None = None, target_name: str = "h200", path: Path = SWEEP, compiled: Path | None = None) -> dict:
    """Measured and predicted TFLOP/s per variant, Spearman and relative errors per part; with
    ``compiled`` (None: the footprint's estimates) each kernel's registers, spills and shared bytes
    from the sm_90 compile."""
    target = load_target(target_name)
    n, variants = load_sweep(path)
    facts = load_compiled(compiled)
    rows = []
    for i, var in enumerate(variants):
        prog, warps = variant_program(var, n, target)
        pred = predict_gpu(prog, target, warps, params, compiled=facts.get(label(var)))
        f = measured_flops(var, n)
        rows.append({"variant": label(var), "program": var["program"] if var["program"] == "fwd" else f"bwd-{var['strategy']}",
                     "D": var["D"], "tiles": var["tiles"], "knobs": var["knobs"], "measured_ms": var["ms"],
                     "measured_tflops": var["tflops"], "predicted_ms": pred.time_s * 1e3, "predicted_tflops": f / pred.time_s / 1e12,
                     "part": part_of(i),
                     "kernels": [{"name": k.name, "warps": k.warps, "stages": k.stages, "resident": k.resident,
                                  "registers": round(k.registers, 1), "terms": k.terms, "time_ms": k.time_s * 1e3} for k in pred.kernels]})
    summary = {}
    for part in ("fit", "held-out", "all"):
        sel = [r for r in rows if part == "all" or r["part"] == part]
        m = [r["measured_tflops"] for r in sel]
        p = [r["predicted_tflops"] for r in sel]
        err = [pp / mm - 1 for pp, mm in zip(p, m)]
        summary[part] = {"variants": len(sel), "spearman": spearman(m, p), "max_abs_error": max(abs(e) for e in err),
                         "mean_abs_error": float(np.mean(np.abs(err))), "within_25pct": sum(abs(e) <= 0.25 for e in err)}
    groups = {}
    for r in rows:
        groups.setdefault((r["program"], r["D"]), []).append(r)
    summary["per_group_spearman"] = {f"{g[0]} D{g[1]}": spearman([r["measured_tflops"] for r in rs], [r["predicted_tflops"] for r in rs])
                                     for g, rs in groups.items()}
    return {"params": params or gpu_params(target, compiled=compiled is not None), "n": n, "rows": rows, "summary": summary}


def fit(target_name: str = "h200", names=None, restarts: int = 3, compiled: Path | None = None) -> dict:
    """Nelder–Mead (NumPy) on log-parameters: the mean squared log(predicted / measured time) over
    the fit part."""
    target = load_target(target_name)
    n, variants = load_sweep()
    facts = load_compiled(compiled)
    work = [(variant_program(v, n, target), v["ms"], facts.get(label(v))) for i, v in enumerate(variants) if part_of(i) == "fit"]
    names = tuple(names or FITTED)
    fixed = gpu_params(target)  # the start: [gpu_model] (with --compiled too, so that the fit does not start from its own result)
    start = np.log([fixed[k] for k in names])

    def loss(x):
        params = {**fixed, **dict(zip(names, np.exp(x)))}
        for k in ("mma_small_m_efficiency", "overlap"):
            params[k] = min(params[k], 1.0)
        return float(np.mean([math.log(predict_gpu(p, target, w, params, compiled=c).time_s * 1e3 / ms) ** 2 for (p, w), ms, c in work]))

    best_x, best_v = start, loss(start)
    rng = np.random.default_rng(0)
    for attempt in range(restarts):
        x0 = best_x if attempt == 0 else best_x + rng.normal(0, 0.7, len(start))
        x, v = _nelder_mead(loss, x0)
        if v < best_v:
            best_x, best_v = x, v
    params = {**fixed, **dict(zip(names, np.exp(best_x)))}
    for k in ("mma_small_m_efficiency", "overlap"):
        params[k] = min(params[k], 1.0)
    return {"params": {k: float(v) for k, v in params.items()}, "fitted": list(names), "loss": best_v}


def _nelder_mead(loss, start, iterations: int = 250):
    """Nelder–Mead from ``start`` (NumPy): the best point and its loss."""
    simplex = [start] + [start + np.eye(len(start))[i] * 0.5 for i in range(len(start))]
    vals = [loss(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(vals)
        simplex, vals = [simplex[i] for i in order], [vals[i] for i in order]
        centre = np.mean(simplex[:-1], axis=0)
        refl = centre + (centre - simplex[-1])
        fr = loss(refl)
        if fr < vals[0]:
            grown = centre + 2 * (centre - simplex[-1])
            fe = loss(grown)
            simplex[-1], vals[-1] = (grown, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = centre + 0.5 * (simplex[-1] - centre)
            fc = loss(con)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                vals = [vals[0]] + [loss(x) for x in simplex[1:]]
    i = int(np.argmin(vals))
    return simplex[i], vals[i]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="search the free parameters on the fit part and print them")
    ap.add_argument("--compiled", action="store_true",
                    help="each kernel's registers, spills and shared bytes from results/gpu_compile.json (an sm_90 compile), "
                         "with the parameters fitted to them (the target's [gpu_model_compiled]; with --fit: fit them)")
    ap.add_argument("--out", default=None, help="default results/gpu_model.json (--compiled: results/gpu_model_compiled.json)")
    args = ap.parse_args(argv)
    compiled = COMPILED if args.compiled else None
    if args.fit:
        print(json.dumps(fit(compiled=compiled), indent=1))
        return 0
    res = evaluate(compiled=compiled)
    out = args.out or str(HERE / "results" / ("gpu_model_compiled.json" if args.compiled else "gpu_model.json"))
    print(f"{'variant':<40} {'part':<8} {'measured':>9} {'model':>9} {'error':>7}   TFLOP/s")
    for r in res["rows"]:
        print(f"{r['variant']:<40} {r['part']:<8} {r['measured_tflops']:>9.0f} {r['predicted_tflops']:>9.0f} {r['predicted_tflops'] / r['measured_tflops'] - 1:>+7.1%}")
    for part in ("fit", "held-out", "all"):
        s = res["summary"][part]
        print(f"{part:<9} {s['variants']:>2} variants: Spearman {s['spearman']:.3f}, |error| max {s['max_abs_error']:.1%} "
              f"mean {s['mean_abs_error']:.1%}, {s['within_25pct']}/{s['variants']} within ±25%")
    print("Spearman per group: " + ", ".join(f"{g} {v:.2f}" for g, v in res["summary"]["per_group_spearman"].items()))
    Path(out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
