"""Ascend pass ``receive-early`` (after placement and tiles): a vector hand-off load that needs no flag wait of
its own (``@no_wait``: the load of its group before it waited for the one ready flag: the backward's dP after
S) moves up to right after that load and gets ``@wait_at_read``: MTE2 copies dP while the vector computes P,
and the vector waits for it just before its first reader (the copies were one after the other with the vector
idle in between). Only where nothing between reads or writes its tile and the levels still fit.
"""

from __future__ import annotations

import dataclasses

from tilegen.core.ir import Load, Loop, Pipelined, Program, map_body, stages_of
from tilegen.models.stages import reads_in, writes_in
from tilegen.passes.ascend.common import env_of, fits, handoffs
from tilegen.passes.ascend.one_handoff_per_direction import waits
from tilegen.passes.ascend.wait_at_first_read import WaitAtRead
from tilegen.passes.driver import Pass


def receive_early(program: Program, target) -> Program:
    """Move each vector hand-off load without a flag wait of its own (``@no_wait``) up to right
    after the load of its body that waited for the group's flag, and give it ``@wait_at_read`` (see the
    module docstring): in a plain body, or inside one stage of a pipelined loop; where a statement in
    between reads or writes its tile, or the kernel's levels would not fit, the load stays."""
    handoff = handoffs(program)
    level = target.placement["vector"]
    env = env_of(program)

    kernels = []
    for k in program.kernels:
        scope = {b.name: b.scope for b in k.buffers}

        def edit(stmt):
            if not isinstance(stmt, Loop) or any(isinstance(s, Loop) for s in stmt.body):
                return stmt
            body, stages = list(stmt.body), list(stages_of(stmt)) if stages_of(stmt) else [0] * len(stmt.body)
            for n in range(len(body)):
                s = body[n]
                if not (isinstance(s, Load) and s.src.tensor in handoff and not waits(s) and scope.get(s.dst) == level):
                    continue
                waited = [m for m in range(n) if isinstance(body[m], Load) and body[m].src.tensor in handoff
                          and waits(body[m]) and stages[m] == stages[n] and scope.get(body[m].dst) == level]
                if not waited:
                    continue
                at = waited[-1] + 1
                while at < n and isinstance(body[at], Load) and body[at].has(WaitAtRead) and body[at].src.tensor in handoff:
                    at += 1  # after the loads moved up before it: they keep their order
                between = [body[m] for m in range(at, n) if stages[m] == stages[n]]
                if any(s.dst in reads_in(b) | writes_in(b) for b in between):
                    continue
                after = [b for m, b in enumerate(body) if m > n and stages[m] == stages[n] and s.dst in reads_in(b) | writes_in(b)]
                if not after or s.dst not in reads_in(after[0]):
                    continue  # its wait goes before the first reader: a writer before that would race the copy
                moved = s.annotate(WaitAtRead())
                # the other stages' statements keep their places: the load moves within its stage's list
                body = body[:at] + [moved] + body[at:n] + body[n + 1:]
                stages = stages[:at] + [stages[n]] + stages[at:n] + stages[n + 1:]
            if body == list(stmt.body):
                return stmt
            pipe = stmt.get(Pipelined)
            out = dataclasses.replace(stmt, body=tuple(body))
            return out.annotate(Pipelined(tuple(stages), pipe.lookahead)) if pipe is not None else out

        new = dataclasses.replace(k, body=map_body(k.body, edit))
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("receive-early", lambda p, c: receive_early(p, c.target), "a vector hand-off load moved up beside the load that waited for its group's flag (@wait_at_read)")
