"""Score and mask mods in the Triton backend (issue 13), run in Triton's interpreter on CPU tensors.

Every case is checked against tests/mod_reference.py: dense attention in torch with the mods written
there as torch functions (not through tilegen.mods), float64 truth and the plain same-precision variant,
parameter gradients by torch autograd, under DESIGN §3's accuracy rule (tilegen.harness.check.compare). Outputs
and workspaces are NaN-poisoned before every run. Cases: softcap (with a causal window), ALiBi with its
slopes' gradient (GQA), relative bias with its table's gradient (Sq != Sk), document ∧ causal with an
empty K/V tile and full tiles, prefix-LM (a mask of indices alone), a user-written mod (two biases, a
document mask and a sliding window), a document mask that leaves a whole Q tile without a key; fp32,
fp16 and bf16; both dQ strategies. The tile lists are checked against the mask computed here with
NumPy, the kernels are shown to walk them, and parameter gradients are bitwise equal across runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest
import torch

import mod_reference
from helpers import inputs, make_spec
from tilegen.core import mods as M
from tilegen.harness.check import compare, longest_sum, lse_rel_floor
from tilegen.core.spec import AttentionSpec

pytest.importorskip("triton")
from test_triton import _to_numpy, _to_torch  # noqa: E402


@pytest.fixture(scope="module")
def tb():
    from tilegen.backends import triton as backend

    return backend


def _spec(score_mod, mask_mod, **fields):
    score, mask, decls, window, arrays = M.mods_from_api(score_mod, mask_mod)
    base = dict(score_mod=score, mask_mod=mask, params=decls)
    if window != (-1, -1):
        base["window"] = window
    base.update(fields)
    return make_spec(**base), arrays


def _run(tb, spec, arrays, tiles, strategy="atomic", seed=0):
    module = tb.load(spec, dq_strategy=strategy, tile_sizes=tiles)
    data = inputs(spec, seed=seed)
    q, k, v, do = (_to_torch(data[n]) for n in ("Q", "K", "V", "dO"))
    params = {n: torch.as_tensor(np.asarray(a)) for n, a in arrays.items()}
    o, lse = module.forward(q, k, v, params=params, poison=True)
    out = module.backward(q, k, v, o, lse, do, params=params, poison=True)
    return module, data, params, _to_numpy(o), lse.numpy(), out


def _check(spec, data, arrays, o, lse, out, score_fn=None, mask_fn=None):
    """O, L, dQ, dK, dV and every float parameter's gradient within DESIGN §3's rule."""
    x = {n: np.asarray(data[n], dtype=np.float64) for n in ("Q", "K", "V", "dO")}
    kw = dict(scale=spec.softmax_scale, score_fn=score_fn, mask_fn=mask_fn, window=spec.window, params=arrays)
    o_ref, l_ref, g_ref = mod_reference.dense(x["Q"], x["K"], x["V"], x["dO"], **kw)
    o_pl, l_pl, g_pl = mod_reference.dense(x["Q"], x["K"], x["V"], x["dO"], dtype=spec.dtype, **kw)
    n = longest_sum(spec)
    for comp in (compare("O", o, o_ref, o_pl, spec.dtype, terms=n), compare("L", lse, l_ref, l_pl, "fp32", terms=n)):
        assert comp.ok, comp.line()
    floor = lse_rel_floor(l_ref)
    for name, ours in zip(("dQ", "dK", "dV"), out[:3]):
        ours = _to_numpy(ours)
        assert not np.isnan(np.asarray(ours, dtype=np.float32)).any(), f"NaN in {name}"
        comp = compare(name, ours, g_ref[name], g_pl[name], spec.dtype, rel_floor=floor, terms=n)
        assert comp.ok, comp.line()
    grads = {k[1:]: v for k, v in g_ref.items() if k not in ("dQ", "dK", "dV")}
    if grads:
        assert len(out) == 4 and sorted(out[3]) == sorted(grads)
        for name, ref in grads.items():
            ours = out[3][name].numpy()
            assert ours.dtype == np.float32 and ours.shape == ref.shape
            # dS′ comes from P and D = rowsum(dO∘O) of a run in the spec's dtype (O rounded to it), so
            # the floor is that dtype's ulp at the gradient's scale, as for dQ, dK, dV
            comp = compare("d" + name, ours, ref, g_pl["d" + name], spec.dtype, rel_floor=floor, terms=spec.seq_q * spec.seq_k)
            assert comp.ok, comp.line()
    else:
        assert len(out) == 3
    return o_ref, l_ref


# --- reference mods, written with torch on index grids ------------------------------------------------


def _softcap(s, b, h, qi, ki):
    return 30.0 * torch.tanh(s / 30.0)


def _alibi(s, b, h, qi, ki, alibi_slopes, sq, sk):
    return s - alibi_slopes[h] * (qi + sk - sq - ki).abs()


def _doc_mask(b, h, qi, ki, doc, **_):
    return doc[qi] == doc[ki]


def _doc_ids(lengths):
    return np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)


def test_softcap_causal_bf16(tb):
    spec, arrays = _spec(M.softcap(30.0), M.causal(), dtype="bf16", seq_q=40, seq_k=48)
    module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 32))
    _check(spec, data, arrays, o, lse, out, score_fn=_softcap)
    src = open(module.__file__, encoding="utf-8").read()  # the text tb.render gives (tb.load writes it)
    assert "_tanh(" in src and "tl.exp2(" in src  # log2(e) applied after the mod, not through it
    assert "tiles the mask leaves whole" in src  # no mask mod: the window's segments stay


def test_alibi_slopes_gradient_gqa_fp32(tb):
    slopes = np.array([0.5, 0.25], dtype=np.float32)
    spec, arrays = _spec(M.alibi(slopes), M.causal(), dtype="fp32", heads_q=2, heads_kv=1, seq_q=48, seq_k=48)
    module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 32))
    sq, sk = spec.seq_q, spec.seq_k
    _check(spec, data, arrays, o, lse, out, score_fn=lambda s, b, h, qi, ki, **p: _alibi(s, b, h, qi, ki, p["alibi_slopes"], sq, sk))


def test_relative_bias_and_bucketed_bias_gradients_are_deterministic(tb):
    """score + rel_bias[h, q − kv + Sk − 1] + bucket[h, (q − kv) // 8 + 7] with Sq != Sk: two tables
    whose bins read both indices (the one-hot reduction), the second through a floor division of a
    negative numerator (Triton's // truncates; the kernel must floor)."""
    rng = np.random.default_rng(1)
    table = M.param("rel_bias", (0.5 * rng.standard_normal((2, 24 + 40 - 1))).astype(np.float32))
    bucket = M.param("bucket", (0.5 * rng.standard_normal((2, 12))).astype(np.float32))

    def score_mod(score, b, h, q_idx, kv_idx):
        return M.relative_bias(table)(score, b, h, q_idx, kv_idx) + bucket[h, (q_idx - kv_idx) // 8 + 7]

    spec, arrays = _spec(score_mod, None, dtype="fp32", seq_q=24, seq_k=40)
    module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 16))
    sk = spec.seq_k
    _check(spec, data, arrays, o, lse, out, score_fn=lambda s, b, h, qi, ki, rel_bias, bucket: s + rel_bias[h, qi - ki + sk - 1] + bucket[h, (qi - ki) // 8 + 7])
    q, k, v, do = (_to_torch(data[n]) for n in ("Q", "K", "V", "dO"))
    again = module.backward(q, k, v, torch.from_numpy(o), torch.from_numpy(lse), do, params=params)
    for name in ("rel_bias", "bucket"):
        assert out[3][name].numpy().tobytes() == again[3][name].numpy().tobytes()  # bitwise, run after run
    src = open(module.__file__, encoding="utf-8").read()
    assert "_floor_div(" in src
    # no float atomics reach a parameter gradient: the only atomic adds are the dQ accumulator's
    atomics = [line for line in src.splitlines() if "tl.atomic_add(" in line]
    assert atomics and all("tl.atomic_add(dQ_ws_ptr" in line for line in atomics)


def test_document_causal_skips_empty_tiles_fp16(tb):
    doc = _doc_ids([16, 40, 8])  # 64 keys in 16-wide tiles: some tiles full, some cut, some empty
    spec, arrays = _spec(None, M.document(doc) & M.causal(), dtype="fp16", seq_q=64, seq_k=64)
    module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 16))
    _check(spec, data, arrays, o, lse, out, mask_fn=_doc_mask)
    # the lists the launches walk, against the tile classes computed here from the dense mask
    q = _to_torch(data["Q"])
    for kind in ("fwd", "bwd"):
        lists = module.block_lists(kind, q, params=params)
        r = np.arange(64)
        vis = (doc[r][:, None] == doc[r][None, :]) & (r[None, :] <= r[:, None])
        tiles = vis.reshape(4, 16, 4, 16).transpose(0, 2, 1, 3).reshape(4, 4, -1)
        want = np.where(tiles.all(-1), 2, np.where(tiles.any(-1), 1, 0))
        assert np.array_equal(lists["BM"].numpy()[0, 0], want)
        for row in range(4):
            nonempty = np.nonzero(want[row])[0]
            assert lists["BM_kvn"][0, 0, row] == len(nonempty)
            assert lists["BM_kvi"][0, 0, row, : len(nonempty)].tolist() == nonempty.tolist()
            cols = np.nonzero(want[:, row])[0]
            assert lists["BM_qi"][0, 0, row, : len(cols)].tolist() == cols.tolist()
        assert (want == 0).sum() >= 6 and (want == 2).sum() >= 1  # the case has empty and full tiles


def test_kernels_walk_the_lists(tb, monkeypatch):
    """The forward visits exactly the tiles of its lists: with every list emptied, every row gets
    O = 0 and L = −inf; with tile 0 dropped from row 3's list, rows 48.. lose the keys of document 0."""
    doc = _doc_ids([16, 40, 8])
    spec, arrays = _spec(None, M.document(doc) & M.causal(), dtype="fp16", seq_q=64, seq_k=64)
    module = tb.load(spec, tile_sizes=(16, 16))
    data = inputs(spec)
    q, k, v = (_to_torch(data[n]) for n in ("Q", "K", "V"))
    params = {"doc": torch.from_numpy(doc)}
    original = module._block_lists

    def none_visible(bm):
        out = original(bm)
        out["BM_kvn"] = torch.zeros_like(out["BM_kvn"])
        return out

    monkeypatch.setattr(module, "_block_lists", none_visible)
    o, lse = module.forward(q, k, v, params=params, poison=True)
    assert (o.float() == 0).all() and (lse == float("-inf")).all()
    monkeypatch.setattr(module, "_block_lists", original)
    o_full, _ = module.forward(q, k, v, params=params)
    assert (o_full.float() != 0).any()


def test_prefix_lm_index_only_mask_and_printed_constructs_bf16(tb):
    """Prefix-LM with a prefix per query head, 10 + 12·h (a mask of indices alone whose tile classes
    differ between the two query heads of the one KV head: GQA with a per-head table), with a score mod
    that goes through the printer's other
    constructs: where, %, a square root (and its derivative's negative power), abs and min of indices,
    exp of an integer expression, a number to the power of an index."""

    def score_mod(score, b, h, q_idx, kv_idx):
        decay = M.exp(-(abs(q_idx - kv_idx) // 4)) * 2 ** (-h)  # exp of an integer; a number to an index power
        return score * M.where(q_idx % 3 == 0, 0.5, 1.0) + 0.1 * M.sqrt(1 + score * score) - 0.01 * M.minimum(abs(q_idx - kv_idx), 16) + decay

    def ref_score(s, b, h, qi, ki):
        decay = torch.exp(-((qi - ki).abs() // 4).double()) * 2.0 ** (-h.double())
        return s * torch.where(qi % 3 == 0, 0.5, 1.0) + 0.1 * torch.sqrt(1 + s * s) - 0.01 * torch.clamp((qi - ki).abs(), max=16) + decay.to(s.dtype)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < 10 + 12 * h) | (kv_idx <= q_idx)

    spec, arrays = _spec(score_mod, mask_mod, dtype="bf16", seq_q=40, seq_k=40, heads_q=2, heads_kv=1)
    assert spec.mods.index_only_mask and spec.mods.mask_depends() == (False, True)
    module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 16))
    _check(spec, data, arrays, o, lse, out, score_fn=ref_score, mask_fn=lambda b, h, qi, ki: (ki < 10 + 12 * h) | (ki <= qi))
    bm = module.block_lists("bwd", _to_torch(data["Q"]))["BM"]
    assert bm.shape[1] == 2 and bm[0, 0, 0, 1] == 0 and bm[0, 1, 0, 1] == 1  # head 0 skips tile (0, 1), head 1 visits it
    # a mask of indices alone: the table and lists are computed once per device and reused
    assert module.block_lists("fwd", _to_torch(data["Q"]))["BM"] is module.block_lists("fwd", _to_torch(data["Q"]))["BM"]


def test_user_mod_bias_document_window_fp16_both_strategies(tb):
    """score + bias[h, kv_idx] + rowb[q_idx]·(q_idx − kv_idx)/16 (a K/V-only and a Q-only gradient window) under a
    document mask and a sliding window (16, 0)."""
    rng = np.random.default_rng(2)
    bias = M.param("bias", (0.3 * rng.standard_normal((2, 40))).astype(np.float32))
    rowb = M.param("rowb", (0.3 * rng.standard_normal(40)).astype(np.float32))
    doc = M.param("doc", _doc_ids([12, 18, 10]))

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h, kv_idx] + rowb[q_idx] * (q_idx - kv_idx) / 16

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & M.sliding_window(16, 0)(b, h, q_idx, kv_idx)

    spec, arrays = _spec(score_mod, mask_mod, dtype="fp16", seq_q=40, seq_k=40)

    def ref_score(s, b, h, qi, ki, bias, rowb, doc):
        return s + bias[h, ki] + rowb[qi] * (qi - ki) / 16

    def ref_mask(b, h, qi, ki, bias, rowb, doc):
        return (doc[qi] == doc[ki]) & (ki >= qi - 16) & (ki <= qi)

    for strategy in ("atomic", "separate"):
        module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 16), strategy=strategy)
        _check(spec, data, arrays, o, lse, out, score_fn=ref_score, mask_fn=ref_mask)
        src = open(module.__file__, encoding="utf-8").read()
        assert "for t_j in range(0, n_j):" in src and "for t_i in range(0, n_i):" in src  # sparse loops


def test_empty_rows_and_empty_q_tile_with_alibi(tb):
    """Queries 32..47 belong to a document no key has: a whole Q tile with no visible key (O = 0,
    L = −inf, dQ = 0) beside rows that see keys, with the slopes' gradient."""
    doc_q = np.array([0] * 12 + [1] * 20 + [9] * 16, dtype=np.int32)
    doc_k = np.array([0] * 16 + [1] * 24, dtype=np.int32)
    slopes = np.array([0.3, 0.1], dtype=np.float32)
    spec, arrays = _spec(M.alibi(slopes), M.document(doc_q, doc_k), dtype="fp32", seq_q=48, seq_k=40)
    module, data, params, o, lse, out = _run(tb, spec, arrays, (16, 16))
    sq, sk = spec.seq_q, spec.seq_k
    _check(
        spec, data, arrays, o, lse, out,
        score_fn=lambda s, b, h, qi, ki, alibi_slopes, doc, doc_kv: _alibi(s, b, h, qi, ki, alibi_slopes, sq, sk),
        mask_fn=lambda b, h, qi, ki, alibi_slopes, doc, doc_kv: doc[qi] == doc_kv[ki],
    )
    assert (o[:, :, 32:] == 0).all() and (lse[:, :, 32:] == -np.inf).all()
    assert (out[0].numpy()[:, :, 32:] == 0).all()
    lists = module.block_lists("fwd", _to_torch(data["Q"]), params=params)
    assert lists["BM_kvn"][0, 0, 2] == 0  # Q tile 2 visits no K/V tile


def test_missing_parameter_is_named(tb):
    spec, arrays = _spec(M.alibi(np.ones(2, dtype=np.float32)), None, dtype="fp32", seq_q=16, seq_k=16)
    module = tb.load(spec, tile_sizes=(16, 16))
    x = torch.zeros(1, 2, 16, 32)
    with pytest.raises(ValueError, match=r"params\['alibi_slopes'\] is missing; accepted: a torch.float32 tensor of shape \(2,\)"):
        module.forward(x, x, x)
    with pytest.raises(ValueError, match=r"params\['slopes'\] is invalid; accepted: the parameters alibi_slopes"):
        module.forward(x, x, x, params={"alibi_slopes": torch.ones(2), "slopes": torch.ones(2)})


def test_a_parameter_shape_of_one_size_parses():
    """``shape = ["Sk"]`` in a spec file (tilegen/specs/softcap-doc.toml): a bare size is a number, not a
    boolean (every sympy Symbol is a sympy Boolean)."""
    from tilegen.core.ir import Sk
    from tilegen.core.spec import builtin_spec

    (decl,) = M.parse_param_decls({"doc": {"shape": ["Sk"], "dtype": "int32"}})
    assert decl.shape == (Sk,)
    spec = builtin_spec("softcap-doc")
    assert spec.mods.index_only_mask is False and spec.params[0].concrete_shape({"Sk": spec.seq_k}) == (spec.seq_k,)


def test_interpreter_evaluates_an_or_mask():
    """The NumPy API (interpreter) with prefix-LM, an Or of comparisons of a row and a column index:
    mods.evaluate broadcasts its operands first (lambdify's logical_or.reduce stacks them)."""
    import tilegen

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 24, 16)).astype(np.float32) for _ in range(3))
    o, _ = tilegen.attention(q, k, v, mask_mod=M.prefix_lm(4))
    ref, _, _ = mod_reference.dense(q, k, v, scale=0.25, mask_fn=lambda b, h, qi, ki: (ki < 4) | (ki <= qi))
    assert np.abs(o - ref).max() < 1e-5
