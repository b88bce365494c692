"""Ascend pass ``one-handoff-per-direction`` and its knobs ``@no_signal`` (a store) and ``@no_wait`` (a load),
after placement: in every loop body without inner loops: each store into a hand-off tile moves up to just
after the last statement it depends on (its tile's producer: on Ascend the Fixpipe of S leaves L0C before dP
is computed there), keeping the order of the stores of one direction; then the consecutive stores of one
direction that the sending unit makes without receiving anything in between form a group: only the group's
last store sets the ready flag (the others get :class:`NoSignal`) and only the receiver's first load of the
group waits for it (the later ones get :class:`NoWait`). The k-th wait still pairs with the k-th set of the
shared ready flag (tilegen_runtime.h), since the receiver loads the tiles in the order they were stored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Load, Loop, Program, Stmt, Store
from tilegen.passes.ascend.common import depends, handoffs, resources
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class NoSignal(Annotation, key="no_signal", on=("Store",)):
    """A store into a hand-off tile that sets no ready flag: a later store of the same group of
    hand-offs sets the one flag the receiver waits for."""

    def check(self, node, at: Site) -> str:
        return "" if at.program.tensor(node.dst.tensor).kind == "handoff" else "no_signal on a store that is not a hand-off"

    def note(self, node) -> str:
        return "no flag: a later store of its group sets it"


@dataclass(frozen=True)
class NoWait(Annotation, key="no_wait", on=("Load",)):
    """A load from a hand-off tile that waits for no ready flag: an earlier load of the same body already
    waited for the one flag of this tile's group of hand-offs."""

    def check(self, node, at: Site) -> str:
        return "" if at.program.tensor(node.src.tensor).kind == "handoff" else "no_wait on a load that is not a hand-off"

    def note(self, node) -> str:
        return "no wait: its group's flag was waited for"


def signals(store: Store) -> bool:
    """Whether a hand-off store sets its ready flag (no :class:`NoSignal`)."""
    return not store.has(NoSignal)


def waits(load: Load) -> bool:
    """Whether a hand-off load waits for its ready flag (no :class:`NoWait`)."""
    return not load.has(NoWait)


def _group(body: tuple[Stmt, ...], handoff: set[str], unit_of: dict[str, str]) -> tuple[Stmt, ...]:
    if any(isinstance(s, Loop) for s in body):  # only loop bodies without inner loops are regrouped
        return tuple(dataclasses.replace(s, body=_group(s.body, handoff, unit_of)) if isinstance(s, Loop) else s for s in body)
    out = list(body)

    def is_send(s):
        return isinstance(s, Store) and s.dst.tensor in handoff

    def is_recv(s):
        return isinstance(s, Load) and s.src.tensor in handoff

    sent = [s.dst.tensor for s in out if is_send(s)]
    if len(sent) != len(set(sent)):
        return tuple(out)  # a tile handed off twice in one body: one flag per hand-off, as placed
    # 1. each send just after what it depends on, after the previous send of its direction
    last_send: dict[str, int] = {}
    for n in range(len(out)):
        stmt = out[n]
        if not is_send(stmt):
            continue
        sender = unit_of[stmt.src]
        res = resources(stmt)
        to = max([m + 1 for m in range(n) if depends(resources(out[m]), res)] + [last_send.get(sender, -1) + 1, 0])
        out.insert(to, out.pop(n))
        last_send[sender] = to
    # 2. groups: a unit's consecutive sends with no waiting receive by that unit in between; a
    # receive waits when it is the first of its group in program order (its sends come before it)
    group_of: dict[int, int] = {}  # position of a send -> its group id
    tile_group: dict[str, int] = {}
    open_group: dict[str, int] = {}  # sending unit -> the group its next send joins
    waiting: dict[int, bool] = {}  # position of a receive -> whether it waits
    waited: set[int] = set()
    for n, stmt in enumerate(out):
        if is_recv(stmt) and stmt.src.tensor in tile_group:
            g = tile_group[stmt.src.tensor]
            waiting[n] = g not in waited
            if waiting[n]:
                waited.add(g)
                open_group.pop(unit_of[stmt.dst], None)
        elif is_recv(stmt):
            open_group.pop(unit_of[stmt.dst], None)  # received before any send of the body: as placed
        elif is_send(stmt):
            sender = unit_of[stmt.src]
            if sender not in open_group:
                open_group[sender] = len(set(group_of.values()))
            group_of[n] = tile_group[stmt.dst.tensor] = open_group[sender]
    last_of = {g: max(n for n, gg in group_of.items() if gg == g) for g in set(group_of.values())}
    for n, stmt in enumerate(out):
        if n in group_of and last_of[group_of[n]] != n:
            out[n] = stmt.annotate(NoSignal())
        elif not waiting.get(n, True):
            out[n] = stmt.annotate(NoWait())
    return tuple(out)


def one_handoff_per_direction(program: Program) -> Program:
    """Move the hand-off stores of a placed program up to their producers and set one ready flag per
    group of hand-offs (module docstring). A program without hand-off tiles is returned unchanged."""
    handoff = handoffs(program)
    if not handoff:
        return program
    kernels = []
    for k in program.kernels:
        unit_of = {b.name: b.unit for b in k.buffers}
        kernels.append(dataclasses.replace(k, body=_group(k.body, handoff, unit_of)))
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("one-handoff-per-direction", lambda p, c: one_handoff_per_direction(p), "one ready flag per batch of hand-offs (@no_signal, @no_wait)")
