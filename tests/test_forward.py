"""The forward program in the interpreter against the float64 reference (DESIGN §3's accuracy rule)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import assert_forward_ok, inputs, make_spec
from tilegen.backends.interp import interpret
from tilegen.backends import compile_forward

BR, BC = 16, 32


def run_forward(spec, tiles=(BR, BC), seed=0):
    data = inputs(spec, seed)
    program = compile_forward(spec, tile_sizes=tiles)
    out, measured = interpret(program, {"Q": data["Q"], "K": data["K"], "V": data["V"]})
    return data, out["O"], out["L"], measured


@pytest.mark.parametrize("seq_k", [1, BC - 1, BC, BC + 1, 3 * BC + 5])
@pytest.mark.parametrize("seq_q", [1, BR - 1, BR, BR + 1, 45])
def test_lengths_and_tails(seq_q, seq_k):
    spec = make_spec(seq_q=seq_q, seq_k=seq_k)
    data, o, lse, _ = run_forward(spec)
    assert_forward_ok(spec, o, lse, data)


@pytest.mark.parametrize("dqk,dv", [(64, 64), (72, 72), (96, 96), (128, 128), (64, 40), (24, 80)])
def test_head_dims(dqk, dv):
    spec = make_spec(head_dim_qk=dqk, head_dim_v=dv, seq_q=33, seq_k=50)
    data, o, lse, _ = run_forward(spec)
    assert_forward_ok(spec, o, lse, data)


@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 1), (3, 3)])
def test_gqa_and_mqa(hq, hkv):
    spec = make_spec(heads_q=hq, heads_kv=hkv, seq_q=37, seq_k=29, window=(-1, 0))
    data, o, lse, _ = run_forward(spec)
    assert_forward_ok(spec, o, lse, data)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("sq,sk", [(40, 40), (23, 70), (70, 23)])
def test_causal_alignments(alignment, sq, sk):
    spec = make_spec(seq_q=sq, seq_k=sk, window=(-1, 0), alignment=alignment)
    data, o, lse, _ = run_forward(spec)
    assert_forward_ok(spec, o, lse, data)


@pytest.mark.parametrize("window", [(8, 0), (0, 0), (5, 9), (-1, 7), (20, -1), (0, 40)])
@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_sliding_windows(window, alignment):
    spec = make_spec(seq_q=50, seq_k=61, window=window, alignment=alignment)
    data, o, lse, _ = run_forward(spec)
    assert_forward_ok(spec, o, lse, data)


def test_rows_with_no_visible_key():
    # Bottom-right causal with Sq > Sk: the first Sq - Sk rows see nothing (DESIGN §3).
    spec = make_spec(seq_q=50, seq_k=20, window=(-1, 0))
    data, o, lse, _ = run_forward(spec)
    empty = 50 - 20
    assert np.all(np.asarray(o, dtype=np.float32)[:, :, :empty] == 0)
    assert np.all(lse[:, :, :empty] == -np.inf)
    assert np.all(np.isfinite(lse[:, :, empty:]))
    assert_forward_ok(spec, o, lse, data)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_dtypes(dtype):
    spec = make_spec(dtype=dtype, seq_q=45, seq_k=77, heads_q=4, heads_kv=2, window=(10, 3))
    data, o, lse, _ = run_forward(spec)
    assert o.dtype == data["Q"].dtype and lse.dtype == np.float32
    assert_forward_ok(spec, o, lse, data)


def test_tile_sizes_do_not_change_the_result_beyond_rounding():
    spec = make_spec(seq_q=70, seq_k=70, window=(-1, 0), dtype="fp32")
    _, o1, l1, _ = run_forward(spec, tiles=(16, 16))
    _, o2, l2, _ = run_forward(spec, tiles=(64, 32))
    np.testing.assert_allclose(o1, o2, rtol=0, atol=2e-6)
    np.testing.assert_allclose(l1, l2, rtol=0, atol=2e-6)


def test_traffic_equals_a_hand_count():
    # B=1, Hq=Hkv=2, Sq=Sk=40, D=32, fp16, causal bottom-right (off=0), Br=16, Bc=32.
    # Q tiles i=0,1,2 (rows 0-15, 16-31, 32-39) see K/V tiles j <= floor((last row)/32):
    # i=0 -> {0}, i=1 -> {0}, i=2 -> {0, 1}: 4 tile pairs per head.
    # K/V tile 0 has 32 rows, tile 1 has 8 (tail). Per head:
    #   Q: 40 rows * 32 * 2 B = 2560;  K and V: (32 + 32 + 32 + 8) rows * 32 * 2 B = 6656 each;
    #   O: 2560;  L: 40 * 4 B = 160.  Two heads double everything.
    spec = make_spec(seq_q=40, seq_k=40, window=(-1, 0))
    _, _, _, m = run_forward(spec)
    assert dict(m.bytes_read) == {"Q": 2 * 2560, "K": 2 * 6656, "V": 2 * 6656}
    assert dict(m.bytes_written) == {"O": 2 * 2560, "L": 2 * 160}
    # FLOPs: matmuls run on whole tiles: per pair S = 2*16*32*32 and PV = 2*16*32*32; 4 pairs, 2 heads.
    assert m.flops["matmul"] == 2 * 4 * 2 * (2 * 16 * 32 * 32)


def test_padding_never_leaks():
    """The interpreter loads padding as a large sentinel; the result must not change with it."""
    spec = make_spec(seq_q=45, seq_k=33, window=(4, 2), dtype="fp32")
    data = inputs(spec)
    program = compile_forward(spec, tile_sizes=(32, 32))
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"]}
    a, _ = interpret(program, feeds, pad_value=1.0e4)
    b, _ = interpret(program, feeds, pad_value=-3.0e3)
    np.testing.assert_array_equal(a["O"], b["O"])
    np.testing.assert_array_equal(a["L"], b["L"])
