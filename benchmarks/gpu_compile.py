"""What the compiler allocates for the generated Triton kernels, read on the CPU: registers per thread,
spilled bytes per thread (the stack frame) and shared memory per program, from an sm_90 compile.

No GPU is needed: ``triton.compile`` lowers each kernel of the module ``tilegen`` generates to PTX and
runs the ``ptxas`` Triton ships (the same one the H200 machine's Triton uses when the versions match;
the output records the version), and ``cuobjdump -res-usage`` (shipped beside it) reads the cubin's
registers and stack frame; the shared bytes are Triton's own ``metadata.shared``. The arguments are
specialised as Triton's JIT specialises a launch on contiguous tensors of the spec's shapes: a pointer
and every integer divisible by 16 carry ``tt.divisibility = 16``, an integer equal to 1 (a unit stride)
becomes a constant.

Modes:
    PYTHONPATH=. python benchmarks/gpu_compile.py --spec llama2-7b       # one spec's kernels, a table
    PYTHONPATH=. python benchmarks/gpu_compile.py --sweep                # every variant of results/gpu_sweep.json

``--sweep`` writes ``results/gpu_compile.json``: per sweep variant (its label, as benchmarks/gpu_model.py
prints it) and kernel phase, ``registers``, ``stack_bytes``, ``shared_bytes``; benchmarks/gpu_model.py
passes them to :func:`tilegen.cost.predict_gpu` (``compiled=``). The kernels compiled are today's
rendering of each variant's tiles, warps and stages, not the module the sweep timed (an earlier
commit); the output says so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tilegen.backends import triton as tb  # noqa: E402
from tilegen.exprs import evaluate  # noqa: E402
from tilegen.spec import builtin_spec  # noqa: E402
from tilegen.targets import load_target  # noqa: E402

POINTER = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32", "int32": "*i32"}


def _module(source: str, name: str) -> types.ModuleType:
    """The generated module, executed from a file (``triton.jit`` reads the kernels' source), its
    kernels compiled ones even where TRITON_INTERPRET=1 is set (the tests' setting)."""
    import triton

    path = Path(tempfile.mkdtemp(prefix="tilegen_compile_")) / f"{name}.py"
    path.write_text(source)
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    saved_env, saved_knob = os.environ.get("TRITON_INTERPRET"), getattr(runtime, "interpret", None)
    os.environ["TRITON_INTERPRET"] = "0"
    if runtime is not None:
        runtime.interpret = False
    try:
        exec(compile(source, str(path), "exec"), mod.__dict__)
    finally:
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env
        if runtime is not None:
            runtime.interpret = saved_knob
    return mod


def _strides(shape, layout: str) -> tuple[int, ...]:
    """Strides of a contiguous tensor of logical (BNSD) ``shape`` stored as ``layout``, in logical order."""
    physical = [shape[0], shape[2], shape[1], shape[3]] if layout == "BSND" and len(shape) == 4 else list(shape)
    st, acc = [0] * len(physical), 1
    for k in range(len(physical) - 1, -1, -1):
        st[k], acc = acc, acc * physical[k]
    return (st[0], st[2], st[1], st[3]) if layout == "BSND" and len(shape) == 4 else tuple(st)


def _usage(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, stack bytes per thread) of the cubin's only function."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if m is None:
        raise RuntimeError(f"cuobjdump printed no REG/STACK line: {out[:200]!r}")
    return int(m.group(1)), int(m.group(2))


def compile_kernels(spec, target="h200", dq_strategy=None, tile_sizes=None, knobs=None) -> dict[str, dict]:
    """Per kernel phase of the forward and backward module of ``spec``: registers, stack_bytes and
    shared_bytes of an sm_90 compile, with the warps and stages it was compiled with.

    Raises:
        tilegen errors as :func:`tilegen.backends.triton.schedule`; RuntimeError when the compile fails.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fwd, bwd = tb.schedule(spec, target, dq_strategy, tile_sizes, knobs)
    mod = _module(tb.render(spec, target, dq_strategy, tile_sizes, knobs), tb.module_name(spec))
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}  # the integer arguments
    out = {}
    for sched in (fwd, bwd):
        env = {str(k): v for k, v in sched.program.env}
        tensors = {t.name: t for t in sched.program.tensors}
        for kernel in sched.program.kernels:
            fn = getattr(mod, f"{kernel.phase}_kernel", None)
            if fn is None:
                continue
            knob = sched.knobs[kernel.phase]
            consts = dict(getattr(mod, f"_CONSTEXPRS_{kernel.phase}"))
            strides = {}  # contiguous tensors: the caller's and the outputs in the spec's layout, workspaces BNSD
            for name, t in tensors.items():
                shape = [int(evaluate(d, env)) for d in t.shape]
                layout = "BNSD" if t.kind == "workspace" else spec.layout
                strides.update({f"{name}_s{k}": s for k, s in enumerate(_strides(shape, layout))})
            sig, attrs = {}, {}
            for k, arg in enumerate(fn.arg_names):
                if arg in consts:
                    sig[arg] = "constexpr"
                elif arg.endswith("_ptr"):
                    sig[arg] = POINTER[tensors[arg[:-4]].dtype]
                    attrs[(k,)] = [["tt.divisibility", 16]]
                else:
                    value = strides.get(arg, sizes.get(arg))
                    if value == 1:
                        consts[arg] = 1
                        sig[arg] = "constexpr"
                        continue
                    sig[arg] = "i32"
                    if value is not None and value % 16 == 0:
                        attrs[(k,)] = [["tt.divisibility", 16]]
            src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(c),): v for c, v in consts.items()}, attrs=attrs)
            compiled = triton.compile(src, target=GPUTarget("cuda", 90, 64), options={"num_warps": knob.num_warps, "num_stages": knob.num_stages})
            regs, stack = _usage(compiled.asm["cubin"])
            out[kernel.phase] = {"registers": regs, "stack_bytes": stack, "shared_bytes": int(compiled.metadata.shared),
                                 "num_warps": knob.num_warps, "num_stages": knob.num_stages}
    return out


def sweep(path: Path) -> dict:
    """Compile facts of every variant of the committed sweep, keyed by gpu_model.label."""
    from gpu_model import label, load_sweep, sweep_spec

    import triton

    n, variants = load_sweep(path)
    loose = load_target("h200").with_capacity("SMEM", 1 << 30)
    rows = {}
    for var in variants:
        spec = sweep_spec(var["D"], n, var.get("dtype", "bf16"), var.get("causal", False))
        kind = "fwd" if var["program"] == "fwd" else "bwd"
        knobs = {ph: tuple(k) for ph, k in var["knobs"].items()}
        facts = compile_kernels(spec, loose, var.get("strategy"), {kind: tuple(var["tiles"])}, knobs)
        rows[label(var)] = {ph: f for ph, f in facts.items() if ph in var["knobs"]}
        print(f"{label(var):<40} " + "  ".join(f"{ph}: {f['registers']} reg, {f['stack_bytes']} B stack, {f['shared_bytes']} B shared"
                                            for ph, f in rows[label(var)].items()), flush=True)
    return {"meta": {"triton": triton.__version__, "arch": "sm_90", "note": "today's rendering of each sweep variant's tiles, warps and stages (not the commit the sweep timed)"},
            "variants": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", help="a built-in spec name: compile its kernels for the target and print a table")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--sweep", action="store_true", help="every variant of results/gpu_sweep.json; writes results/gpu_compile.json")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_compile.json"))
    args = ap.parse_args(argv)
    if args.sweep:
        res = sweep(HERE / "results" / "gpu_sweep.json")
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        return 0
    if not args.spec:
        ap.error("give --spec NAME or --sweep")
    facts = compile_kernels(builtin_spec(args.spec), args.target)
    print(f"{'kernel':<8} {'warps':>5} {'stages':>6} {'registers':>9} {'stack B':>8} {'shared B':>9}")
    for ph, f in facts.items():
        print(f"{ph:<8} {f['num_warps']:>5} {f['num_stages']:>6} {f['registers']:>9} {f['stack_bytes']:>8} {f['shared_bytes']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
