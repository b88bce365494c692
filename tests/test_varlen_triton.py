"""Packed batches (varlen) and attention sinks in the Triton backend, run in Triton's interpreter on CPU.

The truth is tests/test_varlen.py's reference: each sequence attended densely on its own in float64
torch (autograd for dq, dk, dv and dsinks; the sink as one more logit column, as transformers' gpt-oss
eager attention), never tilegen's code, under DESIGN §3's accuracy rule. The Triton path of
tilegen.torch (the one CUDA tensors take) runs here on CPU tensors: ``tilegen.torch.device.triton_path`` is patched to
say yes. Tile sizes are 16 x 16 through a target file whose only tiles are 16 (the h200 file cut
before its measured rows), so the small shapes span several tiles. Cases: the issue's offsets
(empty Q, empty K, length 1) with Hq 9 / Hkv 3; lengths below and above a tile with tokens outside
every sequence; D 64 and 80; causal and windows; sinks with and without a mask; fp32, fp16, bf16; NaN
sentinels in the kernels' output buffers at the tokens outside every sequence; dsinks bitwise equal
across runs; the host block table equal to the classify kernel's.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest
import torch

from tilegen import api
from tilegen.core import validate
from tilegen.torch import extras, plans
from tilegen.torch.call import Call
from tilegen.harness.check import compare, lse_rel_floor
from tilegen.core.targets import load_target

pytest.importorskip("triton")
from test_varlen import CU_K, CU_Q, ISSUE_CU_K, ISSUE_CU_Q, _data, reference  # noqa: E402


@pytest.fixture(scope="module")
def target16(tmp_path_factory):
    """A GPU target whose only tile sizes are 16 (the h200 file before its measured schedule rows)."""
    text = open(load_target("h200").path, encoding="utf-8").read()
    text = text[: text.index("[[triton.schedule]]")]
    text = text.replace('name = "h200"', 'name = "h200-tiles16"', 1)
    lines = [("Br = [16]" if ln.startswith("Br = [") else "Bc = [16]" if ln.startswith("Bc = [") else ln) for ln in text.split("\n")]
    path = tmp_path_factory.mktemp("target") / "h200-tiles16.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def triton_path(monkeypatch):
    import tilegen.torch as tt
    from tilegen.torch import device

    monkeypatch.setattr(device, "triton_path", lambda x: True)
    return tt


_T = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _np(x: torch.Tensor) -> np.ndarray:
    x = x.detach()
    return x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()


def _tensor(a, dtype):
    return torch.tensor(np.asarray(a, dtype=np.float32)).to(_T[dtype]).requires_grad_(True)


def _varlen(tt, target, q, k, v, do, cu_q, cu_k, dtype, *, causal=False, window=(-1, -1), sinks=None):
    """flash_attn_varlen_func on the Triton path with autograd: (out, lse, grads by name) as float32."""
    tq, tk, tv = (_tensor(x, dtype) for x in (q, k, v))
    ts = None if sinks is None else torch.tensor(sinks, requires_grad=True)
    call = extras.varlen_call(tq, tk, tv, cu_q, cu_k, None, None, scale=None, window=validate.window(causal, window), softcap=None,
                              alibi_slopes=None, sinks=ts, dq_strategy=None, target=target)
    out, lse = extras.ExtrasAttention.apply(tq, tk, tv, ts, None, call)
    (out.float() * torch.tensor(np.asarray(do, np.float32))).sum().backward()
    grads = {"dq": _np(tq.grad), "dk": _np(tk.grad), "dv": _np(tv.grad)}
    if ts is not None:
        grads["dsinks"] = ts.grad.numpy()
    return _np(out), lse.numpy(), grads


def _check(q, k, v, do, cu_q, cu_k, dtype, ours, *, causal=False, window=(-1, -1), sinks=None):
    o, lse, grads = ours
    rkw = dict(scale=q.shape[-1] ** -0.5, causal=causal, window=window, sinks=sinks)
    ro, rl, rg = reference(q, k, v, do, cu_q, cu_k, **rkw)
    po, pl, pg = reference(q, k, v, do, cu_q, cu_k, dtype=dtype, **rkw)
    n = max(q.shape[0], k.shape[0], q.shape[2])
    for name, x, ref, plain, dt in (("O", o, ro, po, dtype), ("L", lse, rl, pl, "fp32")):
        c = compare(name, x, ref, plain, dt, terms=n)
        assert c.ok, c.line()
    if sinks is not None and dtype != "fp32":
        # dsinks is formed from the stored O (DESIGN §3: D = rowsum(dO∘O) of the output in its dtype), so
        # its plain same-precision counterpart is that formula on the plain O and L, in float64
        d = np.einsum("thd,thd->ht", np.asarray(do, np.float64), po)
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.exp(np.asarray(sinks, np.float64)[:, None] - pl) * d
        pg = dict(pg, dsinks=-np.where(np.isfinite(pl), w, 0.0).sum(axis=1))
    floor = lse_rel_floor(rl)
    for name in grads:
        assert not np.isnan(grads[name]).any(), name
        c = compare(name, grads[name], rg[name], pg[name], dtype if name != "dsinks" else "fp32", rel_floor=floor, terms=n * n)
        assert c.ok, c.line()


def _garbage(q, k, v, do, nq, nk):
    """NaN in the tokens outside every sequence (from nq / nk on): they must never be read."""
    for x, n in ((q, nq), (k, nk), (v, nk), (do, nq)):
        x[n:] = np.nan


def test_issue_offsets_gqa_9_3_sinks_and_causal(triton_path, target16):
    """cu_q = [0,0,1,1,3], cu_k = [0,3,3,8,8]: every query token is in a sequence without a key:
    o = 0, lse = σ_h, zero gradients, dsinks = 0 (D = 0), with and without causal."""
    q, k, v, do = _data(3, 8, 9, 3, 64, "fp32")
    sinks = np.linspace(-1.0, 1.5, 9).astype(np.float32)
    for causal in (False, True):
        ours = _varlen(triton_path, target16, q, k, v, do, ISSUE_CU_Q, ISSUE_CU_K, "fp32", causal=causal, sinks=sinks)
        _check(q, k, v, do, ISSUE_CU_Q, ISSUE_CU_K, "fp32", ours, causal=causal, sinks=sinks)
        o, lse, g = ours
        assert np.all(o == 0) and np.array_equal(lse, np.repeat(sinks[:, None], 3, axis=1))
        assert all(np.all(g[n] == 0) for n in g)
    # the public entry point, FlashAttention's names, takes the same path
    ts = torch.tensor(sinks, requires_grad=True)
    out = triton_path.flash_attn_varlen_func(torch.tensor(q), torch.tensor(k), torch.tensor(v), torch.tensor(ISSUE_CU_Q), torch.tensor(ISSUE_CU_K),
                                             2, 5, causal=True, sinks=ts, target=target16)
    out.sum().backward()
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(ts.grad, torch.zeros_like(ts))


@pytest.mark.parametrize("dtype, d, causal, window, with_sinks", [
    ("fp32", 80, True, (-1, -1), False),
    ("fp16", 64, False, (4, 2), True),
    ("bf16", 64, True, (6, -1), True),
    ("fp32", 64, False, (-1, -1), True),
])
def test_lengths_across_tiles(triton_path, target16, dtype, d, causal, window, with_sinks):
    """CU_Q/CU_K: Sq_s = 5, 0, 20, 3, 13 and Sk_s = 9, 3, 18, 0, 22 on 16-token tiles, 4 query and
    3 key tokens outside every sequence holding NaN; GQA 4 / 2."""
    q, k, v, do = _data(45, 55, 4, 2, d, dtype, seed=1)
    _garbage(q, k, v, do, 41, 52)
    sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32) if with_sinks else None
    ours = _varlen(triton_path, target16, q, k, v, do, CU_Q, CU_K, dtype, causal=causal, window=window, sinks=sinks)
    _check(q, k, v, do, CU_Q, CU_K, dtype, ours, causal=causal, window=window, sinks=sinks)
    o, lse, g = ours
    assert np.all(o[41:] == 0) and np.all(np.isneginf(lse[:, 41:])) and np.all(g["dq"][41:] == 0)
    assert np.all(g["dk"][52:] == 0) and np.all(g["dv"][52:] == 0)
    if with_sinks:  # the sequence without a key (s = 3, tokens 25..27): lse = σ_h exactly
        assert np.array_equal(lse[:, 25:28], np.repeat(sinks[:, None], 3, axis=1)) and np.all(o[25:28] == 0)


def _module(target, q, k, v, cu_q, cu_k, dtype, sinks, causal, strategy="atomic"):
    from tilegen.backends import triton as tb

    spec, arrays, lay, sk = api.varlen_spec(q.shape, k.shape, v.shape, dtype, cu_q, cu_k, causal=causal, sinks=sinks)
    return tb.load(spec, target, strategy), {n: torch.from_numpy(a) for n, a in arrays.items()}


@pytest.mark.parametrize("strategy", ["atomic", "separate"])
def test_guarded_rows_never_read_nor_written(target16, strategy):
    """The kernels' own output buffers, NaN-poisoned: the tokens outside every sequence keep the NaN
    in O, L, dQ, dK, dV (never written), every other row is finite although q, k, v, do hold NaN at
    those tokens (never read); the module's own allocation (no poison) holds 0 / −inf there."""
    q, k, v, do = _data(45, 55, 4, 2, 16, "fp16", seed=6)
    _garbage(q, k, v, do, 41, 52)
    sinks = np.array([0.5, -1.0, 0.0, 1.0], np.float32)
    module, params = _module(target16, q, k, v, CU_Q, CU_K, "fp16", sinks, True, strategy)
    t = lambda x: torch.from_numpy(x)[None]  # noqa: E731
    kw = dict(sinks=torch.from_numpy(sinks), params=params)
    o, lse = module.forward(t(q), t(k), t(v), poison=True, **kw)
    o32, l32 = o[0].float().numpy(), lse[0].numpy()
    assert np.isnan(o32[41:]).all() and np.isnan(l32[:, 41:]).all()
    assert not np.isnan(o32[:41]).any() and not np.isnan(l32[:, :41]).any()
    dq, dk, dv, dparams = module.backward(t(q), t(k), t(v), o, lse, t(do), poison=True, **kw)
    for name, x, n in (("dq", dq, 41), ("dk", dk, 52), ("dv", dv, 52)):
        x = x[0].float().numpy()
        assert np.isnan(x[n:]).all() and not np.isnan(x[:n]).any(), name
    assert np.isfinite(dparams["sinks"].numpy()).all()
    o2, lse2 = module.forward(t(q), t(k), t(v), **kw)
    assert np.all(o2[0, 41:].float().numpy() == 0) and np.all(np.isneginf(lse2[0, :, 41:].numpy()))
    assert torch.equal(o2[0, :41], o[0, :41])


def test_dsinks_bitwise_reproducible(triton_path, target16):
    q, k, v, do = _data(45, 55, 2, 2, 16, "bf16", seed=3)
    sinks = np.array([1.0, -2.0], np.float32)
    first = _varlen(triton_path, target16, q, k, v, do, CU_Q, CU_K, "bf16", window=(5, 0), sinks=sinks)[2]["dsinks"]
    again = _varlen(triton_path, target16, q, k, v, do, CU_Q, CU_K, "bf16", window=(5, 0), sinks=sinks)[2]["dsinks"]
    assert first.tobytes() == again.tobytes()


@pytest.mark.parametrize("softcap, causal", [(0.0, False), (3.0, True)])
def test_dense_flash_attn_func_sinks(triton_path, target16, softcap, causal):
    """flash_attn_func(sinks=...) on the Triton path (without a mod, and with softcap + causal): each
    batch row is one sequence of the reference."""
    b, sq, sk, hq, hkv, d = 2, 20, 24, 4, 2, 32
    q, k, v, do = _data(b * sq, b * sk, hq, hkv, d, "fp32", seed=7)
    q = (q * 2).astype(np.float32)
    sinks = np.array([0.25, -0.5, 1.5, 0.0], np.float32)
    tq, tk, tv = (torch.tensor(x.reshape(b, -1, *x.shape[1:]), requires_grad=True) for x in (q, k, v))
    ts = torch.tensor(sinks, requires_grad=True)
    out = triton_path.flash_attn_func(tq, tk, tv, causal=causal, softcap=softcap, sinks=ts, target=target16)
    (out * torch.tensor(do.reshape(b, sq, hq, d))).sum().backward()
    cu_q, cu_k = np.arange(b + 1) * sq, np.arange(b + 1) * sk
    ro, _, rg = reference(q, k, v, do, cu_q, cu_k, scale=d ** -0.5, causal=causal, softcap=softcap or None, sinks=sinks)
    assert np.abs(out.detach().numpy().reshape(-1, hq, d) - ro).max() < 2e-5
    for x, name in ((tq, "dq"), (tk, "dk"), (tv, "dv")):
        assert np.abs(x.grad.numpy().reshape(-1, *x.shape[2:]) - rg[name]).max() < 5e-5, name
    assert np.abs(ts.grad.numpy() - rg["dsinks"]).max() < 5e-5


def _brute_classes(cu_q, cu_k, total_q, total_k, br, bc, window):
    """The classes counted by brute force over every (query, key) pair (an independent third opinion)."""
    q_seq = np.full(total_q, -1)
    k_seq = np.full(total_k, -2)
    off = np.zeros(total_q, np.int64)
    for s in range(len(cu_q) - 1):
        q_seq[cu_q[s]:cu_q[s + 1]] = s
        k_seq[cu_k[s]:cu_k[s + 1]] = s
        off[cu_q[s]:cu_q[s + 1]] = cu_k[s + 1] - cu_q[s + 1]
    r, c = np.arange(total_q)[:, None], np.arange(total_k)[None, :]
    vis = q_seq[:, None] == k_seq[None, :]
    if window[1] >= 0:
        vis &= c <= r + off[:, None] + window[1]
    if window[0] >= 0:
        vis &= c >= r + off[:, None] - window[0]
    nq, nk = -(-total_q // br), -(-total_k // bc)
    pad = np.zeros((nq * br, nk * bc), bool)
    pad[:total_q, :total_k] = vis
    n = pad.reshape(nq, br, nk, bc).sum(axis=(1, 3))
    return np.where(n == 0, 0.0, np.where(n == br * bc, 2.0, 1.0)).astype(np.float32)


CASES = [  # (cu_q, cu_k, total_q, total_k, window)
    (ISSUE_CU_Q, ISSUE_CU_K, 3, 8, (-1, -1)),
    (CU_Q, CU_K, 45, 55, (-1, 0)),
    (CU_Q, CU_K, 45, 55, (4, 2)),
    (np.array([0, 32, 32, 64], np.int32), np.array([0, 32, 48, 80], np.int32), 64, 80, (-1, -1)),  # whole tiles, one empty Q
    (np.array([0, 7, 40, 40, 71], np.int32), np.array([0, 0, 33, 60, 90], np.int32), 75, 96, (20, 0)),  # empty K, empty Q
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_host_block_table_equals_classify_kernel(target16, case):
    """tilegen.api.varlen_block_classes (closed form on the host) equals the table the classify
    kernel writes in Triton's interpreter, for the forward's and the backward's tile sizes (16 x 32
    and 32 x 16 here), and a brute-force count over every pair."""
    from tilegen.backends import triton as tb

    cu_q, cu_k, total_q, total_k, window = CASES[case]
    q, k, v, _ = _data(total_q, total_k, 1, 1, 16, "fp32")
    spec, arrays, lay, _ = api.varlen_spec(q.shape, k.shape, v.shape, "fp32", cu_q, cu_k, window=window)
    tiles = {"fwd": (16, 32), "bwd": (32, 16)}
    module = tb.load(spec, target16, tile_sizes=tiles)
    params = {n: torch.from_numpy(a) for n, a in arrays.items()}
    for kind, (br, bc) in tiles.items():
        assert module.TILE_SIZES[kind] == [br, bc]
        kernel = module.block_lists(kind, torch.from_numpy(q)[None], params=params)["BM"][0, 0].numpy()
        host = api.varlen_block_classes(lay.cu_q, lay.cu_k, total_q, total_k, br, bc, window)
        assert host.dtype == np.float32 and host.shape == kernel.shape
        assert np.array_equal(host, kernel), (kind, np.argwhere(host != kernel))
        assert np.array_equal(host, _brute_classes(lay.cu_q, lay.cu_k, total_q, total_k, br, bc, window))
        if case == 3:  # whole tiles inside one sequence: full, the class that skips the mask
            assert (host == 2).any()


def test_host_table_is_cached_and_replaces_the_classify_kernel(triton_path, target16, monkeypatch):
    """A varlen call on the Triton path launches no classify kernel, and a second call with the same
    offsets computes no table."""
    from tilegen import api as api_mod

    calls = []
    original = api_mod.varlen_block_classes
    monkeypatch.setattr(api_mod, "varlen_block_classes", lambda *a, **kw: calls.append(a) or original(*a, **kw))
    q, k, v, do = _data(45, 55, 2, 1, 16, "fp32", seed=8)
    cu_q, cu_k = np.array([0, 9, 30, 44], np.int32), np.array([0, 20, 21, 50], np.int32)
    first = _varlen(triton_path, target16, q, k, v, do, cu_q, cu_k, "fp32", causal=True)
    n = len(calls)
    assert n == 2  # the forward's table and the backward's
    import tilegen.backends.triton as tb

    mods = [m for m in tb._LOADED.values() if getattr(m, "SPEC", {}).get("name") == "varlen" and m.SHAPES["Sq"] == 45 and m.SHAPES["Hq"] == 2]
    for m in mods:
        monkeypatch.setattr(m, "_launch_fwd_classify", None)  # a launch would fail
        monkeypatch.setattr(m, "_launch_bwd_classify", None)
    again = _varlen(triton_path, target16, q, k, v, do, cu_q, cu_k, "fp32", causal=True)
    assert len(calls) == n
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[2]["dq"], again[2]["dq"])
    _check(q, k, v, do, cu_q, cu_k, "fp32", again, causal=True)


# --- the plan cache of the extras path (issue 15's per-call host cost) ------------------------------


@pytest.fixture
def fresh_plans(triton_path, monkeypatch):
    """An empty plan table and a count of the varlen specs built."""
    from tilegen import api as api_mod

    monkeypatch.setattr(plans, "PLANS", {})
    built = []
    original = api_mod.varlen_spec
    monkeypatch.setattr(api_mod, "varlen_spec", lambda *a, **kw: built.append(a) or original(*a, **kw))
    return triton_path, built


@pytest.mark.parametrize("shapes,dtypes,field,value", [
    (((5, 2, 16), (5, 2, 16), (5, 1, 16)), None, "v.shape", (5, 1, 16)),
    (((5, 2, 16), (5, 2, 8), (5, 2, 16)), None, "k.shape", (5, 2, 8)),
    (((5, 2, 16), (5, 2, 16), (5, 2, 16)), (torch.float32, torch.float16, torch.float32), "k.dtype", "q torch.float32, k torch.float16, v torch.float32"),
])
def test_bad_packed_tensors_are_refused_before_any_plan(fresh_plans, target16, shapes, dtypes, field, value):
    """On the Triton path q, k, v are checked as the NumPy API checks them (tilegen.core.validate.qkv,
    TND): the error names the caller's own tensor and shape, before a spec or module is built (not the
    generated module's check of its [1, T, H, D] view after the build)."""
    tt, built = fresh_plans
    q, k, v = (torch.zeros(s, dtype=(dtypes or (torch.float32,) * 3)[i]) for i, s in enumerate(shapes))
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    with pytest.raises(api.SpecError) as info:
        tt.flash_attn_varlen_func(q, k, v, cu, cu, None, None, target=target16)
    assert info.value.field == field and info.value.value == value and "\n" not in str(info.value)
    assert built == [] and plans.PLANS == {}


def _public(tt, target, q, k, v, cu_q, cu_k, dtype="fp32", *, causal=True, window=(-1, -1), softcap=0.0, sinks=None, max_q=None, transpose=False):
    """flash_attn_varlen_func on the Triton path, forward only; q/k/v as views of [H, T, D] storage
    when ``transpose`` (other strides, same values)."""
    def t(x):
        x = torch.tensor(np.asarray(x, np.float32)).to(_T[dtype])
        return x.transpose(0, 1).contiguous().transpose(0, 1) if transpose else x

    with torch.no_grad():
        return tt.flash_attn_varlen_func(t(q), t(k), t(v), torch.tensor(cu_q), torch.tensor(cu_k), max_q, None, causal=causal,
                                         window_size=window, softcap=softcap, sinks=None if sinks is None else torch.tensor(sinks), target=target)


def test_plan_hit_is_bitwise_the_miss_and_builds_nothing(fresh_plans, target16, monkeypatch):
    """Forward + backward twice with sinks: the second call (a hit) gives bitwise the out, lse, dq, dk,
    dv, dsinks of the first (a miss), builds no varlen spec (forward or backward) and passes the very
    parameter tensors of the first call to the module (no new array, no host-to-device copy)."""
    tt, built = fresh_plans
    from tilegen.backends import triton as tb

    q, k, v, do = _data(45, 55, 2, 1, 16, "fp32", seed=11)
    cu_q, cu_k = np.array([0, 9, 30, 44], np.int32), np.array([0, 20, 21, 50], np.int32)
    sinks = np.array([0.5, -1.0], np.float32)
    seen = []
    real_load = tb.load

    def load(*a, **kw):  # record the params every launch of the module receives
        module = real_load(*a, **kw)
        for name in ("forward", "backward"):
            fn = getattr(module, name)
            if not hasattr(fn, "_recorded"):
                def rec(*x, _fn=fn, **kws):
                    seen.append(dict(kws.get("params") or {}))
                    return _fn(*x, **kws)
                rec._recorded = True
                monkeypatch.setattr(module, name, rec)
        return module

    monkeypatch.setattr(tb, "load", load)
    miss = _varlen(tt, target16, q, k, v, do, cu_q, cu_k, "fp32", causal=True, sinks=sinks)
    assert len(built) == 1 and len(seen) == 2
    first = seen[:]
    hits = tt.PLAN_STATS["hits"]
    hit = _varlen(tt, target16, q, k, v, do, cu_q, cu_k, "fp32", causal=True, sinks=sinks)
    assert len(built) == 1, "a hit builds no spec"
    assert tt.PLAN_STATS["hits"] == hits + 1
    assert len(seen) == 4 and set(first[0]) == {"q_seq", "k_seq", "q_off"}
    for before, now in zip(first, seen[2:]):
        assert all(now[n] is before[n] for n in before), "a hit passes the plan's device arrays"
    assert miss[0].tobytes() == hit[0].tobytes() and miss[1].tobytes() == hit[1].tobytes()
    for name in ("dq", "dk", "dv", "dsinks"):
        assert miss[2][name].tobytes() == hit[2][name].tobytes(), name
    _check(q, k, v, do, cu_q, cu_k, "fp32", hit, causal=True, sinks=sinks)
    # the public entry point: its second call builds no spec either (no up-front check on a hit)
    _public(tt, target16, q, k, v, cu_q, cu_k, sinks=sinks)
    n = len(built)
    _public(tt, target16, q, k, v, cu_q, cu_k, sinks=sinks)
    assert len(built) == n
    # a new packing of the same shapes: no spec, the known module, gradients of its own offsets
    cu_q2, cu_k2 = np.array([0, 15, 30, 40], np.int32), np.array([0, 5, 40, 55], np.int32)
    ours = _varlen(tt, target16, q, k, v, do, cu_q2, cu_k2, "fp32", causal=True, sinks=sinks)
    assert len(built) == n
    _check(q, k, v, do, cu_q2, cu_k2, "fp32", ours, causal=True, sinks=sinks)


def test_plan_key_changes_miss(fresh_plans, target16):
    """Each of window, softcap, sinks present, dtype and strides gives another plan with its own spec;
    other offsets or max_seqlen_q give another plan without a spec (the spec does not hold them: the
    module of the known shapes is reused, the offsets' arrays and block tables are new); each result
    matches the reference of its own arguments."""
    tt, built = fresh_plans
    q, k, v, do = _data(45, 55, 2, 1, 16, "fp32", seed=12)
    cu_q, cu_k = np.array([0, 9, 30, 44], np.int32), np.array([0, 20, 21, 50], np.int32)
    sinks = np.array([0.5, -1.0], np.float32)
    base = dict(causal=True, window=(-1, -1), softcap=0.0, sinks=None, max_q=None, transpose=False, dtype="fp32")
    variants = [{}, dict(window=(5, 0)), dict(softcap=2.0), dict(sinks=sinks), dict(dtype="fp16"), dict(transpose=True)]
    outs = []
    for i, change in enumerate(variants):
        outs.append(_public(tt, target16, q, k, v, cu_q, cu_k, **{**base, **change}))
        assert len(built) == i + 1, change
    misses = tt.PLAN_STATS["misses"]
    other_cu_q = np.array([0, 9, 31, 44], np.int32)
    packed = _public(tt, target16, q, k, v, other_cu_q, cu_k, **base)  # other offsets
    longer = _public(tt, target16, q, k, v, cu_q, cu_k, **{**base, "max_q": 30})
    assert len(built) == len(variants) and tt.PLAN_STATS["misses"] == misses + 2
    for change in variants:  # all kept: each a hit now
        _public(tt, target16, q, k, v, cu_q, cu_k, **{**base, **change})
    _public(tt, target16, q, k, v, other_cu_q, cu_k, **base)
    assert len(built) == len(variants) and tt.PLAN_STATS["misses"] == misses + 2
    ro = reference(q, k, v, do, cu_q, cu_k, scale=16 ** -0.5, causal=True)[0]
    assert np.abs(outs[5].numpy() - ro).max() < 1e-5 and torch.equal(outs[5], outs[0]) and torch.equal(longer, outs[0])
    rw = reference(q, k, v, do, cu_q, cu_k, scale=16 ** -0.5, window=(5, 0))[0]
    assert np.abs(outs[1].numpy() - rw).max() < 1e-5
    rp = reference(q, k, v, do, other_cu_q, cu_k, scale=16 ** -0.5, causal=True)[0]
    assert np.abs(packed.numpy() - rp).max() < 1e-5 and not torch.equal(packed, outs[0])
    with pytest.raises(api.SpecError, match="max_seqlen_q"):  # a new packing's offsets are checked
        _public(tt, target16, q, k, v, cu_q, cu_k, **{**base, "max_q": 3})


def test_dense_sinks_plan_hit_builds_no_spec(triton_path, target16, monkeypatch):
    """flash_attn_func(sinks=...) on the Triton path: a second call builds no spec and gives bitwise
    the first call's output."""
    monkeypatch.setattr(plans, "PLANS", {})
    calls = []
    original = Call.spec
    monkeypatch.setattr(Call, "spec", lambda *a, **kw: calls.append(a) or original(*a, **kw))
    q, k, v, _ = _data(20, 24, 2, 1, 16, "fp32", seed=13)
    t = lambda x: torch.tensor(x[None])  # noqa: E731
    sinks = torch.tensor([0.25, -0.5])
    with torch.no_grad():
        first = triton_path.flash_attn_func(t(q), t(k), t(v), causal=True, softcap=3.0, sinks=sinks, target=target16)
        again = triton_path.flash_attn_func(t(q), t(k), t(v), causal=True, softcap=3.0, sinks=sinks, target=target16)
    assert len(calls) == 1 and torch.equal(first, again)


def test_plan_table_drops_the_least_recently_used(monkeypatch):
    """A full plan table drops its least recently used key, not every key."""
    monkeypatch.setattr(plans, "PLANS", {})
    monkeypatch.setattr(plans, "PLAN_LIMIT", 3)
    plan = plans.Plan(None, plans.stamp("h200"))
    for key in ("a", "b", "c"):
        plans.store(key, plan)
    assert plans.lookup("a") is plan  # "a" is now the most recently used
    plans.store("d", plan)
    assert list(plans.PLANS) == ["c", "a", "d"] and plans.lookup("b") is None
