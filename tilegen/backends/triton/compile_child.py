"""The child process of :func:`tilegen.backends.triton.compile.compile_resources_many`: on stdin
``{"requests": [...]}``, each request a module's source, the target and one job per kernel (its
signature, constexprs, divisible arguments, warps and stages); on stdout one JSON line,
``{"triton": version, "replies": [{kernel: {registers, stack_bytes, shared_bytes}} per request]}``, or
``{"error": one line}`` for the first kernel that fails.

It is run by path (``runpy.run_path``), not imported: it imports the standard library, Triton and what
the generated module imports (torch), never tilegen, whose compiler and backends it does not need
(importing them cost 1.4 s of CPU a compile).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path


class _Failed(Exception):
    """A kernel's compile failed: the one-line message for the parent."""


def _worker() -> int:
    """Read the requests, compile their jobs, print the reply (see the module docstring)."""
    request = json.loads(sys.stdin.read())
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        print(json.dumps({"error": f"a compile of the Triton kernels needs Triton (pip install 'triton>=3.6'): {exc}"}))
        return 0
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        print(json.dumps({"error": f"Triton {triton.__version__} ships no cuobjdump at {tool}; it reads the compiled kernels' registers"}))
        return 0
    replies = []
    with tempfile.TemporaryDirectory(prefix="tilegen_compile_") as folder:
        for n, one in enumerate(request["requests"]):
            (Path(folder) / str(n)).mkdir()  # a folder each: two requests may name their modules alike
            try:
                replies.append(_compile_jobs(one, triton, GPUTarget, ASTSource, tool, Path(folder) / str(n)))
            except _Failed as exc:
                print(json.dumps({"error": str(exc)}))
                return 0
    print(json.dumps({"triton": triton.__version__, "replies": replies}))
    return 0


def _compile_jobs(request: dict, triton, GPUTarget, ASTSource, tool: Path, folder: Path) -> dict:
    """One request's compiles, its module written into ``folder`` (``triton.jit`` reads the kernels'
    source): {kernel: figures}. Raises _Failed with the first failing kernel's line."""
    path = folder / f"{request['name']}.py"
    path.write_text(request["source"])
    mod = types.ModuleType(request["name"])
    mod.__file__ = str(path)
    exec(compile(request["source"], str(path), "exec"), mod.__dict__)
    backend, capability, warp = request["target"]
    out = {}
    for job in request["jobs"]:
        fn = getattr(mod, job["fn"])
        names = list(fn.arg_names)
        src = ASTSource(fn, job["sig"], constexprs={(names.index(c),): v for c, v in job["consts"].items()},
                        attrs={(names.index(a),): [["tt.divisibility", 16]] for a in job["divisible"]})
        try:
            compiled = triton.compile(src, target=GPUTarget(backend, capability, warp),
                                      options={"num_warps": job["num_warps"], "num_stages": job["num_stages"]})
            regs, stack = _usage(compiled.asm["cubin"], tool)
        except Exception as exc:  # the compiler's own message, in one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise _Failed(f"compiling kernel {job['name']} of {job['program']} for sm_{capability} failed: {first[:300]}") from None
        out[job["name"]] = {"registers": regs, "stack_bytes": stack, "shared_bytes": int(compiled.metadata.shared)}
    return out


def _usage(cubin: bytes, tool: Path) -> tuple[int, int]:
    """(registers per thread, stack bytes per thread) of the cubin's function."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        done = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True)
    m = re.search(r"REG:(\d+) STACK:(\d+)", done.stdout)
    if done.returncode != 0 or m is None:
        raise RuntimeError(f"cuobjdump -res-usage gave no register count ({(done.stderr or done.stdout).strip()[:200]})")
    return int(m.group(1)), int(m.group(2))


if __name__ == "__main__":
    sys.exit(_worker())
