"""Rough edges of the CLI (issue 16): each test here failed before its fix."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tilegen
from tilegen.cli import main


def _tilegen(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilegen", *argv], capture_output=True, text=True, **kw)


def test_a_closed_pipe_ends_quietly():
    """`tilegen run --spec tiny | head -1`: the reader leaves after the first line; no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tilegen", "run", "--spec", "tiny-fp32"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait()
    assert first.startswith(b"tilegen run"), first
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert err == "" and rc == 141, (rc, err)


def test_version():
    proc = _tilegen("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"tilegen {tilegen.__version__}", proc
