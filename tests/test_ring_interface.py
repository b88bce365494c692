"""The kernel interface of ring engines in tilegen.torch (one process, CPU): explicit (out, lse), the
merge, fp32 gradient buffers, and the call conventions of FlashAttention's ``_flash_attn_forward/
_flash_attn_backward`` (as ring-flash-attention calls them) and of ``_templated_ring_attention``'s op.

Results are compared with the float64 reference (:mod:`tilegen.core.reference`) under DESIGN §3's rule; the
multi-rank rings that use this interface are in test_distributed.py.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from tilegen.core import reference
from tilegen import torch as tt
from tilegen.harness.check import compare, lse_rel_floor
from tilegen.core.errors import SpecError


def _data(seed=0, b=1, s=16, hq=2, hkv=1, d=16, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *shape: torch.randn(*shape, generator=g).to(dtype)  # noqa: E731
    return mk(b, s, hq, d), mk(b, s, hkv, d), mk(b, s, hkv, d), mk(b, s, hq, d)


def _bnsd(x: torch.Tensor) -> np.ndarray:
    return x.detach().float().numpy().transpose(0, 2, 1, 3)


def _assert_close(name, ours, ref, plain, dtype="fp32", rel_floor=0.0, n=16):
    comp = compare(name, ours, ref, plain, dtype, rel_floor=rel_floor, terms=n)
    assert comp.ok, comp.line()


def test_two_key_blocks_merge_to_the_whole_causal_attention():
    """Keys split in two blocks (the first top-left causal, the second bottom-right causal on the last
    half of the queries), merged in fp32 accumulators; the backward from the merged out and lse adds
    each block's gradients into fp32 buffers. Both against the float64 reference."""
    q, k, v, do = _data()
    out = torch.zeros(1, 16, 2, 16)
    lse = torch.full((1, 2, 16), float("-inf"))
    tt.attention_forward(q, k[:, :8], v[:, :8], causal=True, alignment="top_left", out=out, lse=lse)
    tt.attention_forward(q[:, 8:], k[:, 8:], v[:, 8:], causal=True, out=out[:, 8:], lse=lse[:, :, 8:])
    kw = dict(scale=0.25, window=(-1, 0), alignment="bottom_right")
    o_ref, l_ref = reference.forward(_bnsd(q), _bnsd(k), _bnsd(v), **kw)
    o_pl, l_pl = reference.plain_forward(_bnsd(q), _bnsd(k), _bnsd(v), dtype="fp32", **kw)
    _assert_close("O", _bnsd(out), o_ref, o_pl)
    _assert_close("L", lse.numpy(), l_ref, l_pl)

    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    tt.attention_backward(q, k[:, :8], v[:, :8], out, lse, do, causal=True, alignment="top_left", dq=dq, dk=dk[:, :8], dv=dv[:, :8])
    tt.attention_backward(q[:, 8:], k[:, 8:], v[:, 8:], out[:, 8:], lse[:, :, 8:], do[:, 8:], causal=True, dq=dq[:, 8:], dk=dk[:, 8:], dv=dv[:, 8:])
    refs = reference.backward(_bnsd(q), _bnsd(k), _bnsd(v), _bnsd(do), **kw)
    plains = reference.plain_backward(_bnsd(q), _bnsd(k), _bnsd(v), _bnsd(do), dtype="fp32", **kw)
    for name, ours, r, p in zip(("dq", "dk", "dv"), (dq, dk, dv), refs, plains):
        _assert_close(name, _bnsd(ours), r, p, rel_floor=lse_rel_floor(l_ref))


def test_merge_handles_empty_rows_without_nan():
    out = torch.tensor([[[[1.0]], [[2.0]], [[3.0]]]])  # [B=1, S=3, H=1, D=1]
    lse = torch.tensor([[[float("-inf"), 0.0, float("-inf")]]])
    block = torch.tensor([[[[5.0]], [[7.0]], [[9.0]]]])
    block_lse = torch.tensor([[[1.0, float("-inf"), float("-inf")]]])
    tt.merge_attention(out, lse, block, block_lse)
    assert out.flatten().tolist() == [5.0, 2.0, 3.0]
    assert lse.flatten().tolist() == [1.0, 0.0, float("-inf")]
    # Two finite rows: the exact formula.
    out2, lse2 = torch.tensor([[[[1.0]]]]), torch.tensor([[[0.5]]])
    tt.merge_attention(out2, lse2, torch.tensor([[[[3.0]]]]), torch.tensor([[[-0.25]]]))
    w = np.exp(0.5) / (np.exp(0.5) + np.exp(-0.25))
    assert abs(out2.item() - (w * 1.0 + (1 - w) * 3.0)) < 1e-6
    assert abs(lse2.item() - np.log(np.exp(0.5) + np.exp(-0.25))) < 1e-6


def test_rows_without_a_visible_key():
    """Bottom-right causal with Sq = 8 > Sk = 2 (off = −6): rows 0-5 see no key (out 0, lse −inf, no
    gradient, DESIGN §3), rows 6, 7 see keys 0 and 0-1; merging such a block leaves the other rows as
    they were."""
    q, k, v, do = _data(s=8)
    out, lse = tt.attention_forward(q, k[:, :2], v[:, :2], causal=True)
    assert torch.isneginf(lse[..., :6]).all() and torch.isfinite(lse[..., 6:]).all()
    assert (out[:, :6] == 0).all()
    dq, dk, dv = tt.attention_backward(q, k[:, :2], v[:, :2], out, lse, do, causal=True)
    assert (dq[:, :6] == 0).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    acc, acc_lse = tt.attention_forward(q, k[:, 2:], v[:, 2:])
    before = acc.clone(), acc_lse.clone()
    tt.merge_attention(acc.float(), acc_lse, out, lse)
    assert torch.equal(acc_lse[..., :6], before[1][..., :6])


def test_accumulators_are_checked():
    q, k, v, do = _data(s=8)
    with pytest.raises(SpecError, match="^out = 'given without lse' is invalid; accepted: both out and lse, or neither$"):
        tt.attention_forward(q, k, v, out=torch.zeros(1, 8, 2, 16))
    with pytest.raises(SpecError, match="^out = .* accepted: a float32 tensor of shape \\(1, 8, 2, 16\\)"):
        tt.attention_forward(q, k, v, out=torch.zeros(1, 8, 2, 16, dtype=torch.float16), lse=torch.zeros(1, 2, 8))
    o, l = tt.attention_forward(q, k, v)
    with pytest.raises(SpecError, match="^dk = .* accepted: a float32 tensor of shape \\(1, 8, 1, 16\\)"):
        tt.attention_backward(q, k, v, o, l, do, dq=torch.zeros_like(q), dk=torch.zeros(1, 8, 2, 16), dv=torch.zeros_like(v))
    with pytest.raises(SpecError, match=r"^lse = .* \(the merged logsumexp\)$"):
        tt.attention_backward(q, k, v, o, l.half(), do)
    with pytest.raises(SpecError, match="^alignment = 'middle' is invalid"):
        tt.attention_forward(q, k, v, alignment="middle")


def test_a_bad_scale_names_the_callers_argument():
    """attention_forward/backward take ``softmax_scale``, the SDPA ring ops ``scale``: each error names
    the argument its caller passed."""
    q, k, v, do = _data(s=8)
    with pytest.raises(SpecError, match=r"^softmax_scale = -1\.0 is invalid; accepted: a positive finite number or None$"):
        tt.attention_forward(q, k, v, softmax_scale=-1.0)
    o, l = tt.attention_forward(q, k, v)
    with pytest.raises(SpecError, match=r"^softmax_scale = 0 is invalid"):
        tt.attention_backward(q, k, v, o, l, do, softmax_scale=0)
    with pytest.raises(SpecError, match=r"^scale = -1\.0 is invalid"):
        tt.sdpa_ring_forward_op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=-1.0)


# --- FlashAttention's call convention (ring-flash-attention) -------------------------------------

# flash_attn/flash_attn_interface.py (Dao-AILab/flash-attention 2.6-2.7): the argument names, in order.
FA_FORWARD = ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size_left", "window_size_right", "softcap", "alibi_slopes", "return_softmax"]
FA_BACKWARD = ["dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "dropout_p", "softmax_scale", "causal",
               "window_size_left", "window_size_right", "softcap", "alibi_slopes", "deterministic", "rng_state"]


def test_flash_attn_adapters_have_flash_attention_signatures():
    assert list(inspect.signature(tt.flash_attn_forward).parameters) == FA_FORWARD
    assert list(inspect.signature(tt.flash_attn_backward).parameters) == FA_BACKWARD


def test_flash_attn_adapters_return_conventions():
    """Forward: (out, softmax_lse [B, H, Sq] fp32, S_dmask, rng_state); backward writes dq, dk, dv in
    place, slices of larger buffers as ring-flash-attention passes them, and returns softmax_d."""
    q, k, v, do = _data(s=8, dtype=torch.float16)
    res = tt.flash_attn_forward(q, k, v, 0.0, 0.25, True, -1, -1, 0.0, None, False)
    assert len(res) == 4 and res[2] is None and res[3] is None
    out, lse = res[0], res[1]
    assert out.shape == (1, 8, 2, 16) and out.dtype == torch.float16 and lse.shape == (1, 2, 8) and lse.dtype == torch.float32
    big = [torch.full((1, 12, *x.shape[2:]), 7.0, dtype=x.dtype) for x in (q, k, v)]
    d = tt.flash_attn_backward(do, q, k, v, out, lse, big[0][:, :8], big[1][:, :8], big[2][:, :8], 0.0, 0.25, True, -1, -1, 0.0, None, False, None)
    assert d.shape == (1, 2, 8) and d.dtype == torch.float32
    assert torch.allclose(d, (do.float() * out.float()).sum(-1).transpose(1, 2))
    assert all((b[:, 8:] == 7.0).all() for b in big), "wrote past the slice"
    kw = dict(scale=0.25, window=(-1, 0), alignment="bottom_right")
    ref = reference.backward(_bnsd(q), _bnsd(k), _bnsd(v), _bnsd(do), **kw)
    plain = reference.plain_backward(_bnsd(q), _bnsd(k), _bnsd(v), _bnsd(do), dtype="fp16", **kw)
    for name, b, r, p in zip(("dq", "dk", "dv"), big, ref, plain):
        _assert_close(name, _bnsd(b[:, :8]), r, p, dtype="fp16", rel_floor=lse_rel_floor(lse.numpy()))


def test_flash_attn_adapters_refuse_what_they_lack():
    q, k, v, _ = _data(s=8)
    with pytest.raises(tt.UnsupportedArgument, match="^dropout_p = 0.1 is not supported; accepted: 0.0"):
        tt.flash_attn_forward(q, k, v, 0.1, None, False)
    with pytest.raises(tt.UnsupportedArgument, match="^softcap = 30.0 is not supported"):
        tt.flash_attn_forward(q, k, v, 0.0, None, False, softcap=30.0)


# --- _templated_ring_attention's op -------------------------------------------------------------


def test_sdpa_ring_ops_follow_the_templated_ring_calls():
    """op(q, k, v, is_causal=..., **kwargs) -> (out, logsumexp, *rest) and the backward op called with
    keywords only (query=, key=, value=, out=, logsumexp=, is_causal=, grad_out=), BNSD, top-left."""
    q, k, v, do = (x.transpose(1, 2).contiguous() for x in _data(s=8))
    out, lse, *rest = tt.sdpa_ring_forward_op(q, k, v, is_causal=True, dropout_p=0.0, scale=None)
    assert rest == [] and out.shape == (1, 2, 8, 16) and lse.shape == (1, 2, 8)
    dq, dk, dv, *rest = tt.sdpa_ring_backward_op(query=q, key=k, value=v, out=out, logsumexp=lse, is_causal=True, grad_out=do, dropout_p=0.0, scale=None)
    kw = dict(scale=0.25, window=(-1, 0), alignment="top_left")
    nd = lambda x: x.detach().float().numpy()  # noqa: E731
    o_ref, l_ref = reference.forward(nd(q), nd(k), nd(v), **kw)
    _assert_close("O", nd(out), o_ref, reference.plain_forward(nd(q), nd(k), nd(v), dtype="fp32", **kw)[0])
    for name, g, r, p in zip(("dq", "dk", "dv"), (dq, dk, dv), reference.backward(nd(q), nd(k), nd(v), nd(do), **kw),
                             reference.plain_backward(nd(q), nd(k), nd(v), nd(do), dtype="fp32", **kw)):
        _assert_close(name, nd(g), r, p, rel_floor=lse_rel_floor(l_ref))
    with pytest.raises(tt.UnsupportedArgument, match="^attn_bias = None is not supported; accepted: the keyword arguments"):
        tt.sdpa_ring_forward_op(q, k, v, is_causal=False, attn_bias=None)
