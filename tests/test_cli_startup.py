"""`tilegen --help` starts fast: the parser is built from the standard library and file listings alone,
without importing NumPy, SymPy, Jinja2, torch or the compiler (checked on the modules a fresh process
has loaded, not on a timing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("numpy", "sympy", "jinja2", "torch", "ml_dtypes", "networkx", "tqdm", "yaml", "triton", "tilegen.core.spec", "tilegen.passes")

_PROBE = f"""
import sys
from tilegen.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} or any(m.startswith(h) for h in {HEAVY!r} if "." in h))
print("HEAVY=" + ",".join(heavy))
sys.exit(code)
"""


@pytest.mark.parametrize("argv", [["--help"], ["inspect", "--help"], ["run", "--help"], ["generate", "--help"], ["spec", "--help"], ["--version"]])
def test_help_imports_no_heavy_module(argv):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    heavy = proc.stdout.rsplit("HEAVY=", 1)[1].strip()
    assert heavy == "", f"tilegen {' '.join(argv)} imported {heavy}"
    assert "usage: tilegen" in proc.stdout or proc.stdout.startswith("tilegen ")


def test_help_lists_the_builtin_specs_and_targets():
    """The lists --help shows come from the same files the loaders read."""
    from tilegen.core.spec import builtin_specs
    from tilegen.core.targets import target_names

    proc = subprocess.run([sys.executable, "-m", "tilegen", "inspect", "--help"], capture_output=True, text=True, timeout=120, check=False)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0
    assert ", ".join(builtin_specs()) in text.replace("- ", "-") or all(name in text for name in builtin_specs())
    assert all(name in text for name in target_names())
