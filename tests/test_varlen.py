"""Packed variable-length batches (cu_seqlens, TND) and learnable attention sinks, on the interpreter.

The truth runs each sequence on its own: a dense attention written here in torch (float64, autograd for
dq, dk, dv, dsinks and the ALiBi slopes), with causal/window aligned bottom-right within the sequence,
FlashAttention's softcap and ALiBi, and the sink as one more logit column that carries no value
(gpt-oss's eager attention in transformers: ``torch.cat([scores, sinks])``, softmax, drop the column).
Nothing here imports tilegen's mods or builds its masks. The same code with ``dtype`` set is the plain
same-precision implementation of DESIGN §3's accuracy rule.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilegen
from tilegen.core import dtypes
from tilegen.harness.check import compare, lse_rel_floor
from tilegen.core.errors import SpecError
from tilegen.backends import compile_backward, compile_forward

from mod_reference import _RoundGrad

TILES = (16, 16)
_T = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def reference(q, k, v, do, cu_q, cu_k, *, scale, causal=False, window=(-1, -1), softcap=None, slopes=None, sinks=None, dtype=None):
    """(o [Tq, Hq, Dv], lse [Hq, Tq], grads) as float64 NumPy, each sequence attended densely on its own.

    Tokens outside every sequence: o = 0, lse = -inf, zero gradients. grads: dq, dk, dv, and dsinks /
    dslopes when given (torch autograd over the sum of every sequence's loss)."""
    work = torch.float64 if dtype is None else torch.float32
    low = None if dtype is None else _T[dtype]
    tq, tk, tv = (torch.tensor(np.asarray(x, dtype=np.float64), dtype=work, requires_grad=True) for x in (q, k, v))
    tdo = torch.tensor(np.asarray(do, dtype=np.float64), dtype=work)
    tsink = None if sinks is None else torch.tensor(np.asarray(sinks, np.float64), dtype=work, requires_grad=True)
    tslope = None if slopes is None else torch.tensor(np.asarray(slopes, np.float64), dtype=work, requires_grad=True)
    tot_q, hq, _ = tq.shape
    hkv, dv = tk.shape[1], tv.shape[2]
    g = hq // hkv
    o_all = torch.zeros(tot_q, hq, dv, dtype=work)
    lse_all = torch.full((hq, tot_q), float("-inf"), dtype=work)
    loss = torch.zeros((), dtype=work)
    left, right = (window[0], 0) if causal else window
    for s in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        sq, sk = q1 - q0, k1 - k0
        if sq == 0:
            continue
        qs = tq[q0:q1].transpose(0, 1)  # [Hq, sq, D]
        ks = tk[k0:k1].transpose(0, 1).repeat_interleave(g, dim=0)
        vs = tv[k0:k1].transpose(0, 1).repeat_interleave(g, dim=0)
        if low is not None:
            qs, ks = qs.to(low).to(work), ks.to(low).to(work)
        sc = scale * (qs @ ks.transpose(-1, -2))  # [Hq, sq, sk]
        if softcap:
            sc = softcap * torch.tanh(sc / softcap)
        i = torch.arange(sq).view(1, sq, 1)
        j = torch.arange(sk).view(1, 1, sk)
        if tslope is not None:
            sl = tslope if tslope.dim() == 1 else tslope[s]
            sc = sc - sl.view(hq, 1, 1) * (i + sk - sq - j).abs()
        vis = torch.ones(1, sq, sk, dtype=torch.bool)
        if left >= 0:
            vis = vis & (j >= i + sk - sq - left)
        if right >= 0:
            vis = vis & (j <= i + sk - sq + right)
        sc = torch.where(vis, sc, torch.tensor(float("-inf"), dtype=work))
        full = sc if tsink is None else torch.cat([sc, tsink.view(hq, 1, 1).expand(hq, sq, 1)], dim=-1)
        m = full.amax(dim=-1, keepdim=True) if full.shape[-1] else torch.full((hq, sq, 1), float("-inf"), dtype=work)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
        e = torch.exp(full - m)
        tot = e.sum(dim=-1, keepdim=True)
        safe = torch.where(tot > 0, tot, torch.ones_like(tot))
        p = torch.where(tot > 0, e[..., :sk] / safe, torch.zeros_like(e[..., :sk]))
        lse = torch.where(tot[..., 0] > 0, torch.log(safe[..., 0]) + m[..., 0], torch.tensor(float("-inf"), dtype=work))
        if low is not None:
            o = (_RoundGrad.apply(p, low).to(low).to(work) @ vs.to(low).to(work)).to(low).to(work)
        else:
            o = p @ vs
        o_all[q0:q1] = o.transpose(0, 1).detach()
        lse_all[:, q0:q1] = lse.detach()
        loss = loss + (o * tdo[q0:q1].transpose(0, 1)).sum()
    if loss.requires_grad:
        loss.backward()
    grads = {n: (t.grad.numpy() if t.grad is not None else np.zeros(t.shape)) for n, t in (("dq", tq), ("dk", tk), ("dv", tv))}
    if tsink is not None:
        grads["dsinks"] = tsink.grad.numpy() if tsink.grad is not None else np.zeros(tsink.shape)
    if tslope is not None:
        grads["dslopes"] = tslope.grad.numpy() if tslope.grad is not None else np.zeros(tslope.shape)
    return o_all.numpy(), lse_all.numpy(), grads


def _data(tq, tk, hq, hkv, d, dtype, seed=0, dv=None):
    rng = np.random.default_rng(seed)
    nd = dtypes.numpy_dtype(dtype)
    dv = d if dv is None else dv
    return (rng.standard_normal((tq, hq, d)).astype(nd), rng.standard_normal((tk, hkv, d)).astype(nd),
            rng.standard_normal((tk, hkv, dv)).astype(nd), rng.standard_normal((tq, hq, dv)).astype(nd))


def _run(q, k, v, do, cu_q, cu_k, *, dtype, causal=False, window=(-1, -1), softcap=None, slopes=None, sinks=None):
    """tilegen's forward and backward against the reference under DESIGN §3's rule; returns ours."""
    kw = dict(causal=causal, window=window, softcap=softcap, alibi_slopes=slopes, sinks=sinks)
    o, lse = tilegen.attention_varlen(q, k, v, cu_q, cu_k, tile_sizes=TILES, **kw)
    res = tilegen.attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, tile_sizes=TILES, **kw)
    scale = q.shape[-1] ** -0.5
    rkw = dict(scale=scale, causal=causal, window=window, softcap=softcap, slopes=slopes, sinks=sinks)
    ro, rl, rg = reference(q, k, v, do, cu_q, cu_k, **rkw)
    po, pl, pg = reference(q, k, v, do, cu_q, cu_k, dtype=dtype, **rkw)
    n = max(q.shape[0], k.shape[0], q.shape[2])
    assert o.shape == (q.shape[0], q.shape[1], v.shape[2]) and o.dtype == q.dtype
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == np.float32
    for name, ours, ref, plain, dt in (("O", o, ro, po, dtype), ("L", lse, rl, pl, "fp32")):
        c = compare(name, ours, ref, plain, dt, terms=n)
        assert c.ok, c.line()
    floor = lse_rel_floor(rl)
    names = ["dq", "dk", "dv"] + (["dsinks"] if sinks is not None else []) + (["dslopes"] if slopes is not None else [])
    assert len(res) == len(names)
    for name, ours in zip(names, res):
        assert not np.isnan(np.asarray(ours, np.float32)).any(), name
        c = compare(name, ours, rg[name], pg[name], dtype if name in ("dq", "dk", "dv") else "fp32", rel_floor=floor, terms=n * n)
        assert c.ok, c.line()
    return o, lse, res


ISSUE_CU_Q = np.array([0, 0, 1, 1, 3], np.int32)  # the issue's example: empty Q, empty K, length 1
ISSUE_CU_K = np.array([0, 3, 3, 8, 8], np.int32)


@pytest.mark.parametrize("causal, sinks", [(False, False), (False, True), (True, True)])
def test_issue_example_empty_sequences_gqa_d64(causal, sinks):
    q, k, v, do = _data(3, 8, 9, 3, 64, "fp32")
    sk = np.linspace(-1.0, 1.5, 9).astype(np.float32) if sinks else None
    o, lse, res = _run(q, k, v, do, ISSUE_CU_Q, ISSUE_CU_K, dtype="fp32", causal=causal, sinks=sk)
    # sequence 1 (query token 0) has no key: O = 0, L = -inf (sigma_h with sinks), zero dq
    assert np.all(o[0] == 0) and np.all(res[0][0] == 0)
    assert np.array_equal(lse[:, 0], sk if sinks else np.full(9, -np.inf, np.float32))


# lengths below and above a 16-row tile, Sq_s != Sk_s, one Sq_s = 0, one Sk_s = 0, and trailing
# tokens outside every sequence (4 queries, 3 keys)
CU_Q = np.array([0, 5, 5, 25, 28, 41], np.int32)  # Sq_s = 5, 0, 20, 3, 13; total_q = 45
CU_K = np.array([0, 9, 12, 30, 30, 52], np.int32)  # Sk_s = 9, 3, 18, 0, 22; total_k = 55


@pytest.mark.parametrize("dtype, causal, window, d", [
    ("fp32", True, (-1, -1), 80),
    ("fp16", False, (4, 2), 32),
    ("bf16", True, (6, -1), 32),
])
def test_lengths_across_tiles_causal_window_dtypes(dtype, causal, window, d):
    q, k, v, do = _data(45, 55, 4, 2, d, dtype, seed=1)
    for x, n in ((q, 41), (k, 52), (v, 52), (do, 41)):
        x[n:] = np.nan  # tokens outside every sequence hold garbage: never read
    o, lse, res = _run(q, k, v, do, CU_Q, CU_K, dtype=dtype, causal=causal, window=window)
    # tokens outside every sequence: o = 0, lse = -inf, zero gradients (DESIGN §3)
    assert np.all(o[41:] == 0) and np.all(np.isneginf(lse[:, 41:])) and np.all(res[0][41:] == 0)
    assert np.all(res[1][52:] == 0) and np.all(res[2][52:] == 0)


@pytest.mark.parametrize("slopes_shape", ["heads", "per_sequence"])
def test_softcap_alibi_and_sinks_with_gradients(slopes_shape):
    q, k, v, do = _data(45, 55, 4, 2, 32, "fp32", seed=2)
    q = (q * 3).astype(q.dtype)  # scores past the cap
    base = (2.0 ** (-8.0 * (np.arange(4) + 1) / 4)).astype(np.float32)
    slopes = base if slopes_shape == "heads" else (base[None] * np.arange(1, 6)[:, None]).astype(np.float32)
    sinks = np.array([0.5, -0.25, 2.0, 1.0], np.float32)
    _run(q, k, v, do, CU_Q, CU_K, dtype="fp32", causal=True, softcap=5.0, slopes=slopes, sinks=sinks)


def test_sinks_bf16_window_and_dsinks_bitwise_reproducible():
    q, k, v, do = _data(45, 55, 4, 4, 32, "bf16", seed=3)
    sinks = np.array([1.0, -2.0, 0.0, 3.0], np.float32)
    o, lse, res = _run(q, k, v, do, CU_Q, CU_K, dtype="bf16", window=(5, 0), sinks=sinks)
    again = tilegen.attention_varlen_backward(q, k, v, o, lse, do, CU_Q, CU_K, window=(5, 0), sinks=sinks, tile_sizes=TILES)
    assert again[3].tobytes() == res[3].tobytes()
    # the sequence with no key (s = 3): L = sigma_h exactly, O = 0
    assert np.array_equal(lse[:, 25:28], np.repeat(sinks[:, None], 3, axis=1)) and np.all(o[25:28] == 0)


def test_dense_entry_points_take_softcap_alibi_sinks():
    """tilegen.attention(_backward) with FlashAttention's softcap/alibi_slopes and sinks (one sequence
    of the reference: B = 1, dense), dparams carries alibi_slopes and sinks."""
    q, k, v, do = _data(37, 45, 4, 2, 16, "fp32", seed=4)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    sinks = np.array([0.3, -1.0, 2.0, 0.0], np.float32)
    bnsd = lambda x: np.ascontiguousarray(x[None].transpose(0, 2, 1, 3))  # noqa: E731
    kw = dict(causal=True, softcap=4.0, alibi_slopes=slopes, sinks=sinks, tile_sizes=TILES)
    o, lse = tilegen.attention(bnsd(q), bnsd(k), bnsd(v), **kw)
    dq, dk, dv, dparams = tilegen.attention_backward(bnsd(q), bnsd(k), bnsd(v), o, lse, bnsd(do), **kw)
    cu_q, cu_k = np.array([0, 37], np.int32), np.array([0, 45], np.int32)
    ro, rl, rg = reference(q, k, v, do, cu_q, cu_k, scale=0.25, causal=True, softcap=4.0, slopes=slopes, sinks=sinks)
    assert np.abs(o[0].transpose(1, 0, 2) - ro).max() < 1e-5 and np.abs(lse[0] - rl).max() < 1e-5
    for ours, ref in ((dq, rg["dq"]), (dk, rg["dk"]), (dv, rg["dv"])):
        assert np.abs(ours[0].transpose(1, 0, 2) - ref).max() < 2e-5
    assert np.abs(dparams["sinks"] - rg["dsinks"]).max() < 2e-5
    assert np.abs(dparams["alibi_slopes"] - rg["dslopes"]).max() < 1e-4


def test_no_key_token_at_all():
    q, k, v, do = _data(3, 2, 2, 1, 16, "fp32")
    cu_q, cu_k = np.array([0, 2, 3], np.int32), np.array([0, 0, 0], np.int32)
    sinks = np.array([0.5, 1.5], np.float32)
    o, lse = tilegen.attention_varlen(q, k, v, cu_q, cu_k, sinks=sinks)
    assert np.all(o == 0) and np.array_equal(lse, np.repeat(sinks[:, None], 3, axis=1))
    dq, dk, dv, ds = tilegen.attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, sinks=sinks)
    assert np.all(dq == 0) and np.all(dk == 0) and np.all(ds == 0)


def test_empty_tiles_between_sequences_are_skipped():
    """The document mask's block classes skip the tile pairs of two different sequences: K is read
    only for the tile pairs holding a visible pair (counted by brute force)."""
    from tilegen import api
    from tilegen.backends.interp import interpret

    cu = np.array([0, 16, 32, 64, 80], np.int32)
    q, k, v, _ = _data(80, 80, 1, 1, 16, "fp32")
    spec, params, lay, _ = api._varlen_setup(q, k, v, cu, cu, None, None, None, True, (-1, -1), None, None, None)
    fwd = compile_forward(spec, tile_sizes=TILES)
    t = lambda x: x[None].transpose(0, 2, 1, 3)  # noqa: E731
    _, meas = interpret(fwd, {"Q": t(q), "K": t(k), "V": t(v), **params})
    seq = np.repeat(np.arange(4), np.diff(cu))
    vis = (seq[:, None] == seq[None, :]) & (np.arange(80)[None, :] <= np.arange(80)[:, None])
    pairs = sum(vis[i:i + 16, j:j + 16].any() for i in range(0, 80, 16) for j in range(0, 80, 16))
    assert pairs == 1 + 1 + 3 + 1
    assert meas.bytes_read["K"] == pairs * 16 * 16 * 4


def test_tokens_outside_every_sequence_are_never_read_nor_written():
    """The kernels neither read (NaN garbage in q, k, v, do there changes nothing) nor write (the
    interpreter's NaN sentinel stays) the tokens outside every sequence: O, L, dQ rows and dK, dV rows;
    with sinks too, and with either dQ strategy."""
    from tilegen import api
    from tilegen.backends.interp import interpret

    q, k, v, do = _data(45, 55, 4, 2, 16, "fp16", seed=6)
    for x, n in ((q, 41), (k, 52), (v, 52), (do, 41)):
        x[n:] = np.nan
    sinks = np.array([0.5, -1.0, 0.0, 1.0], np.float32)
    spec, params, lay, sk = api._varlen_setup(q, k, v, CU_Q, CU_K, None, None, None, True, (-1, -1), None, None, sinks)
    t = lambda x: x[None].transpose(0, 2, 1, 3)  # noqa: E731
    out, fm = interpret(compile_forward(spec, tile_sizes=TILES), {"Q": t(q), "K": t(k), "V": t(v), "sinks": sk, **params})
    o, lse = out["O"][0], out["L"][0]
    assert np.isnan(o[:, 41:].astype(np.float32)).all() and np.isnan(lse[:, 41:]).all()
    assert not np.isnan(o[:, :41].astype(np.float32)).any() and not np.isnan(lse[:, :41]).any()
    assert fm.bytes_written["L"] == 4 * 41 * 4
    for strategy in ("atomic", "separate"):
        bwd = compile_backward(spec, tile_sizes=TILES, dq_strategy=strategy)
        g, _ = interpret(bwd, {"Q": t(q), "K": t(k), "V": t(v), "O": out["O"], "L": out["L"], "dO": t(do), **params})
        for name, n in (("dQ", 41), ("dK", 52), ("dV", 52)):
            x = g[name][0].astype(np.float32)
            assert np.isnan(x[:, n:]).all() and not np.isnan(x[:, :n]).any(), (strategy, name)


@pytest.mark.parametrize("cu, field, text", [
    (np.array([0, 3, 2, 3], np.int32), "cu_seqlens_q", "decrease"),
    (np.array([0, 1, 3], np.int64), "cu_seqlens_q.dtype", "int64"),
    (np.array([0, 1, 4], np.int32), "cu_seqlens_q", "last entry 4"),
    ([0, 1, 3], "cu_seqlens_q", "list"),
    (np.array([-1, 1, 3], np.int32), "cu_seqlens_q", "first entry"),
])
def test_bad_cu_seqlens(cu, field, text):
    q, k, v, _ = _data(3, 4, 2, 1, 16, "fp32")
    with pytest.raises(SpecError) as exc:
        tilegen.attention_varlen(q, k, v, cu, np.array([0, 2, 4] + ([4] if len(cu) == 4 else []), np.int32))
    msg = str(exc.value)
    assert "\n" not in msg and field in msg and text in msg and "int32" in msg


@pytest.mark.parametrize("kw, field", [
    (dict(cu_seqlens_k=np.array([0, 4], np.int32)), "cu_seqlens_k.shape"),
    (dict(max_seqlen_q=1), "max_seqlen_q"),
    (dict(sinks=np.zeros(3, np.float32)), "sinks.shape"),
    (dict(sinks=np.array([0.0, np.inf], np.float32)), "sinks"),
    (dict(softcap=-1.0), "softcap"),
    (dict(alibi_slopes=np.zeros((3, 2), np.float32)), "alibi_slopes.shape"),
])
def test_bad_arguments_name_the_argument(kw, field):
    q, k, v, _ = _data(3, 4, 2, 1, 16, "fp32")
    args = dict(cu_seqlens_q=np.array([0, 1, 3], np.int32), cu_seqlens_k=np.array([0, 2, 4], np.int32))
    args.update({n: kw.pop(n) for n in list(kw) if n in args})
    with pytest.raises(SpecError) as exc:
        tilegen.attention_varlen(q, k, v, args["cu_seqlens_q"], args["cu_seqlens_k"], **kw)
    msg = str(exc.value)
    assert "\n" not in msg and field in msg


def test_integer_parameters_index_other_parameters():
    """int32 parameters are integer-valued in the mod language, so a read may index another read."""
    import tilegen.core.mods as M

    decls = {"seq": M.ParamDecl("seq", (6,), "int32"), "start": M.ParamDecl("start", (2,), "int32")}
    expr = M.parse("kv_idx >= start[seq[q_idx]]", "mask", decls)
    assert M.parse(M.to_text(expr), "mask", decls) == expr
    got = M.evaluate(expr, q_idx=np.arange(6)[:, None], kv_idx=np.arange(6)[None, :], sizes={},
                     params={"seq": np.array([0, 0, 0, 1, 1, 1]), "start": np.array([0, 3])})
    want = np.arange(6)[None, :] >= np.array([0, 0, 0, 3, 3, 3])[:, None]
    assert np.array_equal(got, want)
    with pytest.raises(M.ModError):
        M.parse("kv_idx >= start[2.5 * q_idx]", "mask", decls)
    fl = {"w": M.ParamDecl("w", (6,), "fp32"), "start": decls["start"]}
    with pytest.raises(M.ModError):  # a float parameter is not an index
        M.parse("kv_idx >= start[w[q_idx]]", "mask", fl)


def test_spec_file_with_sinks_round_trips(tmp_path):
    spec = tilegen.AttentionSpec(batch=1, heads_q=2, heads_kv=1, seq_q=8, seq_k=8, head_dim_qk=16, head_dim_v=16, sinks=True)
    path = tmp_path / "s.toml"
    path.write_text(spec.to_toml())
    assert tilegen.load_spec(path) == spec
    with pytest.raises(SpecError) as exc:
        spec.replace(sinks="yes")
    assert str(exc.value).startswith("sinks")


def test_torch_varlen_and_sinks_autograd_cpu():
    """tilegen.torch.flash_attn_varlen_func (FlashAttention's names) and flash_attn_func(sinks=) on CPU:
    gradients of q, k, v and the learnable sinks against the reference."""
    from tilegen.torch import flash_attn_func, flash_attn_varlen_func

    qn, kn, vn, don = _data(3, 8, 3, 1, 16, "fp32", seed=5)
    sn = np.array([0.2, -0.4, 1.0], np.float32)
    q, k, v = (torch.tensor(x, requires_grad=True) for x in (qn, kn, vn))
    sinks = torch.tensor(sn, requires_grad=True)
    out = flash_attn_varlen_func(q, k, v, torch.tensor(ISSUE_CU_Q), torch.tensor(ISSUE_CU_K), 2, 5, causal=True, sinks=sinks)
    (out * torch.tensor(don)).sum().backward()
    ro, _, rg = reference(qn, kn, vn, don, ISSUE_CU_Q, ISSUE_CU_K, scale=0.25, causal=True, sinks=sn)
    assert np.abs(out.detach().numpy() - ro).max() < 1e-5
    for t, name in ((q, "dq"), (k, "dk"), (v, "dv"), (sinks, "dsinks")):
        assert np.abs(t.grad.numpy() - rg[name]).max() < 1e-5, name
    # the dense entry point: [B, S, H, D], one batch row = one sequence here
    q2, k2, v2 = (torch.tensor(x[None], requires_grad=True) for x in (qn, kn, vn))
    s2 = torch.tensor(sn, requires_grad=True)
    sl = torch.tensor([0.5, 0.25, 0.125], requires_grad=True)
    out2 = flash_attn_func(q2, k2, v2, sinks=s2, softcap=2.0, alibi_slopes=sl)
    (out2 * torch.tensor(don[None])).sum().backward()
    ro2, _, rg2 = reference(qn, kn, vn, don, np.array([0, 3]), np.array([0, 8]), scale=0.25, sinks=sn, softcap=2.0, slopes=sl.detach().numpy())
    assert np.abs(out2.detach().numpy()[0] - ro2).max() < 1e-5
    for t, name in ((q2, "dq"), (k2, "dk"), (v2, "dv")):
        assert np.abs(t.grad.numpy()[0] - rg2[name]).max() < 1e-5, name
    assert np.abs(s2.grad.numpy() - rg2["dsinks"]).max() < 1e-5 and np.abs(sl.grad.numpy() - rg2["dslopes"]).max() < 1e-5


def test_sinks_emitted_by_both_generators(tmp_path):
    """Both generators emit sinks: ``tilegen generate`` writes a Triton module whose forward takes
    ``sinks`` (h200) and Ascend C kernels that read ``sinks`` (ascend910b2)."""
    import subprocess
    import sys

    spec = tilegen.AttentionSpec(batch=1, heads_q=2, heads_kv=1, seq_q=64, seq_k=64, head_dim_qk=16, head_dim_v=16, sinks=True)
    path = tmp_path / "sinks.toml"
    path.write_text(spec.to_toml())
    for target in ("h200", "ascend910b2"):
        run = subprocess.run([sys.executable, "-m", "tilegen", "generate", str(path), "--target", target, "-o", str(tmp_path / target)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    module = (tmp_path / "h200" / "tilegen_custom.py").read_text()
    assert "def forward(q, k, v, *, sinks, poison=False, trusted=False):" in module and 'dparams["sinks"]' in module
    kernels = (tmp_path / "ascend910b2" / "fwd_kernels.asc").read_text()
    assert "sinks" in kernels


def test_tilegen_run_checks_a_packed_batch_with_sinks():
    """tilegen run's check of the built-in varlen-sinks spec: O, L, dQ, dK, dV on the tokens inside a
    sequence and dsinks against the float64 torch reference (its sink column by autograd), and the
    tokens outside every sequence left unwritten; a written one fails the check."""
    import dataclasses

    from tilegen.harness.runner import _outside, check_spec
    from tilegen.core.spec import builtin_spec

    report = check_spec(builtin_spec("varlen-sinks"), backward="fused")
    assert report.ok, "\n".join(c.line() for c in report.comparisons)
    assert [c.name for c in report.comparisons] == ["O", "L", "dQ", "dK", "dV", "dsinks"]
    assert sorted(n for n, _ in report.outside) == ["L", "O", "dK", "dQ", "dV"] and all(ok for _, ok in report.outside)
    assert "sinks [4] random" in report.params_note
    written = np.full((1, 2, 4, 3), np.nan, np.float32)
    written[0, 1, 3, 0] = 0.0  # one element of a row outside every sequence
    rows = np.array([True, True, True, False])
    assert _outside("", {"O": written}, rows) == [("O", False)]
    assert not dataclasses.replace(report, outside=[("O", False)]).ok


def test_torch_sinks_of_an_integer_dtype_named_by_their_dtype():
    """An integer sinks tensor is refused in one line naming ``sinks.dtype`` and the dtype given."""
    from tilegen.torch import flash_attn_func

    q = torch.zeros(1, 8, 2, 16)
    with pytest.raises(SpecError, match=r"^sinks\.dtype = 'torch\.int32' is invalid; accepted: a floating-point dtype") as exc:
        flash_attn_func(q, q, q, sinks=torch.zeros(2, dtype=torch.int32))
    assert "\n" not in str(exc.value)
