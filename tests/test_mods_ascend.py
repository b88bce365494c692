"""Score and mask mods on the Ascend C backend: the generated kernels run on the hand twin (g++, tilegen's
emulation of the API) and the real-API twin (Huawei's headers over tilegen's CCE layer; skipped without
ASC_DEVKIT and clang++-16), forward and backward, against tests/mod_reference.py (torch, float64 truth
and the plain same-precision variant, mods written as torch functions) under DESIGN §3's rule; the
parameter gradients reduced on the host are bitwise the same for any core count; the host block table
against a dense count; constructs the AIV lowering cannot emit exactly are refused at generate time.
attention-gym's generators: tests/test_mods_ascend_gym.py.

Twin builds are cached by source hash (TILEGEN_TWIN_CACHE); one build per spec, shared by the tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import inputs
from mod_reference import dense
from tilegen.core import mods as M
from tilegen.backends import ascendc
from tilegen.backends.ascendc import twin
from tilegen.harness.check import compare, longest_sum
from tilegen.core.errors import SpecError
from tilegen.core.spec import builtin_spec

pytestmark = pytest.mark.skipif(twin.compiler() is None, reason="no g++ for the CPU twin")

RNG = np.random.default_rng(7)
B, H, S = 2, 2, 160
# [B, S]: with Br = 32, Bc = 64 and the causal window, batch 0 has full tiles, batch 1 empty ones
DOC = np.stack([np.repeat(np.arange(2), [130, 30]), np.repeat(np.arange(3), [40, 60, 60])]).astype(np.int32)
SLOPES = np.array([0.5, 0.125], np.float32)
# tiny-gqa's sizes: Hq = 4, Sq = 48, Sk = 80 (bottom-right offset 32)
GQA_SLOPES = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
GQA_TABLE = (RNG.standard_normal((4, 48 + 80 - 1)) * 0.5).astype(np.float32)
PREFIX = np.array([12], np.int32)


def _spec(base: str, name: str, score: str = "", mask: str = "", params=(), window=(-1, -1), **sizes):
    return builtin_spec(base).replace(name=name, score_mod=score, mask_mod=mask, params=tuple(params), window=window, **sizes)


def _decl(name, shape, dtype="fp32"):
    return M.parse_param_decls({name: {"shape": list(shape), "dtype": dtype}})[0]


# name -> (spec, parameter arrays, torch score_fn, torch mask_fn); the torch functions are the truth's
CASES = {
    # fp16 MHA with tails; softcap 5 (so tanh saturates); per-batch document ids and the causal window
    "softcap-doc-causal": (
        _spec("tiny", "softcap-doc", "5*tanh(score/5)", "doc[b, q_idx] == doc[b, kv_idx]", [_decl("doc", ("B", "Sq"), "int32")], (-1, 0),
              seq_q=S, seq_k=S),
        {"doc": DOC},
        lambda s, b, h, q, k, **p: 5.0 * torch.tanh(s / 5.0),
        lambda b, h, q, k, doc, **p: doc[b, q] == doc[b, k],
    ),
    # bf16 GQA, BSND, Sq != Sk: ALiBi plus a relative-bias table, prefix-LM with a per-batch prefix
    "alibi-relbias-prefix": (
        _spec("tiny-gqa", "alibi-rel-prefix",
              "score - alibi_slopes[h]*abs(q_idx + Sk - Sq - kv_idx) + rel_bias[h, q_idx - kv_idx + Sk - 1]",
              "(kv_idx < prefix_len[b]) | (kv_idx <= q_idx + Sk - Sq)",
              [_decl("alibi_slopes", ("Hq",)), _decl("prefix_len", ("B",), "int32"), _decl("rel_bias", ("Hq", "Sq + Sk - 1"))]),
        {"alibi_slopes": GQA_SLOPES, "rel_bias": GQA_TABLE, "prefix_len": PREFIX},
        lambda s, b, h, q, k, alibi_slopes, rel_bias, **p: s - alibi_slopes[h] * (q + 32 - k).abs() + rel_bias[h, q - k + 79],
        lambda b, h, q, k, prefix_len, **p: (k < prefix_len[b]) | (k <= q + 32),
    ),
}
# a learnable [Sq, 128] table read at (q_idx, kv_idx + 2): its gradient window is Br x Bc entries, wider than any
# UB tile row, and lives in the mods' scratch (sm_g), not among the tiles (tiny: Sq = Sk = 70, causal)
BIAS2D = (RNG.standard_normal((70, 128)) * 0.5).astype(np.float32)
CASES["bias-q-kv-shift"] = (
    _spec("tiny", "bias-q-kv-shift", "score + bias[q_idx, kv_idx + 2]", "", [_decl("bias", ("Sq", 128))], (-1, 0)),
    {"bias": BIAS2D},
    lambda s, b, h, q, k, bias, **p: s + bias[q, k + 2],
    None,
)
# every construct at once (softcap then two biases; document and prefix-LM and the window), for the
# real-API twin, where one build takes about a minute
CASES["everything"] = (
    _spec("tiny", "mods-everything",
          "8*tanh(score/8) - alibi_slopes[h]*abs(q_idx - kv_idx) + rel_bias[h, q_idx - kv_idx + Sk - 1]",
          "(doc[b, q_idx] == doc[b, kv_idx]) & ((kv_idx < 9) | (kv_idx <= q_idx))",
          [_decl("alibi_slopes", ("Hq",)), _decl("doc", ("B", "Sq"), "int32"), _decl("rel_bias", ("Hq", "Sq + Sk - 1"))], (40, 0),
          seq_q=S, seq_k=S),
    {"alibi_slopes": SLOPES, "doc": DOC, "rel_bias": (RNG.standard_normal((2, 2 * S - 1)) * 0.5).astype(np.float32)},
    lambda s, b, h, q, k, alibi_slopes, rel_bias, **p: 8.0 * torch.tanh(s / 8.0) - alibi_slopes[h] * (q - k).abs() + rel_bias[h, q - k + S - 1],
    lambda b, h, q, k, doc, **p: (doc[b, q] == doc[b, k]) & ((k < 9) | (k <= q)),
)

_BUILDS: dict = {}


def _build(name: str, real: bool, dkv_strategy=None):
    key = (name, real, dkv_strategy)
    if key not in _BUILDS:
        spec = CASES[name][0]
        files = ascendc.generate(spec, "ascend910b2", dkv_strategy=dkv_strategy).files
        programs = [p.program for p in ascendc.plan_programs(spec, dkv_strategy=dkv_strategy)[1]]
        exe = twin.build_real(files, os.environ["ASC_DEVKIT"]) if real else twin.build(files)
        _BUILDS[key] = (exe, programs)
    return _BUILDS[key]


def _run(name: str, real: bool = False, blocks: int = 4, dkv_strategy=None):
    spec, params, _, _ = CASES[name]
    exe, programs = _build(name, real, dkv_strategy)
    data = inputs(spec)
    fwd, bwd = twin.run_attention(exe, spec, data, blocks=blocks, params=params, programs=programs)
    return spec, data, fwd, bwd


def _check(name: str, real: bool = False, dkv_strategy=None) -> None:
    spec, params, score_fn, mask_fn = CASES[name]
    spec, data, fwd, bwd = _run(name, real, dkv_strategy=dkv_strategy)
    kw = dict(scale=spec.softmax_scale, score_fn=score_fn, mask_fn=mask_fn, window=spec.window, params=params)
    o, lse, grads = dense(data["Q"], data["K"], data["V"], data["dO"], **kw)
    o_pl, lse_pl, grads_pl = dense(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    n = longest_sum(spec)
    comps = [compare("O", fwd["O"], o, o_pl, spec.dtype, terms=n), compare("L", fwd["L"], lse, lse_pl, "fp32", terms=n)]
    comps += [compare(g, bwd[g], grads[g], grads_pl[g], spec.dtype, terms=n) for g in ("dQ", "dK", "dV")]
    floats = sorted(k for k, v in params.items() if v.dtype.kind == "f")
    assert sorted(bwd.get("dparams", {})) == floats
    comps += [compare("d" + p, bwd["dparams"][p], grads["d" + p], grads_pl["d" + p], "fp32", terms=n) for p in floats]
    bad = [c.line() for c in comps if not c.ok]
    assert not bad, "\n".join(bad)
    # the mods matter: attention without them is far from the output
    o_plain, _, _ = dense(data["Q"], data["K"], data["V"], scale=spec.softmax_scale, window=spec.window)
    assert np.abs(np.asarray(fwd["O"], np.float64) - o_plain).max() > 10 * comps[0].max_abs


@pytest.mark.parametrize("name", ["softcap-doc-causal", "alibi-relbias-prefix"])
@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_hand_twin_forward_and_backward_match_the_reference(name, dkv_strategy):
    _check(name, dkv_strategy=dkv_strategy)


def _dbias_shifted(data, o, bias, scale, work):
    """d(bias) of score + bias[q, kv + 2] under the causal window, computed in ``work`` (NumPy dtype) by
    the numerical contract (DESIGN.md, "Backward"): P = softmax(S), dP = dO Vᵀ, D = rowsum(dO ∘ O) of the
    given O, dS = P ∘ (dP − D), summed over (b, h) into the entry each pair reads."""
    q, k, v, do = (np.asarray(data[n]).astype(work) for n in ("Q", "K", "V", "dO"))
    sq, sk = q.shape[2], k.shape[2]
    qi, ki = np.arange(sq)[:, None], np.arange(sk)[None, :]
    s = work(scale) * (q @ np.swapaxes(k, -1, -2)) + bias.astype(work)[qi, ki + 2]
    s = np.where(ki <= qi + sk - sq, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    d = (do * np.asarray(o).astype(work)).sum(-1)
    ds = (p * (do @ np.swapaxes(v, -1, -2) - d[..., None])).sum(axis=(0, 1))
    out = np.zeros(bias.shape, work)
    np.add.at(out, (np.broadcast_to(qi, ds.shape), np.broadcast_to(ki + 2, ds.shape)), ds)
    return out


def test_learnable_table_at_q_and_shifted_kv_generates_and_matches_the_reference():
    """Before its gradient window was kept out of the UB tiles, generate refused this spec ("the row
    broadcast of main needs 256 bytes of UB scratch, 0 are left"). On the hand twin: O, L, dQ/dK/dV
    against the float64 reference (autograd), and d(bias) against a float64 evaluation of the backward's
    contract from the kernel's stored fp16 O (D = rowsum(dO ∘ O) of the stored O: a table entry gets one
    dS per (b, h), so the O's rounding in D shows in it undiluted, about 2x plain autograd's error)."""
    spec, params, score_fn, _ = CASES["bias-q-kv-shift"]
    spec, data, fwd, bwd = _run("bias-q-kv-shift")
    kw = dict(scale=spec.softmax_scale, score_fn=score_fn, window=spec.window, params=params)
    o, lse, grads = dense(data["Q"], data["K"], data["V"], data["dO"], **kw)
    o_pl, lse_pl, grads_pl = dense(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    n = longest_sum(spec)
    comps = [compare("O", fwd["O"], o, o_pl, spec.dtype, terms=n), compare("L", fwd["L"], lse, lse_pl, "fp32", terms=n)]
    comps += [compare(g, bwd[g], grads[g], grads_pl[g], spec.dtype, terms=n) for g in ("dQ", "dK", "dV")]
    assert sorted(bwd["dparams"]) == ["bias"]
    ref = _dbias_shifted(data, fwd["O"], params["bias"], spec.softmax_scale, np.float64)
    plain = _dbias_shifted(data, fwd["O"], params["bias"], spec.softmax_scale, np.float32)
    comps.append(compare("dbias", bwd["dparams"]["bias"], ref, plain, "fp32", terms=n))
    bad = [c.line() for c in comps if not c.ok]
    assert not bad, "\n".join(bad)
    assert np.abs(grads["dbias"]).max() > 0.1 and np.abs(ref - grads["dbias"]).max() < 0.01 * np.abs(grads["dbias"]).max()


def test_parameter_gradients_are_bitwise_equal_for_any_core_count():
    """The tiles land on other cores (4 vs 3 AI Cores): the host's fixed-order reduction gives the same bits."""
    _, _, _, a = _run("alibi-relbias-prefix", blocks=4)
    _, _, _, b = _run("alibi-relbias-prefix", blocks=3)
    for p in a["dparams"]:
        assert np.array_equal(a["dparams"][p].view(np.uint32), b["dparams"][p].view(np.uint32)), p


def _real_api_missing() -> str:
    devkit = os.environ.get("ASC_DEVKIT")
    if not devkit or not (Path(devkit) / "include" / "kernel_operator.h").is_file():
        return "ASC_DEVKIT (an asc-devkit snapshot)"
    return "" if twin.real_compiler() else "clang++-16"


@pytest.mark.skipif(bool(_real_api_missing()), reason=f"real-API twin needs {_real_api_missing()}")
@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_real_api_twin_runs_every_construct(dkv_strategy):
    _check("everything", real=True, dkv_strategy=dkv_strategy)


def test_block_table_counts_visible_pairs():
    """The block table the classify kernel writes on the twin against a dense count of the visible
    (query, key) pairs of each tile; the case has empty, partial and full tiles, so the kernels skip some
    and mask others."""
    spec, params, _, mask_fn = CASES["softcap-doc-causal"]
    fwd_program = _build("softcap-doc-causal", False)[1][0]
    _, _, fwd, _ = _run("softcap-doc-causal")
    table = fwd["BM"]
    env = {str(k): int(v) for k, v in fwd_program.env}
    br, bc = env["Br"], env["Bc"]
    q = torch.arange(S).view(1, 1, S, 1)
    k = torch.arange(S).view(1, 1, 1, S)
    vis = (mask_fn(torch.arange(B).view(B, 1, 1, 1), None, q, k, doc=torch.tensor(DOC, dtype=torch.int64)) & (k <= q)).numpy()[:, 0]
    want = np.zeros(table.shape, np.float32)
    for bi in range(B):
        for i in range(table.shape[2]):
            for j in range(table.shape[3]):
                blk = np.zeros((br, bc), bool)
                part = vis[bi, i * br:(i + 1) * br, j * bc:(j + 1) * bc]
                blk[: part.shape[0], : part.shape[1]] = part
                want[bi, 0, i, j] = 2 if blk.all() else (1 if blk.any() else 0)
    assert table.shape == (B, 1, -(-S // br), -(-S // bc))
    np.testing.assert_array_equal(table, want)
    assert {0.0, 1.0, 2.0} <= set(np.unique(table).tolist())


@pytest.mark.parametrize(
    "score, mask, fragment",
    [
        ("", "bitwise_and(kv_idx, 4294967296) == 0", "a bit operation with the constant 4294967296, outside int32"),
    ],
)
def test_unsupported_constructs_are_refused_at_generate_time(score, mask, fragment):
    """What the vector ISA cannot do exactly is refused at generate time, one line naming the operation
    (the general lowering takes every other construct of the language)."""
    spec = _spec("tiny", "refused", score, mask)
    with pytest.raises(SpecError) as exc:
        ascendc.generate(spec, "ascend910b2")
    text = str(exc.value)
    assert fragment in text and "\n" not in text and "for the Ascend C backend" in text, text


def test_a_parameter_dimension_may_be_one_size():
    """A declared shape ["Hq"] (one size alone) is a number of the language, not a boolean."""
    (decl,) = M.parse_param_decls({"slopes": {"shape": ["Hq"], "dtype": "fp32"}})
    assert decl.concrete_shape({"Hq": 3}) == (3,)


def test_prefix_lm_runs_on_the_interpreter():
    """A mask of or-ed comparisons whose sides broadcast to different shapes (kv_idx < n | kv_idx <= q_idx):
    the NumPy evaluation of the mod language reduces and/or pairwise."""
    import tilegen

    data = inputs(builtin_spec("tiny"))
    q, k, v = (data[n].astype(np.float32) for n in "QKV")
    o = tilegen.attention(q, k, v, mask_mod=M.prefix_lm(20))
    o = o[0] if isinstance(o, tuple) else o
    ref, _, _ = dense(q, k, v, scale=1 / np.sqrt(32), mask_fn=lambda b, h, qi, ki, **p: (ki < 20) | (ki <= qi))
    assert np.abs(np.asarray(o, np.float64) - ref).max() < 1e-5
