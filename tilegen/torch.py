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
``tilegen::attention_fwd`` (q, k, v, params → out, lse) and ``tilegen::attention_bwd`` (q, k, v, out,
lse, dout, params → dq, dk, dv, dparams), with fake (meta) implementations and the backward registered
as the forward's autograd formula. ``torch.compile`` therefore sees each call as one opaque node of
known output shapes and strides and never traces the interpreter or the kernel loader
(``fullgraph=True`` works). There is no second derivative: differentiating the backward raises
:class:`NotImplementedError`. A repeated eager call without mods takes a cached plan instead (the
per-call fast path below, ``_PLANS``): no checks, no spec, and the module's kernels through
:class:`_FastAttention` rather than the custom ops' dispatcher.

Score and mask mods (DESIGN §3): ``score_mod=`` and ``mask_mod=`` take a :mod:`tilegen.mods` built-in
or a Python function ``score_mod(score, b, h, q_idx, kv_idx)`` / ``mask_mod(b, h, q_idx, kv_idx)``
written with its helpers. The mods reach the ops as text (the mod language), a JSON of the parameter
declarations and a ``Tensor[]`` of the parameter arrays (``tilegen.mods.param(name, tensor)`` or a
built-in's array; NumPy arrays are moved to q's device). Float parameters get gradients through
autograd (reduced deterministically, DESIGN §3); integer ones (document ids, prefix lengths) none. A
function is traced once per function object (its Python closure is read then, its parameter
tensors at every call). Under ``torch.compile`` the tracing runs at compile time
(``torch.compiler.assume_constant_result``), so build the mods and their ``param`` wrappers outside the
compiled region (in ``__init__``, at module level); the parameter tensors are graph inputs.
FlashAttention's own ``softcap`` and ``alibi_slopes`` arguments are the built-ins
:func:`tilegen.mods.softcap` and :func:`tilegen.mods.alibi` (softcap first, then the bias, as
FlashAttention 2 applies them).

For ring (context-parallel) engines (DESIGN §6): :func:`attention_forward` / :func:`attention_backward`
(one block, explicit out and lse, the merged ones in the backward, fp32 gradient buffers),
:func:`merge_attention`, and adapters with the call conventions of FlashAttention's
``_flash_attn_forward/_flash_attn_backward`` (:func:`flash_attn_forward`, :func:`flash_attn_backward`;
ring-flash-attention imports those) and of the ``op`` of PyTorch's ``_templated_ring_attention``
(:func:`sdpa_ring_forward_op`, :func:`sdpa_ring_backward_op`). :mod:`tilegen.distributed` is the ring.

Semantics follow DESIGN §3: S = scale·QKᵀ (scale = 1/√D by default), softmax over visible keys, rows
with no visible key give zeros, GQA/MQA when the query heads are a multiple of the KV heads.
Unsupported arguments (dropout, an explicit mask, returning the probabilities) raise
:class:`UnsupportedArgument` naming the argument, the value and what is accepted. Learnable
``sinks`` and :func:`flash_attn_varlen_func` (packed batches)
run through a ``torch.autograd.Function`` (end of this file), not the custom ops.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tilegen.core.errors import SpecError, TargetError
from tilegen.core.sinks import check_sinks
from tilegen.core.spec import AttentionSpec

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
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


def _spec(q, k, v, *, layout: str, scale, window, alignment, name: str, mods: tuple = ("", "", ())) -> AttentionSpec:
    """The spec of a call on these tensors (validated; errors name the argument); ``mods`` = (score
    text, mask text, parameter declarations)."""
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
        score_mod=mods[0],
        mask_mod=mods[1],
        params=tuple(sorted(mods[2], key=lambda d: d.name)),
    )


# --- mods: from the entry points' arguments to the ops' text and tensors ------------------------------

_MOD_TEXTS: dict[tuple[int, int], tuple] = {}


@torch.compiler.assume_constant_result
def _mod_texts(score_mod, mask_mod) -> tuple:
    """(score text, mask text, declarations JSON, parameter names, window left, window right) of the
    mods, cached per (score_mod, mask_mod) object pair (a function is traced once). Under
    ``torch.compile`` this runs at compile time and its result is a constant of the graph.

    Raises:
        ModError (a SpecError): an invalid mod, naming the construct (:func:`tilegen.mods.trace`).
    """
    key = (id(score_mod), id(mask_mod))
    hit = _MOD_TEXTS.get(key)
    if hit is not None and hit[0] is score_mod and hit[1] is mask_mod:
        return hit[2]
    from tilegen.core.mods import mods_from_api

    score_text, mask_text, decls, window, _ = mods_from_api(score_mod, mask_mod)
    out = (score_text, mask_text, _decls_json(decls), tuple(p.name for p in decls), window[0], window[1])
    if len(_MOD_TEXTS) >= 256:
        _MOD_TEXTS.clear()
    _MOD_TEXTS[key] = (score_mod, mask_mod, out)
    return out


def _decls_json(decls) -> str:
    return json.dumps({p.name: p.to_dict() for p in decls}) if decls else ""


@torch.compiler.assume_constant_result
def _flash_mod(softcap: float, alibi_ndim: int):
    """The score mod of FlashAttention's ``softcap`` (> 0) and ``alibi_slopes`` (of ``alibi_ndim``
    dimensions, 0 for none): score′ = softcap·tanh(score/softcap) − slope·|q_idx + Sk − Sq − kv_idx|,
    FlashAttention 2's order (``flash_fwd_kernel.h``: ``apply_softcap`` before the ALiBi mask). Its
    parameter is ``alibi_slopes`` (declared [Hq] or [B, Hq]; the caller's tensor is bound at run time)."""
    hit = _FLASH_MODS.get((softcap, alibi_ndim))
    if hit is not None:
        return hit
    from tilegen.core import mods

    cap = mods.softcap(softcap) if softcap else None
    bias = mods.alibi(np.zeros((1,) * alibi_ndim, dtype=np.float32)) if alibi_ndim else None
    if cap is not None and bias is not None:
        out = mods.trace(lambda s, b, h, i, j: bias(cap(s, b, h, i, j), b, h, i, j), "score")
    else:
        out = cap if cap is not None else bias
    _FLASH_MODS[(softcap, alibi_ndim)] = out  # one Mod per value: _mod_texts caches by object
    return out


_FLASH_MODS: dict[tuple[float, int], Any] = {}


def _mod_params(fn) -> list:
    """The :class:`tilegen.mods.Param` objects a mod can read (as :func:`tilegen.mods.trace` finds
    them): a Mod's own, or a function's closure, globals and defaults. Traceable by dynamo."""
    from tilegen.core.mods import Mod, closure_params

    return list(fn.params) if isinstance(fn, Mod) else closure_params(fn)


def _mod_tensors(score_mod, mask_mod, names: tuple, device, bound: dict) -> list:
    """The parameter arrays named ``names``, as tensors (NumPy arrays are moved to ``device``); ``bound``
    names tensors that replace the mods' own arrays."""
    found = {}
    for fn in (score_mod, mask_mod):
        if fn is not None:
            for p in _mod_params(fn):
                found[p.name] = p
    out = []
    for n in names:
        a = bound[n] if n in bound else found[n].array
        out.append(a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a), device=device))
    return out


def _mods_of_call(score_mod, mask_mod, q, bound: dict) -> tuple:
    """(score text, mask text, declarations JSON, parameter tensors, window of the mask mod)."""
    if score_mod is None and mask_mod is None:
        return "", "", "", [], (-1, -1)
    score_text, mask_text, decls, names, left, right = _mod_texts(score_mod, mask_mod)
    return score_text, mask_text, decls, _mod_tensors(score_mod, mask_mod, names, q.device, bound), (left, right)


def _op_mods(q, k, v, layout, score_mod, mask_mod, param_decls, params) -> tuple:
    """(score text, mask text, declarations in the tensors' order) of an op call, and the parameter
    tensors, checked against the declarations: one per declaration, the declared shape for this
    problem, a float tensor for an ``fp32`` parameter and an integer (or bool) one for ``int32``, on
    q's device.

    Raises:
        ModError (a SpecError): a parameter of the wrong shape, dtype or device, named.
    """
    params = list(params)
    if not (score_mod or mask_mod or param_decls or params):
        return ("", "", ()), []
    from tilegen.core.mods import ModError, parse_param_decls

    data = json.loads(param_decls) if param_decls else {}
    by_name = {d.name: d for d in parse_param_decls(data)}
    decls = tuple(by_name[n] for n in data)  # in the order of the tensors
    if len(params) != len(decls):
        raise ModError("params", f"{len(params)} tensors", f"one tensor per declared parameter ({', '.join(data) or 'none'})")
    lq, lk, _ = _check(q, k, v, layout=layout, scale=None, name="attention_fwd")
    sizes = {"B": lq[0], "Hq": lq[1], "Hkv": lk[1], "Sq": lq[2], "Sk": lk[2]}
    for d, t in zip(decls, params):
        want = d.concrete_shape(sizes)
        if tuple(t.shape) != want:
            raise ModError(d.name, list(t.shape), f"shape {list(want)} (declared {[str(x) for x in d.shape]})")
        if d.differentiable != t.is_floating_point():
            raise ModError(d.name, str(t.dtype), "a floating-point tensor" if d.differentiable else "an integer tensor")
        if t.device != q.device:
            raise ModError(d.name, str(t.device), f"a tensor on q's device {q.device}")
    return (score_mod, mask_mod, decls), params


def _kernel_params(decls, params) -> dict:
    """Parameter tensors for the generated module, by name: float32 or int32, contiguous."""
    out = {}
    for d, t in zip(decls, params):
        out[d.name] = t.detach().to(torch.float32 if d.differentiable else torch.int32).contiguous()
    return out


def _interp_mods(mods: tuple, params) -> dict:
    """``score_mod=``/``mask_mod=`` for :mod:`tilegen.api`: the op's texts as :class:`tilegen.mods.Mod`
    objects over the parameter arrays (NumPy)."""
    score_text, mask_text, decls = mods
    if not (score_text or mask_text):
        return {}
    from tilegen.core.mods import Mod, Param, parse

    by_name = {d.name: d for d in decls}
    wrapped = tuple(Param(d.name, (t.detach().float() if d.differentiable else t.detach()).cpu().numpy()) for d, t in zip(decls, params))
    out = {}
    if score_text:
        out["score_mod"] = Mod("score", parse(score_text, "score", by_name), wrapped)
    if mask_text:
        out["mask_mod"] = Mod("mask", parse(mask_text, "mask", by_name), wrapped)
    return out


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
# the interpreter's "atomic", the GPU target's choice on CUDA); target (a GPU target name, CUDA only);
# score_mod, mask_mod: mod-language text ("" none); param_decls: JSON {name: {"shape": [...], "dtype":
# "fp32"|"int32"}} in the order of params (ParamDecl.to_dict); params: the parameter tensors.


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
    score_mod: str,
    mask_mod: str,
    param_decls: str,
    params: list[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward as a custom op: (out, lse).

    Args:
        q, k, v: as for :func:`flash_attn_func` (``layout="BSND"``) or :func:`scaled_dot_product_attention`
            (``"BNSD"``); one dtype (float16, bfloat16, float32) and device; any strides.
        layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod,
            param_decls, params: see above.

    Returns:
        out: contiguous, q's physical shape with v's head dim, q's dtype; lse: contiguous float32
        [B, Hq, Sq], natural-log logsumexp of each row's visible (modified) scores (-inf for a row
        without one).

    Raises:
        SpecError (ValueError): a bad shape, dtype, device, window, scale, mod or parameter, named.
        NotImplementedError: NPU tensors (the Ascend C operator is not loaded here).
    """
    if q.device.type == "cuda" and not (score_mod or mask_mod or param_decls or params):
        module = _op_plan(q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target).module
        out, lse = module.forward(q, k, v)
        return out.contiguous(), lse.contiguous()
    _check_gpu_target(target)
    window = (window_left, window_right)
    mods, params = _op_mods(q, k, v, layout, score_mod, mask_mod, param_decls, params)
    spec = _spec(q, k, v, layout=layout, scale=scale, window=window, alignment=alignment, name="attention_fwd", mods=mods)
    device = q.device.type
    if device == "cuda":
        from tilegen.backends import triton as triton_backend

        module = triton_backend.load(spec, target, dq_strategy)
        if mods[2]:
            out, lse = module.forward(q, k, v, params=_kernel_params(mods[2], params))
        else:
            out, lse = module.forward(q, k, v)
        return out.contiguous(), lse.contiguous()
    if device == "cpu":
        from tilegen import api

        o, lse = api.attention(
            _to_numpy(q), _to_numpy(k), _to_numpy(v), **_interp_kw(scale, *window, alignment, layout), **_interp_mods(mods, params)
        )
        return _from_numpy(o, q), torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32))
    _npu_refusal()


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls, params):
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
    score_mod: str,
    mask_mod: str,
    param_decls: str,
    params: list[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Attention backward (recompute from lse) as a custom op: (dq, dk, dv, dparams).

    Args:
        q, k, v, and the scalars: as for :func:`attention_fwd`; out, lse: its outputs; dout: dLoss/dout,
            out's shape and dtype, any strides.

    Returns:
        dq, dk, dv: contiguous, the shapes and dtype of q, k, v; dk and dv summed over each GQA group.
        dparams: dLoss/dparam for each floating-point tensor of ``params``, in their order, each of its
        parameter's shape and dtype (reduced in a fixed order, DESIGN §3; zeros for a float parameter the
        score mod does not read); empty without float parameters.

    Raises:
        as :func:`attention_fwd`.
    """
    if q.device.type == "cuda" and not (score_mod or mask_mod or param_decls or params):
        module = _op_plan(q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target).module
        return (*(g.contiguous() for g in module.backward(q, k, v, out, lse, dout)), [])
    _check_gpu_target(target)
    window = (window_left, window_right)
    mods, params = _op_mods(q, k, v, layout, score_mod, mask_mod, param_decls, params)
    spec = _spec(q, k, v, layout=layout, scale=scale, window=window, alignment=alignment, name="attention_bwd", mods=mods)
    device = q.device.type
    if device == "cuda":
        from tilegen.backends import triton as triton_backend

        module = triton_backend.load(spec, target, dq_strategy)
        if mods[2]:
            grads = module.backward(q, k, v, out, lse, dout, params=_kernel_params(mods[2], params))
        else:
            grads = module.backward(q, k, v, out, lse, dout)
        dparams = grads[3] if len(grads) > 3 else {}
        dx = tuple(g.contiguous() for g in grads[:3])
    elif device == "cpu":
        from tilegen import api

        grads = api.attention_backward(
            *(_to_numpy(x) for x in (q, k, v, out)),
            lse.detach().float().contiguous().numpy(),
            _to_numpy(dout),
            dq_strategy=dq_strategy or "atomic",
            **_interp_kw(scale, *window, alignment, layout),
            **_interp_mods(mods, params),
        )
        dparams = {n: torch.from_numpy(np.ascontiguousarray(g)) for n, g in (grads[3] if len(grads) > 3 else {}).items()}
        dx = tuple(_from_numpy(g, x) for g, x in zip(grads[:3], (q, k, v)))
    else:
        _npu_refusal()
    dp = []
    for d, t in zip(mods[2], params):
        if t.is_floating_point():
            g = dparams.get(d.name)
            dp.append(torch.zeros_like(t) if g is None else g.to(device=t.device, dtype=t.dtype).reshape(t.shape).contiguous())
    return (*dx, dp)


@attention_bwd.register_fake
def _attention_bwd_fake(q, k, v, out, lse, dout, layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls, params):
    dp = [p.new_empty(p.shape) for p in params if p.is_floating_point()]
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dp


_SCALARS = ("layout", "scale", "window_left", "window_right", "alignment", "dq_strategy", "target", "score_mod", "mask_mod", "param_decls")


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, *scalars, params = inputs
    params = list(params)
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, *params)
    ctx.scalars = scalars
    ctx.param_grad = [p.is_floating_point() and p.requires_grad for p in params]


def _fwd_backward(ctx, dout, dlse):
    """dq, dk, dv and the float parameters' gradients through :func:`attention_bwd`; lse is an
    auxiliary output and takes no gradient; integer parameters take none."""
    q, k, v, out, lse, *params = ctx.saved_tensors
    dq, dk, dv, dp = attention_bwd(q, k, v, out, lse, dout, *ctx.scalars, params)
    grads = iter(dp)
    dparams = [next(grads) if p.is_floating_point() else None for p in params]
    dparams = [g if want else None for g, want in zip(dparams, ctx.param_grad)]
    return (dq, dk, dv, *(None for _ in _SCALARS), dparams)


attention_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)

NO_SECOND_DERIVATIVE = "tilegen attention has no second derivative (no double backward): its backward (tilegen::attention_bwd) is not differentiable"


def _bwd_setup_context(ctx, inputs, output):
    pass


def _bwd_backward(ctx, ddq, ddk, ddv, ddparams):
    raise NotImplementedError(NO_SECOND_DERIVATIVE)


attention_bwd.register_autograd(_bwd_backward, setup_context=_bwd_setup_context)


# --- dispatch ----------------------------------------------------------------------------------------


def _check_gpu_target(target: str) -> None:
    """``target`` names a target whose backend generates the module this runs (a GPU target; checked on
    every device, so a typo never passes on the CPU)."""
    from tilegen.backends import backend_for
    from tilegen.core.targets import load_target, target_names

    def accepted() -> str:  # built only for the error: it reads every target file
        gpus = [n for n in target_names() if backend_for(n).torch_module]
        return f"a GPU target: one of {', '.join(gpus)} or a path to a GPU target .toml file"

    if not isinstance(target, str):
        raise SpecError("target", target, accepted())
    try:
        tgt = load_target(target)
    except TargetError:
        raise SpecError("target", target, accepted()) from None
    if not backend_for(tgt).torch_module:
        raise SpecError("target", target, accepted() + f" ({target!r} is a {tgt.kind} target)")


# --- the per-call fast path: a plan cache ------------------------------------------------------------
#
# A call is checked, its spec built and validated and its module loaded once per *key*: everything the
# checks and the kernels depend on, that is each tensor's type, dtype, device, shape and strides and
# every scalar argument with its type (True == 1 in Python, and a bool is refused where an int is
# taken). A later call with the same key (a hit) skips all of that, as well as the re-reading of the
# target file (its size and modification time are compared instead: an edited file misses) and, in
# eager mode, the dispatcher of the custom ops: the kernels run through :class:`_FastAttention`, an
# autograd function over the same module calls. Keys of two kinds share one table: the entry points'
# own arguments (``("sdpa", ...)``, ``("flash", ...)``), so that even their argument checks are skipped
# on a hit, and the custom ops' arguments (``("op", ...)``), for calls under ``torch.compile``. Calls
# with mods never take it; calls with sinks, softcap or ALiBi and packed batches keep their own plans
# in the same table (``("extras", ...)``, :class:`_ExtrasPlan`). The table is bounded: a full one
# drops its least recently used key. Nothing on it reads a tensor's values on the host
# (no device synchronisation), so it can be captured in a CUDA graph.

_PLANS: dict[tuple, "_Plan"] = {}
_PLAN_LIMIT = 256  # keys kept; a full table drops its least recently used key (LRU)
PLAN_STATS = {"hits": 0, "misses": 0}  # counters of the table, for tests and benchmarks
_FAST_DEVICES = ("cuda",)  # devices whose calls take the fast path (tests add "cpu": the Triton interpreter)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


@dataclass(frozen=True)
class _Plan:
    """What a hit needs: the loaded Triton module (its ``forward``/``backward`` take the tensors) and the
    (path, mtime_ns, size) of the target file it was generated from."""

    module: Any
    stamp: tuple


def _stamp(target: str) -> tuple:
    import os

    from tilegen.core.targets import load_target

    path = load_target(target).path
    st = os.stat(path)
    return (path, st.st_mtime_ns, st.st_size)


def _fresh(plan: "_Plan") -> bool:
    """The target file the plan was made from still has its size and modification time."""
    import os

    try:
        st = os.stat(plan.stamp[0])
    except OSError:
        return False
    return (st.st_mtime_ns, st.st_size) == plan.stamp[1:]


def _meta(x: torch.Tensor) -> tuple:
    return (x.dtype, x.device, x.shape, x.stride())


def _lookup(key) -> "_Plan | None":
    """The plan of ``key`` if its target file is unchanged (it becomes the most recently used)."""
    plan = _PLANS.pop(key, None) if key is not None else None
    if plan is not None and _fresh(plan):
        PLAN_STATS["hits"] += 1
        _PLANS[key] = plan  # a dict keeps insertion order: the end is the most recently used
        return plan
    return None


def _store(key, plan: "_Plan") -> None:
    """Keep ``plan`` under ``key``; a full table drops its least recently used key."""
    PLAN_STATS["misses"] += 1
    _PLANS.pop(key, None)
    while len(_PLANS) >= _PLAN_LIMIT:
        del _PLANS[next(iter(_PLANS))]
    _PLANS[key] = plan


def _op_plan(q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target) -> "_Plan":
    """The plan of a custom-op call without mods: on a miss the target is checked, the spec built and
    validated (errors name the argument) and the module loaded.

    Raises:
        SpecError (ValueError): as :func:`attention_fwd`.
    """
    key = ("op", _meta(q), _meta(k), _meta(v), layout, type(scale), scale, type(window_left), window_left,
           type(window_right), window_right, alignment, dq_strategy, target)
    plan = _lookup(key)
    if plan is not None:
        return plan
    _check_gpu_target(target)
    spec = _spec(q, k, v, layout=layout, scale=scale, window=(window_left, window_right), alignment=alignment, name="attention_fwd")
    from tilegen.backends import triton as triton_backend

    plan = _Plan(triton_backend.load(spec, target, dq_strategy), _stamp(target))
    _store(key, plan)
    return plan


def _eager_plain(*xs) -> bool:
    """Plain tensors (no subclass, fake tensors among them; None allowed) in an eager call: not under
    ``torch.compile``, a dispatch mode or a torch.func transform, where calls must be seen as they are."""
    if any(x is not None and type(x) not in _PLAIN for x in xs):
        return False
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0 or torch._C._are_functorch_transforms_active())


def _fast_key(kind: str, q, k, v, *scalars):
    """The entry-point key of an eager call that may take the fast path, or None: under
    ``torch.compile``, a dispatch mode or a torch.func transform (the custom ops must be seen there),
    for tensor subclasses (fake tensors among them), for devices outside ``_FAST_DEVICES`` and for an
    unhashable argument."""
    if q.device.type not in _FAST_DEVICES or not _eager_plain(q, k, v):
        return None
    return _hashable((kind, _meta(q), _meta(k), _meta(v), *((type(x), x) for x in scalars)))


def _hashable(key):
    """``key``, or None when an argument in it is unhashable (the slow path's checks then name it)."""
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _fast_out(q, k, v, plan: "_Plan") -> torch.Tensor:
    """out of a fast-path call: through :class:`_FastAttention` when a gradient is wanted, else the
    module's forward alone (no autograd node)."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _FastAttention.apply(q, k, v, plan)[0]
    return plan.module.forward(q, k, v, trusted=True)[0].contiguous()


class _FastAttention(torch.autograd.Function):
    """Eager autograd over a plan's module: ``forward`` → (out, lse) as :func:`attention_fwd` returns
    them, ``backward`` → (dq, dk, dv) as :func:`attention_bwd`; lse takes no gradient and there is no
    second derivative (NotImplementedError, as the custom ops). The module's input checks are skipped
    (``trusted=True``): the plan's key proved q, k, v, and dout is checked against out here (autograd
    already gives it out's shape and dtype; its strides may be anything, the kernels take strides).
    No gradient is materialised (``set_materialize_grads(False)``): lse's is None rather than a
    zero-filled tensor (a fill kernel per call), and a backward that receives no gradient for out
    returns none."""

    @staticmethod
    def forward(ctx, q, k, v, plan):
        ctx.set_materialize_grads(False)
        out, lse = plan.module.forward(q, k, v, trusted=True)  # lse: a new contiguous [B, Hq, Sq] tensor
        out = out.contiguous()
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.module = plan.module
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if torch.is_grad_enabled():
            raise NotImplementedError(NO_SECOND_DERIVATIVE)
        if dout is None:
            return None, None, None, None
        q, k, v, out, lse = ctx.saved_tensors
        trusted = dout.dtype == out.dtype and dout.shape == out.shape
        dq, dk, dv = ctx.module.backward(q, k, v, out, lse, dout, trusted=trusted)
        return dq.contiguous(), dk.contiguous(), dv.contiguous(), None


def _run(q, k, v, *, layout: str, scale, window: tuple[int, int], alignment: str, dq_strategy: str | None, target: str, score_mod=None, mask_mod=None, bound=None, fast_key=None):
    """out of :func:`attention_fwd` (q, k, v checked by the caller); the mask mod's window is and-ed
    with ``window``; ``bound`` gives parameter tensors by name in place of the mods' own arrays;
    ``fast_key`` (:func:`_fast_key`, calls without mods): the call runs through :class:`_FastAttention`
    and later calls with that key skip the checks."""
    if fast_key is not None and score_mod is None and mask_mod is None:
        scale = None if scale is None else float(scale)
        plan = _op_plan(q, k, v, layout, scale, window[0], window[1], alignment, dq_strategy, target)
        _store(fast_key, plan)
        return _fast_out(q, k, v, plan)
    score_text, mask_text, decls, params, mod_window = _mods_of_call(score_mod, mask_mod, q, bound or {})
    if mod_window != (-1, -1):
        from tilegen.core.mods import intersect_windows

        window = intersect_windows(window, mod_window)
    scale = None if scale is None else float(scale)
    return attention_fwd(q, k, v, layout, scale, window[0], window[1], alignment, dq_strategy, target, score_text, mask_text, decls, params)[0]


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
    score_mod=None,
    mask_mod=None,
    sinks=None,
    target: str = "h200",
):
    """Attention with FlashAttention's ``flash_attn_func`` arguments; gradients flow to q, k, v, to
    the float parameter tensors of the mods (``alibi_slopes`` included) and to ``sinks``.

    Args:
        q: [B, Sq, Hq, D] (BSND), float16, bfloat16 or float32; any strides.
        k: [B, Sk, Hkv, D]; v: [B, Sk, Hkv, Dv]; Hkv divides Hq (GQA/MQA); same dtype and device as q.
        dropout_p: must be 0.0 (no dropout in tilegen's kernels).
        softmax_scale: S = softmax_scale·QKᵀ; None → 1/√D.
        causal: key j visible to query i iff j ≤ i + Sk − Sq (bottom-right aligned).
        window_size: (left, right), −1 unbounded: key j visible iff i + Sk − Sq − left ≤ j ≤ i + Sk − Sq + right.
        softcap: 0.0, or > 0: score′ = softcap·tanh(score/softcap) (:func:`tilegen.mods.softcap`).
        alibi_slopes: None, or a float tensor [Hq] or [B, Hq]: score′ −= slope·|i + Sk − Sq − j|, after
            the softcap (:func:`tilegen.mods.alibi`).
        deterministic: True picks the backward without atomics (dQ in a second pass over K/V tiles);
            parameter gradients are deterministic either way.
        return_attn_probs: must be False.
        score_mod: a :mod:`tilegen.mods` built-in or ``score_mod(score, b, h, q_idx, kv_idx)`` (not
            together with softcap or alibi_slopes).
        mask_mod: a built-in or ``mask_mod(b, h, q_idx, kv_idx)``, and-ed with causal/window_size.
        sinks: float [Hq] learnable sink logits (gpt-oss): each joins its head's softmax denominator
            and carries no value (DESIGN §3); or None (not together with score_mod or mask_mod).
        target: the GPU target file whose schedule CUDA tensors use.

    Returns:
        out: [B, Sq, Hq, Dv], q's dtype; rows with no visible key are 0.

    Raises:
        UnsupportedArgument (NotImplementedError): dropout, returned probabilities, softcap or
            alibi_slopes together with score_mod;
            sinks together with score_mod or mask_mod.
        SpecError (ValueError): a bad shape, dtype, device, window, scale or softcap, named; ModError
            (a SpecError): an invalid mod or parameter, naming the construct.
    """
    fast_key = None
    if (score_mod is None and mask_mod is None and sinks is None and alibi_slopes is None and type(window_size) is tuple
            and len(window_size) == 2 and type(window_size[0]) is int and type(window_size[1]) is int
            and type(softcap) in (int, float) and not softcap and type(dropout_p) in (int, float) and not dropout_p and not return_attn_probs):
        fast_key = _fast_key("flash", q, k, v, softmax_scale, causal, window_size, deterministic, target)
        plan = _lookup(fast_key)
        if plan is not None:
            return _fast_out(q, k, v, plan)
    if dropout_p != 0.0:
        raise UnsupportedArgument("dropout_p", dropout_p, "0.0 (tilegen's kernels have no dropout)")
    if return_attn_probs:
        raise UnsupportedArgument("return_attn_probs", return_attn_probs, "False (the probabilities are never stored)")
    if not isinstance(deterministic, bool):
        raise SpecError("deterministic", deterministic, "True or False")
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not (softcap == 0.0 or 0.0 < softcap < math.inf):
        raise SpecError("softcap", softcap, "0.0 (none) or a finite number > 0")
    if sinks is not None:
        if score_mod is not None or mask_mod is not None:
            raise UnsupportedArgument("sinks", "a tensor", "None when score_mod or mask_mod is given (sinks run with softcap, alibi_slopes, causal and window_size)")
        window = _window(causal, window_size, "causal")
        return _flash_attn_extras(q, k, v, softmax_scale=softmax_scale, window=window, softcap=softcap, alibi_slopes=alibi_slopes,
                                  sinks=sinks, deterministic=deterministic, target=target)
    if alibi_slopes is not None and not isinstance(alibi_slopes, torch.Tensor):
        raise SpecError("alibi_slopes", type(alibi_slopes).__name__, "None or a float torch.Tensor [Hq] or [B, Hq]")
    if softcap or alibi_slopes is not None:
        if score_mod is not None:
            which = "softcap" if softcap else "alibi_slopes"
            raise UnsupportedArgument(which, softcap if softcap else "a tensor", "its default when score_mod is given (put it in the score mod: tilegen.mods.softcap, tilegen.mods.alibi)")
        ndim = 0 if alibi_slopes is None else alibi_slopes.dim()
        if ndim not in (0, 1, 2):
            raise SpecError("alibi_slopes.shape", tuple(alibi_slopes.shape), "[Hq] or [B, Hq]")
        score_mod = _flash_mod(float(softcap), ndim)
    window = _window(causal, window_size, "causal")
    _check(q, k, v, layout="BSND", scale=softmax_scale, name="flash_attn_func")
    bound = {} if alibi_slopes is None else {"alibi_slopes": alibi_slopes}
    return _run(
        q, k, v, layout="BSND", scale=softmax_scale, window=window, alignment="bottom_right", dq_strategy="separate" if deterministic else None,
        target=target, score_mod=score_mod, mask_mod=mask_mod, bound=bound, fast_key=fast_key,
    )


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
    score_mod=None,
    mask_mod=None,
    target: str = "h200",
):
    """Attention with ``torch.nn.functional.scaled_dot_product_attention``'s arguments (BNSD);
    gradients flow to query, key, value and the float parameter tensors of the mods.

    Args:
        query: [B, Hq, Sq, D]; key: [B, Hkv, Sk, D]; value: [B, Hkv, Sk, Dv]; float16, bfloat16 or
            float32, one device, any strides.
        attn_mask: must be None (use is_causal or mask_mod; tilegen takes no mask tensor).
        dropout_p: must be 0.0.
        is_causal: key j visible to query i iff j ≤ i (top-left aligned, as torch's is_causal).
        scale: S = scale·QKᵀ; None → 1/√D.
        enable_gqa: must be True when Hkv < Hq (as in torch).
        score_mod: a :mod:`tilegen.mods` built-in or ``score_mod(score, b, h, q_idx, kv_idx)``.
        mask_mod: a built-in or ``mask_mod(b, h, q_idx, kv_idx)``, and-ed with is_causal. The mods'
            own windows (``causal()``, ``sliding_window``) are bottom-right aligned (DESIGN §3), as
            everything else in the mod language (``Sk − Sq`` offsets); with Sq = Sk the two agree.
        target: the GPU target file whose schedule CUDA tensors use.

    Returns:
        [B, Hq, Sq, Dv] in query's dtype; rows with no visible key are 0.

    Raises:
        UnsupportedArgument (NotImplementedError): attn_mask or dropout.
        SpecError (ValueError): a bad shape, dtype, device or scale, or GQA without enable_gqa, named;
            ModError (a SpecError): an invalid mod or parameter, naming the construct.
    """
    fast_key = None
    if attn_mask is None and score_mod is None and mask_mod is None and type(dropout_p) in (int, float) and not dropout_p:
        fast_key = _fast_key("sdpa", query, key, value, is_causal, scale, enable_gqa, target)
        plan = _lookup(fast_key)
        if plan is not None:
            return _fast_out(query, key, value, plan)
    if attn_mask is not None:
        raise UnsupportedArgument("attn_mask", type(attn_mask).__name__, "None (is_causal or mask_mod= cover the masks)")
    if dropout_p != 0.0:
        raise UnsupportedArgument("dropout_p", dropout_p, "0.0 (tilegen's kernels have no dropout)")
    if not isinstance(enable_gqa, bool):
        raise SpecError("enable_gqa", enable_gqa, "True or False")
    window = _window(is_causal, (-1, -1), "is_causal")
    lq, lk, _ = _check(query, key, value, layout="BNSD", scale=scale, name="scaled_dot_product_attention")
    if lk[1] != lq[1] and not enable_gqa:
        raise SpecError("enable_gqa", enable_gqa, f"True when key/value have fewer heads ({lk[1]}) than query ({lq[1]})")
    alignment = "top_left"
    if mask_mod is not None or score_mod is not None:
        if lq[2] != lk[2] and is_causal:
            raise SpecError("is_causal", True, f"False when mods are given and Sq {lq[2]} != Sk {lk[2]} (the mods are bottom-right aligned; use tilegen.mods.causal())")
        alignment = "bottom_right"
    return _run(query, key, value, layout="BNSD", scale=scale, window=window, alignment=alignment, dq_strategy=None, target=target,
                score_mod=score_mod, mask_mod=mask_mod, fast_key=fast_key)


# --- softcap, ALiBi, attention sinks and packed variable-length batches ------------------------------
#
# FlashAttention's softcap / alibi_slopes, learnable sinks (gpt-oss) and flash_attn_varlen_func, through a
# torch.autograd.Function (not a custom op: the varlen offsets are read on the host). CPU tensors run
# in the interpreter (tilegen.api.attention(_backward), attention_varlen(_backward)); CUDA tensors run
# the Triton module of the spec through its ``forward(q, k, v, *, sinks, params, blocks)`` /
# ``backward(q, k, v, out, lse, dout, *, sinks, params, blocks)`` interface: the parameter arrays by
# name, the sinks (the module's backward returns dsinks = −Σ_rows exp(σ_h − L)·D among its dparams)
# and, for a packed batch, the block classes computed on the host from the offsets
# (tilegen.api.varlen_block_classes, cached per offsets, tile sizes and window) in place of the
# classify kernel. The guarded kernels never write the tokens outside every sequence; the module
# allocates O, dQ, dK, dV as 0 and L as −inf, the values those rows keep.


@dataclass(frozen=True)
class _Extras:
    """The non-tensor arguments of one call: ``kind`` "dense" (BSND) or "varlen" (TND)."""

    kind: str
    scale: float | None
    window: tuple
    softcap: float | None
    deterministic: bool
    target: str
    cu_q: Any = None  # varlen: int32 NumPy copies of the offsets
    cu_k: Any = None
    max_q: Any = None
    max_k: Any = None


def _np_or_none(x):
    return None if x is None else _to_numpy(x).astype(np.float32)


def _triton_path(x: torch.Tensor) -> bool:
    """Whether a call on ``x``'s device runs the Triton module (CUDA tensors); the other devices run
    the interpreter (CPU) or are refused (NPU)."""
    return x.device.type == "cuda"


def _varlen_blocks(module, kind: str, cfg, total_q: int, total_k: int, device) -> dict:
    """The ``blocks=`` argument of the module's ``kind`` ("fwd"/"bwd") program for a varlen call: the
    block classes of the packed batch in closed form on the host (:func:`tilegen.api.varlen_block_classes`
    for the program's ``TILE_SIZES``) and their tile lists, on ``device``. Computed once per plan
    (:func:`_plan_blocks`), so a training loop over one packing computes them once."""
    from tilegen import api

    br, bc = module.TILE_SIZES[kind]
    table = api.varlen_block_classes(cfg.cu_q.astype(np.int64), cfg.cu_k.astype(np.int64), total_q, total_k, br, bc, cfg.window)
    return module.tile_lists(kind, torch.from_numpy(table).view(module.BLOCK_SHAPES[kind]).to(device))


# The plan of an extras call on the Triton path, kept in the plan table (``_PLANS``, LRU) under a key
# of everything it depends on (:func:`_extras_key`): the tensors' dtype, device, shape and strides
# (q, k, v, and the sinks' and slopes' when given), the scale, window, softcap, deterministic flag,
# target name and, for a packed batch, the offsets' values and max_seqlen_q/k. The target file's size
# and modification time are compared on a hit, as for the fast path. A hit builds and checks no spec,
# loads no module and copies no offset-derived array to the device: the sinks and slopes, whose values
# change between calls (they are learnt), are the only per-call inputs, read on the device (no host
# synchronisation). The backward takes the forward's plan from ``ctx``. The spec does not hold the
# offsets, so a packed batch's plan is also kept under its key without the offsets and max_seqlen_q/k
# (``packing=False``): a new packing of known shapes and arguments (training: one per step) builds no
# spec and loads no module; only its offsets are checked and their arrays and block tables built.


@dataclass(frozen=True, eq=False)
class _ExtrasPlan:
    """What an extras call on the Triton path needs beyond its tensors.

    Attributes:
        module: the loaded Triton module, or None for a packed batch without a query or key token.
        stamp: (path, mtime_ns, size) of the target file (see :func:`_fresh`).
        params: the parameter arrays fixed by the key, on the device (varlen: int32 q_seq, k_seq,
            q_off); None when the spec has no mod (no ``params=`` argument).
        inside: varlen: bool [total_q] on the device, the query tokens inside a sequence.
        seq: varlen with [num_seqs, Hq] slopes: int64 [total_q], each token's sequence (0 outside).
        cfg, total_q, total_k: what :func:`_varlen_blocks` reads.
        blocks: varlen: kind ("fwd"/"bwd") -> tile lists, filled on first use (:func:`_plan_blocks`).
    """

    module: Any
    stamp: tuple
    params: Any
    inside: Any
    seq: Any
    cfg: Any
    total_q: int
    total_k: int
    blocks: dict


def _extras_key(q, k, v, sinks, alibi, cfg: _Extras, packing: bool = True):
    """The plan key of an extras call, or None where no plan is kept (see :func:`_eager_plain`);
    ``packing=False``: without the offsets and max_seqlen_q/k (what the spec and module depend on)."""
    if not _eager_plain(q, k, v, sinks, alibi):
        return None
    key = ("extras", cfg.kind, _meta(q), _meta(k), _meta(v), None if sinks is None else _meta(sinks), None if alibi is None else _meta(alibi),
           type(cfg.scale), cfg.scale, cfg.window, cfg.softcap, cfg.deterministic, cfg.target)
    if cfg.kind == "varlen" and packing:
        key += (np.asarray(cfg.cu_q, np.int64).tobytes(), np.asarray(cfg.cu_k, np.int64).tobytes(),
                type(cfg.max_q), cfg.max_q, type(cfg.max_k), cfg.max_k)
    return _hashable(key)


def _extras_plan(q, k, v, sinks, alibi, cfg: _Extras) -> _ExtrasPlan:
    """The plan of an extras call on the Triton path: a hit of the plan table, else built (the spec
    built and checked, errors naming the argument, and the module loaded, unless a plan of the same
    shapes and arguments with other offsets has them; the offsets' arrays copied to the device once)
    and kept.

    Raises:
        SpecError (ValueError): a bad argument (on a miss; a hit had the same key, hence passed).
    """
    from tilegen import api
    from tilegen.backends import triton as triton_backend
    from tilegen.core.mods import mods_from_api

    key = _extras_key(q, k, v, sinks, alibi, cfg)
    plan = _lookup(key)
    if plan is not None:
        return plan
    alibi_np, sinks_np = _np_or_none(alibi), _np_or_none(sinks)
    device = q.device
    inside = seq = None
    module = known = None
    if cfg.kind == "varlen":
        shapes_key = None if key is None else _extras_key(q, k, v, sinks, alibi, cfg, packing=False) + ("module",)
        known = _lookup(shapes_key)
        if known is not None:
            # a new packing of known shapes and arguments: the spec does not hold the offsets, so its
            # module is the known plan's; the offsets are checked and their arrays built here
            lay = api.varlen_layout(cfg.cu_q, cfg.cu_k, q.shape[0], k.shape[0], cfg.max_q, cfg.max_k)
            check_sinks(sinks_np, q.shape[1])
            arrays = api._varlen_mods(lay, cfg.window, cfg.softcap, alibi_np, q.shape[1])[3]
            spec, module = None, known.module
        else:
            spec, arrays, lay, _ = api.varlen_spec(q.shape, k.shape, v.shape, _DTYPES[q.dtype], cfg.cu_q, cfg.cu_k, max_seqlen_q=cfg.max_q,
                                                   max_seqlen_k=cfg.max_k, softmax_scale=cfg.scale, window=cfg.window, softcap=cfg.softcap,
                                                   alibi_slopes=alibi_np, sinks=sinks_np)
        params = {n: torch.from_numpy(np.ascontiguousarray(a)).to(device) for n, a in arrays.items() if n != "alibi_slopes"}
        inside = torch.from_numpy(lay.q_inside).to(device)
        if alibi is not None and alibi.dim() == 2:
            seq = torch.from_numpy(np.maximum(lay.q_seq, 0).astype(np.int64)).to(device)
    else:
        score = api._fa_score_mod(None, cfg.softcap, alibi_np)
        score_text, _, decls, _, _ = mods_from_api(score, None)
        spec = _spec(q, k, v, layout="BSND", scale=cfg.scale, window=cfg.window, alignment="bottom_right", name="flash_attn_func")
        spec = spec.replace(score_mod=score_text, params=decls, sinks=sinks is not None)
        params = {}
    if known is not None:
        with_params = known.params is not None
    else:
        module = None if spec is None else triton_backend.load(spec, cfg.target, "separate" if cfg.deterministic else None)
        with_params = spec is not None and spec.mods is not None
    plan = _ExtrasPlan(module, _stamp(cfg.target), params if with_params else None, inside, seq, cfg, q.shape[0], k.shape[0], {})
    if key is not None:
        _store(key, plan)
        if cfg.kind == "varlen" and known is None and module is not None:
            _store(shapes_key, plan)  # read for its module (and whether it takes params) by later packings
    return plan


def _plan_blocks(plan: _ExtrasPlan, kind: str) -> dict:
    """The plan's tile lists of ``kind`` (computed on first use)."""
    hit = plan.blocks.get(kind)
    if hit is None:
        hit = plan.blocks[kind] = _varlen_blocks(plan.module, kind, plan.cfg, plan.total_q, plan.total_k, plan.inside.device)
    return hit


class _ExtrasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, alibi, cfg: _Extras):
        out, lse, plan, kw = _extras_forward(q, k, v, sinks, alibi, cfg)
        ctx.save_for_backward(q, k, v, out, lse, sinks, alibi)
        ctx.cfg, ctx.plan, ctx.kw = cfg, plan, kw
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # lse takes no gradient: no zero-filled dlse per call
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, sinks, alibi = ctx.saved_tensors
        cfg = ctx.cfg
        dout = torch.zeros_like(out) if dout is None else dout.contiguous()
        if not _triton_path(q):
            from tilegen import api

            kw = dict(softmax_scale=cfg.scale, causal=False, window=cfg.window, softcap=cfg.softcap,
                      alibi_slopes=_np_or_none(alibi), sinks=_np_or_none(sinks), dq_strategy="separate" if cfg.deterministic else "atomic")
            if cfg.kind == "varlen":
                res = api.attention_varlen_backward(*(_to_numpy(x) for x in (q, k, v, out)), lse.detach().float().numpy(), _to_numpy(dout),
                                                    cfg.cu_q, cfg.cu_k, max_seqlen_q=cfg.max_q, max_seqlen_k=cfg.max_k, **kw)
                extras = list(res[3:])
                dsinks = torch.from_numpy(extras.pop(0)) if sinks is not None else None
                dalibi = torch.from_numpy(extras.pop(0)) if alibi is not None else None
            else:
                res = api.attention_backward(*(_to_numpy(x) for x in (q, k, v, out)), lse.detach().float().numpy(), _to_numpy(dout),
                                             layout="BSND", **kw)
                dparams = res[3] if len(res) > 3 else {}
                dsinks = torch.from_numpy(dparams["sinks"]) if sinks is not None else None
                dalibi = torch.from_numpy(dparams["alibi_slopes"]) if alibi is not None else None
            dq, dk, dv = (_from_numpy(g, x) for g, x in zip(res[:3], (q, k, v)))
        elif ctx.plan.module is None:  # a packed batch without a query or key token: nothing ran
            dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
            dsinks = None if sinks is None else torch.zeros_like(sinks)
            dalibi = None if alibi is None else torch.zeros_like(alibi)
        else:
            lift = (lambda x: x.unsqueeze(0)) if cfg.kind == "varlen" else (lambda x: x)
            kw = dict(ctx.kw)
            if "blocks" in kw:
                kw["blocks"] = _plan_blocks(ctx.plan, "bwd")
            res = ctx.plan.module.backward(lift(q), lift(k), lift(v), lift(out), lift(lse), lift(dout), **kw)
            dq, dk, dv = (g.reshape(x.shape) for g, x in zip(res[:3], (q, k, v)))
            dparams = res[3] if len(res) > 3 else {}
            dsinks = dparams["sinks"] if sinks is not None else None
            dalibi = None
            if alibi is not None and alibi.requires_grad:
                if "alibi_slopes" not in dparams:
                    raise UnsupportedArgument("alibi_slopes", "a tensor that requires grad", "slopes without gradient on CUDA (this Triton module returns no parameter gradients)")
                dalibi = _fold_alibi(dparams["alibi_slopes"], alibi, cfg)
        if dsinks is not None:
            dsinks = dsinks.to(sinks.device, sinks.dtype)
        if dalibi is not None:
            dalibi = dalibi.to(alibi.device, alibi.dtype)
        return dq, dk, dv, dsinks, dalibi, None


def _fold_alibi(g, alibi, cfg):
    """The slopes' gradient in the slopes' shape (varlen [num_seqs, Hq] slopes are read per token)."""
    if cfg.kind == "varlen" and alibi.dim() == 2:
        cu = torch.as_tensor(cfg.cu_q.astype(np.int64))
        return torch.stack([g[int(cu[s]):int(cu[s + 1])].double().sum(0) for s in range(len(cu) - 1)]).float()
    return g


def _extras_forward(q, k, v, sinks, alibi, cfg: _Extras):
    """(out, lse, :class:`_ExtrasPlan` or None, the module's keyword arguments or None).

    On the Triton path a packed batch runs as one batch (B = 1) whose guarded kernels never write the
    tokens outside every sequence; the module allocates out = 0 and lse = −inf, which those tokens
    keep (no masking after the kernels). The plan comes from the plan table (:func:`_extras_plan`);
    the sinks and slopes are passed as they are now, on the device."""
    from tilegen import api

    device = q.device.type
    if device == "npu":
        _npu_refusal()
    if not _triton_path(q):
        kw = dict(softmax_scale=cfg.scale, window=cfg.window, softcap=cfg.softcap, alibi_slopes=_np_or_none(alibi), sinks=_np_or_none(sinks))
        if cfg.kind == "varlen":
            o, lse = api.attention_varlen(_to_numpy(q), _to_numpy(k), _to_numpy(v), cfg.cu_q, cfg.cu_k, max_seqlen_q=cfg.max_q, max_seqlen_k=cfg.max_k, **kw)
        else:
            o, lse = api.attention(_to_numpy(q), _to_numpy(k), _to_numpy(v), layout="BSND", **kw)
        return _from_numpy(o, q), torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32)), None, None
    plan = _extras_plan(q, k, v, sinks, alibi, cfg)
    if plan.module is None:  # no query or no key token: every row is empty (lse = σ_h inside a sequence)
        out = q.new_zeros((*q.shape[:2], v.shape[2]))
        lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), device=q.device)
        if sinks is not None:
            lse = torch.where(plan.inside, sinks.detach().float().view(-1, 1), lse)
        return out, lse, plan, None
    kw = {}
    if plan.params is not None:
        params = dict(plan.params)
        if alibi is not None:
            slopes = alibi.detach().float()
            if plan.seq is not None:  # varlen [num_seqs, Hq]: one row per query token, 0 outside every sequence
                slopes = torch.where(plan.inside[:, None], slopes[plan.seq], slopes.new_zeros(()))
            params["alibi_slopes"] = slopes.contiguous()
        kw["params"] = params
    if sinks is not None:
        kw["sinks"] = sinks.detach().float().contiguous()
    if cfg.kind == "varlen":
        kw["blocks"] = _plan_blocks(plan, "fwd")
        out, lse = plan.module.forward(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), **kw)
        out, lse = out[0], lse[0]
    else:
        out, lse = plan.module.forward(q, k, v, **kw)
    return out.contiguous(), lse.contiguous(), plan, kw


def _check_extras(q, sinks, alibi_slopes, softcap):
    """Check the sinks, slopes and softcap of a torch call; return the softcap as float or None."""
    hq = q.shape[-2]
    for name, x in (("sinks", sinks), ("alibi_slopes", alibi_slopes)):
        if x is None:
            continue
        if not isinstance(x, torch.Tensor):
            raise SpecError(name, type(x).__name__, "a floating-point torch.Tensor or None")
        if not x.dtype.is_floating_point:
            raise SpecError(f"{name}.dtype", str(x.dtype), "a floating-point dtype (torch.float32, torch.bfloat16, torch.float16, torch.float64)")
        if x.device != q.device:
            raise SpecError(f"{name}.device", str(x.device), f"q's device {q.device}")
    if sinks is not None and tuple(sinks.shape) != (hq,):
        raise SpecError("sinks.shape", tuple(sinks.shape), f"({hq},): one logit per query head")
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap < 0:
        raise SpecError("softcap", softcap, "0.0 (off) or a positive finite number")
    return float(softcap) if softcap > 0 else None


def _flash_attn_extras(q, k, v, *, softmax_scale, window, softcap, alibi_slopes, sinks, deterministic, target):
    """flash_attn_func with softcap, ALiBi or sinks (dense, BSND): out [B, Sq, Hq, Dv]."""
    _check(q, k, v, layout="BSND", scale=softmax_scale, name="flash_attn_func")
    cap = _check_extras(q, sinks, alibi_slopes, softcap)
    cfg = _Extras("dense", None if softmax_scale is None else float(softmax_scale), tuple(window), cap, deterministic, target)
    return _ExtrasAttention.apply(q, k, v, sinks, alibi_slopes, cfg)[0]


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    sinks=None,
    target: str = "h200",
):
    """Attention over a packed batch with FlashAttention's ``flash_attn_varlen_func`` arguments;
    gradients flow to q, k, v, sinks and alibi_slopes.

    Args:
        q: [total_q, Hq, D] (TND); k: [total_k, Hkv, D]; v: [total_k, Hkv, Dv]; one dtype (float16,
            bfloat16, float32) and device.
        cu_seqlens_q, cu_seqlens_k: int32 tensors [num_seqs + 1] of non-decreasing token offsets
            (read on the host: CUDA tensors are copied to the host, one synchronisation per call that
            cannot be avoided, since the offsets decide the plan; pass CPU tensors to have none);
            empty sequences are legal; tokens past the last offset belong to no sequence and get
            out = 0 and zero gradients.
        max_seqlen_q, max_seqlen_k: at least the longest sequence (checked; None allowed).
        dropout_p: must be 0.0. softmax_scale: None → 1/√D.
        causal, window_size: aligned bottom-right within each sequence (FlashAttention >= 2.1).
        softcap: 0.0 (off) or c > 0: score′ = c·tanh(score/c) on the scaled score.
        alibi_slopes: float [Hq] or [num_seqs, Hq]: score′ −= slope·|i + Sk_s − Sq_s − j|.
        deterministic: True picks the backward without atomics.
        return_attn_probs, block_table: must be False, None.
        sinks: float [Hq] learnable sink logits (gpt-oss; DESIGN §3), or None.
        target: the GPU target file whose schedule CUDA tensors use.

    Returns:
        out [total_q, Hq, Dv] in q's dtype.

    On CUDA the spec, the module, the offsets' arrays on the device and the block tables are kept per
    plan key (the offsets, max_seqlen_q/k, the tensors' dtype, device, shape and strides, sinks and
    slopes present with theirs, scale, window, softcap, deterministic, target; ``_PLANS``, LRU): a
    repeated call builds and checks none of them again and reads no tensor on the host but the
    offsets (the sinks' finiteness is checked on the first call of a key only). New offsets with
    known shapes and arguments reuse the spec and module; their arrays and block tables are built.

    Raises:
        UnsupportedArgument (NotImplementedError): dropout, returned probabilities, a paged KV cache.
        SpecError (ValueError): a bad tensor, offsets, window, scale, sinks or slopes, named.
    """
    if dropout_p != 0.0:
        raise UnsupportedArgument("dropout_p", dropout_p, "0.0 (tilegen's kernels have no dropout)")
    if return_attn_probs:
        raise UnsupportedArgument("return_attn_probs", return_attn_probs, "False (the probabilities are never stored)")
    if block_table is not None:
        raise UnsupportedArgument("block_table", type(block_table).__name__, "None (no paged KV cache)")
    if not isinstance(deterministic, bool):
        raise SpecError("deterministic", deterministic, "True or False")
    window = _window(causal, window_size, "causal")
    for arg, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise SpecError(arg, type(x).__name__, "a torch.Tensor")
        if x.dim() != 3:
            raise SpecError(f"{arg}.shape", tuple(x.shape), "3 dimensions [total_tokens, heads, head_dim] (TND)")
        if x.dtype not in _DTYPES:
            raise SpecError(f"{arg}.dtype", str(x.dtype), "torch.float16, torch.bfloat16 or torch.float32")
    if not (q.device == k.device == v.device):
        raise SpecError("k.device", f"q {q.device}, k {k.device}, v {v.device}", "one device for q, k and v")
    cu = []
    for name, c in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(c, torch.Tensor):
            raise SpecError(name, type(c).__name__, "an int32 torch.Tensor [num_seqs + 1]")
        if c.dtype != torch.int32:
            raise SpecError(f"{name}.dtype", str(c.dtype), "torch.int32 (an int32 torch.Tensor [num_seqs + 1])")
        cu.append(c.detach().cpu().numpy())
    cap = _check_extras(q, sinks, alibi_slopes, softcap)
    from tilegen import api

    # every check of the shapes and offsets once, before anything runs (on the Triton path the plan's
    # miss makes them, before any kernel; a hit has the key of a call that passed them)
    if not _triton_path(q):
        api.varlen_spec(q.shape, k.shape, v.shape, _DTYPES[q.dtype], cu[0], cu[1], max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                        softmax_scale=softmax_scale, window=window, softcap=cap,
                        alibi_slopes=_np_or_none(alibi_slopes), sinks=_np_or_none(sinks))
    cfg = _Extras("varlen", None if softmax_scale is None else float(softmax_scale), tuple(window), cap, deterministic, target,
                  cu[0], cu[1], max_seqlen_q, max_seqlen_k)
    return _ExtrasAttention.apply(q, k, v, sinks, alibi_slopes, cfg)[0]


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
    from tilegen.core.spec import ALIGNMENTS

    if alignment not in ALIGNMENTS:
        raise SpecError("alignment", alignment, " or ".join(repr(a) for a in ALIGNMENTS))
    return _window(causal, window_size, "causal")


def _lse_shape(q: torch.Tensor, layout: str) -> tuple[int, int, int]:
    return (q.shape[0], q.shape[2], q.shape[1]) if layout == "BSND" else (q.shape[0], q.shape[1], q.shape[2])


def _check_layout(layout) -> None:
    from tilegen.core.spec import LAYOUTS

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
        block_out, block_lse = attention_fwd(q, k, v, layout, scale, window[0], window[1], alignment, None, target, "", "", "", [])
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
            "separate" if deterministic else None, target, "", "", "", [],
        )[:3]  # no mods: no parameter gradients
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
