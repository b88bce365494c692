"""Attention kernels for the spec `varlen-sinks` on the target `h200`: forward and fused backward.

Written by tilegen's Triton backend from the scheduled tile IR; regenerate it rather than edit it
(`tilegen generate SPEC_FILE --target h200 -o DIR`).

Spec:
    name = "varlen-sinks"
    batch = 1
    heads_q = 4
    heads_kv = 2
    seq_q = 128
    seq_k = 176
    head_dim_qk = 64
    head_dim_v = 64
    dtype = "bf16"
    mask = "none"
    alignment = "bottom_right"
    layout = "BSND"
    mask_mod = "Eq(q_seq[q_idx], k_seq[kv_idx]) & (kv_idx <= q_idx + q_off[q_idx] + 0)"
    sinks = true
    packed_ids = ["q_seq", "k_seq"]
    
    [params.k_seq]
    shape = ["Sk"]
    dtype = "int32"
    values = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -2, -2, -2, -2, -2, -2]
    
    [params.q_off]
    shape = ["Sq"]
    dtype = "int32"
    values = [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 0, 0, 0, 0, 0, 0, 0, 0]
    
    [params.q_seq]
    shape = ["Sq"]
    dtype = "int32"
    values = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1]

Notation (tilegen DESIGN §3):
    Q [B, Hq, Sq, Dqk], K [B, Hkv, Sk, Dqk], V [B, Hkv, Sk, Dv], O and dO [B, Hq, Sq, Dv]: logical BNSD
    order (the arrays in memory are BSND; every kernel takes the strides of the logical dims).
    L [B, Hq, Sq]: logsumexp of the visible scores, natural log, fp32 (-inf on a row with no visible key).
    D [B, Hq, Sq]: rowsum(dO * O), fp32.  dQ_ws: the fp32 dQ accumulator of the atomic strategy.
    S = scale * Q K^T with scale = 0.125; P = exp(S - L); dP = dO V^T; dS = P * (dP - D);
    dV = P^T dO; dQ = scale * dS K; dK = scale * dS^T Q; dK, dV summed over the G = Hq / Hkv query heads
    of a KV head. Key c is visible to query r iff r + off - left <= c <= r + off + right (window
    (-1, -1), off = Sk - Sq), r < Sq, c < Sk.
    Br, Bc: rows of a Q tile and of a K/V tile; Dqk_p, Dv_p: head dims padded to a power of two.
    b, hq, hkv, i, j: batch, query head, KV head, Q tile, K/V tile.
    A name ending in `_ptr` is a tensor's base pointer, `X_sN` the stride of its logical dim N.

Schedule (h200):
    varlen-sinks.fwd: Br = 128, Bc = 64 (from the target's [triton] table); roofline prediction 8.437 us (tilegen inspect: also the GPU cost model's)
      kernel fwd_classify: grid (j, i, b, hq), num_warps = 4, num_stages = 2
      kernel fwd: grid (i, hq, b), num_warps = 8, num_stages = 3; exp2 with log2(e) folded
    varlen-sinks.bwd: Br = 32, Bc = 128 (from the target's [triton] table); roofline prediction 17.348 us (tilegen inspect: also the GPU cost model's)
      kernel bwd_classify: grid (j, i, b, hq), num_warps = 4, num_stages = 2
      kernel pre: grid (i, hq, b), num_warps = 4, num_stages = 2
      kernel main: grid (j, hkv, b), num_warps = 4, num_stages = 3; [Br, Bc] tiles held transposed; exp2 with log2(e) folded
      kernel post: grid (i, hq, b), num_warps = 4, num_stages = 2
    dQ strategy: atomic.
"""

import math
import os

import torch
import triton
import triton.language as tl

SPEC = {"alignment": "bottom_right", "batch": 1, "dtype": "bf16", "head_dim_qk": 64, "head_dim_v": 64, "heads_kv": 2, "heads_q": 4, "layout": "BSND", "mask": "none", "mask_mod": "Eq(q_seq[q_idx], k_seq[kv_idx]) \u0026 (kv_idx \u003c= q_idx + q_off[q_idx] + 0)", "name": "varlen-sinks", "packed_ids": ["q_seq", "k_seq"], "params": {"k_seq": {"dtype": "int32", "shape": ["Sk"], "values": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -2, -2, -2, -2, -2, -2]}, "q_off": {"dtype": "int32", "shape": ["Sq"], "values": [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 0, 0, 0, 0, 0, 0, 0, 0]}, "q_seq": {"dtype": "int32", "shape": ["Sq"], "values": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1]}}, "seq_k": 176, "seq_q": 128, "sinks": True}
SHAPES = {"B": 1, "Hkv": 2, "Hq": 4, "Sk": 176, "Sq": 128}
CONSTS = {"Dqk": 64, "Dqk_p": 64, "Dv": 64, "Dv_p": 64, "G": 2}
LAYOUT = "BSND"
DTYPE = torch.bfloat16


def _bf16_in_the_interpreter():
    """Triton's interpreter (TRITON_INTERPRET=1; seen in Triton 3.6 to 3.9) multiplies bfloat16
    ``tl.dot`` operands as their raw uint16 storage, which gives garbage: widen them to float32 first
    (exact: a bf16 is the top half of an fp32). It also casts float32 to bfloat16 by truncation, where
    a GPU rounds to nearest even: round to nearest even instead (a truncating cast biases every rounded
    tile towards zero, and sums of many rows, such as dsinks, show it). Compiled kernels on a GPU never
    take this path."""
    import numpy as np
    from triton.runtime import interpreter as ti

    original = ti.InterpreterBuilder.create_dot
    cast = ti.InterpreterBuilder.cast_impl

    def widen(handle):
        if handle.dtype == tl.bfloat16:
            return ti.TensorHandle((handle.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return handle

    def create_dot(self, a, b, d, *rest):
        return original(self, widen(a), widen(b), d, *rest)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            u = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
            r = np.where(np.isnan(src.data), np.uint16(0x7FC0), r)
            return ti.TensorHandle(r, tl.bfloat16)
        return cast(self, src, dst_type)

    # each patch once per process, on its own marker: a create_dot widened elsewhere still gets the cast
    if not getattr(original, "_widens_bf16", False):
        create_dot._widens_bf16 = True
        ti.InterpreterBuilder.create_dot = create_dot
    if not getattr(cast, "_rounds_bf16", False):
        cast_impl._rounds_bf16 = True
        ti.InterpreterBuilder.cast_impl = cast_impl


if os.environ.get("TRITON_INTERPRET") == "1" and DTYPE == torch.bfloat16:
    _bf16_in_the_interpreter()


@triton.jit
def _floor_div(a, b):
    # floor(a / b) for b > 0; Triton's // truncates towards zero
    return tl.where(a >= 0, a // b, -((b - 1 - a) // b))


@triton.jit
def _tanh(x):
    # tanh in fp32 from exp (Triton's interpreter has no libdevice): an odd Taylor polynomial to x^9
    # for |x| < 0.125 (truncation < 2e-11 relative), else sign(x) (1 - e^-2|x|) / (1 + e^-2|x|)
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    big = (1.0 - e) / (1.0 + e)
    x2 = x * x
    small = x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * (-0.05396825396825397 + x2 * 0.021869488536155203))))
    return tl.where(a < 0.125, small, tl.where(x < 0, -big, big))



@triton.jit
def fwd_classify_kernel(
    k_seq_ptr,
    q_off_ptr,
    q_seq_ptr,
    BM_ptr,
k_seq_s0,
q_off_s0,
q_seq_s0,
BM_s0, BM_s1, BM_s2, BM_s3,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # varlen-sinks.fwd, kernel fwd_classify (phase classify)
    b = tl.program_id(2)
    hq = (tl.program_id(2) % (1))
    i = tl.program_id(1)
    j = tl.program_id(0)
    q_idx = (i*Br + tl.arange(0, Br))[:, None]
    kv_idx = (j*Bc + tl.arange(0, Bc))[None, :]
    n_vis = tl.sum(((q_idx < Sq) & (kv_idx < Sk) & (((((tl.load(q_seq_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_seq_s0)) == (tl.load(k_seq_ptr + (tl.minimum(tl.maximum(kv_idx, 0), Sk - 1)) * k_seq_s0)))) & (((kv_idx) <= ((q_idx + (tl.load(q_off_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_off_s0))))))))).to(tl.int32))
    cls = tl.where(n_vis == 0, 0.0, tl.where(n_vis == Br * Bc, 2.0, 1.0))
    tl.store(BM_ptr + b * BM_s0 + hq * BM_s1 + i * BM_s2 + (j + tl.arange(0, 1)) * BM_s3, cls)


@triton.jit
def fwd_kernel(
    Q_ptr,
    K_ptr,
    V_ptr,
    O_ptr,
    L_ptr,
    k_seq_ptr,
    q_off_ptr,
    q_seq_ptr,
    sinks_ptr,
    BM_ptr,
    BM_kvn_ptr,
    BM_kvi_ptr,
Q_s0, Q_s1, Q_s2, Q_s3,
K_s0, K_s1, K_s2, K_s3,
V_s0, V_s1, V_s2, V_s3,
O_s0, O_s1, O_s2, O_s3,
L_s0, L_s1, L_s2,
k_seq_s0,
q_off_s0,
q_seq_s0,
sinks_s0,
BM_s0, BM_s1, BM_s2, BM_s3,
BM_kvn_s0, BM_kvn_s1, BM_kvn_s2,
BM_kvi_s0, BM_kvi_s1, BM_kvi_s2, BM_kvi_s3,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # varlen-sinks.fwd, kernel fwd (phase fwd)
    b = tl.program_id(2)
    hq = tl.program_id(1)
    i = tl.program_id(0)
    Qi = tl.load(Q_ptr + b * Q_s0 + hq * Q_s1 + (i*Br + tl.arange(0, Br))[:, None] * Q_s2 + tl.arange(0, Dqk_p)[None, :] * Q_s3, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0), other=0.0)
    sink = tl.load(sinks_ptr + hq * sinks_s0) * 1.4426950408889634
    m = (sink + tl.zeros([Br], tl.float32))
    l = tl.full([Br], 1.0, tl.float32)
    acc = tl.full([Br, Dv_p], 0.0, tl.float32)
    n_j = tl.load(BM_kvn_ptr + i * BM_kvn_s2)
    for t_j in range(0, n_j):  # visible K/V tiles of Q tile i: the non-empty ones, from BM_kvi
        j = tl.load(BM_kvi_ptr + i * BM_kvi_s2 + t_j * BM_kvi_s3)
        cls_j = tl.load(BM_ptr + i * BM_s2 + j * BM_s3)
        Kj = tl.load(K_ptr + b * K_s0 + ((hq) // (G)) * K_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3, mask=((j*Bc + tl.arange(0, Bc))[:, None] < Sk) & (tl.load(k_seq_ptr + (j*Bc + tl.arange(0, Bc))[:, None] * k_seq_s0, mask=(j*Bc + tl.arange(0, Bc))[:, None] < Sk, other=-1) >= 0), other=0.0)
        Vj = tl.load(V_ptr + b * V_s0 + ((hq) // (G)) * V_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3, mask=((j*Bc + tl.arange(0, Bc))[:, None] < Sk) & (tl.load(k_seq_ptr + (j*Bc + tl.arange(0, Bc))[:, None] * k_seq_s0, mask=(j*Bc + tl.arange(0, Bc))[:, None] < Sk, other=-1) >= 0), other=0.0)
        S = tl.dot(Qi, tl.trans(Kj)) * 0.125
        q_idx = (i*Br + tl.arange(0, Br))[:, None]
        kv_idx = (j*Bc + tl.arange(0, Bc))[None, :]
        S = (S) * 1.4426950408889634
        if cls_j != 2.0:  # a full tile needs no mask
            S = tl.where(((((tl.load(q_seq_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_seq_s0)) == (tl.load(k_seq_ptr + (tl.minimum(tl.maximum(kv_idx, 0), Sk - 1)) * k_seq_s0)))) & (((kv_idx) <= ((q_idx + (tl.load(q_off_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_off_s0))))))) & ((j*Bc + tl.arange(0, Bc))[None, :] < Sk), S, float("-inf"))
        m_new = tl.max(S, axis=1)
        m_new = tl.maximum(m_new, m)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = m - m_use
        alpha = tl.exp2(alpha)
        S = S - m_use[:, None]
        S = tl.exp2(S)
        rowsum = tl.sum(S, axis=1)
        l = l * alpha
        l = l + rowsum
        Pc = (S).to(tl.bfloat16)
        acc = acc * alpha[:, None]
        acc = tl.dot(Pc, Vj, acc)
        m = m_new
    acc = tl.where(l[:, None] != 0, acc / tl.where(l[:, None] != 0, l[:, None], 1.0), 0.0)
    Oc = (acc).to(tl.bfloat16)
    tl.store(O_ptr + b * O_s0 + hq * O_s1 + (i*Br + tl.arange(0, Br))[:, None] * O_s2 + tl.arange(0, Dv_p)[None, :] * O_s3, Oc, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0))
    lse = tl.log(l)
    lse = lse + (m * 0.6931471805599453)
    tl.store(L_ptr + b * L_s0 + hq * L_s1 + (i*Br + tl.arange(0, Br)) * L_s2, lse, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br)) * q_seq_s0) >= 0))


@triton.jit
def bwd_classify_kernel(
    k_seq_ptr,
    q_off_ptr,
    q_seq_ptr,
    BM_ptr,
k_seq_s0,
q_off_s0,
q_seq_s0,
BM_s0, BM_s1, BM_s2, BM_s3,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # varlen-sinks.bwd, kernel bwd_classify (phase classify)
    b = tl.program_id(2)
    hq = (tl.program_id(2) % (1))
    i = tl.program_id(1)
    j = tl.program_id(0)
    q_idx = (i*Br + tl.arange(0, Br))[:, None]
    kv_idx = (j*Bc + tl.arange(0, Bc))[None, :]
    n_vis = tl.sum(((q_idx < Sq) & (kv_idx < Sk) & (((((tl.load(q_seq_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_seq_s0)) == (tl.load(k_seq_ptr + (tl.minimum(tl.maximum(kv_idx, 0), Sk - 1)) * k_seq_s0)))) & (((kv_idx) <= ((q_idx + (tl.load(q_off_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_off_s0))))))))).to(tl.int32))
    cls = tl.where(n_vis == 0, 0.0, tl.where(n_vis == Br * Bc, 2.0, 1.0))
    tl.store(BM_ptr + b * BM_s0 + hq * BM_s1 + i * BM_s2 + (j + tl.arange(0, 1)) * BM_s3, cls)


@triton.jit
def pre_kernel(
    O_ptr,
    dO_ptr,
    D_ptr,
    dQ_ws_ptr,
    q_seq_ptr,
O_s0, O_s1, O_s2, O_s3,
dO_s0, dO_s1, dO_s2, dO_s3,
D_s0, D_s1, D_s2,
dQ_ws_s0, dQ_ws_s1, dQ_ws_s2, dQ_ws_s3,
q_seq_s0,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # varlen-sinks.bwd, kernel pre (phase pre)
    b = tl.program_id(2)
    hq = tl.program_id(1)
    i = tl.program_id(0)
    Oi = tl.load(O_ptr + b * O_s0 + hq * O_s1 + (i*Br + tl.arange(0, Br))[:, None] * O_s2 + tl.arange(0, Dv_p)[None, :] * O_s3, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0), other=0.0)
    dOi = tl.load(dO_ptr + b * dO_s0 + hq * dO_s1 + (i*Br + tl.arange(0, Br))[:, None] * dO_s2 + tl.arange(0, Dv_p)[None, :] * dO_s3, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0), other=0.0)
    O32 = (Oi).to(tl.float32)
    prod = (dOi).to(tl.float32)
    prod = prod * O32
    Di = tl.sum(prod, axis=1)
    tl.store(D_ptr + b * D_s0 + hq * D_s1 + (i*Br + tl.arange(0, Br)) * D_s2, Di)
    zeros = tl.full([Br, Dqk_p], 0.0, tl.float32)
    tl.store(dQ_ws_ptr + b * dQ_ws_s0 + hq * dQ_ws_s1 + (i*Br + tl.arange(0, Br))[:, None] * dQ_ws_s2 + tl.arange(0, Dqk_p)[None, :] * dQ_ws_s3, zeros)


@triton.jit
def main_kernel(
    Q_ptr,
    K_ptr,
    V_ptr,
    L_ptr,
    dO_ptr,
    D_ptr,
    dQ_ws_ptr,
    dK_ptr,
    dV_ptr,
    k_seq_ptr,
    q_off_ptr,
    q_seq_ptr,
    BM_ptr,
    BM_qn_ptr,
    BM_qi_ptr,
Q_s0, Q_s1, Q_s2, Q_s3,
K_s0, K_s1, K_s2, K_s3,
V_s0, V_s1, V_s2, V_s3,
L_s0, L_s1, L_s2,
dO_s0, dO_s1, dO_s2, dO_s3,
D_s0, D_s1, D_s2,
dQ_ws_s0, dQ_ws_s1, dQ_ws_s2, dQ_ws_s3,
dK_s0, dK_s1, dK_s2, dK_s3,
dV_s0, dV_s1, dV_s2, dV_s3,
k_seq_s0,
q_off_s0,
q_seq_s0,
BM_s0, BM_s1, BM_s2, BM_s3,
BM_qn_s0, BM_qn_s1, BM_qn_s2,
BM_qi_s0, BM_qi_s1, BM_qi_s2, BM_qi_s3,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # varlen-sinks.bwd, kernel main (phase main)
    b = tl.program_id(2)
    hkv = tl.program_id(1)
    j = tl.program_id(0)
    Kj = tl.load(K_ptr + b * K_s0 + hkv * K_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3, mask=((j*Bc + tl.arange(0, Bc))[:, None] < Sk) & (tl.load(k_seq_ptr + (j*Bc + tl.arange(0, Bc))[:, None] * k_seq_s0, mask=(j*Bc + tl.arange(0, Bc))[:, None] < Sk, other=-1) >= 0), other=0.0)
    dV_acc = tl.full([Bc, Dv_p], 0.0, tl.float32)
    dK_acc = tl.full([Bc, Dqk_p], 0.0, tl.float32)
    Vj = tl.load(V_ptr + b * V_s0 + hkv * V_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3, mask=((j*Bc + tl.arange(0, Bc))[:, None] < Sk) & (tl.load(k_seq_ptr + (j*Bc + tl.arange(0, Bc))[:, None] * k_seq_s0, mask=(j*Bc + tl.arange(0, Bc))[:, None] < Sk, other=-1) >= 0), other=0.0)
    for hq in range(hkv*G, hkv*G + G):  # query heads of KV head hkv
        n_i = tl.load(BM_qn_ptr + j * BM_qn_s2)
        for t_i in range(0, n_i):  # visible Q tiles of K/V tile j: the non-empty ones, from BM_qi
            i = tl.load(BM_qi_ptr + j * BM_qi_s2 + t_i * BM_qi_s3)
            cls_i = tl.load(BM_ptr + i * BM_s2 + j * BM_s3)
            Qi = tl.load(Q_ptr + b * Q_s0 + hq * Q_s1 + (i*Br + tl.arange(0, Br))[:, None] * Q_s2 + tl.arange(0, Dqk_p)[None, :] * Q_s3, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0), other=0.0)
            dOi = tl.load(dO_ptr + b * dO_s0 + hq * dO_s1 + (i*Br + tl.arange(0, Br))[:, None] * dO_s2 + tl.arange(0, Dv_p)[None, :] * dO_s3, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0), other=0.0)
            Li = tl.load(L_ptr + b * L_s0 + hq * L_s1 + (i*Br + tl.arange(0, Br)) * L_s2, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br)) * q_seq_s0) >= 0), other=0.0) * 1.4426950408889634
            S = tl.dot(Kj, tl.trans(Qi)) * 0.125
            q_idx = (i*Br + tl.arange(0, Br))[None, :]
            kv_idx = (j*Bc + tl.arange(0, Bc))[:, None]
            S = (S) * 1.4426950408889634
            if cls_i != 2.0:  # a full tile needs no mask
                S = tl.where(((((tl.load(q_seq_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_seq_s0)) == (tl.load(k_seq_ptr + (tl.minimum(tl.maximum(kv_idx, 0), Sk - 1)) * k_seq_s0)))) & (((kv_idx) <= ((q_idx + (tl.load(q_off_ptr + (tl.minimum(tl.maximum(q_idx, 0), Sq - 1)) * q_off_s0))))))) & ((j*Bc + tl.arange(0, Bc))[:, None] < Sk), S, float("-inf"))
            L_use = tl.where(Li == float("-inf"), 0.0, Li)
            S = S - L_use[None, :]
            S = tl.exp2(S)
            Pc = (S).to(tl.bfloat16)
            dV_acc = tl.dot(Pc, dOi, dV_acc)
            Di = tl.load(D_ptr + b * D_s0 + hq * D_s1 + (i*Br + tl.arange(0, Br)) * D_s2)
            dP = tl.dot(Vj, tl.trans(dOi))
            dP = dP - Di[None, :]
            dP = S * dP
            dSc = (dP).to(tl.bfloat16)
            dK_acc = tl.dot(dSc, Qi, dK_acc)
            dQp = tl.dot(tl.trans(dSc), Kj)
            tl.atomic_add(dQ_ws_ptr + b * dQ_ws_s0 + hq * dQ_ws_s1 + (i*Br + tl.arange(0, Br))[:, None] * dQ_ws_s2 + tl.arange(0, Dqk_p)[None, :] * dQ_ws_s3, dQp, sem="relaxed")
    dVc = (dV_acc).to(tl.bfloat16)
    tl.store(dV_ptr + b * dV_s0 + hkv * dV_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * dV_s2 + tl.arange(0, Dv_p)[None, :] * dV_s3, dVc, mask=((j*Bc + tl.arange(0, Bc))[:, None] < Sk) & (tl.load(k_seq_ptr + (j*Bc + tl.arange(0, Bc))[:, None] * k_seq_s0, mask=(j*Bc + tl.arange(0, Bc))[:, None] < Sk, other=-1) >= 0))
    dK_acc = dK_acc * 0.125
    dKc = (dK_acc).to(tl.bfloat16)
    tl.store(dK_ptr + b * dK_s0 + hkv * dK_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * dK_s2 + tl.arange(0, Dqk_p)[None, :] * dK_s3, dKc, mask=((j*Bc + tl.arange(0, Bc))[:, None] < Sk) & (tl.load(k_seq_ptr + (j*Bc + tl.arange(0, Bc))[:, None] * k_seq_s0, mask=(j*Bc + tl.arange(0, Bc))[:, None] < Sk, other=-1) >= 0))


@triton.jit
def post_kernel(
    dQ_ws_ptr,
    dQ_ptr,
    q_seq_ptr,
dQ_ws_s0, dQ_ws_s1, dQ_ws_s2, dQ_ws_s3,
dQ_s0, dQ_s1, dQ_s2, dQ_s3,
q_seq_s0,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # varlen-sinks.bwd, kernel post (phase post)
    b = tl.program_id(2)
    hq = tl.program_id(1)
    i = tl.program_id(0)
    dQi = tl.load(dQ_ws_ptr + b * dQ_ws_s0 + hq * dQ_ws_s1 + (i*Br + tl.arange(0, Br))[:, None] * dQ_ws_s2 + tl.arange(0, Dqk_p)[None, :] * dQ_ws_s3)
    dQi = dQi * 0.125
    dQc = (dQi).to(tl.bfloat16)
    tl.store(dQ_ptr + b * dQ_s0 + hq * dQ_s1 + (i*Br + tl.arange(0, Br))[:, None] * dQ_s2 + tl.arange(0, Dqk_p)[None, :] * dQ_s3, dQc, mask=(tl.load(q_seq_ptr + (i*Br + tl.arange(0, Br))[:, None] * q_seq_s0) >= 0))


def _logical(x):
    """The BNSD view of a 4-d array in this module's layout (no copy)."""
    return x.permute(0, 2, 1, 3) if LAYOUT == "BSND" else x


def _new(shape, dtype, device, poison, fill=None):
    """A new tensor: NaN-filled when `poison`, else filled with `fill` (an output whose stores skip
    guarded rows: the value those rows keep), else uninitialized."""
    if poison or fill is not None:
        return torch.full(tuple(shape), float("nan") if poison else fill, dtype=dtype, device=device)
    return torch.empty(tuple(shape), dtype=dtype, device=device)


def _alloc(shape, dtype, device, poison, layout, fill=None):
    """A new tensor of logical shape `shape`, laid out as `layout` (filled as `_new`)."""
    physical = (shape[0], shape[2], shape[1], shape[3]) if layout == "BSND" else tuple(shape)
    x = _new(physical, dtype, device, poison, fill)
    return x.permute(0, 2, 1, 3) if layout == "BSND" else x


def _workspaces(shapes, dtype, device, poison):
    """Contiguous tensors of `shapes` and `dtype` in one allocation, each starting on a 16-byte
    boundary (Triton specialises a pointer on it); NaN-filled when `poison`, else uninitialized."""
    per = max(1, 16 // dtype.itemsize)
    sizes = [math.prod(s) for s in shapes]
    starts, n = [], 0
    for size in sizes:
        starts.append(n)
        n += -(-size // per) * per
    buf = _new((n,), dtype, device, poison)
    return [buf[a : a + size].view(shape) for a, size, shape in zip(starts, sizes, shapes)]


def _check(name, x, shape, dtype):
    """Raise ValueError unless `x` is a tensor of `dtype` whose physical shape is `shape`."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} = {type(x).__name__} is invalid; accepted: a torch.Tensor")
    if x.dtype != dtype:
        raise ValueError(f"{name}.dtype = {x.dtype} is invalid; accepted: {dtype} (this module was generated for it)")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}.shape = {tuple(x.shape)} is invalid; accepted: {tuple(shape)} ({LAYOUT}, the spec this module was generated for)")


def _physical_shape(shape):
    return (shape[0], shape[2], shape[1], shape[3]) if LAYOUT == "BSND" else tuple(shape)

# --- launches ---------------------------------------------------------------------------------------
#
# The first launch of a kernel for a specialisation goes through Triton (`kernel[grid](...)`: it binds
# and specialises the arguments, compiles or finds the kernel, launches it) and returns the compiled
# kernel; later launches with the same specialisation call the compiled kernel's launcher directly,
# with the arguments in the order of the kernel's parameters, as Triton's own launch passes them. The
# key holds everything Triton specialises on here: the current device, every tensor's dtype and
# 16-byte alignment, and the integer arguments' values (exact: finer than Triton's "== 1", "% 16 == 0"
# and 32/64-bit classes); the constexprs, warps and stages are constants of each `_launch_*`. Where the
# launch form is not recognised (`_direct_launch` returns None), a launch hook is set (profilers), or
# under TRITON_INTERPRET=1, every launch takes Triton's path.

LAUNCHES = {"direct": 0, "ordinary": 0}  # launch counters, for tests and benchmarks
_DIRECT = {}  # key (see above) -> launch(grid, stream, args) of the compiled kernel, or None: Triton's path
_DIRECT_LIMIT = 1024  # keys kept
_DIRECT_ON = os.environ.get("TRITON_INTERPRET") != "1"
_RUNTIME_KNOBS = getattr(getattr(triton, "knobs", None), "runtime", None)  # where Triton keeps the launch hooks (3.9; None: older)
_LAUNCHER_PARAMS = ("gridX", "gridY", "gridZ", "stream", "function", "kernel_metadata", "launch_metadata", "launch_enter_hook", "launch_exit_hook")


def _device_stream():
    """(device index, raw stream) as Triton's launch reads them."""
    from triton.runtime import driver

    device = driver.active.get_current_device()
    return device, driver.active.get_current_stream(device)


def _hooks_idle():
    """No launch hook is set: each is None, or an empty hook chain (Triton 3.9 keeps chains)."""
    enter, exit_ = getattr(_RUNTIME_KNOBS, "launch_enter_hook", 0), getattr(_RUNTIME_KNOBS, "launch_exit_hook", 0)
    return (enter is None or getattr(enter, "calls", 0) == []) and (exit_ is None or getattr(exit_, "calls", 0) == [])


def _launcher_form(run):
    """`run`'s named parameters are a prefix of _LAUNCHER_PARAMS, followed by *args (and maybe **kwargs)."""
    import inspect

    params = [p for p in inspect.signature(run).parameters.values() if p.kind != p.VAR_KEYWORD]
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return bool(params) and params[-1].kind == params[-1].VAR_POSITIONAL and tuple(named) == _LAUNCHER_PARAMS[: len(named)]


def _direct_launch(kernel, compiled, n_args, consts):
    """launch(grid, stream, args) through `compiled` (what `kernel[grid](...)` returned), or None when
    the installed Triton's form is not recognised: `compiled` must have `run` (the launcher),
    `function`, `packed_metadata` and `src.signature`; the launcher's named parameters must be a prefix
    of _LAUNCHER_PARAMS followed by *args; the constexprs must be the kernel's last parameters, and the
    signature the launcher was built from must hold either every parameter (the constexprs are then
    passed too, as Triton 3.9 does) or the `n_args` runtime ones alone."""
    try:
        names = list(kernel.arg_names)
        if hasattr(compiled, "result") or sorted(names[n_args:]) != sorted(consts):
            return None
        n_sig = len(compiled.src.signature)
        tail = tuple(consts[n] for n in names[n_args:]) if n_sig == len(names) else () if n_sig == n_args else None
        run = compiled.run
        if tail is None or not _launcher_form(run):
            return None
        function, metadata = compiled.function, compiled.packed_metadata
    except Exception:  # any other form: Triton's path
        return None

    def launch(grid, stream, args):
        run(*grid, stream, function, metadata, None, None, None, *args, *tail)

    return launch


def _launch(kernel, grid, tensors, ints, consts, num_warps, num_stages, record=None):
    """Launch `kernel` on `grid` (1 to 3 axes) with the pointer arguments `tensors`, then the integer
    arguments `ints` (strides, shapes), then the constexprs `consts` (name -> value). `record`: a list
    that gets (direct launch or None, the 3-axis grid, `ints`) of this launch (see `_bind`)."""
    key = None
    if _DIRECT_ON:
        device, stream = _device_stream()
        key = (id(kernel), device, ints, *[(x.dtype, x.data_ptr() % 16 == 0) for x in tensors])
        direct = _DIRECT.get(key)
        if direct is not None and _hooks_idle():
            try:
                direct((*grid, 1, 1)[:3], stream, (*tensors, *ints))
            except TypeError:  # arguments refused before any launch: Triton's path from now on
                _DIRECT[key] = None
            else:
                LAUNCHES["direct"] += 1
                if record is not None:
                    record.append((direct, (*grid, 1, 1)[:3], ints))
                return
    compiled = kernel[grid](*tensors, *ints, **consts, num_warps=num_warps, num_stages=num_stages)
    LAUNCHES["ordinary"] += 1
    if key is not None and key not in _DIRECT:
        if len(_DIRECT) >= _DIRECT_LIMIT:  # stride-varying workloads: start again
            _DIRECT.clear()
        _DIRECT[key] = _direct_launch(kernel, compiled, len(tensors) + len(ints), consts)
    if record is not None:
        record.append((_DIRECT.get(key) if key is not None else None, (*grid, 1, 1)[:3], ints))


# --- bound launch records ---------------------------------------------------------------------------
#
# A trusted `forward`/`backward` call without poison (tilegen.torch's plan cache on a hit) whose
# launches could all be direct leaves a record under a key of everything its launches depend on beyond
# this module's constants: the current device and each input's strides and 16-byte alignment (the
# shapes and dtypes are the module's own, which `trusted` vouches for). The record holds what the call
# allocated (the shared workspace buffer with the views' shapes, strides and offsets; every other new
# tensor's shape and strides), and per launch the direct launcher, the grid and the integer arguments
# (strides of the inputs and of the new tensors, shapes) as that call passed them. A later call with the
# key allocates the same, reads the current stream once and calls the launchers with its own tensors:
# no dict, no stride(), no per-launch key. It falls back to the ordinary path (which keeps every
# check of `_launch`) while a launch hook is set, under TRITON_INTERPRET=1, with poison, when the
# alignment class or a stride of an input changes (another key: its first call records again), and
# for good for a key whose launcher refuses the arguments (TypeError; the call is then redone on the
# ordinary path, every tensor new). torch's allocators start every allocation on at least a 64-byte
# boundary, so the new tensors keep the alignment class `_bind` checked. Nothing reads a tensor's
# values on the host, so a CUDA graph can capture it.

_BOUND = {}  # ("forward" | "backward", key (see above)) -> record (see `_bind`), or None: the ordinary path
BOUND_CALLS = {"forward": 0, "backward": 0}  # calls that took their bound record, for tests and benchmarks


def _bind(kind, key, record, t, inputs, workspaces, result):
    """Keep the record of a call under (`kind`, `key`) when every launch of it could be direct:
    `record` from `_launch` (one entry per launch, in order, each with `_LAUNCH_TENSORS[kind]`'s names),
    `t` the call's tensors by name, `inputs` the names of the arguments (in `forward`/`backward` order),
    `workspaces` the names of the views of the shared workspace buffer, `result` what the call returns
    (tensors of `t`, or their BNSD/BSND transposes). Keeps None (the ordinary path) when a new tensor
    does not start on a 16-byte boundary or a result is not found."""
    if len(_BOUND) >= _DIRECT_LIMIT:
        _BOUND.clear()
    if any(launch is None for launch, _, _ in record):
        _BOUND[(kind, key)] = None
        return
    names = list(inputs) + list(workspaces) + [n for n in t if n not in inputs and n not in workspaces]
    new = [t[n] for n in names[len(inputs):]]
    ws = None
    if workspaces:
        base = t[workspaces[0]]._base
        if base is None or any(t[n]._base is not base for n in workspaces):
            _BOUND[(kind, key)] = None
            return
        ws = (base.numel(), base.dtype, tuple((tuple(t[n].shape), t[n].stride(), t[n].storage_offset()) for n in workspaces))
    allocs = tuple((tuple(x.shape), x.stride(), x.dtype) for x in new[len(workspaces):])
    returns = [next(((i, p) for i, x in enumerate(new, len(inputs)) for p in (False, True) if r.data_ptr() == x.data_ptr()
                     and (not p or x.dim() == 4) and _same_view(r, x.permute(0, 2, 1, 3) if p else x)), None) for r in result]
    if any(x.data_ptr() % 16 for x in new) or None in returns:
        _BOUND[(kind, key)] = None
        return
    index = {n: i for i, n in enumerate(names)}
    launches = tuple((launch, grid, tuple(index[n] for n in tensors), ints)
                     for (launch, grid, ints), tensors in zip(record, _LAUNCH_TENSORS[kind]))
    _BOUND[(kind, key)] = (ws, allocs, launches, tuple(returns))


def _same_view(a, b):
    return tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride() and a.dtype == b.dtype


def _bound_call(kind, key, stream, args):
    """The result of a trusted call through its bound record, or None: no record (or a None one), a
    launch hook set, or a launcher refusing the arguments (the record is then dropped for good)."""
    bound = _BOUND.get((kind, key))
    if bound is None or not _hooks_idle():
        return None
    ws, allocs, launches, returns = bound
    device = args[0].device
    xs = list(args)
    if ws is not None:
        buf = torch.empty(ws[0], dtype=ws[1], device=device)
        xs += [buf.as_strided(*view) for view in ws[2]]
    xs += [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in allocs]
    try:  # an input goes as given, not as its BNSD view: a launcher reads a tensor's data_ptr() alone
        for launch, grid, tensors, ints in launches:
            launch(grid, stream, (*[xs[i] for i in tensors], *ints))
    except TypeError:  # refused (before any launch of a new form): the ordinary path, for good
        _BOUND[(kind, key)] = None
        return None
    LAUNCHES["direct"] += len(launches)
    BOUND_CALLS[kind] += 1
    return tuple(xs[i].permute(0, 2, 1, 3) if p else xs[i] for i, p in returns)




def _launch_fwd_classify(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 128, 64
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        fwd_classify_kernel,
        ((-((-Sk) // (Bc))), (-((-Sq) // (Br))), 1, ),
        (t["k_seq"], t["q_off"], t["q_seq"], t["BM"], ),
        (*t["k_seq"].stride(), *t["q_off"].stride(), *t["q_seq"].stride(), *t["BM"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_fwd_classify,
        num_warps=4, num_stages=2, record=record,
    )


_CONSTEXPRS_fwd_classify = dict(Br=128, Bc=64, **CONSTS)


def _launch_fwd(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 128, 64
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        fwd_kernel,
        ((-((-Sq) // (Br))), Hq, B, ),
        (t["Q"], t["K"], t["V"], t["O"], t["L"], t["k_seq"], t["q_off"], t["q_seq"], t["sinks"], t["BM"], t["BM_kvn"], t["BM_kvi"], ),
        (*t["Q"].stride(), *t["K"].stride(), *t["V"].stride(), *t["O"].stride(), *t["L"].stride(), *t["k_seq"].stride(), *t["q_off"].stride(), *t["q_seq"].stride(), *t["sinks"].stride(), *t["BM"].stride(), *t["BM_kvn"].stride(), *t["BM_kvi"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_fwd,
        num_warps=8, num_stages=3, record=record,
    )


_CONSTEXPRS_fwd = dict(Br=128, Bc=64, **CONSTS)


def _launch_bwd_classify(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 32, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        bwd_classify_kernel,
        ((-((-Sk) // (Bc))), (-((-Sq) // (Br))), 1, ),
        (t["k_seq"], t["q_off"], t["q_seq"], t["BM"], ),
        (*t["k_seq"].stride(), *t["q_off"].stride(), *t["q_seq"].stride(), *t["BM"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_bwd_classify,
        num_warps=4, num_stages=2, record=record,
    )


_CONSTEXPRS_bwd_classify = dict(Br=32, Bc=128, **CONSTS)


def _launch_pre(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 32, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        pre_kernel,
        ((-((-Sq) // (Br))), Hq, B, ),
        (t["O"], t["dO"], t["D"], t["dQ_ws"], t["q_seq"], ),
        (*t["O"].stride(), *t["dO"].stride(), *t["D"].stride(), *t["dQ_ws"].stride(), *t["q_seq"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_pre,
        num_warps=4, num_stages=2, record=record,
    )


_CONSTEXPRS_pre = dict(Br=32, Bc=128, **CONSTS)


def _launch_main(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 32, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        main_kernel,
        ((-((-Sk) // (Bc))), Hkv, B, ),
        (t["Q"], t["K"], t["V"], t["L"], t["dO"], t["D"], t["dQ_ws"], t["dK"], t["dV"], t["k_seq"], t["q_off"], t["q_seq"], t["BM"], t["BM_qn"], t["BM_qi"], ),
        (*t["Q"].stride(), *t["K"].stride(), *t["V"].stride(), *t["L"].stride(), *t["dO"].stride(), *t["D"].stride(), *t["dQ_ws"].stride(), *t["dK"].stride(), *t["dV"].stride(), *t["k_seq"].stride(), *t["q_off"].stride(), *t["q_seq"].stride(), *t["BM"].stride(), *t["BM_qn"].stride(), *t["BM_qi"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_main,
        num_warps=4, num_stages=3, record=record,
    )


_CONSTEXPRS_main = dict(Br=32, Bc=128, **CONSTS)


def _launch_post(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 32, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        post_kernel,
        ((-((-Sq) // (Br))), Hq, B, ),
        (t["dQ_ws"], t["dQ"], t["q_seq"], ),
        (*t["dQ_ws"].stride(), *t["dQ"].stride(), *t["q_seq"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_post,
        num_warps=4, num_stages=2, record=record,
    )


_CONSTEXPRS_post = dict(Br=32, Bc=128, **CONSTS)


_LAUNCH_TENSORS = {  # per program, each launch's tensor names in its kernel's order (see `_bind`)
    "forward": (("k_seq", "q_off", "q_seq", "BM", ), ("Q", "K", "V", "O", "L", "k_seq", "q_off", "q_seq", "sinks", "BM", "BM_kvn", "BM_kvi", ), ),
    "backward": (("k_seq", "q_off", "q_seq", "BM", ), ("O", "dO", "D", "dQ_ws", "q_seq", ), ("Q", "K", "V", "L", "dO", "D", "dQ_ws", "dK", "dV", "k_seq", "q_off", "q_seq", "BM", "BM_qn", "BM_qi", ), ("dQ_ws", "dQ", "q_seq", ), ),
}


# --- mods: parameters, block-class lists, parameter gradients ---------------------------------------

SCORE_MOD = ""
MASK_MOD = "(kv_idx \u003c= q_idx + q_off[q_idx]) \u0026 Eq(q_seq[q_idx], k_seq[kv_idx])"
# name -> (shape, dtype, values the spec carries or None)
PARAMS = {
    "k_seq": ((176,), torch.int32, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -2, -2, -2, -2, -2, -2]),
    "q_off": ((128,), torch.int32, [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 0, 0, 0, 0, 0, 0, 0, 0]),
    "q_seq": ((128,), torch.int32, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1]),
}
_BLOCKS = {}  # (kernel, device) -> block table and lists, for a mask of indices alone


def _params(params, device):
    """The parameter tensors by name, checked against PARAMS (shape, dtype, device); ValueError names
    a missing, extra or malformed one."""
    given = dict(params or {})
    out = {}
    for name, (shape, dtype, values) in PARAMS.items():
        x = given.pop(name, None)
        if x is None:
            if values is None:
                raise ValueError(f"params[{name!r}] is missing; accepted: a {dtype} tensor of shape {shape}")
            x = torch.tensor(values, dtype=dtype, device=device).reshape(shape)
        _check(f"params[{name!r}]", x, shape, dtype)
        if x.device != device:
            raise ValueError(f"params[{name!r}].device = {x.device} is invalid; accepted: {device} (q's device)")
        out[name] = x
    for name in given:
        raise ValueError(f"params[{name!r}] is invalid; accepted: the parameters {', '.join(PARAMS) or 'none'}")
    return out


def _block_lists(bm):
    """From the class table bm [Bm, Hm, nQ, nK] (0 empty, 1 partial, 2 full): per Q tile the count and
    ascending indices of its non-empty K/V tiles (BM_kvn, BM_kvi), per K/V tile those of its non-empty
    Q tiles (BM_qn, BM_qi); int32, padded with the tile count. Sorting distinct keys: deterministic."""
    nonempty = bm > 0
    nq, nk = bm.shape[2], bm.shape[3]
    kv = torch.where(nonempty, torch.arange(nk, dtype=torch.int32, device=bm.device), nk)
    qt = torch.where(nonempty.transpose(2, 3), torch.arange(nq, dtype=torch.int32, device=bm.device), nq)
    return {
        "BM_kvn": nonempty.sum(dim=3, dtype=torch.int32).contiguous(),
        "BM_kvi": kv.sort(dim=3).values.to(torch.int32).contiguous(),
        "BM_qn": nonempty.sum(dim=2, dtype=torch.int32).contiguous(),
        "BM_qi": qt.sort(dim=3).values.to(torch.int32).contiguous(),
    }


def tile_lists(kind, bm):
    """The class table bm (float32 [Bm, Hm, nQ, nK] of BLOCK_SHAPES[kind], on q's device; codes 0
    empty, 1 partial, 2 full, as the classify kernel writes them for TILE_SIZES[kind]) with its tile
    lists: the `blocks=` argument of `forward` (kind "fwd") and `backward` ("bwd"), which then walk it
    instead of running the classify kernel. ValueError: a table of another shape or dtype."""
    _check(f"blocks[{kind!r}]", bm, BLOCK_SHAPES[kind], torch.float32)
    return {"BM": bm, **_block_lists(bm)}


def _classified(t, launch, kernel, blocks=None):
    """Run the classify kernel into t["BM"] and add the tile lists to t (or take `blocks`, a dict of
    `tile_lists`, computed by the caller); with a mask of indices alone (INDEX_ONLY_MASK) the table and
    lists are computed once per device and reused."""
    if blocks is not None:
        t.update(blocks)
        return
    key = (kernel, str(t["Q"].device))
    if INDEX_ONLY_MASK and key in _BLOCKS:
        t.update(_BLOCKS[key])
        return
    launch(t)
    lists = {"BM": t["BM"], **_block_lists(t["BM"])}
    if INDEX_ONLY_MASK:
        _BLOCKS[key] = lists
    t.update(lists)


def block_lists(kind, q, params=None):
    """The class table and tile lists the `kind` ("fwd" or "bwd") launches walk for inputs on q's
    device: dict BM, BM_kvn, BM_kvi, BM_qn, BM_qi (for inspection and tests)."""
    params = _params(params, q.device)
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    t = {"Q": q, **params}
    t["BM"] = torch.full(BLOCK_SHAPES[kind], float("nan"), dtype=torch.float32, device=q.device)
    _classified(t, globals()[f"_launch_{kind}_classify"], f"{kind}_classify")
    return {name: t[name] for name in ("BM", "BM_kvn", "BM_kvi", "BM_qn", "BM_qi")}


INDEX_ONLY_MASK = False
BLOCK_SHAPES = {"bwd": [1, 1, 4, 2], "fwd": [1, 1, 1, 3]}
TILE_SIZES = {"bwd": [32, 128], "fwd": [128, 64]}  # kind -> [Br, Bc] of its block table

# --- host steps after the kernels (tilegen.core.hoststeps, as tilegen runs them on NumPy arrays) -------

def _namespace(x):
    """The array library of ``x``: ``numpy`` for a NumPy array, ``torch`` for a torch tensor."""
    return __import__(type(x).__module__.partition(".")[0])


def dsinks(d, lse, sinks, rows=None):
    """dσ_h = −Σ over the batch and rows of exp(σ_h − L)·D (DESIGN §3), float32 [Hq].

    ``d``: D = rowsum(dO∘O) [..., Hq, S] (fp32, as the backward's pre kernel forms it); ``lse``: L
    [..., Hq, S] from the forward; ``sinks``: σ [Hq]; ``rows``: None or bool [S], the rows that take
    part (a packed batch: the tokens inside a sequence). All NumPy arrays or all torch tensors (on one
    device). Formed in float64 and summed over the batch and row axes in one call of the library's sum
    over a fixed shape: bitwise the same on every run.
    """
    xp = _namespace(d)
    w = xp.exp(xp.asarray(sinks, dtype=xp.float64).reshape(-1, 1) - xp.asarray(lse, dtype=xp.float64)) * xp.asarray(d, dtype=xp.float64)
    if rows is not None:
        w = xp.where(rows, w, 0.0)
    return xp.asarray(-w.sum(tuple(range(w.ndim - 2)) + (w.ndim - 1,)), dtype=xp.float32)


def forward(q, k, v, *, sinks, params=None, blocks=None, poison=False, trusted=False):
    """Attention forward: (o, lse).

    Args:
        q: [B, Sq, Hq, Dqk] (BSND) or [B, Hq, Sq, Dqk] (BNSD), as this module's LAYOUT; k, v likewise with
            Hkv, Sk (and Dv for v); all of DTYPE, on one device. Any strides.
        sinks: float32 [Hq] on q's device, the sink logit of each query head (it joins every row's
            softmax denominator, no value; an empty row gets lse = sinks[h]).
        params: dict name -> tensor on q's device, one per parameter of PARAMS (float32 or int32, of
            its shape); a parameter whose values the spec carries may be left out.
        blocks: None (the classify kernel classifies the tiles) or `tile_lists("fwd", table)`.
        poison: fill the outputs with NaN before the launch (tests: an unwritten element shows).
        trusted: skip the checks of the inputs' shapes and dtypes (the caller has made them: tilegen.torch's
            plan cache on a hit).

    Returns:
        o: like q with Dv, DTYPE; lse: float32 [B, Hq, Sq], natural-log logsumexp (-inf: empty row).
        Rows whose q_seq id is negative are never written: O hold 0.0 there.
        Rows whose q_seq id is negative are never written: L hold -inf there.
    """
    params = _params(params, q.device)
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    Br, Bc = 128, 64
    device = q.device
    if not trusted:
        _check("q", q, _physical_shape((B, Hq, Sq, Dqk)), torch.bfloat16)
        _check("k", k, _physical_shape((B, Hkv, Sk, Dqk)), torch.bfloat16)
        _check("v", v, _physical_shape((B, Hkv, Sk, Dv)), torch.bfloat16)
        _check("sinks", sinks, (Hq,), torch.float32)
    t = {}
    t["Q"] = _logical(q)
    t["K"] = _logical(k)
    t["V"] = _logical(v)
    t["O"] = _alloc((B, Hq, Sq, Dv), torch.bfloat16, device, poison, "BSND", fill=0.0)
    t["L"] = _new((B, Hq, Sq), torch.float32, device, poison, fill=float("-inf"))
    t["k_seq"] = params["k_seq"]
    t["q_off"] = params["q_off"]
    t["q_seq"] = params["q_seq"]
    t["sinks"] = sinks
    t["BM"] = _alloc((1, 1, (-((-Sq) // (Br))), (-((-Sk) // (Bc)))), torch.float32, device, poison, "BNSD")

    record = None
    _classified(t, _launch_fwd_classify, "fwd_classify", blocks)
    _launch_fwd(t, record)
    return _logical(t["O"]), t["L"]


def backward(q, k, v, o, lse, do, *, sinks, params=None, blocks=None, poison=False, trusted=False):
    """Attention backward (recompute; dQ strategy atomic): (dq, dk, dv, dparams).

    Args:
        q, k, v: as for `forward`; o, lse: its outputs; do: dLoss/dO like o. Any strides.
        sinks: as for `forward` (lse already holds them; they enter dsinks only).
        params: as for `forward`.
        blocks: None (the classify kernel classifies the tiles) or `tile_lists("bwd", table)`.
        poison: fill outputs and workspaces with NaN before the launches.
        trusted: as for `forward`.

    Returns:
        dq like q, dk like k, dv like v (DTYPE, LAYOUT); dk and dv summed over each GQA group.
        Rows whose k_seq id is negative are never written: dV and dK hold 0.0 there.
        Rows whose q_seq id is negative are never written: dQ hold 0.0 there.
        dparams: dict name -> float32 tensor of the parameter's shape, for each float parameter and
            "sinks" (dsinks [Hq] = -sum over b and rows of exp(sinks[h] - lse) * D, D = rowsum(do * o) from
            the pre kernel, in float64, rows of a negative q_seq id left out)
            (fixed-order reductions: bitwise the same on every run).
    """
    params = _params(params, q.device)
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    Br, Bc = 32, 128
    device = q.device
    if not trusted:
        _check("q", q, _physical_shape((B, Hq, Sq, Dqk)), torch.bfloat16)
        _check("k", k, _physical_shape((B, Hkv, Sk, Dqk)), torch.bfloat16)
        _check("v", v, _physical_shape((B, Hkv, Sk, Dv)), torch.bfloat16)
        _check("o", o, _physical_shape((B, Hq, Sq, Dv)), torch.bfloat16)
        _check("lse", lse, (B, Hq, Sq), torch.float32)
        _check("do", do, _physical_shape((B, Hq, Sq, Dv)), torch.bfloat16)
    t = {}
    (t["D"], t["dQ_ws"], ) = _workspaces(((B, Hq, Sq), (B, Hq, Sq, Dqk), ), torch.float32, device, poison)
    t["Q"] = _logical(q)
    t["K"] = _logical(k)
    t["V"] = _logical(v)
    t["O"] = _logical(o)
    t["L"] = lse
    t["dO"] = _logical(do)
    t["dQ"] = _alloc((B, Hq, Sq, Dqk), torch.bfloat16, device, poison, "BSND", fill=0.0)
    t["dK"] = _alloc((B, Hkv, Sk, Dqk), torch.bfloat16, device, poison, "BSND", fill=0.0)
    t["dV"] = _alloc((B, Hkv, Sk, Dv), torch.bfloat16, device, poison, "BSND", fill=0.0)
    t["k_seq"] = params["k_seq"]
    t["q_off"] = params["q_off"]
    t["q_seq"] = params["q_seq"]
    t["BM"] = _alloc((1, 1, (-((-Sq) // (Br))), (-((-Sk) // (Bc)))), torch.float32, device, poison, "BNSD")

    record = None
    _classified(t, _launch_bwd_classify, "bwd_classify", blocks)
    _launch_pre(t, record)
    _launch_main(t, record)
    _launch_post(t, record)
    dparams = {}
    _check("sinks", sinks, (Hq,), torch.float32)
    dparams["sinks"] = dsinks(t["D"], t["L"], sinks, t["q_seq"] >= 0)
    return _logical(t["dQ"]), _logical(t["dK"]), _logical(t["dV"]), dparams


class AttentionFunction(torch.autograd.Function):
    """autograd: `forward` saves q, k, v, o, lse, the sinks and the parameters (in PARAMS order);
    `backward` runs the recompute backward and returns the gradients of the float parameters and of the sinks."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, *values):
        params = dict(zip(PARAMS, values))
        o, lse = forward(q, k, v, sinks=sinks, params=params)
        ctx.save_for_backward(q, k, v, o, lse, sinks, *values)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse, sinks, *values = ctx.saved_tensors
        grads = backward(q, k, v, o, lse, do, sinks=sinks, params=dict(zip(PARAMS, values)))
        dparams = grads[3]
        return (*grads[:3], dparams["sinks"], *(dparams.get(name) for name in PARAMS))


def attention(q, k, v, sinks, params=None):
    """o = softmax(score_mod(scale * q k^T), masked, with the sinks) v with gradients for q, k, v, the sinks and the float
    parameters (see `forward` for shapes; `params` as there)."""
    params = _params(params, q.device)
    return AttentionFunction.apply(q, k, v, sinks, *(params[name] for name in PARAMS))[0]
