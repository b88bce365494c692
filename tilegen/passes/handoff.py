"""Hand-off scheduling passes for targets whose cube and vector units exchange tiles through GM
(Ascend 910B, ``placement.handoff = "GM"``).

- :func:`unit_phases` (before placement): in every loop body without inner loops, a stable
  topological reorder of the statements by *unit phase*: a statement's phase is the number of changes
  of unit (cube ↔ vector) along its longest chain of dependences inside the body. The backward's
  body then reads: the cube computes S = Q Kᵀ and dP = dO Vᵀ back to back (phase 0), the vector P
  and dS (phase 1), the cube dV, dK, dQ (phase 2): placement then inserts one batch of hand-offs per
  change of unit instead of one per tile (before: S → P → dV, dP → dS → dK, dQ, two round trips).
  Loads, fills and stores have no unit of their own and take the phase of what they depend on, so a
  load stays where it was unless a dependence moves it. The pass only reorders; every dependence
  (through a buffer or an HBM tensor, read or write) keeps its order, so the values are unchanged.
- :func:`one_handoff_per_direction` (after placement), in every loop body without inner loops: each
  store into a hand-off tile moves up to
  just after the last statement it depends on (its tile's producer: on Ascend the Fixpipe of S leaves
  L0C before dP is computed there), keeping the order of the stores of one direction; then the
  consecutive stores of one direction that the sending unit makes without receiving anything in
  between form a group: only the group's last store sets the ready flag (``Store.signal``) and only
  the receiver's first load of the group waits for it (``Load.wait_signal``). The k-th wait still
  pairs with the k-th set of the shared ready flag (tilegen_runtime.h), since the receiver loads the
  tiles in the order they were stored.
"""

from __future__ import annotations

import dataclasses

from tilegen.core.ir import Load, Loop, Program, Stmt, Store
from tilegen.passes.place import op_unit


def _resources(stmt: Stmt) -> tuple[set[str], set[str]]:
    """(read, written): buffer names and ``@tensor`` names (HBM tensors and hand-off tiles)."""
    reads, writes = set(stmt.buffers_read()), set(stmt.buffers_written())
    if isinstance(stmt, Load):
        reads.add("@" + stmt.src.tensor)
    elif isinstance(stmt, Store):
        writes.add("@" + stmt.dst.tensor)
    reads |= {"@" + t for t in getattr(stmt, "tensors", ()) or ()}
    return reads, writes


def _depends(a: tuple[set[str], set[str]], b: tuple[set[str], set[str]]) -> bool:
    """Whether the later statement ``b`` depends on the earlier ``a`` (flow, anti or output)."""
    return bool(a[1] & (b[0] | b[1]) or a[0] & b[1])


def _phases(body: tuple[Stmt, ...]) -> list[int]:
    res = [_resources(s) for s in body]
    phase: list[int] = []
    unit: list[str | None] = []
    for n, stmt in enumerate(body):
        own = op_unit(stmt)
        best, best_unit = 0, None
        for m in range(n):
            if not _depends(res[m], res[n]):
                continue
            step = 1 if own is not None and unit[m] is not None and unit[m] != own else 0
            if phase[m] + step > best or (phase[m] + step == best and best_unit is None):
                best, best_unit = phase[m] + step, unit[m]
        phase.append(best)
        unit.append(own if own is not None else best_unit)
    return phase


def _reorder(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    if any(isinstance(s, Loop) for s in body):
        return tuple(dataclasses.replace(s, body=_reorder(s.body)) if isinstance(s, Loop) else s for s in body)
    phase = _phases(body)
    return tuple(s for _, _, s in sorted(zip(phase, range(len(body)), body)))


def unit_phases(program: Program, forms: tuple[str, ...] = ("fused",)) -> Program:
    """Reorder every innermost loop body of ``program`` by unit phase (module docstring); programs
    whose ``form`` attribute is not in ``forms`` (the forward) are returned unchanged."""
    if program.attr("form") not in forms:
        return program
    kernels = tuple(dataclasses.replace(k, body=_reorder(k.body)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


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
        res = _resources(stmt)
        to = max([m + 1 for m in range(n) if _depends(_resources(out[m]), res)] + [last_send.get(sender, -1) + 1, 0])
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
            out[n] = dataclasses.replace(stmt, signal=False)
        elif not waiting.get(n, True):
            out[n] = dataclasses.replace(stmt, wait_signal=False)
    return tuple(out)


def one_handoff_per_direction(program: Program) -> Program:
    """Move the hand-off stores of a placed program up to their producers and set one ready flag per
    group of hand-offs (module docstring). A program without hand-off tiles is returned unchanged."""
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}
    if not handoff:
        return program
    kernels = []
    for k in program.kernels:
        unit_of = {b.name: b.unit for b in k.buffers}
        kernels.append(dataclasses.replace(k, body=_group(k.body, handoff, unit_of)))
    return dataclasses.replace(program, kernels=tuple(kernels))
