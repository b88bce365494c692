"""Ascend pass ``wait-at-first-read`` and its knob ``@wait_at_read`` (after placement): a load into a level of
``levels`` (the cube's L1) whose next statement does not read its tile gets :class:`WaitAtRead`: the emitted
code waits for the copy just before the first statement that reads the tile (LoadNzAsync/WaitLoaded), so that
the statements in between (another copy, a matmul of tiles already there) overlap it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Load, Loop, Program, Stmt
from tilegen.models.stages import reads_in, writes_in
from tilegen.passes.ascend.common import handoffs
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class WaitAtRead(Annotation, key="wait_at_read", on=("Load",)):
    """The generated code waits for the copy just before the first later statement of the same body
    that reads ``dst`` (at the end of the body, or of its stage of a pipelined loop, when none does),
    not right after the copy. The result is the same either way. Set by this pass on L1 copies, by
    ``receive-ahead`` and ``receive-early`` on vector hand-off loads."""

    def note(self, node) -> str:
        return "waited for at its first reader"


def wait_at_first_read(program: Program, levels: frozenset[str]) -> Program:
    """Put :class:`WaitAtRead` on every unguarded ``Load`` (no ``rows``) into a buffer placed on one of
    ``levels`` whose first reader, later in the same body, is not the next statement, and that nothing
    between writes again (see the module docstring)."""
    scope = {b.name: b.scope for k in program.kernels for b in k.buffers}
    handoff = handoffs(program)  # their copies wait on a cross-core flag

    def fix(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        out = [dataclasses.replace(s, body=fix(s.body)) if isinstance(s, Loop) else s for s in body]
        for n, stmt in enumerate(out):
            if not isinstance(stmt, Load) or scope.get(stmt.dst) not in levels or stmt.src.tensor in handoff or stmt.rows:
                continue  # a guarded load (packed batch) reads its rows' ids on the scalar unit and waits at once
            readers = [m for m in range(n + 1, len(out)) if stmt.dst in reads_in(out[m])]
            if not readers or readers[0] == n + 1:
                continue
            if any(stmt.dst in writes_in(out[m]) for m in range(n + 1, readers[0])):
                continue
            out[n] = stmt.annotate(WaitAtRead())
        return tuple(out)

    kernels = tuple(dataclasses.replace(k, body=fix(k.body)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


PASS = Pass("wait-at-first-read", lambda p, c: wait_at_first_read(p, frozenset({c.target.placement["operand"]})),
            "an L1 copy waited for just before its tile's first reader (@wait_at_read)")
