"""Score mods from HuggingFace configs (Gemma 2's softcap, Bloom's and MPT's ALiBi), judged against the
models' own attention code in the installed transformers, on tiny random models (CPU, float32).

- The ALiBi slopes of ``tilegen.hf`` against transformers' ``_get_alibi_slopes`` (Bloom) and
  ``build_mpt_alibi_tensor`` (MPT) for many head counts.
- Gemma 2: the per-layer specs (sliding at even layers, full at odd ones, both soft-capped) against
  ``Gemma2Config.layer_types``; a tiny ``Gemma2ForCausalLM`` with ``attn_implementation="tilegen"``
  (softcap through ``tilegen.hf_attention``) against ``"eager"``, logits and parameter gradients; the
  from-hf spec of layer 0 run in the interpreter against Gemma 2's ``eager_attention_forward``.
- Bloom and MPT: a tiny model's first attention layer recomputed with the layer's own projections and
  tilegen running the from-hf spec (slopes from the spec's values) against the layer's eager output
  (captured by a forward hook during the model's forward).
- T5: the bucket expression against ``T5Attention._relative_position_bucket`` at every distance, for
  several bucket counts and distances, both directions; the encoder's and the decoder's first
  self-attention layer recomputed with the from-hf spec and the layer's learned bucket table.

The spec runs are ``compile_forward`` + ``interpret`` with the parameter values the spec
carries, as ``tilegen run`` executes a spec.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tilegen.hf_attention  # noqa: E402,F401  (registers attn_implementation="tilegen")
from tilegen.backends.interp import interpret  # noqa: E402
from tilegen.hf import bloom_alibi_slopes, mpt_alibi_slopes, spec_from_hf_config, specs_from_hf_config  # noqa: E402
from tilegen.core.mods import check_param_arrays  # noqa: E402
from tilegen.core.spec import spec_from_dict  # noqa: E402
from tilegen.backends import compile_forward  # noqa: E402

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib


def _run_spec(spec, q, k, v, **arrays):
    """O [B, Hq, S, Dv] of ``spec`` in the interpreter on BNSD float32 tensors, with the parameter
    values the spec carries (or ``arrays`` for those without)."""
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    params = check_param_arrays(spec.mods, arrays, sizes) if spec.has_mods else {}
    feeds = {"Q": q.detach().numpy(), "K": k.detach().numpy(), "V": v.detach().numpy(), **params}
    out, _ = interpret(compile_forward(spec), feeds)
    return torch.from_numpy(np.asarray(out["O"], dtype=np.float32))


def _config_dict(config) -> dict:
    return config.to_dict()


# --- slopes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 71, 112])
def test_alibi_slopes_match_transformers(heads):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    # Bloom: float32 powers (torch's and NumPy's powf may differ in the last place).
    np.testing.assert_allclose(bloom_alibi_slopes(heads), _get_alibi_slopes(heads, "cpu").numpy(), rtol=2.5e-7, atol=0)
    mpt = -build_mpt_alibi_tensor(heads, 2)[:, 0, 0].numpy()  # bias of key 0 at distance 1: −slope
    np.testing.assert_array_equal(np.float32(mpt_alibi_slopes(heads)), mpt)


# --- Gemma 2 ---------------------------------------------------------------------------------------

GEMMA2 = dict(
    vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=8, query_pre_attn_scalar=8, sliding_window=3, max_position_embeddings=32, attn_logit_softcapping=0.5,
)  # fmt: skip


def test_gemma2_specs_per_layer_kind():
    config = transformers.Gemma2Config(**{**GEMMA2, "num_hidden_layers": 6, "sliding_window": 4096, "attn_logit_softcapping": 50.0})
    groups = specs_from_hf_config(_config_dict(config), seq=8192)
    kinds = config.layer_types
    assert [layers for layers, _ in groups] == [tuple(i for i, t in enumerate(kinds) if t == kind) for kind in dict.fromkeys(kinds)]
    for layers, spec in groups:
        assert spec.score_mod == "50*tanh(score/50)" and spec.params == ()
        assert spec.window == ((4095, 0) if kinds[layers[0]] == "sliding_attention" else (-1, 0))
        assert spec == spec_from_hf_config(_config_dict(config), seq=8192, layer=layers[-1])
        assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec  # the spec file carries the mod


def _gemma2(impl, **extra):
    """A tiny random Gemma 2 whose query and key projections are scaled up (random init gives scores
    far below the softcap, where tanh is the identity)."""
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**{**GEMMA2, **extra}, attn_implementation=impl)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(30)
            layer.self_attn.k_proj.weight.mul_(30)
    return model


def test_gemma2_tilegen_softcap_matches_eager_logits_and_gradients():
    ids = torch.randint(3, 97, (2, 7), generator=torch.Generator().manual_seed(1))
    outs = []
    for impl in ("eager", "tilegen"):
        model = _gemma2(impl)
        logits = model(input_ids=ids).logits
        w = torch.linspace(-1, 1, logits.numel()).view_as(logits)
        (logits * w).sum().backward()
        outs.append((logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (ref, g_ref), (ours, g_ours) = outs
    assert torch.allclose(ours, ref, rtol=1e-4, atol=1e-5)
    assert g_ref.keys() == g_ours.keys()
    top = max(g.abs().max().item() for g in g_ref.values())
    for n in g_ref:
        assert (g_ours[n] - g_ref[n]).abs().max().item() <= 1e-4 * g_ref[n].abs().max().item() + 1e-6 * top, n
    # The softcap matters at these sizes: without it the eager logits differ well beyond the tolerance.
    plain = _gemma2("eager", attn_logit_softcapping=None)
    assert (plain(input_ids=ids).logits.detach() - ref).abs().max() > 100 * (ours - ref).abs().max()


def test_gemma2_spec_matches_eager_attention_forward():
    from transformers.masking_utils import sliding_window_causal_mask_function
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    b, s = 2, 9
    config = _config_dict(transformers.Gemma2Config(**GEMMA2))
    spec = spec_from_hf_config(config, seq=s, batch=b, layer=0)  # sliding, soft-capped
    assert spec.window == (2, 0) and spec.score_mod == "0.5*tanh(2.0*score)"
    g = torch.Generator().manual_seed(2)
    q = torch.randn(b, 4, s, 8, generator=g) * 3
    k, v = torch.randn(b, 2, s, 8, generator=g) * 3, torch.randn(b, 2, s, 8, generator=g)
    fn = sliding_window_causal_mask_function(3)
    idx = torch.arange(s)
    visible = torch.tensor([[bool(fn(0, 0, i, j)) for j in idx] for i in idx])
    mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)[None, None]

    class Module(torch.nn.Module):
        num_key_value_groups, training, head_dim = 2, False, 8

    ref, _ = eager_attention_forward(Module(), q, k, v, mask, dropout=0.0, scaling=spec.softmax_scale, softcap=0.5)
    ours = _run_spec(spec, q, k, v).transpose(1, 2)
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-5)


# --- Bloom and MPT ---------------------------------------------------------------------------------


def _capture(module):
    """Register a hook on ``module`` recording (args, kwargs, output) of its calls."""
    seen = []
    module.register_forward_hook(lambda m, args, kwargs, out: seen.append((args, kwargs, out)), with_kwargs=True)
    return seen


@pytest.mark.parametrize("heads", [4, 6])
def test_bloom_layer_with_spec_slopes_matches_eager(heads):
    config = transformers.BloomConfig(vocab_size=97, hidden_size=8 * heads, n_layer=1, n_head=heads, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.BloomModel(config).eval()
    b, s = 2, 8
    spec = spec_from_hf_config(_config_dict(config), seq=s, batch=b)
    assert spec.window == (-1, 0) and [p.name for p in spec.params] == ["alibi_slopes"]
    attn = model.h[0].self_attention
    seen = _capture(attn)
    ids = torch.randint(3, 97, (b, s), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(input_ids=ids)
        (args, kwargs, out), = seen
        hidden, residual = args[:2]
        q, k, v = attn._reshape(attn.query_key_value(hidden))
        o = _run_spec(spec, q.contiguous(), k.contiguous(), v.contiguous())
        ours = attn.dense(o.permute(0, 2, 1, 3).reshape(b, s, -1)) + residual
    assert torch.allclose(ours, out[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads", [4, 6])
def test_mpt_layer_with_spec_slopes_matches_eager(heads):
    config = transformers.MptConfig(vocab_size=97, d_model=8 * heads, n_layers=1, n_heads=heads, max_seq_len=16, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.MptModel(config).eval()
    b, s = 2, 8
    spec = spec_from_hf_config(_config_dict(config), seq=s, batch=b)
    assert spec.window == (-1, 0) and spec.params[0].values == tuple(mpt_alibi_slopes(heads))
    attn = model.blocks[0].attn
    seen = _capture(attn)
    ids = torch.randint(3, 97, (b, s), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(input_ids=ids)
        (args, kwargs, out), = seen
        hidden = args[0]
        q, k, v = (x.reshape(b, s, heads, 8).transpose(1, 2).contiguous() for x in attn.Wqkv(hidden).chunk(3, dim=2))
        o = _run_spec(spec, q, k, v)
        ours = attn.out_proj(o.permute(0, 2, 1, 3).reshape(b, s, -1))
    assert torch.allclose(ours, out[0], rtol=1e-5, atol=1e-5)


def test_alibi_configs_that_are_ambiguous_are_named():
    from tilegen.core.errors import SpecError

    mpt = {"model_type": "mpt", "n_heads": 4, "d_model": 32, "max_seq_len": 16, "n_layers": 1}
    for extra, field in (
        ({"attn_config": {"alibi": False}}, "attn_config.alibi"),
        ({"attn_config": {"alibi_bias_max": 16}}, "attn_config.alibi_bias_max"),
        ({"attn_config": {"prefix_lm": True}}, "attn_config.prefix_lm"),
        ({"is_causal": False}, "is_causal"),
    ):
        with pytest.raises(SpecError) as info:
            spec_from_hf_config({**mpt, **extra})
        assert info.value.field == field and "\n" not in str(info.value), str(info.value)


# --- T5 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (8, 20), (16, 12), (64, 256), (32, 33)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bucket_expression_matches_transformers(buckets, max_distance, bidirectional):
    from tilegen.core import mods
    from tilegen.hf import t5_bucket_text
    from transformers.models.t5.modeling_t5 import T5Attention

    expr = mods.parse(t5_bucket_text(buckets, max_distance, bidirectional), "score", {})
    d = np.arange(-700, 701)
    ours = mods.evaluate(expr, q_idx=700 + 0 * d, kv_idx=700 + d, sizes={}, params={})
    theirs = T5Attention._relative_position_bucket(torch.tensor(d), bidirectional=bidirectional, num_buckets=buckets, max_distance=max_distance)
    np.testing.assert_array_equal(np.asarray(ours).astype(np.int64), theirs.numpy())


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_t5_self_attention_with_spec_buckets_matches_eager(part):
    config = transformers.T5Config(
        vocab_size=97, d_model=32, d_kv=8, d_ff=64, num_heads=4, num_layers=1, num_decoder_layers=1,
        relative_attention_num_buckets=8, relative_attention_max_distance=12, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.T5Model(config).eval()
    b, s = 2, 20
    spec = spec_from_hf_config(_config_dict(config), seq=s, batch=b, part=part)
    assert spec.scale == 1.0 and spec.window == ((-1, -1) if part == "encoder" else (-1, 0))
    stack = model.encoder if part == "encoder" else model.decoder
    attn = stack.block[0].layer[0].SelfAttention
    seen = _capture(attn)
    ids = torch.randint(3, 97, (b, s), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(input_ids=ids, decoder_input_ids=ids)
        (args, kwargs, out), = seen
        hidden = args[0] if args else kwargs["hidden_states"]
        q, k, v = (proj(hidden).view(b, s, 4, 8).transpose(1, 2).contiguous() for proj in (attn.q, attn.k, attn.v))
        o = _run_spec(spec, q, k, v, rel_bias=attn.relative_attention_bias.weight.T.numpy())
        ours = attn.o(o.transpose(1, 2).reshape(b, s, -1))
    assert torch.allclose(ours, out[0], rtol=1e-5, atol=1e-5)
