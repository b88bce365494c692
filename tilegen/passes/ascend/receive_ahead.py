"""Ascend pass ``receive-ahead`` and its knob ``@hoist`` (after pipeline_lookahead): a hand-off the vector's
later stage receives with its own flag (the forward's P·V of tile j) gets :class:`Hoist` and
``@wait_at_read``: the copy is issued right after the earlier stage's receive of S of j + 2, so that it runs
beside that softmax, and waited for at its first reader (acc += P·V). Its tile then lives over the loop. Where
the vector binds, P·V of j is ready by then (P of j went out two softmaxes earlier); where the cube binds, its
flag wait stops the AIV until the cube has computed it (see DESIGN §2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Load, Loop, Program, lookahead_of, map_body, stages_of, walk
from tilegen.models.stages import reads_in, unit_stages, writes_in
from tilegen.passes.ascend.common import env_of, fits, handoffs
from tilegen.passes.ascend.one_handoff_per_direction import waits
from tilegen.passes.ascend.wait_at_first_read import WaitAtRead
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class Hoist(Annotation, key="hoist", on=("Load",)):
    """A vector hand-off load in the later stage of a pipelined loop: in each iteration the generated code
    issues it, with its flag wait, right after the earlier stage's first hand-off receive (of the tile
    ``lookahead`` ahead) and before the rest of that stage's work, so that the copy runs beside it; the
    tile is live over the loop (:meth:`held`). It comes with ``@wait_at_read``. The result is the same
    either way."""

    def held(self, stmt) -> tuple[str, ...]:
        return (stmt.dst,)

    def check(self, node, at: Site) -> str:
        loop = at.loop
        if (loop is None or lookahead_of(loop) < 2 or not node.has(WaitAtRead)
                or getattr(next((t for t in at.program.tensors if t.name == node.src.tensor), None), "kind", "") != "handoff"):
            return "a hoisted load receives a hand-off in a loop with lookahead >= 2, with wait_at_read"
        return ""

    def note(self, node) -> str:
        return "received ahead, beside the earlier stage's work"


def receive_ahead(program: Program, target) -> Program:
    """Put :class:`Hoist` and ``@wait_at_read`` on each vector hand-off load of the later stage of a
    pipelined loop with a lookahead >= 2 (see the module docstring) that waits for its own ready
    flag, where the vector's earlier stage starts from a hand-off receive of its own, no statement of
    the earlier stage and none before the load in the later stage touches its tile, its first later
    access reads it, and the levels still fit with the tile live over the loop. Other loads are
    unchanged."""
    handoff = handoffs(program)
    env = env_of(program)
    kernels = []
    for k in program.kernels:
        units = {b.name: b.unit for b in k.buffers}
        chosen: set[int] = set()
        for loop, _ in walk(k.body):
            if not (isinstance(loop, Loop) and stages_of(loop) and lookahead_of(loop) >= 2):
                continue
            split = unit_stages(loop, units, "vector")
            if split is None:
                continue
            first, later = split
            if not (first and isinstance(first[0], Load) and first[0].src.tensor in handoff):
                continue
            for n, s in enumerate(later):
                if not (isinstance(s, Load) and s.src.tensor in handoff and waits(s) and not s.rows):
                    continue
                touched = {b for o in first + later[:n] for b in reads_in(o) | writes_in(o)}
                # its first later access must read it (a writer before the reader would race the copy)
                nxt = next((o for o in later[n + 1:] if s.dst in reads_in(o) | writes_in(o)), None)
                if s.dst not in touched and nxt is not None and s.dst in reads_in(nxt) and s.dst not in writes_in(nxt):
                    chosen.add(id(s))
        if not chosen:
            kernels.append(k)
            continue
        edit = lambda st: st.annotate(Hoist(), WaitAtRead()) if id(st) in chosen else st  # noqa: E731
        new = dataclasses.replace(k, body=map_body(k.body, edit))
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("receive-ahead", lambda p, c: receive_ahead(p, c.target), "the forward's P.V received beside the softmax of the tile two ahead (@hoist)")
