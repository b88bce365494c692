"""Ascend pass ``wait-at-next-store`` and its knob ``@wait_at_next_store`` (last but one, before one-launch): a
plain vector store of a 2-d UB tile followed, in the same body and the same part of it, by another plain
vector store of the same rows (the forward's O, then L; the atomic backward's epilogue: dK, then dV) drops its
closing MTE3 -> V wait, and the later store's closing wait covers both: ``WaitMte3ToV`` is a
``SetFlag``/``WaitFlag`` pair on the MTE3 -> V event, which fires once MTE3 has finished every copy issued to
it before (asc-devkit SetFlag-WaitFlag(ISASI).md), so the earlier store's copy has read its tile by then too.
The vector meanwhile computes what comes between (the forward's lse = log(l) + m; the backward's cast of dV),
and a copy in between (the backward's load of dV_ws) runs on MTE2 beside the store's on MTE3, where each store
waited for its own copy before anything else was issued.

Legal where nothing between the two stores writes the earlier store's tile and its bytes are no other
buffer's meanwhile (the tile is held live over the loops around it: :meth:`WaitAtNextStore.held`), where the
later store always copies when the earlier one does (the same rows of tensors of the same row extent: a store
of no valid row returns before its wait), and where the backend lowers both in one list of ops (not across
the stages of a pipelined loop, nor across the streams of a streamed program's opening statements). The pass
keeps a kernel's stores as they are where the levels would not fit with the tiles held. The values are
unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Loop, Program, Store, grid_loops, map_body, stages_of
from tilegen.models.stages import writes_in
from tilegen.passes.ascend.common import env_of, fits, handoffs
from tilegen.passes.ascend.wait_at_rewrite import WaitAtRewrite
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class WaitAtNextStore(Annotation, key="wait_at_next_store", on=("Store",)):
    """The store's closing wait (its tile read by MTE3) is not taken; the next plain vector store of the
    same body, of the same rows, takes it for both. The tile is live over the loops around the store
    (:meth:`held`), so that nothing else writes its bytes before that wait."""

    def held(self, stmt) -> tuple[str, ...]:
        return (stmt.src,)

    def check(self, node, at: Site) -> str:
        if covering_store(at.program, at.kernel, at.body, at.index, at.loop) is None:
            return ("wait_at_next_store needs a plain store of a 2-d vector tile followed, in its body's part, by a plain vector "
                    "store of the same rows, with no loop and no writer of the tile between")
        return ""

    def note(self, node) -> str:
        return "its copy waited for by the next store's"


def _plain(program: Program, kernel, stmt) -> bool:
    """A non-atomic, unguarded vector store into a tensor that is not a hand-off."""
    units = {b.name: b.unit for b in kernel.buffers}
    return (isinstance(stmt, Store) and units.get(stmt.src) == "vector" and not stmt.accumulate and not stmt.rows
            and stmt.dst.tensor not in handoffs(program))


def _rows(program: Program, store: Store) -> tuple:
    """What a store's count of valid rows depends on: its first tiled dimension's start and size, and the
    tensor's extent there."""
    access = store.dst
    dim = len(access.index) - len(access.tile)
    return access.index[dim], access.tile[0], program.tensor(access.tensor).shape[dim]


def covering_store(program: Program, kernel, body: tuple, n: int, loop: Loop | None) -> int | None:
    """The index in ``body`` of the store whose closing wait may cover ``body[n]``'s (see the module
    docstring), or None where ``body[n]`` may not carry :class:`WaitAtNextStore`. ``loop``: the loop whose
    body is ``body`` (None: a kernel's top level)."""
    s = body[n]
    bufs = {b.name: b for b in kernel.buffers}
    if not _plain(program, kernel, s) or s.has(WaitAtRewrite) or len(bufs[s.src].shape) != 2:
        return None
    stages = stages_of(loop) if loop is not None else ()
    grid = grid_loops(kernel)
    if any(a.streams() for a in kernel.ann) and grid and loop is grid[-1]:
        # a streamed program's opening statements run in two streams: only its closing ones are one list
        if not any(isinstance(st, Loop) for st in body[:n]):
            return None
    for m in range(n + 1, len(body)):
        st = body[m]
        if isinstance(st, Loop) or s.src in writes_in(st) or (stages and stages[m] != stages[n]):
            return None
        if isinstance(st, Store) and bufs.get(st.src) is not None and bufs[st.src].unit == "vector":
            closes = _plain(program, kernel, st) and not st.has(WaitAtRewrite) and not st.has(WaitAtNextStore)
            return m if closes and _rows(program, st) == _rows(program, s) else None
    return None


def wait_at_next_store(program: Program, target) -> Program:
    """Put :class:`WaitAtNextStore` on every store :func:`covering_store` accepts, in each kernel where the
    levels still fit with those tiles held live; other kernels are unchanged."""
    if target.placement.get("handoff") != "GM":
        return program
    env = env_of(program)
    kernels = []
    for k in program.kernels:
        chosen: set[int] = set()

        def visit(body, loop):
            for n, st in enumerate(body):
                if isinstance(st, Loop):
                    visit(st.body, st)
                elif covering_store(program, k, body, n, loop) is not None:
                    chosen.add(id(st))

        visit(k.body, None)
        if not chosen:
            kernels.append(k)
            continue
        new = dataclasses.replace(k, body=map_body(k.body, lambda st: st.annotate(WaitAtNextStore()) if id(st) in chosen else st))
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("wait-at-next-store", lambda p, c: wait_at_next_store(p, c.target),
            "a UB tile's store waited for by the next store of the same rows (@wait_at_next_store)")
