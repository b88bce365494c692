"""Host cost of one tilegen.torch call, on the CPU, with the kernel launches stubbed out.

    PYTHONPATH=. python benchmarks/percall_host.py [--runs 2000] [--json benchmarks/results/percall_host.json]

The fast path (tilegen.torch's plan cache) is timed on CPU tensors of the tiny problem (1×1×128×64,
fp16, causal, BNSD) with the loaded module replaced by a stub that allocates what the generated module
allocates (forward: O, L; backward: D, dQ_ws, dQ, dK, dV) and launches nothing, and counts the launches
the real module makes (1 forward, 3 backward: pre, main, post). Beside it, the pieces a hit skips, each
timed alone as the slow path runs them once per custom-op call (twice per forward+backward): the
target check (reads the target file), the module cache key (reads and hashes it again), the spec
(built and validated), and the custom-op dispatcher with its autograd wrapper (a custom op of
attention_fwd's schema with a stub body, against a torch.autograd.Function with the same body).
Medians of per-call means over 5 rounds of the process's CPU time (``time.process_time``: a
machine shared with other work slows it less than wall time); µs per call. What the GPU adds (the launches themselves) is
measured by benchmarks/gpu_table.py's per-call row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import tilegen.torch as tt
from tilegen.targets import target_key


class StubModule:
    """The generated module's forward/backward interface: allocations as there, no launches."""

    launches = 0

    def forward(self, q, k, v):
        StubModule.launches += 1
        return torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32)

    def backward(self, q, k, v, o, lse, do):
        StubModule.launches += 3
        torch.empty(lse.shape, dtype=torch.float32)  # D
        torch.empty(q.shape, dtype=torch.float32)  # dQ_ws
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def per_call(fn, runs: int) -> float:
    fn()
    means = []
    for _ in range(5):
        t = time.process_time()
        for _ in range(runs):
            fn()
        means.append((time.process_time() - t) / runs * 1e6)
    return statistics.median(means)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--json", default="benchmarks/results/percall_host.json")
    args = ap.parse_args(argv)
    n = args.runs

    q, k, v = (torch.randn(1, 1, 128, 64, dtype=torch.float16) for _ in range(3))
    do = torch.randn(1, 1, 128, 64, dtype=torch.float16)
    stub = tt._Plan(StubModule(), tt._stamp("h200"))
    tt._FAST_DEVICES = ("cuda", "cpu")
    real_op_plan = tt._op_plan
    tt._op_plan = lambda *a, **kw: stub  # the miss builds the stub plan; hits never call it
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]

    def fwd():
        with torch.no_grad():
            tt.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        tt.scaled_dot_product_attention(*xs, is_causal=True).backward(do)

    res = {}
    StubModule.launches = 0
    res["fast path: forward (no grad)"] = per_call(fwd, n)
    res["fast path: forward + backward"] = per_call(fwd_bwd, n)
    tt._op_plan = real_op_plan

    # the pieces of the slow path (per custom-op call)
    res["slow path piece: target check (_check_gpu_target)"] = per_call(lambda: tt._check_gpu_target("h200"), n // 4)
    res["slow path piece: module cache key (target_key)"] = per_call(lambda: target_key("h200"), n // 4)
    res["slow path piece: spec built and validated (_spec)"] = per_call(
        lambda: tt._spec(q, k, v, layout="BNSD", scale=None, window=(-1, 0), alignment="top_left", name="attention_fwd"), n // 4
    )

    @torch.library.custom_op("tilegen_bench::fwd", mutates_args=())
    def op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, scale: float | None, wl: int, wr: int, alignment: str,
           dq_strategy: str | None, target: str, score_mod: str, mask_mod: str, param_decls: str, params: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32)

    @op.register_fake
    def _(q, k, v, *rest):
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:3], *output)

    def backward(ctx, dout, dlse):
        q, k, v, _, _ = ctx.saved_tensors
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), *([None] * 10), [])

    op.register_autograd(backward, setup_context=setup)

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32)

        @staticmethod
        def backward(ctx, dout, dlse):
            q, k, v = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    res["dispatch: custom op, forward + backward, stub body"] = per_call(
        lambda: op(*xs, "BNSD", None, -1, 0, "top_left", None, "h200", "", "", "", [])[0].backward(do), n
    )
    res["dispatch: autograd.Function, forward + backward, stub body"] = per_call(lambda: Fn.apply(*xs)[0].backward(do), n)
    width = max(map(len, res))
    for name, us in res.items():
        print(f"{name:<{width}}  {us:8.1f} us")
    slow_once = sum(v for n_, v in res.items() if n_.startswith("slow path piece"))
    print(f"slow-path pieces per custom-op call: {slow_once:.1f} us (x2 per forward+backward)")
    out = {"us_per_call": res, "slow_pieces_per_op_call_us": slow_once, "runs": n, "torch": torch.__version__}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
