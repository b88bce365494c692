"""HuggingFace configs to specs, and tilegen on real all-MiniLM-L6-v2 attention tensors.

- Spec mapping of the public configs in tests/data/hf (tests/data/hf/SOURCES.md), field by field.
- Clear errors (field, value, accepted) for attention kinds tilegen cannot express, on small dicts.
- The fixture tests/data/minilm_attention.npz (tests/data/make_minilm_fixture.py): Q, K, V, dO captured
  from two layers of the real model on real sentences, with torch float64 autograd references. tilegen's
  forward and fused backward (both dQ strategies) run on it in fp32, fp16 and bf16 and are judged by
  DESIGN §3's rule against both the torch references and tilegen.core.reference.

Nothing here needs the network, transformers or the model package; one optional test compares the mask
and layer rules with transformers' own code (transformers is in the test extra; the test skips without it).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import tilegen
from helpers import assert_backward_ok, assert_forward_ok
from tilegen.core import dtypes, reference
from tilegen.harness.check import compare
from tilegen.core.errors import SpecError
from tilegen.hf import load_hf_config, spec_from_hf_config
from tilegen.core.spec import AttentionSpec, spec_from_dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).resolve().parent / "data"
HF = DATA / "hf"
FIXTURE = DATA / "minilm_attention.npz"

# ------------------------------------------------------------------------------------------------
# Spec mapping of real configs
# ------------------------------------------------------------------------------------------------

EXPECTED = {
    "Llama-2-7b-hf": dict(heads_q=32, heads_kv=32, seq_q=4096, head_dim_qk=128, dtype="fp16", window=(-1, 0), name="Llama-2-7b-hf"),
    "Meta-Llama-3-8B": dict(heads_q=32, heads_kv=8, seq_q=8192, head_dim_qk=128, dtype="bf16", window=(-1, 0), name="Meta-Llama-3-8B"),
    "Mistral-7B-v0.1": dict(heads_q=32, heads_kv=8, seq_q=32768, head_dim_qk=128, dtype="bf16", window=(4095, 0), name="Mistral-7B-v0.1"),
    "Qwen2-7B": dict(heads_q=28, heads_kv=4, seq_q=131072, head_dim_qk=128, dtype="bf16", window=(-1, 0), name="Qwen2-7B"),
    # 384 hidden / 12 heads = 32; no torch_dtype → fp32; BERT encoder → no mask; name from _name_or_path.
    "all-MiniLM-L6-v2": dict(heads_q=12, heads_kv=12, seq_q=512, head_dim_qk=32, dtype="fp32", window=(-1, -1), name="MiniLM-L6-H384-uncased"),
}


def test_every_config_has_an_expectation():
    assert sorted(p.name for p in HF.iterdir() if p.is_dir()) == sorted(EXPECTED)


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_config_maps_to_spec(model):
    exp = EXPECTED[model]
    spec = spec_from_hf_config(HF / model)
    want = AttentionSpec(
        batch=1,
        heads_q=exp["heads_q"],
        heads_kv=exp["heads_kv"],
        seq_q=exp["seq_q"],
        seq_k=exp["seq_q"],
        head_dim_qk=exp["head_dim_qk"],
        head_dim_v=exp["head_dim_qk"],
        dtype=exp["dtype"],
        scale=None,
        window=exp["window"],
        name=exp["name"],
    )
    assert spec == want
    assert spec.softmax_scale == pytest.approx(1 / math.sqrt(exp["head_dim_qk"]))
    # The file path, the folder and the parsed dict give the same spec (up to the folder-derived name).
    assert spec_from_hf_config(HF / model / "config.json") == spec
    as_dict = spec_from_hf_config(json.loads((HF / model / "config.json").read_text()), name=spec.name)
    assert as_dict == spec
    # The TOML form loads back to the same spec.
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec


def test_seq_batch_name_and_dtype_arguments():
    spec = spec_from_hf_config(HF / "Meta-Llama-3-8B", seq=1024, batch=3, name="l3", dtype="fp16")
    assert (spec.seq_q, spec.seq_k, spec.batch, spec.name, spec.dtype) == (1024, 1024, 3, "l3", "fp16")


def test_mistral_window_follows_transformers_sliding_overlay():
    # transformers masking_utils.sliding_window_overlay: key j visible to query i iff j > i - w (and j <= i).
    w, n = 4096, 8192
    spec = spec_from_hf_config(HF / "Mistral-7B-v0.1", seq=n)
    assert spec.window == (w - 1, 0)
    small = spec_from_hf_config({**load_hf_config(HF / "Mistral-7B-v0.1")[0], "sliding_window": 5}, seq=12)
    vis = reference.visible(12, 12, small.window, small.alignment)
    i, j = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    np.testing.assert_array_equal(vis, (j > i - 5) & (j <= i))
    assert vis.sum(axis=1).max() == 5  # w keys, the query's own included
    # A sequence no longer than the window sees a plain causal mask, and the spec says so.
    assert spec_from_hf_config(HF / "Mistral-7B-v0.1", seq=w).window == (-1, 0)
    assert spec_from_hf_config(HF / "Mistral-7B-v0.1", seq=w + 1).window == (w - 1, 0)


def test_minilm_config_matches_the_fixture():
    fx = np.load(FIXTURE)
    spec = spec_from_hf_config(HF / "all-MiniLM-L6-v2", seq=fx["Q"].shape[3], batch=fx["Q"].shape[1])
    assert (spec.batch, spec.heads_q, spec.seq_q, spec.head_dim_qk) == fx["Q"].shape[1:]
    assert spec.softmax_scale == pytest.approx(float(fx["scale"]), rel=1e-12)
    assert spec.mask_kind == "none" and spec.dtype == "fp32" and fx["Q"].dtype == np.float32


# ------------------------------------------------------------------------------------------------
# Mapping rules on small configs
# ------------------------------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512, "max_position_embeddings": 256, "num_hidden_layers": 4, "torch_dtype": "bfloat16"}


def test_qwen2_sliding_layers_follow_max_window_layers():
    cfg = {"model_type": "qwen2", "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256, "max_position_embeddings": 64, "num_hidden_layers": 6, "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 4}
    for layer in range(4):
        assert spec_from_hf_config(cfg, layer=layer).window == (-1, 0)
    for layer in (4, 5):
        assert spec_from_hf_config(cfg, layer=layer).window == (15, 0)
    assert spec_from_hf_config({**cfg, "max_window_layers": 0}).window == (15, 0)  # every layer slides
    assert spec_from_hf_config({**cfg, "use_sliding_window": False}).window == (-1, 0)
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(cfg)
    assert info.value.field == "layer_types" and "sliding_attention at layers [4, 5]" in str(info.value)


def test_gemma_scale_and_alternating_layers():
    gemma2 = {"model_type": "gemma2", "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_size": 2304, "query_pre_attn_scalar": 144, "sliding_window": 4096, "max_position_embeddings": 8192, "num_hidden_layers": 26, "attn_logit_softcapping": None, "torch_dtype": "float32"}
    s0 = spec_from_hf_config(gemma2, layer=0)
    s1 = spec_from_hf_config(gemma2, layer=1)
    assert s0.window == (4095, 0) and s1.window == (-1, 0)
    assert s0.softmax_scale == pytest.approx(1 / 12) and s0.head_dim_qk == 256
    gemma3 = {**gemma2, "model_type": "gemma3_text", "sliding_window": 512, "sliding_window_pattern": 6}
    assert [spec_from_hf_config(gemma3, layer=i).window for i in (4, 5, 11)] == [(511, 0), (-1, 0), (-1, 0)]


def test_explicit_layer_types_and_text_config():
    cfg = {"model_type": "mystery", "architectures": ["MysteryForConditionalGeneration"], "torch_dtype": "float16", "text_config": {**LLAMA, "sliding_window": 32, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}}
    del cfg["text_config"]["torch_dtype"]
    spec = spec_from_hf_config(cfg, layer=2)
    assert (spec.heads_q, spec.heads_kv, spec.head_dim_qk, spec.window, spec.dtype) == (8, 2, 64, (31, 0), "fp16")
    assert spec_from_hf_config(cfg, layer=3).window == (-1, 0)


def test_mla_dims_and_yarn_scale():
    cfg = {"model_type": "deepseek_v3", "num_attention_heads": 16, "num_key_value_heads": 16, "hidden_size": 2048, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}}
    spec = spec_from_hf_config(cfg)
    assert (spec.head_dim_qk, spec.head_dim_v, spec.heads_kv, spec.window) == (192, 128, 16, (-1, 0))
    mscale = 0.1 * math.log(40) + 1.0
    assert spec.softmax_scale == pytest.approx(mscale * mscale / math.sqrt(192))
    plain = {**cfg, "rope_scaling": None}
    assert spec_from_hf_config(plain).softmax_scale == pytest.approx(1 / math.sqrt(192))


def test_other_families():
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_head": 12, "n_embd": 768, "n_positions": 1024, "n_layer": 12, "scale_attn_weights": True}
    spec = spec_from_hf_config(gpt2)
    assert (spec.heads_q, spec.heads_kv, spec.head_dim_qk, spec.seq_q, spec.window, spec.dtype) == (12, 12, 64, 1024, (-1, 0), "fp32")
    assert spec_from_hf_config({**gpt2, "scale_attn_weights": False}).softmax_scale == 1.0
    assert spec_from_hf_config({**gpt2, "scale_attn_by_inverse_layer_idx": True}, layer=3).softmax_scale == pytest.approx(1 / 8 / 4)
    falcon = {"model_type": "falcon", "num_attention_heads": 71, "hidden_size": 4544, "multi_query": True, "alibi": False, "torch_dtype": "bfloat16"}
    assert spec_from_hf_config(falcon, seq=2048).heads_kv == 1
    granite = {**LLAMA, "model_type": "granite", "attention_multiplier": 0.015625}
    assert spec_from_hf_config(granite).scale == 0.015625
    decoder_bert = {"model_type": "bert", "num_attention_heads": 12, "hidden_size": 768, "max_position_embeddings": 512, "is_decoder": True}
    assert spec_from_hf_config(decoder_bert).window == (-1, 0)
    assert spec_from_hf_config({**LLAMA, "is_causal": False}).window == (-1, -1)
    unknown_encoder = {"model_type": "newbert", "architectures": ["NewBertForMaskedLM"], "num_attention_heads": 4, "hidden_size": 128, "max_position_embeddings": 64}
    assert spec_from_hf_config(unknown_encoder).window == (-1, -1)
    assert spec_from_hf_config({**LLAMA, "dtype": "float16", "torch_dtype": None}).dtype == "fp16"


# ------------------------------------------------------------------------------------------------
# Clear errors
# ------------------------------------------------------------------------------------------------

REFUSED = [
    ({**LLAMA, "model_type": "gemma2", "attn_logit_softcapping": -1.0, "layer_types": ["full_attention"] * 4}, "attn_logit_softcapping", "positive"),
    ({**LLAMA, "model_type": "falcon", "alibi": True}, "alibi", "ALiBi"),
    ({**LLAMA, "model_type": "bloom", "is_causal": False}, "is_causal", "ALiBi"),
    ({**LLAMA, "model_type": "mpt", "attn_config": {"alibi": False}}, "attn_config.alibi", "MptModel adds ALiBi"),
    ({**LLAMA, "model_type": "llama", "attn_config": {"alibi": True}}, "attn_config.alibi", "Bloom and MPT only"),
    ({"model_type": "bert", "num_attention_heads": 12, "hidden_size": 768, "max_position_embeddings": 512, "position_embedding_type": "relative_key"}, "position_embedding_type", "relative_key"),
    ({"model_type": "deberta-v2", "num_attention_heads": 12, "hidden_size": 768}, "model_type", "relative-position"),
    ({"model_type": "t5", "num_heads": 8, "d_model": 512, "is_encoder_decoder": True, "relative_attention_num_buckets": 32}, "is_encoder_decoder", "part='encoder'"),
    ({"model_type": "bart", "num_heads": 8, "d_model": 512, "is_encoder_decoder": True}, "is_encoder_decoder", "encoder-decoder"),
    ({"model_type": "bert", "num_attention_heads": 12, "hidden_size": 768, "is_decoder": True, "add_cross_attention": True}, "add_cross_attention", "cross-attention"),
    ({**LLAMA, "model_type": "llama4_text", "attention_chunk_size": 8192}, "attention_chunk_size", "chunked"),
    ({"model_type": "modernbert", "num_attention_heads": 12, "hidden_size": 768, "local_attention": 128, "global_attn_every_n_layers": 3}, "local_attention", "local/global"),
    ({**LLAMA, "model_type": "gemma3_text", "use_bidirectional_attention": True}, "use_bidirectional_attention", "bidirectional"),
    ({**LLAMA, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"] * 2}, "layer_types", "layer=<index>"),
    ({**LLAMA, "num_key_value_heads": 3}, "num_key_value_heads", "divisor of num_attention_heads = 8"),
    ({**LLAMA, "hidden_size": 500}, "hidden_size", "multiple of num_attention_heads"),
    ({**LLAMA, "num_attention_heads": "8"}, "num_attention_heads", "integer"),
    ({**LLAMA, "head_dim": 2048}, "head_dim", "1 to 1024"),
    ({**LLAMA, "torch_dtype": "float64"}, "torch_dtype", "float16, bfloat16 or float32"),
    ({**LLAMA, "torch_dtype": "int8"}, "torch_dtype", "float16, bfloat16 or float32"),
    ({k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}, "max_position_embeddings", "seq=<tokens>"),
    ({"model_type": "mystery", "architectures": ["MysteryModel"], "num_attention_heads": 4, "hidden_size": 64, "max_position_embeddings": 8}, "model_type", "is_causal"),
    ({"model_type": "llama", "hidden_size": 64}, "num_attention_heads", "text_config"),
    ({"model_type": "wrapper", "text_config": {**LLAMA, "num_key_value_heads": 5}}, "text_config.num_key_value_heads", "divisor"),
    ({**LLAMA, "sliding_window": 0}, "sliding_window", "integer >= 1"),
]


@pytest.mark.parametrize("cfg,field,accepted", REFUSED, ids=[r[1] + "-" + str(i) for i, r in enumerate(REFUSED)])
def test_unsupported_or_bad_configs_are_named(cfg, field, accepted):
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(cfg)
    err = info.value
    assert err.field == field, str(err)
    assert accepted in err.accepted, str(err)
    assert str(err).startswith(f"{field} = ")  # one line: field, value, accepted


@pytest.mark.parametrize(
    "kwargs,field",
    [({"layer": 4}, "layer"), ({"layer": -1}, "layer"), ({"seq": 0}, "seq"), ({"batch": 0}, "batch"), ({"dtype": "fp8"}, "dtype"), ({"name": "a/b"}, "name")],
)
def test_bad_arguments_are_named(kwargs, field):
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(LLAMA, **kwargs)
    assert info.value.field == field


def test_bad_files_are_named(tmp_path):
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(tmp_path / "missing")
    assert info.value.field == "config" and "readable" in info.value.accepted
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(tmp_path)
    assert info.value.field == "config" and "valid JSON" in info.value.accepted
    bad.write_text("[1, 2]")
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(bad)
    assert info.value.field == "config" and "JSON object" in info.value.accepted


# ------------------------------------------------------------------------------------------------
# Optional: the rules against transformers' own code
# ------------------------------------------------------------------------------------------------


def test_rules_agree_with_installed_transformers():
    masking = pytest.importorskip("transformers.masking_utils")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    w, n = 5, 14
    fn = masking.sliding_window_causal_mask_function(w)
    idx = [torch.tensor(i) for i in range(n)]
    theirs = np.array([[bool(fn(idx[0], idx[0], idx[i], idx[j])) for j in range(n)] for i in range(n)])
    spec = spec_from_hf_config({**LLAMA, "model_type": "mistral", "sliding_window": w}, seq=n)
    np.testing.assert_array_equal(reference.visible(n, n, spec.window, spec.alignment), theirs)
    qwen = transformers.Qwen2Config(num_hidden_layers=6, use_sliding_window=True, sliding_window=16, max_window_layers=4)
    ours = [spec_from_hf_config({"model_type": "qwen2", "num_attention_heads": 4, "hidden_size": 256, "max_position_embeddings": 64, "num_hidden_layers": 6, "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 4}, layer=i).mask_kind for i in range(6)]
    assert ours == ["window" if t == "sliding_attention" else "causal" for t in qwen.layer_types]
    gemma = transformers.Gemma2Config(num_hidden_layers=6)
    ours = [spec_from_hf_config({"model_type": "gemma2", "num_attention_heads": 8, "head_dim": 256, "sliding_window": 4096, "max_position_embeddings": 8192, "num_hidden_layers": 6}, layer=i).mask_kind for i in range(6)]
    assert ours == ["window" if t == "sliding_attention" else "causal" for t in gemma.layer_types]


# ------------------------------------------------------------------------------------------------
# Real activations: all-MiniLM-L6-v2
# ------------------------------------------------------------------------------------------------

# fp16 keeps about 5 significant bits less range than fp32: the real dO (|dO| <= 4e-3) would sink into
# fp16 subnormals, so the fp16 runs scale dO by 2**10 first, as mixed-precision training scales its loss
# (a power of two: exact, and the references scale by the same factor).
LOSS_SCALE = {"fp32": 1.0, "fp16": 2.0**10, "bf16": 1.0}


@pytest.fixture(scope="module")
def fixture():
    fx = np.load(FIXTURE)
    return {k: fx[k] for k in fx.files}


def _layer_data(fx, li: int, dtype: str) -> dict[str, np.ndarray]:
    nd = dtypes.numpy_dtype(dtype)
    data = {n: fx[n][li].astype(nd) for n in ("Q", "K", "V")}
    data["dO"] = (fx["dO"][li] * LOSS_SCALE[dtype]).astype(nd)
    return data


def _spec(fx, dtype: str) -> AttentionSpec:
    b, h, s, d = fx["Q"].shape[1:]
    return AttentionSpec(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim_qk=d, head_dim_v=d, dtype=dtype, scale=float(fx["scale"]), name="minilm")


def test_fixture_is_small_real_and_self_consistent(fixture):
    assert FIXTURE.stat().st_size < 1 << 20
    assert fixture["Q"].shape == (2, 2, 12, 16, 32) and list(fixture["layers"]) == [0, 5]
    assert fixture["scale"] == pytest.approx(32**-0.5)
    assert fixture["input_ids"][:, 0].tolist() == [101, 101] and fixture["input_ids"][:, -1].tolist() == [102, 102]  # [CLS] … [SEP]
    assert float(np.abs(fixture["dO"]).max()) > 0
    # Two independent float64 computations of the same attention agree: torch autograd (stored in the
    # fixture) and tilegen.core.reference (NumPy, written apart from the IR). This checks the fixture and the
    # reference, not tilegen's kernels.
    for li in range(2):
        q, k, v, do = (fixture[n][li].astype(np.float64) for n in ("Q", "K", "V", "dO"))
        o, lse = reference.forward(q, k, v, scale=float(fixture["scale"]))
        grads = reference.backward(q, k, v, do, scale=float(fixture["scale"]))
        for name, ours in (("O64", o), ("L64", lse), ("dQ", grads[0]), ("dK", grads[1]), ("dV", grads[2])):
            theirs = fixture[name][li].astype(np.float64)
            assert np.abs(ours - theirs).max() <= 1e-6 * np.abs(theirs).max(), name
        # The model's own float32 attention output matches too.
        assert np.abs(o - fixture["O"][li]).max() <= 1e-5 * np.abs(o).max()


def _torch_comparisons(names, ours, torch_refs, plain, dtype):
    return [compare(n, x, r, p, dtype) for n, x, r, p in zip(names, ours, torch_refs, plain)]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("li", [0, 1], ids=["layer0", "layer5"])
def test_forward_on_real_activations(fixture, li, dtype):
    spec = _spec(fixture, dtype)
    data = _layer_data(fixture, li, dtype)
    o, lse = tilegen.attention(data["Q"], data["K"], data["V"], softmax_scale=float(fixture["scale"]), tile_sizes=(8, 8))
    assert o.dtype == dtypes.numpy_dtype(dtype)
    # Against tilegen.core.reference (float64 on the same dtype-rounded inputs).
    assert_forward_ok(spec, o, lse, data)
    # Against torch's float64 forward on the model's float32 tensors: the same rule, the plain
    # same-precision run on the same rounded inputs setting the budget.
    o_pl, l_pl = reference.plain_forward(data["Q"], data["K"], data["V"], scale=spec.softmax_scale, dtype=dtype)
    for comp in _torch_comparisons(("O", "L"), (o, lse), (fixture["O64"][li], fixture["L64"][li]), (o_pl, l_pl), dtype):
        assert comp.ok, comp.line()


@pytest.mark.parametrize("dq_strategy", ["atomic", "separate"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("li", [0, 1], ids=["layer0", "layer5"])
def test_backward_on_real_activations(fixture, li, dtype, dq_strategy):
    spec = _spec(fixture, dtype)
    data = _layer_data(fixture, li, dtype)
    scale = float(fixture["scale"])
    o, lse = tilegen.attention(data["Q"], data["K"], data["V"], softmax_scale=scale, tile_sizes=(8, 8))
    grads = tilegen.attention_backward(
        data["Q"], data["K"], data["V"], o, lse, data["dO"], softmax_scale=scale, dq_strategy=dq_strategy, tile_sizes=(8, 8)
    )
    assert all(g.dtype == dtypes.numpy_dtype(dtype) for g in grads)
    assert_backward_ok(spec, grads, data)
    plain = reference.plain_backward(data["Q"], data["K"], data["V"], data["dO"], scale=scale, dtype=dtype)
    refs = [fixture[n][li].astype(np.float64) * LOSS_SCALE[dtype] for n in ("dQ", "dK", "dV")]
    for comp in _torch_comparisons(("dQ", "dK", "dV"), grads, refs, plain, dtype):
        assert comp.ok, comp.line()
    if dtype == "fp32":  # fp32 must be close in absolute terms too, not only within the plain budget
        for g, r in zip(grads, refs):
            assert np.linalg.norm(g - r) <= 1e-5 * np.linalg.norm(r)
