"""Score and mask mods for users (DESIGN §3): the helpers a mod is written with and the built-ins.

``score_mod(score, b, h, q_idx, kv_idx)`` and ``mask_mod(b, h, q_idx, kv_idx)`` are Python functions
traced with symbolic arguments; inside them use these helpers (``where``, ``exp``, ``tanh``, ...) and
``param(name, array)`` for a parameter array read at index expressions, or write them in plain torch
as for FlexAttention (``torch.where``, ``torch.exp2``, ``.clamp``, captured tensors indexed by the
indices, ``and_masks``/``or_masks``: :func:`tilegen.core.mods.torch_dispatch`). The built-ins (``softcap``,
``alibi``, ``relative_bias``, ``document``, ``prefix_lm``, ``causal``, ``sliding_window``) return a
:class:`Mod`. The implementation lives in :mod:`tilegen.core.mods`; this module is the public face.
"""

from tilegen.core.mods import (
    Mod,
    ModError,
    Param,
    alibi,
    causal,
    document,
    exp,
    floor,
    log,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    param,
    prefix_lm,
    relative_bias,
    sliding_window,
    softcap,
    sqrt,
    tanh,
    trace,
    where,
)

__all__ = [
    "Mod", "ModError", "Param", "alibi", "causal", "document", "exp", "floor", "log", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "param", "prefix_lm", "relative_bias", "sliding_window", "softcap", "sqrt",
    "tanh", "trace", "where",
]
