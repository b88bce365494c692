"""The ways the fused backward can reduce dQ over the K/V tiles (data only, so that the CLI can list
them without importing the passes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DQStrategy:
    """How the fused backward reduces dQ over the K/V tiles.

    Attributes:
        extra_matmuls: matmuls per visible tile pair beyond the 5 of the atomic form (S, dV, dP, dQ, dK).
        deterministic: whether the result is bitwise independent of the order programs run in.
        workspace: the HBM workspace it needs, in words.
        source: where the scheme comes from.
    """

    name: str
    extra_matmuls: int
    deterministic: bool
    workspace: str
    source: str


DQ_STRATEGIES = {
    "atomic": DQStrategy(
        "atomic",
        0,
        False,
        "dQ_ws: fp32 [B, Hq, Sq, Dqk], zeroed by pre, cast by post",
        "FlashAttention-2 (flash_bwd_launch_template.h), FlashAttention-3, Ascend FlashAttentionScoreGrad",
    ),
    "separate": DQStrategy(
        "separate",
        2,
        True,
        "none: dQ accumulates on chip in a second nest (Q tiles outer) that recomputes S, P, dP, dS",
        "Triton tutorial 06-fused-attention (_attn_bwd dQ loop), FlexAttention backward",
    ),
}


@dataclass(frozen=True)
class DKVStrategy:
    """How the fused backward reduces dK and dV over the Q tiles (and a group's query heads).

    Attributes:
        on_chip_across_loop: whether the dK, dV accumulators stay in the result level (Ascend L0C, GPU
            registers) across the whole Q loop, so that they bound the tile sizes there.
        deterministic: whether the result is bitwise independent of the order the atomics land in.
        workspace: the HBM workspace it needs, in words.
        source: where the scheme comes from.
    """

    name: str
    on_chip_across_loop: bool
    deterministic: bool
    workspace: str
    source: str


DKV_STRATEGIES = {
    "on-chip": DKVStrategy(
        "on-chip",
        True,
        True,
        "none: dK, dV accumulate on chip over the Q loop of each K/V tile, cast and stored once",
        "FlashAttention-2 (Dao 2023, Algorithm 2: dK_j, dV_j kept in SRAM over the inner loop)",
    ),
    "atomic": DKVStrategy(
        "atomic",
        False,
        False,
        "dK_ws: fp32 [B, Hkv, Sk, Dqk], dV_ws: fp32 [B, Hkv, Sk, Dv], zeroed by pre_kv (on the 910B written by each program's "
        "first store instead: @first_plain), scaled and cast by post_kv",
        "Ascend ops-transformer FlashAttentionScoreGrad (docs/FAG算子设计介绍.md: dQ, dK, dV atomically added into fp32 GM workspaces)",
    ),
}

DKV_AUTO = "auto"  # atomic on a target whose cube hands tiles to the vector unit through GM, else on-chip

DQ_TILES = ("same", "transposed")  # the separate strategy's dq kernel: main's Br x Bc, or Bc x Br (knob dq_tiles)
