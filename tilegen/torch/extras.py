"""Softcap, ALiBi, attention sinks and packed variable-length batches: FlashAttention's ``softcap`` /
``alibi_slopes`` with learnable ``sinks`` (gpt-oss), and ``flash_attn_varlen_func``, through a
``torch.autograd.Function`` (not a custom op: the varlen offsets are read on the host).

CPU tensors run in the interpreter (:func:`tilegen.api.attention` / ``attention_backward``,
``attention_varlen`` / ``attention_varlen_backward``). CUDA tensors run the Triton module of the spec
through its ``forward(q, k, v, *, sinks, params, blocks)`` / ``backward(q, k, v, out, lse, dout, *,
sinks, params, blocks)`` interface: the parameter arrays by name, the sinks (the module's backward
returns dsinks = −Σ_rows exp(σ_h − L)·D among its dparams) and, for a packed batch, the block classes
computed on the host from the offsets (:func:`tilegen.api.varlen_block_classes`, cached per plan) in
place of the classify kernel. The guarded kernels never write the tokens outside every sequence; the
module allocates O, dQ, dK, dV as 0 and L as −inf, the values those rows keep.

The plan of a call on the Triton path is kept in the plan table (:mod:`tilegen.torch.plans`, LRU)
under a key of everything it depends on (:func:`plan_key`): the tensors' dtype, device, shape and
strides (q, k, v, and the sinks' and slopes' when given) and the :class:`~tilegen.torch.call.Call`
(scale, window, softcap, strategy, target and, for a packed batch, the offsets' values and
max_seqlen_q/k). The target file's size and modification time are compared on a hit. A hit builds and
checks no spec, loads no module and copies no offset-derived array to the device: the sinks and
slopes, whose values change between calls (they are learnt), are the only per-call inputs, read on the
device (no host synchronisation). The backward takes the forward's plan from ``ctx``. The spec does not
hold the offsets, so a packed batch's plan is also kept under its key without the offsets and
max_seqlen_q/k (``packing=False``): a new packing of known shapes and arguments (training: one per
step) builds no spec and loads no module; only its offsets are checked and their arrays and block
tables built.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from tilegen.core import validate
from tilegen.core.errors import UnsupportedArgument
from tilegen.torch import device, plans
from tilegen.torch.call import TENSORS, Call, check_tensors


def dense_call(q, k, v, *, scale, window: tuple[int, int], softcap: float | None, alibi_slopes, sinks, dq_strategy, target: str | None) -> Call:
    """The checked call of ``flash_attn_func`` with sinks (BSND); ``window`` and ``softcap`` checked
    already (:func:`tilegen.core.validate.window`, ``softcap``).

    Raises:
        SpecError (ValueError): a bad tensor, scale, sinks or slopes, named.
    """
    shapes = check_tensors(q, k, v, layout="BSND", scale=scale)
    hq, b = shapes[0][1], shapes[0][0]
    validate.sinks(sinks, hq, kind=TENSORS, device=q.device)
    validate.alibi_slopes(alibi_slopes, hq, b, kind=TENSORS, device=q.device)
    return Call.of(q, shapes, layout="BSND", scale=scale, window=window, softcap=softcap, alibi=0 if alibi_slopes is None else alibi_slopes.dim(),
                   sinks=sinks is not None, dq_strategy=dq_strategy, target=target)


def varlen_call(q, k, v, cu_seqlens_q: np.ndarray, cu_seqlens_k: np.ndarray, max_seqlen_q, max_seqlen_k, *, scale, window: tuple[int, int],
                softcap: float | None, alibi_slopes, sinks, dq_strategy, target: str | None) -> Call:
    """The checked call of ``flash_attn_varlen_func`` (TND) on the host copies of its offsets (int32
    NumPy arrays, their type checked by the caller; their values are checked on the CPU path at once,
    on the Triton path by a plan's miss); ``window`` and ``softcap`` checked already.

    Raises:
        SpecError (ValueError): a bad tensor, scale, max_seqlen, sinks or slopes, named.
    """
    shapes = check_tensors(q, k, v, layout=validate.TND, scale=scale)
    hq = shapes[0][1]
    validate.sinks(sinks, hq, kind=TENSORS, device=q.device)
    validate.alibi_slopes(alibi_slopes, hq, len(cu_seqlens_q) - 1, rows_are="sequence", kind=TENSORS, device=q.device)
    return Call.of(q, shapes, layout=validate.TND, scale=scale, window=window, softcap=softcap, alibi=0 if alibi_slopes is None else alibi_slopes.dim(),
                   sinks=sinks is not None, cu_seqlens_q=tuple(cu_seqlens_q.tolist()), cu_seqlens_k=tuple(cu_seqlens_k.tolist()),
                   max_seqlen_q=validate.max_seqlen("max_seqlen_q", max_seqlen_q), max_seqlen_k=validate.max_seqlen("max_seqlen_k", max_seqlen_k),
                   dq_strategy=dq_strategy, target=target)


def check_values(call: Call, sinks, alibi_slopes) -> None:
    """Every check of a packed call's offsets and of the sinks' values, at once (the CPU path, before
    anything runs; the Triton path makes them on a plan's miss, before any kernel).

    Raises:
        SpecError (ValueError): bad offsets, max_seqlen or sinks values, named.
    """
    from tilegen import api

    cu_q, cu_k = call.offsets()
    api.varlen_spec((call.seq_q, call.heads_q, call.head_dim_qk), (call.seq_k, call.heads_kv, call.head_dim_qk), (call.seq_k, call.heads_kv, call.head_dim_v),
                    call.dtype, cu_q, cu_k, max_seqlen_q=call.max_seqlen_q, max_seqlen_k=call.max_seqlen_k, softmax_scale=call.scale,
                    window=call.window, softcap=call.softcap, alibi_slopes=device.float32_or_none(alibi_slopes), sinks=device.float32_or_none(sinks))


@dataclass(frozen=True, eq=False)
class ExtrasPlan:
    """What a call on the Triton path needs beyond its tensors.

    Attributes:
        module: the loaded Triton module, or None for a packed batch without a query or key token.
        stamp: (path, mtime_ns, size) of the target file (see :func:`tilegen.torch.plans.fresh`).
        params: the parameter arrays fixed by the key, on the device (varlen: int32 q_seq, k_seq,
            q_off); None when the spec has no mod (no ``params=`` argument).
        inside: varlen: bool [total_q] on the device, the query tokens inside a sequence.
        seq: varlen with [num_seqs, Hq] slopes: int64 [total_q], each token's sequence (0 outside).
        call: the call it was built for (what :func:`_varlen_blocks` reads).
        blocks: varlen: kind ("fwd"/"bwd") -> tile lists, filled on first use (:func:`_plan_blocks`).
    """

    module: Any
    stamp: tuple
    params: Any
    inside: Any
    seq: Any
    call: Call
    blocks: dict


def plan_key(q, k, v, sinks, alibi, call: Call, packing: bool = True):
    """The plan key of a call, or None where no plan is kept (see :func:`tilegen.torch.plans.eager_plain`);
    ``packing=False``: without the offsets and max_seqlen_q/k (what the spec and module depend on)."""
    if not plans.eager_plain(q, k, v, sinks, alibi):
        return None
    if call.packed and not packing:
        call = replace(call, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None)
    return plans.hashable(("extras", plans.meta(q), plans.meta(k), plans.meta(v), None if sinks is None else plans.meta(sinks),
                           None if alibi is None else plans.meta(alibi), call))


def _varlen_blocks(module, kind: str, call: Call, device) -> dict:
    """The ``blocks=`` argument of the module's ``kind`` ("fwd"/"bwd") program for a varlen call: the
    block classes of the packed batch in closed form on the host (:func:`tilegen.api.varlen_block_classes`
    for the program's ``TILE_SIZES``) and their tile lists, on ``device``. Computed once per plan
    (:func:`_plan_blocks`), so a training loop over one packing computes them once."""
    from tilegen import api

    br, bc = module.TILE_SIZES[kind]
    cu_q, cu_k = (np.asarray(c, dtype=np.int64) for c in (call.cu_seqlens_q, call.cu_seqlens_k))
    table = api.varlen_block_classes(cu_q, cu_k, call.seq_q, call.seq_k, br, bc, call.window)
    return module.tile_lists(kind, torch.from_numpy(table).view(module.BLOCK_SHAPES[kind]).to(device))


def extras_plan(q, k, v, sinks, alibi, call: Call) -> ExtrasPlan:
    """The plan of a call on the Triton path: a hit of the plan table, else built (the target checked,
    the spec built and checked, errors naming the argument, and the module loaded, unless a plan of the
    same shapes and arguments with other offsets has them; the offsets' arrays copied to the device
    once) and kept.

    Raises:
        SpecError (ValueError): a bad argument (on a miss; a hit had the same key, hence passed).
    """
    from tilegen import api
    from tilegen.backends import triton as triton_backend
    from tilegen.core.mods import mods_from_api

    key = plan_key(q, k, v, sinks, alibi, call)
    plan = plans.lookup(key)
    if plan is not None:
        return plan
    device.check_gpu_target(call.target)
    alibi_np, sinks_np = device.float32_or_none(alibi), device.float32_or_none(sinks)
    dev = q.device
    inside = seq = None
    module = known = shapes_key = None
    if call.packed:
        cu_q, cu_k = call.offsets()
        shapes_key = None if key is None else plan_key(q, k, v, sinks, alibi, call, packing=False) + ("module",)
        known = plans.lookup(shapes_key)
        if known is not None:
            # a new packing of known shapes and arguments: the spec does not hold the offsets, so its
            # module is the known plan's; the offsets are checked and their arrays built here
            lay = api.varlen_layout(cu_q, cu_k, call.seq_q, call.seq_k, call.max_seqlen_q, call.max_seqlen_k)
            validate.sinks(sinks_np, call.heads_q)
            arrays = api.varlen_mods(lay, call.window, call.softcap, alibi_np, call.heads_q)[3]
            spec, module = None, known.module
        else:
            spec, arrays, lay, _ = api.varlen_spec(q.shape, k.shape, v.shape, call.dtype, cu_q, cu_k, max_seqlen_q=call.max_seqlen_q,
                                                   max_seqlen_k=call.max_seqlen_k, softmax_scale=call.scale, window=call.window,
                                                   softcap=call.softcap, alibi_slopes=alibi_np, sinks=sinks_np)
        params = {n: torch.from_numpy(np.ascontiguousarray(a)).to(dev) for n, a in arrays.items() if n != "alibi_slopes"}
        inside = torch.from_numpy(lay.q_inside).to(dev)
        if alibi is not None and alibi.dim() == 2:
            seq = torch.from_numpy(np.maximum(lay.q_seq, 0).astype(np.int64)).to(dev)
    else:
        score = api.flash_score_mod(None, call.softcap, alibi_np)
        score_text, _, decls, _, _ = mods_from_api(score, None)
        spec = call.spec(()).replace(score_mod=score_text, params=decls, sinks=call.sinks)
        params = {}
    if known is not None:
        with_params = known.params is not None
    else:
        module = None if spec is None else triton_backend.load(spec, call.target, call.dq_strategy)
        with_params = spec is not None and spec.mods is not None
    plan = ExtrasPlan(module, plans.stamp(call.target), params if with_params else None, inside, seq, call, {})
    if key is not None:
        plans.store(key, plan)
        if call.packed and known is None and module is not None:
            plans.store(shapes_key, plan)  # read for its module (and whether it takes params) by later packings
    return plan


def _plan_blocks(plan: ExtrasPlan, kind: str) -> dict:
    """The plan's tile lists of ``kind`` (computed on first use)."""
    hit = plan.blocks.get(kind)
    if hit is None:
        hit = plan.blocks[kind] = _varlen_blocks(plan.module, kind, plan.call, plan.inside.device)
    return hit


class ExtrasAttention(torch.autograd.Function):
    """(out, lse) of a call with sinks, softcap or ALiBi, or of a packed batch (``call``: :func:`dense_call`,
    :func:`varlen_call`); gradients flow to q, k, v, the sinks and the slopes; lse takes none."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, alibi, call: Call):
        out, lse, plan, kw = _forward(q, k, v, sinks, alibi, call)
        ctx.save_for_backward(q, k, v, out, lse, sinks, alibi)
        ctx.call, ctx.plan, ctx.kw = call, plan, kw
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # lse takes no gradient: no zero-filled dlse per call
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, sinks, alibi = ctx.saved_tensors
        call = ctx.call
        dout = torch.zeros_like(out) if dout is None else dout.contiguous()
        if not device.triton_path(q):
            from tilegen import api

            kw = dict(call.api_kwargs(), alibi_slopes=device.float32_or_none(alibi), sinks=device.float32_or_none(sinks),
                      dq_strategy=call.dq_strategy or "atomic")
            grads_in = (*(device.to_numpy(x) for x in (q, k, v, out)), lse.detach().float().numpy(), device.to_numpy(dout))
            if call.packed:
                res = api.attention_varlen_backward(*grads_in, *call.offsets(), **kw)
                extras = list(res[3:])
                dsinks = torch.from_numpy(extras.pop(0)) if sinks is not None else None
                dalibi = torch.from_numpy(extras.pop(0)) if alibi is not None else None
            else:
                res = api.attention_backward(*grads_in, **kw)
                dparams = res[3] if len(res) > 3 else {}
                dsinks = torch.from_numpy(dparams["sinks"]) if sinks is not None else None
                dalibi = torch.from_numpy(dparams["alibi_slopes"]) if alibi is not None else None
            dq, dk, dv = (device.from_numpy(g, x) for g, x in zip(res[:3], (q, k, v)))
        elif ctx.plan.module is None:  # a packed batch without a query or key token: nothing ran
            dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
            dsinks = None if sinks is None else torch.zeros_like(sinks)
            dalibi = None if alibi is None else torch.zeros_like(alibi)
        else:
            lift = (lambda x: x.unsqueeze(0)) if call.packed else (lambda x: x)
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
                dalibi = _fold_alibi(dparams["alibi_slopes"], alibi, call)
        if dsinks is not None:
            dsinks = dsinks.to(sinks.device, sinks.dtype)
        if dalibi is not None:
            dalibi = dalibi.to(alibi.device, alibi.dtype)
        return dq, dk, dv, dsinks, dalibi, None


def _fold_alibi(g, alibi, call: Call):
    """The slopes' gradient in the slopes' shape (varlen [num_seqs, Hq] slopes are read per token)."""
    if call.packed and alibi.dim() == 2:
        cu = call.cu_seqlens_q
        return torch.stack([g[cu[s]:cu[s + 1]].double().sum(0) for s in range(len(cu) - 1)]).float()
    return g


def _forward(q, k, v, sinks, alibi, call: Call):
    """(out, lse, :class:`ExtrasPlan` or None, the module's keyword arguments or None).

    On the Triton path a packed batch runs as one batch (B = 1) whose guarded kernels never write the
    tokens outside every sequence; the module allocates out = 0 and lse = −inf, which those tokens
    keep (no masking after the kernels). The plan comes from the plan table (:func:`extras_plan`);
    the sinks and slopes are passed as they are now, on the device."""
    from tilegen import api

    if call.device == "npu":
        device.refuse_npu()
    if not device.triton_path(q):
        device.check_gpu_target(call.target)
        kw = dict(call.api_kwargs(), alibi_slopes=device.float32_or_none(alibi), sinks=device.float32_or_none(sinks))
        qkv = (device.to_numpy(x) for x in (q, k, v))
        if call.packed:
            o, lse = api.attention_varlen(*qkv, *call.offsets(), **kw)
        else:
            o, lse = api.attention(*qkv, **kw)
        return device.from_numpy(o, q), torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32)), None, None
    plan = extras_plan(q, k, v, sinks, alibi, call)
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
    if call.packed:
        kw["blocks"] = _plan_blocks(plan, "fwd")
        out, lse = plan.module.forward(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), **kw)
        out, lse = out[0], lse[0]
    else:
        out, lse = plan.module.forward(q, k, v, **kw)
    return out.contiguous(), lse.contiguous(), plan, kw
