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
