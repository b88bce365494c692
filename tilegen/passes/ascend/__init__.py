"""The Ascend C target's pass list (910B: cube and vector cores that hand tiles over through GM).

Each entry a :class:`~tilegen.passes.driver.Pass`, in the order the driver runs them; DESIGN §1 and §2 say
what each schedule knob means. Each knob is one module of this package: its annotation class(es)
(:class:`~tilegen.core.annotations.Annotation`, with the legality check the verifier runs and the note the
printer adds), the pass that sets it and the module's ``PASS``; a pass without a knob of its own
(``split-matmul-scale``, ``unit-phases``, ``pipeline-lookahead``, ``receive-early``) likewise. Before
placement the program is reshaped for the cube (no scale factor in Mmad, masks only where they cut, programs
dealt by turns, owned workspace tiles written first); placement splits every buffer the two units share into a
hand-off; the tile search ranks (Br, Bc); then the knobs that overlap the pipes: copies waited for at their
first reader, the cube a tile (then two) ahead of the vector, receives hoisted and freed early, stores waited
for at the rewrite, L0C in halves, folded row reductions, streamed programs, and one launch with SyncAll
between kernels.
"""

from __future__ import annotations

from tilegen.core.errors import ScheduleError
from tilegen.core.strategies import DKV_AUTO
from tilegen.passes.ascend import (
    fold_row_reductions,
    l0c_pingpong,
    mask_cut_tiles_only,
    one_handoff_per_direction,
    one_launch,
    own_tile_epilogue,
    pipeline_handoffs,
    pipeline_lookahead,
    receive_ahead,
    receive_early,
    receive_free_early,
    snake_deal,
    split_matmul_scale,
    stream_programs,
    unit_phases,
    wait_at_first_read,
    wait_at_next_store,
    wait_at_rewrite,
    write_first_plain,
)
from tilegen.passes.driver import Context, Pass, PassLog, run_passes
from tilegen.passes.pipeline import BIND_TILES, PLACE, check_options, choose_tiles_pass, front_passes  # noqa: F401


def _choose_dkv(program, ctx: Context, rest):
    """``dkv_strategy="auto"``: the atomic program when the cost model (:func:`tilegen.models.cost.predict`,
    the figure the tile search ranks tiles by) predicts its schedule faster than the on-chip one's,
    whose tiles the accumulators held in L0C bound (it is, from a few thousand tokens: larger tiles),
    or when no tile size fits the on-chip one; else the on-chip program (a kernel fewer,
    deterministic: the small specs, where the launches dominate)."""
    runs = {}
    for name in ("on-chip", "atomic"):
        c = ctx.with_options(dkv_strategy=name)
        log = PassLog()
        try:
            runs[name] = (c, (run_passes(None, passes(c), c, log), log))  # the list of the strategy it fixes
        except ScheduleError:
            if name == "atomic":
                raise
    if "on-chip" not in runs:
        chosen = "atomic"
    else:
        time = {n: log.schedule.prediction.time_s for n, (_, (_, log)) in runs.items()}
        chosen = "atomic" if time["atomic"] < time["on-chip"] else "on-chip"
    c, done = runs[chosen]
    return None, c, done


CHOOSE_DKV = Pass("choose-dkv-strategy", _choose_dkv, "dK/dV auto: the atomic or the on-chip backward, whichever the cost model predicts faster", search=True,
                  example=lambda ctx: ctx.with_options(dkv_strategy="atomic"))


def passes(ctx: Context) -> tuple[Pass, ...]:
    """The Ascend C list for ``ctx`` (the front, then the target's steps)."""
    check_options(ctx, gm_handoff=True)
    if ctx.which == "bwd" and ctx.options.dkv_strategy == DKV_AUTO:
        return (CHOOSE_DKV,)  # its trials run the list of the strategy each fixes
    return front_passes(ctx) + (
        # the cube has no scale factor: S = scale * Q K^T becomes Q K^T, then * scale on the vector unit
        split_matmul_scale.PASS,
        # the mask's work only on the tiles it cuts
        mask_cut_tiles_only.PASS,
        # programs of uneven work (a causal tile loop) dealt over the cores in boustrophedon order
        snake_deal.PASS,
        # a workspace tile each program owns: its first store writes it, nothing zeroes it beforehand
        write_first_plain.PASS,
        # a kernel that only finishes those tiles: the epilogue of each owning program
        own_tile_epilogue.PASS,
        # the backward's S and dP in one cube step, P and dS in one vector step (statement order)
        unit_phases.PASS,
        PLACE,
        # each hand-off stored right after its producer; one ready flag per batch of hand-offs
        one_handoff_per_direction.PASS,
        choose_tiles_pass(score_after=True),
        # each L1 copy waited for where its tile is first read, not at once
        wait_at_first_read.PASS,
        # the cube one tile ahead of the vector: stages on the loops, slots and flag ids on the hand-offs
        pipeline_handoffs.PASS,
        # each unit's earlier stage two tiles ahead of its later one (a third copy and slot)
        pipeline_lookahead.PASS,
        # the vector's later-stage receive issued beside its earlier stage's work
        receive_ahead.PASS,
        # a hand-off the vector receives under an earlier load's flag copied beside the vector's work
        receive_early.PASS,
        # a vector tile's store waited for where the tile is next written, not at once
        wait_at_rewrite.PASS,
        # each fresh cube product in column chunks through the two halves of L0C (Fixpipe beside Mmad)
        l0c_pingpong.PASS,
        # each row reduction over several 64-column blocks folded to one block first (elementwise)
        fold_row_reductions.PASS,
        # a core's programs as one stream of tile pairs: the pipelined loop runs across program boundaries
        stream_programs.PASS,
        # the vector's receive of the next pair waits only for this pair's last access of the tile
        receive_free_early.PASS,
        # the stage's work that does not touch that tile after its last access: beside the next copy
        receive_free_early.SINK_PASS,
        # a UB tile's store waited for by the next store of the same rows (the vector computes between)
        wait_at_next_store.PASS,
        # the program's kernels in one launch, an all-core barrier (SyncAll) between two of them
        one_launch.PASS,
    )
