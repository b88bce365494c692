"""The layers of DESIGN.md's architecture section hold: ``lint-imports`` (import-linter, configured in
pyproject.toml) finds no import from a lower layer to a higher one, no import cycle in any package and
no import of another module's private name, counting the imports inside functions too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and done.stdout.count("KEPT") == 3, done.stdout[-4000:]


def _lint_planted(tmp_path, path: str, text: str) -> str:
    """``lint-imports`` on a copy of the package with ``text`` appended to ``path``: its output."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "tilegen", copy / "tilegen", ignore=shutil.ignore_patterns("__pycache__", "twin", "specs"))
    shutil.copytree(ROOT / "tools", copy / "tools", ignore=shutil.ignore_patterns("__pycache__", "ascend-headercheck"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    planted = copy / path
    planted.write_text(planted.read_text() + text)
    env = dict(os.environ, PYTHONPATH=str(copy))
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=copy, env=env, capture_output=True, text=True)
    assert done.returncode != 0, done.stdout[-3000:]
    return done.stdout


def test_the_contract_sees_function_local_imports(tmp_path):
    """A planted upward import inside a function breaks the layers contract (so the check can fail)."""
    out = _lint_planted(tmp_path, "tilegen/core/ir.py", "\n\ndef _planted():\n    from tilegen.api import attention  # noqa: F401\n")
    assert "tilegen.core.ir -> tilegen.api" in out, out[-3000:]


def test_the_contract_sees_a_private_name_read_through_a_module(tmp_path):
    """``from m import _x`` and ``m._x`` (m imported as a module, inside a function) both break the
    private-names contract."""
    out = _lint_planted(tmp_path, "tilegen/distributed.py",
                        "\n\ndef _planted():\n    from tilegen import api as a\n    from tilegen.core.validate import _planted_name  # noqa: F401\n"
                        "    return a._internal\n")
    out = " ".join(out.split())  # the report wraps its lines
    assert "imports the private name _internal of tilegen.api" in out and "private name _planted_name of tilegen.core.validate" in out, out[-3000:]


def _kind_tests(source: str) -> list[int]:
    """Lines of ``source`` that compare a target's kind with a kind's name (``t.kind == "gpu"``,
    ``report["target"]["kind"] != "ascend"``, ``x.get("kind") == "gpu"``; a dict keyed by the kinds is
    not a test)."""
    import ast

    kinds = {"gpu", "ascend"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {s.value for s in sides if isinstance(s, ast.Constant)} | {
            e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts if isinstance(e, ast.Constant)
        }
        reads_kind = any(
            (isinstance(s, ast.Attribute) and s.attr == "kind")
            or (isinstance(s, ast.Name) and s.id == "kind")
            or (isinstance(s, ast.Subscript) and isinstance(s.slice, ast.Constant) and s.slice.value == "kind")
            or (isinstance(s, ast.Call) and isinstance(s.func, ast.Attribute) and s.func.attr == "get" and s.args
                and isinstance(s.args[0], ast.Constant) and s.args[0].value == "kind")
            for s in sides
        )
        if reads_kind and names & kinds:
            found.append(node.lineno)
    return found


# the backends (each knows its own kind), the target-specific pass lists, and the target file's parser
KIND_ALLOWED = ("tilegen/backends/", "tilegen/passes/gpu/", "tilegen/passes/ascend/", "tilegen/core/targets.py")


def test_no_target_kind_test_outside_the_backends_and_their_pass_lists():
    """Issue 35: a target's kind picks its backend (tilegen.backends.backend_for) and nothing else asks
    it: the rest asks the backend (its attributes and methods) or reads the IR."""
    found = []
    for path in sorted((ROOT / "tilegen").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(KIND_ALLOWED):
            found += [f"{rel}:{line}" for line in _kind_tests(path.read_text())]
    assert not found, found


def test_the_kind_test_finder_finds_one():
    planted = ('def f(t, r, kind):\n    a = t.kind == "gpu"\n    b = r["target"]["kind"] != "ascend"\n    c = r.get("kind") in ("gpu",)\n'
               '    d = {"gpu": 1}[t.kind]\n    e = kind != "gpu"\n    f = t.kind == "tiles"\n')
    assert _kind_tests(planted) == [2, 3, 4, 6]


def test_every_emitting_backend_lowers_then_renders():
    """The Backend protocol: for the Ascend C and Triton backends, the files of ``render`` over what
    ``lower`` makes of the compiled programs are the files ``generate`` writes (the same bytes)."""
    from tilegen.backends import ascendc, backend_for, triton
    from tilegen.backends.compiler import compile_program
    from tilegen.core.spec import builtin_spec
    from tilegen.core.targets import load_target
    from tilegen.passes.driver import Options

    spec = builtin_spec("tiny")
    asc, tgt = backend_for("ascend910b2"), load_target("ascend910b2")
    options = {"fwd": Options(), "bwd": Options(dq_strategy="atomic")}
    plans = [asc.lower(compile_program(spec, which, asc, tgt, options[which]), tgt, spec, which) for which in ("fwd", "bwd")]
    assert asc.render(ascendc.KernelSet(spec, tgt, "atomic", plans)).files == ascendc.generate(spec, "ascend910b2").files
    gpu, h200 = backend_for("h200"), load_target("h200")
    fwd, bwd = (gpu.lower(s.program, h200, spec, s.kind) for s in triton.schedule(spec, h200))
    assert gpu.render(triton.ModulePlan(spec, h200, fwd, bwd)).files == triton.generate(spec, "h200").files
