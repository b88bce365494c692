"""torch entry points with FlashAttention's and SDPA's calling conventions, backed by tilegen kernels.

- :func:`flash_attn_func`: FlashAttention's ``flash_attn_func`` argument names, BSND tensors
  ([batch, seq, heads, head_dim]), bottom-right aligned causal/window masks (FlashAttention >= 2.1).
- :func:`scaled_dot_product_attention`: ``torch.nn.functional.scaled_dot_product_attention``'s names,
  BNSD tensors ([batch, heads, seq, head_dim]); ``is_causal`` is top-left aligned, as in torch.
- :func:`flex_attention`: ``torch.nn.attention.flex_attention``'s signature, BNSD tensors, a
  ``score_mod`` in plain torch and a ``BlockMask`` read with its block structure
  (:mod:`tilegen.torch.flex`: the BlockMask as tilegen's block classes, the plan per call).

Where it runs, by the tensors' device:

- ``cuda``: the Triton module tilegen generates for the spec (:func:`tilegen.backends.triton.load`:
  generated, written and imported once per spec in a process), its ``forward`` and ``backward``;
  schedules come from the target of the tensors' device (``H100`` → ``h100``, ``H200`` → ``h200``,
  another GPU → the nearest target, with one warning: :func:`tilegen.torch.device.gpu_target`);
  ``target=`` picks another GPU target file.
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
per-call fast path, :mod:`tilegen.torch.plans`): no checks, no spec, and the module's kernels through
:class:`tilegen.torch.ops.FastAttention` rather than the custom ops' dispatcher.

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
``sinks`` and :func:`flash_attn_varlen_func` (packed batches) run through a ``torch.autograd.Function``
(:mod:`tilegen.torch.extras`), not the custom ops.

The modules, by concern (every path builds one :class:`tilegen.torch.call.Call` per call and reads it):

- :mod:`tilegen.torch.call`: the normalised call, the tensors' checks (:mod:`tilegen.core.validate`
  holds the checks this package shares with :mod:`tilegen.api`);
- :mod:`tilegen.torch.entry`: ``flash_attn_func``, ``scaled_dot_product_attention``,
  ``flash_attn_varlen_func``;
- :mod:`tilegen.torch.flex`: ``flex_attention`` (its own autograd function and plans);
- :mod:`tilegen.torch.ops`: the custom ops and the eager fast path's autograd function;
- :mod:`tilegen.torch.plans`: the plan table (keys, LRU, the target file's stamp);
- :mod:`tilegen.torch.extras`: sinks, softcap / ALiBi with sinks, packed batches;
- :mod:`tilegen.torch.mod_args`: score and mask mods to the ops' text and tensors;
- :mod:`tilegen.torch.device`: where a call runs (Triton, the interpreter, NPU refused), the GPU
  target check, NumPy conversions;
- :mod:`tilegen.torch.ring`: the ring engines' kernel interface and adapters.
"""

from __future__ import annotations

from tilegen.core.errors import UnsupportedArgument
from tilegen.torch.entry import flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention
from tilegen.torch.flex import flex_attention
from tilegen.torch.ops import NO_SECOND_DERIVATIVE, attention_bwd, attention_fwd  # noqa: F401  (public, as before)
from tilegen.torch.plans import PLAN_STATS  # noqa: F401  (the plan table's counters, read by tests and benchmarks)
from tilegen.torch.ring import (
    attention_backward,
    attention_forward,
    flash_attn_backward,
    flash_attn_forward,
    merge_attention,
    sdpa_ring_backward_op,
    sdpa_ring_forward_op,
)

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "scaled_dot_product_attention",
    "flex_attention",
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
