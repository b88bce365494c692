"""The normalised call of tilegen.torch (tilegen.torch.call.Call): the custom ops' scalar arguments
spell it out and give it back unchanged, and its spec is the one the NumPy API builds for the same
arrays (tilegen.api.make_spec, an independent path from the arrays to the spec)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilegen  # noqa: E402
from tilegen.core.errors import SpecError  # noqa: E402
from tilegen.torch.call import Call  # noqa: E402

CASES = [
    # layout, (B, Hq, Hkv, Sq, Sk, D, Dv), scale, window, alignment, dq_strategy
    ("BNSD", (1, 2, 2, 8, 8, 16, 16), None, (-1, 0), "top_left", None),
    ("BSND", (2, 4, 2, 6, 10, 8, 12), 0.3, (3, 1), "bottom_right", "separate"),
    ("BSND", (1, 3, 1, 5, 5, 16, 8), 1, (-1, -1), "bottom_right", None),
]


def _tensors(layout, dims, dtype=torch.float16):
    b, hq, hkv, sq, sk, d, dv = dims
    shapes = [(b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv)] if layout == "BSND" else [(b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, dv)]
    return [torch.randn(*s).to(dtype) for s in shapes]


@pytest.mark.parametrize("layout,dims,scale,window,alignment,dq", CASES)
def test_the_ops_arguments_give_the_call_back(layout, dims, scale, window, alignment, dq):
    q, k, v = _tensors(layout, dims)
    call = Call.checked(q, k, v, layout=layout, scale=scale, window=window, alignment=alignment, dq_strategy=dq, target="h200",
                        score_mod="score*0.5", param_decls="")
    assert Call.from_op(q, k, v, *call.op_args()) == call
    assert isinstance(call.scale, (float, type(None))) and hash(call) == hash(Call.from_op(q, k, v, *call.op_args()))
    b, hq, hkv, sq, sk, d, dv = dims
    assert (call.batch, call.heads_q, call.heads_kv, call.seq_q, call.seq_k, call.head_dim_qk, call.head_dim_v) == dims
    assert (call.dtype, call.device, call.layout) == ("fp16", "cpu", layout)


@pytest.mark.parametrize("layout,dims,scale,window,alignment,dq", CASES)
def test_the_calls_spec_is_the_numpy_apis(layout, dims, scale, window, alignment, dq):
    q, k, v = _tensors(layout, dims)
    call = Call.checked(q, k, v, layout=layout, scale=scale, window=window, alignment=alignment)
    want = tilegen.make_spec(*(x.numpy() for x in (q, k, v)), softmax_scale=scale, window=window, alignment=alignment, layout=layout)
    assert call.spec() == want.replace(name="torch")


def test_a_packed_call_has_the_tokens_as_its_sequences():
    q, k, v = (torch.zeros(t, h, 16) for t, h in ((7, 4), (9, 2), (9, 2)))
    call = Call.checked(q, k, v, layout="TND", cu_seqlens_q=(0, 3, 7), cu_seqlens_k=(0, 4, 9))
    assert (call.batch, call.heads_q, call.heads_kv, call.seq_q, call.seq_k) == (1, 4, 2, 7, 9)
    assert [c.tolist() for c in call.offsets()] == [[0, 3, 7], [0, 4, 9]] and all(c.dtype == np.int32 for c in call.offsets())


def test_the_ops_refuse_what_the_entry_points_refuse():
    """The ops check their arguments again (they are public): a bad target, layout or scale is named."""
    q, k, v = _tensors("BNSD", CASES[0][1])
    good = Call.checked(q, k, v, layout="BNSD").op_args()
    for i, bad, field in ((6, "nosuchgpu", "target"), (0, "SBH", "layout"), (1, -1.0, "scale")):
        args = list(good)
        args[i] = bad
        with pytest.raises(SpecError) as info:
            Call.from_op(q, k, v, *args)
        assert info.value.field == field
