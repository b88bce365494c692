"""The host steps after the kernels (tilegen/core/hoststeps.py): one implementation that tilegen runs on
NumPy arrays and every generated Triton module carries and runs on torch tensors.

References are independent of the code under test: dsinks against a float64 loop with math.fsum over
the rows of the batch; reduce_windows against a loop that places every window entry at its coordinates
and sums each element's contributions with math.fsum. The generated module (generated/varlen-sinks/h200) is checked to carry the
functions verbatim and to give, on torch tensors, what the reference gives.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from tilegen.core import hoststeps
from tilegen.core.hoststeps import carried_source, dsinks, reduce_tile_windows, reduce_windows

ROOT = Path(__file__).resolve().parent.parent
VARLEN_MODULE = ROOT / "generated" / "varlen-sinks" / "h200" / "tilegen_varlen_sinks.py"


def _sink_data(seed=0, b=2, h=3, s=37):
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((b, h, s)).astype(np.float32)
    lse = (rng.standard_normal((b, h, s)) + 2).astype(np.float32)
    sinks = rng.standard_normal(h).astype(np.float32)
    rows = rng.random(s) > 0.3
    return d, lse, sinks, rows


def _dsinks_reference(d, lse, sinks, rows):
    out = np.zeros(len(sinks), np.float64)
    for hh in range(len(sinks)):
        out[hh] = -math.fsum(math.exp(float(sinks[hh]) - float(lse[bb, hh, r])) * float(d[bb, hh, r])
                             for bb in range(d.shape[0]) for r in range(d.shape[2]) if rows is None or rows[r])
    return out


@pytest.mark.parametrize("with_rows", [False, True])
def test_dsinks_on_numpy_against_a_float64_loop(with_rows):
    d, lse, sinks, rows = _sink_data()
    rows = rows if with_rows else None
    got = dsinks(d, lse, sinks, rows)
    assert got.dtype == np.float32 and got.shape == sinks.shape
    np.testing.assert_allclose(got, _dsinks_reference(d, lse, sinks, rows), rtol=1e-6)
    assert got.tobytes() == dsinks(d, lse, sinks, rows).tobytes()


def test_dsinks_on_torch_against_a_float64_loop():
    torch = pytest.importorskip("torch")
    d, lse, sinks, rows = _sink_data(1)
    got = dsinks(torch.from_numpy(d), torch.from_numpy(lse), torch.from_numpy(sinks), torch.from_numpy(rows))
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), _dsinks_reference(d, lse, sinks, rows), rtol=1e-6)


def test_carried_source_takes_the_helpers_a_function_calls_and_refuses_others():
    text = carried_source("dsinks")
    assert text.index("def _namespace(") < text.index("def dsinks(") and "def carried_source" not in text
    with pytest.raises(ValueError, match=r"^nope: not a carried function of tilegen.core.hoststeps; accepted: "):
        carried_source("nope")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"carried_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_generated_module_carries_and_runs_the_same_dsinks():
    """The checked-in varlen-sinks module holds tilegen's dsinks verbatim (no second formula) and its
    copy, run on torch tensors, meets the reference."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    text = VARLEN_MODULE.read_text()
    assert carried_source("dsinks") in text and "torch.exp(sinks" not in text
    mod = _load(VARLEN_MODULE)
    d, lse, sinks, rows = _sink_data(2)
    got = mod.dsinks(torch.from_numpy(d), torch.from_numpy(lse), torch.from_numpy(sinks), torch.from_numpy(rows))
    np.testing.assert_allclose(got.numpy(), _dsinks_reference(d, lse, sinks, rows), rtol=1e-6)
    assert hoststeps.dsinks.__doc__ == mod.dsinks.__doc__


def _windows(seed, t=60, widths=(3, 5), shape=(4, 9)):
    """Partials whose windows land partly outside, several tiles per origin (as tiles of one diagonal)."""
    rng = np.random.default_rng(seed)
    origins = np.stack([rng.integers(-2, shape[0], t), rng.integers(-4, shape[1], t)], axis=1)
    origins[t // 2 :] = origins[: t - t // 2]  # repeated origins: several contributions per element
    part = rng.standard_normal((t, math.prod(widths))).astype(np.float32)
    coords = [(origins[k, 0] + e // widths[1], origins[k, 1] + e % widths[1]) for k in range(t) for e in range(part.shape[1])]
    flat = part.reshape(-1)
    for n, (r, c) in enumerate(coords):  # entries landing outside the array are 0, as the kernels write them
        if not (0 <= r < shape[0] and 0 <= c < shape[1]):
            flat[n] = 0.0
    return part, origins, widths, shape, coords


def _windows_reference(part, coords, shape):
    terms = {}
    for value, (r, c) in zip(part.reshape(-1), coords):
        if 0 <= r < shape[0] and 0 <= c < shape[1]:
            terms.setdefault((r, c), []).append(float(value))
    out = np.zeros(shape, np.float64)
    for (r, c), values in terms.items():
        out[r, c] = math.fsum(values)
    return out


def test_reduce_windows_on_numpy_against_a_per_element_loop():
    part, origins, widths, shape, coords = _windows(3)
    got, outside = reduce_windows(part, origins, widths, shape)
    assert got.dtype == np.float32 and got.shape == shape and outside == 0
    np.testing.assert_allclose(got, _windows_reference(part, coords, shape), rtol=1e-6, atol=1e-6)
    assert got.tobytes() == reduce_windows(part, origins, widths, shape)[0].tobytes()


def test_reduce_windows_on_torch_against_a_per_element_loop():
    torch = pytest.importorskip("torch")
    part, origins, widths, shape, coords = _windows(4)
    got, outside = reduce_windows(torch.from_numpy(part), torch.from_numpy(origins), widths, shape)
    assert got.dtype == torch.float32 and float(outside) == 0
    np.testing.assert_allclose(got.numpy(), _windows_reference(part, coords, shape), rtol=1e-6, atol=1e-6)


def test_reduce_windows_with_a_table_as_wide_as_the_most_entries_per_element():
    """4100 tiles on 1024 elements: past 2^22 table cells the table is as wide as the most entries
    one element takes (the other path) and gives the same values."""
    rng = np.random.default_rng(7)
    origins = rng.integers(0, 1024, (4100, 1))
    part = rng.standard_normal((4100, 1)).astype(np.float32)
    coords = [(0, int(o)) for o in origins[:, 0]]
    got, outside = reduce_windows(part, origins, (1,), (1024,))
    np.testing.assert_allclose(got, _windows_reference(part, coords, (1, 1024))[0], rtol=1e-6, atol=1e-6)
    assert outside == 0


def test_reduce_windows_reports_entries_landing_outside():
    part, origins, widths, shape, coords = _windows(5)
    n = next(n for n, (r, c) in enumerate(coords) if not (0 <= r < shape[0] and 0 <= c < shape[1]))
    part.reshape(-1)[n] = 0.5
    assert reduce_windows(part, origins, widths, shape)[1] == 0.5


def _tile_windows(seed):
    """Partials [B 2, Hq 3, nQ 4, nK 5, 2 halves, W 12] of a table [3, 40] whose window of tile (b, h, i, j)
    starts at (h, 4 i - 3 j + 14): windows of neighbouring diagonals overlap."""
    rng = np.random.default_rng(seed)
    part = rng.standard_normal((2, 3, 4, 5, 2, 12)).astype(np.float32)
    return part, (1, 12), (3, 40)


def _tile_reference(part, widths, shape):
    terms = {}
    for b, h, i, j, half in np.ndindex(part.shape[:-1]):
        for e in range(part.shape[-1]):
            r, c = h, 4 * i - 3 * j + 14 + e
            if 0 <= c < shape[1]:
                terms.setdefault((r, c), []).append(float(part[b, h, i, j, half, e]))
    out = np.zeros(shape)
    for key, values in terms.items():
        out[key] = math.fsum(values)
    return out


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_reduce_tile_windows_against_a_per_element_loop(library):
    """The tiles sharing an origin (every batch and both halves here) are summed first, the rest placed:
    the same values as placing every entry of every tile."""
    part, widths, shape = _tile_windows(6)
    reads = (False, True, True, True, False)

    def origin_of(b, h, i, j, _half):
        return h, 4 * i - 3 * j + 14

    if library == "torch":
        torch = pytest.importorskip("torch")
        got, outside = reduce_tile_windows(torch.from_numpy(part), reads, origin_of, widths, shape)
        got, outside = got.numpy(), float(outside)
    else:
        got, outside = reduce_tile_windows(part, reads, origin_of, widths, shape)
    np.testing.assert_allclose(got, _tile_reference(part, widths, shape), rtol=1e-6, atol=1e-6)
    assert outside == 0
