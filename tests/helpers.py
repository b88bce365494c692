"""Shared test helpers: seeded inputs and the accuracy rule against the float64 reference."""

from __future__ import annotations

import numpy as np

from tilegen import dtypes, reference
from tilegen.check import compare, longest_sum, lse_rel_floor
from tilegen.spec import AttentionSpec


def make_spec(**kw) -> AttentionSpec:
    base = dict(batch=1, heads_q=2, heads_kv=2, seq_q=40, seq_k=40, head_dim_qk=32, head_dim_v=32, dtype="fp16")
    base.update(kw)
    return AttentionSpec(**base)


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
