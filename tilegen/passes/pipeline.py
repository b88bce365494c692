"""The compiler's passes on one screen: the front every target shares, and the common steps of the
target lists (placement, the tile search).

A program goes spec → logical IR (``build``) → the front (the backward's fusion, its GQA knobs; the
forward's heavy-first order) → the target's list: a backend's ``passes`` (Ascend C:
:mod:`tilegen.passes.ascend`, Triton: :mod:`tilegen.passes.gpu`; none: bind the default tiles), each a
:class:`~tilegen.passes.driver.Pass` the driver (:func:`~tilegen.passes.driver.run_passes`) runs and
verifies in order. ``tilegen inspect --passes`` prints the lists.
"""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.build import build_backward, build_forward
from tilegen.core.errors import SpecError
from tilegen.core.ir import Bc, Br, Program
from tilegen.core.spec import AttentionSpec
from tilegen.core.strategies import DKV_AUTO, DKV_STRATEGIES, DQ_STRATEGIES, DQ_TILES, DKVStrategy, DQStrategy  # noqa: F401  (re-exported)
from tilegen.passes.cleanup import (
    cleanup,
    drop_stores,
    eliminate_dead,
    fold_zero_init,
    promote_accumulation,
    tidy_names,
)
from tilegen.passes.driver import Context, Pass
from tilegen.passes.fuse import fuse
from tilegen.passes.group import check_split, heavy_first_forward, split_group

DEFAULT_TILE = 128  # Br = Bc = 128 when no target chooses: FA2's common tile (flash_fwd_launch_template.h)


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


# --- the front: every target ----------------------------------------------------------------------


def check_options(ctx: Context, gm_handoff: bool = False) -> None:
    """Refuse a request whose options cannot apply, before any pass runs. ``gm_handoff``: the target
    hands tiles between its cube and vector units through GM (Ascend), which rules out transposed dq
    tiles.

    Raises:
        SpecError: an unknown ``dq_strategy`` or ``dq_tiles``, ``group_split`` not a divisor of G, knobs
            on an unfused program, or ``dq_tiles`` ``transposed`` where the program has no separate
            ``dq`` kernel it applies to (or the target hands tiles over through GM)."""
    o, spec = ctx.options, ctx.spec
    if ctx.which != "bwd":
        return
    if o.dq_strategy not in DQ_STRATEGIES:
        raise SpecError("dq_strategy", o.dq_strategy, "one of " + ", ".join(DQ_STRATEGIES))
    split = check_split(o.group_split)
    if spec.group % split:
        raise SpecError("group_split", o.group_split, f"a divisor of G = {spec.group} (the query heads per KV head)")
    if o.dq_tiles not in DQ_TILES:
        raise SpecError("dq_tiles", o.dq_tiles, "one of " + ", ".join(DQ_TILES))
    if o.dq_tiles != "same" and (not o.fused or o.dq_strategy != "separate"):
        raise SpecError("dq_tiles", o.dq_tiles, "'same' unless the backward is fused with the separate dQ strategy (the dq kernel it transposes)")
    if o.dq_tiles != "same" and gm_handoff:
        # unit_phases (after this pass) gives main and dq one set of Br x Bc hand-off tiles
        raise SpecError("dq_tiles", o.dq_tiles, "'same' on a target whose cube and vector hand tiles over through GM (Ascend): its hand-off tiles are Br x Bc for main and dq alike")
    if (split > 1 or o.heavy_first) and not o.fused:
        raise SpecError("group_split", o.group_split, "1 with heavy_first off for an unfused backward (the knobs split the fused main kernel)")


def _build(program, ctx: Context) -> Program:
    if ctx.which == "fwd":
        return build_forward(ctx.spec)
    dkv = ctx.options.dkv_strategy
    return build_backward(ctx.spec, dkv).with_attrs(dkv_strategy=dkv)


def _slice_dq(program: Program, ctx: Context) -> Program:
    # Two slices of the same three phases: one for dK, dV; one for dQ.
    phases = ["dv", "ds", "dqdk"]
    copies = [dataclasses.replace(program.kernel(n), name=f"{n}_q") for n in phases]
    at = [k.name for k in program.kernels].index("dqdk") + 1
    program = dataclasses.replace(program, kernels=program.kernels[:at] + tuple(copies) + program.kernels[at:])
    program = drop_stores(program, set(phases), {"dQ_ws"})
    program = drop_stores(program, {f"{n}_q" for n in phases}, {"dK", "dV", "dK_ws", "dV_ws"})
    return eliminate_dead(program)


BUILD = Pass("build", _build, "the spec as a logical program: online-softmax forward, or the backward's phases dv | dP->dS | dQ,dK")
FUSE_MAIN = Pass("fuse dv+ds+dqdk", lambda p, c: fuse(p, ["dv", "ds", "dqdk"], host="dv", name="main", phase="main"),
                 "the backward's three phases in one nest, K/V tiles outer (S, P recomputed once per tile pair)")
CLEANUP = Pass("cleanup", lambda p, c: cleanup(p), "copies, dead stores and redundant buffers the fusion left")
SLICE_DQ = Pass("slice dK,dV | dQ", _slice_dq, "separate dQ: the phases twice, one slice storing dK, dV, one storing dQ")
FUSE_DQ = Pass("fuse dv_q+ds_q+dqdk_q", lambda p, c: fuse(p, ["dv_q", "ds_q", "dqdk_q"], host="ds_q", name="dq", phase="dq"),
               "separate dQ: the dQ slice in one nest, Q tiles outer")
PROMOTE_DQ = Pass("promote dQ accumulation", lambda p, c: promote_accumulation(p, "dq"), "dQ accumulated on chip over the K/V tiles of its Q tile")
FOLD_ZERO = Pass("fold zero init", lambda p, c: fold_zero_init(p), "the accumulator's zero fill folded into its first product")
FUSE_DQ_POST = Pass("fuse dq+post", lambda p, c: fuse(p, ["dq", "post"], host="dq", name="dq", phase="dq"), "dQ's scale and cast at the end of its nest")
TIDY = Pass("tidy names", lambda p, c: tidy_names(p.with_attrs(form="fused", dq_strategy=c.options.dq_strategy)),
            "the fused program's buffers renamed in order; attrs form, dq_strategy")
HEAVY_FIRST_FWD = Pass("heavy first", lambda p, c: heavy_first_forward(p), "the forward's Q-tile grid axis outermost (knob heavy_first)")


def _split_group(program: Program, ctx: Context) -> Program:
    return split_group(program, check_split(ctx.options.group_split), bool(ctx.options.heavy_first))


def front_passes(ctx: Context) -> tuple[Pass, ...]:
    """The passes every target runs first, for ``ctx``'s program and options."""
    o = ctx.options
    if ctx.which == "fwd":
        return (BUILD,) + ((HEAVY_FIRST_FWD,) if o.heavy_first else ())
    out = [BUILD]
    if o.fused:
        if o.dq_strategy == "atomic":
            out += [FUSE_MAIN, CLEANUP]
        else:
            out += [SLICE_DQ, FUSE_MAIN, FUSE_DQ, CLEANUP, PROMOTE_DQ, FOLD_ZERO, FUSE_DQ_POST, CLEANUP]
        out.append(TIDY)
    split = check_split(o.group_split)
    if split > 1 or o.heavy_first:
        name = f"split group ({split}{', heavy first' if o.heavy_first else ''})"
        out.append(Pass(name, _split_group, "GQA: the main kernel's group of query heads split over programs (knobs group_split, heavy_first)"))
    return tuple(out)


# --- common steps of the target lists -------------------------------------------------------------


def _bind_default_tiles(program: Program, ctx: Context) -> Program:
    tiles = parse_tile_sizes(ctx.options.tile_sizes) if ctx.options.tile_sizes is not None else default_tiles(ctx.spec)
    return program.bind(tiles)


BIND_TILES = Pass("bind-tiles", _bind_default_tiles, "no target: the given tile sizes, or Br = Bc = 128 shrunk to the sequence")


def _place(program: Program, ctx: Context) -> Program:
    from tilegen.passes.place import place

    return place(program, ctx.target, dict(ctx.options.num_stages) if ctx.options.num_stages else None)


PLACE = Pass("place", _place, "every buffer bound to a level of the target ([placement] table); loads in serial loops multi-buffered")


def forced_tiles(ctx: Context) -> tuple[int, int] | None:
    """The request's forced (Br, Bc), or None."""
    if ctx.options.tile_sizes is None:
        return None
    tiles = parse_tile_sizes(ctx.options.tile_sizes)
    return tiles[Br], tiles[Bc]


def choose_tiles_pass(score_after: bool) -> Pass:
    """The tile search as a pass: (Br, Bc) under every level's capacity, ranked by the cost model
    (:func:`tilegen.passes.tiles.choose_tiles`). ``score_after``: each candidate is judged by the
    program the passes after it make of it (their effect depends on the tiles); else by the placed
    program. The search's table goes to the run's log (``schedule``)."""
    from tilegen.passes.tiles import choose_tiles

    def run(program: Program, ctx: Context, rest):
        then = (lambda bound: rest(bound, ctx)[0]) if score_after else None
        bound, schedule = choose_tiles(program, ctx.target, forced_tiles(ctx), then)
        ctx.log.schedule = schedule
        return bound, ctx, None

    return Pass("choose-tiles", run, "(Br, Bc): the fastest predicted candidate that fits every level" + (", judged after the passes that follow" if score_after else ""), search=True)
