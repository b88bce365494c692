"""torch entry points with FlashAttention's and SDPA's calling conventions, backed by tilegen kernels.

- :func:`flash_attn_func`: FlashAttention's ``flash_attn_func`` argument names, BSND tensors
  ([batch, seq, heads, head_dim]), bottom-right aligned causal/window masks (FlashAttention >= 2.1).
- :func:`scaled_dot_product_attention`: ``torch.nn.functional.scaled_dot_product_attention``'s names,
  BNSD tensors ([batch, heads, seq, head_dim]); ``is_causal`` is top-left aligned, as in torch.

Where it runs, by the tensors' device:

- ``cuda``: the Triton module tilegen generates for the spec (:func:`tilegen.backends.triton.load`:
  generated, written and imported once per spec in a process), its ``forward`` and ``backward``;
  schedules come from the ``h200`` target (``target=`` picks another GPU target file).
- ``cpu``: tilegen's NumPy interpreter (:mod:`tilegen.api`). It is exact to DESIGN §3 but runs tile by
  tile in Python: for checking and small problems.
- ``npu``: the Ascend C operator when ``torch_npu`` and a built tilegen op are present; until that op is
  wired here, a ``NotImplementedError`` says so.

Both entry points check their arguments, then call two ``torch.library`` custom ops,
``tilegen::attention_fwd`` (q, k, v → out, lse) and ``tilegen::attention_bwd`` (q, k, v, out, lse, dout →
dq, dk, dv), with fake (meta) implementations and the backward registered as the forward's autograd
formula. ``torch.compile`` therefore sees each call as one opaque node of known output shapes and
strides and never traces the interpreter or the kernel loader (``fullgraph=True`` works). There is no
second derivative: differentiating the backward raises :class:`NotImplementedError`.

For ring (context-parallel) engines (DESIGN §6): :func:`attention_forward` / :func:`attention_backward`
(one block, explicit out and lse, the merged ones in the backward, fp32 gradient buffers),
:func:`merge_attention`, and adapters with the call conventions of FlashAttention's
``_flash_attn_forward/_flash_attn_backward`` (:func:`flash_attn_forward`, :func:`flash_attn_backward`;
ring-flash-attention imports those) and of the ``op`` of PyTorch's ``_templated_ring_attention``
(:func:`sdpa_ring_forward_op`, :func:`sdpa_ring_backward_op`). :mod:`tilegen.distributed` is the ring.

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

__all__ = [
    "flash_attn_func",
    "scaled_dot_product_attention",
    "attention_fwd",
    "attention_bwd",
    "UnsupportedArgument",
    "attention_forward",
    "attention_backward",
    "merge_attention",
    "flash_attn_forward",
    "flash_attn_backward",
    "sdpa_ring_forward_op",
    "sdpa_ring_backward_op",
]

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


def _check(q, k, v, *, layout: str, scale, name: str) -> tuple:
    """Check the tensors and the scale of a call; return the logical (BNSD) shapes of q, k and v.

    Traceable by dynamo: it reads only shapes, dtypes and devices (sizes may be symbolic) and builds
    no :class:`AttentionSpec` (whose checks want Python ints).
    """
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
    if q.device.type not in ("cuda", "cpu", "npu"):
        raise SpecError("q.device", str(q.device), "a cuda, cpu or npu tensor")
    return lq, lk, lv


def _spec(q, k, v, *, layout: str, scale, window, alignment, name: str) -> AttentionSpec:
    """The spec of a call on these tensors (validated; errors name the argument)."""
    lq, lk, lv = _check(q, k, v, layout=layout, scale=scale, name=name)
    bsz, hq, sq, dqk = lq
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


def _npu_refusal():
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        raise NotImplementedError("tilegen.torch on an NPU needs torch_npu, which is not installed") from None
    raise NotImplementedError(
        "tilegen.torch on an NPU needs a built tilegen Ascend C operator; generate and build it for this spec "
        "(tilegen generate --target ascend910b2), this entry point does not load it yet"
    )


# --- the custom ops: what torch.compile and autograd see ---------------------------------------------
#
# Arguments after the tensors (the same for both ops): layout "BNSD" | "BSND"; scale (None → 1/√D);
# window_left, window_right (-1 unbounded); alignment "bottom_right" | "top_left"; dq_strategy (None:
# the interpreter's "atomic", the GPU target's choice on CUDA); target (a GPU target name, CUDA only).


def _interp_kw(scale, window_left, window_right, alignment, layout) -> dict:
    """The keyword arguments of :func:`tilegen.api.attention` / ``attention_backward`` for the op's scalars."""
    return dict(softmax_scale=scale, window=(window_left, window_right), alignment=alignment, layout=layout)


@torch.library.custom_op("tilegen::attention_fwd", mutates_args=())
def attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str,
    scale: float | None,
    window_left: int,
    window_right: int,
    alignment: str,
    dq_strategy: str | None,
    target: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward as a custom op: (out, lse).

    Args:
        q, k, v: as for :func:`flash_attn_func` (``layout="BSND"``) or :func:`scaled_dot_product_attention`
            (``"BNSD"``); one dtype (float16, bfloat16, float32) and device; any strides.
        layout, scale, window_left, window_right, alignment, dq_strategy, target: see above.

    Returns:
        out: contiguous, q's physical shape with v's head dim, q's dtype; lse: contiguous float32
        [B, Hq, Sq], natural-log logsumexp of each row's visible scores (-inf for a row without one).

    Raises:
        SpecError (ValueError): a bad shape, dtype, device, window or scale, named.
        NotImplementedError: NPU tensors (the Ascend C operator is not loaded here).
    """
    _check_gpu_target(target)
    window = (window_left, window_right)
    spec = _spec(q, k, v, layout=layout, scale=scale, window=window, alignment=alignment, name="attention_fwd")
    device = q.device.type
    if device == "cuda":
        from .backends import triton as triton_backend

        out, lse = triton_backend.load(spec, target, dq_strategy).forward(q, k, v)
        return out.contiguous(), lse.contiguous()
    if device == "cpu":
        from . import api

        o, lse = api.attention(_to_numpy(q), _to_numpy(k), _to_numpy(v), **_interp_kw(scale, *window, alignment, layout))
        return _from_numpy(o, q), torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32))
    _npu_refusal()


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target):
    _check(q, k, v, layout=layout, scale=scale, name="attention_fwd")
    lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if layout == "BSND" else (q.shape[0], q.shape[1], q.shape[2])
    out = q.new_empty((*q.shape[:3], v.shape[3]))
    return out, q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("tilegen::attention_bwd", mutates_args=())
def attention_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    layout: str,
    scale: float | None,
    window_left: int,
    window_right: int,
    alignment: str,
    dq_strategy: str | None,
    target: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention backward (recompute from lse) as a custom op: (dq, dk, dv).

    Args:
        q, k, v, and the scalars: as for :func:`attention_fwd`; out, lse: its outputs; dout: dLoss/dout,
            out's shape and dtype, any strides.

    Returns:
        dq, dk, dv: contiguous, the shapes and dtype of q, k, v; dk and dv summed over each GQA group.

    Raises:
        as :func:`attention_fwd`.
    """
    _check_gpu_target(target)
    window = (window_left, window_right)
    spec = _spec(q, k, v, layout=layout, scale=scale, window=window, alignment=alignment, name="attention_bwd")
    device = q.device.type
    if device == "cuda":
        from .backends import triton as triton_backend

        grads = triton_backend.load(spec, target, dq_strategy).backward(q, k, v, out, lse, dout)
        return tuple(g.contiguous() for g in grads)
    if device == "cpu":
        from . import api

        grads = api.attention_backward(
            *(_to_numpy(x) for x in (q, k, v, out)),
            lse.detach().float().contiguous().numpy(),
            _to_numpy(dout),
            dq_strategy=dq_strategy or "atomic",
            **_interp_kw(scale, *window, alignment, layout),
        )
        return tuple(_from_numpy(g, x) for g, x in zip(grads, (q, k, v)))
    _npu_refusal()


@attention_bwd.register_fake
def _attention_bwd_fake(q, k, v, out, lse, dout, layout, scale, window_left, window_right, alignment, dq_strategy, target):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


_SCALARS = ("layout", "scale", "window_left", "window_right", "alignment", "dq_strategy", "target")


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, *scalars = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scalars = scalars


def _fwd_backward(ctx, dout, dlse):
    """dq, dk, dv through :func:`attention_bwd`; lse is an auxiliary output and takes no gradient."""
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = attention_bwd(q, k, v, out, lse, dout, *ctx.scalars)
    return (dq, dk, dv, *(None for _ in _SCALARS))


attention_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)

NO_SECOND_DERIVATIVE = "tilegen attention has no second derivative (no double backward): its backward (tilegen::attention_bwd) is not differentiable"


def _bwd_setup_context(ctx, inputs, output):
    pass


def _bwd_backward(ctx, ddq, ddk, ddv):
    raise NotImplementedError(NO_SECOND_DERIVATIVE)


attention_bwd.register_autograd(_bwd_backward, setup_context=_bwd_setup_context)


# --- dispatch ----------------------------------------------------------------------------------------


def _check_gpu_target(target: str) -> None:
    """``target`` names a GPU target (checked on every device, so a typo never passes on the CPU)."""
    from .targets import load_target, target_names

    def accepted() -> str:  # built only for the error: it reads every target file
        gpus = [n for n in target_names() if load_target(n).kind == "gpu"]
        return f"a GPU target: one of {', '.join(gpus)} or a path to a GPU target .toml file"

    if not isinstance(target, str):
        raise SpecError("target", target, accepted())
    try:
        kind = load_target(target).kind
    except TargetError:
        raise SpecError("target", target, accepted()) from None
    if kind != "gpu":
        raise SpecError("target", target, accepted() + f" ({target!r} is a {kind} target)")


def _run(q, k, v, *, layout: str, scale, window: tuple[int, int], alignment: str, dq_strategy: str | None, target: str):
    """out of :func:`attention_fwd` (q, k, v checked by the caller)."""
    return attention_fwd(q, k, v, layout, None if scale is None else float(scale), window[0], window[1], alignment, dq_strategy, target)[0]


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
    _check(q, k, v, layout="BSND", scale=softmax_scale, name="flash_attn_func")
    return _run(q, k, v, layout="BSND", scale=softmax_scale, window=window, alignment="bottom_right", dq_strategy="separate" if deterministic else None, target=target)


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
    lq, lk, _ = _check(query, key, value, layout="BNSD", scale=scale, name="scaled_dot_product_attention")
    if lk[1] != lq[1] and not enable_gqa:
        raise SpecError("enable_gqa", enable_gqa, f"True when key/value have fewer heads ({lk[1]}) than query ({lq[1]})")
    return _run(query, key, value, layout="BNSD", scale=scale, window=window, alignment="top_left", dq_strategy=None, target=target)


# --- the kernel interface of ring (context-parallel) engines --------------------------------------------
#
# A ring engine runs the kernel once per (query chunk, key/value chunk) pair and merges the partial
# results through their logsumexp; the backward gets the *merged* out and lse from outside (so that
# D = rowsum(dO∘O) is the global one) and sums the per-chunk gradients in fp32. The functions below give
# that interface on every device of :func:`attention_fwd`, and adapters with the call conventions of
# ring-flash-attention (FlashAttention's ``_flash_attn_forward/_flash_attn_backward``) and of PyTorch's
# ``_templated_ring_attention(op=...)``. :mod:`tilegen.distributed` is the ring built on them.


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


def _block_window(causal, window_size, alignment) -> tuple[int, int]:
    from .spec import ALIGNMENTS

    if alignment not in ALIGNMENTS:
        raise SpecError("alignment", alignment, " or ".join(repr(a) for a in ALIGNMENTS))
    return _window(causal, window_size, "causal")


def _lse_shape(q: torch.Tensor, layout: str) -> tuple[int, int, int]:
    return (q.shape[0], q.shape[2], q.shape[1]) if layout == "BSND" else (q.shape[0], q.shape[1], q.shape[2])


def _check_layout(layout) -> None:
    from .spec import LAYOUTS

    if layout not in LAYOUTS:
        raise SpecError("layout", layout, " or ".join(repr(x) for x in LAYOUTS))


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
    target: str = "h200",
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
    _check_layout(layout)
    window = _block_window(causal, window_size, alignment)
    _check(q, k, v, layout=layout, scale=softmax_scale, name="attention_forward")
    if (out is None) != (lse is None):
        raise SpecError("out", "given without lse" if lse is None else "lse given without out", "both out and lse, or neither")
    out_shape = (*q.shape[:3], v.shape[3])
    if out is not None:
        for name, x, shape in (("out", out, out_shape), ("lse", lse, _lse_shape(q, layout))):
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or tuple(x.shape) != tuple(shape) or x.device != q.device:
                got = (str(x.dtype), tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
                raise SpecError(name, got, f"a float32 tensor of shape {tuple(shape)} on {q.device}")
    scale = None if softmax_scale is None else float(softmax_scale)
    with torch.no_grad():
        block_out, block_lse = attention_fwd(q, k, v, layout, scale, window[0], window[1], alignment, None, target)
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
    target: str = "h200",
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
    _check_layout(layout)
    window = _block_window(causal, window_size, alignment)
    _check(q, k, v, layout=layout, scale=softmax_scale, name="attention_backward")
    if not isinstance(deterministic, bool):
        raise SpecError("deterministic", deterministic, "True or False")
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
    scale = None if softmax_scale is None else float(softmax_scale)
    with torch.no_grad():
        grads = attention_bwd(
            q, k, v, out.to(q.dtype), lse.contiguous(), dout.to(q.dtype), layout, scale, window[0], window[1], alignment,
            "separate" if deterministic else None, target,
        )
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
    if dropout_p:
        raise UnsupportedArgument("dropout_p", dropout_p, "0.0 (tilegen's kernels have no dropout)")
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
    if return_softmax:
        raise UnsupportedArgument("return_softmax", return_softmax, "False (the probabilities are never stored)")
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
    if kwargs.get("dropout_p", 0.0):
        raise UnsupportedArgument("dropout_p", kwargs["dropout_p"], "0.0 (tilegen's kernels have no dropout)")
    if kwargs.get("return_debug_mask", False):
        raise UnsupportedArgument("return_debug_mask", kwargs["return_debug_mask"], "False")
    return kwargs.get("scale"), kwargs.get("target", "h200")


def sdpa_ring_forward_op(query, key, value, *, is_causal=False, **kwargs):
    """The ``op`` of ``_templated_ring_attention``: one block's forward.

    Args:
        query: [B, Hq, Sq, D]; key: [B, Hkv, Sk, D]; value: [B, Hkv, Sk, Dv] (BNSD).
        is_causal: top-left aligned causal (key j visible to query i iff j ≤ i).
        kwargs: ``scale`` (None → 1/√D), ``dropout_p`` (0.0), ``return_debug_mask`` (False),
            ``enable_gqa`` (ignored: GQA when Hkv divides Hq), ``target`` (GPU target; default h200).

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
