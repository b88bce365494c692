"""GPU benchmark of score/mask mods (issue 13): tilegen's generated Triton kernels beside compiled
``torch.nn.attention.flex_attention`` with the same mods, in one run on one GPU.

Rows (bf16, B = 1, N = 16384 tokens, H·D = 2048, D = 64 and 128; the FlashAttention papers' sizing):

==============  =====================================================================================
``softcap``     causal, score′ = 50·tanh(score/50) (Gemma-2's attn_logit_softcapping)
``alibi``       causal, score′ = score − slope_h·|q − kv| with slopes 2^(−8(h+1)/H) (Press et al.), the
                slopes' gradient computed by both (tilegen: per-tile partials reduced in a fixed
                order; flex: autograd of the captured tensor)
``doc4``        document ∧ causal, 4 documents of seeded random lengths packed in the 16k batch
``doc16``       the same with 16 documents
``window1024``  causal sliding window of 1024 keys (tilegen: the spec's window fast path)
==============  =====================================================================================

For every row it generates and imports the tilegen module (:func:`tilegen.backends.triton.load`),
builds flex's BlockMask (``create_block_mask``) and score_mod, checks both on batch 0, head 0 against a
dense float32 torch computation of the same mods (O, dQ, dK, dV, and the slope of head 0 for ALiBi):
tilegen's max-abs error must not exceed twice flex's plus half an ulp of bf16 at the result's scale,
then times forward, backward and forward+backward with ``triton.testing.do_bench`` (medians, ms) and
prints the table: milliseconds, flex/tilegen speed-up, and the fraction of (Q, K/V) tile pairs
tilegen's block lists visit in its forward (with a document mask, time should follow it).

Writes ``mods_gpu.json`` and ``mods_gpu.md`` into ``--out`` (default benchmarks/results/).

Usage (on the GPU machine, from the repository root; torch 2.11, triton 3.6):
    PYTHONPATH=. python benchmarks/mods_gpu.py                         # every row
    PYTHONPATH=. python benchmarks/mods_gpu.py --mods doc4 doc16 --dims 128
    PYTHONPATH=. python benchmarks/mods_gpu.py --list                  # the rows and tilegen's schedules (CPU)
    PYTHONPATH=. python benchmarks/mods_gpu.py --compile-only --dims 64  # compile every kernel for sm_90 (CPU: ptxas)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

TOKENS = 16384
HIDDEN = 2048
SOFTCAP = 50.0
WINDOW = 1024
MODS = ("softcap", "alibi", "doc4", "doc16", "window1024")


def doc_ids(n: int, docs: int, seed: int = 0):
    """int32 [n] document ids: ``docs`` documents of random lengths (at least n / (4·docs) tokens
    each), seeded, in order."""
    import numpy as np

    rng = np.random.default_rng(seed + docs)
    cuts = np.sort(rng.choice(np.arange(1, 4 * docs), size=docs - 1, replace=False)) * n // (4 * docs)
    lengths = np.diff(np.concatenate([[0], cuts, [n]]))
    return np.repeat(np.arange(docs), lengths).astype(np.int32)


def alibi_slopes(h: int):
    """Press et al.'s slopes for a power-of-two head count: 2^(−8(i+1)/H), float32 [H]."""
    import numpy as np

    return np.array([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=np.float32)


class Row:
    """One configuration: the tilegen spec and parameter arrays, and the same mods for flex and for
    the dense torch check (functions of broadcast index tensors)."""

    def __init__(self, mod: str, d: int, n: int = TOKENS):
        from tilegen.core import mods as M
        from tilegen.core.spec import AttentionSpec

        self.mod, self.d, self.n, self.h = mod, d, n, HIDDEN // d
        self.arrays = {}
        window = (-1, 0)
        score = mask = None
        if mod == "softcap":
            score = M.softcap(SOFTCAP)
        elif mod == "alibi":
            score = M.alibi(alibi_slopes(self.h))
        elif mod.startswith("doc"):
            mask = M.document(doc_ids(n, int(mod[3:])))
        elif mod == "window1024":
            window = (WINDOW, 0)
        else:
            raise SystemExit(f"--mods {mod!r} is invalid; accepted: {', '.join(MODS)}")
        score_text, mask_text, decls, _, arrays = M.mods_from_api(score, mask)
        self.arrays = {k: v for k, v in arrays.items()}
        self.spec = AttentionSpec(
            name=f"mods_{mod}_d{d}_n{n}", batch=1, heads_q=self.h, heads_kv=self.h, seq_q=n, seq_k=n, head_dim_qk=d, head_dim_v=d,
            dtype="bf16", window=window, score_mod=score_text, mask_mod=mask_text, params=decls,
        )

    # the mods as torch functions (flex's signature; the dense check uses the same ones)
    def score_fn(self, tensors):
        if self.mod == "softcap":
            return lambda s, b, h, q, kv: SOFTCAP * torch_tanh(s / SOFTCAP)
        if self.mod == "alibi":
            slopes = tensors["alibi_slopes"]
            return lambda s, b, h, q, kv: s - slopes[h] * (q - kv).abs()
        return None

    def mask_fn(self, tensors):
        if self.mod.startswith("doc"):
            doc = tensors["doc"]
            return lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv)
        if self.mod == "window1024":
            return lambda b, h, q, kv: (q >= kv) & (q - kv <= WINDOW)
        return lambda b, h, q, kv: q >= kv


def torch_tanh(x):
    import torch

    return torch.tanh(x)


def inputs(row, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (1, row.h, row.n, row.d)
    q, k, v, do = (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16) for _ in range(4))
    params = {}
    for name, a in row.arrays.items():
        t = torch.as_tensor(a).cuda()
        params[name] = t
    return q, k, v, do, params


class Tilegen:
    name = "tilegen"

    def __init__(self, row, q, k, v, do, params):
        from tilegen.backends import triton as tb

        self.fwd_sched, self.bwd_sched = tb.schedule(row.spec, "h200")
        self.mod = tb.load(row.spec, "h200")
        self.q, self.k, self.v, self.do, self.params = q, k, v, do, params
        self.kw = {"params": params} if row.spec.mods is not None else {}  # no mods: the plain module
        self.o, self.lse = self.mod.forward(q, k, v, **self.kw)

    def fwd(self):
        return self.mod.forward(self.q, self.k, self.v, **self.kw)

    def bwd(self):
        return self.mod.backward(self.q, self.k, self.v, self.o, self.lse, self.do, **self.kw)

    def fwdbwd(self):
        o, lse = self.mod.forward(self.q, self.k, self.v, **self.kw)
        return self.mod.backward(self.q, self.k, self.v, o, lse, self.do, **self.kw)

    def outputs(self):
        o, lse = self.mod.forward(self.q, self.k, self.v, poison=True, **self.kw)
        out = self.mod.backward(self.q, self.k, self.v, o, lse, self.do, poison=True, **self.kw)
        grads = out[3] if len(out) > 3 else {}
        return [o, *out[:3]], grads

    def visited(self):
        """Fraction of the (Q tile, K/V tile) pairs the forward visits (1 without a mask mod: the window
        fast path's loop bounds, counted from the schedule's tile sizes)."""
        env = self.fwd_sched.program.env_map
        from tilegen.core.ir import Bc, Br

        nq, nk = math.ceil(self.q.shape[2] / env[Br]), math.ceil(self.k.shape[2] / env[Bc])
        if not hasattr(self.mod, "block_lists"):
            return None
        lists = self.mod.block_lists("fwd", self.q, **self.kw)
        return float(lists["BM_kvn"].sum()) / (lists["BM_kvn"].numel() * nk) if nq else None

    def describe(self):
        from tilegen.core.ir import Bc, Br

        return {
            "fwd_tiles": [self.fwd_sched.program.env_map[s] for s in (Br, Bc)],
            "bwd_tiles": [self.bwd_sched.program.env_map[s] for s in (Br, Bc)],
            "dq_strategy": self.bwd_sched.program.attr("dq_strategy"),
        }


_COMPILED = []


def compiled_flex():
    """``torch.compile(flex_attention, dynamic=False)``, made once per process, with dynamo's recompile
    limits raised for the many shapes and mods of one run."""
    if not _COMPILED:
        import torch
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention

        torch._dynamo.config.recompile_limit = 256
        torch._dynamo.config.accumulated_recompile_limit = 4096
        _COMPILED.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED[0]


class Flex:
    name = "flex"

    def __init__(self, row, q, k, v, do, params):
        from torch.nn.attention.flex_attention import create_block_mask

        self.tensors = {n: (p.float().clone().requires_grad_(True) if p.is_floating_point() else p) for n, p in params.items()}
        self.block_mask = create_block_mask(lambda b, h, q_, kv: row.mask_fn(self.tensors)(b, h, q_, kv), None, None, row.n, row.n, device="cuda")
        self.score_mod = row.score_fn(self.tensors)
        self.q, self.k, self.v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        self.leaves = (self.q, self.k, self.v, *(t for t in self.tensors.values() if t.requires_grad))
        self.do = do
        self.o = self._run()

    def _run(self):
        return compiled_flex()(self.q, self.k, self.v, score_mod=self.score_mod, block_mask=self.block_mask)

    def fwd(self):
        return self._run()

    def bwd(self):
        import torch

        return torch.autograd.grad(self.o, self.leaves, self.do, retain_graph=True)

    def fwdbwd(self):
        import torch

        return torch.autograd.grad(self._run(), self.leaves, self.do)

    def outputs(self):
        import torch

        o = self._run()
        g = torch.autograd.grad(o, self.leaves, self.do)
        names = [n for n, t in self.tensors.items() if t.requires_grad]
        return [o, *g[:3]], dict(zip(names, g[3:]))


def dense_reference(row, q, k, v, do, params):
    """O, dQ, dK, dV (and the float parameters' gradients) of batch 0, head 0 in float32 with the mods
    written in torch: the truth both implementations are measured against."""
    import torch

    sl = (slice(0, 1), slice(0, 1))
    xs = [x[sl].float().detach().clone().requires_grad_(True) for x in (q, k, v)]
    tensors = {n: (p.float().clone().requires_grad_(True) if p.is_floating_point() else p) for n, p in params.items()}
    n, dev = row.n, q.device
    qi = torch.arange(n, device=dev).view(1, 1, n, 1)
    ki = torch.arange(n, device=dev).view(1, 1, 1, n)
    b0 = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=dev)
    h0 = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=dev)
    s = (xs[0] @ xs[1].transpose(-1, -2)) * (1.0 / math.sqrt(row.d))
    fn = row.score_fn(tensors)
    if fn is not None:
        s = fn(s, b0, h0, qi, ki)
    s = s.masked_fill(~row.mask_fn(tensors)(b0, h0, qi, ki), float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = p @ xs[2]
    leaves = [*xs, *(t for t in tensors.values() if t.requires_grad)]
    grads = torch.autograd.grad(o, leaves, do[sl].float())
    names = [nm for nm, t in tensors.items() if t.requires_grad]
    return [o.detach(), *grads[:3]], {nm: g[0:1] for nm, g in zip(names, grads[3:])}


def check(row, q, k, v, do, params, ours, flex):
    """Per tensor: tilegen's and flex's max-abs error against :func:`dense_reference` on batch 0, head 0,
    and whether tilegen's is within 2·flex's + half a bf16 ulp at the result's scale."""
    from tilegen.core import dtypes

    ref, ref_p = dense_reference(row, q, k, v, do, params)
    mine, mine_p = ours.outputs()
    theirs, theirs_p = flex.outputs()
    sl = (slice(0, 1), slice(0, 1))
    out = {}
    pairs = [(n, m[sl].float(), t[sl].float(), r) for n, m, t, r in zip(("O", "dQ", "dK", "dV"), mine, theirs, ref)]
    for name in ref_p:
        pairs.append(("d" + name, mine_p[name][0:1].float(), theirs_p[name][0:1].float(), ref_p[name]))
    eps = dtypes.eps("bf16")
    for name, m, t, r in pairs:
        finite = bool(m.isfinite().all())
        err = float((m - r).abs().max()) if finite else float("inf")
        flex_err = float((t - r).abs().max())
        bound = 2 * flex_err + 0.5 * eps * float(r.abs().max())
        out[name] = {"max_abs": err, "flex_max_abs": flex_err, "bound": bound, "ok": finite and err <= bound}
    return out


def bench(fn, warmup, rep):
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def run_row(row, args, log):
    import torch

    q, k, v, do, params = inputs(row)
    rec = {"mod": row.mod, "D": row.d, "N": row.n, "H": row.h, "results": {}}
    objs = {}
    for cls in (Tilegen, Flex):
        t0 = time.time()
        try:
            obj = cls(row, q, k, v, do, params)
            objs[cls.name] = obj
            res = {phase: bench(getattr(obj, phase), args.warmup, args.rep) for phase in ("fwd", "bwd", "fwdbwd")}
            res["setup_s"] = time.time() - t0
            rec["results"][cls.name] = res
        except Exception as exc:
            rec["results"][cls.name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"  {cls.name}: {type(exc).__name__}: {str(exc)[:300]}")
            if args.debug:
                traceback.print_exc()
        torch.cuda.empty_cache()
    if "tilegen" in objs:
        rec["tilegen"] = objs["tilegen"].describe()
        try:
            rec["visited"] = objs["tilegen"].visited()
        except Exception as exc:
            rec["visited_error"] = f"{type(exc).__name__}: {exc}"
        if "flex" in objs and not args.no_check:
            try:
                rec["check"] = check(row, q, k, v, do, params, objs["tilegen"], objs["flex"])
            except Exception as exc:
                rec["check"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                if args.debug:
                    traceback.print_exc()
    del objs
    torch.cuda.empty_cache()
    return rec


def ms(rec, impl, phase):
    r = rec["results"].get(impl, {})
    return r.get(phase)


def fmt(x, nd=2):
    return "–" if x is None else f"{x:.{nd}f}"


def markdown(rows, meta):
    lines = [
        f"# tilegen score/mask mods vs compiled flex_attention on {meta['device']}",
        "",
        f"torch {meta['torch']}, triton {meta['triton']}; bf16, B = 1, N = {TOKENS}, H·D = {HIDDEN}; `triton.testing.do_bench` "
        f"medians in ms (warm-up {meta['warmup']} ms, {meta['rep']} ms of repetitions); speed-up = flex ms / tilegen ms (≥ 1: tilegen "
        "faster). visited = fraction of tile pairs tilegen's forward visits. check = tilegen's errors within twice flex's "
        "(vs dense fp32 torch with the same mods, batch 0, head 0).",
        "",
        "| mods | D | tilegen fwd | bwd | f+b | flex fwd | bwd | f+b | speed-up fwd | bwd | f+b | visited | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = [ms(r, "tilegen", p) for p in ("fwd", "bwd", "fwdbwd")]
        f = [ms(r, "flex", p) for p in ("fwd", "bwd", "fwdbwd")]
        up = [b / a if a and b else None for a, b in zip(t, f)]
        chk = r.get("check", {})
        ok = "–" if not chk or "error" in chk else ("ok" if all(v["ok"] for v in chk.values()) else "FAIL " + ",".join(k for k, v in chk.items() if not v["ok"]))
        lines.append(
            f"| {r['mod']} | {r['D']} | {' | '.join(fmt(x, 3) for x in t)} | {' | '.join(fmt(x, 3) for x in f)} | "
            f"{' | '.join(fmt(x) for x in up)} | {fmt(r.get('visited'), 3)} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def meta_info(args):
    import platform

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
        "command": " ".join(sys.argv),
    }


def write_results(args, rows, name="mods_gpu", to_markdown=None):
    """Write ``NAME.json`` (meta and rows) and ``NAME.md`` (``to_markdown(rows, meta)``, this script's
    table by default) into ``args.out``; returns the Markdown."""
    meta = meta_info(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    md = (to_markdown or markdown)(rows, meta)
    (out / f"{name}.md").write_text(md)
    return md


def compile_only(row, log):
    """Compile every kernel of ``row``'s generated module for sm_90 with the installed Triton (ptxas; no
    GPU needed): a generated construct the compiler rejects shows here before the GPU run."""
    import importlib.util
    import os
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget

    from tilegen.backends import triton as tb

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("--compile-only needs TRITON_INTERPRET unset (the interpreter compiles nothing)")
    pointer = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32", "int32": "*i32"}
    folder = Path(tempfile.mkdtemp(prefix="tilegen-mods-compile-"))
    path = folder / f"{tb.module_name(row.spec)}.py"
    path.write_text(tb.render(row.spec, "h200"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    target = GPUTarget("cuda", 90, 32)
    for sched in tb.schedule(row.spec, "h200"):
        ctx = tb._program_context(sched)
        for k in ctx["kernels"]:
            sig = {f"{t['name']}_ptr": pointer[t["dtype"]] for t in k["tensors"]}
            sig.update({f"{t['name']}_s{d}": "i32" for t in k["tensors"] for d in range(t["ndim"])})
            sig.update({s: "i32" for s in tb.RUNTIME_SHAPES})
            const = {"Br": ctx["tiles"]["Br"], "Bc": ctx["tiles"]["Bc"], **mod.CONSTS}
            sig.update({c: "constexpr" for c in const})
            t0 = time.time()
            fn = getattr(mod, f"{k['name']}_kernel")
            triton.compile(triton.compiler.ASTSource(fn, sig, const), target=target, options={"num_warps": k["num_warps"], "num_stages": k["num_stages"]})
            log(f"  {row.spec.name}: {k['name']} compiled ({time.time() - t0:.1f} s)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(HERE / "results"), help="folder for mods_gpu.json/.md")
    parser.add_argument("--mods", nargs="+", default=list(MODS), choices=MODS)
    parser.add_argument("--dims", nargs="+", type=int, default=[64, 128], choices=[64, 128])
    parser.add_argument("--n", type=int, default=TOKENS, help="sequence length (B = 1)")
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--no-check", action="store_true", help="skip the dense fp32 check")
    parser.add_argument("--list", action="store_true", help="print the rows and tilegen's schedules, run nothing (no GPU needed)")
    parser.add_argument("--compile-only", action="store_true", help="compile every generated kernel for sm_90, run nothing (no GPU needed)")
    parser.add_argument("--debug", action="store_true")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    rows = [Row(mod, d, args.n) for d in args.dims for mod in args.mods]
    if args.compile_only:
        for row in rows:
            compile_only(row, log)
        return 0
    if args.list:
        from tilegen.backends import triton as tb

        for row in rows:
            fwd, bwd = tb.schedule(row.spec, "h200")
            compile(tb.render(row.spec, "h200"), f"{row.spec.name}.py", "exec")  # the module it would load
            env_f, env_b = ({str(k): v for k, v in s.program.env} for s in (fwd, bwd))
            log(
                f"{row.mod} D={row.d} N={row.n} H={row.h}: score_mod {row.spec.score_mod or '-'!r}, mask_mod {row.spec.mask_mod or '-'!r}, "
                f"window {row.spec.window}; fwd Br {env_f['Br']} Bc {env_f['Bc']}, bwd Br {env_b['Br']} Bc {env_b['Bc']}"
            )
        return 0
    out = []
    for row in rows:
        t0 = time.time()
        rec = run_row(row, args, log)
        out.append(rec)
        write_results(args, out)  # after every row: a run cut short keeps what it measured
        t, f = ms(rec, "tilegen", "fwdbwd"), ms(rec, "flex", "fwdbwd")
        log(f"{row.mod} D={row.d}: tilegen f+b {fmt(t, 3)} ms, flex {fmt(f, 3)} ms, visited {fmt(rec.get('visited'), 3)}; {time.time() - t0:.0f} s")
    print(write_results(args, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
