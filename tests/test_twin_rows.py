"""The row helpers of tilegen_runtime.h (RowsReduce, RowsAddScalar, RowsMulScalar, RowsSafeDiv,
ZeroIfNegInf; CreateVecIndex as MaskTile calls it), which run without per-row scalar loops (ReduceRepeat,
Brcb, level-0 Add/Sub/Mul, Compares/Select), on the hand twin and on the real-API twin (the public
asc-devkit headers; skipped without ``$ASC_DEVKIT`` and clang++-16), against NumPy. The kernel is
tests/twin_real/rows_kernels.asc: 16 rows of 128 floats (100 reduced, so a full and a partial 64-lane
chunk), the broadcast 8 rows at a time (two Brcb groups), -inf rows and zero divisors.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tilegen.backends import ascendc, twin
from tilegen.spec import builtin_spec

HERE = Path(__file__).resolve().parent
ROWS, CPAD, COLS = 16, 128, 100


def _files() -> dict[str, str]:
    runtime = dict(ascendc.generate(builtin_spec("tiny"), "ascend910b2").files)["tilegen_runtime.h"]
    return {
        "rows_kernels.asc": (HERE / "twin_real" / "rows_kernels.asc").read_text(),
        "twin_main.cpp": (HERE / "twin_real" / "rows_main.cpp").read_text(),
        "tiling.h": "",
        "tilegen_runtime.h": runtime,
    }


def _build(which: str) -> Path:
    if which == "hand":
        if twin.compiler() is None:
            pytest.skip("hand twin: no g++")
        return twin.build(_files())
    devkit = os.environ.get("ASC_DEVKIT")
    if not devkit or not (Path(devkit) / "include" / "kernel_operator.h").is_file():
        pytest.skip("real-API twin: ASC_DEVKIT is not set to an asc-devkit snapshot")
    if twin.real_compiler() is None:
        pytest.skip("real-API twin: clang++-16 is not installed")
    return twin.build_real(_files(), devkit)


@pytest.mark.parametrize("which", ["hand", "real"])
def test_row_helpers_match_numpy(which, tmp_path):
    exe = _build(which)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, CPAD)).astype(np.float32)
    x[2, :COLS] = -np.inf  # a row that sees no key: max -inf
    v = rng.standard_normal(ROWS).astype(np.float32)
    v[[3, 11]] = -np.inf
    v[[5, 12]] = 0.0
    x.tofile(tmp_path / "x")
    v.tofile(tmp_path / "v")
    proc = subprocess.run([str(exe), str(tmp_path / "x"), str(tmp_path / "v"), str(tmp_path / "y")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    y = np.fromfile(tmp_path / "y", dtype=np.float32)
    tile = ROWS * CPAD
    x64, v64 = x.astype(np.float64), v.astype(np.float64)[:, None]
    with np.errstate(all="ignore"):
        want = {
            "max": x64[:, :COLS].max(1),
            "sum": x64[:, :COLS].sum(1),
            "zero_if_neginf": np.where(v == -np.inf, 0.0, v64[:, 0]),
            "sub": x64 - v64,
            "mul": x64 * v64,
            "safe_div": np.where(v64 != 0, x64 / np.where(v64 == 0, 1.0, v64), 0.0),
            "index": 37.0 + np.arange(CPAD),
        }
    got = {
        "max": y[:ROWS],
        "sum": y[ROWS : 2 * ROWS],
        "zero_if_neginf": y[2 * ROWS : 3 * ROWS],
        "sub": y[3 * ROWS : 3 * ROWS + tile].reshape(ROWS, CPAD),
        "mul": y[3 * ROWS + tile : 3 * ROWS + 2 * tile].reshape(ROWS, CPAD),
        "safe_div": y[3 * ROWS + 2 * tile : 3 * ROWS + 3 * tile].reshape(ROWS, CPAD),
        "index": y[3 * ROWS + 3 * tile :],
    }
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-6, atol=2e-5, equal_nan=True, err_msg=f"{which} twin: {name}")
