"""GPU attention benchmark: tilegen's generated Triton kernels beside torch SDPA (flash, cuDNN) and
FlexAttention, in one run on one GPU.

For every configuration (dtype × head dim D × sequence length N × causal), with B·N = 16384 tokens and
H·D = 2048 (the FlashAttention papers' sizing), it

1. generates and imports the tilegen module for the spec (:func:`tilegen.backends.triton.load`),
2. checks correctness on the first two heads of batch 0, against SDPA's math backend in float32 on
   the same inputs upcast (outputs NaN-poisoned before the run): tilegen's max-abs error on O, dQ, dK, dV
   must not exceed twice that of SDPA flash (cuDNN when flash is unavailable) plus half an ulp at the
   result's scale (DESIGN §3's rule, the same-precision kernel standing in for the plain one),
3. times forward, backward and forward+backward with ``triton.testing.do_bench`` (median of the
   repetitions, milliseconds), for tilegen, SDPA flash, SDPA cuDNN and (``--flex``) compiled
   flex_attention,
4. measures the peak extra memory of one forward+backward (``torch.cuda.max_memory_allocated`` above the
   inputs), and
5. puts the cost model's prediction (:func:`tilegen.models.cost.predict` of the schedule tilegen used) beside
   each measurement.

TFLOP/s: FLOPs = 4·B·H·N²·D for the forward, halved when causal; backward 2.5×, forward+backward 3.5×
(FlashAttention's ``benchmarks/benchmark_flash_attention.py`` convention).

Writes ``gpu_attention.json`` and ``gpu_attention.md`` into ``--out`` (default benchmarks/results/).
``--sweep`` instead times alternative tile sizes and launch knobs (from a JSON list) for one shape and
writes ``gpu_sweep.json``/``.md``.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=. python benchmarks/gpu_attention.py                   # the full table
    PYTHONPATH=. python benchmarks/gpu_attention.py --quick           # one configuration
    PYTHONPATH=. python benchmarks/gpu_attention.py --sweep variants.json --n 4096
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TOKENS = 16384
HIDDEN = 2048


def flops(b, h, n, d, causal):
    """Forward FLOPs: 4·B·H·N²·D, halved when causal."""
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


def make_spec(dtype, d, n, causal, batch=None, heads=None):
    from tilegen.core.spec import AttentionSpec

    h = heads or HIDDEN // d
    b = batch or TOKENS // n
    return AttentionSpec(
        batch=b, heads_q=h, heads_kv=h, seq_q=n, seq_k=n, head_dim_qk=d, head_dim_v=d,
        dtype=dtype, window=(-1, 0) if causal else (-1, -1), name=f"bench_{dtype}_d{d}_n{n}_{'causal' if causal else 'full'}",
    )


def torch_dtype(name):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def inputs(spec, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (spec.batch, spec.heads_q, spec.seq_q, spec.head_dim_qk)
    dt = torch_dtype(spec.dtype)
    q, k, v, do = (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dt) for _ in range(4))
    return q, k, v, do


# --- implementations: each gives fwd(), bwd(), fwdbwd() closures over the same inputs -------------------


class Tilegen:
    name = "tilegen"

    def __init__(self, spec, q, k, v, do, strategy=None, tiles=None, knobs=None):
        from tilegen.backends import triton as tb

        self.fwd_sched, self.bwd_sched = tb.schedule(spec, "h200", strategy, tiles, knobs)
        self.mod = tb.load(spec, "h200", strategy, tiles, knobs)
        self.q, self.k, self.v, self.do = q, k, v, do
        self.o, self.lse = self.mod.forward(q, k, v)

    def fwd(self):
        return self.mod.forward(self.q, self.k, self.v)

    def bwd(self):
        return self.mod.backward(self.q, self.k, self.v, self.o, self.lse, self.do)

    def fwdbwd(self):
        o, lse = self.mod.forward(self.q, self.k, self.v)
        return self.mod.backward(self.q, self.k, self.v, o, lse, self.do)

    def outputs(self):
        o, lse = self.mod.forward(self.q, self.k, self.v, poison=True)
        dq, dk, dv = self.mod.backward(self.q, self.k, self.v, o, lse, self.do, poison=True)
        return o, dq, dk, dv

    def predicted(self):
        out = {}
        for key, sched in (("fwd", self.fwd_sched), ("bwd", self.bwd_sched)):
            pred = sched.log.schedule.prediction
            out[key] = pred.time_s * 1e3
        out["fwdbwd"] = out["fwd"] + out["bwd"]
        return out

    def describe(self):
        return {
            "fwd_tiles": [self.fwd_sched.program.env_map[s] for s in _tile_syms()],
            "bwd_tiles": [self.bwd_sched.program.env_map[s] for s in _tile_syms()],
            "dq_strategy": self.bwd_sched.program.attr("dq_strategy"),
            "knobs": {s.kind: {p: [k.num_warps, k.num_stages] for p, k in s.knobs.items()} for s in (self.fwd_sched, self.bwd_sched)},
        }


def _tile_syms():
    from tilegen.core.ir import Bc, Br

    return (Br, Bc)


class _TorchAutograd:
    """fwd(), bwd(), fwdbwd() and outputs() of a torch attention through autograd; a subclass sets
    q, k, v (leaf tensors), do and o = _run() and defines _run() (one forward)."""

    def fwd(self):
        return self._run()

    def bwd(self):
        import torch

        return torch.autograd.grad(self.o, (self.q, self.k, self.v), self.do, retain_graph=True)

    def fwdbwd(self):
        import torch

        o = self._run()
        return torch.autograd.grad(o, (self.q, self.k, self.v), self.do)

    def outputs(self):
        import torch

        o = self._run()
        dq, dk, dv = torch.autograd.grad(o, (self.q, self.k, self.v), self.do)
        return o, dq, dk, dv


class Sdpa(_TorchAutograd):
    def __init__(self, backend, spec, q, k, v, do, causal):
        from torch.nn.attention import SDPBackend

        self.backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
        self.name = f"sdpa_{backend}"
        self.causal = causal
        self.q, self.k, self.v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        self.do = do
        self.o = self._run()

    def _run(self):
        import torch.nn.functional as F
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(self.backend):
            return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal)


class Flex(_TorchAutograd):
    name = "flex"
    _compiled = None

    def __init__(self, spec, q, k, v, do, causal):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if Flex._compiled is None:
            import torch._dynamo

            torch._dynamo.config.recompile_limit = 256  # one compile per shape; the default 8 falls back to eager
            torch._dynamo.config.accumulated_recompile_limit = 4096
            Flex._compiled = torch.compile(flex_attention, dynamic=False)
        self.block_mask = None
        if causal:
            self.block_mask = create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, spec.seq_q, spec.seq_k, device="cuda")
        self.q, self.k, self.v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        self.do = do
        self.o = self._run()

    def _run(self):
        return Flex._compiled(self.q, self.k, self.v, block_mask=self.block_mask)


# --- measuring -------------------------------------------------------------------------------------------


def bench(fn, warmup, rep):
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def peak_mib(fn):
    """Peak extra device memory of one call of ``fn`` (MiB above what was allocated before)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def check(spec, q, k, v, do, ours, fast):
    """Errors of tilegen and of ``fast`` (an SDPA backend) on heads 0-1 of batch 0 against SDPA math in
    float32; returns per tensor (ours max-abs, fast max-abs, bound, ok)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tilegen.core import dtypes

    causal = spec.mask_kind == "causal"
    sl = (slice(0, 1), slice(0, 2))
    q32, k32, v32 = (x[sl].float().detach().clone().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o_ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal)
    refs = [o_ref, *torch.autograd.grad(o_ref, (q32, k32, v32), do[sl].float())]
    mine = [x[sl].float() for x in ours.outputs()]
    theirs = [x[sl].float() for x in fast.outputs()]
    result = {}
    eps = dtypes.eps(spec.dtype)
    for name, m, t, r in zip(("O", "dQ", "dK", "dV"), mine, theirs, refs):
        r = r.detach()
        finite = bool(torch.isfinite(m).all())
        err = float((m - r).abs().max()) if finite else float("inf")
        ref_err = float((t.detach() - r).abs().max())
        bound = 2 * ref_err + 0.5 * eps * float(r.abs().max())
        result[name] = {"max_abs": err, "rel": float((m - r).norm() / r.norm()), "fast_max_abs": ref_err, "bound": bound, "ok": finite and err <= bound}
    return result


def run_config(spec, args, impls, log):
    import torch

    causal = spec.mask_kind == "causal"
    q, k, v, do = inputs(spec)
    f = flops(spec.batch, spec.heads_q, spec.seq_q, spec.head_dim_qk, causal)
    row = {
        "dtype": spec.dtype, "D": spec.head_dim_qk, "N": spec.seq_q, "B": spec.batch, "H": spec.heads_q, "causal": causal,
        "flops_fwd": f, "results": {},
    }
    objs = {}
    for name in impls:
        t0 = time.time()
        try:
            if name == "tilegen":
                obj = Tilegen(spec, q, k, v, do, args.dq_strategy)
                row["tilegen"] = obj.describe()
                row["predicted_ms"] = obj.predicted()
            elif name.startswith("sdpa_"):
                obj = Sdpa(name[5:], spec, q, k, v, do, causal)
            elif name == "flex":
                obj = Flex(spec, q, k, v, do, causal)
            objs[name] = obj
            res = {}
            for phase, mult in (("fwd", 1.0), ("bwd", 2.5), ("fwdbwd", 3.5)):
                ms = bench(getattr(obj, phase), args.warmup, args.rep)
                res[phase] = {"ms": ms, "tflops": mult * f / (ms * 1e-3) / 1e12}
            res["peak_mib"] = peak_mib(obj.fwdbwd)
            res["setup_s"] = time.time() - t0
            row["results"][name] = res
        except Exception as exc:  # a backend that does not run this configuration
            row["results"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}")
            if args.debug:
                traceback.print_exc()
        torch.cuda.empty_cache()
    if "tilegen" in objs:
        fast = objs.get("sdpa_flash") or objs.get("sdpa_cudnn")
        if fast is not None:
            try:
                row["check"] = check(spec, q, k, v, do, objs["tilegen"], fast)
            except Exception as exc:
                row["check"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        pm = row.get("predicted_ms")
        if pm:
            row["predicted_tflops"] = {"fwd": f / (pm["fwd"] * 1e-3) / 1e12, "bwd": 2.5 * f / (pm["bwd"] * 1e-3) / 1e12, "fwdbwd": 3.5 * f / (pm["fwdbwd"] * 1e-3) / 1e12}
    del objs
    torch.cuda.empty_cache()
    return row


def tf(row, impl, phase):
    r = row["results"].get(impl, {})
    return r[phase]["tflops"] if phase in r else None


def fmt(x, nd=0):
    return "–" if x is None else f"{x:.{nd}f}"


def markdown(rows, meta):
    lines = [
        f"# tilegen Triton kernels vs torch SDPA on {meta['device']}",
        "",
        f"torch {meta['torch']}, triton {meta['triton']}; B·N = {TOKENS}, H·D = {HIDDEN}; `triton.testing.do_bench` medians "
        f"(warm-up {meta['warmup']} ms, {meta['rep']} ms of repetitions); TFLOP/s with FLOPs = 4·B·H·N²·D (½ causal), "
        "backward 2.5×, fwd+bwd 3.5×. pred = the cost model's prediction for tilegen's schedule. check = tilegen's "
        "errors within twice SDPA flash's (vs SDPA math in fp32, heads 0–1 of batch 0).",
        "",
        "| dtype | D | N | causal | tilegen fwd | bwd | f+b | pred f+b | flash fwd | bwd | f+b | cuDNN fwd | bwd | f+b | flex f+b | f+b / flash | f+b / cuDNN | peak MiB tilegen / flash / cuDNN | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours = tf(row, "tilegen", "fwdbwd")
        fl = tf(row, "sdpa_flash", "fwdbwd")
        cu = tf(row, "sdpa_cudnn", "fwdbwd")
        peaks = " / ".join(fmt(row["results"].get(n, {}).get("peak_mib")) for n in ("tilegen", "sdpa_flash", "sdpa_cudnn"))
        chk = row.get("check", {})
        ok = "–" if not chk or "error" in chk else ("ok" if all(v["ok"] for v in chk.values()) else "FAIL " + ",".join(k for k, v in chk.items() if not v["ok"]))
        pred = row.get("predicted_tflops", {}).get("fwdbwd")
        lines.append(
            f"| {row['dtype']} | {row['D']} | {row['N']} | {'yes' if row['causal'] else 'no'} | "
            f"{fmt(tf(row, 'tilegen', 'fwd'))} | {fmt(tf(row, 'tilegen', 'bwd'))} | **{fmt(ours)}** | {fmt(pred)} | "
            f"{fmt(tf(row, 'sdpa_flash', 'fwd'))} | {fmt(tf(row, 'sdpa_flash', 'bwd'))} | {fmt(fl)} | "
            f"{fmt(tf(row, 'sdpa_cudnn', 'fwd'))} | {fmt(tf(row, 'sdpa_cudnn', 'bwd'))} | {fmt(cu)} | {fmt(tf(row, 'flex', 'fwdbwd'))} | "
            f"{fmt(ours / fl if ours and fl else None, 2)} | {fmt(ours / cu if ours and cu else None, 2)} | {peaks} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def meta_info(args):
    import torch
    import triton

    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "warmup": args.warmup,
        "rep": args.rep,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def sweep(args, log):
    """Time alternative schedules: each variant {"program": "fwd"|"bwd", "strategy", "D", "tiles": [Br, Bc],
    "knobs": {phase: [warps, stages]}, "causal"} at N = --n."""
    import torch

    variants = json.loads(Path(args.sweep).read_text())
    out = []
    for var in variants:
        spec = make_spec(var.get("dtype", "bf16"), var["D"], args.n, var.get("causal", False))
        f = flops(spec.batch, spec.heads_q, spec.seq_q, spec.head_dim_qk, spec.mask_kind == "causal")
        q, k, v, do = inputs(spec)
        rec = dict(var)
        t0 = time.time()
        try:
            prog = var["program"]
            tiles = {prog: tuple(var["tiles"])} if var.get("tiles") else None
            obj = Tilegen(spec, q, k, v, do, var.get("strategy"), tiles, var.get("knobs"))
            phase = "fwd" if prog == "fwd" else "bwd"
            ms = bench(getattr(obj, phase), args.warmup, args.rep)
            rec["ms"] = ms
            rec["tflops"] = (1.0 if phase == "fwd" else 2.5) * f / (ms * 1e-3) / 1e12
            rec["setup_s"] = time.time() - t0
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        log(json.dumps(rec))
        out.append(rec)
        del q, k, v, do
        torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_sweep.json").write_text(json.dumps({"meta": meta_info(args), "n": args.n, "variants": out}, indent=1) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(HERE / "results"), help="folder for gpu_attention.json/.md")
    parser.add_argument("--quick", action="store_true", help="one configuration (bf16, D 128, N 4096, causal)")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"])
    parser.add_argument("--dims", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--seqs", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--causal", nargs="+", default=["no", "yes"])
    parser.add_argument("--impls", nargs="+", default=["tilegen", "sdpa_flash", "sdpa_cudnn"])
    parser.add_argument("--flex", action="store_true", help="also compiled flex_attention (bf16 rows only)")
    parser.add_argument("--flex-dims", nargs="+", type=int, default=[64, 128], help="head dims that get flex_attention")
    parser.add_argument("--flex-budget", type=float, default=240.0, help="seconds of flex compile+timing before skipping it")
    parser.add_argument("--dq-strategy", default=None, help="atomic or separate (default: the target's)")
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--sweep", default=None, help="a JSON list of variants to time instead of the table")
    parser.add_argument("--n", type=int, default=4096, help="sequence length for --sweep")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    if args.sweep:
        sweep(args, log)
        return 0
    if args.quick:
        args.dtypes, args.dims, args.seqs, args.causal = ["bf16"], [128], [4096], ["yes"]
    rows = []
    flex_spent = 0.0
    for dtype in args.dtypes:
        for d in args.dims:
            for n in args.seqs:
                for c in args.causal:
                    spec = make_spec(dtype, d, n, c == "yes")
                    impls = list(args.impls)
                    if args.flex and dtype == "bf16" and d in args.flex_dims and flex_spent < args.flex_budget:
                        impls.append("flex")
                    t0 = time.time()
                    row = run_config(spec, args, impls, log)
                    if "flex" in row["results"]:
                        flex_spent += row["results"]["flex"].get("setup_s", 0.0)
                    rows.append(row)
                    write_results(args, rows)  # after every row, so a run cut short keeps what it measured
                    log(
                        f"{dtype} D={d} N={n} causal={c}: tilegen f+b {fmt(tf(row, 'tilegen', 'fwdbwd'))} "
                        f"(fwd {fmt(tf(row, 'tilegen', 'fwd'))}, bwd {fmt(tf(row, 'tilegen', 'bwd'))}), flash {fmt(tf(row, 'sdpa_flash', 'fwdbwd'))}, "
                        f"cudnn {fmt(tf(row, 'sdpa_cudnn', 'fwdbwd'))}, flex {fmt(tf(row, 'flex', 'fwdbwd'))}; "
                        f"check {json.dumps({k: v['ok'] for k, v in row.get('check', {}).items() if isinstance(v, dict)})}; {time.time() - t0:.0f} s"
                    )
    print(write_results(args, rows))
    return 0


def write_results(args, rows):
    """Write gpu_attention.json and .md into --out; returns the Markdown."""
    meta = meta_info(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_attention.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    md = markdown(rows, meta)
    (out / "gpu_attention.md").write_text(md)
    return md


if __name__ == "__main__":
    raise SystemExit(main())
