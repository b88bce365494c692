"""The per-call fast path of tilegen.torch on a CUDA GPU (skipped without one).

Run this file on its own (``pytest tests/test_gpu_percall.py``): other test files set
``TRITON_INTERPRET=1`` when imported, and a kernel decorated after that runs in the interpreter.

Checked against torch's SDPA math backend in float32 (an independent reference) and against tilegen's
own eager calls: a hit gives the results of the miss that made the plan; the hit path makes no host
synchronisation (``torch.cuda.set_sync_debug_mode("error")``); forward and backward captured in a
CUDA graph and replayed on new input values give what eager calls give on those values.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="TRITON_INTERPRET=1: kernels would not be compiled"),
]

CASES = {
    # name: (api, B, Hq, Hkv, S, D, dtype, causal, deterministic)
    "sdpa-causal-bf16": ("sdpa", 1, 2, 2, 256, 64, torch.bfloat16, True, False),
    "sdpa-gqa-fp16": ("sdpa", 2, 8, 2, 192, 128, torch.float16, False, False),
    "flash-causal-deterministic": ("flash", 1, 4, 4, 320, 64, torch.bfloat16, True, True),
    "flash-gqa-causal": ("flash", 1, 8, 1, 128, 64, torch.float16, True, False),
    # one K/V tile covers the keys: the backward is main alone (pass direct-dq)
    "sdpa-short-causal-bf16": ("sdpa", 2, 4, 4, 100, 64, torch.bfloat16, True, False),
    "sdpa-short-gqa-fp16": ("sdpa", 1, 8, 2, 96, 64, torch.float16, False, False),
    "sdpa-short-gqa-fp16-d128": ("sdpa", 1, 8, 2, 96, 128, torch.float16, False, False),
}
SHORT = ("sdpa-short-causal-bf16", "sdpa-short-gqa-fp16", "sdpa-short-gqa-fp16-d128")


def _make(case, seed=0):
    api, b, hq, hkv, s, d, dtype, causal, det = CASES[case]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(b, h, s, d) for h in (hq, hkv, hkv, hq)]
    xs = [torch.randn(sh, device="cuda", dtype=dtype, generator=gen) for sh in shapes]
    if api == "flash":
        xs = [x.transpose(1, 2).contiguous() for x in xs]
    return xs


def _call(case, q, k, v):
    import tilegen.torch as tt

    api, _, hq, hkv, *_, causal, det = CASES[case]
    if api == "flash":
        return tt.flash_attn_func(q, k, v, causal=causal, deterministic=det)
    return tt.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)


def _eager(case, q, k, v, do):
    xs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = _call(case, *xs)
    out.backward(do)
    return [out.detach(), *(x.grad for x in xs)]


def _reference(case, q, k, v, do):
    """float32 SDPA math (BNSD), in the layout of the case."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    api, _, hq, hkv, *_, causal, _ = CASES[case]
    bnsd = (lambda x: x.transpose(1, 2)) if api == "flash" else (lambda x: x)
    xs = [bnsd(x).detach().float().requires_grad_(True) for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=causal, enable_gqa=hq != hkv)
    out.backward(bnsd(do).float())
    return [bnsd(out.detach()), *(bnsd(x.grad) for x in xs)]


def _close(ours, ref, what):
    for name, a, r in zip(("out", "dq", "dk", "dv"), ours, ref):
        err = (a.float() - r.float()).abs().max().item()
        assert err <= 2e-2 * max(1.0, r.abs().max().item()), f"{what} {name}: max abs err {err}"


@pytest.mark.parametrize("case", list(CASES))
def test_hit_matches_miss_and_the_math_reference(case, monkeypatch):
    from tilegen.torch import plans

    monkeypatch.setattr(plans, "PLANS", {})
    monkeypatch.setattr(plans, "PLAN_STATS", {"hits": 0, "misses": 0})
    q, k, v, do = _make(case)
    miss = _eager(case, q, k, v, do)
    hit = _eager(case, q, k, v, do)
    assert plans.PLAN_STATS["hits"] == 1
    det = CASES[case][-1]
    for name, a, b in zip(("out", "dq", "dk", "dv"), miss, hit):
        if name == "dq" and not det:  # float atomics: the order of the adds may differ
            assert (a.float() - b.float()).abs().max().item() <= 1e-2, name
        else:
            assert torch.equal(a, b), name
    _close(hit, _reference(case, q, k, v, do), "hit")


@pytest.mark.parametrize("case", ["sdpa-causal-bf16", "flash-causal-deterministic"])
def test_hit_path_makes_no_host_sync(case):
    q, k, v, do = _make(case)
    _eager(case, q, k, v, do)  # the miss: compiles, loads
    torch.cuda.synchronize()
    xs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = _call(case, *xs)
        out.backward(do)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("case", list(CASES))
def test_cuda_graph_capture_and_replay_match_eager(case):
    q, k, v, do = _make(case)
    static = [x.clone().requires_grad_(True) for x in (q, k, v)]
    static_do = do.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: compile, load, make the plan
        for _ in range(3):
            for x in static:
                x.grad = None
            _call(case, *static).backward(static_do)
    torch.cuda.current_stream().wait_stream(side)
    for x in static:
        x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _call(case, *static)
        static_out.backward(static_do)
    static_grads = [x.grad for x in static]
    for seed in (11, 12):
        new = _make(case, seed=seed)
        with torch.no_grad():
            for x, n in zip((*static, static_do), new):
                x.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        replayed = [static_out.detach().clone(), *(g.clone() for g in static_grads)]
        eager = _eager(case, *new)
        det = CASES[case][-1]
        for name, a, b in zip(("out", "dq", "dk", "dv"), replayed, eager):
            if name == "dq" and not det:
                assert (a.float() - b.float()).abs().max().item() <= 1e-2, (seed, name)
            else:
                assert torch.equal(a, b), (seed, name)
        _close(replayed, _reference(case, *new), f"replay seed {seed}")


DIRECT_CASES = {
    # name: (Hq, Hkv, dtype, causal)
    "mha-causal-bf16": (4, 4, torch.bfloat16, True),
    "mha-full-fp16": (4, 4, torch.float16, False),
    "gqa-causal-fp16": (8, 2, torch.float16, True),
    "gqa-full-bf16": (8, 2, torch.bfloat16, False),
}


@pytest.mark.parametrize("strategy", ["separate", "atomic"])
@pytest.mark.parametrize("case", list(DIRECT_CASES))
def test_direct_launch_is_taken_and_gives_the_ordinary_bits(case, strategy, monkeypatch):
    """The generated module's direct launch (through the compiled kernel, from a specialisation's
    second launch) against Triton's ordinary launch of the same kernels: bitwise the same out, lse, dk,
    dv (and dq with the deterministic "separate" strategy; with float atomics the order of dq's adds
    may differ), and every launch after the first is direct (LAUNCHES counter)."""
    from tilegen.backends import triton as triton_backend
    from tilegen.core.spec import AttentionSpec

    hq, hkv, dtype, causal = DIRECT_CASES[case]
    spec = AttentionSpec(batch=2, heads_q=hq, heads_kv=hkv, seq_q=200, seq_k=200, head_dim_qk=64, head_dim_v=64,
                         dtype={torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype], window=(-1, 0) if causal else (-1, -1),
                         layout="BNSD", name="direct")
    m = triton_backend.load(spec, "h200", strategy)
    monkeypatch.setattr(m, "_DIRECT", {})
    monkeypatch.setattr(m, "LAUNCHES", {"direct": 0, "ordinary": 0})
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, do = (torch.randn(2, hq, 200, 64, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    k, v = (torch.randn(2, hkv, 200, 64, device="cuda", dtype=dtype, generator=gen) for _ in range(2))

    def run():
        o, lse = m.forward(q, k, v, poison=True)
        return [o, lse, *m.backward(q, k, v, o, lse, do, poison=True)]

    monkeypatch.setattr(m, "_DIRECT_ON", False)
    ordinary = run()
    assert m.LAUNCHES["direct"] == 0
    n = m.LAUNCHES["ordinary"]  # launches per forward + backward
    monkeypatch.setattr(m, "_DIRECT_ON", True)
    first = run()  # ordinary launches, the compiled kernels kept
    assert m.LAUNCHES == {"direct": 0, "ordinary": 2 * n}
    direct = [run() for _ in range(2)]
    assert m.LAUNCHES == {"direct": 2 * n, "ordinary": 2 * n}, m.LAUNCHES
    torch.cuda.synchronize()
    for got in (first, *direct):
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), ordinary, got):
            assert not a.isnan().any(), name
            if name == "dq" and strategy == "atomic":
                assert (a.float() - b.float()).abs().max().item() <= 1e-2, name
            else:
                assert torch.equal(a, b), name


def test_direct_launch_on_the_fast_path_after_the_first_call(monkeypatch):
    """tilegen.torch's plan cache hit launches every kernel directly: 1 + the backward's launches per
    forward + backward after the first call."""
    import tilegen.torch as tt
    from tilegen.torch import plans

    monkeypatch.setattr(plans, "PLANS", {})
    q, k, v, do = _make("sdpa-causal-bf16", seed=3)
    xs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    tt.scaled_dot_product_attention(*xs, is_causal=True).backward(do)
    m = next(iter(plans.PLANS.values())).module
    before = dict(m.LAUNCHES)
    tt.scaled_dot_product_attention(*xs, is_causal=True).backward(do)
    assert m.LAUNCHES["ordinary"] == before["ordinary"]
    assert m.LAUNCHES["direct"] - before["direct"] >= 2


@pytest.mark.parametrize("case", SHORT)
def test_short_sequence_backward_is_one_launch(case, monkeypatch):
    """Where one K/V tile covers the keys the module's backward launches main alone (pass direct-dq):
    a plan-cache hit makes 2 direct launches per forward + backward (and no ordinary one)."""
    import tilegen.torch as tt
    from tilegen.torch import plans

    monkeypatch.setattr(plans, "PLANS", {})
    q, k, v, do = _make(case, seed=4)
    _eager(case, q, k, v, do)
    m = next(iter(plans.PLANS.values())).module
    assert not hasattr(m, "_launch_pre") and not hasattr(m, "_launch_post")
    before = dict(m.LAUNCHES)
    _eager(case, q, k, v, do)
    assert m.LAUNCHES["ordinary"] == before["ordinary"]
    assert m.LAUNCHES["direct"] - before["direct"] == 2


def test_percall_floor_benchmark_runs(tmp_path):
    """benchmarks/percall_floor.py: every path runs and is timed, the file is written (a short run)."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import percall_floor

    assert percall_floor.main(["--calls", "5", "--rounds", "2", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "percall_floor.json").read_text())["paths"]
    assert set(res) == {"tilegen", "flash", "module", "module-3-launch", "floor", "floor-no-launch"}
    assert all(r["fwdbwd_us"] > 0 and r["fwd_us"] > 0 for r in res.values())
