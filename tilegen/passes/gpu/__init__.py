"""The GPU (Triton) target's pass list: placement on shared memory and registers, the tile search (each
candidate judged after direct-dq, whose effect depends on the tiles), then direct-dq itself."""

from __future__ import annotations

from tilegen.passes.driver import Context, Pass
from tilegen.passes.lower import direct_dq
from tilegen.passes.pipeline import PLACE, check_options, choose_tiles_pass, front_passes

DIRECT_DQ = Pass("direct-dq", lambda p, c: direct_dq(p, target=c.target, sinks=c.spec.sinks), "one K/V tile covers the keys: D computed and dQ stored by main, no pre and post launches (attr dq_direct)")


def passes(ctx: Context) -> tuple[Pass, ...]:
    """The Triton list for ``ctx`` (the front, then the target's steps)."""
    check_options(ctx)
    return front_passes(ctx) + (PLACE, choose_tiles_pass(score_after=True), DIRECT_DQ)
