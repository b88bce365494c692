"""The row helpers of tilegen_runtime.h (RowsReduce, RowsAddScalar, RowsMulScalar, RowsSafeDiv,
ZeroIfNegInf, CreateVecIndex, MaskTile), which run without per-row scalar loops (ReduceRepeat, Brcb,
level-0 Add/Sub/Mul/Compare/Select, Compares), on the hand twin and on the real-API twin (the public
asc-devkit headers; skipped without ``$ASC_DEVKIT`` and clang++-16), against NumPy. The kernel is
tests/twin_real/rows_kernels.asc: 16 rows of 128 floats (100 reduced, so a full and a partial 64-lane
chunk), the broadcast 8 rows at a time (two Brcb groups), -inf rows and zero divisors; MaskTile on six
windows (cut by either bound, both, neither; rows past Sq; columns past Sk; every column hidden), with
the generated kernels' 64-row Brcb scratch and compare bits for 32 rows (one group of the 16 rows) and
for 8 rows (two groups) at a time, and the first window again without cutOnly (every bound runs).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tilegen.backends.ascendc import twin
from tilegen.core.resources import runtime_text

HERE = Path(__file__).resolve().parent
ROWS, CPAD, COLS = 16, 128, 100
# the MASKS of rows_kernels.asc: row0, col0, Sq, Sk, offset, left, right (left/right < 0: unbounded)
MASKS = [(40, 0, 1000, 1000, 60, -1, 0), (100, 64, 110, 1000, 0, -1, 0), (0, 0, 16, 100, 50, 30, 20),
         (64, 0, 200, 400, 0, 20, -1), (0, 0, 100, 1000, 500, 4, 4), (0, 0, 100, 1000, 0, -1, -1)]


def _masked(x: np.ndarray, row0, col0, sq, sk, off, left, right) -> np.ndarray:
    """DESIGN §3: key c visible to query r iff r + off - left <= c <= r + off + right, r < Sq, c < Sk."""
    r = row0 + np.arange(ROWS)[:, None]
    c = col0 + np.arange(CPAD)[None, :]
    seen = (r < sq) & (c < sk)
    if left >= 0:
        seen &= c >= r + off - left
    if right >= 0:
        seen &= c <= r + off + right
    return np.where(seen, x.astype(np.float64), -np.inf)


def _files() -> dict[str, str]:
    """The rows kernel with the runtime header as tilegen ships it (every section in, markers and all:
    both twins compile the shipped file as it is)."""
    runtime = runtime_text("ascendc", "tilegen_runtime.h")
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
        want.update({f"mask{k}": _masked(x, *m) for k, m in enumerate(MASKS)})
    got = {
        "max": y[:ROWS],
        "sum": y[ROWS : 2 * ROWS],
        "zero_if_neginf": y[2 * ROWS : 3 * ROWS],
        "sub": y[3 * ROWS : 3 * ROWS + tile].reshape(ROWS, CPAD),
        "mul": y[3 * ROWS + tile : 3 * ROWS + 2 * tile].reshape(ROWS, CPAD),
        "safe_div": y[3 * ROWS + 2 * tile : 3 * ROWS + 3 * tile].reshape(ROWS, CPAD),
        "index": y[3 * ROWS + 3 * tile : 3 * ROWS + 3 * tile + CPAD],
    }
    at = 3 * ROWS + 3 * tile + CPAD
    got.update({f"mask{k}": y[at + k * tile : at + (k + 1) * tile].reshape(ROWS, CPAD) for k in range(len(MASKS))})
    got["mask0_every_bound"] = y[at + len(MASKS) * tile : at + (len(MASKS) + 1) * tile].reshape(ROWS, CPAD)
    want["mask0_every_bound"] = want["mask0"]
    # the cases cover what they say: every one but the last hides scores, the fifth all of them
    hidden = [int(np.isinf(want[f"mask{k}"]).sum() - np.isinf(x).sum()) for k in range(len(MASKS))]
    assert min(hidden[:-1]) > 0 and hidden[-1] == 0 and np.isinf(want["mask4"]).all()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-6, atol=2e-5, equal_nan=True, err_msg=f"{which} twin: {name}")
