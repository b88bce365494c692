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


def test_lse_of_the_right_shape_but_wrong_dtype_names_both_dtypes():
    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 64, 16)).astype(np.float32) for _ in range(3))
    o, lse = tilegen.attention(q, k, v)
    with pytest.raises(tilegen.SpecError) as info:
        tilegen.attention_backward(q, k, v, o, lse.astype(np.float64), o)
    msg = str(info.value)
    assert "lse.dtype = 'float64'" in msg and "float32" in msg and "(1, 4, 64)" in msg, msg
    with pytest.raises(tilegen.SpecError) as info:
        tilegen.attention_backward(q, k, v, o, lse[:, :, :32], o)
    assert "lse.shape = (1, 4, 32)" in str(info.value), info.value
