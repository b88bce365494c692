"""The per-call fast path of tilegen.torch (the plan cache): on the CPU, through Triton's interpreter.

The fast path is the CUDA route (``_FAST_DEVICES``); these tests add ``"cpu"`` to it, so that CPU tensors
run the generated Triton module in the interpreter (``TRITON_INTERPRET=1``) exactly as CUDA tensors run
the compiled one. Checked: a hit gives bitwise the results of the miss that made the plan, and both
match torch autograd on a float64 reference; a change of any key field (strides, dtype, shape, device
arguments, causal, window, scale, its type, deterministic, enable_gqa, the target, an edit of the target
file) misses; bad arguments are refused on a call whose good twin made a plan; no second derivative;
no fast path inside a dispatch mode. tests/test_gpu_percall.py repeats the hit/miss check on a GPU
and captures the path in a CUDA graph.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import math
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tilegen.torch as tt  # noqa: E402
from tilegen.torch import plans  # noqa: E402
from tilegen.core.errors import SpecError  # noqa: E402
from tilegen.core.resources import data_dir  # noqa: E402


@pytest.fixture()
def fast(monkeypatch):
    """The fast path on CPU tensors, with an empty plan table and zeroed counters."""
    monkeypatch.setattr(plans, "FAST_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(plans, "PLANS", {})
    monkeypatch.setattr(plans, "PLAN_STATS", {"hits": 0, "misses": 0})
    return tt


def _inputs(b=1, hq=2, hkv=2, sq=24, sk=24, d=16, dtype=torch.float16, seed=5):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=gen).to(dtype) for h, s in ((hq, sq), (hkv, sk), (hkv, sk), (hq, sq))]


def _sdpa(q, k, v, do, **kw):
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = tt.scaled_dot_product_attention(*xs, **kw)
    out.backward(do)
    return [out.detach(), *(x.grad for x in xs)]


def _reference(q, k, v, do, causal, scale=None):
    """float64 torch autograd of softmax(scale·QKᵀ, top-left causal) V with GQA by repeat."""
    xs = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
    g = q.shape[1] // k.shape[1]
    kk, vv = (x.repeat_interleave(g, dim=1) for x in xs[1:])
    s = xs[0] @ kk.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, -1) @ vv
    out.backward(do.double())
    return [out.detach(), *(x.grad for x in xs)]


def test_hit_gives_the_miss_results_and_the_reference(fast):
    q, k, v, do = _inputs(hq=4, hkv=2)
    miss = _sdpa(q, k, v, do, is_causal=True, enable_gqa=True)
    assert plans.PLAN_STATS == {"hits": 0, "misses": 2}  # the entry-point key and the op key
    hit = _sdpa(q, k, v, do, is_causal=True, enable_gqa=True)
    assert plans.PLAN_STATS == {"hits": 1, "misses": 2}
    ref = _reference(q, k, v, do, causal=True)
    for name, a, b, r in zip(("out", "dq", "dk", "dv"), miss, hit, ref):
        assert torch.equal(a, b), name
        err = (a.double() - r).abs().max().item()
        assert err < 2e-2 * max(1.0, r.abs().max().item()), (name, err)


def test_flash_attn_func_hit_matches_miss_and_deterministic_misses(fast):
    q, k, v, do = (x.transpose(1, 2).contiguous() for x in _inputs(sq=16, sk=32))

    def run(**kw):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = tt.flash_attn_func(*xs, **kw)
        out.backward(do)
        return [out.detach(), *(x.grad for x in xs)]

    a = run(causal=True)
    b = run(causal=True)
    assert plans.PLAN_STATS["hits"] == 1
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    misses = plans.PLAN_STATS["misses"]
    c = run(causal=True, deterministic=True)  # the separate dQ strategy: another module
    assert plans.PLAN_STATS["misses"] == misses + 2
    for x, y in zip(a, c):
        assert (x.double() - y.double()).abs().max().item() < 5e-3


def _changes(q, k, v):
    """(label, args, kwargs) of calls that differ from the base call in one key field each."""
    base = dict(is_causal=True)
    t = lambda x: x.transpose(2, 3).contiguous().transpose(2, 3)  # noqa: E731  same values, other strides
    return [
        ("strides", (t(q), k, v), base),
        ("dtype", (q.float(), k.float(), v.float()), base),
        ("shape", (q[:, :, :16], k, v), base),
        ("causal", (q, k, v), dict(is_causal=False)),
        ("scale", (q, k, v), dict(is_causal=True, scale=0.3)),
        ("scale type", (q, k, v), dict(is_causal=True, scale=1)),
        ("scale value after int", (q, k, v), dict(is_causal=True, scale=1.0)),
        ("enable_gqa", (q, k, v), dict(is_causal=True, enable_gqa=True)),
    ]


def test_a_change_of_any_key_field_misses(fast):
    q, k, v, _ = _inputs()
    with torch.no_grad():
        tt.scaled_dot_product_attention(q, k, v, is_causal=True)
        for label, args, kw in _changes(q, k, v):
            keys = _entry_keys(fast)
            tt.scaled_dot_product_attention(*args, **kw)
            assert len(_entry_keys(fast)) == len(keys) + 1, label  # a miss: a new key in the table
            hits = plans.PLAN_STATS["hits"]
            tt.scaled_dot_product_attention(*args, **kw)  # and then a hit
            assert plans.PLAN_STATS["hits"] == hits + 1 and len(_entry_keys(fast)) == len(keys) + 1, label


def _entry_keys(fast):
    return [key for key in plans.PLANS if key[0] != "op"]


def test_flash_window_and_target_changes_miss(fast, tmp_path):
    q, k, v, _ = (x.transpose(1, 2).contiguous() for x in _inputs())
    target = tmp_path / "gpu.toml"
    shutil.copy(data_dir("targets") / "h200.toml", target)
    with torch.no_grad():
        calls = [
            dict(window_size=(8, 0)),
            dict(window_size=(8, 2)),
            dict(window_size=(8, 2), softmax_scale=0.2),
            dict(window_size=(8, 2), target=str(target)),
        ]
        for kw in calls:
            keys = _entry_keys(fast)
            tt.flash_attn_func(q, k, v, **kw)
            assert len(_entry_keys(fast)) == len(keys) + 1, kw
        before = dict(plans.PLAN_STATS)
        tt.flash_attn_func(q, k, v, **calls[-1])
        assert plans.PLAN_STATS["hits"] == before["hits"] + 1
        # an edited target file: the plan's stamp no longer matches
        st = os.stat(target)
        with open(target, "a") as f:
            f.write("\n# edited\n")
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        before = dict(plans.PLAN_STATS)
        tt.flash_attn_func(q, k, v, **calls[-1])
        assert plans.PLAN_STATS["hits"] == before["hits"], "an edited target file must miss"


def test_bad_arguments_are_refused_after_a_good_twin_made_a_plan(fast):
    q, k, v, _ = _inputs()
    with torch.no_grad():
        tt.scaled_dot_product_attention(q, k, v, scale=1)
        tt.flash_attn_func(q, k, v, window_size=(1, 0))
        with pytest.raises(SpecError, match="scale = True"):
            tt.scaled_dot_product_attention(q, k, v, scale=True)  # True == 1, but a bool is refused
        with pytest.raises(SpecError, match="window_size"):
            tt.flash_attn_func(q, k, v, window_size=(True, 0))
        with pytest.raises(SpecError, match="is_causal"):
            tt.scaled_dot_product_attention(q, k, v, is_causal=1)
        with pytest.raises(SpecError, match="scale"):
            tt.scaled_dot_product_attention(q, k, v, scale=[1.0])  # unhashable: the slow path names it


def test_no_second_derivative_on_the_fast_path(fast):
    q, k, v, _ = _inputs()
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = tt.scaled_dot_product_attention(*xs, is_causal=True)
    with pytest.raises(NotImplementedError, match="no second derivative"):
        torch.autograd.grad(out.float().sum(), xs, create_graph=True)


def test_dispatch_modes_and_subclasses_take_the_custom_ops(fast):
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v, _ = _inputs()
    assert plans.fast_key("sdpa", q, k, v, True) is not None
    with Log():
        assert plans.fast_key("sdpa", q, k, v, True) is None
    p = torch.nn.Parameter(q)
    assert plans.fast_key("sdpa", p, k, v, True) is not None  # parameters are plain tensors here


def test_functorch_transforms_take_the_custom_ops(fast):
    from torch.func import vmap

    q, k, v, _ = _inputs()
    seen = []
    vmap(lambda x: seen.append(plans.fast_key("sdpa", x, k[0], v[0], True)) or x)(q)
    assert seen == [None]


def test_fast_path_backward_fills_no_gradient_of_lse(fast, monkeypatch):
    """lse takes no gradient: the fast path's backward gets None for it, not a zero-filled tensor (a fill
    kernel per call on a GPU). Counted with torch's profiler over a hit whose module allocates alone."""

    class Stub:
        def forward(self, q, k, v, **kw):
            return torch.empty_like(q), torch.empty(q.shape[:3])

        def backward(self, q, k, v, o, lse, do, **kw):
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    plan = plans.Plan(Stub(), plans.stamp("h200"))
    monkeypatch.setattr(plans, "op_plan", lambda *a, **kw: plan)
    q, k, v, do = _inputs()
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
    for _ in range(2):  # a miss, then a hit
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.autograd.grad(tt.scaled_dot_product_attention(*xs, is_causal=True), xs, do)
    names = [e.key for e in prof.key_averages()]
    assert plans.PLAN_STATS["hits"] == 1
    assert not {"aten::zeros", "aten::fill_", "aten::zero_"} & set(names), names


def test_percall_floor_says_it_needs_a_gpu(capsys):
    """benchmarks/percall_floor.py without CUDA: one line and status 2 (the run is tested on a GPU in
    tests/test_gpu_percall.py)."""
    import sys
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import percall_floor

    assert percall_floor.main(["--out", "/nonexistent"]) == 2
    assert "no CUDA device" in capsys.readouterr().out
