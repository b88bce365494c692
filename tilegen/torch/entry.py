"""The entry points with FlashAttention's and SDPA's calling conventions: :func:`flash_attn_func`
(BSND, bottom-right aligned masks, FlashAttention >= 2.1), :func:`scaled_dot_product_attention`
(BNSD; ``is_causal`` top-left aligned, as in torch) and :func:`flash_attn_varlen_func` (packed TND
batches).

Each checks its arguments (:mod:`tilegen.core.validate`, :func:`tilegen.torch.call.check_tensors`) and
builds one :class:`~tilegen.torch.call.Call`, which goes down one of three paths: a hit of the plan
table (:mod:`tilegen.torch.plans`; repeated eager calls without mods, which skip even the checks), the
custom ops (:mod:`tilegen.torch.ops`; mods, ``torch.compile``, other devices), or the autograd function
of sinks, softcap/ALiBi with sinks and packed batches (:mod:`tilegen.torch.extras`).
"""

from __future__ import annotations

from tilegen.core import validate
from tilegen.core.errors import SpecError, UnsupportedArgument
from tilegen.torch import device, extras, mod_args, ops, plans
from tilegen.torch.call import TENSORS, Call, check_tensors


def _run(q, k, v, shapes, *, layout: str, scale, window: tuple[int, int], alignment: str, dq_strategy: str | None, target: str | None, score_mod=None,
         mask_mod=None, bound=None, fast_key=None):
    """out of a dense call whose tensors are checked (``shapes``: their logical shapes): the mods' texts
    and tensors (the mask mod's window and-ed with ``window``; ``bound`` gives parameter tensors by name
    in place of the mods' own arrays), the :class:`Call`, then :func:`tilegen.torch.ops.run`."""
    score_text, mask_text, decls, params, mod_window = mod_args.of_call(score_mod, mask_mod, q, bound or {})
    if mod_window != (-1, -1):
        from tilegen.core.mods import intersect_windows

        window = intersect_windows(window, mod_window)
    call = Call.of(q, shapes, layout=layout, scale=scale, window=window, alignment=alignment, score_mod=score_text, mask_mod=mask_text,
                   param_decls=decls, dq_strategy=dq_strategy, target=target)
    return ops.run(q, k, v, call, params, fast_key)


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
    target: str | None = None,
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
        target: the GPU target file whose schedule CUDA tensors use; None (the default): the target of
            their CUDA device (:func:`tilegen.torch.device.gpu_target`: ``H100`` → ``h100``, ``H200`` → ``h200``,
            another GPU → the nearest target, with one warning).

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
        fast_key = plans.fast_key("flash", q, k, v, softmax_scale, causal, window_size, deterministic, target)
        plan = plans.lookup(fast_key)
        if plan is not None:
            return ops.fast_out(q, k, v, plan)
    validate.no_dropout(dropout_p)
    validate.no_probabilities(return_attn_probs)
    validate.flag("deterministic", deterministic)
    cap = validate.softcap(softcap)
    dq_strategy = "separate" if deterministic else None
    if sinks is not None:
        if score_mod is not None or mask_mod is not None:
            raise UnsupportedArgument("sinks", "a tensor", "None when score_mod or mask_mod is given (sinks run with softcap, alibi_slopes, causal and window_size)")
        window = validate.window(causal, window_size, window_name="window_size")
        call = extras.dense_call(q, k, v, scale=softmax_scale, window=window, softcap=cap, alibi_slopes=alibi_slopes, sinks=sinks,
                                 dq_strategy=dq_strategy, target=target)
        return extras.ExtrasAttention.apply(q, k, v, sinks, alibi_slopes, call)[0]
    window = validate.window(causal, window_size, window_name="window_size")
    shapes = check_tensors(q, k, v, layout="BSND", scale=softmax_scale)
    validate.alibi_slopes(alibi_slopes, shapes[0][1], shapes[0][0], kind=TENSORS, device=q.device)
    if cap is not None or alibi_slopes is not None:
        validate.score_mod_alone(score_mod, cap, alibi_slopes, error=UnsupportedArgument)
        score_mod = mod_args.flash_mod(cap or 0.0, 0 if alibi_slopes is None else alibi_slopes.dim())
    bound = {} if alibi_slopes is None else {"alibi_slopes": alibi_slopes}
    return _run(q, k, v, shapes, layout="BSND", scale=softmax_scale, window=window, alignment="bottom_right", dq_strategy=dq_strategy,
                target=target, score_mod=score_mod, mask_mod=mask_mod, bound=bound, fast_key=fast_key)


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
    target: str | None = None,
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
        target: the GPU target file whose schedule CUDA tensors use; None (the default): the target of
            their CUDA device (:func:`tilegen.torch.device.gpu_target`: ``H100`` → ``h100``, ``H200`` → ``h200``,
            another GPU → the nearest target, with one warning).

    Returns:
        [B, Hq, Sq, Dv] in query's dtype; rows with no visible key are 0.

    Raises:
        UnsupportedArgument (NotImplementedError): attn_mask or dropout.
        SpecError (ValueError): a bad shape, dtype, device or scale, or GQA without enable_gqa, named;
            ModError (a SpecError): an invalid mod or parameter, naming the construct.
    """
    fast_key = None
    if attn_mask is None and score_mod is None and mask_mod is None and type(dropout_p) in (int, float) and not dropout_p:
        fast_key = plans.fast_key("sdpa", query, key, value, is_causal, scale, enable_gqa, target)
        plan = plans.lookup(fast_key)
        if plan is not None:
            return ops.fast_out(query, key, value, plan)
    if attn_mask is not None:
        raise UnsupportedArgument("attn_mask", type(attn_mask).__name__, "None (is_causal or mask_mod= cover the masks)")
    validate.no_dropout(dropout_p)
    validate.flag("enable_gqa", enable_gqa)
    window = validate.window(is_causal, (-1, -1), causal_name="is_causal")
    shapes = check_tensors(query, key, value, layout="BNSD", scale=scale, scale_name="scale")
    lq, lk, _ = shapes
    if lk[1] != lq[1] and not enable_gqa:
        raise SpecError("enable_gqa", enable_gqa, f"True when key/value have fewer heads ({lk[1]}) than query ({lq[1]})")
    alignment = "top_left"
    if mask_mod is not None or score_mod is not None:
        if lq[2] != lk[2] and is_causal:
            raise SpecError("is_causal", True, f"False when mods are given and Sq {lq[2]} != Sk {lk[2]} (the mods are bottom-right aligned; use tilegen.mods.causal())")
        alignment = "bottom_right"
    return _run(query, key, value, shapes, layout="BNSD", scale=scale, window=window, alignment=alignment, dq_strategy=None, target=target,
                score_mod=score_mod, mask_mod=mask_mod, fast_key=fast_key)


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
    target: str | None = None,
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
        target: the GPU target file whose schedule CUDA tensors use; None (the default): the target of
            their CUDA device (:func:`tilegen.torch.device.gpu_target`: ``H100`` → ``h100``, ``H200`` → ``h200``,
            another GPU → the nearest target, with one warning).

    Returns:
        out [total_q, Hq, Dv] in q's dtype.

    On CUDA the spec, the module, the offsets' arrays on the device and the block tables are kept per
    plan key (the offsets, max_seqlen_q/k, the tensors' dtype, device, shape and strides, sinks and
    slopes present with theirs, scale, window, softcap, deterministic, target; the plan table, :mod:`tilegen.torch.plans`, LRU): a
    repeated call builds and checks none of them again and reads no tensor on the host but the
    offsets (the sinks' finiteness is checked on the first call of a key only). New offsets with
    known shapes and arguments reuse the spec and module; their arrays and block tables are built.

    Raises:
        UnsupportedArgument (NotImplementedError): dropout, returned probabilities, a paged KV cache.
        SpecError (ValueError): a bad tensor, offsets, window, scale, sinks or slopes, named.
    """
    validate.no_dropout(dropout_p)
    validate.no_probabilities(return_attn_probs)
    if block_table is not None:
        raise UnsupportedArgument("block_table", type(block_table).__name__, "None (no paged KV cache)")
    validate.flag("deterministic", deterministic)
    window = validate.window(causal, window_size, window_name="window_size")
    validate.qkv(q, k, v, kind=TENSORS, layout=validate.TND)
    cu = []
    for name, c, total in (("cu_seqlens_q", cu_seqlens_q, q.shape[0]), ("cu_seqlens_k", cu_seqlens_k, k.shape[0])):
        validate.offsets_array(name, c, total, kind=TENSORS)
        cu.append(c.detach().cpu().numpy())
    cap = validate.softcap(softcap)
    call = extras.varlen_call(q, k, v, cu[0], cu[1], max_seqlen_q, max_seqlen_k, scale=softmax_scale, window=window, softcap=cap,
                              alibi_slopes=alibi_slopes, sinks=sinks, dq_strategy="separate" if deterministic else None, target=target)
    # every check of the offsets and values once, before anything runs (on the Triton path the plan's
    # miss makes them, before any kernel; a hit has the key of a call that passed them)
    if not device.triton_path(q):
        extras.check_values(call, sinks, alibi_slopes)
    return extras.ExtrasAttention.apply(q, k, v, sinks, alibi_slopes, call)[0]
