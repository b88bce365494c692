"""The Ascend C target's pass list (910B: cube and vector cores that hand tiles over through GM).

Each entry a :class:`~tilegen.passes.driver.Pass`, in the order the driver runs them; DESIGN §1 and §2
say what each schedule knob means. Before placement the program is reshaped for the cube (no scale
factor in Mmad, masks only where they cut, programs dealt by turns, owned workspace tiles written
first); placement splits every buffer the two units share into a hand-off; the tile search ranks (Br,
Bc); then the knobs that overlap the pipes: copies waited for at their first reader, the cube a tile
(then two) ahead of the vector, receives hoisted and freed early, stores waited for at the rewrite,
L0C in halves, folded row reductions, streamed programs, and one launch with SyncAll between kernels.
"""

from __future__ import annotations

from tilegen.core.errors import ScheduleError
from tilegen.core.strategies import DKV_AUTO
from tilegen.passes import handoff
from tilegen.passes.driver import Context, Pass, PassLog, run_passes
from tilegen.passes.lower import (
    fold_row_reductions,
    l0c_pingpong,
    mask_cut_tiles_only,
    one_launch,
    own_tile_epilogue,
    pipeline_handoffs,
    pipeline_lookahead,
    receive_ahead,
    receive_early,
    receive_free_early,
    sink_past_free,
    snake_deal,
    split_matmul_scale,
    stream_programs,
    wait_at_first_read,
    wait_at_rewrite,
    write_first_plain,
)
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
    target = ctx.target
    return front_passes(ctx) + (
        # the cube has no scale factor: S = scale * Q K^T becomes Q K^T, then * scale on the vector unit
        Pass("split-matmul-scale", lambda p, c: split_matmul_scale(p), "each matmul's scale moved to a vector multiply (Mmad has none)"),
        # the mask's work only on the tiles it cuts (a schedule knob of each Mask, rendered by MaskTile)
        Pass("mask-cut-tiles-only", lambda p, c: mask_cut_tiles_only(p), "a Mask does its work only on the tiles it cuts (knob Mask.cut_only)"),
        # programs of uneven work (a causal tile loop) dealt over the cores in boustrophedon order
        Pass("snake-deal", lambda p, c: snake_deal(p), "programs of uneven work dealt over the cores by turns, odd turns from the last core down (Kernel.deal)"),
        # a workspace tile each program owns: its first store writes it, nothing zeroes it beforehand
        Pass("write-first-plain", lambda p, c: write_first_plain(p), "an owned workspace tile written by its first store, added to by the later ones (Store.first_plain, Load.zero_unless)"),
        # a kernel that only finishes those tiles: the epilogue of each owning program
        Pass("own-tile-epilogue", lambda p, c: own_tile_epilogue(p), "a kernel that only finishes owned tiles runs as the owner's epilogue (Store.signal_done, Load.wait_done)"),
        # the backward's S and dP in one cube step, P and dS in one vector step (statement order)
        Pass("unit-phases", lambda p, c: handoff.unit_phases(p), "each body reordered by cube/vector phase: the backward's S and dP share one cube step"),
        PLACE,
        # each hand-off stored right after its producer; one ready flag per batch of hand-offs
        Pass("one-handoff-per-direction", lambda p, c: handoff.one_handoff_per_direction(p), "one ready flag per batch of hand-offs (Store.signal, Load.wait_signal)"),
        choose_tiles_pass(score_after=False),
        # each L1 copy waited for where its tile is first read, not at once (a knob of each Load)
        Pass("wait-at-first-read", lambda p, c: wait_at_first_read(p, frozenset({target.placement["operand"]})), "an L1 copy waited for just before its tile's first reader (Load.wait_at_read)"),
        # the cube one tile ahead of the vector: stage knobs on the loops, slots and flag ids on the hand-offs
        Pass("pipeline-handoffs", lambda p, c: pipeline_handoffs(p, target), "the cube one tile ahead of the vector (Loop.stages, Tensor.slots, Tensor.ready)"),
        # each unit's earlier stage two tiles ahead of its later one (a third copy and slot)
        Pass("pipeline-lookahead", lambda p, c: pipeline_lookahead(p, target), "each unit's earlier stage two tiles ahead of its later one (Loop.lookahead)"),
        # the vector's later-stage receive issued beside its earlier stage's work
        Pass("receive-ahead", lambda p, c: receive_ahead(p, target), "the forward's P.V received beside the softmax of the tile two ahead (Load.hoist)"),
        # a hand-off the vector receives under an earlier load's flag copied beside the vector's work
        Pass("receive-early", lambda p, c: receive_early(p, target), "a vector hand-off load moved up beside the load that waited for its group's flag (Load.wait_at_read)"),
        # a vector tile's store waited for where the tile is next written, not at once
        Pass("wait-at-rewrite", lambda p, c: wait_at_rewrite(p, target), "a UB tile's store waited for just before the tile's next writer (Store.wait_at_rewrite)"),
        # each fresh cube product in column chunks through the two halves of L0C (Fixpipe beside Mmad)
        Pass("l0c-pingpong", lambda p, c: l0c_pingpong(p, target), "each fresh cube product in column chunks through the two halves of L0C (MatMul.n_chunk)"),
        # each row reduction over several 64-column blocks folded to one block first (elementwise)
        Pass("fold-row-reductions", lambda p, c: fold_row_reductions(p, target), "a row max/sum over several 64-column blocks folded to one block first (RowReduce.fold)"),
        # a core's programs as one stream of tile pairs: the pipelined loop runs across program boundaries
        Pass("stream-programs", lambda p, c: stream_programs(p, target), "a core's programs as one stream of tile pairs (Kernel.stream)"),
        # the vector's receive of the next pair waits only for this pair's last access of the tile
        Pass("receive-free-early", lambda p, c: receive_free_early(p, target), "the next tile's receive waits only for this tile's last access (Load.free_early)"),
        # the stage's work that does not touch that tile after its last access: beside the next copy
        Pass("sink-past-free", lambda p, c: sink_past_free(p, target), "the stage's work that does not touch that tile moved past its last access"),
        # the program's kernels in one launch, an all-core barrier (SyncAll) between two of them
        Pass("one-launch", lambda p, c: one_launch(p, target), "the program's kernels in one launch, SyncAll between two of them (Kernel.sync_all)"),
    )
