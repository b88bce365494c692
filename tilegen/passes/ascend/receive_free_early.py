"""Ascend passes ``receive-free-early`` (its knob ``@free_early``) and ``sink-past-free``.

- ``receive-free-early`` (after stream-programs): a vector hand-off load that opens a stage of a pipelined
  loop into a one-copy UB tile that only that stage accesses (the forward's S) gets :class:`FreeEarly`: the
  emitted code raises a V -> MTE2 event of the tile's own right after its last access in the stage (the cast
  of P), and the next pair's copy waits for that event alone, not for all vector work issued before it (the O
  update, a program's closing and opening), so MTE2 refills the tile while the vector does that work. The tile
  then lives over the loop (and over a streamed body): only where the levels still fit with nothing else
  taking its bytes.
- ``sink-past-free`` (right after receive-free-early): in the stage of a ``@free_early`` load, the vector's
  elementwise and row-reduction statements that do not access the tile move to right after its last access and
  the sends that follow it (the forward's alpha = exp(m − m_use) and the update of l), then the last row
  reduction with a fold that reads the tile moves after the tile's other accesses (the forward's row sum after
  the cast of P: its reduce step reads the fold alone, so the tile's event goes up between the two); each only
  where nothing in between reads what it writes or writes what it reads or writes. The tile's event is raised
  that much earlier, and that work runs beside the next tile's copy. Only where the levels still fit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Elementwise, Kernel, Load, Loop, Pipelined, Program, RowReduce, Store, map_body, stages_of, walk
from tilegen.models.stages import accessed, reads_in, stmt_unit, writes_in
from tilegen.passes.ascend.common import env_of, fits
from tilegen.passes.ascend.fold_row_reductions import fold_of
from tilegen.passes.ascend.receive_ahead import Hoist
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class FreeEarly(Annotation, key="free_early", on=("Load",)):
    """A vector hand-off load into a one-copy UB tile inside one stage of a pipelined loop: the generated
    code raises a V -> MTE2 event of its own right after the tile's last access in that stage, and the
    copy of the next tile waits for that event only, not for all vector work issued before it, so that
    MTE2 refills the tile while the vector finishes the iteration's other work (the forward's O update).
    The tile is live over the loop (:meth:`held`: nothing else may take its bytes). The result is the
    same either way."""

    def held(self, stmt) -> tuple[str, ...]:
        return (stmt.dst,)

    def check(self, node, at: Site) -> str:
        loop = at.loop
        if loop is None or not free_early_legal(at.kernel, loop, node, {t.name: t for t in at.program.tensors}):
            return ("free_early needs a hand-off received into a one-copy vector tile that only statements of the load's stage "
                    "of its pipelined loop's body access (no nested loop, no store), the load first")
        return ""

    def note(self, node) -> str:
        return "the next tile's copy waits for this tile's last access only"


def free_early_legal(kernel: Kernel, loop: Loop, load: Load, tensors: dict) -> bool:
    """Whether ``load``, a statement of the pipelined ``loop``'s body in ``kernel``, may carry
    :class:`FreeEarly`: a hand-off (``tensors`` by name) received into a one-copy vector tile, without
    ``@hoist`` or row ids, which only statements of the load's stage in that loop's body access (none a
    nested loop or a store), the load first. The pass and the annotation's check ask the same."""
    stages = stages_of(loop)
    buf = next((b for b in kernel.buffers if b.name == load.dst), None)
    if not (stages and getattr(tensors.get(load.src.tensor), "kind", "") == "handoff" and buf is not None
            and buf.unit == "vector" and buf.stages == 1 and not load.has(Hoist) and not load.rows):
        return False
    at = next(n for n, s in enumerate(loop.body) if s is load)
    users = [n for n, s in enumerate(loop.body) if any(load.dst in t.buffers_read() + t.buffers_written() for t, _ in walk((s,)))]
    inside = {id(u) for u, _ in walk(loop.body)}
    outside = any(load.dst in t.buffers_read() + t.buffers_written() for t, _ in walk(kernel.body) if id(t) not in inside)
    return (users[0] == at and not outside and all(stages[n] == stages[at] for n in users)
            and not any(isinstance(loop.body[n], (Loop, Store)) for n in users))


def receive_free_early(program: Program, target) -> Program:
    """Put :class:`FreeEarly` (see the module docstring) on each vector hand-off load into a one-copy UB
    tile that is the first statement of a pipelined loop to access it, where every other statement that
    accesses the tile is a statement of that loop's body in the load's stage (not a nested loop, not a
    store), nothing outside the loop accesses it, and the kernel's levels still fit with the tile live
    over the loop; other loads are unchanged."""
    if target.placement.get("handoff") != "GM":
        return program
    tensors = {t.name: t for t in program.tensors}
    level = target.placement["vector"]
    env = env_of(program)
    kernels = []
    for k in program.kernels:
        scope = {b.name: b.scope for b in k.buffers}
        # the legality is the verifier's: the event goes after the tile's last access, a statement of the
        # loop's body itself, none a store (a copy out of the tile would still be reading it)
        chosen = {id(s) for loop, _ in walk(k.body) if isinstance(loop, Loop) and stages_of(loop) for s in loop.body
                  if isinstance(s, Load) and scope.get(s.dst) == level and free_early_legal(k, loop, s, tensors)}
        if not chosen:
            kernels.append(k)
            continue
        new = dataclasses.replace(k, body=map_body(k.body, lambda st: st.annotate(FreeEarly()) if id(st) in chosen else st))
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def sink_past_free(program: Program, target) -> Program:
    """Reorder each pipelined loop with a ``@free_early`` load as the module docstring says; the result
    is the same (only statements with no dependence between them change places)."""
    env = env_of(program)

    def sink(loop: Loop, units: dict) -> Loop:
        pipe = loop.get(Pipelined)
        if pipe is None:
            return loop
        body, stages = list(loop.body), list(pipe.stages)

        def move_after(i: int, last: int) -> bool:
            """Move body[i] to right after body[last] where nothing in between depends on it or it on them."""
            nonlocal body, stages
            st = body[i]
            r, w = reads_in(st), writes_in(st)
            if any(w & (reads_in(o) | writes_in(o)) or r & writes_in(o) for o in body[i + 1:last + 1]):
                return False
            order = list(range(i)) + list(range(i + 1, last + 1)) + [i] + list(range(last + 1, len(body)))
            body, stages = [body[n] for n in order], [stages[n] for n in order]
            return True

        for load in [st for st in body if isinstance(st, Load) and st.has(FreeEarly)]:
            a = next(n for n, st in enumerate(body) if st is load)
            last = max(n for n, st in enumerate(body) if load.dst in accessed((st,)))
            dest = last  # past the tile's last access and the stores (sends) right after it
            while dest + 1 < len(body) and isinstance(body[dest + 1], Store) and stages[dest + 1] == stages[a]:
                dest += 1
            for i in reversed(range(a + 1, last)):  # the work that does not touch the tile, past its last access
                st = body[i]
                if (stages[i] == stages[a] and isinstance(st, (Elementwise, RowReduce)) and stmt_unit(st, units) == "vector"
                        and load.dst not in accessed((st,))):
                    if move_after(i, dest):
                        last, dest = last - 1, dest - 1
            # then a folded row reduction of the tile last among its readers: its reduce step reads the fold alone
            folds = [n for n in range(a + 1, last) if isinstance(body[n], RowReduce) and fold_of(body[n]) and body[n].src == load.dst
                     and stages[n] == stages[a] and load.dst not in writes_in(body[n])]
            if folds:
                move_after(folds[-1], dest)
        return dataclasses.replace(loop, body=tuple(body)).annotate(Pipelined(tuple(stages), pipe.lookahead))

    kernels = []
    for k in program.kernels:
        if not any(isinstance(st, Load) and st.has(FreeEarly) for st, _ in walk(k.body)):
            kernels.append(k)
            continue
        units = {b.name: b.unit for b in k.buffers}
        new = dataclasses.replace(k, body=map_body(k.body, lambda st: sink(st, units) if isinstance(st, Loop) else st))
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("receive-free-early", lambda p, c: receive_free_early(p, c.target), "the next tile's receive waits only for this tile's last access (@free_early)")
SINK_PASS = Pass("sink-past-free", lambda p, c: sink_past_free(p, c.target), "the stage's work that does not touch that tile moved past its last access")
