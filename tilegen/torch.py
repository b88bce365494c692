"""torch entry points with FlashAttention's and SDPA's calling conventions, backed by tilegen kernels.

- :func:`flash_attn_func`: FlashAttention's ``flash_attn_func`` argument names, BSND tensors
  ([batch, seq, heads, head_dim]), bottom-right aligned causal/window masks (FlashAttention >= 2.1).
- :func:`scaled_dot_product_attention`: ``torch.nn.functional.scaled_dot_product_attention``'s names,
  BNSD tensors ([batch, heads, seq, head_dim]); ``is_causal`` is top-left aligned, as in torch.

Where it runs, by the tensors' device:

- ``cuda``: the Triton module tilegen generates for the spec (:func:`tilegen.backends.triton.load`:
  generated, written and imported once per spec in a process), through its ``autograd.Function``;
  schedules come from the ``h200`` target (``target=`` picks another GPU target file).
- ``cpu``: tilegen's NumPy interpreter (:mod:`tilegen.api`), through an ``autograd.Function`` here. It is
  exact to DESIGN §3 but runs tile by tile in Python: for checking and small problems.
- ``npu``: the Ascend C operator when ``torch_npu`` and a built tilegen op are present; until that op is
  wired here, a ``NotImplementedError`` says so.

Semantics follow DESIGN §3: S = scale·QKᵀ (scale = 1/√D by default), softmax over visible keys, rows
with no visible key give zeros, GQA/MQA when the query heads are a multiple of the KV heads.
Unsupported arguments (dropout, ALiBi, softcapping, an explicit mask, returning the probabilities)
raise :class:`UnsupportedArgument` naming the argument, the value and what is accepted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .errors import SpecError, TargetError
from .spec import AttentionSpec

__all__ = ["flash_attn_func", "scaled_dot_product_attention", "UnsupportedArgument"]

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


class UnsupportedArgument(NotImplementedError):
    """An argument tilegen's kernels do not implement (the message names it, its value, what is accepted)."""

    def __init__(self, name: str, value: Any, accepted: str):
        self.name, self.value, self.accepted = name, value, accepted
        super().__init__(f"{name} = {value!r} is not supported; accepted: {accepted}")


def _window(causal: Any, window_size: Any, causal_name: str) -> tuple[int, int]:
    if not isinstance(causal, (bool, np.bool_)):
        raise SpecError(causal_name, causal, "True or False")
    if (
        not isinstance(window_size, (tuple, list))
        or len(window_size) != 2
        or any(isinstance(w, bool) or not isinstance(w, int) or w < -1 for w in window_size)
    ):
        raise SpecError("window_size", window_size, "(left, right): two integers, each >= 0 or -1 for unbounded")
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        if right not in (-1, 0):
            raise SpecError("window_size", tuple(window_size), f"right = -1 or 0 when {causal_name}=True (causal sets right = 0)")
        right = 0
    return left, right


def _spec(q, k, v, *, layout: str, scale, window, alignment, name: str) -> AttentionSpec:
    """The spec of a call on these tensors (validated; errors name the argument)."""
    for arg, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise SpecError(arg, type(x).__name__, "a torch.Tensor")
        if x.dim() != 4:
            raise SpecError(f"{arg}.shape", tuple(x.shape), f"4 dimensions ({layout})")
        if x.dtype not in _DTYPES:
            raise SpecError(f"{arg}.dtype", str(x.dtype), "torch.float16, torch.bfloat16 or torch.float32")
    if not (q.dtype == k.dtype == v.dtype):
        raise SpecError("k.dtype", f"q {q.dtype}, k {k.dtype}, v {v.dtype}", "the same dtype for q, k and v")
    if not (q.device == k.device == v.device):
        raise SpecError("k.device", f"q {q.device}, k {k.device}, v {v.device}", "one device for q, k and v")
    lq, lk, lv = ((x.shape[0], x.shape[2], x.shape[1], x.shape[3]) if layout == "BSND" else tuple(x.shape) for x in (q, k, v))
    bsz, hq, sq, dqk = lq
    if lk[0] != bsz or lk[3] != dqk:
        raise SpecError("k.shape", tuple(k.shape), f"batch {bsz} and head dim {dqk} like q ({layout})")
    if lv[:3] != lk[:3]:
        raise SpecError("v.shape", tuple(v.shape), f"the batch, heads and length of k {tuple(k.shape)} ({layout})")
    if min(lq + lk + lv) == 0:
        raise SpecError("q.shape", tuple(q.shape), "no zero-sized dimension")
    if hq % lk[1]:
        raise SpecError("k.shape", tuple(k.shape), f"a head count that divides q's {hq} heads ({layout})")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0):
        raise SpecError("softmax_scale" if name == "flash_attn_func" else "scale", scale, "a positive finite number or None")
    return AttentionSpec(
        batch=bsz,
        heads_q=hq,
        heads_kv=lk[1],
        seq_q=sq,
        seq_k=lk[2],
        head_dim_qk=dqk,
        head_dim_v=lv[3],
        dtype=_DTYPES[q.dtype],
        scale=None if scale is None else float(scale),
        window=window,
        alignment=alignment,
        layout=layout,
        name="torch",
    )


# --- CPU: the NumPy interpreter ----------------------------------------------------------------------


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        import ml_dtypes

        return x.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def _from_numpy(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    a = np.ascontiguousarray(a)
    if like.dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(like.device)
    return torch.from_numpy(a.copy()).to(like.device)


class _InterpreterAttention(torch.autograd.Function):
    """autograd over :func:`tilegen.api.attention` / :func:`tilegen.api.attention_backward`."""

    @staticmethod
    def forward(ctx, q, k, v, spec, dq_strategy):
        from . import api

        kw = dict(softmax_scale=spec.scale, window=spec.window, alignment=spec.alignment, layout=spec.layout)
        o, lse = api.attention(_to_numpy(q), _to_numpy(k), _to_numpy(v), **kw)
        out = _from_numpy(o, q)
        ctx.save_for_backward(q, k, v, out, torch.from_numpy(lse))
        ctx.kw, ctx.dq_strategy = kw, dq_strategy
        return out

    @staticmethod
    def backward(ctx, do):
        from . import api

        if torch.is_grad_enabled():  # backward(create_graph=True): a second derivative was asked for
            raise UnsupportedArgument(
                "create_graph", True, "False: tilegen's attention backward is not differentiable again (no double backward)"
            )
        q, k, v, o, lse = ctx.saved_tensors
        grads = api.attention_backward(
            *(_to_numpy(x) for x in (q, k, v, o)), lse.numpy(), _to_numpy(do), dq_strategy=ctx.dq_strategy, **ctx.kw
        )
        return (*(_from_numpy(g, x) for g, x in zip(grads, (q, k, v))), None, None)


# --- dispatch ----------------------------------------------------------------------------------------


def _check_gpu_target(target: str) -> None:
    """``target`` names a GPU target (checked on every device, so a typo never passes on the CPU)."""
    from .targets import load_target, target_names

    gpus = [n for n in target_names() if load_target(n).kind == "gpu"]
    accepted = f"a GPU target: one of {', '.join(gpus)} or a path to a GPU target .toml file"
    if not isinstance(target, str):
        raise SpecError("target", target, accepted)
    try:
        kind = load_target(target).kind
    except TargetError:
        raise SpecError("target", target, accepted) from None
    if kind != "gpu":
        raise SpecError("target", target, accepted + f" ({target!r} is a {kind} target)")


def _run(q, k, v, spec: AttentionSpec, dq_strategy: str | None, target: str):
    _check_gpu_target(target)
    device = q.device.type
    if device == "cuda":
        from .backends import triton as triton_backend

        module = triton_backend.load(spec, target, dq_strategy)
        return module.attention(q, k, v)
    if device == "cpu":
        return _InterpreterAttention.apply(q, k, v, spec, dq_strategy or "atomic")
    if device == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            raise NotImplementedError("tilegen.torch on an NPU needs torch_npu, which is not installed") from None
        raise NotImplementedError(
            "tilegen.torch on an NPU needs a built tilegen Ascend C operator; generate and build it for this spec "
            "(tilegen generate --target ascend910b2), this entry point does not load it yet"
        )
    raise SpecError("q.device", str(q.device), "a cuda, cpu or npu tensor")


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    target: str = "h200",
):
    """Attention with FlashAttention's ``flash_attn_func`` arguments; gradients flow to q, k, v.

    Args:
        q: [B, Sq, Hq, D] (BSND), float16, bfloat16 or float32; any strides.
        k: [B, Sk, Hkv, D]; v: [B, Sk, Hkv, Dv]; Hkv divides Hq (GQA/MQA); same dtype and device as q.
        dropout_p: must be 0.0 (no dropout in tilegen's kernels).
        softmax_scale: S = softmax_scale·QKᵀ; None → 1/√D.
        causal: key j visible to query i iff j ≤ i + Sk − Sq (bottom-right aligned).
        window_size: (left, right), −1 unbounded: key j visible iff i + Sk − Sq − left ≤ j ≤ i + Sk − Sq + right.
        softcap, alibi_slopes, return_attn_probs: must be 0.0, None, False.
        deterministic: True picks the backward without atomics (dQ in a second pass over K/V tiles).
        target: the GPU target file whose schedule CUDA tensors use.

    Returns:
        out: [B, Sq, Hq, Dv], q's dtype; rows with no visible key are 0.

    Raises:
        UnsupportedArgument (NotImplementedError): dropout, softcapping, ALiBi or returned probabilities.
        SpecError (ValueError): a bad shape, dtype, device, window or scale, named.
    """
    if dropout_p != 0.0:
        raise UnsupportedArgument("dropout_p", dropout_p, "0.0 (tilegen's kernels have no dropout)")
    if softcap != 0.0:
        raise UnsupportedArgument("softcap", softcap, "0.0 (no score softcapping)")
    if alibi_slopes is not None:
        raise UnsupportedArgument("alibi_slopes", type(alibi_slopes).__name__, "None (no ALiBi bias)")
    if return_attn_probs:
        raise UnsupportedArgument("return_attn_probs", return_attn_probs, "False (the probabilities are never stored)")
    if not isinstance(deterministic, bool):
        raise SpecError("deterministic", deterministic, "True or False")
    window = _window(causal, window_size, "causal")
    spec = _spec(q, k, v, layout="BSND", scale=softmax_scale, window=window, alignment="bottom_right", name="flash_attn_func")
    return _run(q, k, v, spec, "separate" if deterministic else None, target)


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    target: str = "h200",
):
    """Attention with ``torch.nn.functional.scaled_dot_product_attention``'s arguments (BNSD).

    Args:
        query: [B, Hq, Sq, D]; key: [B, Hkv, Sk, D]; value: [B, Hkv, Sk, Dv]; float16, bfloat16 or
            float32, one device, any strides.
        attn_mask: must be None (use is_causal; tilegen has no explicit masks).
        dropout_p: must be 0.0.
        is_causal: key j visible to query i iff j ≤ i (top-left aligned, as torch's is_causal).
        scale: S = scale·QKᵀ; None → 1/√D.
        enable_gqa: must be True when Hkv < Hq (as in torch).
        target: the GPU target file whose schedule CUDA tensors use.

    Returns:
        [B, Hq, Sq, Dv] in query's dtype; rows with no visible key are 0.

    Raises:
        UnsupportedArgument (NotImplementedError): attn_mask or dropout.
        SpecError (ValueError): a bad shape, dtype, device or scale, or GQA without enable_gqa, named.
    """
    if attn_mask is not None:
        raise UnsupportedArgument("attn_mask", type(attn_mask).__name__, "None (is_causal covers the causal mask)")
    if dropout_p != 0.0:
        raise UnsupportedArgument("dropout_p", dropout_p, "0.0 (tilegen's kernels have no dropout)")
    if not isinstance(enable_gqa, bool):
        raise SpecError("enable_gqa", enable_gqa, "True or False")
    window = _window(is_causal, (-1, -1), "is_causal")
    spec = _spec(query, key, value, layout="BNSD", scale=scale, window=window, alignment="top_left", name="scaled_dot_product_attention")
    if spec.heads_kv != spec.heads_q and not enable_gqa:
        raise SpecError("enable_gqa", enable_gqa, f"True when key/value have fewer heads ({spec.heads_kv}) than query ({spec.heads_q})")
    return _run(query, key, value, spec, None, target)
