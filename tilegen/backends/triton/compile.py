"""What the compiler allocates for the generated Triton kernels, read on this machine without a GPU:
registers per thread, spilled bytes per thread (the stack frame) and shared memory per program, from
a compile for the target's architecture (sm_90 for ``h200``).

``triton.compile`` lowers each kernel of the module :func:`tilegen.backends.triton.render` writes to
PTX and runs the ``ptxas`` Triton ships; ``cuobjdump -res-usage`` (shipped beside it) reads the cubin's
registers and stack frame, and the shared bytes are Triton's own ``metadata.shared``. The arguments
are specialised as Triton's JIT specialises a launch on contiguous tensors of the spec's shapes (the
caller's tensors and the outputs in the spec's layout, the workspaces BNSD): a pointer and every
integer divisible by 16 carry ``tt.divisibility = 16``, an integer equal to 1 (a unit stride) becomes a
constant. Checked against the H200: the shared bytes equal what Triton reported after a run there
(tests/test_gpu_compile.py). Registers and spills depend on the Triton version (its ptxas); the result
names the version.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from tilegen.core.errors import TilegenError
from tilegen.core.exprs import evaluate
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import Target, load_target

CHILD = Path(__file__).with_name("compile_child.py")  # the child process of compile_resources
POINTER = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32", "int32": "*i32"}


def _strides(shape: list[int], layout: str) -> tuple[int, ...]:
    """Strides of a contiguous tensor of logical (BNSD) ``shape`` stored as ``layout``, in logical order
    (BSND swaps the head and sequence axes, both ways)."""
    order = (0, 2, 1, 3) if layout == "BSND" and len(shape) == 4 else tuple(range(len(shape)))
    physical = [shape[k] for k in order]
    contiguous = [math.prod(physical[k + 1:]) for k in range(len(physical))]
    return tuple(contiguous[k] for k in order)


def _triton_installed() -> bool:
    """Triton can be imported here (an entry of None in ``sys.modules`` blocks it, as for an import)."""
    if "triton" in sys.modules:
        return sys.modules["triton"] is not None
    return importlib.util.find_spec("triton") is not None


def _architecture(target: Target) -> tuple[str, int, int]:
    """(backend, compute capability, warp size) of a GPU target: ``arch = "sm_90"`` -> ("cuda", 90, 32)."""
    m = re.fullmatch(r"sm_(\d+)a?", str(target.arch))
    if target.kind != "gpu" or m is None:
        raise TilegenError(f"target {target.name} is not a CUDA GPU target (arch {target.arch!r}); a compile needs one such as h200")
    return "cuda", int(m.group(1)), 32


def _launches_of(functions: dict, program) -> list[str]:
    """The names ``X`` of the module's ``_launch_X`` functions that launch a kernel of ``program`` (the
    template names them after the kernel's phase, prefixed ``fwd_``/``bwd_`` where both programs have
    the phase, e.g. ``fwd_classify``), in the program's kernel order."""
    phases = [k.phase for k in program.kernels]
    prefix = "fwd" if program.attr("form") == "forward" else "bwd"
    out = []
    for phase in phases:
        for name in (f"{prefix}_{phase}", phase):
            if f"_launch_{name}" in functions and name not in out:
                out.append(name)
                break
    return out


def _launch_call(function: ast.FunctionDef) -> dict:
    """What one ``_launch_X`` function of the module passes to ``_launch(kernel, grid, tensors, ints,
    consts, num_warps=, num_stages=)``: the kernel's name, the tensors' names (``t["Q"]``), the integer
    arguments (``*t["Q"].stride()`` as ("strides", "Q"), a size as ("size", "B")), the constexpr
    dict's name, warps and stages."""
    call = next(node for node in ast.walk(function) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_launch")
    kernel, _grid, tensors, ints, consts = call.args[:5]
    out = {"kernel": kernel.id, "tensors": [elt.slice.value for elt in tensors.elts], "consts": consts.id, "ints": []}
    for elt in ints.elts:
        if isinstance(elt, ast.Starred):  # *t["X"].stride()
            out["ints"].append(("strides", elt.value.func.value.slice.value))
        else:
            out["ints"].append(("size", elt.id))
    knobs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg in ("num_warps", "num_stages")}
    return {**out, **knobs}


def compile_resources(
    spec: AttentionSpec, target: str | Target = "h200", dq_strategy: str | None = None, tile_sizes=None, knobs=None,
    programs=("fwd", "bwd"),
) -> dict:
    """Compile the forward and backward kernels of ``spec`` as :func:`tilegen.backends.triton.render`
    emits them for ``target`` (``dq_strategy``, ``tile_sizes``, ``knobs`` as there; ``programs``: which of
    "fwd", "bwd") and read what the compiler allocated. Each kernel the module launches through its
    ``_launch_<name>`` functions is compiled with the arguments that launch passes (tensors of the
    spec's shapes, contiguous in the layout the module gives them); helpers outside them (the
    parameter-gradient reductions of mods) are not. The compile runs in a child Python process with
    ``TRITON_INTERPRET`` unset (Triton decides at import whether its own library functions are compiled
    or interpreted).

    Returns:
        {"triton": version, "arch": "sm_90", "kernels": {launch name (the kernel's phase, or
        ``fwd_classify``...): {"registers": per thread, "stack_bytes": spilled bytes per thread,
        "shared_bytes": per program, "num_warps", "num_stages", "phase": the IR kernel's phase,
        "program": "fwd" | "bwd-<strategy>"}}}.

    Raises:
        TilegenError: Triton is not installed, the target is not a CUDA GPU, or the compile fails
            (one line naming the kernel); the schedule's own errors as :func:`tilegen.backends.triton.schedule`.
    """
    request = {"spec": spec, "target": target, "dq_strategy": dq_strategy, "tile_sizes": tile_sizes, "knobs": knobs, "programs": programs}
    return compile_resources_many([request])[0]


def compile_resources_many(requests: list[dict]) -> list[dict]:
    """:func:`compile_resources` for several requests (dicts of its arguments: ``spec`` and optionally
    ``target``, ``dq_strategy``, ``tile_sizes``, ``knobs``, ``programs``) in one child process, which
    imports Triton and torch once for all of them (2 s of CPU each time); one result per request, in
    order, each as compile_resources returns it.

    Raises:
        TilegenError: as :func:`compile_resources`, for the first request that fails.
    """
    if not _triton_installed():
        raise TilegenError("a compile of the Triton kernels needs Triton (pip install 'triton>=3.6'); it is not installed")
    defaults = {"target": "h200", "dq_strategy": None, "tile_sizes": None, "knobs": None, "programs": ("fwd", "bwd")}
    built = [_request(**{**defaults, **r}) for r in requests]
    child_env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    from tilegen.core.progress import step

    jobs = sum(len(request["jobs"]) for request, _ in built)
    archs = ", ".join(f"sm_{c}" for c in sorted({c for _, c in built}))
    # the child runs compile_child.py by path (runpy): it imports Triton and torch (the module's own
    # imports), not tilegen, whose backends and compiler it does not use (1.4 s of CPU a compile); run
    # through -c, its own folder is not put on sys.path
    with step(f"compile {jobs} Triton kernels for {archs} (Triton, ptxas)"):
        done = subprocess.run([sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')", str(CHILD)],
                              input=json.dumps({"requests": [request for request, _ in built]}), capture_output=True, text=True, env=child_env,
                              cwd=str(Path(__file__).resolve().parents[3]))
    try:
        reply = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TilegenError(f"the compile of the Triton kernels failed: {last[:300]}") from None
    if "error" in reply:
        raise TilegenError(reply["error"])
    out = []
    for (request, capability), compiled in zip(built, reply["replies"]):
        kernels = {j["name"]: {"program": j["program"], "phase": j["phase"], "num_warps": j["num_warps"], "num_stages": j["num_stages"],
                               **compiled[j["name"]]} for j in request["jobs"]}
        out.append({"triton": reply["triton"], "arch": f"sm_{capability}", "kernels": kernels})
    return out


def _request(spec: AttentionSpec, target, dq_strategy, tile_sizes, knobs, programs) -> tuple[dict, int]:
    """The child's request for one :func:`compile_resources` call (the module's source, the target, one
    job per launched kernel), and the target's compute capability."""
    from tilegen.backends import triton as tb

    tgt = load_target(target)
    backend, capability, warp = _architecture(tgt)
    fwd, bwd = tb.schedule(spec, tgt, dq_strategy, tile_sizes, knobs)
    source = tb.render(spec, tgt, dq_strategy, tile_sizes, knobs)
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assigned = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    common = ast.literal_eval(assigned["CONSTS"])  # the module's constexprs: CONSTS, and per launch _CONSTEXPRS_<name> = dict(Br=, Bc=, **CONSTS)
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}  # the integer arguments
    jobs = []
    for sched in (fwd, bwd):
        if sched.kind.split("-")[0] not in programs:
            continue
        env = {str(k): v for k, v in sched.program.env}
        tensors = {t.name: t for t in (*sched.program.tensors, *tb.block_list_tensors(sched.program))}
        for name in _launches_of(functions, sched.program):
            launch = _launch_call(functions[f"_launch_{name}"])
            consts = {**common, **{kw.arg: ast.literal_eval(kw.value) for kw in assigned[launch["consts"]].keywords if kw.arg}}
            params = [a.arg for a in functions[launch["kernel"]].args.args]
            sig, divisible, values, strides = {}, [], [], {}
            for tname in launch["tensors"]:
                if tname not in tensors:
                    raise TilegenError(f"kernel {launch['kernel']}: tensor {tname} is not in the {sched.kind} program; inspect --compile cannot type it")
                t = tensors[tname]
                shape = [int(evaluate(d, env)) for d in t.shape]
                # the caller's 4-d tensors and the 4-d outputs in the spec's layout; the rest contiguous as declared
                layout = spec.layout if len(shape) == 4 and t.kind in ("input", "output") else "BNSD"
                values.append(("pointer", POINTER[t.dtype]))
                strides[tname] = _strides(shape, layout)
            for kind, what in launch["ints"]:
                values += [("int", v) for v in (strides[what] if kind == "strides" else (sizes[what],))]
            for arg, (kind, value) in zip(params, values):
                if kind == "pointer":
                    sig[arg] = value
                    divisible.append(arg)  # torch allocations and the module's workspace views start on 16 bytes
                elif value == 1:  # the JIT makes an integer equal to 1 a constant
                    consts[arg], sig[arg] = 1, "constexpr"
                else:
                    sig[arg] = "i32" if -(2**31) <= value < 2**31 else "i64"
                    if value % 16 == 0:
                        divisible.append(arg)
            for arg in params[len(values):]:
                if arg not in consts:
                    raise TilegenError(f"kernel {launch['kernel']}: parameter {arg} has no value in its launch; inspect --compile cannot type it")
                sig[arg] = "constexpr"
            jobs.append({"name": name, "phase": name.removeprefix("fwd_").removeprefix("bwd_"), "program": sched.kind, "fn": launch["kernel"], "sig": sig, "consts": consts,
                         "divisible": divisible, "num_warps": launch["num_warps"], "num_stages": launch["num_stages"]})
    return {"source": source, "name": tb.module_name(spec), "target": [backend, capability, warp], "jobs": jobs}, capability
