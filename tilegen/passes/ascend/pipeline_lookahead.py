"""Ascend pass ``pipeline-lookahead`` (right after pipeline_handoffs): in a pipelined loop each unit issues its
earlier stage of tile j + 2 before its later stage of tile j (``Pipelined.lookahead`` = 2): the cube the next
scores before it waits for what the vector sends back for tile j, the forward's vector the softmax of j + 2
before the O update of j. With a skew of one, the forward's chain P of j → the cube's P·V of j → its S of j +
2 → the softmax of j + 2 → P of j + 2 spans two tiles and bounds the loop (the backward's through dS
likewise); with two, three. Each tile a unit's earlier stage writes and its later stage reads (the forward's V
and alpha, the backward's Q and dO) gets a third copy, each hand-off sent in an earlier stage (S and P; S and
dP) a third GM slot.
"""

from __future__ import annotations

import dataclasses

from tilegen.core.ir import Loop, Pipelined, Program, Store, map_body, stages_of, walk
from tilegen.models.stages import unit_stages
from tilegen.passes.ascend.common import env_of, fits, handoffs
from tilegen.passes.ascend.pipeline_handoffs import HandoffSlots, ready_of, slots_of
from tilegen.passes.driver import Pass

LOOKAHEAD = 2  # each unit's earlier stage two tiles ahead of its later one (three S slots in the forward)


def pipeline_lookahead(program: Program, target) -> Program:
    """Set the lookahead of every software-pipelined loop (:class:`~tilegen.core.ir.Pipelined`) to 2 (see
    the module docstring), with a third copy (``Buffer.stages`` = 3) of each tile a unit's earlier stage writes and
    its later stage reads, and a third GM slot (``@handoff_slots``) for each hand-off a unit sends in
    its earlier stage, where the levels still fit; other kernels are unchanged."""
    handoff = handoffs(program)
    env = env_of(program)
    depth = LOOKAHEAD
    kernels, early = [], set()
    for k in program.kernels:
        bufs = {b.name: b for b in k.buffers}
        units = {b.name: b.unit for b in k.buffers}
        loops = [s for s, _ in walk(k.body) if isinstance(s, Loop) and stages_of(s) and s.get(Pipelined).lookahead == 1]
        if not loops:
            kernels.append(k)
            continue
        carry: set[str] = set()
        sent: set[str] = set()
        for loop in loops:
            for unit in ("cube", "vector"):
                split = unit_stages(loop, units, unit)
                if split is None:
                    continue
                first, later = split
                carry |= {b for s in first for b in s.buffers_written() if bufs[b].unit == unit} & {b for s in later for b in s.buffers_read()}
                sent |= {s.dst.tensor for s in first if isinstance(s, Store) and s.dst.tensor in handoff}
        edit = lambda st: st.annotate(Pipelined(stages_of(st), depth)) if isinstance(st, Loop) and stages_of(st) else st  # noqa: E731
        new = dataclasses.replace(
            k, body=map_body(k.body, edit), buffers=tuple(dataclasses.replace(b, stages=max(b.stages, depth + 1)) if b.name in carry else b for b in k.buffers)
        )
        if fits(new, target, env):
            kernels.append(new)
            early |= sent
        else:
            kernels.append(k)
    tensors = tuple(t.annotate(HandoffSlots(max(slots_of(t), depth + 1), ready_of(t))) if t.name in early else t for t in program.tensors)
    return dataclasses.replace(program, kernels=tuple(kernels), tensors=tensors)


PASS = Pass("pipeline-lookahead", lambda p, c: pipeline_lookahead(p, c.target), "each unit's earlier stage two tiles ahead of its later one (@pipelined lookahead)")
