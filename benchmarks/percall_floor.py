"""How low a forward+backward through a Python ``torch.autograd.Function`` can go on the tiny problem,
beside tilegen's user path and SDPA flash (one GPU, one run, the paths interleaved).

    PYTHONPATH=. python benchmarks/percall_floor.py [--calls 100] [--rounds 15] [--out DIR]
    PYTHONPATH=. python benchmarks/percall_floor.py --profile 2000 [--out DIR]

The per-call goal of the GPU path is a forward+backward within 1.3× of SDPA flash on 1×1×128×64 bf16
causal (gpu_table.py's per-call row). Where the time goes that tilegen's fast path still spends, by
taking pieces away (each path does what the one above it does, minus one piece):

- ``tilegen``: ``tilegen.torch.scaled_dot_product_attention`` (plan cache hit, bound launch records);
- ``module``: a bare ``autograd.Function`` calling the same loaded module's ``forward``/``backward``
  (``trusted=True``): without tilegen.torch's entry (the key, the plan lookup, the target file's stat);
- ``floor``: a bare ``autograd.Function`` that allocates what the module allocates (out, lse; dQ, dK,
  dV and, where the module has them, one workspace buffer) and launches a Triton kernel that does
  nothing as many times as the module launches (1 forward; the backward's count, 1 where the pass
  direct-dq left main alone, else 3) through the same direct launcher the module uses: the Python
  floor of this design;
- ``floor-no-launch``: the same allocations and no launch: the autograd node alone;
- ``module-3-launch``: ``module`` over the module generated with the pass direct-dq left out (its
  backward's pre, main and post kernels): what the pass saves, side by side.

Timing as gpu_table.per_call: ``--rounds`` rounds, in each every path runs one loop of ``--calls``
calls per phase (CUDA events around the loop), the order rotating; per path the median over the rounds,
and against SDPA flash the median, lowest and highest per-round ratio. Writes ``percall_floor.json``
under ``--out`` (default benchmarks/results). ``--profile N`` instead runs N forward+backward calls of
``tilegen`` and of ``module`` under cProfile and writes the top functions by own time of each (and the
time of the entry's pieces alone: the key, the plan lookup, the target file's stat) to
``percall_floor_profile.txt``. Needs a CUDA device (exits 2 without one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

PHASES = ("fwd", "fwdbwd")


class Path_:
    """fwd() and fwdbwd() of a path built on an ``autograd.Function`` class ``fn``."""

    def __init__(self, fn, q, k, v, do, extra):
        self.fn, self.extra, self.do = fn, extra, do
        self.q, self.k, self.v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))

    def fwd(self):
        return self.fn.apply(self.q, self.k, self.v, self.extra)[0]

    def fwdbwd(self):
        import torch

        return torch.autograd.grad(self.fwd(), (self.q, self.k, self.v), self.do)


def functions(module):
    """The ``module`` and ``floor`` / ``floor-no-launch`` autograd Functions over the loaded module."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def nothing(x_ptr):
        pass

    class Module(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, _):
            ctx.set_materialize_grads(False)
            out, lse = module.forward(q, k, v, trusted=True)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = module.backward(q, k, v, out, lse, dout, trusted=True)
            return dq, dk, dv, None

    def floor(launch):
        class Floor(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, _):
                ctx.set_materialize_grads(False)
                b, h, s, d = q.shape
                out = torch.empty_like(q)
                lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
                if launch is not None:
                    launch((1, 1, 1), module._device_stream()[1], (out,))
                ctx.save_for_backward(q, k, v, out, lse)
                ctx.mark_non_differentiable(lse)
                return out, lse

            @staticmethod
            def backward(ctx, dout, dlse):
                q, k, v, out, lse = ctx.saved_tensors
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                xs = (dq, dk, dv)
                if workspace:
                    xs = (torch.empty(q.numel() + q.shape[0] * q.shape[1] * q.shape[2], dtype=torch.float32, device=q.device),) + xs
                if launch is not None:
                    stream = module._device_stream()[1]
                    for i in range(n_bwd):
                        launch((1, 1, 1), stream, (xs[i % len(xs)],))
                return dq, dk, dv, None

        return Floor

    n_bwd = len(module._LAUNCH_TENSORS["backward"])  # the module's backward launches
    workspace = any("dQ_ws" in names for names in module._LAUNCH_TENSORS["backward"])
    x = torch.empty(16, device="cuda")
    compiled = nothing[(1,)](x)
    launch = module._direct_launch(nothing, compiled, 1, {})
    if launch is None:
        raise RuntimeError("the installed Triton's launcher form is not the one the generated module launches through")
    return {"module": Module, "floor": floor(launch), "floor-no-launch": floor(None)}


def three_launch_module(q, k, v):
    """The module of the tiny problem generated with the pass direct-dq left out (its backward's pre,
    main and post kernels, as before the pass), from an uncached compile."""
    import os

    import tilegen.passes.gpu.direct_dq as lower
    from tilegen.backends import triton as triton_backend
    from tilegen.torch.call import Call

    spec = Call.checked(q, k, v, layout="BNSD", window=(-1, 0), alignment="top_left").spec()
    keep, cache, loaded = lower.direct_dq_or_why, os.environ.get("TILEGEN_CACHE"), dict(triton_backend._LOADED)
    lower.direct_dq_or_why = lambda program, target, sinks=False: (program, "left out")
    os.environ["TILEGEN_CACHE"] = "0"
    triton_backend._LOADED.clear()  # the process's loaded modules: the one with the pass stays the plan's
    try:
        module = triton_backend.load(spec, "h200")
    finally:
        lower.direct_dq_or_why = keep
        triton_backend._LOADED.clear()
        triton_backend._LOADED.update(loaded)
        if cache is None:
            del os.environ["TILEGEN_CACHE"]
        else:
            os.environ["TILEGEN_CACHE"] = cache
    if not hasattr(module, "_launch_pre"):
        raise RuntimeError("the three-launch module still has one backward kernel")
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--profile", type=int, default=0, help="profile this many calls of tilegen and module instead (see the docstring)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("percall_floor: no CUDA device; this benchmark runs on a GPU")
        return 2
    import triton

    import tilegen.torch as tt
    from gpu_table import Impl, loop_us, make_inputs
    from tilegen.torch import plans

    q, k, v, do = make_inputs(1, 1, 1, 128, 64, "bf16")
    paths = {impl: Impl(impl, q, k, v, do, True, False) for impl in ("tilegen", "flash")}
    module = next(reversed(plans.PLANS.values())).module  # the plan the tilegen path just stored
    for name, fn in functions(module).items():
        paths[name] = Path_(fn, q, k, v, do, None)
        if name == "module":  # the same bare Function over the module without the pass direct-dq
            paths["module-3-launch"] = Path_(functions(three_launch_module(q, k, v))["module"], q, k, v, do, None)
    for path in paths.values():
        for phase in PHASES:
            for _ in range(20):
                getattr(path, phase)()
    if args.profile:
        return profile(paths, args, tt)
    times = {(p, ph): [] for p in paths for ph in PHASES}
    order = list(paths)
    for r in range(args.rounds):
        for p in order[r % len(order):] + order[: r % len(order)]:
            for ph in PHASES:
                times[p, ph].append(loop_us(getattr(paths[p], ph), args.calls))
    res = {}
    for p in paths:
        res[p] = {f"{ph}_us": statistics.median(times[p, ph]) for ph in PHASES}
        for ph in PHASES:
            ratios = [a / b for a, b in zip(times[p, ph], times["flash", ph])]
            res[p][f"{ph}_vs_flash"] = [statistics.median(ratios), min(ratios), max(ratios)]
    lines = [
        f"torch {torch.__version__}, Triton {triton.__version__}, {torch.cuda.get_device_name()}; 1x1x128x64 bf16 causal; "
        f"{args.rounds} rounds x {args.calls} calls per path and phase, interleaved; medians",
        "",
        "| path | fwd µs | fwd+bwd µs | fwd / flash [lowest, highest] | fwd+bwd / flash [lowest, highest] |",
        "|---|---|---|---|---|",
    ]
    for p, r in res.items():
        f, fb = r["fwd_vs_flash"], r["fwdbwd_vs_flash"]
        lines.append(f"| {p} | {r['fwd_us']:.1f} | {r['fwdbwd_us']:.1f} | {f[0]:.2f} [{f[1]:.2f}, {f[2]:.2f}] | {fb[0]:.2f} [{fb[1]:.2f}, {fb[2]:.2f}] |")
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "percall_floor.json").write_text(json.dumps({"header": lines[0], "paths": res, "plan_stats": dict(tt.PLAN_STATS)}, indent=1) + "\n")
    return 0


def profile(paths, args, tt) -> int:
    """cProfile of ``args.profile`` forward+backward calls of the tilegen and module paths, and the entry's
    pieces timed alone (µs per call, the median of 5 loops of 2000)."""
    import cProfile
    import io
    import pstats
    import time

    path = paths["tilegen"]
    from tilegen.torch import plans

    key = plans.fast_key("sdpa", path.q, path.k, path.v, True, None, False, "h200")
    plan = plans.lookup(key)
    pieces = {"fast_key": lambda: plans.fast_key("sdpa", path.q, path.k, path.v, True, None, False, "h200"),
              "lookup (with the stat)": lambda: plans.lookup(key), "fresh (the target file's stat)": lambda: plans.fresh(plan)}
    lines = []
    for name, fn in pieces.items():
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            runs.append((time.perf_counter() - t0) / 2000 * 1e6)
        lines.append(f"{name}: {sorted(runs)[2]:.2f} us per call")
    for name in ("tilegen", "module"):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.profile):
            paths[name].fwdbwd()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
        lines += [f"--- {name}: {args.profile} forward+backward calls under cProfile", buf.getvalue()]
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "percall_floor_profile.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
