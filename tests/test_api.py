"""tilegen.attention: NumPy in, NumPy out, both layouts, arguments validated by name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilegen
from helpers import assert_forward_ok, inputs, make_spec
from tilegen.core.errors import SpecError


@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
def test_attention_layouts(layout):
    spec = make_spec(heads_q=4, heads_kv=2, seq_q=30, seq_k=45, head_dim_qk=32, head_dim_v=16, dtype="bf16", window=(-1, 0))
    data = inputs(spec)
    q, k, v = (data[n] if layout == "BNSD" else np.ascontiguousarray(data[n].transpose(0, 2, 1, 3)) for n in "QKV")
    o, lse = tilegen.attention(q, k, v, causal=True, layout=layout, tile_sizes=(16, 16))
    assert o.dtype == ml_dtypes.bfloat16 and lse.dtype == np.float32
    assert lse.shape == (1, 4, 30)
    o_logical = o if layout == "BNSD" else o.transpose(0, 2, 1, 3)
    assert o_logical.shape == (1, 4, 30, 16)
    assert_forward_ok(spec, o_logical, lse, data)


def test_attention_honours_strides():
    spec = make_spec(seq_q=20, seq_k=20, dtype="fp32")
    data = inputs(spec)
    # Non-contiguous views: every other element of a bigger array.
    big = {n: np.repeat(data[n], 2, axis=-1) for n in "QKV"}
    views = {n: big[n][..., ::2] for n in "QKV"}
    assert not views["Q"].flags.c_contiguous
    o, lse = tilegen.attention(views["Q"], views["K"], views["V"])
    assert_forward_ok(spec, o, lse, data)


def test_window_and_scale_arguments():
    spec = make_spec(seq_q=25, seq_k=40, window=(6, 2), alignment="top_left", scale=0.3)
    data = inputs(spec)
    o, lse = tilegen.attention(data["Q"], data["K"], data["V"], window=(6, 2), alignment="top_left", softmax_scale=0.3)
    assert_forward_ok(spec, o, lse, data)


def _qkv(dtype=np.float16):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) for s in ((1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16))]


@pytest.mark.parametrize(
    "mutate,name",
    [
        (lambda a: (a[0].tolist(), a[1], a[2]), "q"),
        (lambda a: (a[0].astype(np.float64), a[1], a[2]), "q.dtype"),
        (lambda a: (a[0], a[1].astype(np.float32), a[2]), "k.dtype"),
        (lambda a: (a[0][0], a[1], a[2]), "q.shape"),
        (lambda a: (a[0], a[1][:, :, :, :8], a[2]), "k.shape"),
        (lambda a: (a[0], a[1], a[2][:, :, :5]), "v.shape"),
        (lambda a: (a[0], np.concatenate([a[1]] * 3, axis=1)[:, :3], np.concatenate([a[2]] * 3, axis=1)[:, :3]), "k.shape"),
        (lambda a: (a[0], a[1][:, :0], a[2][:, :0]), "k.shape"),  # no KV head: named, not a ZeroDivisionError
        (lambda a: (a[0][:, :, :0], a[1], a[2]), "q.shape"),
    ],
)
def test_bad_arrays_are_named(mutate, name):
    q, k, v = mutate(_qkv())
    with pytest.raises(ValueError) as info:
        tilegen.attention(q, k, v)
    assert isinstance(info.value, SpecError) and info.value.field == name


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"causal": "yes"}, "causal"),
        ({"window": (1,)}, "window"),
        ({"window": (-3, 0)}, "window"),
        ({"causal": True, "window": (-1, 4)}, "window"),
        ({"alignment": "middle"}, "alignment"),
        ({"layout": "SBH"}, "layout"),
        ({"softmax_scale": 0.0}, "softmax_scale"),
        ({"tile_sizes": (0, 16)}, "tile_sizes"),
        ({"tile_sizes": {"Br": 16}}, "tile_sizes"),
    ],
)
def test_bad_options_are_named(kwargs, name):
    q, k, v = _qkv()
    with pytest.raises(SpecError) as info:
        tilegen.attention(q, k, v, **kwargs)
    assert info.value.field == name
