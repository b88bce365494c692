"""Packed batches and attention sinks on the Ascend C backend: the generated kernels run on the hand twin
(g++, tilegen's emulation of the API) and on the real-API twin (Huawei's headers over tilegen's CCE layer;
skipped without ASC_DEVKIT and clang++-16), forward and backward, against the float64 reference of
tests/test_varlen.py, which runs each sequence densely on its own in torch (autograd for dq, dk, dv and
dsinks), under DESIGN §3's rule; the rows outside every sequence keep the harness's NaN poison in
O, L, dQ, dK and dV (the kernels never write them) and their NaN inputs never reach a result (the
kernels never read them); dsinks (reduced on the host) is bitwise the same for any core count.

Twin builds are cached by source hash (TILEGEN_TWIN_CACHE); one build per spec, shared by the tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from test_varlen import reference
from tilegen import api
from tilegen.core import dtypes
from tilegen.backends import ascendc
from tilegen.backends.ascendc import twin
from tilegen.harness.check import compare, lse_rel_floor
from tilegen.core.spec import builtin_spec

pytestmark = pytest.mark.skipif(twin.compiler() is None, reason="no g++ for the CPU twin")

ISSUE_CU_Q = np.array([0, 0, 1, 1, 3], np.int32)  # the issue's example: empty Q, empty K, length 1
ISSUE_CU_K = np.array([0, 3, 3, 8, 8], np.int32)
# lengths below and above the Ascend tiles (Br = 32, Bc = 64 here), Sq_s != Sk_s, an empty sequence
CU_Q = np.array([0, 50, 50, 81, 120], np.int32)
CU_K = np.array([0, 60, 75, 110, 170], np.int32)

# name -> (total_q, total_k, Hq, Hkv, D, dtype, cu_q, cu_k, causal, window, sinks); tokens past the
# last offset lie outside every sequence
CASES = {
    "issue-gqa9-causal-sinks": (5, 10, 9, 3, 64, "fp16", ISSUE_CU_Q, ISSUE_CU_K, True, (-1, -1), np.linspace(-1.0, 1.5, 9)),
    "tiles-window-bf16": (128, 176, 4, 2, 64, "bf16", CU_Q, CU_K, False, (20, 3), None),
}
_BUILDS: dict = {}


def _case(name):
    tq, tk, hq, hkv, d, dtype, cu_q, cu_k, causal, window, sinks = CASES[name]
    sinks = None if sinks is None else np.asarray(sinks, np.float32)
    shapes = ((tq, hq, d), (tk, hkv, d), (tk, hkv, d))
    spec, params, lay, sk = api.varlen_spec(*shapes, dtype, cu_q, cu_k, causal=causal, window=window, sinks=sinks)
    spec = spec.replace(name=f"varlen-{name}")
    if sk is not None:
        params = {**params, "sinks": sk}
    return spec, params, lay, cu_q, cu_k, dict(causal=causal, window=window, sinks=sk)


def _build(spec, real: bool, dkv_strategy=None):
    key = (spec.name, real, dkv_strategy)
    if key not in _BUILDS:
        files = ascendc.generate(spec, "ascend910b2", dkv_strategy=dkv_strategy).files
        programs = [p.program for p in ascendc.plan_programs(spec, dkv_strategy=dkv_strategy)[1]]
        exe = twin.build_real(files, os.environ["ASC_DEVKIT"]) if real else twin.build(files)
        _BUILDS[key] = (exe, programs)
    return _BUILDS[key]


def _inputs(spec, lay, seed=3):
    """Q, K, V, dO (logical BNSD, B = 1) with NaN in every token outside a sequence."""
    rng = np.random.default_rng(seed)
    nd = dtypes.numpy_dtype(spec.dtype)
    data = {n: rng.standard_normal(spec.logical_shapes[n], dtype=np.float32).astype(nd) for n in ("Q", "K", "V", "dO")}
    for n in ("Q", "dO"):
        data[n][:, :, ~lay.q_inside] = np.nan
    for n in ("K", "V"):
        data[n][:, :, ~lay.k_inside] = np.nan
    return data


def _tnd(x):
    return np.ascontiguousarray(x[0].transpose(1, 0, 2))  # logical [1, H, T, D] -> [T, H, D]


def _run_and_check(spec, params, lay, cu_q, cu_k, kw, real=False, blocks=4, data=None, dkv_strategy=None):
    exe, programs = _build(spec, real, dkv_strategy)
    data = _inputs(spec, lay) if data is None else data
    fwd, bwd = twin.run_attention(exe, spec, data, blocks=blocks, params=params, programs=programs)
    q, k, v, do = (np.nan_to_num(_tnd(data[n]).astype(np.float64)) for n in ("Q", "K", "V", "dO"))
    rkw = dict(scale=spec.softmax_scale, causal=kw["causal"], window=kw["window"], sinks=kw["sinks"])
    ro, rl, rg = reference(q, k, v, do, cu_q, cu_k, **rkw)
    po, pl, pg = reference(q, k, v, do, cu_q, cu_k, dtype=spec.dtype, **rkw)
    qi, ki = lay.q_inside, lay.k_inside
    o, lse = _tnd(fwd["O"]), fwd["L"][0]
    n = max(spec.seq_q, spec.seq_k, spec.head_dim_qk)
    comps = [compare("O", o[qi], ro[qi], po[qi], spec.dtype, terms=n), compare("L", lse[:, qi], rl[:, qi], pl[:, qi], "fp32", terms=n)]
    floor = lse_rel_floor(rl[:, qi])
    for name, rows in (("dQ", qi), ("dK", ki), ("dV", ki)):
        ours = _tnd(bwd[name])
        comps.append(compare(name, ours[rows], rg[name.lower()][rows], pg[name.lower()][rows], spec.dtype, rel_floor=floor, terms=n * n))
    if kw["sinks"] is not None:
        comps.append(compare("dsinks", bwd["dparams"]["sinks"], rg["dsinks"], pg["dsinks"], "fp32", rel_floor=floor, terms=n * n))
    bad = [c.line() for c in comps if not c.ok]
    assert not bad, "\n".join(bad)
    # the rows outside every sequence are never written: the harness's NaN poison is still there
    for name, x, rows in (("O", o, qi), ("dQ", _tnd(bwd["dQ"]), qi), ("dK", _tnd(bwd["dK"]), ki), ("dV", _tnd(bwd["dV"]), ki)):
        x = x.astype(np.float32)
        assert np.isnan(x[~rows]).all(), f"{name}: a row outside every sequence was written"
        assert not np.isnan(x[rows]).any(), f"{name}: NaN inside a sequence (an outside row was read)"
    assert np.isnan(lse[:, ~qi]).all() and not np.isnan(lse[:, qi]).any()
    return fwd, bwd


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_hand_twin_packed_batch_matches_per_sequence_reference(name, dkv_strategy):
    """Both dK/dV strategies: with atomic ones post_kv's guarded store still leaves every row outside a
    sequence unwritten."""
    spec, params, lay, cu_q, cu_k, kw = _case(name)
    fwd, _ = _run_and_check(spec, params, lay, cu_q, cu_k, kw, dkv_strategy=dkv_strategy)
    if name.startswith("issue"):
        # sequence 1 (query token 0) has no key: O = 0 and L = sigma_h; query 1's sequence 2 is 1 long
        assert np.all(fwd["O"][0, :, 0].astype(np.float32) == 0)
        assert np.array_equal(fwd["L"][0, :, 0], kw["sinks"])


def test_hand_twin_sinks_without_a_packed_batch():
    """Sinks on a dense causal GQA spec (BSND, tails): the forward starts from m = sigma_h, l = 1."""
    spec = builtin_spec("tiny-gqa").replace(name="gqa-sinks", window=(-1, 0), sinks=True)
    sinks = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    tq, tk = spec.seq_q, spec.seq_k
    lay = api.varlen_layout(np.array([0, tq], np.int32), np.array([0, tk], np.int32), tq, tk)
    kw = dict(causal=True, window=(-1, -1), sinks=sinks)
    _run_and_check(spec, {"sinks": sinks}, lay, lay.cu_q, lay.cu_k, kw)


def test_builtin_spec_and_dsinks_bitwise_equal_for_any_core_count():
    """The built-in varlen-sinks spec (its ids from the spec file): the reference check with 4 AI Cores,
    then dsinks with 3 AI Cores (other cores run the tiles) has the same bits."""
    spec = builtin_spec("varlen-sinks")
    vals = {p.name: np.asarray(p.values, np.int32) for p in spec.params}
    cu_q = np.array([0, 50, 50, 81, 120], np.int32)
    cu_k = np.array([0, 60, 75, 110, 170], np.int32)
    lay = api.varlen_layout(cu_q, cu_k, spec.seq_q, spec.seq_k)
    assert np.array_equal(vals["q_seq"], lay.q_seq) and np.array_equal(vals["k_seq"], lay.k_seq)
    assert np.array_equal(vals["q_off"], lay.q_off)
    sinks = np.array([1.0, -0.5, 0.0, 2.5], np.float32)
    kw = dict(causal=True, window=(-1, -1), sinks=sinks)
    data = _inputs(spec, lay)
    _, a = _run_and_check(spec, {"sinks": sinks}, lay, cu_q, cu_k, kw, data=data)
    exe, programs = _build(spec, False)
    _, b = twin.run_attention(exe, spec, data, blocks=3, params={"sinks": sinks}, programs=programs)
    assert np.array_equal(a["dparams"]["sinks"].view(np.uint32), b["dparams"]["sinks"].view(np.uint32))


def test_tilegen_run_twin_checks_the_packed_batch_with_sinks():
    """``tilegen run --spec varlen-sinks --twin``: the twin's outputs against the torch reference, with
    dsinks and the tokens outside every sequence untouched."""
    from tilegen.harness.runner import check_spec

    report = check_spec(builtin_spec("varlen-sinks"), backward="fused", twin_target="ascend910b2")
    assert report.ok, "\n".join(c.line() for c in report.comparisons)
    names = [c.name for c in report.comparisons]
    assert "dsinks (twin)" in names and "O (twin)" in names
    assert {n for n, _ in report.outside} >= {"O (twin)", "L (twin)", "dQ (twin)", "dK (twin)", "dV (twin)"}


def _real_api_missing() -> str:
    devkit = os.environ.get("ASC_DEVKIT")
    if not devkit or not (Path(devkit) / "include" / "kernel_operator.h").is_file():
        return "ASC_DEVKIT (an asc-devkit snapshot)"
    return "" if twin.real_compiler() else "clang++-16"


@pytest.mark.skipif(bool(_real_api_missing()), reason=f"real-API twin needs {_real_api_missing()}")
@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_real_api_twin_packed_batch_with_sinks(dkv_strategy):
    spec, params, lay, cu_q, cu_k, kw = _case("issue-gqa9-causal-sinks")
    _run_and_check(spec, params, lay, cu_q, cu_k, kw, real=True, dkv_strategy=dkv_strategy)
