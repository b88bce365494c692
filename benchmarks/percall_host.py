"""Host cost of one tilegen.torch call, on the CPU, with the kernel launches stubbed out.

    PYTHONPATH=. python benchmarks/percall_host.py [--runs 2000] [--json benchmarks/results/percall_host.json]

The fast path (tilegen.torch's plan cache) is timed on CPU tensors of the tiny problem (1×1×128×64,
fp16, causal, BNSD) twice: with the loaded module replaced by a stub that allocates what the generated
module allocates (forward: O, L; backward: D and dQ_ws in one buffer, dQ, dK, dV) and launches nothing
(1 launch forward, 3 backward: pre, main, post, counted); and through the real generated module with
its kernels stubbed (``StubKernel``: ``kernel[grid](...)`` launches nothing and returns a compiled
kernel whose launcher does nothing; the current device and stream a constant), so that the module's
own host code is timed: its checks, allocations and launch path, ``direct`` (the compiled kernel's
launcher called from a specialisation's second launch) or not (every launch through
``kernel[grid](...)``; the stub costs far less than Triton's ``JITFunction.run``, which needs a GPU
driver and is not timed here). Beside them, the pieces a hit skips, each
timed alone as the slow path runs them once per custom-op call (twice per forward+backward): the
target check (reads the target file), the module cache key (reads and hashes it again), the spec
(built and validated), and the custom-op dispatcher with its autograd wrapper (a custom op of
attention_fwd's schema with a stub body, against a torch.autograd.Function with the same body).
Medians of per-call means over 5 rounds of the process's CPU time (``time.process_time``: a
machine shared with other work slows it less than wall time); µs per call. What the GPU adds (the launches themselves) is
measured by benchmarks/gpu_table.py's per-call row.

    PYTHONPATH=. python benchmarks/percall_host.py --varlen [--varlen-runs 20] [--json ...]

``--varlen``: the host cost of one ``flash_attn_varlen_func`` call on the Triton path (the one CUDA
tensors take; here CPU tensors with ``_triton_path`` saying yes) for benchmarks/varlen_gpu.py's packed
batch of 16384 tokens in 16 sequences (:func:`varlen_gpu.seq_lengths`), bf16, H 16, D 128, causal,
with and without sinks. The module is :class:`VarlenStub` (the generated module's varlen interface:
uninitialised allocations as there, no launches; tile sizes 128 × 64 forward, 64 × 128 backward). Rows: a repeated call
(a hit of the plan table), a first call (the table emptied before each call: a miss) and a new
packing of the same shapes each call (seeded lengths, a new seed per call, max_seqlen = tokens; its
spec and module are known, its offsets' arrays and block tables are built), forward
without gradient and forward + backward (``torch.autograd.grad``: no gradient accumulation), and
the autograd engine's own share for these tensors (a stub ``torch.autograd.Function``); ms per call.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch

import tilegen.torch as tt
from tilegen.torch import device, plans
from tilegen.torch.call import Call
from tilegen.core.targets import target_key


class StubModule:
    """The generated module's forward/backward interface: allocations as there, no launches."""

    launches = 0

    def forward(self, q, k, v, **kw):
        StubModule.launches += 1
        return torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32)

    def backward(self, q, k, v, o, lse, do, **kw):
        StubModule.launches += 3
        torch.empty(lse.numel() + q.numel(), dtype=torch.float32)  # D and dQ_ws
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


class StubCompiled:
    """A compiled kernel whose launcher (Triton 3.9's form) does nothing."""

    function = packed_metadata = None

    def __init__(self, n_params):
        self.src = SimpleNamespace(signature=dict.fromkeys(range(n_params)))

    @staticmethod
    def run(gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, *args):
        pass


class StubKernel:
    """A JITFunction's ``kernel[grid](...)`` that launches nothing and returns a :class:`StubCompiled`."""

    def __init__(self, jit):
        self.jit = jit
        self.arg_names = list(jit.arg_names)
        self.compiled = StubCompiled(len(self.arg_names))

    def __getitem__(self, grid):
        return self.launch

    def launch(self, *args, **kwargs):
        return self.compiled


def stub_kernels(module, direct: bool):
    """Replace `module`'s kernels with :class:`StubKernel`; the direct path on or off."""
    for name in dir(module):
        if name.endswith("_kernel") and not isinstance(getattr(module, name), StubKernel):
            setattr(module, name, StubKernel(getattr(module, name)))
    if hasattr(module, "_DIRECT_ON"):  # absent before the direct path
        module._DIRECT_ON = direct
        module._DIRECT.clear()
        getattr(module, "_BOUND", {}).clear()  # absent before the bound launch records
        module._device_stream = lambda: (0, 0)


def triton_specialisation(module, q, k, v):
    """fn() running what Triton's ``JITFunction.run`` does on the host before a launch of the forward
    kernel and the direct path skips: the argument binder with its specialisation (dtypes, 16-byte
    alignment, integer classes) and the kernel-cache key; built for an sm_90 target without a driver
    (Triton 3.9's internals: ``create_function_from_signature``, ``compute_cache_key``), or None where
    this Triton's differ."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend
        from triton.runtime.jit import compute_cache_key, create_function_from_signature

        kernel = getattr(module.fwd_kernel, "jit", module.fwd_kernel)
        binder = create_function_from_signature(kernel.signature, kernel.params, CUDABackend(GPUTarget("cuda", 90, 32)))
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32)
        args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), *lse.stride(), *q.shape[:2], k.shape[1], q.shape[2], k.shape[2])
        kw = dict(module._CONSTEXPRS_fwd, num_warps=8, num_stages=3, debug=False, instrumentation_mode="", fpsan_homomorphic_casts=False)
        cache = {}

        def fn():
            _, specialization, options = binder(*args, **kw)
            compute_cache_key(cache, specialization, options)

        fn()
        return fn
    except Exception as e:  # another Triton: not timed
        print(f"Triton's specialisation not timed: {type(e).__name__}: {e}")
        return None
class VarlenStub:
    """The generated varlen module's interface (forward/backward with params, sinks, blocks; the host
    block tables' TILE_SIZES, BLOCK_SHAPES, tile_lists): allocations as there, no launches."""

    __name__ = "varlen_stub"
    TILE_SIZES = {"fwd": [128, 64], "bwd": [64, 128]}

    def __init__(self, total_q: int, total_k: int):
        br, bc = self.TILE_SIZES["fwd"]
        bbr, bbc = self.TILE_SIZES["bwd"]
        self.BLOCK_SHAPES = {"fwd": [1, 1, -(-total_q // br), -(-total_k // bc)], "bwd": [1, 1, -(-total_q // bbr), -(-total_k // bbc)]}

    def tile_lists(self, kind, bm):
        return {"BM": bm}

    def forward(self, q, k, v, *, params=None, sinks=None, blocks=None):
        return torch.empty_like(q), torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)

    def backward(self, q, k, v, o, lse, do, *, params=None, sinks=None, blocks=None):
        torch.empty(lse.shape, dtype=torch.float32)  # D
        grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
        return grads + ({"sinks": torch.empty(q.shape[2])},) if sinks is not None else grads


def varlen_main(runs: int, json_path: str | None) -> dict:
    """The ``--varlen`` rows (see the module docstring): ms per call."""
    import numpy as np

    import tilegen.backends.triton as tb
    from varlen_gpu import seq_lengths

    tokens, docs, heads, dim = 16384, 16, 16, 128
    cu = torch.from_numpy(np.concatenate([[0], np.cumsum(seq_lengths(tokens, docs))]).astype(np.int32))
    longest = int((cu[1:] - cu[:-1]).max())
    stub = VarlenStub(tokens, tokens)
    device.triton_path = lambda x: True
    tb.load = lambda *a, **kw: stub
    q, k, v, do = (torch.randn(tokens, heads, dim).to(torch.bfloat16) for _ in range(4))
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
    sinks = torch.zeros(heads, requires_grad=True)
    table = plans.PLANS

    seeds = itertools.count(1)

    def call(grad: bool, with_sinks: bool, miss: str):
        c, m = cu, longest
        if miss == "first call (miss)":
            table.clear()
        elif miss == "new packing (miss, module known)":
            c = torch.from_numpy(np.concatenate([[0], np.cumsum(seq_lengths(tokens, docs, next(seeds)))]).astype(np.int32))
            m = tokens
        s = sinks if with_sinks else None
        if grad:
            leaves = xs + ([s] if with_sinks else [])
            torch.autograd.grad(tt.flash_attn_varlen_func(*xs, c, c, m, m, causal=True, sinks=s), leaves, do)
        else:
            with torch.no_grad():
                tt.flash_attn_varlen_func(q, k, v, c, c, m, m, causal=True, sinks=s.detach() if s is not None else None)

    res = {}
    for with_sinks in (False, True):
        for miss in ("repeated call (hit)", "first call (miss)", "new packing (miss, module known)"):
            for grad in (False, True):
                name = f"varlen {miss}: {'forward + backward' if grad else 'forward (no grad)'}{', sinks' if with_sinks else ''}"
                res[name] = per_call(lambda: call(grad, with_sinks, miss), runs) / 1e3

    class Bare(torch.autograd.Function):  # torch's own share: the autograd engine over these tensors
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.set_materialize_grads(False)  # as _ExtrasAttention
            return torch.empty_like(q), torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32)

        @staticmethod
        def backward(ctx, dout, dlse):
            return torch.empty_like(dout), torch.empty_like(dout), torch.empty_like(dout)

    res["baseline: autograd.Function with a stub body, forward + backward"] = per_call(lambda: torch.autograd.grad(Bare.apply(*xs)[0], xs, do), runs) / 1e3
    width = max(map(len, res))
    for name, ms in res.items():
        print(f"{name:<{width}}  {ms:8.3f} ms")
    out = {"ms_per_call": res, "tokens": tokens, "sequences": docs, "heads": heads, "head_dim": dim, "runs": runs, "torch": torch.__version__}
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(out, indent=1) + "\n")
    return out


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
    ap.add_argument("--json", default=None, help="default benchmarks/results/percall_host.json (--varlen: percall_host_varlen.json)")
    ap.add_argument("--varlen", action="store_true", help="time flash_attn_varlen_func's host cost instead (see the docstring)")
    ap.add_argument("--varlen-runs", type=int, default=20)
    args = ap.parse_args(argv)
    if args.varlen:
        return varlen_main(args.varlen_runs, args.json or "benchmarks/results/percall_host_varlen.json")
    args.json = args.json or "benchmarks/results/percall_host.json"
    n = args.runs

    q, k, v = (torch.randn(1, 1, 128, 64, dtype=torch.float16) for _ in range(3))
    do = torch.randn(1, 1, 128, 64, dtype=torch.float16)
    stub = plans.Plan(StubModule(), plans.stamp("h200"))
    plans.FAST_DEVICES = ("cuda", "cpu")
    real_op_plan = plans.op_plan
    plans.op_plan = lambda *a, **kw: stub  # the miss builds the stub plan; hits never call it
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
    plans.op_plan = real_op_plan

    # the real generated module, kernels stubbed
    plans.PLANS.clear()
    module = plans.op_plan(q, k, v, ("BNSD", None, -1, 0, "top_left", None, "h200", "", "", "")).module  # decorated, never compiled
    for direct in (False, True):
        stub_kernels(module, direct)
        how = "direct launches" if direct else "every launch through kernel[grid]"
        res[f"fast path, generated module ({how}): forward (no grad)"] = per_call(fwd, n)
        res[f"fast path, generated module ({how}): forward + backward"] = per_call(fwd_bwd, n)
    if hasattr(module, "LAUNCHES"):
        print(f"generated module launches: {module.LAUNCHES}; calls through the bound launch records: {getattr(module, 'BOUND_CALLS', None)}")
        spec = triton_specialisation(module, q, k, v)
        if spec is not None:
            res["Triton's JITFunction.run host work the direct path skips (binder + cache key), per forward launch"] = per_call(spec, n)

    # the pieces of the slow path (per custom-op call)
    res["slow path piece: target check (check_gpu_target)"] = per_call(lambda: device.check_gpu_target("h200"), n // 4)
    res["slow path piece: module cache key (target_key)"] = per_call(lambda: target_key("h200"), n // 4)
    res["slow path piece: call checked, spec built and validated (Call.checked(...).spec())"] = per_call(
        lambda: Call.checked(q, k, v, layout="BNSD", window=(-1, 0), alignment="top_left").spec(), n // 4
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
