"""gpt-oss (learned attention sinks, alternating sliding/full layers, GQA) through ``tilegen.hf``,
judged against the real configs and against gpt-oss's own attention code in the installed transformers.

- The public ``config.json`` of openai/gpt-oss-20b and -120b (tests/data/hf_sinks, SOURCES.md there)
  map to one spec per layer kind: sinks, window (127, 0) on the even (sliding) layers, causal on the
  odd ones, 64 query heads over 8 KV heads of 64; the same through ``GptOssConfig`` and the CLI.
- The layer rule without ``layer_types`` against ``GptOssConfig.layer_types``; one-line errors for bad
  configs and arguments.
- A tiny random ``GptOssAttention`` (transformers): its ``eager_attention_forward`` in float64 (the
  reference: sink column concatenated, softmax, dropped) against ``tilegen.torch.flash_attn_func`` in
  float32 on CPU (the interpreter) with the window of the from-hf spec and the layer's own ``sinks``,
  output and the gradients of q, k, v and sinks, for a sliding and a full layer.
- A tiny random ``GptOssModel`` with ``attn_implementation="tilegen"`` (sinks through
  ``tilegen.hf_attention``) against ``"eager"``, with a left-padded batch: hidden states and every
  parameter gradient, the sinks' included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilegen.cli import main
from tilegen.core.errors import SpecError
from tilegen.hf import spec_from_hf_config, specs_from_hf_config
from tilegen.core.spec import AttentionSpec, spec_from_dict

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

SINKS = Path(__file__).resolve().parent / "data" / "hf_sinks"
REAL = {"gpt-oss-20b": 24, "gpt-oss-120b": 36}  # layers; attention is the same in both


def _want(name, window, seq=131072, dtype="fp32"):
    return AttentionSpec(
        batch=1, heads_q=64, heads_kv=8, seq_q=seq, seq_k=seq, head_dim_qk=64, head_dim_v=64, dtype=dtype, scale=None,
        window=window, name=name, sinks=True,
    )  # fmt: skip


@pytest.mark.parametrize("model", sorted(REAL))
def test_real_gpt_oss_configs_map_to_one_spec_per_layer_kind(model):
    n = REAL[model]
    groups = specs_from_hf_config(SINKS / model)
    assert groups == [(tuple(range(0, n, 2)), _want(model, (127, 0))), (tuple(range(1, n, 2)), _want(model, (-1, 0)))]
    assert groups[0][1].softmax_scale == 64**-0.5
    assert spec_from_hf_config(SINKS / model, layer=2, seq=4096, dtype="bf16") == _want(model, (127, 0), 4096, "bf16")
    assert spec_from_hf_config(SINKS / model, layer=n - 1, seq=4096) == _want(model, (-1, 0), 4096)
    # A sequence no longer than the window: the sliding layer is plain causal.
    assert spec_from_hf_config(SINKS / model, layer=0, seq=128).window == (-1, 0)
    assert spec_from_hf_config(SINKS / model, layer=0, seq=129).window == (127, 0)
    for _, spec in groups:
        assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec  # the spec file carries sinks = true


def test_gpt_oss_config_object_and_layer_rule_agree_with_transformers():
    transformers = pytest.importorskip("transformers")
    data = json.loads((SINKS / "gpt-oss-20b" / "config.json").read_text())
    config = transformers.GptOssConfig.from_dict(data)
    assert config.layer_types == data["layer_types"]
    want = specs_from_hf_config(data, seq=4096, name="x")
    assert specs_from_hf_config(config, seq=4096, name="x") == want  # the config object, read through to_dict()
    # Without layer_types: GptOssConfig.__post_init__'s rule (even layers slide) for several depths.
    for n in (1, 2, 5, 6):
        config = transformers.GptOssConfig(num_hidden_layers=n, sliding_window=16)
        bare = {k: v for k, v in data.items() if k != "layer_types"} | {"num_hidden_layers": n, "sliding_window": 16}
        ours = [spec_from_hf_config(bare, seq=64, layer=i).mask_kind for i in range(n)]
        assert ours == ["window" if t == "sliding_attention" else "causal" for t in config.layer_types]


def test_cli_maps_gpt_oss_with_layer(capsys, tmp_path):
    assert main(["spec", "--from-hf", str(SINKS / "gpt-oss-20b"), "--layer", "0", "--seq", "4096", "--dtype", "bf16"]) == 0
    text = capsys.readouterr().out
    assert spec_from_dict(tomllib.loads(text)) == _want("gpt-oss-20b", (127, 0), 4096, "bf16")
    assert "sinks = true" in text and "window = [127, 0]" in text
    out = tmp_path / "full.toml"
    assert main(["spec", "--from-hf", str(SINKS / "gpt-oss-120b"), "--layer", "35", "--seq", "4096", "-o", str(out)]) == 0
    assert "with sinks" in capsys.readouterr().out
    assert spec_from_dict(tomllib.loads(out.read_text())) == _want("gpt-oss-120b", (-1, 0), 4096)
    assert main(["spec", "--from-hf", str(SINKS / "gpt-oss-20b"), "--seq", "4096"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "layer_types" in err and "--layer" in err


TINY = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 16, "hidden_size": 64, "num_hidden_layers": 4, "sliding_window": 8, "max_position_embeddings": 256}  # fmt: skip


@pytest.mark.parametrize(
    "cfg,kwargs,field,accepted",
    [
        ({**TINY, "layer_types": ["sliding_attention", "full_attention"]}, {"layer": 0}, "layer_types", "one kind per layer (num_hidden_layers = 4)"),
        ({**TINY, "layer_types": ["chunked_attention"] * 4}, {"layer": 0}, "layer_types", "full_attention or sliding_attention"),
        ({**TINY, "sliding_window": None, "layer_types": ["sliding_attention", "full_attention"] * 2}, {"layer": 0}, "sliding_window", "an integer >= 1 for a sliding_attention layer"),
        ({**TINY, "sliding_window": 0}, {"layer": 0}, "sliding_window", "an integer >= 1"),
        ({**TINY, "num_key_value_heads": 3}, {"layer": 0}, "num_key_value_heads", "a divisor of num_attention_heads = 8"),
        (TINY, {}, "layer_types", "layer=<index>"),
        (TINY, {"layer": 4}, "layer", "an integer from 0 to 3"),
        (TINY, {"layer": 0, "part": "decoder"}, "part", "None"),
    ],
)
def test_bad_gpt_oss_configs_are_named_in_one_line(cfg, kwargs, field, accepted):
    with pytest.raises(SpecError) as info:
        spec_from_hf_config(cfg, **kwargs)
    assert info.value.field == field and accepted in str(info.value) and "\n" not in str(info.value)


# --- against gpt-oss's own attention code ----------------------------------------------------------

GPTOSS = dict(
    vocab_size=97, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=8, sliding_window=4, max_position_embeddings=64, num_local_experts=2, num_experts_per_tok=1,
)  # fmt: skip


def _mask(window, s, torch):
    """transformers' own mask rule of the layer kind (masking_utils), as an additive float64 mask."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    fn = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    idx = torch.arange(s)
    visible = torch.tensor([[bool(fn(0, 0, i, j)) for j in idx] for i in idx])
    return torch.zeros(s, s, dtype=torch.float64).masked_fill(~visible, torch.finfo(torch.float64).min)[None, None]


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "full"])
def test_flash_attn_func_with_sinks_matches_gpt_oss_eager_attention(layer):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, eager_attention_forward

    from tilegen.torch import flash_attn_func

    b, s = 2, 13
    config = transformers.GptOssConfig(**GPTOSS)
    spec = spec_from_hf_config(config, seq=s, batch=b, layer=layer)
    assert spec.sinks and spec.window == ((3, 0) if layer == 0 else (-1, 0))
    torch.manual_seed(0)
    module = GptOssAttention(config, layer_idx=layer).double().eval()
    with torch.no_grad():
        module.sinks.copy_(torch.tensor([-1.0, 0.5, 2.0, 4.0], dtype=torch.float64))  # from negligible to dominant
    g = torch.Generator().manual_seed(1)
    q = torch.randn(b, 4, s, 8, generator=g, dtype=torch.float64) * 2
    k = torch.randn(b, 2, s, 8, generator=g, dtype=torch.float64) * 2
    v = torch.randn(b, 2, s, 8, generator=g, dtype=torch.float64)
    do = torch.randn(b, s, 4, 8, generator=g, dtype=torch.float64)

    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    ref, _ = eager_attention_forward(module, *leaves, _mask(module.sliding_window, s, torch), scaling=module.scaling)  # [B, S, Hq, D]
    ref_grads = torch.autograd.grad(ref, [*leaves, module.sinks], do)

    ours_leaves = [x.transpose(1, 2).float().contiguous().requires_grad_(True) for x in (q, k, v)]  # BSND
    sinks = module.sinks.detach().float().clone().requires_grad_(True)
    out = flash_attn_func(*ours_leaves, softmax_scale=spec.softmax_scale, causal=True, window_size=(spec.window[0], -1), sinks=sinks)
    grads = torch.autograd.grad(out, [*ours_leaves, sinks], do.float())

    torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=2e-5)
    for name, got, want in zip(("dq", "dk", "dv"), grads[:3], ref_grads[:3]):
        torch.testing.assert_close(got.double().transpose(1, 2), want, rtol=2e-5, atol=2e-5, msg=name)
    torch.testing.assert_close(grads[3].double(), ref_grads[3], rtol=2e-5, atol=2e-5, msg="dsinks")
    assert ref_grads[3].abs().min() > 1e-3  # every sink matters here
    # Without the sinks the output differs far beyond the tolerance (the comparison can fail).
    plain = flash_attn_func(*(x.detach() for x in ours_leaves), causal=True, window_size=(spec.window[0], -1))
    assert (plain.double() - ref).abs().max() > 1e-2


def _gpt_oss_model(impl):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = transformers.GptOssModel(transformers.GptOssConfig(**GPTOSS, attn_implementation=impl)).eval()
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.sinks.copy_(torch.tensor([-1.0, 0.5, 2.0, 3.0]))
    return model


def test_gpt_oss_model_through_tilegen_attention_matches_eager(monkeypatch):
    torch = pytest.importorskip("torch")
    import tilegen.hf_attention as hfa

    calls = []
    real = hfa.flash_attn_func

    def counting(*a, **kw):
        calls.append(kw.get("sinks") is not None)
        return real(*a, **kw)

    monkeypatch.setattr(hfa, "flash_attn_func", counting)
    ids = torch.randint(3, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    pad = torch.ones(2, 11, dtype=torch.long)
    pad[1, :3] = 0  # row 1 left-padded
    outs = []
    for impl in ("eager", "tilegen"):
        model = _gpt_oss_model(impl)
        hidden = model(input_ids=ids, attention_mask=pad).last_hidden_state
        w = torch.linspace(-1, 1, hidden.numel()).view_as(hidden) * pad[..., None]
        (hidden * w).sum().backward()
        outs.append((hidden.detach() * pad[..., None], {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (ref, g_ref), (ours, g_ours) = outs
    assert calls and all(calls)  # every layer ran tilegen's kernels, with the sinks
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
    assert g_ref.keys() == g_ours.keys() and {f"layers.{i}.self_attn.sinks" for i in range(2)} <= g_ref.keys()
    top = max(g.abs().max().item() for g in g_ref.values())
    for n in g_ref:
        assert (g_ours[n] - g_ref[n]).abs().max().item() <= 1e-4 * g_ref[n].abs().max().item() + 1e-6 * top, n
