"""Property-based tests over specs: every example runs in the interpreter and matches the float64
reference under DESIGN §3's rule (forward and fused backward), or is rejected by validation with an
error that names the field. Never a traceback from deep inside, never a NaN."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers import assert_backward_ok, assert_forward_ok, inputs
from tilegen.backends.interp import interpret
from tilegen.core.errors import SpecError
from tilegen.core.spec import AttentionSpec
from tilegen.backends import compile_backward, compile_forward

window_side = st.one_of(st.just(-1), st.integers(0, 700))


@st.composite
def cases(draw):
    hkv = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2, 3]))
    dqk = draw(st.integers(8, 256))
    dv = draw(st.one_of(st.just(dqk), st.integers(8, 256)))
    seq_q = draw(st.integers(1, 600))
    seq_k = draw(st.one_of(st.just(seq_q), st.integers(1, 600)))
    kind = draw(st.sampled_from(["none", "causal", "window"]))
    window = {"none": (-1, -1), "causal": (-1, 0)}.get(kind) or (draw(window_side), draw(window_side))
    fields = dict(
        batch=1,
        heads_q=hkv * group,
        heads_kv=hkv,
        seq_q=seq_q,
        seq_k=seq_k,
        head_dim_qk=dqk,
        head_dim_v=dv,
        dtype=draw(st.sampled_from(["fp16", "bf16", "fp32"])),
        window=window,
        alignment=draw(st.sampled_from(["bottom_right", "top_left"])),
    )
    tiles = draw(st.one_of(st.none(), st.tuples(st.sampled_from([16, 32, 48, 64, 128]), st.sampled_from([16, 32, 64, 128]))))
    strategy = draw(st.sampled_from(["atomic", "separate"]))
    return fields, tiles, strategy


def _budget(fields) -> bool:
    """Keep one example cheap: at most ~2.5M score elements per program."""
    return fields["heads_q"] * fields["seq_q"] * fields["seq_k"] <= 2_500_000


def _fields(sq, sk, d, dtype="fp32", window=(-1, -1), hq=1, hkv=1):
    return dict(batch=1, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_k=sk, head_dim_qk=d, head_dim_v=d, dtype=dtype,
                window=window, alignment="bottom_right")


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
# Shrunk failures found by this test, kept as regular examples (each once failed the accuracy rule's
# floor in fp32, where results sit at fp32's own noise: see tilegen/harness/check.py).
@example(case=(_fields(1, 1, 8), None, "atomic"))
@example(case=(_fields(44, 44, 65, window=(-1, 0), hq=2), None, "atomic"))
@example(case=(_fields(101, 31, 109, hq=2), None, "atomic"))
@example(case=(_fields(1, 1, 254), (16, 128), "atomic"))
def test_fuzzed_specs_match_the_reference_or_are_rejected(case):
    fields, tiles, strategy = case
    if not _budget(fields):
        fields = dict(fields, seq_q=min(fields["seq_q"], 200), seq_k=min(fields["seq_k"], 200))
    try:
        spec = AttentionSpec(**fields)
    except SpecError as exc:
        assert exc.field and "accepted" in str(exc)
        return
    data = inputs(spec, seed=fields["seq_q"] * 1000 + fields["seq_k"])
    fwd = compile_forward(spec, tile_sizes=tiles)
    out, _ = interpret(fwd, {n: data[n] for n in "QKV"})
    assert_forward_ok(spec, out["O"], out["L"], data)
    bwd = compile_backward(spec, dq_strategy=strategy, tile_sizes=tiles)
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": out["O"], "L": out["L"], "dO": data["dO"]}
    grads, _ = interpret(bwd, feeds)
    for name in ("dQ", "dK", "dV"):
        assert not np.isnan(np.asarray(grads[name], dtype=np.float32)).any()
    assert_backward_ok(spec, (grads["dQ"], grads["dK"], grads["dV"]), data)
