"""The CPU compile of ``inspect --compile`` (tilegen.backends.triton.compile) against Triton's own JIT on
a GPU: for each built-in spec named on the command line, the registers, stack bytes and shared bytes
of every launched kernel compiled for sm_90 in a child process, beside the ``n_regs``, ``n_spills``
(in 4-byte words) and ``metadata.shared`` of the kernels Triton's JIT compiled when the generated
module ran forward and backward on random CUDA inputs (its ``_launch`` replaced by one that launches
and keeps the compiled kernel; the string after the figures is the JIT's signature: p pointer,
3 i32, c constexpr).

Usage (GPU machine, repository root): OUT=<folder> PYTHONPATH=. python benchmarks/gpu_compile_check.py tiny llama2-7b ...
Writes dev.json into $OUT (benchmarks/results/gpu_compile_check.json is one such run).
"""
import os, json, sys, inspect, traceback
os.environ["TILEGEN_CACHE_DIR"] = "/tmp/tgc"
import torch, triton
from tilegen.core.spec import builtin_spec
from tilegen.backends import triton as tb
from tilegen.backends.triton.compile import compile_resources
out = {"triton": triton.__version__, "specs": {}}
for name in sys.argv[1:]:
    spec = builtin_spec(name); r = {}
    try:
        r["cpu"] = {ph: [k["registers"], k["stack_bytes"], k["shared_bytes"]] for ph, k in compile_resources(spec, "h200")["kernels"].items()}
    except Exception as e:
        r["cpu"] = repr(e)[:200]
    mod = tb.load(spec, "h200"); got = {}
    def cap(kernel, grid, tensors, ints, consts, num_warps, num_stages, record=None):
        c = kernel[grid](*tensors, *ints, **consts, num_warps=num_warps, num_stages=num_stages)
        got[kernel.fn.__name__[:-7]] = [c.n_regs, c.n_spills, c.metadata.shared, "".join("c" if v == "constexpr" else v[1] if v[0] == "i" else "p" for v in getattr(c.src, "signature", {}).values())]
    mod._launch = cap
    try:
        S = mod.SHAPES; C = mod.CONSTS; B, Hq, Hkv, Sq, Sk = (S[k] for k in ("B", "Hq", "Hkv", "Sq", "Sk"))
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[spec.dtype]; ps = mod._physical_shape
        q = torch.randn(ps((B, Hq, Sq, C["Dqk"])), device="cuda", dtype=dt); k = torch.randn(ps((B, Hkv, Sk, C["Dqk"])), device="cuda", dtype=dt); v = torch.randn(ps((B, Hkv, Sk, C["Dv"])), device="cuda", dtype=dt)
        kw = {"sinks": torch.zeros(Hq, device="cuda")} if "sinks" in inspect.signature(mod.forward).parameters else {}
        o, lse = mod.forward(q, k, v, **kw); mod.backward(q, k, v, o, lse, torch.randn_like(o), **kw)
    except Exception as e:
        r["jit_error"] = traceback.format_exc()[-300:]
    r["jit"] = got
    out["specs"][name] = r
    print(name, json.dumps(r), flush=True)
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/dev.json", "w"), indent=1)
