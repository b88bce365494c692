"""Ascend pass ``pipeline-handoffs`` and its knob ``@handoff_slots`` (a hand-off tensor), after
wait-at-first-read: software pipelining of the cube/vector hand-offs. In every innermost serial loop where the
cube sends a tile to the vector and later receives one back, the cube statements that do not wait for the
vector (the loads, S = Q Kᵀ, its hand-off) get stage 0 and the rest stage 1 (``@pipelined``): the AIC issues
stage 0 of tile j + 1 before stage 1 of tile j, so it computes the next tile's scores while the vector works
on this one's. The vector's statements that take in what the cube's stage 1 sends (the forward's P·V and the O
update) get stage 2: the AIV issues stage 1 of tile j + 1 (the next softmax) before stage 2 of tile j, so the
cube's P·V of tile j overlaps it; a vector buffer both its stages use gets a second copy. Every hand-off the
loop passes gets two GM slots and every hand-off its own "ready" flag id (:class:`HandoffSlots`), since the
cube's sends no longer come in the order the vector receives them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Load, Loop, Pipelined, Program, Store, Tensor, map_body, walk
from tilegen.models.stages import handoff_direction, stmt_unit
from tilegen.passes.ascend.common import access, env_of, fits, handoffs
from tilegen.passes.ascend.one_handoff_per_direction import signals, waits
from tilegen.passes.driver import Pass

# Cross-core flag ids a kernel may use in mode 2: 0-10 on A2 (11-14 are SyncAll's; ascendc-api.md §7.2,
# CrossCoreSetFlag(ISASI).md; the call: impl/basic_api/kernel_operator_block_sync_intf_impl.h:255 of
# asc-devkit 0da921b). Each hand-off takes one "free" id; the "ready" ids come first.
CROSS_CORE_FLAG_IDS = 11
PIPELINE_SLOTS = 2  # GM slots of a hand-off a pipelined loop passes: tile j + 1 is written while tile j is read


@dataclass(frozen=True)
class HandoffSlots(Annotation, key="handoff_slots", on=("Tensor",)):
    """A hand-off tile's GM slots and ready flag.

    Attributes:
        slots: how many copies of the tile each core's workspace holds; the n-th tile passed goes to slot
            n mod slots, and its producer waits for the slot to be free only when it reuses one
            (n >= slots). (A hand-off without the annotation has one slot: the lock-step hand-off.)
        ready: the cross-core flag id of its "data ready" flag; -1: the id its direction shares with
            every other hand-off of that direction.
    """

    slots: int = 1
    ready: int = -1

    def check(self, node, at: Site) -> str:
        if node.kind != "handoff":
            return f"a {node.kind} tensor has no hand-off slots"
        if self.slots < 1 or not -1 <= self.ready < CROSS_CORE_FLAG_IDS:
            return f"slots {self.slots} must be >= 1 and ready {self.ready} in [-1, {CROSS_CORE_FLAG_IDS - 1}]"
        return ""

    def note(self, node) -> str:
        return f"{self.slots} slots, ready flag {self.ready}"


def slots_of(tensor: Tensor) -> int:
    """GM slots of a hand-off (:class:`HandoffSlots`; 1 without it)."""
    h = tensor.get(HandoffSlots)
    return h.slots if h is not None else 1


def ready_of(tensor: Tensor) -> int:
    """The ready flag id of a hand-off (:class:`HandoffSlots`; -1, its direction's, without it)."""
    h = tensor.get(HandoffSlots)
    return h.ready if h is not None else -1


def _stage_split(loop: Loop, units: dict[str, str | None], handoff: set[str], bufs: dict,
                 vector_skew: bool = True) -> tuple[tuple[int, ...], frozenset[str]] | None:
    """The stages of ``loop``'s statements (see :func:`pipeline_handoffs`) and the vector buffers that
    need a second copy, or None where pipelining the cube's part is not legal or gains nothing.
    ``vector_skew``: also give the vector two stages (else every vector statement is stage 1)."""
    if loop.kind != "serial" or any(isinstance(s, Loop) for s in loop.body):
        return None
    # a cube statement is stage 1 when it receives from the vector (or depends on one that does); the
    # vector's part is stage 1 here and skewed below
    is_cube = [stmt_unit(s, units) == "cube" for s in loop.body]
    late = _late(loop.body, is_cube, handoff, handoff)
    stages = [(1 if n in late else 0) if cube else 1 for n, cube in enumerate(is_cube)]
    cube = [(s, g) for s, g in zip(loop.body, stages) if stmt_unit(s, units) == "cube"]
    if not any(g == 0 for _, g in cube) or not any(g == 1 for _, g in cube):
        return None
    sends0 = [s for s, g in cube if g == 0 and isinstance(s, Store) and s.dst.tensor in handoff]
    if not sends0:
        return None  # nothing the vector waits for moves ahead
    if _carried(cube, handoff, bufs, loaded_only=True) is None:
        return None
    carried: frozenset[str] = frozenset()
    if vector_skew:
        vstages = _vector_stages(loop, stages, units, handoff, bufs)
        if vstages is not None:
            stages, carried = vstages
    return tuple(stages), carried


def _late(body, mine: list[bool], handoff: set[str], receives: set[str]) -> set[int]:
    """The positions in ``body`` of one unit's statements (``mine``) that belong to the later stage: a
    statement that receives a hand-off of ``receives``, or depends on (reads what it writes, writes what
    it reads or writes) an earlier such statement of the iteration."""
    late_read: set[str] = set()
    late_written: set[str] = set()
    out = set()
    for n, stmt in enumerate(body):
        if not mine[n]:
            continue
        reads, writes = access(stmt, handoff)
        recv = isinstance(stmt, Load) and stmt.src.tensor in receives
        if recv or reads & late_written or writes & (late_read | late_written):
            late_read |= reads
            late_written |= writes
            out.add(n)
    return out


def _carried(part: list, handoff: set[str], bufs: dict, loaded_only: bool) -> frozenset[str] | None:
    """One unit's statements ``part`` [(stmt, stage)] of a loop whose earlier stage of iteration j + 1
    runs before its later stage of iteration j: the buffers that need a second copy for that, or None
    where it is not legal. A buffer both stages touch is legal only when the earlier stage alone writes
    it (a double-buffered tile), its first access there is a write, and the later stage only reads it;
    ``loaded_only``: that writer must be one unguarded load, not from a hand-off (the cube's K/V tiles,
    whose second copy the placement already gives), else the copy is added (a vector row factor)."""
    first = min(g for _, g in part)
    touched: dict[bool, set[str]] = {True: set(), False: set()}
    written: dict[bool, set[str]] = {True: set(), False: set()}
    for s, g in part:
        reads, writes = access(s, handoff)
        touched[g == first] |= reads | writes
        written[g == first] |= writes
    carried = set()
    for name in touched[True] & touched[False]:
        writers = [s for s, _ in part if name in access(s, handoff)[1]]
        if not writers:
            continue  # read-only in the loop (a K/V tile of the outer loop, an input tensor)
        if name.startswith("gm:") or name in written[False]:
            return None
        if loaded_only:
            if bufs[name].stages < 2 or len(writers) != 1:
                return None
            if not isinstance(writers[0], Load) or writers[0].rows or writers[0].src.tensor in handoff:
                return None
            continue
        early = [s for s, g in part if g == first and name in set(s.buffers_read()) | set(s.buffers_written())]
        if name in early[0].buffers_read():
            return None  # the next iteration's copy would start from the other copy's stale values
        carried.add(name)
    return frozenset(carried)


def _vector_stages(loop: Loop, stages: list[int], units, handoff: set[str], bufs: dict):
    """The vector's two stages of a loop whose cube stages are ``stages``: a vector statement is stage 2
    when it receives a hand-off the cube sends in stage 1, or depends on an earlier stage-2 statement
    of the iteration, else stage 1; the AIV then runs stage 1 of tile j + 1 (the softmax of the next
    scores) before stage 2 of tile j (taking in this tile's P·V). Returns (stages, buffers that need a
    second copy), or None where the vector has nothing for stage 2 or the skew is not legal (a stage-1
    statement reading a buffer before its stage-1 writer, where stage 2 reads it too)."""
    late_sent = {s.dst.tensor for s, g in zip(loop.body, stages)
                 if g == 1 and stmt_unit(s, units) == "cube" and isinstance(s, Store) and s.dst.tensor in handoff}
    is_vector = [stmt_unit(s, units) != "cube" for s in loop.body]
    out = [2 if n in _late(loop.body, is_vector, handoff, late_sent) else g for n, g in enumerate(stages)]
    # a stage-1 statement joins stage 2 when it touches what a stage-2 statement writes, or writes what a
    # stage-2 statement before it reads, until no such statement is left (stage 1 of j + 1 runs before
    # stage 2 of j: it would see, or give, the wrong iteration's value). What is left shared is written
    # in stage 1 and read after it in stage 2: a buffer given a second copy. A stage-1 statement after a
    # stage-2 one runs ahead of it, which is legal: they share nothing either writes, but such a copy.
    changed = True
    while changed:
        changed = False
        late = [(n, *access(s, handoff)) for n, (s, g) in enumerate(zip(loop.body, out)) if g == 2 and is_vector[n]]
        late_written = {b for _, _, w in late for b in w}
        for n, stmt in enumerate(loop.body):
            if out[n] == 1 and is_vector[n]:
                reads, writes = access(stmt, handoff)
                read_before = {b for m, r, _ in late if m < n for b in r}
                if (reads | writes) & late_written or writes & read_before:
                    out[n] = 2
                    changed = True
    vector = [(s, g) for s, g, v in zip(loop.body, out, is_vector) if v]
    if not any(g == 2 for _, g in vector) or not any(g == 1 for _, g in vector):
        return None
    if not any(g == 1 and isinstance(s, Store) and s.dst.tensor in handoff for s, g in vector):
        return None  # the vector sends nothing the cube waits for ahead of its stage 2
    carried = _carried(vector, handoff, bufs, loaded_only=False)
    if carried is None:
        return None
    return out, carried


def pipeline_handoffs(program: Program, target) -> Program:
    """Put :class:`~tilegen.core.ir.Pipelined` on the loops the cube can run one tile ahead in (and the vector
    too, where it takes a hand-off back from the cube's later stage), :class:`HandoffSlots` on the
    hand-offs, and a second copy (``Buffer.stages``) of a vector buffer both vector stages use (see the
    module docstring). A loop is left as it is where the cube sends nothing before its first receive,
    where it has an inner loop, where a later-stage statement would have to run before an earlier-stage
    one it depends on, or where the pipelined liveness does not fit the target's levels (the vector's
    skew alone is dropped first). The vector is skewed only where every hand-off gets its own ready id.
    Without a pipelined loop the program is returned unchanged."""
    handoff = handoffs(program)
    env = env_of(program)
    piped: set[str] = set()  # hand-offs a pipelined loop passes
    early: set[str] = set()  # hand-offs sent in stage 0
    order = [t for t in program.tensors if t.kind == "handoff"]
    group_of = _signal_groups(program)  # hand-offs under one ready flag (@no_signal / @no_wait)
    units = list(dict.fromkeys(group_of[t.name] for t in order))
    own_ids = len(units) + len(order) <= CROSS_CORE_FLAG_IDS

    def pipelined(k, vector_skew: bool):
        unit_of = {b.name: b.unit for b in k.buffers}
        bufs = {b.name: b for b in k.buffers}
        found: list[tuple[Loop, tuple[int, ...]]] = []
        copies: set[str] = set()

        def edit(stmt):
            if isinstance(stmt, Loop):
                split = _stage_split(stmt, unit_of, handoff, bufs, vector_skew)
                if split is not None:
                    found.append((stmt, split[0]))
                    copies.update(split[1])
                    return stmt.annotate(Pipelined(split[0]))
            return stmt

        body = map_body(k.body, edit)
        buffers = tuple(dataclasses.replace(b, stages=2) if b.name in copies else b for b in k.buffers)
        return dataclasses.replace(k, body=body, buffers=buffers), found

    kernels = []
    for k in program.kernels:
        new, found = pipelined(k, own_ids)
        if found and not fits(new, target, env) and own_ids:
            new, found = pipelined(k, False)
        if not found or not fits(new, target, env):
            kernels.append(k)
            continue
        kernels.append(new)
        for loop, stages in found:
            for s, g in zip(loop.body, stages):
                if isinstance(s, (Load, Store)):
                    t = s.src.tensor if isinstance(s, Load) else s.dst.tensor
                    if t in handoff:
                        piped.add(t)
                        if g == 0 and isinstance(s, Store):
                            early.add(t)
    if not piped:
        return program
    if own_ids:
        ready = {t.name: units.index(group_of[t.name]) for t in order}  # one id per hand-off (or signal group)
    else:
        # too few ids for one each: hand-offs sent in the same direction and stage keep their order on both
        # sides (the vector is not skewed here), so each such group shares one id
        def group(t):
            return (handoff_direction(program, t.name), any(n in early for n in group_of[t.name]))

        groups = list(dict.fromkeys(group(t) for t in order))
        if len(groups) + len(order) > CROSS_CORE_FLAG_IDS:
            return program  # not even that fits: the program keeps one ready id per direction
        ready = {t.name: groups.index(group(t)) for t in order}
    tensors = tuple(
        t.annotate(HandoffSlots(PIPELINE_SLOTS if t.name in piped else 1, ready[t.name])) if t.kind == "handoff" else t
        for t in program.tensors
    )
    return dataclasses.replace(program, kernels=tuple(kernels), tensors=tensors)


def _signal_groups(program: Program) -> dict[str, frozenset[str]]:
    """Hand-off name → the hand-offs of its signal group: stores with ``@no_signal`` belong with
    the next store that signals (its one ready flag covers them), loads with ``@no_wait``
    with the load before them that waits (pass ``one-handoff-per-direction``); a group shares one
    ready id. The groups are the connected components of these links (networkx)."""
    import networkx as nx

    links = nx.Graph()
    links.add_nodes_from(t.name for t in program.tensors if t.kind == "handoff")
    for k in program.kernels:
        sent: str | None = None  # the previous store of an open group
        waited: str | None = None  # the last load that waited
        for s, _ in walk(k.body):
            if isinstance(s, Store) and s.dst.tensor in links:
                if sent is not None:
                    links.add_edge(sent, s.dst.tensor)
                sent = None if signals(s) else s.dst.tensor
            elif isinstance(s, Load) and s.src.tensor in links:
                if waits(s):
                    waited = s.src.tensor
                elif waited is not None:
                    links.add_edge(waited, s.src.tensor)
    return {name: frozenset(group) for group in nx.connected_components(links) for name in group}


PASS = Pass("pipeline-handoffs", lambda p, c: pipeline_handoffs(p, c.target), "the cube one tile ahead of the vector (@pipelined on the loops, @handoff_slots)")
