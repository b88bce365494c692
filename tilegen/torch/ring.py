"""The kernel interface of ring (context-parallel) engines (DESIGN §6).

A ring engine runs the kernel once per (query chunk, key/value chunk) pair and merges the partial
results through their logsumexp; the backward gets the *merged* out and lse from outside (so that
D = rowsum(dO∘O) is the global one) and sums the per-chunk gradients in fp32. The functions below give
that interface on every device of :func:`tilegen.torch.attention_fwd`, and adapters with the call
conventions of ring-flash-attention (FlashAttention's ``_flash_attn_forward/_flash_attn_backward``) and
of PyTorch's ``_templated_ring_attention(op=...)``. :mod:`tilegen.distributed` is the ring built on them.
"""

from __future__ import annotations

import torch

from tilegen.core import validate
from tilegen.core.errors import SpecError, UnsupportedArgument
from tilegen.torch import ops
from tilegen.torch.call import Call


def _lse_view(lse: torch.Tensor, layout: str) -> torch.Tensor:
    """lse [B, H, S] as a view that broadcasts against out in ``layout`` ([B, S, H, 1] or [B, H, S, 1])."""
    return (lse.transpose(1, 2) if layout == "BSND" else lse).unsqueeze(-1)


def merge_attention(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor, *, layout: str = "BSND"):
    """Merge one block's partial attention into running (out, lse), in place; returns (out, lse).

    The numerically stable form (ring-flash-attention PR 34, as PyTorch's ``_SDPAMerger`` uses it):
    ``out -= sigmoid(lse_b - lse)·(out - out_b)``; ``lse -= logsigmoid(lse - lse_b)``, which equal
    ``out = (e^lse·out + e^lse_b·out_b)/(e^lse + e^lse_b)`` and ``lse = log(e^lse + e^lse_b)``. Rows
    with lse = −inf (no visible key yet, DESIGN §3) take the block's values; rows whose block lse is
    −inf keep theirs; no NaN arises.

    Args:
        out: float32, [B, S, H, Dv] (BSND) or [B, H, S, Dv] (BNSD), updated in place (views work).
        lse: float32 [B, H, S] (natural log), updated in place.
        block_out: out's shape, any float dtype; block_lse: lse's shape, float32.

    Raises:
        SpecError: a dtype other than float32 for out or lse, or shapes that do not match.
    """
    if out.dtype != torch.float32 or lse.dtype != torch.float32:
        raise SpecError("out.dtype", f"out {out.dtype}, lse {lse.dtype}", "torch.float32 for the running out and lse")
    if block_out.shape != out.shape or block_lse.shape != lse.shape:
        raise SpecError("block_out.shape", (tuple(block_out.shape), tuple(block_lse.shape)), f"out {tuple(out.shape)} and lse {tuple(lse.shape)}")
    block_lse = block_lse.float()
    neg_inf = torch.tensor(float("-inf"), dtype=torch.float32, device=lse.device)
    empty_old = torch.isneginf(lse)
    # sigmoid(lse_b - lse): 1 where lse is -inf (take the block), 0 where lse_b is -inf (keep ours).
    diff = torch.where(empty_old, torch.where(torch.isneginf(block_lse), neg_inf, -neg_inf), block_lse - lse)
    out.sub_(torch.sigmoid(_lse_view(diff, layout)) * (out - block_out.float()))
    lse.copy_(torch.where(empty_old, block_lse, lse - torch.nn.functional.logsigmoid(lse - block_lse)))
    return out, lse


def _block_call(q, k, v, *, layout, softmax_scale, causal, window_size, alignment, target, dq_strategy=None) -> Call:
    """The checked call of one block (the ring functions' arguments)."""
    layout = validate.layout(layout)
    validate.alignment(alignment)
    window = validate.window(causal, window_size, window_name="window_size")
    return Call.checked(q, k, v, layout=layout, scale=softmax_scale, window=window, alignment=alignment, dq_strategy=dq_strategy, target=target)


def _lse_shape(q: torch.Tensor, layout: str) -> tuple[int, int, int]:
    return (q.shape[0], q.shape[2], q.shape[1]) if layout == "BSND" else (q.shape[0], q.shape[1], q.shape[2])


def attention_forward(
    q,
    k,
    v,
    *,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alignment: str = "bottom_right",
    layout: str = "BSND",
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    target: str | None = None,
):
    """One block's attention forward with explicit (out, lse), for ring engines; no autograd.

    Args:
        q: [B, Sq, Hq, D] (BSND) or [B, Hq, Sq, D] (BNSD); k: Sk keys, Hkv heads (Hkv divides Hq);
            v: like k with head dim Dv; float16, bfloat16 or float32, one device.
        softmax_scale: S = scale·QKᵀ; None → 1/√D.
        causal, window_size: the block's mask, as :func:`flash_attn_func` (window (left, right), −1
            unbounded; causal = (left, 0)), aligned by ``alignment``: ``"bottom_right"`` (off = Sk − Sq,
            FlashAttention ≥ 2.1; the llama3-style Sk > Sq case) or ``"top_left"`` (off = 0). Such a
            band always meets the diagonal, so some row sees a key; rows without one give out = 0,
            lse = −inf (DESIGN §3). A block no query sees ("empty") is the caller's to skip.
        out, lse: running accumulators, both or neither: float32 out of the output's shape ([B, Sq, Hq,
            Dv] or [B, Hq, Sq, Dv]) and float32 lse [B, Hq, Sq]. When given, the block is merged into
            them in place (:func:`merge_attention`) and they are returned.

    Returns:
        (out, lse): without accumulators the block's out (q's dtype) and lse (float32 [B, Hq, Sq],
        natural log, −inf on rows without a visible key); with them, the accumulators after the merge.

    Raises:
        SpecError (ValueError): a bad shape, dtype, device, mask, scale or accumulator, named.
        UnsupportedArgument: never here (no dropout or bias arguments); NotImplementedError on NPU tensors.
    """
    call = _block_call(q, k, v, layout=layout, softmax_scale=softmax_scale, causal=causal, window_size=window_size, alignment=alignment,
                       target=target)
    if (out is None) != (lse is None):
        raise SpecError("out", "given without lse" if lse is None else "lse given without out", "both out and lse, or neither")
    out_shape = (*q.shape[:3], v.shape[3])
    if out is not None:
        for name, x, shape in (("out", out, out_shape), ("lse", lse, _lse_shape(q, layout))):
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or tuple(x.shape) != tuple(shape) or x.device != q.device:
                got = (str(x.dtype), tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
                raise SpecError(name, got, f"a float32 tensor of shape {tuple(shape)} on {q.device}")
    with torch.no_grad():
        block_out, block_lse = ops.attention_fwd(q, k, v, *call.op_args(), [])
    if out is None:
        return block_out, block_lse
    return merge_attention(out, lse, block_out, block_lse, layout=layout)


def attention_backward(
    q,
    k,
    v,
    out,
    lse,
    dout,
    *,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alignment: str = "bottom_right",
    layout: str = "BSND",
    dq: torch.Tensor | None = None,
    dk: torch.Tensor | None = None,
    dv: torch.Tensor | None = None,
    deterministic: bool = False,
    target: str | None = None,
):
    """One block's attention backward from the merged (out, lse), for ring engines; no autograd.

    The kernel recomputes P = exp(S − lse) with the lse given and forms D = rowsum(dout∘out) from the
    out given (DESIGN §3), so passing the merged out and lse of all blocks gives this block's share of
    the global gradients.

    Args:
        q, k, v, and the mask arguments: as :func:`attention_forward`.
        out: the merged output, q's shape with Dv, any float dtype (rounded to q's dtype for the kernel);
        lse: the merged logsumexp, float32 [B, Hq, Sq]; dout: dLoss/dout, out's shape.
        dq, dk, dv: optional float32 buffers of q's, k's and v's shapes (views work): the block's
            gradients are added into them in place (each block's gradient is rounded once to the input
            dtype, the kernel's output dtype, before the fp32 add). All three or none.
        deterministic: True picks the backward without atomics (dq in a second pass over K/V tiles).

    Returns:
        (dq, dk, dv): the buffers after the add, or new tensors in the input dtype (dk, dv summed over
        each GQA group).

    Raises:
        SpecError (ValueError): a bad shape, dtype, device, mask, scale or buffer, named.
    """
    validate.flag("deterministic", deterministic)
    call = _block_call(q, k, v, layout=layout, softmax_scale=softmax_scale, causal=causal, window_size=window_size, alignment=alignment,
                       target=target, dq_strategy="separate" if deterministic else None)
    out_shape = (*q.shape[:3], v.shape[3])
    for name, x, shape in (("out", out, out_shape), ("dout", dout, out_shape)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != tuple(shape) or x.device != q.device:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise SpecError(f"{name}.shape", got, f"{tuple(shape)} on {q.device} ({layout})")
    if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or tuple(lse.shape) != _lse_shape(q, layout):
        got = (str(lse.dtype), tuple(lse.shape)) if isinstance(lse, torch.Tensor) else type(lse).__name__
        raise SpecError("lse", got, f"a float32 tensor of shape {_lse_shape(q, layout)} (the merged logsumexp)")
    buffers = (dq, dk, dv)
    if any(b is not None for b in buffers):
        for name, b, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
            if not isinstance(b, torch.Tensor) or b.dtype != torch.float32 or b.shape != like.shape or b.device != like.device:
                got = (str(b.dtype), tuple(b.shape)) if isinstance(b, torch.Tensor) else type(b).__name__
                raise SpecError(name, got, f"a float32 tensor of shape {tuple(like.shape)} on {like.device} (all of dq, dk, dv or none)")
    with torch.no_grad():
        grads = ops.attention_bwd(q, k, v, out.to(q.dtype), lse.contiguous(), dout.to(q.dtype), *call.op_args(), [])[:3]  # no mods: no parameter gradients
        if dq is None:
            return grads
        for buf, g in zip(buffers, grads):
            buf.add_(g)
    return buffers


# ring-flash-attention (zhuzilin/ring-flash-attention) imports ``_flash_attn_forward`` and
# ``_flash_attn_backward`` from ``flash_attn.flash_attn_interface`` and calls them with keyword arguments
# built from the function's own signature (its ``get_default_args``); the two adapters below have the
# signatures and return conventions of FlashAttention 2.6/2.7 (the ``window_size_left/right`` form).


def _refuse_flash_extras(dropout_p, softcap, alibi_slopes) -> None:
    """FlashAttention arguments the kernels lack: a one-line UnsupportedArgument each."""
    validate.no_dropout(dropout_p)
    if softcap:
        raise UnsupportedArgument("softcap", softcap, "0.0 (no score softcapping)")
    if alibi_slopes is not None:
        raise UnsupportedArgument("alibi_slopes", type(alibi_slopes).__name__, "None (no ALiBi bias)")


def flash_attn_forward(
    q,
    k,
    v,
    dropout_p,
    softmax_scale,
    causal,
    window_size_left=-1,
    window_size_right=-1,
    softcap=0.0,
    alibi_slopes=None,
    return_softmax=False,
):
    """FlashAttention's ``_flash_attn_forward`` call convention on tilegen kernels.

    Args:
        q: [B, Sq, Hq, D]; k: [B, Sk, Hkv, D]; v: [B, Sk, Hkv, Dv] (BSND, Hkv divides Hq).
        dropout_p, softcap, alibi_slopes, return_softmax: 0.0, 0.0, None, False (else UnsupportedArgument).
        softmax_scale: None → 1/√D; causal, window_size_left/right: bottom-right aligned, −1 unbounded.

    Returns:
        (out [B, Sq, Hq, Dv] in q's dtype, softmax_lse float32 [B, Hq, Sq], None, None): FlashAttention's
        (out, softmax_lse, S_dmask, rng_state) with no dropout mask and no RNG state.
    """
    _refuse_flash_extras(dropout_p, softcap, alibi_slopes)
    validate.no_probabilities(return_softmax, "return_softmax")
    out, lse = attention_forward(
        q, k, v, softmax_scale=softmax_scale, causal=bool(causal), window_size=(window_size_left, window_size_right), layout="BSND"
    )
    return out, lse, None, None


def flash_attn_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    dq,
    dk,
    dv,
    dropout_p,
    softmax_scale,
    causal,
    window_size_left=-1,
    window_size_right=-1,
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    rng_state=None,
):
    """FlashAttention's ``_flash_attn_backward`` call convention on tilegen kernels.

    Writes (overwrites, as FlashAttention does) the gradients into ``dq``, ``dk``, ``dv``: tensors of
    q's, k's and v's shapes, any dtype and strides (ring-flash-attention passes slices of larger
    buffers). ``out`` and ``softmax_lse`` are the merged ones the ring gives; arguments as
    :func:`flash_attn_forward`.

    Returns:
        softmax_d: float32 [B, Hq, Sq], D = rowsum(dout∘out) (FlashAttention's return value).
    """
    _refuse_flash_extras(dropout_p, softcap, alibi_slopes)
    for name, buf, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if not isinstance(buf, torch.Tensor) or buf.shape != like.shape:
            raise SpecError(name, tuple(buf.shape) if isinstance(buf, torch.Tensor) else type(buf).__name__, f"a tensor of shape {tuple(like.shape)}")
    grads = attention_backward(
        q, k, v, out, softmax_lse.float(), dout, softmax_scale=softmax_scale, causal=bool(causal),
        window_size=(window_size_left, window_size_right), layout="BSND", deterministic=bool(deterministic),
    )
    with torch.no_grad():
        for buf, g in zip((dq, dk, dv), grads):
            buf.copy_(g)
    return (dout.float() * out.float()).sum(-1).transpose(1, 2).contiguous()


# PyTorch's private ring (torch/distributed/tensor/experimental/_context_parallel/_attention.py, torch
# 2.13): ``_templated_ring_attention(group, seq_dim, op, query, key, value, is_causal, **kwargs)`` calls
# ``op(q, k, v, is_causal=..., **kwargs)`` and reads ``out, logsumexp, *rest`` (BNSD, lse [B, H, S]);
# its backward ``_templated_ring_attention_backward(..., op, grad_out, grad_out_name, ...)`` calls
# ``op(query=, key=, value=, out=, logsumexp=, is_causal=, <grad_out_name>=dout, **kwargs)`` and reads
# ``grad_query, grad_key, grad_value, *rest``. is_causal is top-left there (it asks Sq = Sk).

_SDPA_OP_KWARGS = ("dropout_p", "scale", "return_debug_mask", "enable_gqa", "target")


def _sdpa_op_kwargs(kwargs: dict) -> tuple:
    unknown = sorted(set(kwargs) - set(_SDPA_OP_KWARGS))
    if unknown:
        raise UnsupportedArgument(unknown[0], kwargs[unknown[0]], "the keyword arguments " + ", ".join(_SDPA_OP_KWARGS))
    validate.no_dropout(kwargs.get("dropout_p", 0.0))
    if kwargs.get("return_debug_mask", False):
        raise UnsupportedArgument("return_debug_mask", kwargs["return_debug_mask"], "False")
    return validate.scale(kwargs.get("scale"), "scale"), kwargs.get("target")


def sdpa_ring_forward_op(query, key, value, *, is_causal=False, **kwargs):
    """The ``op`` of ``_templated_ring_attention``: one block's forward.

    Args:
        query: [B, Hq, Sq, D]; key: [B, Hkv, Sk, D]; value: [B, Hkv, Sk, Dv] (BNSD).
        is_causal: top-left aligned causal (key j visible to query i iff j ≤ i).
        kwargs: ``scale`` (None → 1/√D), ``dropout_p`` (0.0), ``return_debug_mask`` (False),
            ``enable_gqa`` (ignored: GQA when Hkv divides Hq), ``target`` (GPU target; None or absent: the target of the tensors' device).

    Returns:
        (out [B, Hq, Sq, Dv] in query's dtype, logsumexp float32 [B, Hq, Sq]).
    """
    scale, target = _sdpa_op_kwargs(kwargs)
    return attention_forward(query, key, value, softmax_scale=scale, causal=bool(is_causal), alignment="top_left", layout="BNSD", target=target)


def sdpa_ring_backward_op(*, grad_out, query, key, value, out, logsumexp, is_causal=False, **kwargs):
    """The ``op`` of ``_templated_ring_attention_backward`` (``grad_out_name="grad_out"``): one block's
    backward from the merged out and logsumexp it passes; arguments as :func:`sdpa_ring_forward_op`.

    Returns:
        (grad_query, grad_key, grad_value) in the input dtype.
    """
    scale, target = _sdpa_op_kwargs(kwargs)
    return attention_backward(
        query, key, value, out, logsumexp.float(), grad_out, softmax_scale=scale, causal=bool(is_causal), alignment="top_left",
        layout="BNSD", target=target,
    )
