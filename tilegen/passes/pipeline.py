"""The compiler on one screen: spec → logical IR → passes → a bound, verified program.

Each step is a function IR → IR, and the verifier runs after every one (``PassLog`` keeps the program
after each pass, for ``tilegen inspect --print-after-all``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

import dataclasses
import functools

from tilegen.core.build import build_backward, build_forward
from tilegen.core.errors import SpecError
from tilegen.core.ir import Bc, Br, Program
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import target_key
from tilegen.passes.cleanup import (
    cleanup,
    drop_stores,
    eliminate_dead,
    fold_zero_init,
    promote_accumulation,
    tidy_names,
)
from tilegen.passes.fuse import fuse
from tilegen.passes.lower import DQ_TILES, transpose_dq_tiles
from tilegen.core.strategies import DKV_AUTO, DKV_STRATEGIES, DQ_STRATEGIES, DKVStrategy, DQStrategy  # noqa: F401  (re-exported)
from tilegen.passes.verify import verify

DEFAULT_TILE = 128  # Br = Bc = 128 when no target chooses: FA2's common tile (flash_fwd_launch_template.h)


@dataclass
class PassLog:
    """The program after each pass, in order (name, program), and the schedule when a target chose one."""

    steps: list[tuple[str, Program]] = field(default_factory=list)
    schedule: object = None

    def record(self, name: str, program: Program, target=None) -> Program:
        """Verify ``program`` (naming the pass on failure), remember it, return it."""
        verify(program, name, target)
        self.steps.append((name, program))
        return program


def schedule(program: Program, spec: AttentionSpec, target, tile_sizes, log: PassLog, num_stages=None) -> Program:
    """Bind the tile sizes: with a target, place every buffer on its levels and choose (Br, Bc) under
    every level's capacity with the cost model (``tile_sizes`` forces them, still checked); without one,
    ``tile_sizes`` or the defaults. ``num_stages`` ({kernel phase: copies}, ``"*"`` for the rest): how
    many copies of a tile loaded in a serial loop the placement counts (default 2)."""
    if target is None:
        tiles = parse_tile_sizes(tile_sizes) if tile_sizes is not None else default_tiles(spec)
        return log.record("bind-tiles", program.bind(tiles))
    from tilegen.core.targets import load_target
    from tilegen.passes.place import place
    from tilegen.passes.tiles import choose_tiles

    tgt = load_target(target)
    if tgt.kind == "ascend":
        from tilegen.passes.lower import mask_cut_tiles_only, split_matmul_scale

        # the cube has no scale factor: S = scale * Q K^T becomes Q K^T, then * scale on the vector unit
        program = log.record("split-matmul-scale", split_matmul_scale(program))
        # the mask's work only on the tiles it cuts (a schedule knob of each Mask, rendered by MaskTile)
        program = log.record("mask-cut-tiles-only", mask_cut_tiles_only(program))
        from tilegen.passes.lower import snake_deal

        # programs of uneven work (a causal tile loop) dealt over the cores in boustrophedon order
        program = log.record("snake-deal", snake_deal(program))
        from tilegen.passes.lower import write_first_plain

        # a workspace tile each program owns: its first store writes it, nothing zeroes it beforehand
        program = log.record("write-first-plain", write_first_plain(program))
        from tilegen.passes.lower import own_tile_epilogue

        # a kernel that only finishes those tiles: the epilogue of each owning program
        program = log.record("own-tile-epilogue", own_tile_epilogue(program))
    gm_handoff = tgt.placement.get("handoff") == "GM"
    if gm_handoff:
        from tilegen.passes import handoff

        # the backward's S and dP in one cube step, P and dS in one vector step (statement order)
        program = log.record("unit-phases", handoff.unit_phases(program))
    program = log.record("place", place(program, tgt, dict(num_stages) if num_stages else None), tgt)
    if gm_handoff:
        # each hand-off stored right after its producer; one ready flag per batch of hand-offs
        program = log.record("one-handoff-per-direction", handoff.one_handoff_per_direction(program), tgt)
    forced = None
    if tile_sizes is not None:
        tiles = parse_tile_sizes(tile_sizes)
        forced = (tiles[Br], tiles[Bc])
    then = None  # passes whose effect depends on the tiles: the tile search scores candidates after them
    if tgt.kind == "gpu":
        from tilegen.passes.lower import direct_dq

        then = functools.partial(direct_dq, target=tgt, sinks=spec.sinks)
    program, log.schedule = choose_tiles(program, tgt, forced, then)
    program = log.record("choose-tiles", program, tgt)
    if then is not None:
        from tilegen.passes.tiles import rescheduled

        # one K/V tile covers the keys: D computed and dQ stored by main, no pre and post launches
        program = log.record("direct-dq", then(program), tgt)
        log.schedule = rescheduled(log.schedule, program, tgt)
    if tgt.kind == "ascend":
        from tilegen.passes.lower import wait_at_first_read

        # each L1 copy waited for where its tile is first read, not at once (a knob of each Load)
        program = log.record("wait-at-first-read", wait_at_first_read(program, frozenset({tgt.placement["operand"]})), tgt)
        from tilegen.passes.lower import pipeline_handoffs

        # the cube one tile ahead of the vector: stage knobs on the loops, slots and flag ids on the hand-offs
        program = log.record("pipeline-handoffs", pipeline_handoffs(program, tgt), tgt)
        from tilegen.passes.lower import pipeline_lookahead, receive_ahead

        # each unit's earlier stage two tiles ahead of its later one (a third copy and slot)
        program = log.record("pipeline-lookahead", pipeline_lookahead(program, tgt), tgt)
        # the vector's later-stage receive issued beside its earlier stage's work
        program = log.record("receive-ahead", receive_ahead(program, tgt), tgt)
        from tilegen.passes.lower import l0c_pingpong, receive_early, wait_at_rewrite

        # a hand-off the vector receives under an earlier load's flag copied beside the vector's work
        program = log.record("receive-early", receive_early(program, tgt), tgt)

        # a vector tile's store waited for where the tile is next written, not at once
        program = log.record("wait-at-rewrite", wait_at_rewrite(program, tgt), tgt)

        # each fresh cube product in column chunks through the two halves of L0C (Fixpipe beside Mmad)
        program = log.record("l0c-pingpong", l0c_pingpong(program, tgt), tgt)
        from tilegen.passes.lower import fold_row_reductions

        # each row reduction over several 64-column blocks folded to one block first (elementwise)
        program = log.record("fold-row-reductions", fold_row_reductions(program, tgt), tgt)
        from tilegen.passes.lower import stream_programs

        # a core's programs as one stream of tile pairs: the pipelined loop runs across program boundaries
        program = log.record("stream-programs", stream_programs(program, tgt), tgt)
        from tilegen.passes.lower import receive_free_early

        # the vector's receive of the next pair waits only for this pair's last access of the tile
        program = log.record("receive-free-early", receive_free_early(program, tgt), tgt)
        from tilegen.passes.lower import sink_past_free

        # the stage's work that does not touch that tile after its last access: beside the next copy
        program = log.record("sink-past-free", sink_past_free(program, tgt), tgt)
        from tilegen.passes.lower import one_launch

        # the program's kernels in one launch, an all-core barrier (SyncAll) between two of them
        program = log.record("one-launch", one_launch(program, tgt), tgt)
    return program


def default_tiles(spec: AttentionSpec) -> dict[sympy.Symbol, int]:
    """Br = Bc = 128, shrunk to the sequence rounded up to 16 when it is shorter."""

    def clamp(n: int) -> int:
        return min(DEFAULT_TILE, -(-n // 16) * 16)

    return {Br: clamp(spec.seq_q), Bc: clamp(spec.seq_k)}


def parse_tile_sizes(tile_sizes) -> dict[sympy.Symbol, int]:
    """``{"Br": 64, "Bc": 32}`` or ``(64, 32)`` → {Br: 64, Bc: 32}.

    Raises:
        SpecError: not two positive integers.
    """
    if isinstance(tile_sizes, dict):
        unknown = set(tile_sizes) - {"Br", "Bc"}
        if unknown or len(tile_sizes) != 2:
            raise SpecError("tile_sizes", tile_sizes, 'a mapping with exactly the keys "Br" and "Bc", or a pair (Br, Bc)')
        pair = (tile_sizes["Br"], tile_sizes["Bc"])
    elif isinstance(tile_sizes, (tuple, list)) and len(tile_sizes) == 2:
        pair = tuple(tile_sizes)
    else:
        raise SpecError("tile_sizes", tile_sizes, 'a pair (Br, Bc) or a mapping {"Br": ..., "Bc": ...}')
    for value in pair:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise SpecError("tile_sizes", tile_sizes, "two integers from 1 to 4096 (Br, Bc)")
    return {Br: pair[0], Bc: pair[1]}


def _cached(request, log: PassLog, build) -> Program:
    """Run ``build(log)`` through the compile cache; a cached result fills ``log.schedule`` and records
    the final program only (the passes did not run)."""
    from tilegen.core.cache import cached

    def run():
        inner = PassLog()
        program = build(inner)
        return program, inner.schedule, inner.steps

    program, sched, steps = cached(request, run)
    log.schedule = sched
    log.steps.extend(steps)
    return program


def _stages_key(num_stages) -> tuple | None:
    return None if not num_stages else tuple(sorted((str(k), int(v)) for k, v in dict(num_stages).items()))


def compile_forward(
    spec: AttentionSpec, target=None, tile_sizes=None, log: PassLog | None = None, num_stages=None, heavy_first: bool = False
) -> Program:
    """The forward program of ``spec`` with tile sizes bound (``tile_sizes`` or the defaults);
    ``num_stages`` as :func:`schedule`. ``heavy_first``: the ``fwd`` kernel's Q-tile grid axis
    outermost (a schedule knob, :func:`tilegen.passes.group.heavy_first_forward`); the default leaves
    the program as built.

    Results are cached on disk (:mod:`tilegen.core.cache`)."""
    from tilegen.passes.group import heavy_first_forward

    log = log if log is not None else PassLog()
    stages = _stages_key(num_stages)

    def build(inner: PassLog) -> Program:
        program = inner.record("build", build_forward(spec))
        if heavy_first:
            program = inner.record("heavy first", heavy_first_forward(program))
        return schedule(program, spec, target, tile_sizes, inner, stages)

    key = ("forward", spec, target_key(target), tile_sizes, stages)
    return _cached(key + (("heavy_first",) if heavy_first else ()), log, build)




def resolve_dkv_strategy(dkv_strategy: str | None, target=None) -> str:
    """The dK/dV strategy a request names: ``None`` or ``"auto"`` is ``"on-chip"`` without a target or
    on a target whose cube and vector units share on-chip memory (GPUs), and stays ``"auto"`` on one
    that hands tiles between them through GM (``placement.handoff = "GM"``: Ascend 910B), where
    :func:`compile_backward` takes ``"atomic"`` when the larger tiles it allows make the schedule
    faster (:func:`_auto_dkv`).

    Raises:
        SpecError: an unknown strategy.
    """
    if dkv_strategy not in (None, DKV_AUTO) and dkv_strategy not in DKV_STRATEGIES:
        raise SpecError("dkv_strategy", dkv_strategy, "one of " + ", ".join([DKV_AUTO, *DKV_STRATEGIES]))
    if dkv_strategy in (None, DKV_AUTO):
        if target is None:
            return "on-chip"
        from tilegen.core.targets import load_target

        return DKV_AUTO if load_target(target).placement.get("handoff") == "GM" else "on-chip"
    return dkv_strategy


def fuse_backward(program: Program, dq_strategy: str = "atomic", log: PassLog | None = None) -> Program:
    """Fuse the unfused backward's phases dv, ds, dqdk into one nest (K/V tiles outer, Q tiles inner).

    ``atomic``: dQ partials are added atomically into the fp32 workspace dQ_ws.
    ``separate``: the K/V-outer nest computes dK, dV only; a second nest with Q tiles outer recomputes
    S, P, dP and dS and keeps dQ in an on-chip accumulator (no atomics, deterministic).

    Raises:
        SpecError: an unknown strategy.
        FusionError: a merge would break a dependence.
    """
    if dq_strategy not in DQ_STRATEGIES:
        raise SpecError("dq_strategy", dq_strategy, "one of " + ", ".join(DQ_STRATEGIES))
    log = log or PassLog()
    phases = ["dv", "ds", "dqdk"]
    if dq_strategy == "atomic":
        program = log.record("fuse dv+ds+dqdk", fuse(program, phases, host="dv", name="main", phase="main"))
        program = log.record("cleanup", cleanup(program))
    else:
        # Two slices of the same three phases: one for dK, dV; one for dQ.
        copies = [dataclasses.replace(program.kernel(n), name=f"{n}_q") for n in phases]
        at = [k.name for k in program.kernels].index("dqdk") + 1
        program = dataclasses.replace(program, kernels=program.kernels[:at] + tuple(copies) + program.kernels[at:])
        program = drop_stores(program, set(phases), {"dQ_ws"})
        program = drop_stores(program, {f"{n}_q" for n in phases}, {"dK", "dV", "dK_ws", "dV_ws"})
        program = log.record("slice dK,dV | dQ", eliminate_dead(program))
        program = log.record("fuse dv+ds+dqdk", fuse(program, phases, host="dv", name="main", phase="main"))
        program = log.record(
            "fuse dv_q+ds_q+dqdk_q", fuse(program, [f"{n}_q" for n in phases], host="ds_q", name="dq", phase="dq")
        )
        program = log.record("cleanup", cleanup(program))
        program = log.record("promote dQ accumulation", promote_accumulation(program, "dq"))
        program = log.record("fold zero init", fold_zero_init(program))
        program = log.record("fuse dq+post", fuse(program, ["dq", "post"], host="dq", name="dq", phase="dq"))
        program = log.record("cleanup", cleanup(program))
    program = program.with_attrs(form="fused", dq_strategy=dq_strategy)
    return log.record("tidy names", tidy_names(program))


def compile_backward(
    spec: AttentionSpec,
    *,
    fused: bool = True,
    dq_strategy: str = "atomic",
    target=None,
    tile_sizes=None,
    log: PassLog | None = None,
    num_stages=None,
    group_split: int = 1,
    heavy_first: bool = False,
    dkv_strategy: str | None = None,
    dq_tiles: str = "same",
) -> Program:
    """The backward program of ``spec``: built, fused (unless ``fused=False``), tile sizes bound;
    ``num_stages`` as :func:`schedule`; ``dkv_strategy`` as :func:`resolve_dkv_strategy` (the
    program's attribute ``dkv_strategy`` names the one built). ``group_split`` (programs sharing the
    query heads of one KV head, a divisor of G) and ``heavy_first`` (K/V-tile grid axis outermost) are
    the fused ``main`` kernel's schedule knobs (:func:`tilegen.passes.group.split_group`); ``dq_tiles``
    (``same`` or ``transposed``) the separate strategy's ``dq`` kernel's
    (:func:`tilegen.passes.lower.transpose_dq_tiles`); the defaults leave the program as built.

    Results are cached on disk (:mod:`tilegen.core.cache`).

    Raises:
        SpecError: an unknown ``dq_strategy`` or ``dkv_strategy``, or ``group_split`` not a divisor
            of G, or knobs on an unfused program, or ``dq_tiles`` unknown or ``transposed`` where the
            program has no separate ``dq`` kernel it applies to."""
    from tilegen.passes.group import check_split, split_group

    log = log if log is not None else PassLog()
    if dq_strategy not in DQ_STRATEGIES:
        raise SpecError("dq_strategy", dq_strategy, "one of " + ", ".join(DQ_STRATEGIES))
    split = check_split(group_split)
    if spec.group % split:
        raise SpecError("group_split", group_split, f"a divisor of G = {spec.group} (the query heads per KV head)")
    knobbed = split > 1 or bool(heavy_first)
    if dq_tiles not in DQ_TILES:
        raise SpecError("dq_tiles", dq_tiles, "one of " + ", ".join(DQ_TILES))
    if dq_tiles != "same" and (not fused or dq_strategy != "separate"):
        raise SpecError("dq_tiles", dq_tiles, "'same' unless the backward is fused with the separate dQ strategy (the dq kernel it transposes)")
    if dq_tiles != "same" and target is not None:
        from tilegen.core.targets import load_target

        if load_target(target).placement.get("handoff") == "GM":
            # unit_phases (after this pass) gives main and dq one set of Br x Bc hand-off tiles
            raise SpecError("dq_tiles", dq_tiles, "'same' on a target whose cube and vector hand tiles over through GM (Ascend): its hand-off tiles are Br x Bc for main and dq alike")
    if knobbed and not fused:
        raise SpecError("group_split", group_split, "1 with heavy_first off for an unfused backward (the knobs split the fused main kernel)")
    dkv = resolve_dkv_strategy(dkv_strategy, target)
    stages = _stages_key(num_stages)
    if dkv == DKV_AUTO:
        return _auto_dkv(spec, fused, dq_strategy, target, tile_sizes, log, num_stages, split, bool(heavy_first), dq_tiles)

    def build(inner: PassLog) -> Program:
        program = inner.record("build", build_backward(spec, dkv).with_attrs(dkv_strategy=dkv))
        if fused:
            program = fuse_backward(program, dq_strategy, inner)
        if knobbed:
            program = inner.record(f"split group ({split}{', heavy first' if heavy_first else ''})", split_group(program, split, bool(heavy_first)))
        if dq_tiles == "transposed":
            try:
                program = inner.record("transpose-dq-tiles", transpose_dq_tiles(program))
            except ValueError as exc:
                raise SpecError("dq_tiles", dq_tiles, f"'same' here: {str(exc).split(': ', 1)[1]}") from None
        return schedule(program, spec, target, tile_sizes, inner, stages)

    key = ("backward", spec, fused, dq_strategy, dkv, target_key(target), tile_sizes, stages)
    key += (("dq_tiles", dq_tiles),) if dq_tiles != "same" else ()
    return _cached(key + ((split, bool(heavy_first)) if knobbed else ()), log, build)


def _auto_dkv(spec, fused, dq_strategy, target, tile_sizes, log: PassLog, num_stages, group_split=1, heavy_first=False, dq_tiles="same") -> Program:
    """``dkv_strategy="auto"`` on a GM hand-off target: the atomic program when the cost model
    (:func:`tilegen.models.cost.predict`, the figure :func:`~tilegen.passes.tiles.choose_tiles` ranks tiles
    by) predicts its schedule faster than the on-chip one's, whose tiles the accumulators held in L0C
    bound (it is, from a few thousand tokens: larger tiles), or when no tile size fits the on-chip
    one; else the on-chip program (a kernel fewer, deterministic: the small specs, where the
    launches dominate). Both compiles go through the cache; ``log`` gets the chosen one's."""
    from tilegen.core.errors import ScheduleError

    logs = {name: PassLog() for name in ("on-chip", "atomic")}

    def compiled(name):
        return compile_backward(
            spec, fused=fused, dq_strategy=dq_strategy, target=target, tile_sizes=tile_sizes, log=logs[name],
            num_stages=num_stages, dkv_strategy=name, group_split=group_split, heavy_first=heavy_first, dq_tiles=dq_tiles,
        )

    try:
        on_chip = compiled("on-chip")
    except ScheduleError:
        on_chip = None
    atomic = compiled("atomic") if on_chip is not None else None
    if on_chip is None:
        chosen, program = "atomic", compiled("atomic")
    else:
        time = {n: logs[n].schedule.prediction.time_s for n in logs}
        chosen, program = ("atomic", atomic) if time["atomic"] < time["on-chip"] else ("on-chip", on_chip)
    log.steps.extend(logs[chosen].steps)
    log.schedule = logs[chosen].schedule
    return program
