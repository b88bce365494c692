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

from . import dtypes


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
