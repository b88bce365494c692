"""The GPU (Triton) target's pass list.

With the target's measured rows (``Options.schedule_rows``: what ``tilegen generate`` emits), the list
opens with select-row, whose trials run the rest with the options each ``[[triton.schedule]]`` row fixes
(:mod:`tilegen.passes.gpu.rows`). The rest: the front, transposed dq tiles where asked, placement on
shared memory and registers with the software pipeliner's staged loads, the tile search (each candidate
judged after the passes that follow, whose effect depends on the tiles), direct-dq, then the choices of
how each kernel is emitted, each an annotation defined beside its pass (a
:class:`tilegen.core.annotations.Annotation`) that the Triton lowering reads: transposed tiles, exp2 with
log2(e) folded, causal Q tiles numbered from the last, products fused into their accumulators, masking
loops split where the mask leaves tiles whole; last, the launch knobs and the schedule's record."""

from __future__ import annotations

from tilegen.passes.driver import Context, Pass
from tilegen.passes.gpu.direct_dq import DIRECT_DQ
from tilegen.passes.gpu.fold_log2 import FOLD_LOG2
from tilegen.passes.gpu.fuse_accumulation import FUSE_ACCUMULATION
from tilegen.passes.gpu.heavy_last import HEAVY_LAST
from tilegen.passes.gpu.mask_segments import MASK_SEGMENTS
from tilegen.passes.gpu.pipelined_loads import PIPELINED_LOADS
from tilegen.passes.gpu.rows import LAUNCH_KNOBS, select_row_pass
from tilegen.passes.gpu.transpose_dq_tiles import TRANSPOSE_DQ
from tilegen.passes.gpu.transposed_tiles import TRANSPOSED_TILES
from tilegen.passes.pipeline import PLACE, check_options, choose_tiles_pass, front_passes

EMIT = (TRANSPOSED_TILES, FOLD_LOG2, HEAVY_LAST, FUSE_ACCUMULATION, MASK_SEGMENTS)  # how each kernel is emitted


def passes(ctx: Context) -> tuple[Pass, ...]:
    """The Triton list for ``ctx``: select-row alone when the rows are to be tried (its trials run this
    list for each row's options), else the front, then the target's steps."""
    if ctx.options.schedule_rows and ctx.options.row is None:
        return (select_row_pass(passes),)
    check_options(ctx)
    dq_tiles = (TRANSPOSE_DQ,) if ctx.which == "bwd" and ctx.options.dq_tiles == "transposed" else ()
    return front_passes(ctx) + dq_tiles + (PLACE, PIPELINED_LOADS, choose_tiles_pass(score_after=True), DIRECT_DQ) + EMIT + (LAUNCH_KNOBS,)
