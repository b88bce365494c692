"""Ascend pass ``wait-at-rewrite`` and its knob ``@wait_at_rewrite`` (after placement and tiles): a store from a
vector (UB) tile inside a serial loop that also writes the tile gets :class:`WaitAtRewrite`: the copy's
closing MTE3 -> V wait moves to just before the tile's next writer (the next iteration's), so the vector
computes on while the copy runs (the forward's P hand-off); the tile is then live over its loops (the store's
and every loop around it), which must still fit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Loop, Program, Store, map_body, stages_of, walk
from tilegen.models.stages import writes_in
from tilegen.passes.ascend.common import env_of, fits
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class WaitAtRewrite(Annotation, key="wait_at_rewrite", on=("Store",)):
    """The copy's closing wait (its source buffer free again) is not taken at once but just before the
    next statement that writes the buffer (in a loop: the next iteration's writer), and the buffer stays
    live over its loop (:meth:`held`), so that the compute in between overlaps the copy."""

    def held(self, stmt) -> tuple[str, ...]:
        return (stmt.src,)

    def note(self, node) -> str:
        return f"waited for before {node.src} is next written"


def wait_at_rewrite(program: Program, target) -> Program:
    """Put :class:`WaitAtRewrite` on every unguarded, non-atomic store of a 2-d tile on the target's
    vector level, directly in a serial loop's body that also writes that tile (see the module
    docstring), where
    the kernel's levels still fit with those tiles live over their loops. Kernels where they would not
    fit are unchanged."""
    level = target.placement["vector"]
    env = env_of(program)

    kernels = []
    for k in program.kernels:
        bufs = {b.name: b for b in k.buffers}
        candidates = []  # ids of the stores that may take the knob, innermost loops first
        # serial loops only: in a grid loop the next writer opens the next program at once, and the
        # programs stay independent (the timeline's cost-only form schedules them alone)
        serial = [(s, d) for s, d in walk(k.body) if isinstance(s, Loop) and s.kind == "serial"]
        for loop, _ in sorted(serial, key=lambda x: -len(x[1])):
            stage = dict(zip(map(id, loop.body), stages_of(loop)))
            for s in loop.body:
                if not isinstance(s, Store) or s.rows or s.accumulate or bufs[s.src].scope != level or len(bufs[s.src].shape) != 2:
                    continue
                writers = [w for w in loop.body if s.src in writes_in(w)]
                # the writers are plain statements of the loop's body (the wait goes before one), in the
                # store's stage of a pipelined loop (its list of statements is where the wait goes)
                if writers and all(not isinstance(w, Loop) and stage.get(id(w)) == stage.get(id(s)) for w in writers):
                    candidates.append(id(s))
        chosen: set[int] = set()
        for cand in candidates:  # one at a time, kept where the levels still fit
            trial = chosen | {cand}
            edit = lambda st, t=trial: st.annotate(WaitAtRewrite()) if id(st) in t else st  # noqa: E731
            if fits(dataclasses.replace(k, body=map_body(k.body, edit)), target, env):
                chosen = trial
        edit = lambda st: st.annotate(WaitAtRewrite()) if id(st) in chosen else st  # noqa: E731
        kernels.append(dataclasses.replace(k, body=map_body(k.body, edit)))
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("wait-at-rewrite", lambda p, c: wait_at_rewrite(p, c.target), "a UB tile's store waited for just before the tile's next writer (@wait_at_rewrite)")
