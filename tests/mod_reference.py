"""Dense attention with score/mask mods in torch, written apart from tilegen (no tilegen.mods import).

The mods are given here as torch functions of the full [B, Hq, Sq, Sk] score and index grids, so the
truth does not share the mod language, its tracer or its derivatives. ``dense`` materialises
score′ = score_mod(scale·QKᵀ) where mask_mod (and the window) holds, −inf elsewhere; rows with no
visible key give O = 0 and L = −inf (DESIGN §3). Gradients (of q, k, v and any parameter tensor the
mods read) come from torch autograd.

- ``dtype=None``: float64 throughout, the truth.
- ``dtype="fp16"|"bf16"|"fp32"``: the plain same-precision implementation of DESIGN §3's accuracy rule
  (fp32 arithmetic, the score matmul's inputs and P, dS at their matmuls in the dtype).
"""

from __future__ import annotations

import numpy as np
import torch

_T = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def grids(b, hq, sq, sk):
    bi = torch.arange(b).view(b, 1, 1, 1)
    hi = torch.arange(hq).view(1, hq, 1, 1)
    qi = torch.arange(sq).view(1, 1, sq, 1)
    ki = torch.arange(sk).view(1, 1, 1, sk)
    return bi, hi, qi, ki


class _RoundGrad(torch.autograd.Function):
    """Identity forward; rounds the incoming gradient to ``dtype`` (dS fed to a matmul)."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = dtype
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dtype).to(g.dtype), None


def dense(q, k, v, do=None, *, scale, score_fn=None, mask_fn=None, window=(-1, -1), params=None, dtype=None):
    """(o, lse, grads) as float64 NumPy; grads = {"dQ", "dK", "dV", "d<param>"...} when ``do`` is given.

    q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] (NumPy, BNSD); score_fn(s, b, h, q_idx, kv_idx, **params)
    and mask_fn(b, h, q_idx, kv_idx, **params) take broadcastable torch tensors; params: name → NumPy
    array (float arrays get gradients)."""
    work = torch.float64 if dtype is None else torch.float32
    low = None if dtype is None else _T[dtype]
    tq, tk, tv = (torch.tensor(np.asarray(x, dtype=np.float64), dtype=work, requires_grad=True) for x in (q, k, v))
    tp = {}
    for name, a in (params or {}).items():
        a = np.asarray(a)
        if a.dtype.kind == "f":
            tp[name] = torch.tensor(a.astype(np.float64), dtype=work, requires_grad=True)
        else:
            tp[name] = torch.tensor(a.astype(np.int64))
    b, hq, sq, _ = tq.shape
    hkv, sk = tk.shape[1], tk.shape[2]
    g = hq // hkv
    kk = tk.repeat_interleave(g, dim=1)
    vv = tv.repeat_interleave(g, dim=1)
    if low is not None:
        qa, ka = tq.to(low).to(work), kk.to(low).to(work)
    else:
        qa, ka = tq, kk
    s = scale * (qa @ ka.transpose(-1, -2))
    bi, hi, qi, ki = grids(b, hq, sq, sk)
    if score_fn is not None:
        s = score_fn(s, bi, hi, qi, ki, **tp)
    vis = torch.ones(b, hq, sq, sk, dtype=torch.bool)
    left, right = window
    off = sk - sq
    if left >= 0:
        vis = vis & (ki >= qi + off - left)
    if right >= 0:
        vis = vis & (ki <= qi + off + right)
    if mask_fn is not None:
        vis = vis & mask_fn(bi, hi, qi, ki, **tp).expand(b, hq, sq, sk)
    s = torch.where(vis, s, torch.tensor(float("-inf"), dtype=work))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m)
    tot = e.sum(dim=-1, keepdim=True)
    safe = torch.where(tot > 0, tot, torch.ones_like(tot))
    p = torch.where(tot > 0, e / safe, torch.zeros_like(e))
    lse = torch.where(tot[..., 0] > 0, torch.log(safe[..., 0]) + m[..., 0], torch.tensor(float("-inf"), dtype=work))
    if low is not None:
        p_mm = _RoundGrad.apply(p, low).to(low).to(work)
        o = (p_mm @ vv.to(low).to(work)).to(low).to(work)
    else:
        o = p @ vv
    out = (o.detach().numpy().astype(np.float64), lse.detach().numpy().astype(np.float64), {})
    if do is None:
        return out
    tdo = torch.tensor(np.asarray(do, dtype=np.float64), dtype=work)
    (o * tdo).sum().backward()
    grads = {"dQ": tq.grad.numpy(), "dK": tk.grad.numpy(), "dV": tv.grad.numpy()}
    for name, t in tp.items():
        if t.requires_grad:
            grads["d" + name] = t.grad.numpy()
    return out[0], out[1], grads


# --- FlexAttention's mods (functions of one element) on the full grid ---------------------------


def vmapped(fn, score: bool):
    """``fn`` of one element mapped over [B, H, Sq, Sk] by torch.func.vmap, as FlexAttention applies
    its mods (innermost kv_idx): called with the score tensor (score mods) and the 1-D aranges."""
    lead = (0,) if score else ()
    g = fn
    for d in (3, 2, 1, 0):  # kv_idx, q_idx, h, b
        g = torch.func.vmap(g, in_dims=lead + tuple(0 if i == d else None for i in range(4)))
    return g


def score_grid(fn):
    """``dense``'s ``score_fn`` of a FlexAttention score_mod ``fn`` (vmapped over the score's grid)."""

    def score_fn(s, bi, hi, i, j, **_):
        b, h, sq, sk = s.shape
        return vmapped(fn, True)(s, torch.arange(b), torch.arange(h), torch.arange(sq), torch.arange(sk))

    return score_fn


def mask_grid(fn, b, h, sq, sk):
    """bool [B, H, Sq, Sk] of a FlexAttention mask_mod ``fn``."""
    return vmapped(fn, False)(torch.arange(b), torch.arange(h), torch.arange(sq), torch.arange(sk))


def mask_grid_fn(fn):
    """``dense``'s ``mask_fn`` of a FlexAttention mask_mod ``fn``."""

    def mask_fn(bi, hi, i, j, **_):
        return mask_grid(fn, bi.shape[0], hi.shape[1], i.shape[2], j.shape[3])

    return mask_fn


def seeded_table(*shape, seed=12, dtype=torch.float32):
    """A standard-normal tensor of ``shape`` from its own seeded generator (a captured table of a mod)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def graphormer_inputs(b, n, density):
    """A seeded symmetric adjacency [b, n, n] (each edge drawn with probability ``density``) and edge
    types in 0..2, the inputs of attention-gym's Graphormer biases."""
    gen = torch.Generator().manual_seed(11)
    adj = torch.rand(b, n, n, generator=gen) < density
    adj = adj | adj.transpose(1, 2)
    types = torch.randint(0, 3, (b, n, n), generator=gen)
    return adj, types
