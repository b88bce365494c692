"""Shared test helpers: seeded inputs and the accuracy rule against the float64 reference."""

from __future__ import annotations

import numpy as np

from tilegen.core import dtypes, reference
from tilegen.core.ir import index_symbol
from tilegen.harness.check import compare, longest_sum, lse_rel_floor
from tilegen.core.spec import AttentionSpec


def make_spec(**kw) -> AttentionSpec:
    base = dict(batch=1, heads_q=2, heads_kv=2, seq_q=40, seq_k=40, head_dim_qk=32, head_dim_v=32, dtype="fp16")
    base.update(kw)
    return AttentionSpec(**base)


# Identifiers of the generated Ascend C host code that a mod's parameter could be named (the torch binding's
# locals and functions: s, stream, G, Ptr, Tiling, kBlocks; the twin harness's: dir, blocks, program).
HOST_CODE_NAMES = ("s", "stream", "G", "Ptr", "Tiling", "dir", "blocks", "program")


def host_code_names_spec() -> AttentionSpec:
    """A spec with a score mod reading a per-head fp32 parameter of each name of HOST_CODE_NAMES and a
    mask mod reading an int32 [B] parameter named kBlocks."""
    from tilegen.core.mods import parse_param_decls

    params = {**{n: {"shape": ["Hq"]} for n in HOST_CODE_NAMES}, "kBlocks": {"shape": ["B"], "dtype": "int32"}}
    return make_spec(batch=2, seq_q=64, seq_k=96, head_dim_qk=64, head_dim_v=64, score_mod="score + " + " + ".join(f"{n}[h]" for n in HOST_CODE_NAMES),
                     mask_mod="kv_idx < kBlocks[b]", params=parse_param_decls(params))


def inputs(spec: AttentionSpec, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    nd = dtypes.numpy_dtype(spec.dtype)
    return {n: rng.standard_normal(spec.logical_shapes[n]).astype(nd) for n in ("Q", "K", "V", "dO")}


def ref_kwargs(spec: AttentionSpec) -> dict:
    return dict(scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)


def assert_forward_ok(spec: AttentionSpec, o: np.ndarray, lse: np.ndarray, data: dict) -> None:
    """O and L of a run on ``data`` pass DESIGN §3's rule; no NaN anywhere."""
    kw = ref_kwargs(spec)
    o_ref, l_ref = reference.forward(data["Q"], data["K"], data["V"], **kw)
    o_pl, l_pl = reference.plain_forward(data["Q"], data["K"], data["V"], dtype=spec.dtype, **kw)
    assert not np.isnan(np.asarray(o, dtype=np.float32)).any(), "NaN in O"
    assert not np.isnan(lse).any(), "NaN in L"
    n = longest_sum(spec)
    for comp in (compare("O", o, o_ref, o_pl, spec.dtype, terms=n), compare("L", lse, l_ref, l_pl, "fp32", terms=n)):
        assert comp.ok, comp.line()


def assert_backward_ok(spec: AttentionSpec, grads, data: dict, lse=None) -> None:
    """dQ, dK, dV pass DESIGN §3's rule against the float64 reference; no NaN anywhere. ``lse``: the
    logsumexp the backward was given (for the rule's L-rounding term; the float64 one by default)."""
    kw = ref_kwargs(spec)
    if lse is None:
        lse = reference.forward(data["Q"], data["K"], data["V"], **kw)[1]
    rel_floor = lse_rel_floor(lse)
    ref = reference.backward(data["Q"], data["K"], data["V"], data["dO"], **kw)
    plain = reference.plain_backward(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    for name, ours, r, p in zip(("dQ", "dK", "dV"), grads, ref, plain):
        assert not np.isnan(np.asarray(ours, dtype=np.float32)).any(), f"NaN in {name}"
        comp = compare(name, ours, r, p, spec.dtype, rel_floor=rel_floor, terms=longest_sum(spec))
        assert comp.ok, comp.line()


def subnormal_p_case(seed: int = 0, seq: int = 40, gap: tuple[float, float] = (12.0, 15.0), amp: float = 4.0, big: float = 4096.0):
    """An adversarial fp16 case for the rounding of P before dS = P∘(dP − D) (issue 12, item 2).

    Causal, D = 72, scale 1/8. Every score is exact in fp16 (S = 8·K[:, 0] with Q[:, 0] = 64), so the
    plain implementation's rounding of S costs nothing: logits sit near −120, the row max is key 0's
    −120, and every other key sits ``gap`` (uniform) below it, so P ≈ e^−12…e^−15 (1e−6…6e−6): fp16
    subnormals, where rounding P to fp16 changes it by up to 3 % (an ulp there is 6e−8). Keys 1, 2 |
    3, 4 | … come in pairs with the same score and opposite V and K[:, 2]: D = rowsum(dO∘O) is 0 in
    exact arithmetic and key 0 (V = 0) gets dS ≈ 0, so the gradients' largest entries come from the
    subnormal P alone. Q[:, 1] and K[:, 2] (±``big``, orthogonal to the score direction) scale dK and
    dQ above the rule's absolute floor; rows that see only half of a pair get dO = 0.

    Returns (spec, {"Q", "K", "V", "dO"} float16 arrays in BNSD order).
    """
    d = 72
    spec = make_spec(
        name="subnormal-p", heads_q=1, heads_kv=1, seq_q=seq, seq_k=seq, head_dim_qk=d, head_dim_v=d, window=(-1, 0), scale=0.125
    )
    rng = np.random.default_rng(seed)
    q = np.zeros((1, 1, seq, d))
    k = np.zeros((1, 1, seq, d))
    v = np.zeros((1, 1, seq, d))
    q[..., 0] = 64.0
    q[..., 1] = big * rng.choice([-1.0, 1.0], seq)
    k[0, 0, :, 0] = -15.0 - gap[1] / 8.0
    k[0, 0, 0, 0] = -15.0  # score −120: the row max of every row
    for m in range((seq - 1) // 2):
        a, b = 1 + 2 * m, 2 + 2 * m
        k[0, 0, a, 0] = k[0, 0, b, 0] = -15.0 - rng.uniform(*gap) / 8.0
        k[0, 0, a, 2] = big * rng.choice([-1.0, 1.0])
        k[0, 0, b, 2] = -k[0, 0, a, 2]
        v[0, 0, a] = amp * rng.standard_normal(d)
        v[0, 0, b] = -v[0, 0, a]
    do = amp * rng.standard_normal((1, 1, seq, d))
    do[0, 0, 1::2] = 0.0
    return spec, {n: x.astype(np.float16) for n, x in zip(("Q", "K", "V", "dO"), (q, k, v, do))}


def real_api_devkit() -> str:
    """``$ASC_DEVKIT`` for a real-API twin test module (an asc-devkit snapshot holding include/ and
    impl/); skips the calling module with one line when it is unset, holds no kernel_operator.h, or
    clang++-16 is missing."""
    import os
    from pathlib import Path

    import pytest

    from tilegen.backends.ascendc import twin

    devkit = os.environ.get("ASC_DEVKIT")
    if not devkit:
        pytest.skip("real-API twin: ASC_DEVKIT is not set (an asc-devkit snapshot with include/ and impl/)", allow_module_level=True)
    if not (Path(devkit) / "include" / "kernel_operator.h").is_file():
        pytest.skip(f"real-API twin: ASC_DEVKIT={devkit} holds no include/kernel_operator.h", allow_module_level=True)
    if twin.real_compiler() is None:
        pytest.skip("real-API twin: clang++-16 is not installed", allow_module_level=True)
    return devkit


def replace_ascend_pass(monkeypatch, name: str, fn) -> None:
    """Compile for Ascend targets with the pass called ``name`` replaced by ``fn(program, target)``, in
    the list every compile (and every search trial) asks :func:`tilegen.passes.ascend.passes` for."""
    import dataclasses

    from tilegen.passes import ascend

    real = ascend.passes

    def patched(ctx):
        return tuple(dataclasses.replace(p, run=lambda prog, c, fn=fn: fn(prog, c.target)) if p.name == name else p for p in real(ctx))

    monkeypatch.setattr(ascend, "passes", patched)


P = index_symbol("p")  # owned_tile_program's grid index


# --- small programs for the annotation hooks (tests/test_annotations.py with annotation classes of its own,
# tests/test_knobs.py with the Ascend knobs)

def loop_kernel(store_ann=(), load_ann=()):
    """for t in [0, 4): [X = load; Y[t] = X (store, ``store_ann``); Z = fill; W = Z + Z]; then V = fill.
    The load carries ``load_ann``."""
    import sympy

    from tilegen.core.ir import Access, Buffer, Elementwise, Fill, Kernel, Load, Loop, Store

    t = index_symbol("t")
    four = sympy.Integer(4)
    body = (
        Loop(t, sympy.Integer(0), four, (
            Load("X", Access("In", (t, sympy.Integer(0)), (four,)), ann=load_ann),
            Store(Access("Y", (t, sympy.Integer(0)), (four,)), "X", ann=store_ann),
            Fill("Z", 1.0),
            Elementwise("W", "add", ("Z", "Z")),
        )),
        Fill("V", 0.0),
    )
    return Kernel("k", "main", tuple(Buffer(n, (four,), "fp32", "UB") for n in "XZWV"), body)


def owned_tile_program(store_ann=(), load_ann=()):
    """Kernel w: programs p in [0, 3), each adds X[p] into ws[p] p times (program 0: never), the store
    carrying ``store_ann``; kernel r copies ws[p] to Y[p], its load carrying ``load_ann`` (an expression
    of the grid index :data:`P`). Without annotations nothing zeroes ws (the interpreter poisons it)."""
    import sympy

    from tilegen.core.ir import Access, Buffer, Kernel, Load, Loop, MaskInfo, Program, Store, Tensor

    p, t = P, index_symbol("t")
    four, three = sympy.Integer(4), sympy.Integer(3)
    row = lambda name: Access(name, (p, sympy.Integer(0)), (four,))  # noqa: E731
    tensors = (Tensor("X", (three, four), "fp32", "input"), Tensor("ws", (three, four), "fp32", "workspace"),
               Tensor("Y", (three, four), "fp32", "output"))
    add = Store(row("ws"), "x", accumulate=True, ann=store_ann)
    w = Kernel("w", "main", (Buffer("x", (four,), "fp32"),), (
        Loop(p, sympy.Integer(0), three, (Loop(t, sympy.Integer(0), p, (Load("x", row("X")), add)),), kind="parallel"),))
    r = Kernel("r", "post", (Buffer("y", (four,), "fp32"),), (
        Loop(p, sympy.Integer(0), three, (Load("y", row("ws"), ann=load_ann), Store(row("Y"), "y")), kind="parallel"),))
    return Program("owned", tensors, (w, r), MaskInfo(), 1.0)


def unwrapped(text: str) -> str:
    """``text`` with every run of whitespace as one space: inspect's text as one line, its 100-column
    wrap undone, for checks of a phrase wherever the wrap broke it."""
    return " ".join(text.split())


# The audited mechanisms of the timeline's cost table, neutral (no burst rounding, no atomic or
# same-address cost, no bank conflicts, no L2 floor): hand cost tables add them and each mechanism's own
# test (tests/test_timeline_audit.py) sets the one it checks.
NEUTRAL_AUDIT_COSTS = {
    "gm_burst_bytes": 512,
    "gm_burst_granule_bytes": 32,
    "gm_min_run_bytes": 32,
    "atomic_rmw_factor": 1,
    "same_address_factor": 1,
    "ub_read_conflict_cycles": 0,
    "ub_rw_conflict_cycles": 0,
    "chip_l2_bytes_per_cycle": 1e9,
}
