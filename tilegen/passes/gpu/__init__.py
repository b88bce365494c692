"""The GPU (Triton) target's pass list: placement on shared memory and registers, the tile search (each
candidate judged after direct-dq, whose effect depends on the tiles), then direct-dq itself."""

from __future__ import annotations

from tilegen.passes.driver import Context, Pass
from tilegen.passes.gpu.direct_dq import DIRECT_DQ
from tilegen.passes.gpu.transpose_dq_tiles import TRANSPOSE_DQ
from tilegen.passes.pipeline import PLACE, check_options, choose_tiles_pass, front_passes


def passes(ctx: Context) -> tuple[Pass, ...]:
    """The Triton list for ``ctx`` (the front, then the target's steps)."""
    check_options(ctx)
    dq_tiles = (TRANSPOSE_DQ,) if ctx.which == "bwd" and ctx.options.dq_tiles == "transposed" else ()
    return front_passes(ctx) + dq_tiles + (PLACE, choose_tiles_pass(score_after=True), DIRECT_DQ)
