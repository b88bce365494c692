"""The custom ops, what ``torch.compile`` and autograd see, and the eager fast path beside them.

``tilegen::attention_fwd`` (q, k, v, scalars, params → out, lse) and ``tilegen::attention_bwd`` (q, k,
v, out, lse, dout, scalars, params → dq, dk, dv, dparams), with fake (meta) implementations and the
backward registered as the forward's autograd formula: ``torch.compile`` sees each call as one opaque
node of known output shapes and strides and never traces the interpreter or the kernel loader
(``fullgraph=True`` works). There is no second derivative: differentiating the backward raises
:class:`NotImplementedError`.

The ops' scalar arguments are a :class:`~tilegen.torch.call.Call` spelled out (:meth:`Call.op_args`):
layout ``"BNSD"`` | ``"BSND"``; scale (None → 1/√D); window_left, window_right (−1 unbounded);
alignment ``"bottom_right"`` | ``"top_left"``; dq_strategy (None: the interpreter's ``"atomic"``, the GPU
target's choice on CUDA); target (a GPU target name, CUDA only); score_mod, mask_mod: mod-language
text (``""`` none); param_decls: JSON ``{name: {"shape": [...], "dtype": "fp32"|"int32"}}`` in the order
of params (``ParamDecl.to_dict``); params: the parameter tensors.

A repeated eager call without mods takes a plan of :mod:`tilegen.torch.plans` instead and runs the
plan's module through :class:`FastAttention` rather than the ops' dispatcher.
"""

from __future__ import annotations

import numpy as np
import torch

from tilegen.torch import device, mod_args, plans
from tilegen.torch.call import Call, check_tensors

NO_SECOND_DERIVATIVE = "tilegen attention has no second derivative (no double backward): its backward (tilegen::attention_bwd) is not differentiable"


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
        q, k, v: as for :func:`tilegen.torch.flash_attn_func` (``layout="BSND"``) or
            :func:`tilegen.torch.scaled_dot_product_attention` (``"BNSD"``); one dtype (float16,
            bfloat16, float32) and device; any strides.
        layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod,
            param_decls, params: see the module's docstring.

    Returns:
        out: contiguous, q's physical shape with v's head dim, q's dtype; lse: contiguous float32
        [B, Hq, Sq], natural-log logsumexp of each row's visible (modified) scores (-inf for a row
        without one).

    Raises:
        SpecError (ValueError): a bad shape, dtype, device, window, scale, mod or parameter, named.
        NotImplementedError: NPU tensors (the Ascend C operator is not loaded here).
    """
    args = (layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls)
    if q.device.type == "cuda" and not (score_mod or mask_mod or param_decls or params):
        out, lse = plans.op_plan(q, k, v, args).module.forward(q, k, v)
        return out.contiguous(), lse.contiguous()
    call = Call.from_op(q, k, v, *args)
    decls, params = mod_args.op_params(call, q, params)
    spec = call.spec(decls)
    if call.device == "cuda":
        from tilegen.backends import triton as triton_backend

        module = triton_backend.load(spec, call.target, call.dq_strategy)
        if decls:
            out, lse = module.forward(q, k, v, params=mod_args.kernel_params(decls, params))
        else:
            out, lse = module.forward(q, k, v)
        return out.contiguous(), lse.contiguous()
    if call.device == "cpu":
        from tilegen import api

        o, lse = api.attention(*(device.to_numpy(x) for x in (q, k, v)), **call.api_kwargs(), **mod_args.interp_mods(call, decls, params))
        return device.from_numpy(o, q), torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32))
    device.refuse_npu()


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls, params):
    check_tensors(q, k, v, layout=layout, scale=scale, scale_name="scale")
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
    args = (layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls)
    if q.device.type == "cuda" and not (score_mod or mask_mod or param_decls or params):
        module = plans.op_plan(q, k, v, args).module
        return (*(g.contiguous() for g in module.backward(q, k, v, out, lse, dout)), [])
    call = Call.from_op(q, k, v, *args)
    decls, params = mod_args.op_params(call, q, params)
    spec = call.spec(decls)
    if call.device == "cuda":
        from tilegen.backends import triton as triton_backend

        module = triton_backend.load(spec, call.target, call.dq_strategy)
        if decls:
            grads = module.backward(q, k, v, out, lse, dout, params=mod_args.kernel_params(decls, params))
        else:
            grads = module.backward(q, k, v, out, lse, dout)
        dparams = grads[3] if len(grads) > 3 else {}
        dx = tuple(g.contiguous() for g in grads[:3])
    elif call.device == "cpu":
        from tilegen import api

        grads = api.attention_backward(
            *(device.to_numpy(x) for x in (q, k, v, out)),
            lse.detach().float().contiguous().numpy(),
            device.to_numpy(dout),
            dq_strategy=call.dq_strategy or "atomic",
            **call.api_kwargs(),
            **mod_args.interp_mods(call, decls, params),
        )
        dparams = {n: torch.from_numpy(np.ascontiguousarray(g)) for n, g in (grads[3] if len(grads) > 3 else {}).items()}
        dx = tuple(device.from_numpy(g, x) for g, x in zip(grads[:3], (q, k, v)))
    else:
        device.refuse_npu()
    dp = []
    for d, t in zip(decls, params):
        if t.is_floating_point():
            g = dparams.get(d.name)
            dp.append(torch.zeros_like(t) if g is None else g.to(device=t.device, dtype=t.dtype).reshape(t.shape).contiguous())
    return (*dx, dp)


@attention_bwd.register_fake
def _attention_bwd_fake(q, k, v, out, lse, dout, layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls, params):
    dp = [p.new_empty(p.shape) for p in params if p.is_floating_point()]
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dp


_SCALARS = 10  # the ops' scalar arguments between the tensors and params (Call.op_args)


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
    return (dq, dk, dv, *(None for _ in range(_SCALARS)), dparams)


attention_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


def _bwd_setup_context(ctx, inputs, output):
    pass


def _bwd_backward(ctx, ddq, ddk, ddv, ddparams):
    raise NotImplementedError(NO_SECOND_DERIVATIVE)


attention_bwd.register_autograd(_bwd_backward, setup_context=_bwd_setup_context)


# --- the eager fast path -------------------------------------------------------------------------------


def fast_out(q, k, v, plan: plans.Plan) -> torch.Tensor:
    """out of a fast-path call: through :class:`FastAttention` when a gradient is wanted, else the
    module's forward alone (no autograd node)."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return FastAttention.apply(q, k, v, plan)[0]
    return plan.module.forward(q, k, v, trusted=True)[0].contiguous()


class FastAttention(torch.autograd.Function):
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


def run(q, k, v, call: Call, params: list, fast_key=None) -> torch.Tensor:
    """out of a checked dense ``call`` on q, k, v (``params``: its mods' parameter tensors):
    :func:`attention_fwd`, or, with ``fast_key`` (:func:`tilegen.torch.plans.fast_key`, a call without
    mods), the call's plan through :class:`FastAttention`, kept under ``fast_key`` so that later calls
    with that key skip the checks."""
    if fast_key is not None and not call.has_mods:
        plan = plans.op_plan(q, k, v, call.op_args(), call)
        plans.store(fast_key, plan)
        return fast_out(q, k, v, plan)
    return attention_fwd(q, k, v, *call.op_args(), params)[0]
