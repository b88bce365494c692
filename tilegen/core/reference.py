"""Dense attention written apart from the IR: the float64 reference and the same-precision plain one.

Both materialise the [Sq, Sk] score matrix, so they are for checking small problems only. Arrays are in
logical BNSD order: q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv], do [B, Hq, Sq, Dv].

- :func:`forward` / :func:`backward`: float64 throughout; the truth every test compares against.
- :func:`plain_forward` / :func:`plain_backward`: the textbook algorithm in the input precision (each
  matmul accumulates in fp32 and its result is rounded to the dtype; P and dS are materialised in the
  dtype where they feed a matmul). Its error sets the budget of DESIGN §3's accuracy rule, as
  FlashAttention's tests do with their ``upcast=False`` reference (Dao-AILab/flash-attention
  ``tests/test_flash_attn.py``). One difference from that reference, by DESIGN §3's rule that a value is
  rounded only where it feeds a matmul: dS = P∘(dP − D) is formed from the fp32 softmax, not from P
  rounded to the dtype (FlashAttention-2's kernels keep P in fp32 for dS too). Rounding P first costs
  up to half an ulp of P's dtype relative to P, and far more where P is subnormal in fp16 (below
  6.1e-5): a budget that included that error could not catch an implementation that makes it.

Semantics (DESIGN §3): S = scale·QKᵀ; key c visible to query r iff r+off−left <= c <= r+off+right
(−1 unbounded; off = Sk−Sq bottom-right, 0 top-left); P = softmax over visible keys; L = logsumexp
(natural log); a row with no visible key has P = 0, O = 0, L = −inf and gradient 0; GQA maps query
head h to KV head h // (Hq/Hkv) and dK, dV sum over the group.
"""

from __future__ import annotations

import numpy as np

from tilegen.core import dtypes


def visible(seq_q: int, seq_k: int, window: tuple[int, int], alignment: str) -> np.ndarray:
    """bool [Sq, Sk]: True where key c is visible to query r."""
    left, right = window
    off = seq_k - seq_q if alignment == "bottom_right" else 0
    r = np.arange(seq_q)[:, None]
    c = np.arange(seq_k)[None, :]
    ok = np.ones((seq_q, seq_k), dtype=bool)
    if left >= 0:
        ok &= c >= r + off - left
    if right >= 0:
        ok &= c <= r + off + right
    return ok


def _expand(x: np.ndarray, heads_q: int) -> np.ndarray:
    group = heads_q // x.shape[1]
    return np.repeat(x, group, axis=1)


def _reduce(x: np.ndarray, heads_kv: int) -> np.ndarray:
    b, hq, s, d = x.shape
    return x.reshape(b, heads_kv, hq // heads_kv, s, d).sum(axis=2)


def _softmax(s: np.ndarray, ok: np.ndarray):
    s = np.where(ok, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe)
    total = e.sum(axis=-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        lse = (np.log(total) + m_safe)[..., 0]
    lse = np.where(total[..., 0] > 0, lse, -np.inf)
    return p, lse


def forward(q, k, v, *, scale: float, window=(-1, -1), alignment="bottom_right"):
    """float64 (o [B, Hq, Sq, Dv], lse [B, Hq, Sq])."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq = q.shape[1]
    ok = visible(q.shape[2], k.shape[2], window, alignment)
    s = scale * np.einsum("bhqd,bhkd->bhqk", q, _expand(k, hq))
    p, lse = _softmax(s, ok)
    o = np.einsum("bhqk,bhkd->bhqd", p, _expand(v, hq))
    return o, lse


def backward(q, k, v, do, *, scale: float, window=(-1, -1), alignment="bottom_right"):
    """float64 (dq, dk, dv) of sum(O∘dO) with respect to q, k, v."""
    q, k, v, do = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    hq, hkv = q.shape[1], k.shape[1]
    ok = visible(q.shape[2], k.shape[2], window, alignment)
    ke, ve = _expand(k, hq), _expand(v, hq)
    p, _ = _softmax(scale * np.einsum("bhqd,bhkd->bhqk", q, ke), ok)
    o = np.einsum("bhqk,bhkd->bhqd", p, ve)
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, ve)
    d = (do * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - d)
    dq = scale * np.einsum("bhqk,bhkd->bhqd", ds, ke)
    dk = scale * np.einsum("bhqk,bhqd->bhkd", ds, q)
    return dq, _reduce(dk, hkv), _reduce(dv, hkv)


def _mm(a: np.ndarray, b: np.ndarray, spec: str, dtype: str) -> np.ndarray:
    """einsum in float32 on dtype-rounded inputs, result rounded to dtype (float32 array)."""
    return dtypes.round_to(np.einsum(spec, a.astype(np.float32), b.astype(np.float32)), dtype)


def plain_forward(q, k, v, *, scale: float, window=(-1, -1), alignment="bottom_right", dtype: str = "fp16"):
    """The same-precision textbook forward: float32 arrays holding dtype values (o, lse)."""
    hq = q.shape[1]
    q, k, v = (dtypes.round_to(np.asarray(x, dtype=np.float32), dtype) for x in (q, k, v))
    ok = visible(q.shape[2], k.shape[2], window, alignment)
    s = dtypes.round_to(np.float32(scale) * _mm(q, _expand(k, hq), "bhqd,bhkd->bhqk", "fp32"), dtype)
    with np.errstate(all="ignore"):
        p, lse = _softmax(s.astype(np.float32), ok)
    p = dtypes.round_to(p.astype(np.float32), dtype)
    o = _mm(p, _expand(v, hq), "bhqk,bhkd->bhqd", dtype)
    return o, lse.astype(np.float32)


def plain_backward(q, k, v, do, *, scale: float, window=(-1, -1), alignment="bottom_right", dtype: str = "fp16"):
    """The same-precision textbook backward (P and dS rounded to dtype where they feed a matmul; dS
    formed from the fp32 P): (dq, dk, dv), float32 arrays holding dtype values."""
    hq, hkv = q.shape[1], k.shape[1]
    q, k, v, do = (dtypes.round_to(np.asarray(x, dtype=np.float32), dtype) for x in (q, k, v, do))
    ok = visible(q.shape[2], k.shape[2], window, alignment)
    ke, ve = _expand(k, hq), _expand(v, hq)
    s = dtypes.round_to(np.float32(scale) * _mm(q, ke, "bhqd,bhkd->bhqk", "fp32"), dtype)
    with np.errstate(all="ignore"):
        p32, _ = _softmax(s.astype(np.float32), ok)
    p32 = p32.astype(np.float32)
    p = dtypes.round_to(p32, dtype)  # P where it feeds a matmul (P V, Pᵀ dO)
    o = _mm(p, ve, "bhqk,bhkd->bhqd", dtype)
    dv = _mm(p, do, "bhqk,bhqd->bhkd", "fp32")
    dp = _mm(do, ve, "bhqd,bhkd->bhqk", dtype)
    d = (do * o).sum(axis=-1, keepdims=True, dtype=np.float32)
    ds = dtypes.round_to(p32 * (dp - d), dtype)  # dS from the unrounded P (DESIGN §3)
    dq = dtypes.round_to(np.float32(scale) * _mm(ds, ke, "bhqk,bhkd->bhqd", "fp32"), dtype)
    dk = np.float32(scale) * _mm(ds, q, "bhqk,bhqd->bhkd", "fp32")
    return dq, dtypes.round_to(_reduce(dk, hkv), dtype), dtypes.round_to(_reduce(dv, hkv), dtype)


# --- score and mask mods (DESIGN §3): score′ materialised, torch autograd for every gradient ----------
#
# The mods are the spec's own expressions (the text of ``score_mod``/``mask_mod``, parsed by the mod
# language's parser), turned into torch functions here by ``sympy.lambdify``; parameter reads are
# gathers written in this module. Neither tilegen.mods' NumPy evaluation nor its symbolic derivatives
# are used: every gradient (dQ, dK, dV, dS through score′, the parameters') is torch autograd.


def _torch_mods(spec, params: dict):
    """(score_fn(S, tensors) or None, mask_fn(tensors) or None) for ``spec``'s mods, over torch tensors
    broadcast as [B, Hq, Sq, Sk] (b, h, q_idx, kv_idx int64 index grids); ``tensors`` maps each
    parameter name to a torch tensor."""
    import sympy
    import torch
    from sympy.printing.pytorch import TorchPrinter

    from tilegen.core.mods import INDEX_SYMBOLS, SCORE, SIZE_SYMBOLS, parse

    decls = {p.name: p for p in spec.params}
    sizes = {SIZE_SYMBOLS["B"]: spec.batch, SIZE_SYMBOLS["Hq"]: spec.heads_q, SIZE_SYMBOLS["Hkv"]: spec.heads_kv,
             SIZE_SYMBOLS["Sq"]: spec.seq_q, SIZE_SYMBOLS["Sk"]: spec.seq_k}

    def gather_fn(name):
        def gather(*idx):
            arr = gather.tensors[name]
            out = []
            for d, x in enumerate(idx):
                x = torch.as_tensor(x)
                x = torch.floor(x).long() if x.is_floating_point() else x.long()
                out.append(x.clamp(0, arr.shape[d] - 1))  # masked-off pairs may index past an array
            return arr[tuple(out)]

        return gather

    def compile_(text, kind):
        if not text:
            return None
        expr = parse(text, kind, decls).xreplace({k: sympy.Integer(v) for k, v in sizes.items()})
        names = sorted({str(ix.base.label) for ix in expr.atoms(sympy.Indexed)})
        fns = {n: sympy.Function(f"_ref_{n}") for n in names}
        expr = expr.replace(lambda e: isinstance(e, sympy.Indexed), lambda e: fns[str(e.base.label)](*e.indices))
        gathers = {f"_ref_{n}": gather_fn(n) for n in names}
        fn = sympy.lambdify(
            [SCORE, *INDEX_SYMBOLS], expr, modules=[{**gathers, "floor": torch.floor}, "torch"], printer=TorchPrinter({"strict": False})
        )

        def call(score, tensors, grids):
            for g in gathers.values():
                g.tensors = tensors
            out = fn(score, *grids)
            return torch.as_tensor(out)

        return call

    return compile_(spec.score_mod, "score"), compile_(spec.mask_mod, "mask")


def _grids(spec):
    import torch

    b = torch.arange(spec.batch).view(-1, 1, 1, 1)
    h = torch.arange(spec.heads_q).view(1, -1, 1, 1)
    r = torch.arange(spec.seq_q).view(1, 1, -1, 1)
    c = torch.arange(spec.seq_k).view(1, 1, 1, -1)
    return b, h, r, c


def _mod_visible(spec, mask_fn, tensors):
    import torch

    shape = (spec.batch, spec.heads_q, spec.seq_q, spec.seq_k)
    ok = torch.as_tensor(visible(spec.seq_q, spec.seq_k, spec.window, spec.alignment)).expand(shape)
    if mask_fn is not None:
        ok = ok & torch.broadcast_to(mask_fn(None, tensors, _grids(spec)).bool(), shape)
    return ok


def _torch_softmax(s, ok, sinks=None):
    """(P, L) of the masked scores ``s`` [B, Hq, Sq, Sk]; with ``sinks`` (a torch [Hq] tensor) one more
    logit column σ_h that joins the denominator and is dropped from P (DESIGN §3)."""
    import torch

    s = torch.where(ok, s, torch.full_like(s, -torch.inf))
    sk = s.shape[-1]
    if sinks is not None:
        s = torch.cat([s, sinks.to(s.dtype).view(1, -1, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
    m = s.amax(dim=-1, keepdim=True).detach()
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m_safe)
    total = e.sum(dim=-1, keepdim=True)
    nonzero = total > 0
    p = (e / torch.where(nonzero, total, torch.ones_like(total)))[..., :sk]
    lse = torch.where(nonzero, torch.log(torch.where(nonzero, total, torch.ones_like(total))) + m_safe, torch.full_like(total, -torch.inf))
    return p, lse[..., 0]


def mod_attention(spec, q, k, v, do, params: dict, sinks=None) -> dict:
    """float64 truth of ``spec`` with its score and mask mods (DESIGN §3): score′ = score_mod(scale·QKᵀ)
    where mask_mod ∧ window holds, −inf elsewhere; P = softmax(score′), L = logsumexp(score′) (rows
    with no visible key: P = 0, L = −inf). Arrays in logical BNSD order (see the module docstring);
    ``params`` the parameter arrays by name.

    Returns a dict: ``O`` [B, Hq, Sq, Dv], ``L`` [B, Hq, Sq], ``dQ``, ``dK``, ``dV`` (gradients of
    sum(O∘dO); None when ``do`` is None) and ``dparams`` (by name, the float parameters' gradients),
    float64 NumPy arrays, all from torch autograd on the CPU in float64. ``sinks`` (float [Hq], a spec
    with sinks): the sink logits join every row's softmax (L = logsumexp(score′ ∪ {σ_h})) and
    ``dparams["sinks"]`` is their gradient.
    """
    import torch

    score_fn, mask_fn = _torch_mods(spec, params)
    tsink = None if sinks is None else torch.tensor(np.asarray(sinks, dtype=np.float64), requires_grad=True)
    t = {n: torch.tensor(np.asarray(a, dtype=np.float64 if np.asarray(a).dtype.kind == "f" else np.int64)) for n, a in params.items()}
    floats = [n for n, a in t.items() if a.is_floating_point()]
    for n in floats:
        t[n].requires_grad_(True)
    qt, kt, vt = (torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True) for x in (q, k, v))
    group = spec.heads_q // spec.heads_kv
    ke, ve = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
    s = spec.softmax_scale * qt @ ke.transpose(-1, -2)
    ok = _mod_visible(spec, mask_fn, t)
    if score_fn is not None:
        s = torch.broadcast_to(score_fn(s, t, _grids(spec)), s.shape)
    p, lse = _torch_softmax(s, ok, tsink)
    o = p @ ve
    out = {"O": o.detach().numpy(), "L": lse.detach().numpy(), "dQ": None, "dK": None, "dV": None, "dparams": {}}
    if do is None:
        return out
    wrt = [qt, kt, vt] + [t[n] for n in floats] + ([tsink] if tsink is not None else [])
    grads = torch.autograd.grad((o * torch.tensor(np.asarray(do, dtype=np.float64))).sum(), wrt, allow_unused=True)
    grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]
    out.update(dQ=grads[0].numpy(), dK=grads[1].numpy(), dV=grads[2].numpy())
    out["dparams"] = {n: g.numpy() for n, g in zip(floats + (["sinks"] if tsink is not None else []), grads[3:])}
    return out


def plain_mod_attention(spec, q, k, v, do, params: dict, sinks=None) -> dict:
    """The same-precision textbook form of :func:`mod_attention` (as :func:`plain_forward` and
    :func:`plain_backward`: S rounded to the dtype, score′ and the softmax in fp32, P and dS rounded
    where they feed a matmul, dS′ = P∘(dP − D) from the fp32 P); dS = dS′·∂score′/∂score and the
    parameter gradients by torch autograd in fp32 through score′ alone. Same dict as :func:`mod_attention`
    (float32 arrays holding dtype values); with ``sinks``, dσ_h = −Σ_rows exp(σ_h − L)·D in fp32."""
    import torch

    dtype = spec.dtype
    score_fn, mask_fn = _torch_mods(spec, params)
    t = {n: torch.tensor(np.asarray(a, dtype=np.float32 if np.asarray(a).dtype.kind == "f" else np.int64)) for n, a in params.items()}
    floats = [n for n, a in t.items() if a.is_floating_point()]
    hq, hkv = spec.heads_q, spec.heads_kv
    q, k, v = (dtypes.round_to(np.asarray(x, dtype=np.float32), dtype) for x in (q, k, v))
    ke, ve = _expand(k, hq), _expand(v, hq)
    s = dtypes.round_to(np.float32(spec.softmax_scale) * _mm(q, ke, "bhqd,bhkd->bhqk", "fp32"), dtype)
    ok = _mod_visible(spec, mask_fn, t)
    st = torch.tensor(np.asarray(s, dtype=np.float32), requires_grad=True)
    for n in floats:
        t[n].requires_grad_(True)
    sp = torch.broadcast_to(score_fn(st, t, _grids(spec)), st.shape) if score_fn is not None else st
    with torch.no_grad():
        p32, lse = _torch_softmax(sp.detach(), ok, None if sinks is None else torch.tensor(np.asarray(sinks, dtype=np.float32)))
    p32 = p32.numpy().astype(np.float32)
    p = dtypes.round_to(p32, dtype)
    o = _mm(p, ve, "bhqk,bhkd->bhqd", dtype)
    out = {"O": o, "L": lse.numpy().astype(np.float32), "dQ": None, "dK": None, "dV": None, "dparams": {}}
    if do is None:
        return out
    do = dtypes.round_to(np.asarray(do, dtype=np.float32), dtype)
    dv = _mm(p, do, "bhqk,bhqd->bhkd", "fp32")
    dp = _mm(do, ve, "bhqd,bhkd->bhqk", dtype)
    d = (do * o).sum(axis=-1, keepdims=True, dtype=np.float32)
    ds_prime = torch.tensor((p32 * (dp - d)).astype(np.float32))
    if score_fn is not None:
        wrt = [st] + [t[n] for n in floats]
        grads = torch.autograd.grad(sp, wrt, grad_outputs=ds_prime, allow_unused=True)
        grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]
        ds32, dparams = grads[0].numpy(), {n: g.numpy() for n, g in zip(floats, grads[1:])}
    else:
        ds32, dparams = ds_prime.numpy(), {}
    ds = dtypes.round_to(ds32.astype(np.float32), dtype)
    dq = dtypes.round_to(np.float32(spec.softmax_scale) * _mm(ds, ke, "bhqk,bhkd->bhqd", "fp32"), dtype)
    dk = np.float32(spec.softmax_scale) * _mm(ds, q, "bhqk,bhqd->bhkd", "fp32")
    if sinks is not None:
        w = np.exp(np.asarray(sinks, np.float32).reshape(1, -1, 1) - out["L"]) * d[..., 0]
        dparams["sinks"] = -w.sum(axis=(0, 2), dtype=np.float32)
    out.update(dQ=dq, dK=dtypes.round_to(_reduce(dk, hkv), dtype), dV=dtypes.round_to(_reduce(dv, hkv), dtype), dparams=dparams)
    return out
