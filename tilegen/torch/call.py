"""The normalised call: what one attention call through :mod:`tilegen.torch` asks for, built once from
the entry point's arguments and read by every path (the custom ops, the plan table, the sinks /
softcap / ALiBi / packed-batch path).

Each entry point (``flash_attn_func``, ``scaled_dot_product_attention``, ``flash_attn_varlen_func``,
the ring functions) checks its arguments (:mod:`tilegen.core.validate`) and builds a :class:`Call`;
the custom ops take it as their scalar arguments (:meth:`Call.op_args`, :meth:`Call.from_op`, the ops'
schema only holds strings, numbers and tensors); a plan keeps the call it was built for; the spec
(:meth:`Call.spec`) and the NumPy API's keyword arguments (:meth:`Call.api_kwargs`) come from it.
Building a call checks nothing but what :func:`check_tensors` and the builders check: under
``torch.compile`` the entry points' calls are traced (sizes may be symbolic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

from tilegen.core import validate
from tilegen.core.errors import SpecError
from tilegen.core.spec import AttentionSpec

DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}

TENSORS = validate.ArrayKind(
    cls=torch.Tensor,
    noun="torch.Tensor",
    names=DTYPES,
    dtypes="torch.float16, torch.bfloat16 or torch.float32",
    floats=frozenset(d for d in vars(torch).values() if isinstance(d, torch.dtype) and d.is_floating_point),
    float_words="torch.float32, torch.bfloat16, torch.float16, torch.float64",
    int32=torch.int32,
    devices=True,
)

DEVICES = ("cuda", "cpu", "npu")  # cuda: Triton; cpu: the NumPy interpreter; npu: refused until wired


def check_tensors(q, k, v, *, layout: str, scale=None, scale_name: str = "softmax_scale") -> tuple[tuple, tuple, tuple]:
    """Check q, k, v (:func:`tilegen.core.validate.qkv`), the scale (named ``scale_name``) and the
    device; return the logical shapes (BNSD [B, H, S, D]; TND [T, H, D]).

    Traceable by dynamo: reads only shapes, dtypes and devices (sizes may be symbolic).

    Raises:
        SpecError (ValueError): a bad tensor, scale or device, named.
    """
    shapes = validate.qkv(q, k, v, kind=TENSORS, layout=layout)
    validate.scale(scale, scale_name)
    if q.device.type not in DEVICES:
        raise SpecError("q.device", str(q.device), "a cuda, cpu or npu tensor")
    return shapes


@dataclass(frozen=True)
class Call:
    """One attention call, normalised (DESIGN §3 for the semantics of each field).

    The tensors (logical sizes; a packed batch is one batch of ``seq_q`` query and ``seq_k`` key tokens):

    Attributes:
        layout: ``"BNSD"``, ``"BSND"`` or ``"TND"`` (a packed batch, :func:`flash_attn_varlen_func`).
        dtype: ``"fp16"``, ``"bf16"`` or ``"fp32"`` (q's, k's and v's).
        device: ``"cuda"`` (Triton), ``"cpu"`` (the interpreter) or ``"npu"``.
        batch, heads_q, heads_kv, seq_q, seq_k, head_dim_qk, head_dim_v: the sizes (TND: batch 1,
            seq_q / seq_k the token counts).

    The mathematics:

    Attributes:
        scale: S = scale·QKᵀ; None: 1/√D.
        window: (left, right), −1 unbounded, after ``causal`` and the mask mod's own window.
        alignment: ``"bottom_right"`` (FlashAttention >= 2.1; every packed sequence) or ``"top_left"``.
        score_mod, mask_mod: the mods as mod-language text (``""``: none); ``param_decls``: JSON
            ``{name: {"shape", "dtype"}}`` of their parameter tensors, in the tensors' order
            (:meth:`tilegen.mods.ParamDecl.to_dict`). The custom-op path; there FlashAttention's
            softcap and ALiBi are the score mod.
        softcap, alibi, sinks: FlashAttention's softcap (None: off), the ALiBi slopes' dimensions (0:
            none; 1: [Hq]; 2: [B, Hq], or [num_seqs, Hq] packed) and whether sink logits are given:
            the path of :mod:`tilegen.torch.extras`, whose plans turn them into the spec's score mod.
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k: a packed batch's offsets (tuples of
            ints, [num_seqs + 1]) and FlashAttention's bounds (None: unchecked); None when dense.

    The schedule:

    Attributes:
        dq_strategy: None (the target's choice on CUDA, atomic in the interpreter) or ``"separate"``
            (deterministic: no atomics).
        target: the GPU target file whose schedule CUDA tensors use (:meth:`of` resolves None to the
            target of q's device, :func:`tilegen.torch.device.gpu_target`).
    """

    layout: str
    dtype: str
    device: str
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim_qk: int
    head_dim_v: int
    scale: float | None = None
    window: tuple[int, int] = (-1, -1)
    alignment: str = "bottom_right"
    score_mod: str = ""
    mask_mod: str = ""
    param_decls: str = ""
    softcap: float | None = None
    alibi: int = 0
    sinks: bool = False
    cu_seqlens_q: tuple | None = None
    cu_seqlens_k: tuple | None = None
    max_seqlen_q: int | None = None
    max_seqlen_k: int | None = None
    dq_strategy: str | None = None
    target: str = "h200"

    @classmethod
    def of(cls, q: torch.Tensor, shapes: tuple, *, layout: str, scale=None, **fields: Any) -> Call:
        """The call on ``q`` (its dtype and device) of the logical ``shapes`` :func:`check_tensors`
        returned; ``fields``: the rest, already checked (``scale`` becomes a float; a ``target`` of None
        or none given becomes the target of q's device: :func:`tilegen.torch.device.gpu_target`)."""
        from tilegen.torch import device

        fields["target"] = device.gpu_target(fields.get("target"), q)
        lq, lk, lv = shapes
        if layout == validate.TND:  # B = 1, S = the tokens
            sizes = (1, lq[1], lk[1], lq[0], lk[0], lq[2], lv[2])
        else:
            sizes = (lq[0], lq[1], lk[1], lq[2], lk[2], lq[3], lv[3])
        return cls(layout, DTYPES[q.dtype], q.device.type, *sizes, None if scale is None else float(scale), **fields)

    @classmethod
    def checked(cls, q, k, v, *, layout: str, scale=None, scale_name: str = "softmax_scale", **fields: Any) -> Call:
        """:func:`check_tensors`, then :meth:`of`."""
        return cls.of(q, check_tensors(q, k, v, layout=layout, scale=scale, scale_name=scale_name), layout=layout, scale=scale, **fields)

    @classmethod
    def from_op(cls, q, k, v, layout, scale, window_left, window_right, alignment, dq_strategy, target, score_mod, mask_mod, param_decls) -> Call:
        """The call of the custom ops' scalar arguments (their order in the schema), checked as the ops
        check them: the target names a GPU target (on every device, so a typo never passes on the
        CPU), a dense layout, the tensors and the scale (the window and alignment: :meth:`spec`).

        Raises:
            SpecError (ValueError): a bad argument, named by the ops' argument names.
        """
        from tilegen.torch import device

        device.check_gpu_target(target)
        validate.layout(layout)
        return cls.checked(q, k, v, layout=layout, scale=scale, scale_name="scale", window=(window_left, window_right), alignment=alignment,
                           dq_strategy=dq_strategy, target=target, score_mod=score_mod, mask_mod=mask_mod, param_decls=param_decls)

    def op_args(self) -> tuple:
        """The custom ops' scalar arguments: (layout, scale, window_left, window_right, alignment,
        dq_strategy, target, score_mod, mask_mod, param_decls)."""
        return (self.layout, self.scale, self.window[0], self.window[1], self.alignment, self.dq_strategy, self.target,
                self.score_mod, self.mask_mod, self.param_decls)

    @property
    def has_mods(self) -> bool:
        return bool(self.score_mod or self.mask_mod or self.param_decls)

    @property
    def packed(self) -> bool:
        return self.layout == validate.TND

    @property
    def sizes(self) -> dict[str, int]:
        """The size symbols of the mod language (B, Hq, Hkv, Sq, Sk) for this call."""
        return {"B": self.batch, "Hq": self.heads_q, "Hkv": self.heads_kv, "Sq": self.seq_q, "Sk": self.seq_k}

    def decls(self) -> tuple:
        """The :class:`tilegen.mods.ParamDecl` of ``param_decls``, in the tensors' order.

        Raises:
            ModError (a SpecError): a bad declaration, named.
        """
        if not self.param_decls:
            return ()
        from tilegen.core.mods import parse_param_decls

        data = json.loads(self.param_decls)
        by_name = {d.name: d for d in parse_param_decls(data)}
        return tuple(by_name[n] for n in data)

    def spec(self, decls: tuple | None = None) -> AttentionSpec:
        """The spec of a dense call (validated; errors name the field); ``decls``: :meth:`decls`, when
        parsed already."""
        decls = self.decls() if decls is None else decls
        return AttentionSpec(
            batch=self.batch,
            heads_q=self.heads_q,
            heads_kv=self.heads_kv,
            seq_q=self.seq_q,
            seq_k=self.seq_k,
            head_dim_qk=self.head_dim_qk,
            head_dim_v=self.head_dim_v,
            dtype=self.dtype,
            scale=self.scale,
            window=self.window,
            alignment=self.alignment,
            layout=self.layout,
            name="torch",
            score_mod=self.score_mod,
            mask_mod=self.mask_mod,
            params=tuple(sorted(decls, key=lambda d: d.name)),
        )

    def offsets(self) -> tuple:
        """(cu_seqlens_q, cu_seqlens_k) as int32 NumPy arrays (a packed call)."""
        import numpy as np

        return np.asarray(self.cu_seqlens_q, dtype=np.int32), np.asarray(self.cu_seqlens_k, dtype=np.int32)

    def api_kwargs(self) -> dict:
        """The keyword arguments of :func:`tilegen.api.attention` / ``attention_backward`` (dense) or
        ``attention_varlen`` / ``attention_varlen_backward`` (packed; the offsets go positionally) for
        this call's scalars; the mods, the slopes' and sinks' arrays and the strategy are the caller's."""
        kw: dict[str, Any] = dict(softmax_scale=self.scale, window=self.window)
        if self.softcap is not None:
            kw["softcap"] = self.softcap
        if self.packed:
            kw.update(max_seqlen_q=self.max_seqlen_q, max_seqlen_k=self.max_seqlen_k)
        else:
            kw.update(alignment=self.alignment, layout=self.layout)
        return kw
