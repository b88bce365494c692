"""The argument checks the NumPy API (tilegen.api) and tilegen.torch share (tilegen.core.validate):
the same fault gives the same one-line error, naming the same argument and accepting the same values,
in both front-ends; what one accepts the other accepts."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilegen  # noqa: E402
import tilegen.torch as tt  # noqa: E402
from tilegen.core.errors import SpecError  # noqa: E402


def _np_qkv(b=1, s=8, hq=2, hkv=1, d=16):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in ((b, s, hq, d), (b, s, hkv, d), (b, s, hkv, d))]


def _errors(api_call, torch_call) -> tuple[SpecError, SpecError]:
    with pytest.raises(SpecError) as a:
        api_call()
    with pytest.raises(SpecError) as t:
        torch_call()
    for e in (a, t):
        assert "\n" not in str(e.value), str(e.value)
    return a.value, t.value


def _both(**kw):
    """(NumPy API call, tilegen.torch call) of flash_attn_func's arguments ``kw`` on BSND data."""
    q, k, v = _np_qkv()
    api_kw = {("window" if n == "window_size" else n): (x.numpy() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    return (lambda: tilegen.attention(q, k, v, layout="BSND", **api_kw),
            lambda: tt.flash_attn_func(*(torch.from_numpy(x) for x in (q, k, v)), **kw))


@pytest.mark.parametrize("kw,field", [
    (dict(softcap=-1.0), "softcap"),
    (dict(softcap=float("inf")), "softcap"),
    (dict(softcap="30"), "softcap"),
    (dict(softmax_scale=0.0), "softmax_scale"),
    (dict(softmax_scale=True), "softmax_scale"),
    (dict(sinks=torch.zeros(3)), "sinks.shape"),
    (dict(sinks=torch.zeros(2, dtype=torch.int32)), "sinks.dtype"),
    (dict(alibi_slopes=torch.zeros(3)), "alibi_slopes.shape"),
    (dict(alibi_slopes=torch.zeros(2, 2)), "alibi_slopes.shape"),
])
def test_one_fault_one_message(kw, field):
    """softcap, scale, sinks and ALiBi slopes: the same field and the same accepted values in both
    (the array's type named as each front-end takes it)."""
    a, t = _errors(*_both(**kw))
    assert a.field == t.field == field
    assert a.accepted.replace("numpy.ndarray", "ARRAY") == t.accepted.replace("torch.Tensor", "ARRAY").replace(
        "torch.float32, torch.bfloat16, torch.float16, torch.float64", "numpy.float16, numpy.float32, numpy.float64"), (a, t)


def test_window_rules_agree():
    """causal with a right window > 0 is refused by both with the same words (the argument is
    ``window`` in the API, ``window_size`` in FlashAttention's convention)."""
    api_call, torch_call = _both(causal=True, window_size=(-1, 3))
    a, t = _errors(api_call, torch_call)
    assert (a.field, t.field) == ("window", "window_size") and a.accepted == t.accepted


def test_softcap_off_is_none_or_zero_in_both():
    """FlashAttention's "off" is 0.0; None means the same in both front-ends."""
    q, k, v = _np_qkv()
    want = tilegen.attention(q, k, v, layout="BSND")[0]
    for off in (None, 0, 0.0):
        assert np.array_equal(tilegen.attention(q, k, v, layout="BSND", softcap=off)[0], want)
        got = tt.flash_attn_func(*(torch.from_numpy(x) for x in (q, k, v)), softcap=off)
        assert np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("which", ["k", "v"])
def test_zero_heads_name_the_tensor_that_has_none(which):
    """A KV tensor without heads is named (the API divided by zero before; torch named q)."""
    q, k, v = _np_qkv()
    if which == "k":
        k, v = k[:, :, :0], v[:, :, :0]
    else:
        v = v[:, :0]
    a, t = _errors(lambda: tilegen.attention(q, k, v, layout="BSND"),
                   lambda: tt.flash_attn_func(*(torch.from_numpy(x) for x in (q, k, v))))
    assert a.field == t.field == ("k.shape" if which == "k" else "v.shape")


@pytest.mark.parametrize("fault,field,accepted", [
    ("o_dtype", "o.dtype", "float32, the dtype of q"),
    ("do_shape", "do.shape", "(1, 8, 2, 16) (layout BSND)"),
    ("lse_dtype", "lse.dtype", "a float32 array of shape (1, 2, 8) (the forward's logsumexp)"),
    ("lse_list", "lse", "a float32 array of shape (1, 2, 8)"),
])
def test_backward_inputs_one_line_each_entry(fault, field, accepted):
    """The padded and the packed backward check o, do and lse alike (core.validate.backward_inputs): one
    line naming the argument, on both entries (the packed one with its own shapes)."""
    q, k, v = _np_qkv()
    o, do = np.zeros_like(q), np.zeros_like(q)
    lse = np.zeros((1, 2, 8), np.float32)
    bad = {"o_dtype": dict(o=o.astype(np.float16)), "do_shape": dict(do=do[:, :4]), "lse_dtype": dict(lse=lse.astype(np.float64)),
           "lse_list": dict(lse=lse.tolist())}[fault]
    args = {**dict(o=o, do=do, lse=lse), **bad}
    with pytest.raises(SpecError) as e:
        tilegen.attention_backward(q, k, v, args["o"], args["lse"], args["do"], layout="BSND")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field} = ") and accepted in msg, msg
    # the packed entry: the same batch as one sequence of 8 tokens, TND
    t = lambda x: x[0]  # noqa: E731
    cu = np.array([0, 8], np.int32)
    lse_t = {"lse_dtype": np.zeros((2, 8), np.float64), "lse_list": np.zeros((2, 8), np.float32).tolist()}.get(fault, np.zeros((2, 8), np.float32))
    o_t = t(args["o"]) if fault != "do_shape" else t(o)
    do_t = t(args["do"]) if fault != "do_shape" else t(do)[:4]
    with pytest.raises(SpecError) as e:
        tilegen.attention_varlen_backward(t(q), t(k), t(v), o_t, lse_t, do_t, cu, cu)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field} = "), msg
