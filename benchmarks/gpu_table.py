"""One table on one GPU: tilegen through its user path beside SDPA flash, SDPA cuDNN and compiled
flex_attention, forward, backward and forward+backward, MHA and GQA, plus the per-call row.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=. python benchmarks/gpu_table.py            # the full table (fits one 10-minute call)
    PYTHONPATH=. python benchmarks/gpu_table.py --quick    # three rows and the per-call row (~2 min)

Paths (each through autograd, inputs leaves with requires_grad):
- tilegen: ``tilegen.torch.scaled_dot_product_attention(q, k, v, is_causal=, enable_gqa=)`` (BNSD; its
  per-call fast path after the first call), the ``h200`` target's schedule;
- flash, cuDNN: ``torch.nn.functional.scaled_dot_product_attention`` under ``sdpa_kernel(FLASH_ATTENTION)``
  / ``sdpa_kernel(CUDNN_ATTENTION)``, ``enable_gqa=True`` on GQA rows (a backend that refuses a row
  gets "–" and its error in the JSON);
- Flex: ``torch.compile(flex_attention, dynamic=False)``, a causal ``BlockMask`` on causal rows,
  ``enable_gqa=True`` on GQA rows.

Rows: fp16 and bf16, D 64 and 128, N 1k / 4k / 16k, non-causal and causal (top-left, Sq = Sk), MHA
(Hkv = H) and GQA (Hkv = H/8), with B·N = 16384 tokens and H·D = 2048 (the FlashAttention papers'
sizing). TFLOP/s: forward FLOPs 4·B·H·N²·D, halved when causal; backward 2.5×, forward+backward 3.5×
(FlashAttention's ``benchmarks/benchmark_flash_attention.py`` convention). Times: medians of CUDA-event
timings (``triton.testing.do_bench``, L2 flushed between repetitions).

Correctness, per row and path: O, dQ, dK, dV on batch 0, query heads 0..max(2, G)−1 (all heads of KV
head 0 on GQA rows) against SDPA's math backend in float32 on the same inputs upcast; the table gives
tilegen's and flash's largest max-abs error over the four tensors, and ``ok`` when tilegen's is within
twice flash's plus half an ulp at the result's scale (the rule of benchmarks/gpu_attention.py).

Per-call row: the tiny problem 1×1×128×64 bf16 causal, µs per forward and per forward+backward of each
path: CUDA events around a loop of ``--calls`` back-to-back calls, divided by the count; median of 7
loops. A call this small is bound by the host (Python, dispatch, launches), not by the GPU.

Budget: rows run in the order of :func:`rows` (the per-call row first, then bf16, then fp16) until
``--budget`` seconds have passed (the rest are listed as skipped); Flex's compilations (about 20–30 s
per shape) stop once they have taken ``--flex-budget`` seconds. ``--dtypes`` and ``--heads`` select a
subset, so that a second 10-minute call can fill the rest (``--stem`` names its files). Without CUDA
the script prints one line and exits with status 2.

Writes ``gpu_table.json`` and ``gpu_table.md`` into ``--out`` (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from gpu_attention import bench, flops  # noqa: E402  do_bench medians; FLOPs 4·B·H·N²·D (½ causal)

TOKENS = 16384
HIDDEN = 2048
GQA_GROUP = 8
IMPLS = ("tilegen", "flash", "cudnn", "flex")
PHASES = (("fwd", 1.0), ("bwd", 2.5), ("fwdbwd", 3.5))


def rows(quick: bool, dtypes=("bf16", "fp16"), heads=("mha", "gqa")) -> list[dict]:
    """The table's rows in run order: bf16 first (MHA D 128, D 64, then GQA), then fp16; ``dtypes``
    and ``heads`` keep a subset (a second call can run the rest)."""
    if quick:
        return [
            dict(dtype="bf16", d=128, n=4096, causal=False, gqa=False),
            dict(dtype="bf16", d=128, n=4096, causal=True, gqa=False),
            dict(dtype="bf16", d=64, n=4096, causal=True, gqa=True),
        ]
    out = []
    for dtype in dtypes:
        for gqa in [g for g, name in ((False, "mha"), (True, "gqa")) if name in heads]:
            for d in (128, 64):
                for n in (1024, 4096, 16384):
                    for causal in (False, True):
                        out.append(dict(dtype=dtype, d=d, n=n, causal=causal, gqa=gqa))
    return out


def shape(row: dict) -> tuple[int, int, int]:
    """(B, H, Hkv) of a row: B·N = 16384, H·D = 2048, Hkv = H/8 on GQA rows."""
    h = HIDDEN // row["d"]
    return TOKENS // row["n"], h, h // GQA_GROUP if row["gqa"] else h


def make_inputs(b, h, hkv, n, d, dtype, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]

    def rnd(heads):
        return torch.randn((b, heads, n, d), generator=g, device="cuda", dtype=torch.float32).to(dt)

    return rnd(h), rnd(hkv), rnd(hkv), rnd(h)


class Impl:
    """One attention path on one row: fwd(), bwd(), fwdbwd(), outputs() through autograd."""

    def __init__(self, impl: str, q, k, v, do, causal: bool, gqa: bool):
        self.impl, self.causal, self.gqa = impl, causal, gqa
        self.q, self.k, self.v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        self.do = do
        self.block_mask = None
        if impl == "flex":
            self._flex_setup()
        self.o = self.run()

    _flex = None

    def _flex_setup(self):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if Impl._flex is None:
            import torch._dynamo

            torch._dynamo.config.recompile_limit = 256  # one compile per shape; the default 8 falls back to eager
            torch._dynamo.config.accumulated_recompile_limit = 4096
            Impl._flex = torch.compile(flex_attention, dynamic=False)
        if self.causal:
            n = self.q.shape[2]
            self.block_mask = create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, n, n, device="cuda")

    def run(self):
        import torch.nn.functional as F

        if self.impl == "tilegen":
            import tilegen.torch as tt

            return tt.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=self.gqa)
        if self.impl == "flex":
            return Impl._flex(self.q, self.k, self.v, block_mask=self.block_mask, enable_gqa=self.gqa)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[self.impl]
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=self.gqa)

    def fwd(self):
        return self.run()

    def bwd(self):
        import torch

        return torch.autograd.grad(self.o, (self.q, self.k, self.v), self.do, retain_graph=True)

    def fwdbwd(self):
        import torch

        return torch.autograd.grad(self.run(), (self.q, self.k, self.v), self.do)

    def outputs(self):
        import torch

        o = self.run()
        return [o.detach(), *torch.autograd.grad(o, (self.q, self.k, self.v), self.do)]


def reference(q, k, v, do, causal, gqa):
    """O, dQ, dK, dV of SDPA math in float32 on batch 0, query heads 0..max(2, G)−1 and their KV heads."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = q.shape[1] // k.shape[1]
    hq = max(2, g)
    hk = max(1, hq // g)
    sl_q, sl_k = (slice(0, 1), slice(0, hq)), (slice(0, 1), slice(0, hk))
    xs = [x[s].float().detach().clone().requires_grad_(True) for x, s in ((q, sl_q), (k, sl_k), (v, sl_k))]
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(*xs, is_causal=causal, enable_gqa=gqa)
    grads = torch.autograd.grad(o, xs, do[sl_q].float())
    return [o.detach(), *grads], (sl_q, sl_k, sl_k)


def errors(path: Impl, ref, slices) -> dict:
    """Max-abs error of each of O, dQ, dK, dV of ``path`` on the reference's slice."""
    outs = path.outputs()
    res = {}
    for name, x, r, s in zip(("O", "dQ", "dK", "dV"), outs, ref, (slices[0], *slices)):
        x = x[s].float()
        res[name] = float((x - r).abs().max()) if bool(x.isfinite().all()) else float("inf")
    return res


def run_row(row, args, state, log) -> dict:
    import torch

    b, h, hkv = shape(row)
    n, d = row["n"], row["d"]
    q, k, v, do = make_inputs(b, h, hkv, n, d, row["dtype"])
    f = flops(b, h, n, d, row["causal"])
    rec = {**row, "B": b, "H": h, "Hkv": hkv, "flops_fwd": f, "results": {}}
    ref, slices = reference(q, k, v, do, row["causal"], row["gqa"])
    for impl in IMPLS:
        if impl == "flex" and (args.no_flex or state["flex_s"] > args.flex_budget):
            rec["results"][impl] = {"error": "skipped (--no-flex or Flex's compile budget spent)"}
            continue
        t0 = time.time()
        try:
            path = Impl(impl, q, k, v, do, row["causal"], row["gqa"])
            res = {}
            for phase, mult in PHASES:
                ms = bench(getattr(path, phase), args.warmup, args.rep)
                res[phase] = {"ms": ms, "tflops": mult * f / (ms * 1e-3) / 1e12}
            res["max_abs"] = errors(path, ref, slices)
            res["setup_s"] = time.time() - t0
            rec["results"][impl] = res
            del path
        except Exception as exc:  # a backend that does not run this row
            rec["results"][impl] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"  {impl}: {type(exc).__name__}: {str(exc)[:160]}")
            if args.debug:
                traceback.print_exc()
        if impl == "flex":
            state["flex_s"] += time.time() - t0
        torch.cuda.empty_cache()
    ours, fl = rec["results"].get("tilegen", {}), rec["results"].get("flash", {})
    rec["check"] = check_ok(ours["max_abs"], fl["max_abs"], ref, row["dtype"]) if "max_abs" in ours and "max_abs" in fl else "–"
    return rec


def check_ok(ours: dict, flash: dict, ref, dtype: str) -> str:
    """"ok" when each of O, dQ, dK, dV's max-abs errors in ``ours`` is within twice flash's plus half an
    ulp of ``dtype`` at the reference's scale (the rule of benchmarks/gpu_attention.py), else "FAIL"."""
    from tilegen.core import dtypes

    eps = dtypes.eps(dtype)
    ok = all(ours[t] <= 2 * flash[t] + 0.5 * eps * float(r.abs().max()) for t, r in zip(("O", "dQ", "dK", "dV"), ref))
    return "ok" if ok else "FAIL"


def loop_us(fn, calls: int) -> float:
    """µs per call of ``calls`` back-to-back calls of ``fn``, CUDA events around the loop."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def per_call(args, state, log, rounds: int = 15) -> dict:
    """µs per forward and per forward+backward of each path on 1×1×128×64 bf16 causal, each path's
    outputs first checked as a row's (``max_abs`` after the warm-up, ``check`` of tilegen). The paths are
    timed interleaved: in each of ``rounds`` rounds every path runs one loop of ``args.calls`` calls per
    phase, the order rotating from round to round, so that a slow spell of the host falls on all of them.
    Per path and phase: the median over the rounds (``fwd_us``, ``fwdbwd_us``) and, against SDPA flash,
    the median, lowest and highest of the per-round ratios (``fwd_vs_flash``: [median, min, max])."""
    q, k, v, do = make_inputs(1, 1, 1, 128, 64, "bf16")
    ref, slices = reference(q, k, v, do, True, False)
    paths, out = {}, {}
    for impl in IMPLS:
        if impl == "flex" and args.no_flex:
            continue
        t0 = time.time()
        try:
            path = Impl(impl, q, k, v, do, True, False)
            for phase in ("fwd", "fwdbwd"):
                for _ in range(20):
                    getattr(path, phase)()
            out[impl] = {"max_abs": errors(path, ref, slices)}  # after the warm-up: a plan-cache hit
            paths[impl] = path
        except Exception as exc:
            out[impl] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"  per-call {impl}: {type(exc).__name__}: {str(exc)[:160]}")
        if impl == "flex":
            state["flex_s"] += time.time() - t0
    times = {(impl, phase): [] for impl in paths for phase in ("fwd", "fwdbwd")}
    order = list(paths)
    for r in range(rounds):
        for impl in order[r % len(order):] + order[: r % len(order)]:
            for phase in ("fwd", "fwdbwd"):
                times[impl, phase].append(loop_us(getattr(paths[impl], phase), args.calls))
    for impl in paths:
        res = {**out[impl], **{f"{phase}_us": statistics.median(times[impl, phase]) for phase in ("fwd", "fwdbwd")}}
        if "flash" in paths:
            for phase in ("fwd", "fwdbwd"):
                ratios = [a / b for a, b in zip(times[impl, phase], times["flash", phase])]
                res[f"{phase}_vs_flash"] = [statistics.median(ratios), min(ratios), max(ratios)]
        res["rounds"] = rounds
        out[impl] = res
    if "max_abs" in out.get("tilegen", {}) and "max_abs" in out.get("flash", {}):
        out["check"] = check_ok(out["tilegen"]["max_abs"], out["flash"]["max_abs"], ref, "bf16")
    try:
        import tilegen.torch as tt

        out["tilegen_plan_stats"] = dict(tt.PLAN_STATS)
    except Exception:
        pass
    return out


# --- the table -------------------------------------------------------------------------------------------


def _tf(rec, impl, phase):
    r = rec["results"].get(impl, {})
    return r[phase]["tflops"] if phase in r else None


def _fmt(x, nd=0):
    return "–" if x is None else f"{x:.{nd}f}"


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def markdown(table: list[dict], call: dict, meta: dict) -> str:
    lines = [
        f"# tilegen beside SDPA flash, SDPA cuDNN and Flex on {meta.get('device', '?')}",
        "",
        f"torch {meta.get('torch')}, Triton {meta.get('triton')}; `{meta.get('command')}`; {meta.get('date')}. "
        "TFLOP/s as fwd / bwd / f+b (FLOPs 4·B·H·N²·D forward, halved when causal; bwd 2.5×, f+b 3.5×), "
        "B·N = 16384, H·D = 2048, GQA: Hkv = H/8; medians of CUDA-event timings. Ratios on f+b. "
        "err: largest max-abs error of O, dQ, dK, dV against SDPA math in fp32, tilegen / flash; "
        "check: tilegen's within 2 × flash's + ½ ulp.",
        "",
        "| dtype | D | N | causal | heads | tilegen | flash | cuDNN | Flex | / Flex | / cuDNN | / flash | err tilegen / flash | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in table:
        if "skipped" in rec:
            continue
        cells = []
        for impl in IMPLS:
            vals = [_tf(rec, impl, p) for p, _ in PHASES]
            cells.append("–" if all(x is None for x in vals) else " / ".join(_fmt(x) for x in vals))
        t = _tf(rec, "tilegen", "fwdbwd")
        ratios = [_fmt(_ratio(t, _tf(rec, other, "fwdbwd")), 2) for other in ("flex", "cudnn", "flash")]
        errs = [max(rec["results"].get(i, {}).get("max_abs", {}).values(), default=None) for i in ("tilegen", "flash")]
        lines.append(
            f"| {rec['dtype']} | {rec['d']} | {rec['n'] // 1024}k | {'yes' if rec['causal'] else 'no'} | "
            f"{'GQA' if rec['gqa'] else 'MHA'} {rec['H']}/{rec['Hkv']} | " + " | ".join(cells) + " | " + " | ".join(ratios)
            + f" | {_fmt(errs[0], 4)} / {_fmt(errs[1], 4)} | {rec.get('check', '–')} |"
        )
    skipped = [r for r in table if "skipped" in r]
    if skipped:
        lines += ["", f"{len(skipped)} rows skipped ({skipped[0]['skipped']}): "
                  + ", ".join(f"{r['dtype']} D{r['d']} N{r['n'] // 1024}k {'causal' if r['causal'] else 'full'} {'GQA' if r['gqa'] else 'MHA'}" for r in skipped)]
    if call:
        lines += [
            "",
            "Per-call row: 1×1×128×64 bf16 causal, µs per call (CUDA events around back-to-back calls), the paths "
            "timed interleaved round by round: medians over the rounds; the ratios to SDPA flash are the medians "
            "of the per-round ratios [lowest, highest]. tilegen / SDPA flash is the per-call goal's ratio (≤ 1.3).",
            "",
            "| path | fwd µs | fwd+bwd µs | fwd / flash | fwd+bwd / flash | max abs err (O, dQ, dK, dV) |",
            "|---|---|---|---|---|---|",
        ]
        base = call.get("flash", {})
        for impl in IMPLS:
            r = call.get(impl)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {impl} | – | – | – | – | – |")
                continue
            def ratio(phase):
                if f"{phase}_vs_flash" in r:
                    med, lo, hi = r[f"{phase}_vs_flash"]
                    return f"{med:.2f} [{lo:.2f}, {hi:.2f}]"
                return _fmt(_ratio(r[f"{phase}_us"], base.get(f"{phase}_us")), 2)

            err = max(r.get("max_abs", {}).values(), default=None)
            lines.append(f"| {impl} | {r['fwd_us']:.1f} | {r['fwdbwd_us']:.1f} | {ratio('fwd')} | {ratio('fwdbwd')} | {_fmt(err, 4)} |")
        lines += ["", f"Per-call check (tilegen against twice SDPA flash's error, as the rows): {call.get('check', '–')}"]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="tilegen beside SDPA flash, cuDNN and Flex on one GPU: one table")
    ap.add_argument("--quick", action="store_true", help="three rows and the per-call row (about 2 minutes)")
    ap.add_argument("--budget", type=float, default=None, help="seconds for all rows (default 480, --quick 100)")
    ap.add_argument("--flex-budget", type=float, default=None, help="seconds of Flex compilation (default 200, --quick 60)")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"], choices=["bf16", "fp16"], help="full run: the dtypes, in run order")
    ap.add_argument("--heads", nargs="+", default=["mha", "gqa"], choices=["mha", "gqa"], help="full run: MHA and/or GQA rows")
    ap.add_argument("--no-per-call", action="store_true", help="leave out the per-call row")
    ap.add_argument("--stem", default=None, help="output file stem (default gpu_table, gpu_table_quick with --quick)")
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetitions, ms")
    ap.add_argument("--calls", type=int, default=100, help="calls per timed loop of the per-call row")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    if args.budget is None:
        args.budget = 100.0 if args.quick else 480.0
    if args.flex_budget is None:
        args.flex_budget = 60.0 if args.quick else 200.0
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_table: needs torch with CUDA (torch cannot be imported)")
        return 2
    if not torch.cuda.is_available():
        print("gpu_table: needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    import platform

    import triton

    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.1f} s] {msg}", flush=True)

    meta = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python benchmarks/gpu_table.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "warmup_ms": args.warmup, "rep_ms": args.rep, "budget_s": args.budget, "flex_budget_s": args.flex_budget,
    }
    state = {"flex_s": 0.0}
    call = {} if args.no_per_call else per_call(args, state, log)
    log("per-call: " + ", ".join(f"{i} {r.get('fwd_us', float('nan')):.0f}/{r.get('fwdbwd_us', float('nan')):.0f} us"
                                 for i, r in call.items() if i in IMPLS))
    table = []
    for row in rows(args.quick, args.dtypes, args.heads):
        if time.time() - t_start > args.budget:
            table.append({**row, "skipped": f"the {args.budget:.0f} s budget was spent"})
            continue
        rec = run_row(row, args, state, log)
        table.append(rec)
        t = rec["results"]["tilegen"]
        log(f"{row['dtype']} D{row['d']} N{row['n']} {'causal' if row['causal'] else 'full'} {'GQA' if row['gqa'] else 'MHA'}: "
            + ", ".join(f"{i} {_fmt(_tf(rec, i, 'fwdbwd'))}" for i in IMPLS) + f" TFLOP/s f+b; check {rec['check']}"
            + ("" if "error" not in t else f" (tilegen: {t['error'][:80]})"))
    meta["wall_s"] = time.time() - t_start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.stem or ("gpu_table_quick" if args.quick else "gpu_table")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "per_call": call, "rows": table}, indent=1) + "\n")
    md = markdown(table, call, meta)
    (out / f"{stem}.md").write_text(md)
    print(md)
    log(f"wrote {out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
