"""Attention specs from HuggingFace ``config.json`` files.

:func:`spec_from_hf_config` reads a model's ``config.json`` (a dict, the file, or the model folder that
holds it) and returns the :class:`~tilegen.core.spec.AttentionSpec` of one self-attention layer of that
model. What tilegen cannot express is refused with a :class:`~tilegen.core.errors.SpecError` that names the
config key, its value and what would be accepted.

Mapping (transformers 5.24.0 is the reference; paths are inside its ``src/transformers``):

- ``num_attention_heads`` (GPT-2/Falcon/MPT spellings ``n_head``, ``n_heads``, ``num_heads``) →
  ``heads_q``.
- ``num_key_value_heads`` (``num_kv_heads``, ``n_head_kv``) → ``heads_kv``; absent or null →
  ``heads_q``; Falcon's ``multi_query: true`` without ``new_decoder_architecture`` → 1 (as
  ``models/falcon/modeling_falcon.py`` line 241 sets ``num_kv_heads``).
- ``head_dim`` when set, else ``hidden_size // num_attention_heads`` → ``head_dim_qk = head_dim_v``.
  Multi-head latent attention (DeepSeek-V2/V3: ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``) is taken in the form transformers computes it (``models/deepseek_v3/
  modeling_deepseek_v3.py`` lines 365 and 436: K and V decompressed per head): ``head_dim_qk =
  qk_nope_head_dim + qk_rope_head_dim``, ``head_dim_v = v_head_dim``, ``heads_kv = heads_q``. The
  absorbed decode form (one latent KV head) is a different problem and is not produced here.
- scale: 1/sqrt(head_dim_qk) (left as ``None`` in the spec), except ``query_pre_attn_scalar ** -0.5``
  (Gemma 2/3, ``models/gemma2/modeling_gemma2.py`` line 221), ``attention_multiplier`` (Granite),
  ``attn_config.softmax_scale`` (MPT), GPT-2's ``scale_attn_weights: false`` (scale 1) and
  ``scale_attn_by_inverse_layer_idx`` (÷ (layer + 1), needs ``layer``), and MLA's
  ``qk_head_dim ** -0.5 · mscale²`` with ``mscale = 0.1 · mscale_all_dim · ln(factor) + 1`` for a
  non-default ``rope_scaling`` (``models/deepseek_v3/modeling_deepseek_v3.py`` lines 262–274, 405).
- sliding window: transformers builds every sliding layer's mask with ``sliding_window_overlay``
  (``masking_utils.py`` lines 90–97: ``kv_idx > q_idx - sliding_window``) and'ed with causal, so key
  j is visible to query i iff ``i - sliding_window < j <= i``: ``sliding_window`` keys including the
  query's own. tilegen's window is therefore ``(sliding_window - 1, 0)``. The flash-attention path
  agrees (``modeling_flash_attention_utils.py`` lines 687–692 pass ``window_size = (sliding_window -
  1, sliding_window - 1)`` with ``causal=True``). Older releases disagreed by one between backends
  (huggingface/transformers issues #29623 and #39408); the window above is the one they converged on,
  and the one the Mistral authors gave for flash-attention's ``window_size_left`` (PR #26464). When
  the sequence is no longer than the window the mask is plain causal, and the spec says so.
- which layers slide: an explicit ``layer_types`` list wins. Otherwise, as each family's config class
  derives it: Qwen2/Qwen3 (``models/qwen2/configuration_qwen2.py`` lines 83–93): only when
  ``use_sliding_window`` is true, and then only layers ``i >= max_window_layers`` (default 28);
  Gemma 2 (``models/gemma2/configuration_gemma2.py`` lines 94–97): even layers slide; Gemma 3 / Cohere 2
  (``models/gemma3/configuration_gemma3.py`` lines 105–111, ``models/cohere2/configuration_cohere2.py``
  lines 95–100): every layer but each ``sliding_window_pattern``-th (defaults 6 and 4); any other model with an
  integer ``sliding_window`` (Mistral, Mixtral, Phi-3, Starcoder2): every layer
  (``models/mistral/modeling_mistral.py`` line 355). A model whose layers differ needs ``layer=``.
- ``torch_dtype`` (or ``dtype``, which transformers ≥ 4.56 writes): ``float16`` → fp16, ``bfloat16`` →
  bf16, ``float32`` → fp32. Absent → fp32: ``from_pretrained`` then loads in the weights' own dtype
  (``modeling_utils.py`` ``_get_dtype``, lines 827–843) or torch's default float32 (line 866), and the
  configs that omit the field (BERT-era ones such as all-MiniLM-L6-v2) ship float32 weights.
- layout BNSD: transformers hands its attention functions Q, K, V as [B, heads, S, head_dim].
- ``max_position_embeddings`` (``n_positions``, ``max_seq_len``, ``seq_length``, ``n_ctx``) → ``seq_q =
  seq_k``, unless ``seq`` is given.
- causal: an explicit boolean ``is_causal`` wins; encoder families (BERT, RoBERTa, MiniLM's ``bert``,
  …) are bidirectional unless ``is_decoder: true`` (``models/bert/modeling_bert.py`` line 361:
  ``is_causal=config.is_decoder``); decoder families are causal; an unknown ``model_type`` is causal
  when an architecture ends in ``ForCausalLM``/``LMHeadModel``, bidirectional when one ends in
  ``ForMaskedLM``, and refused otherwise.

Score mods (DESIGN §3; the spec's ``score_mod`` text and ``[params]`` with values):

- ``attn_logit_softcapping`` (Gemma 2, and Gemma 3 when set) → ``softcap``: score′ = c·tanh(score/c)
  on the scaled score, as ``eager_attention_forward`` in ``models/gemma2/modeling_gemma2.py`` (lines
  193–198: divide by ``softcap``, ``tanh``, multiply, before the mask). Gemma 2's layers alternate
  sliding (even) and full (odd); each layer's spec comes with ``layer=`` (the CLI's ``--layer``), and
  :func:`specs_from_hf_config` gives one spec per distinct layer kind with the layers that use it.
- ALiBi (Bloom; MPT) → the ``alibi`` built-in, score′ = score − slope[h]·|q_idx + Sk − Sq − kv_idx|, with
  the model's slopes as the parameter ``alibi_slopes`` [Hq], written ``alibi = "bloom"`` (or ``"mpt"``)
  in the spec (:mod:`tilegen.core.paramgen`: a ``--heads`` override regenerates them). Bloom:
  ``_get_alibi_slopes`` (``models/bloom/modeling_bloom.py`` lines 46–59: 2^(−8i/n) for i = 1..n, n
  the largest power of two ≤ heads, then the odd powers of 2^(−4/n) for the rest). MPT:
  ``build_mpt_alibi_tensor`` (``models/mpt/modeling_mpt.py`` lines 43–63: 2^(−8i/m), i = 1..m, m the
  smallest power of two ≥ heads, interleaved odd-then-even when m ≠ heads). The models add
  +slope·(key position) (Bloom: ``build_alibi_tensor``, lines 62–90; MPT: ``arange(1 − S, 1)``·slope),
  which differs from the built-in by slope·(query position), a constant per query row on the causal
  mask, so softmax gives the same P; hence ALiBi is mapped for causal layers only. transformers'
  ``MptModel`` builds the bias with the default ``alibi_bias_max`` = 8 whatever ``attn_config`` says
  (``modeling_mpt.py`` line 320), so an MPT config with ``attn_config.alibi: false`` or another
  ``alibi_bias_max`` is refused as ambiguous.

- Attention sinks (gpt-oss, ``model_type`` gpt_oss) → the spec's ``sinks = true``: ``GptOssAttention``
  holds one learned logit per query head (``self.sinks``, ``models/gpt_oss/modeling_gpt_oss.py`` line
  285) that ``eager_attention_forward`` concatenates to every row's scores as one more column, then
  softmax, then drops (lines 243–251): DESIGN §3's sinks. The logits are weights, not config (no values in
  the spec; tilegen's entry points take them as ``sinks=``). Its layers alternate as ``layer_types``
  says (the hub configs list it; absent, ``GptOssConfig.__post_init__``, ``configuration_gpt_oss.py``
  lines 84–87, makes the even layers sliding), the sliding ones with ``sliding_window`` (128 in
  gpt-oss-20b and -120b, so window ``(127, 0)``); scale ``head_dim ** -0.5`` (line 269); causal (line
  271); GQA as ``num_key_value_heads``. The layer is picked with ``layer=`` (the CLI's ``--layer``), as
  for Gemma 2. The hub configs carry no ``torch_dtype``: the spec says fp32 by the rule below; pass
  ``dtype="bf16"`` (``--dtype bf16``) for the bf16 activations the model runs in.

- T5 (``model_type`` t5, mt5; encoder-decoders, so ``part="encoder"`` or ``"decoder"`` picks the
  self-attention): scale 1 (``T5Attention`` does not scale q·kᵀ), ``head_dim = d_kv``, the encoder
  bidirectional and the decoder causal, and score′ = score + rel_bias[h, bucket] with the bucket of
  ``_relative_position_bucket`` written as integer index arithmetic (:func:`t5_bucket_text`: a count
  of distance thresholds, no logarithm in the kernel) and ``rel_bias`` fp32 [Hq,
  relative_attention_num_buckets], the transpose of the learned ``relative_attention_bias.weight``
  (no values in the spec: they are weights, not config). The CLI has no ``part`` yet.

Refused (each names its key): other score biases (Falcon's ``alibi``, whose slopes are rounded to
bfloat16, ``position_embedding_type`` = ``alibi``/``relative_key``/``relative_key_query``, DeBERTa,
``relative_attention_num_buckets`` outside T5), chunked attention
(``attention_chunk_size``), bidirectional windows (``use_bidirectional_attention``, ModernBERT's
``local_attention``, GPT-Neo's ``attention_types``), encoder-decoder and cross-attention models
(``is_encoder_decoder``, ``add_cross_attention``), layer kinds other than full and sliding attention,
a ``layer_types`` list whose length is not ``num_hidden_layers``, and models whose layers differ when no
``layer`` is given. RoPE, QK-norm, biases in the projections
and attention dropout act outside the kernel (Q and K reach it already rotated) and do not change the
spec. Padding masks are per batch, not per model, and are not part of a spec.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tilegen.core.errors import SpecError
from tilegen.core.paramgen import ParamGenerator, bloom_alibi_slopes, mpt_alibi_slopes
from tilegen.core.spec import AttentionSpec

_ALIASES = {
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx"),
}

_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "half": "fp16", "float": "fp32"}

ENCODER_TYPES = frozenset(
    {
        "albert", "bert", "camembert", "data2vec-text", "distilbert", "electra", "ernie", "esm",
        "flaubert", "ibert", "layoutlm", "megatron-bert", "mobilebert", "mpnet", "nomic_bert", "nystromformer",
        "rembert", "roberta", "roberta-prelayernorm", "roformer", "splinter", "squeezebert", "xlm",
        "xlm-roberta", "xlm-roberta-xl", "xmod",
    }
)  # fmt: skip
DECODER_TYPES = frozenset(
    {
        "bloom", "codegen", "cohere", "cohere2", "deepseek_v2", "deepseek_v3", "falcon", "gemma", "gemma2", "gemma3",
        "gemma3_text", "gpt2", "gpt_bigcode", "gpt_neox", "gpt_oss", "gptj", "granite", "llama", "mistral", "mixtral",
        "mpt", "olmo", "olmo2", "opt", "persimmon", "phi", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
        "stablelm", "starcoder2",
    }
)  # fmt: skip
_QWEN_STYLE = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
_PATTERN_DEFAULTS = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4, "gpt_oss": 2}
SINK_TYPES = ("gpt_oss",)  # models whose attention has one learned sink logit per query head
LAYER_KINDS = ("full_attention", "sliding_attention")


def load_hf_config(source: Mapping[str, Any] | str | Path) -> tuple[dict[str, Any], str | None]:
    """The parsed config and where it came from (None for a dict).

    ``source`` is a dict, a transformers config object (``PreTrainedConfig``, e.g. ``GptOssConfig``:
    read through its ``to_dict()``), a ``config.json`` path, or a model folder holding ``config.json``.

    Raises:
        SpecError: an unreadable file, invalid JSON, or JSON that is not an object.
    """
    if isinstance(source, Mapping):
        return dict(source), None
    to_dict = getattr(source, "to_dict", None)
    if callable(to_dict) and isinstance(getattr(source, "model_type", None), str):
        data = to_dict()
        if not isinstance(data, dict):
            raise SpecError("config", type(source).__name__, "a config whose to_dict() gives a dict")
        return data, None
    if not isinstance(source, (str, Path)):
        raise SpecError("config", type(source).__name__, "a dict, a transformers config, a config.json path or a model folder")
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("config", str(path), f"a readable config.json ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError("config", str(path), f"valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SpecError("config", str(path), "a JSON object (a HuggingFace config.json)")
    return data, str(path)


class _Config:
    """Read access to one config dict that names keys (with a prefix for nested configs) in errors."""

    def __init__(self, data: dict[str, Any], prefix: str, where: str | None):
        self.data = data
        self.prefix = prefix
        self.where = where

    def key(self, name: str) -> str:
        return self.prefix + name

    def error(self, name: str, value: Any, accepted: str) -> SpecError:
        return SpecError(self.key(name), value, accepted, self.where)

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)

    def find(self, canonical: str) -> tuple[str, Any] | None:
        """The first alias of ``canonical`` present with a non-null value, as (key, value)."""
        for alias in _ALIASES[canonical]:
            if self.data.get(alias) is not None:
                return alias, self.data[alias]
        return None

    def integer(self, name: str, value: Any, lo: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise self.error(name, value, f"an integer >= {lo}")
        return value

    def number(self, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise self.error(name, value, "a positive finite number")
        return float(value)

    def truthy(self, name: str) -> bool:
        return self.data.get(name) not in (None, False, 0)


def _select(data: dict[str, Any], where: str | None) -> _Config:
    """The config that describes the language model: the top level, or ``text_config`` of a wrapper."""
    if any(a in data for a in _ALIASES["num_attention_heads"]):
        return _Config(data, "", where)
    text = data.get("text_config")
    if isinstance(text, dict):
        merged = dict(text)
        for inherited in ("torch_dtype", "dtype", "_name_or_path"):
            if merged.get(inherited) is None and data.get(inherited) is not None:
                merged[inherited] = data[inherited]
        return _Config(merged, "text_config.", where)
    raise SpecError(
        "num_attention_heads",
        None,
        "a config with num_attention_heads (or n_head), at the top level or in text_config",
        where,
    )


T5_TYPES = ("t5", "mt5")


def _reject_unsupported(cfg: _Config, part: str | None = None) -> None:
    """Refuse attention kinds tilegen cannot express (every check names its key)."""
    model_type = cfg.get("model_type")
    if model_type in T5_TYPES and cfg.truthy("is_encoder_decoder") and part is None:
        raise cfg.error(
            "is_encoder_decoder", True, "false, or part='encoder' / part='decoder' for the self-attention of T5's encoder or decoder"
        )
    if part is not None and model_type not in T5_TYPES:
        raise SpecError("part", part, f"None (part= picks a T5 encoder's or decoder's self-attention; model_type is {model_type!r})")
    if model_type in T5_TYPES:
        return
    if cfg.truthy("is_encoder_decoder"):
        raise cfg.error(
            "is_encoder_decoder",
            cfg.get("is_encoder_decoder"),
            "false: an encoder-decoder model mixes bidirectional, causal and cross-attention; write a spec for one of them by hand",
        )
    if cfg.truthy("add_cross_attention"):
        raise cfg.error("add_cross_attention", cfg.get("add_cross_attention"), "false: cross-attention layers are not described by a self-attention spec")
    if cfg.truthy("alibi") or cfg.truthy("use_alibi"):
        key = "alibi" if cfg.truthy("alibi") else "use_alibi"
        raise cfg.error(key, cfg.get(key), "false: ALiBi is mapped for Bloom and MPT only (their slope formulas)")
    attn_config = cfg.get("attn_config")
    if model_type == "mpt":
        attn_config = attn_config if isinstance(attn_config, dict) else {}
        if attn_config.get("alibi", True) is not True:
            raise cfg.error("attn_config.alibi", attn_config.get("alibi"), "true (transformers' MptModel adds ALiBi whatever this says)")
        if attn_config.get("alibi_bias_max", 8) != 8:
            raise cfg.error("attn_config.alibi_bias_max", attn_config.get("alibi_bias_max"), "8 (transformers' MptModel builds its ALiBi slopes with 8)")
        for key in ("prefix_lm", "attn_uses_sequence_id"):
            if attn_config.get(key):
                raise cfg.error(f"attn_config.{key}", attn_config[key], "false (a per-input prefix or sequence-id mask is not part of a model's spec)")
    elif isinstance(attn_config, dict) and attn_config.get("alibi"):
        raise cfg.error("attn_config.alibi", attn_config.get("alibi"), "false: ALiBi is mapped for Bloom and MPT only (their slope formulas)")
    pet = cfg.get("position_embedding_type")
    if pet not in (None, "absolute", "rope", "rotary"):
        raise cfg.error(
            "position_embedding_type",
            pet,
            "'absolute' or 'rope' (relative_key, relative_key_query and alibi add position terms to the scores)",
        )
    if model_type in ("deberta", "deberta-v2") or cfg.truthy("relative_attention"):
        key = "relative_attention" if cfg.truthy("relative_attention") else "model_type"
        raise cfg.error(key, cfg.get(key), "a model without relative-position score terms (DeBERTa's disentangled attention adds them)")
    if cfg.get("relative_attention_num_buckets") is not None:
        raise cfg.error(
            "relative_attention_num_buckets",
            cfg.get("relative_attention_num_buckets"),
            "absent: a learned relative-position bias is added to the scores",
        )
    if cfg.get("attention_chunk_size") is not None:
        raise cfg.error(
            "attention_chunk_size",
            cfg.get("attention_chunk_size"),
            "null: chunked attention (block-diagonal causal) has no tilegen window",
        )
    if cfg.truthy("use_bidirectional_attention"):
        raise cfg.error("use_bidirectional_attention", cfg.get("use_bidirectional_attention"), "false: bidirectional sliding windows and image blocks are not supported")
    for key in ("local_attention", "global_attn_every_n_layers", "attention_types", "attention_layers"):
        if cfg.get(key) is not None:
            raise cfg.error(key, cfg.get(key), "absent: local/global layer mixes of this family are not supported")


def _layer_kinds(cfg: _Config, sliding_window: int | None) -> list[str] | None:
    """Each layer's kind (``"full_attention"``/``"sliding_attention"``/other), or None when all are full."""
    model_type = cfg.get("model_type")
    explicit = cfg.get("layer_types")
    if explicit is not None:
        if not isinstance(explicit, list) or not explicit or not all(isinstance(k, str) for k in explicit):
            raise cfg.error("layer_types", explicit, "a non-empty list of layer kind names")
        layers_at = cfg.find("num_hidden_layers")
        if layers_at is not None and len(explicit) != cfg.integer(*layers_at):
            raise cfg.error("layer_types", f"a list of {len(explicit)} kinds", f"one kind per layer ({layers_at[0]} = {layers_at[1]})")
        return list(explicit)
    qwen_style = model_type in _QWEN_STYLE or "use_sliding_window" in cfg.data
    if qwen_style and not cfg.truthy("use_sliding_window"):
        return None
    if sliding_window is None:
        return None
    layers_at = cfg.find("num_hidden_layers")
    if layers_at is None:
        raise cfg.error("num_hidden_layers", None, "an integer >= 1 (needed to tell which layers slide)")
    n_layers = cfg.integer(*layers_at)
    if qwen_style:
        first = cfg.integer("max_window_layers", cfg.get("max_window_layers", 28), lo=0)
        return ["sliding_attention" if i >= first else "full_attention" for i in range(n_layers)]
    if model_type in _PATTERN_DEFAULTS:
        pattern = cfg.integer("sliding_window_pattern", cfg.get("sliding_window_pattern", _PATTERN_DEFAULTS[model_type]))
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]
    return ["sliding_attention"] * n_layers


def _summary(kinds: list[str]) -> str:
    counts: dict[str, list[int]] = {}
    for i, k in enumerate(kinds):
        counts.setdefault(k, []).append(i)
    parts = []
    for k, idx in counts.items():
        shown = ", ".join(str(i) for i in idx[:6]) + (", …" if len(idx) > 6 else "")
        parts.append(f"{k} at layers [{shown}]")
    return "; ".join(parts)


def _causal(cfg: _Config) -> bool:
    explicit = cfg.get("is_causal")
    if isinstance(explicit, bool):
        return explicit
    model_type = cfg.get("model_type")
    if model_type in ENCODER_TYPES:
        return bool(cfg.get("is_decoder", False))
    if model_type in DECODER_TYPES:
        return True
    archs = cfg.get("architectures") or []
    archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if cfg.get("is_decoder") is True or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    if any(a.endswith("ForMaskedLM") for a in archs):
        return False
    raise cfg.error(
        "model_type",
        model_type,
        "a known encoder or decoder family, an architecture ending in ForCausalLM/LMHeadModel or "
        "ForMaskedLM, or an explicit is_causal (true/false) in the config",
    )


def _dtype(cfg: _Config, override: str | None) -> str:
    if override is not None:
        if override not in ("fp16", "bf16", "fp32"):
            raise SpecError("dtype", override, "'fp16', 'bf16' or 'fp32'")
        return override
    for key in ("dtype", "torch_dtype"):
        value = cfg.get(key)
        if value is None:
            continue
        name = value[len("torch."):] if isinstance(value, str) and value.startswith("torch.") else value
        if not isinstance(name, str) or name not in _DTYPES:
            raise cfg.error(key, value, "float16, bfloat16 or float32 (or absent for float32)")
        return _DTYPES[name]
    return "fp32"


def _mla_scale(cfg: _Config, qk_head_dim: int) -> float:
    scale = qk_head_dim**-0.5
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if isinstance(rope, dict):
        kind = rope.get("rope_type", rope.get("type", "default"))
        mscale_all_dim = rope.get("mscale_all_dim", 0)
        if kind != "default" and mscale_all_dim:
            factor = cfg.number("rope_scaling.factor", rope.get("factor"))
            mscale = 1.0 if factor <= 1 else 0.1 * float(mscale_all_dim) * math.log(factor) + 1.0
            scale *= mscale * mscale
    return scale


def _name(cfg: _Config, name: str | None) -> str:
    if name is not None:
        return name
    folder = Path(cfg.where).parent.name if cfg.where is not None else None
    for candidate in (cfg.get("_name_or_path"), folder, cfg.get("model_type")):
        if isinstance(candidate, str):
            tail = candidate.replace("\\", "/").rstrip("/").split("/")[-1].replace("\0", "")
            if tail not in ("", ".", ".."):
                return tail
    return "hf"


def _score_mod(cfg: _Config, heads_q: int, causal: bool) -> tuple[str, tuple]:
    """(score_mod text, params) of the model's score modification (softcap, then ALiBi), or ("", ())."""
    cap = cfg.get("attn_logit_softcapping")
    model_type = cfg.get("model_type")
    slopes = None
    if model_type == "bloom":
        slopes = bloom_alibi_slopes(heads_q)
    elif model_type == "mpt":
        slopes = mpt_alibi_slopes(heads_q, 8)
    if cap is None and slopes is None:
        return "", ()
    from tilegen.core import mods

    parts = []
    if cap is not None:
        parts.append(mods.softcap(cfg.number("attn_logit_softcapping", cap)))
    if slopes is not None:
        if not causal:
            raise cfg.error("is_causal", False, "true for an ALiBi model (the slopes are mapped through the causal mask's softmax invariance)")
        parts.append(mods.alibi(np.asarray(slopes, dtype=np.float32)))
    score = parts[0]
    if len(parts) == 2:
        first, second = parts
        score = mods.trace(lambda x, b, h, i, j: second(first(x, b, h, i, j), b, h, i, j), "score")
    text, _, decls, _, _ = mods.mods_from_api(score, None)
    # the slopes as a generator of that model's rounding, so that a --heads override follows the formula
    gen = ParamGenerator("alibi", model_type) if slopes is not None else None
    return text, tuple(dataclasses.replace(d, values=tuple(slopes), generator=gen) if d.name == "alibi_slopes" else d for d in decls)


def _t5_bucket(n: int, buckets: int, max_exact: int, max_distance: int) -> int:
    """T5's bucket of a distance n >= max_exact, in float32 as ``_relative_position_bucket`` computes
    it (``models/t5/modeling_t5.py`` lines 253–260: log, divide, multiply, truncate, cap)."""
    x = np.float32(np.log(np.float32(n) / np.float32(max_exact)))
    x = np.float32(x / np.float32(math.log(max_distance / max_exact)))
    x = np.float32(x * np.float32(buckets - max_exact))
    return min(max_exact + int(x), buckets - 1)


def t5_bucket_text(num_buckets: int, max_distance: int, bidirectional: bool) -> str:
    """T5's relative-position bucket of (q_idx, kv_idx) as an integer expression of the mod language.

    ``_relative_position_bucket`` (transformers ``models/t5/modeling_t5.py`` lines 218–263) maps the
    distance n (|kv_idx − q_idx| when bidirectional, with the upper half of the buckets for keys after
    the query; max(q_idx − kv_idx, 0) otherwise) to n below max_exact = buckets/2, else to max_exact +
    ⌊log(n/max_exact)/log(max_distance/max_exact)·(buckets − max_exact)⌋ capped at buckets − 1. The
    logarithmic part is monotone in n, so it equals a count of thresholds: bucket = min(n, max_exact) +
    Σ_k [n ≥ t_k], t_k the least n whose bucket reaches max_exact + k (found here with the model's
    float32 arithmetic). No logarithm is evaluated in the kernel, so no rounding can move a boundary.
    """
    buckets = num_buckets // 2 if bidirectional else num_buckets
    max_exact = buckets // 2
    thresholds, n, reached = [], max_exact, max_exact
    while reached < buckets - 1:
        n += 1
        b = _t5_bucket(n, buckets, max_exact, max_distance)
        thresholds += [n] * (b - reached)
        reached = max(reached, b)
    dist = "Abs(kv_idx - q_idx)" if bidirectional else "Max(q_idx - kv_idx, 0)"
    head = f"where(kv_idx > q_idx, {buckets}, 0) + " if bidirectional else ""
    return head + f"Min({dist}, {max_exact})" + "".join(f" + where({dist} >= {t}, 1, 0)" for t in thresholds)


def _t5_score_mod(cfg: _Config, part: str) -> tuple[str, tuple]:
    """score + rel_bias[h, bucket(q_idx, kv_idx)] with ``rel_bias`` fp32 [Hq, num_buckets] (the
    transpose of ``relative_attention_bias.weight``, learned: no values in the spec)."""
    from tilegen.core.mods import SIZE_SYMBOLS, ParamDecl

    buckets = cfg.integer("relative_attention_num_buckets", cfg.get("relative_attention_num_buckets", 32), lo=2)
    max_distance = cfg.integer("relative_attention_max_distance", cfg.get("relative_attention_max_distance", 128), lo=1)
    bidirectional = part == "encoder"
    max_exact = (buckets // 2 if bidirectional else buckets) // 2
    if max_exact < 1:
        raise cfg.error("relative_attention_num_buckets", buckets, "at least 4 (an encoder) or 2 (a decoder)")
    if max_distance <= max_exact:
        raise cfg.error("relative_attention_max_distance", max_distance, f"more than {max_exact}, the distances with a bucket each")
    text = f"score + rel_bias[h, {t5_bucket_text(buckets, max_distance, bidirectional)}]"
    return text, (ParamDecl("rel_bias", (SIZE_SYMBOLS["Hq"], buckets), "fp32"),)


def specs_from_hf_config(config: Mapping[str, Any] | str | Path, **kwargs: Any) -> list[tuple[tuple[int, ...], AttentionSpec]]:
    """One spec per distinct layer of a model, with the layers (0-based) that share it, in the order
    of their first layer: Gemma 2 gives two (sliding at the even layers, full at the odd ones, both
    soft-capped), a model whose layers are all alike one. Keyword arguments as for
    :func:`spec_from_hf_config` (without ``layer``); a config without ``num_hidden_layers`` gives one
    spec for layers ``()``.

    Raises:
        SpecError: as :func:`spec_from_hf_config`.
    """
    if "layer" in kwargs:
        raise SpecError("layer", kwargs["layer"], "no layer= (every layer is described)")
    data, where = load_hf_config(config)
    cfg = _select(data, where)
    layers_at = cfg.find("num_hidden_layers")
    if cfg.get("model_type") in T5_TYPES and kwargs.get("part") == "decoder" and cfg.get("num_decoder_layers") is not None:
        layers_at = ("num_decoder_layers", cfg.get("num_decoder_layers"))
    if layers_at is None:
        return [((), spec_from_hf_config(config, **kwargs))]
    groups: dict[AttentionSpec, list[int]] = {}
    for i in range(cfg.integer(*layers_at)):
        groups.setdefault(spec_from_hf_config(config, layer=i, **kwargs), []).append(i)
    return [(tuple(idx), spec) for spec, idx in groups.items()]


def spec_from_hf_config(
    config: Mapping[str, Any] | str | Path,
    *,
    seq: int | None = None,
    batch: int = 1,
    name: str | None = None,
    dtype: str | None = None,
    layer: int | None = None,
    part: str | None = None,
) -> AttentionSpec:
    """The attention spec of one self-attention layer of a HuggingFace model.

    Args:
        config: the parsed ``config.json`` (dict), its path, or the model folder that holds it.
            Multimodal wrappers are read through their ``text_config``.
        seq: tokens per sequence (``seq_q = seq_k``); default ``max_position_embeddings``.
        batch: B.
        name: the spec's name; default the last part of ``_name_or_path``, else the folder holding a
            ``config.json`` given by path, else ``model_type``.
        dtype: ``"fp16"``, ``"bf16"`` or ``"fp32"`` to override the config's ``torch_dtype``.
        layer: which layer (0-based) to describe; needed only when layers differ (Gemma 2/3, Qwen2
            with ``use_sliding_window``, explicit mixed ``layer_types``) or the scale depends on the
            layer (GPT-2's ``scale_attn_by_inverse_layer_idx``).
        part: for T5 (``model_type`` t5, mt5, which are encoder-decoders): ``"encoder"`` (bidirectional,
            bidirectional buckets) or ``"decoder"`` (causal, one-sided buckets) self-attention.

    Returns:
        A validated :class:`AttentionSpec` in BNSD layout, bottom-right alignment (Sq = Sk, so the
        alignment does not matter), with the mapping rules of this module's docstring.

    Raises:
        SpecError: a missing or malformed key, or an attention kind tilegen cannot express; the error
            names the config key (``text_config.``-prefixed for nested configs), the value, and what is
            accepted.
    """
    data, where = load_hf_config(config)
    cfg = _select(data, where)
    if part is not None and part not in ("encoder", "decoder"):
        raise SpecError("part", part, "None, 'encoder' or 'decoder' (T5)")
    _reject_unsupported(cfg, part)

    heads_at = cfg.find("num_attention_heads")
    if heads_at is None:
        raise cfg.error("num_attention_heads", None, "an integer >= 1")
    heads_key = heads_at[0]
    heads_q = cfg.integer(*heads_at)
    kv_at = cfg.find("num_key_value_heads")
    if cfg.get("multi_query") is True and not cfg.truthy("new_decoder_architecture"):
        kv_key, heads_kv = "multi_query", 1  # Falcon: one KV head unless the new decoder architecture
    elif kv_at is not None:
        kv_key, heads_kv = kv_at[0], cfg.integer(*kv_at)
    else:
        kv_key, heads_kv = "num_key_value_heads", heads_q
    if heads_q % heads_kv:
        raise cfg.error(kv_key, heads_kv, f"a divisor of num_attention_heads = {heads_q}")

    scale: float | None = None
    mla_keys = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    dim_key = "head_dim"
    if any(cfg.get(k) is not None for k in mla_keys):
        for k in mla_keys:
            cfg.integer(k, cfg.get(k), lo=0 if k != "v_head_dim" else 1)
        head_dim_qk = cfg.get("qk_nope_head_dim") + cfg.get("qk_rope_head_dim")
        if head_dim_qk < 1:
            raise cfg.error("qk_nope_head_dim", cfg.get("qk_nope_head_dim"), "a sum with qk_rope_head_dim of at least 1")
        head_dim_v = cfg.get("v_head_dim")
        heads_kv = heads_q  # K and V are decompressed to one head per query head
        dim_key = "qk_nope_head_dim"
        scale = _mla_scale(cfg, head_dim_qk)
    elif cfg.get("model_type") in T5_TYPES and cfg.get("d_kv") is not None:
        head_dim_qk = head_dim_v = cfg.integer("d_kv", cfg.get("d_kv"))
        dim_key = "d_kv"
    elif cfg.get("head_dim") is not None:
        head_dim_qk = head_dim_v = cfg.integer("head_dim", cfg.get("head_dim"))
    else:
        hidden_at = cfg.find("hidden_size")
        if hidden_at is None:
            raise cfg.error("head_dim", None, "an integer >= 1, or hidden_size divisible by num_attention_heads")
        hidden = cfg.integer(*hidden_at)
        if hidden % heads_q:
            raise cfg.error(hidden_at[0], hidden, f"a multiple of num_attention_heads = {heads_q} (or an explicit head_dim)")
        head_dim_qk = head_dim_v = hidden // heads_q
        dim_key = hidden_at[0]

    if cfg.get("query_pre_attn_scalar") is not None:
        scale = cfg.number("query_pre_attn_scalar", cfg.get("query_pre_attn_scalar")) ** -0.5
    if cfg.get("attention_multiplier") is not None:
        scale = cfg.number("attention_multiplier", cfg.get("attention_multiplier"))
    attn_config = cfg.get("attn_config")
    if isinstance(attn_config, dict) and attn_config.get("softmax_scale") is not None:
        scale = cfg.number("attn_config.softmax_scale", attn_config["softmax_scale"])
    if cfg.get("scale_attn_weights") is False or cfg.get("model_type") in T5_TYPES:
        scale = 1.0  # T5Attention: scores = q·kᵀ, unscaled (models/t5/modeling_t5.py)

    # Which layer kind: full or sliding.
    raw_window = cfg.get("sliding_window")
    sliding_window = None if raw_window is None else cfg.integer("sliding_window", raw_window)
    kinds = _layer_kinds(cfg, sliding_window)
    n_layers = None
    if cfg.find("num_hidden_layers") is not None:
        n_layers = cfg.integer(*cfg.find("num_hidden_layers"))
    if layer is not None:
        upper = len(kinds) if kinds is not None else n_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0 or (upper is not None and layer >= upper):
            raise SpecError("layer", layer, f"an integer from 0 to {upper - 1}" if upper else "an integer >= 0")
    kind = "full_attention"
    if kinds is not None:
        if layer is not None:
            kind = kinds[layer]
        elif len(set(kinds)) == 1:
            kind = kinds[0]
        else:
            raise cfg.error("layer_types", _summary(kinds), "layers that all share one attention kind, or layer=<index> (the CLI's --layer) to pick one")
        if kind not in LAYER_KINDS:
            raise cfg.error("layer_types", kind, "layers of kind " + " or ".join(LAYER_KINDS))
        if kind == "sliding_attention" and sliding_window is None:
            raise cfg.error("sliding_window", None, "an integer >= 1 for a sliding_attention layer")
    if cfg.get("scale_attn_by_inverse_layer_idx") is True:
        if layer is None:
            raise cfg.error("scale_attn_by_inverse_layer_idx", True, "false, or layer=<index> (the scale depends on the layer)")
        scale = (scale if scale is not None else head_dim_qk**-0.5) / (layer + 1)

    # Sequence length.
    if seq is None:
        pos_at = cfg.find("max_position_embeddings")
        if pos_at is None:
            raise cfg.error("max_position_embeddings", None, "an integer >= 1 in the config, or seq=<tokens>")
        seq_len, seq_field = cfg.integer(*pos_at), cfg.key(pos_at[0])
    else:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise SpecError("seq", seq, "an integer >= 1")
        seq_len, seq_field = seq, "seq"

    causal = part == "decoder" if cfg.get("model_type") in T5_TYPES else _causal(cfg)
    if not causal and kind == "sliding_attention":
        raise cfg.error("sliding_window", sliding_window, "null for a bidirectional model (bidirectional windows are not supported)")
    if kind == "sliding_attention" and sliding_window < seq_len:
        window = (sliding_window - 1, 0)
    else:
        window = (-1, 0) if causal else (-1, -1)

    score_mod, params = _t5_score_mod(cfg, part) if cfg.get("model_type") in T5_TYPES else _score_mod(cfg, heads_q, causal)
    fields = dict(
        batch=batch,
        heads_q=heads_q,
        heads_kv=heads_kv,
        seq_q=seq_len,
        seq_k=seq_len,
        head_dim_qk=head_dim_qk,
        head_dim_v=head_dim_v,
        dtype=_dtype(cfg, dtype),
        scale=scale,
        window=window,
        name=_name(cfg, name),
        score_mod=score_mod,
        params=params,
        sinks=cfg.get("model_type") in SINK_TYPES,
    )
    renames = {
        "heads_q": cfg.key(heads_key),
        "heads_kv": cfg.key(kv_key),
        "seq_q": seq_field,
        "seq_k": seq_field,
        "head_dim_qk": cfg.key(dim_key),
        "head_dim_v": cfg.key("v_head_dim" if dim_key == "qk_nope_head_dim" else dim_key),
        "scale": cfg.key("scale"),
    }
    try:
        return AttentionSpec(**fields)
    except SpecError as exc:
        field = renames.get(exc.field, exc.field)
        raise SpecError(field, exc.value, exc.accepted, where) from None
