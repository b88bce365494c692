"""Attention kernels for the spec `llama2-7b` on the target `h200`: forward and fused backward.

Written by tilegen's Triton backend from the scheduled tile IR; regenerate it rather than edit it
(`tilegen generate SPEC_FILE --target h200 -o DIR`).

Spec:
    name = "llama2-7b"
    batch = 1
    heads_q = 32
    heads_kv = 32
    seq_q = 4096
    seq_k = 4096
    head_dim_qk = 128
    head_dim_v = 128
    dtype = "fp16"
    mask = "causal"
    alignment = "bottom_right"
    layout = "BSND"

Notation (tilegen DESIGN §3):
    Q [B, Hq, Sq, Dqk], K [B, Hkv, Sk, Dqk], V [B, Hkv, Sk, Dv], O and dO [B, Hq, Sq, Dv]: logical BNSD
    order (the arrays in memory are BSND; every kernel takes the strides of the logical dims).
    L [B, Hq, Sq]: logsumexp of the visible scores, natural log, fp32 (-inf on a row with no visible key).
    D [B, Hq, Sq]: rowsum(dO * O), fp32.  dQ_ws: the fp32 dQ accumulator of the atomic strategy.
    S = scale * Q K^T with scale = 0.08838834764831843; P = exp(S - L); dP = dO V^T; dS = P * (dP - D);
    dV = P^T dO; dQ = scale * dS K; dK = scale * dS^T Q; dK, dV summed over the G = Hq / Hkv query heads
    of a KV head. Key c is visible to query r iff r + off - left <= c <= r + off + right (window
    (-1, 0), off = Sk - Sq), r < Sq, c < Sk.
    Br, Bc: rows of a Q tile and of a K/V tile; Dqk_p, Dv_p: head dims padded to a power of two.
    b, hq, hkv, i, j: batch, query head, KV head, Q tile, K/V tile.
    A name ending in `_ptr` is a tensor's base pointer, `X_sN` the stride of its logical dim N.

Schedule (h200):
    llama2-7b.fwd: Br = 64, Bc = 64 (from the target's [triton] table); roofline prediction 542.289 us (tilegen inspect: also the GPU cost model's)
      kernel fwd: grid (i, hq, b), num_warps = 4, num_stages = 3; exp2 with log2(e) folded
    llama2-7b.bwd: Br = 64, Bc = 128 (from the target's [triton] table); roofline prediction 685.204 us (tilegen inspect: also the GPU cost model's)
      kernel pre: grid (i, hq, b), num_warps = 4, num_stages = 2
      kernel main: grid (j, hkv, b), num_warps = 8, num_stages = 3; [Br, Bc] tiles held transposed; exp2 with log2(e) folded
      kernel dq: grid (i, hq, b), num_warps = 8, num_stages = 3; Q tiles of Bc rows, K/V tiles of Br (dq tiles transposed); exp2 with log2(e) folded
    dQ strategy: separate.
"""

import math
import os

import torch
import triton
import triton.language as tl

SPEC = {"alignment": "bottom_right", "batch": 1, "dtype": "fp16", "head_dim_qk": 128, "head_dim_v": 128, "heads_kv": 32, "heads_q": 32, "layout": "BSND", "mask": "causal", "name": "llama2-7b", "seq_k": 4096, "seq_q": 4096}
SHAPES = {"B": 1, "Hkv": 32, "Hq": 32, "Sk": 4096, "Sq": 4096}
CONSTS = {"Dqk": 128, "Dqk_p": 128, "Dv": 128, "Dv_p": 128, "G": 1}
LAYOUT = "BSND"
DTYPE = torch.float16


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
def fwd_kernel(
    Q_ptr,
    K_ptr,
    V_ptr,
    O_ptr,
    L_ptr,
Q_s0, Q_s1, Q_s2, Q_s3,
K_s0, K_s1, K_s2, K_s3,
V_s0, V_s1, V_s2, V_s3,
O_s0, O_s1, O_s2, O_s3,
L_s0, L_s1, L_s2,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # llama2-7b.fwd, kernel fwd (phase fwd)
    b = tl.program_id(2)
    hq = tl.program_id(1)
    i = (((Br + Sq - 1) // (Br)) - 1 - tl.program_id(0))
    Qi = tl.load(Q_ptr + b * Q_s0 + hq * Q_s1 + (i*Br + tl.arange(0, Br))[:, None] * Q_s2 + tl.arange(0, Dqk_p)[None, :] * Q_s3)
    m = tl.full([Br], float("-inf"), tl.float32)
    l = tl.full([Br], 0.0, tl.float32)
    acc = tl.full([Br, Dv_p], 0.0, tl.float32)
    for j in range(0, tl.maximum(0, tl.minimum(tl.minimum(_floor_div(Sk - Sq + tl.minimum(Sq, i*Br + Br) - 1, Bc) + 1, _floor_div(-Bc + i*Br + Sk - Sq + 1, Bc) + 1), ((Bc + Sk - 1) // (Bc))))):  # visible K/V tiles of Q tile i: tiles the mask leaves whole
        Kj = tl.load(K_ptr + b * K_s0 + ((hq) // (G)) * K_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3)
        Vj = tl.load(V_ptr + b * V_s0 + ((hq) // (G)) * V_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3)
        S = tl.dot(Qi, tl.trans(Kj)) * 0.12751743082459868
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
        Pc = (S).to(tl.float16)
        acc = acc * alpha[:, None]
        acc = tl.dot(Pc, Vj, acc)
        m = m_new
    for j in range(tl.maximum(0, tl.minimum(tl.minimum(_floor_div(Sk - Sq + tl.minimum(Sq, i*Br + Br) - 1, Bc) + 1, _floor_div(-Bc + i*Br + Sk - Sq + 1, Bc) + 1), ((Bc + Sk - 1) // (Bc)))), tl.minimum(_floor_div(Sk - Sq + tl.minimum(Sq, i*Br + Br) - 1, Bc) + 1, ((Bc + Sk - 1) // (Bc)))):  # visible K/V tiles of Q tile i: the mask cuts these tiles
        Kj = tl.load(K_ptr + b * K_s0 + ((hq) // (G)) * K_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3)
        Vj = tl.load(V_ptr + b * V_s0 + ((hq) // (G)) * V_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3)
        S = tl.dot(Qi, tl.trans(Kj)) * 0.12751743082459868
        S = tl.where(((j*Bc + tl.arange(0, Bc))[None, :] <= (i*Br + tl.arange(0, Br))[:, None] + Sk - Sq), S, float("-inf"))
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
        Pc = (S).to(tl.float16)
        acc = acc * alpha[:, None]
        acc = tl.dot(Pc, Vj, acc)
        m = m_new
    acc = tl.where(l[:, None] != 0, acc / tl.where(l[:, None] != 0, l[:, None], 1.0), 0.0)
    Oc = (acc).to(tl.float16)
    tl.store(O_ptr + b * O_s0 + hq * O_s1 + (i*Br + tl.arange(0, Br))[:, None] * O_s2 + tl.arange(0, Dv_p)[None, :] * O_s3, Oc)
    lse = tl.log(l)
    lse = lse + (m * 0.6931471805599453)
    tl.store(L_ptr + b * L_s0 + hq * L_s1 + (i*Br + tl.arange(0, Br)) * L_s2, lse)


@triton.jit
def pre_kernel(
    O_ptr,
    dO_ptr,
    D_ptr,
O_s0, O_s1, O_s2, O_s3,
dO_s0, dO_s1, dO_s2, dO_s3,
D_s0, D_s1, D_s2,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # llama2-7b.bwd, kernel pre (phase pre)
    b = tl.program_id(2)
    hq = tl.program_id(1)
    i = tl.program_id(0)
    Oi = tl.load(O_ptr + b * O_s0 + hq * O_s1 + (i*Br + tl.arange(0, Br))[:, None] * O_s2 + tl.arange(0, Dv_p)[None, :] * O_s3)
    dOi = tl.load(dO_ptr + b * dO_s0 + hq * dO_s1 + (i*Br + tl.arange(0, Br))[:, None] * dO_s2 + tl.arange(0, Dv_p)[None, :] * dO_s3)
    O32 = (Oi).to(tl.float32)
    prod = (dOi).to(tl.float32)
    prod = prod * O32
    Di = tl.sum(prod, axis=1)
    tl.store(D_ptr + b * D_s0 + hq * D_s1 + (i*Br + tl.arange(0, Br)) * D_s2, Di)


@triton.jit
def main_kernel(
    Q_ptr,
    K_ptr,
    V_ptr,
    L_ptr,
    dO_ptr,
    D_ptr,
    dK_ptr,
    dV_ptr,
Q_s0, Q_s1, Q_s2, Q_s3,
K_s0, K_s1, K_s2, K_s3,
V_s0, V_s1, V_s2, V_s3,
L_s0, L_s1, L_s2,
dO_s0, dO_s1, dO_s2, dO_s3,
D_s0, D_s1, D_s2,
dK_s0, dK_s1, dK_s2, dK_s3,
dV_s0, dV_s1, dV_s2, dV_s3,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # llama2-7b.bwd, kernel main (phase main)
    b = tl.program_id(2)
    hkv = tl.program_id(1)
    j = tl.program_id(0)
    Kj = tl.load(K_ptr + b * K_s0 + hkv * K_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3)
    dV_acc = tl.full([Bc, Dv_p], 0.0, tl.float32)
    dK_acc = tl.full([Bc, Dqk_p], 0.0, tl.float32)
    Vj = tl.load(V_ptr + b * V_s0 + hkv * V_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3)
    for hq in range(hkv*G, hkv*G + G):  # query heads of KV head hkv
        for i in range(tl.where((Sq) <= (j*Bc - Sk + Sq), ((Br + Sq - 1) // (Br)), tl.maximum(0, _floor_div(j*Bc - Sk + Sq, Br))), tl.minimum(((Br + Sq - 1) // (Br)), tl.maximum(tl.where((Sq) <= (j*Bc - Sk + Sq), ((Br + Sq - 1) // (Br)), tl.maximum(0, _floor_div(j*Bc - Sk + Sq, Br))), (-_floor_div(-j*Bc - Bc + Sk - Sq + 1, Br))))):  # visible Q tiles of K/V tile j: the mask cuts these tiles
            Qi = tl.load(Q_ptr + b * Q_s0 + hq * Q_s1 + (i*Br + tl.arange(0, Br))[:, None] * Q_s2 + tl.arange(0, Dqk_p)[None, :] * Q_s3)
            dOi = tl.load(dO_ptr + b * dO_s0 + hq * dO_s1 + (i*Br + tl.arange(0, Br))[:, None] * dO_s2 + tl.arange(0, Dv_p)[None, :] * dO_s3)
            Li = tl.load(L_ptr + b * L_s0 + hq * L_s1 + (i*Br + tl.arange(0, Br)) * L_s2) * 1.4426950408889634
            S = tl.dot(Kj, tl.trans(Qi)) * 0.12751743082459868
            S = tl.where(((j*Bc + tl.arange(0, Bc))[:, None] <= (i*Br + tl.arange(0, Br))[None, :] + Sk - Sq), S, float("-inf"))
            L_use = tl.where(Li == float("-inf"), 0.0, Li)
            S = S - L_use[None, :]
            S = tl.exp2(S)
            Pc = (S).to(tl.float16)
            dV_acc = tl.dot(Pc, dOi, dV_acc)
            Di = tl.load(D_ptr + b * D_s0 + hq * D_s1 + (i*Br + tl.arange(0, Br)) * D_s2)
            dP = tl.dot(Vj, tl.trans(dOi))
            dP = dP - Di[None, :]
            dP = S * dP
            dSc = (dP).to(tl.float16)
            dK_acc = tl.dot(dSc, Qi, dK_acc)
        for i in range(tl.minimum(((Br + Sq - 1) // (Br)), tl.maximum(tl.where((Sq) <= (j*Bc - Sk + Sq), ((Br + Sq - 1) // (Br)), tl.maximum(0, _floor_div(j*Bc - Sk + Sq, Br))), (-_floor_div(-j*Bc - Bc + Sk - Sq + 1, Br)))), ((Br + Sq - 1) // (Br))):  # visible Q tiles of K/V tile j: tiles the mask leaves whole
            Qi = tl.load(Q_ptr + b * Q_s0 + hq * Q_s1 + (i*Br + tl.arange(0, Br))[:, None] * Q_s2 + tl.arange(0, Dqk_p)[None, :] * Q_s3)
            dOi = tl.load(dO_ptr + b * dO_s0 + hq * dO_s1 + (i*Br + tl.arange(0, Br))[:, None] * dO_s2 + tl.arange(0, Dv_p)[None, :] * dO_s3)
            Li = tl.load(L_ptr + b * L_s0 + hq * L_s1 + (i*Br + tl.arange(0, Br)) * L_s2) * 1.4426950408889634
            S = tl.dot(Kj, tl.trans(Qi)) * 0.12751743082459868
            L_use = tl.where(Li == float("-inf"), 0.0, Li)
            S = S - L_use[None, :]
            S = tl.exp2(S)
            Pc = (S).to(tl.float16)
            dV_acc = tl.dot(Pc, dOi, dV_acc)
            Di = tl.load(D_ptr + b * D_s0 + hq * D_s1 + (i*Br + tl.arange(0, Br)) * D_s2)
            dP = tl.dot(Vj, tl.trans(dOi))
            dP = dP - Di[None, :]
            dP = S * dP
            dSc = (dP).to(tl.float16)
            dK_acc = tl.dot(dSc, Qi, dK_acc)
    dVc = (dV_acc).to(tl.float16)
    tl.store(dV_ptr + b * dV_s0 + hkv * dV_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * dV_s2 + tl.arange(0, Dv_p)[None, :] * dV_s3, dVc)
    dK_acc = dK_acc * 0.08838834764831843
    dKc = (dK_acc).to(tl.float16)
    tl.store(dK_ptr + b * dK_s0 + hkv * dK_s1 + (j*Bc + tl.arange(0, Bc))[:, None] * dK_s2 + tl.arange(0, Dqk_p)[None, :] * dK_s3, dKc)


@triton.jit
def dq_kernel(
    Q_ptr,
    K_ptr,
    V_ptr,
    L_ptr,
    dO_ptr,
    D_ptr,
    dQ_ptr,
Q_s0, Q_s1, Q_s2, Q_s3,
K_s0, K_s1, K_s2, K_s3,
V_s0, V_s1, V_s2, V_s3,
L_s0, L_s1, L_s2,
dO_s0, dO_s1, dO_s2, dO_s3,
D_s0, D_s1, D_s2,
dQ_s0, dQ_s1, dQ_s2, dQ_s3,
    B, Hq, Hkv, Sq, Sk,
    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,
    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,
):
    # llama2-7b.bwd, kernel dq (phase dq)
    b = tl.program_id(2)
    hq = tl.program_id(1)
    i = (((Bc + Sq - 1) // (Bc)) - 1 - tl.program_id(0))
    dOi = tl.load(dO_ptr + b * dO_s0 + hq * dO_s1 + (i*Bc + tl.arange(0, Bc))[:, None] * dO_s2 + tl.arange(0, Dv_p)[None, :] * dO_s3)
    Di = tl.load(D_ptr + b * D_s0 + hq * D_s1 + (i*Bc + tl.arange(0, Bc)) * D_s2)
    Qi = tl.load(Q_ptr + b * Q_s0 + hq * Q_s1 + (i*Bc + tl.arange(0, Bc))[:, None] * Q_s2 + tl.arange(0, Dqk_p)[None, :] * Q_s3)
    Li = tl.load(L_ptr + b * L_s0 + hq * L_s1 + (i*Bc + tl.arange(0, Bc)) * L_s2) * 1.4426950408889634
    L_use = tl.where(Li == float("-inf"), 0.0, Li)
    dQ_acc = tl.full([Bc, Dqk_p], 0.0, tl.float32)
    for j in range(0, tl.maximum(0, tl.minimum(tl.minimum(_floor_div(Sk - Sq + tl.minimum(Sq, i*Bc + Bc) - 1, Br) + 1, _floor_div(i*Bc - Br + Sk - Sq + 1, Br) + 1), ((Br + Sk - 1) // (Br))))):  # visible K/V tiles of Q tile i: tiles the mask leaves whole
        Kj = tl.load(K_ptr + b * K_s0 + ((hq) // (G)) * K_s1 + (j*Br + tl.arange(0, Br))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3)
        S = tl.dot(Qi, tl.trans(Kj)) * 0.12751743082459868
        S = S - L_use[:, None]
        S = tl.exp2(S)
        Vj = tl.load(V_ptr + b * V_s0 + ((hq) // (G)) * V_s1 + (j*Br + tl.arange(0, Br))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3)
        dP = tl.dot(dOi, tl.trans(Vj))
        dP = dP - Di[:, None]
        dP = S * dP
        dSc = (dP).to(tl.float16)
        dQ_acc = tl.dot(dSc, Kj, dQ_acc)
    for j in range(tl.maximum(0, tl.minimum(tl.minimum(_floor_div(Sk - Sq + tl.minimum(Sq, i*Bc + Bc) - 1, Br) + 1, _floor_div(i*Bc - Br + Sk - Sq + 1, Br) + 1), ((Br + Sk - 1) // (Br)))), tl.minimum(_floor_div(Sk - Sq + tl.minimum(Sq, i*Bc + Bc) - 1, Br) + 1, ((Br + Sk - 1) // (Br)))):  # visible K/V tiles of Q tile i: the mask cuts these tiles
        Kj = tl.load(K_ptr + b * K_s0 + ((hq) // (G)) * K_s1 + (j*Br + tl.arange(0, Br))[:, None] * K_s2 + tl.arange(0, Dqk_p)[None, :] * K_s3)
        S = tl.dot(Qi, tl.trans(Kj)) * 0.12751743082459868
        S = tl.where(((j*Br + tl.arange(0, Br))[None, :] <= (i*Bc + tl.arange(0, Bc))[:, None] + Sk - Sq), S, float("-inf"))
        S = S - L_use[:, None]
        S = tl.exp2(S)
        Vj = tl.load(V_ptr + b * V_s0 + ((hq) // (G)) * V_s1 + (j*Br + tl.arange(0, Br))[:, None] * V_s2 + tl.arange(0, Dv_p)[None, :] * V_s3)
        dP = tl.dot(dOi, tl.trans(Vj))
        dP = dP - Di[:, None]
        dP = S * dP
        dSc = (dP).to(tl.float16)
        dQ_acc = tl.dot(dSc, Kj, dQ_acc)
    dQ_acc = dQ_acc * 0.08838834764831843
    dQc = (dQ_acc).to(tl.float16)
    tl.store(dQ_ptr + b * dQ_s0 + hq * dQ_s1 + (i*Bc + tl.arange(0, Bc))[:, None] * dQ_s2 + tl.arange(0, Dqk_p)[None, :] * dQ_s3, dQc)


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




def _launch_fwd(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 64, 64
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        fwd_kernel,
        ((-((-Sq) // (Br))), Hq, B, ),
        (t["Q"], t["K"], t["V"], t["O"], t["L"], ),
        (*t["Q"].stride(), *t["K"].stride(), *t["V"].stride(), *t["O"].stride(), *t["L"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_fwd,
        num_warps=4, num_stages=3, record=record,
    )


_CONSTEXPRS_fwd = dict(Br=64, Bc=64, **CONSTS)


def _launch_pre(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 64, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        pre_kernel,
        ((-((-Sq) // (Br))), Hq, B, ),
        (t["O"], t["dO"], t["D"], ),
        (*t["O"].stride(), *t["dO"].stride(), *t["D"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_pre,
        num_warps=4, num_stages=2, record=record,
    )


_CONSTEXPRS_pre = dict(Br=64, Bc=128, **CONSTS)


def _launch_main(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 64, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        main_kernel,
        ((-((-Sk) // (Bc))), Hkv, B, ),
        (t["Q"], t["K"], t["V"], t["L"], t["dO"], t["D"], t["dK"], t["dV"], ),
        (*t["Q"].stride(), *t["K"].stride(), *t["V"].stride(), *t["L"].stride(), *t["dO"].stride(), *t["D"].stride(), *t["dK"].stride(), *t["dV"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_main,
        num_warps=8, num_stages=3, record=record,
    )


_CONSTEXPRS_main = dict(Br=64, Bc=128, **CONSTS)


def _launch_dq(t, record=None):
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    Br, Bc = 64, 128
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    _launch(
        dq_kernel,
        ((-((-Sq) // (Bc))), Hq, B, ),
        (t["Q"], t["K"], t["V"], t["L"], t["dO"], t["D"], t["dQ"], ),
        (*t["Q"].stride(), *t["K"].stride(), *t["V"].stride(), *t["L"].stride(), *t["dO"].stride(), *t["D"].stride(), *t["dQ"].stride(), B, Hq, Hkv, Sq, Sk),
        _CONSTEXPRS_dq,
        num_warps=8, num_stages=3, record=record,
    )


_CONSTEXPRS_dq = dict(Br=64, Bc=128, **CONSTS)


_LAUNCH_TENSORS = {  # per program, each launch's tensor names in its kernel's order (see `_bind`)
    "forward": (("Q", "K", "V", "O", "L", ), ),
    "backward": (("O", "dO", "D", ), ("Q", "K", "V", "L", "dO", "D", "dK", "dV", ), ("Q", "K", "V", "L", "dO", "D", "dQ", ), ),
}


def forward(q, k, v, *, poison=False, trusted=False):
    """Attention forward: (o, lse).

    Args:
        q: [B, Sq, Hq, Dqk] (BSND) or [B, Hq, Sq, Dqk] (BNSD), as this module's LAYOUT; k, v likewise with
            Hkv, Sk (and Dv for v); all of DTYPE, on one device. Any strides.
        poison: fill the outputs with NaN before the launch (tests: an unwritten element shows).
        trusted: skip the checks of the inputs' shapes and dtypes (the caller has made them: tilegen.torch's
            plan cache on a hit).

    Returns:
        o: like q with Dv, DTYPE; lse: float32 [B, Hq, Sq], natural-log logsumexp (-inf: empty row).
    """
    bound_key = None
    if trusted and not poison and _DIRECT_ON:
        device, stream = _device_stream()
        bound_key = (device, q.stride(), k.stride(), v.stride(), q.data_ptr() % 16 == 0, k.data_ptr() % 16 == 0, v.data_ptr() % 16 == 0, )
        result = _bound_call("forward", bound_key, stream, (q, k, v, ))
        if result is not None:
            return result
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    device = q.device
    if not trusted:
        _check("q", q, _physical_shape((B, Hq, Sq, Dqk)), torch.float16)
        _check("k", k, _physical_shape((B, Hkv, Sk, Dqk)), torch.float16)
        _check("v", v, _physical_shape((B, Hkv, Sk, Dv)), torch.float16)
    t = {}
    t["Q"] = _logical(q)
    t["K"] = _logical(k)
    t["V"] = _logical(v)
    t["O"] = _alloc((B, Hq, Sq, Dv), torch.float16, device, poison, "BSND")
    t["L"] = _new((B, Hq, Sq), torch.float32, device, poison)

    record = [] if bound_key is not None and ("forward", bound_key) not in _BOUND else None
    _launch_fwd(t, record)
    result = (_logical(t["O"]), t["L"])
    if record is not None:
        _bind("forward", bound_key, record, t, ("Q", "K", "V", ), (), result)
    return result


def backward(q, k, v, o, lse, do, *, poison=False, trusted=False):
    """Attention backward (recompute; dQ strategy separate): (dq, dk, dv).

    Args:
        q, k, v: as for `forward`; o, lse: its outputs; do: dLoss/dO like o. Any strides.
        poison: fill outputs and workspaces with NaN before the launches.
        trusted: as for `forward`.

    Returns:
        dq like q, dk like k, dv like v (DTYPE, LAYOUT); dk and dv summed over each GQA group.
    """
    bound_key = None
    if trusted and not poison and _DIRECT_ON:
        device, stream = _device_stream()
        bound_key = (device, q.stride(), k.stride(), v.stride(), o.stride(), lse.stride(), do.stride(), q.data_ptr() % 16 == 0, k.data_ptr() % 16 == 0, v.data_ptr() % 16 == 0, o.data_ptr() % 16 == 0, lse.data_ptr() % 16 == 0, do.data_ptr() % 16 == 0, )
        result = _bound_call("backward", bound_key, stream, (q, k, v, o, lse, do, ))
        if result is not None:
            return result
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    G, Dqk, Dv = CONSTS["G"], CONSTS["Dqk"], CONSTS["Dv"]
    device = q.device
    if not trusted:
        _check("q", q, _physical_shape((B, Hq, Sq, Dqk)), torch.float16)
        _check("k", k, _physical_shape((B, Hkv, Sk, Dqk)), torch.float16)
        _check("v", v, _physical_shape((B, Hkv, Sk, Dv)), torch.float16)
        _check("o", o, _physical_shape((B, Hq, Sq, Dv)), torch.float16)
        _check("lse", lse, (B, Hq, Sq), torch.float32)
        _check("do", do, _physical_shape((B, Hq, Sq, Dv)), torch.float16)
    t = {}
    t["Q"] = _logical(q)
    t["K"] = _logical(k)
    t["V"] = _logical(v)
    t["O"] = _logical(o)
    t["L"] = lse
    t["dO"] = _logical(do)
    t["D"] = _new((B, Hq, Sq), torch.float32, device, poison)
    t["dQ"] = _alloc((B, Hq, Sq, Dqk), torch.float16, device, poison, "BSND")
    t["dK"] = _alloc((B, Hkv, Sk, Dqk), torch.float16, device, poison, "BSND")
    t["dV"] = _alloc((B, Hkv, Sk, Dv), torch.float16, device, poison, "BSND")

    record = [] if bound_key is not None and ("backward", bound_key) not in _BOUND else None
    _launch_pre(t, record)
    _launch_main(t, record)
    _launch_dq(t, record)
    result = (_logical(t["dQ"]), _logical(t["dK"]), _logical(t["dV"]))
    if record is not None:
        _bind("backward", bound_key, record, t, ("Q", "K", "V", "O", "L", "dO", ), (), result)
    return result


class AttentionFunction(torch.autograd.Function):
    """autograd: `forward` saves q, k, v, o, lse;
    `backward` runs the recompute backward."""

    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = forward(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        return backward(q, k, v, o, lse, do)


def attention(q, k, v):
    """o = softmax(scale * q k^T, masked) v with gradients for q, k, v (see `forward` for shapes)."""
    return AttentionFunction.apply(q, k, v)[0]
