"""tilegen as an attention implementation of HuggingFace transformers (``attn_implementation="tilegen"``).

Usage::

    import tilegen.hf_attention  # registers "tilegen" (idempotent; tilegen.hf_attention.register() again is a no-op)
    model = AutoModel.from_pretrained(path, attn_implementation="tilegen")  # or model.set_attn_implementation("tilegen")

Importing this module registers two things under the name ``"tilegen"`` (transformers 5.24.0 is the
reference; paths are inside its ``src/transformers``):

- :func:`attention_forward` in ``AttentionInterface`` (``modeling_utils.py``), the function every
  attention layer calls as ``fn(module, query, key, value, attention_mask, dropout=, scaling=,
  sliding_window=, softcap=, **kwargs)`` with BNSD query [B, Hq, Sq, D], key [B, Hkv, Sk, D], value
  [B, Hkv, Sk, Dv]; it returns ``(out [B, Sq, Hq, Dv] contiguous, None)`` as
  ``integrations/sdpa_attention.py`` does.
- a mask function in ``AttentionMaskInterface`` (``masking_utils.py``): transformers' ``sdpa_mask``
  (boolean, True = visible) with ``allow_is_causal_skip=False``, so a causal layer always receives its
  materialised mask (padding included). Without this registration transformers passes no mask at all
  to an implementation it does not know (``_preprocess_mask_arguments``), and padding would be lost.

Gemma 2's ``softcap`` (``attn_logit_softcapping``) is passed on as ``flash_attn_func``'s ``softcap``,
the :func:`tilegen.mods.softcap` score mod. gpt-oss's learned sinks (``GptOssAttention`` passes its
``self.sinks`` [Hq] as ``s_aux``, ``models/gpt_oss/modeling_gpt_oss.py`` line 322) are passed on as
``flash_attn_func``'s ``sinks``, so they get their gradient; rows that see no key give 0, as gpt-oss's
eager attention gives them (the sink takes the whole softmax there). Sinks run on CPU tensors (the
interpreter) and on CUDA tensors (the generated Triton module).

The kernels run through :func:`tilegen.torch.flash_attn_func`, so the device picks the backend: the
NumPy interpreter on CPU, the generated Triton module on CUDA, the Ascend C operator on NPU (which
:mod:`tilegen.torch` refuses, naming what is missing, until that op is wired there).

The mask. tilegen's kernels take no mask tensor: a spec has a window (left, right) aligned
bottom-right (key j visible to query i iff i + Sk − Sq − left ≤ j ≤ i + Sk − Sq + right, −1 unbounded).
The 4-D mask (boolean, or additive with 0 for visible and ≤ finfo.min/2 or −inf for hidden;
[B or 1, 1 or H, Sq, ≥ Sk]) is therefore decomposed per batch row b:

1. the keys visible to at least one query must form one contiguous range [k0, k1) (key padding, left
   or right), and the queries that see at least one key a range [q0, q1): the row runs on
   Q[b, :, q0:q1], K[b, :, k0:k1], V[b, :, k0:k1], and the queries outside [q0, q1) give 0;
2. on that block the mask must equal a window (left, right) with left, right ≥ 0 or −1; the tightest
   pair is read off the visible entries and checked entry by entry against the block;
3. rows with the same (q0, q1, k0, k1, left, right) run as one batch; a row with no visible key gives 0.

This covers causal and bidirectional masks, with left or right padding, sliding windows, and KV-cache
offsets. Query rows with no visible key give 0 (DESIGN §3); eager attention gives an average of the
hidden values there, a value no model uses (those are padding positions, never visible as keys).
Masks that are not of that form (packed sequences, chunked attention, per-head or biased masks) are
refused. With ``attention_mask=None`` the layer is causal when ``is_causal`` (the keyword, else
``module.is_causal``) is true and Sq > 1 (as ``sdpa_attention_forward``); then Sq must equal Sk.

Refused with :class:`tilegen.torch.UnsupportedArgument` (a ``NotImplementedError`` naming the argument,
its value and what is accepted): ``dropout`` > 0 (a model in training mode with attention dropout;
``model.eval()`` still gives gradients), ``position_bias`` (T5-style biases), ``head_mask``,
``output_attentions=True`` (the probabilities are never formed), and masks outside the form above.
"""

from __future__ import annotations

from typing import Any

import torch

from tilegen.torch import UnsupportedArgument, flash_attn_func

__all__ = ["NAME", "attention_forward", "attention_mask", "register", "window_of_mask"]

NAME = "tilegen"

_REFUSED_KWARGS = {
    "position_bias": "None (no additive score bias)",
    "head_mask": "None (no per-head output mask)",
}


def _visible(mask: torch.Tensor, sk: int) -> torch.Tensor:
    """Boolean visibility [B', H', Sq, Sk] of a 4-D transformers mask (True = the key is attended)."""
    if mask.dim() != 4:
        raise UnsupportedArgument("attention_mask.shape", tuple(mask.shape), "a 4-D mask [batch, 1 or heads, seq_q, seq_k]")
    if mask.shape[-1] < sk:
        raise UnsupportedArgument("attention_mask.shape", tuple(mask.shape), f"a last dimension >= the key length {sk}")
    mask = mask[..., :sk]
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        raise UnsupportedArgument("attention_mask.dtype", str(mask.dtype), "torch.bool or a floating additive mask")
    visible = mask == 0
    hidden = mask <= torch.finfo(mask.dtype).min / 2
    if not bool((visible | hidden).all()):
        raise UnsupportedArgument(
            "attention_mask", "an additive mask with values other than 0 and -inf", "0 (visible) or <= finfo.min/2 (hidden): no score biases"
        )
    return visible


def _window_mask(sq: int, sk: int, left: int, right: int, device) -> torch.Tensor:
    """[Sq, Sk] visibility of tilegen's bottom-right window (left, right), −1 = unbounded."""
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    m = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        m &= j >= i - left
    if right >= 0:
        m &= j <= i + right
    return m


def window_of_mask(visible: torch.Tensor) -> tuple[int, int, int, int, int, int] | None:
    """(q0, q1, k0, k1, left, right) with ``visible`` = window (left, right) on queries [q0, q1) × keys [k0, k1).

    Args:
        visible: [Sq, Sk] boolean, True = key j visible to query i.

    Returns:
        None if no key is visible to any query; else q0, q1: the queries that see at least one key
        (outside that range no key is visible), k0, k1: the keys visible to at least one query,
        left, right: tilegen's bottom-right window on that (q1 − q0) × (k1 − k0) block (−1 unbounded),
        the loosest pair that reproduces ``visible`` exactly.

    Raises:
        UnsupportedArgument: the visible keys (or queries) are not contiguous, or the pattern is no such window.
    """
    def span(used: torch.Tensor, what: str) -> tuple[int, int]:
        idx = torch.nonzero(used).flatten()
        a, b = int(idx[0]), int(idx[-1]) + 1
        if not bool(used[a:b].all()):
            raise UnsupportedArgument(
                "attention_mask", f"visible {what} in separate ranges (packed sequences or a gapped mask)", f"one contiguous range of {what} per batch row"
            )
        return a, b

    cols = visible.any(0)
    if not bool(cols.any()):
        return None
    k0, k1 = span(cols, "keys")
    q0, q1 = span(visible.any(1), "queries")
    sub = visible[q0:q1, k0:k1]
    sq, lk = q1 - q0, k1 - k0
    qi, kj = torch.nonzero(sub, as_tuple=True)
    rel = kj - qi - (lk - sq)  # key offset from the bottom-right diagonal
    left, right = -int(rel.min()), int(rel.max())
    if left < 0 or right < 0:
        raise UnsupportedArgument(
            "attention_mask", f"a band of offsets [{-left}, {right}] from the diagonal", "a window that contains the diagonal (left, right >= 0)"
        )
    if not torch.equal(_window_mask(sq, lk, left, right, sub.device), sub):
        raise UnsupportedArgument(
            "attention_mask", "a pattern that is not a causal/sliding/full window over its keys", "causal, sliding-window or full attention, with padding"
        )
    if torch.equal(_window_mask(sq, lk, -1, right, sub.device), sub):
        left = -1
    if torch.equal(_window_mask(sq, lk, left, -1, sub.device), sub):
        right = -1
    return q0, q1, k0, k1, left, right


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    target: str | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """One attention layer through tilegen, with transformers' ``AttentionInterface`` signature.

    Args:
        module: the attention layer (``is_causal`` is read when no mask is given).
        query: [B, Hq, Sq, D]; key: [B, Hkv, Sk, D]; value: [B, Hkv, Sk, Dv] (BNSD); Hkv divides Hq
            (GQA is passed to the kernels as is); float16, bfloat16 or float32.
        attention_mask: None, or a 4-D boolean/additive mask (see the module docstring for what is accepted).
        dropout: must be 0 (the model in eval mode).
        scaling: the score scale; None → 1/√D.
        sliding_window: informational; the mask carries the window (with no mask, a causal layer uses
            (sliding_window − 1, 0), as ``masking_utils.sliding_window_overlay``).
        softcap: None or 0 (none), or > 0: score′ = softcap·tanh(score/softcap) on the scaled score
            before the mask (Gemma 2's ``attn_logit_softcapping``, as its ``eager_attention_forward``),
            through :func:`tilegen.mods.softcap`.
        is_causal: overrides ``module.is_causal`` when the mask is None.
        target: the GPU target file for CUDA tensors; None: the target of their device
            (:func:`tilegen.torch.device.gpu_target`).
        s_aux (or sinks), keyword: None, or a float tensor [Hq], one learned sink logit per query head
            (gpt-oss; DESIGN §3), passed to ``flash_attn_func(sinks=)``.

    Returns:
        (out [B, Sq, Hq, Dv] in query's dtype, contiguous; None): no attention weights.

    Raises:
        UnsupportedArgument (NotImplementedError): an argument or mask tilegen cannot honour, named.
    """
    if dropout:
        raise UnsupportedArgument("dropout", dropout, "0.0 (tilegen's kernels have no dropout; call model.eval())")
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or softcap < 0):
        raise UnsupportedArgument("softcap", softcap, "None, 0 or a number > 0 (score′ = softcap·tanh(score/softcap))")
    for name, accepted in _REFUSED_KWARGS.items():
        if kwargs.get(name) is not None:
            raise UnsupportedArgument(name, type(kwargs[name]).__name__, accepted)
    if kwargs.get("output_attentions"):
        raise UnsupportedArgument("output_attentions", True, "False (the attention probabilities are never formed)")
    sinks = _sinks(kwargs, query)
    bsz, _, sq, _ = query.shape
    sk = key.shape[2]
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # BSND views

    def run(qq, kk, vv, left, right):
        return flash_attn_func(qq, kk, vv, softmax_scale=scaling, causal=False, window_size=(left, right), softcap=float(softcap or 0.0),
                               sinks=sinks, target=target)

    if attention_mask is None:
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
        if not (causal and sq > 1):
            return run(q, k, v, -1, -1).contiguous(), None
        if sq != sk:
            raise UnsupportedArgument(
                "attention_mask", f"None for a causal layer with seq_q {sq} != seq_k {sk}", "a 4-D mask (ambiguous alignment)"
            )
        left = sliding_window - 1 if sliding_window else -1
        return run(q, k, v, left, 0).contiguous(), None

    visible = _visible(attention_mask, sk)
    if visible.shape[1] > 1 and not bool((visible == visible[:, :1]).all()):
        raise UnsupportedArgument("attention_mask", "a mask that differs between heads", "one mask for all heads (shape [B, 1, Sq, Sk])")
    if visible.shape[0] not in (1, bsz) or visible.shape[2] != sq:
        raise UnsupportedArgument("attention_mask.shape", tuple(attention_mask.shape), f"[{bsz} or 1, 1 or heads, {sq}, >= {sk}]")
    visible = visible[:, 0].expand(bsz, sq, sk)
    groups: dict[tuple[int, ...] | None, list[int]] = {}
    for b in range(bsz):
        groups.setdefault(window_of_mask(visible[b]), []).append(b)
    if len(groups) == 1:
        (w,) = groups
        if w is not None and w[:4] == (0, sq, 0, sk):
            return run(q, k, v, w[4], w[5]).contiguous(), None
    parts, order = [], []
    for w, rows in groups.items():
        idx = torch.tensor(rows, device=query.device)
        zeros = lambda n: q.new_zeros(len(rows), n, q.shape[2], v.shape[3])  # noqa: E731
        if w is None:
            parts.append(zeros(sq))
        else:
            q0, q1, k0, k1, left, right = w
            o = run(q[idx, q0:q1], k[idx, k0:k1], v[idx, k0:k1], left, right)
            parts.append(torch.cat([zeros(q0), o, zeros(sq - q1)], dim=1) if (q0, q1) != (0, sq) else o)
        order += rows
    out = torch.cat(parts)
    inverse = torch.empty(bsz, dtype=torch.long, device=query.device)
    inverse[torch.tensor(order, device=query.device)] = torch.arange(bsz, device=query.device)
    return out[inverse].contiguous(), None


def _sinks(kwargs: dict, query: torch.Tensor) -> torch.Tensor | None:
    """The sink logits of a call (``s_aux``, gpt-oss's keyword, or ``sinks``), checked: a floating
    tensor [Hq] on query's device, or None."""
    given = [name for name in ("s_aux", "sinks") if kwargs.get(name) is not None]
    if len(given) > 1:
        raise UnsupportedArgument("sinks", "both s_aux and sinks", "one of them (the same [Hq] sink logits)")
    if not given:
        return None
    sinks = kwargs[given[0]]
    hq = query.shape[1]
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point() or tuple(sinks.shape) != (hq,):
        what = tuple(sinks.shape) if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise UnsupportedArgument(given[0], what, f"None or a floating tensor [{hq}]: one sink logit per query head")
    return sinks.to(query.device)


def attention_mask(*args: Any, **kwargs: Any):
    """transformers' ``sdpa_mask`` (boolean, True = visible) with ``allow_is_causal_skip=False``."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register(name: str = NAME) -> None:
    """Register :func:`attention_forward` and :func:`attention_mask` with transformers under ``name``.

    Idempotent (registering again replaces the entries with the same functions).

    Raises:
        ImportError: transformers is not installed (``pip install "transformers>=5,<6"``).
    """
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:  # pragma: no cover - the test extra installs transformers
        raise ImportError(f"tilegen.hf_attention needs transformers 5 (pip install 'transformers>=5,<6'): {e}") from None
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)


register()
