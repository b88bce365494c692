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


def test_the_contract_sees_function_local_imports(tmp_path):
    """A planted upward import inside a function breaks the layers contract (so the check can fail)."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "tilegen", copy / "tilegen", ignore=shutil.ignore_patterns("__pycache__", "twin", "specs"))
    shutil.copytree(ROOT / "tools", copy / "tools", ignore=shutil.ignore_patterns("__pycache__", "ascend-headercheck"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    ir = copy / "tilegen" / "core" / "ir.py"
    ir.write_text(ir.read_text() + "\n\ndef _planted():\n    from tilegen.api import attention  # noqa: F401\n")
    env = dict(os.environ, PYTHONPATH=str(copy))
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=copy, env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "tilegen.core.ir -> tilegen.api" in done.stdout, done.stdout[-3000:]
