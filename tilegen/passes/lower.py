"""Target lowering passes, run between fusion and placement.

- :func:`split_matmul_scale` (Ascend): the cube's Mmad has no scale factor, so ``dst = alpha · a @ b``
  becomes ``dst = a @ b`` followed by ``dst = dst · alpha`` on the vector unit. Both forms compute the
  fp32 product and then multiply by alpha in fp32: the interpreter gives bitwise the same result.
- :func:`mask_cut_tiles_only` (Ascend): every ``Mask`` gets the schedule knob ``cut_only``: the emitted
  code skips the mask's work (the column-index vector, the compares and selects) on the tiles whose
  every pair is visible, which are the most tiles of a long causal or windowed sequence. The values are
  unchanged (a mask of such a tile writes nothing).
- :func:`wait_at_first_read` (Ascend, after placement): a load into a level of ``levels`` (the cube's
  L1) whose next statement does not read its tile gets the schedule knob ``wait_at_read``: the emitted
  code waits for the copy just before the first statement that reads the tile (LoadNzAsync/WaitLoaded),
  so that the statements in between (another copy, a matmul of tiles already there) overlap it.
- :func:`pipeline_handoffs` (Ascend, last): software pipelining of the cube/vector hand-offs. In every
  innermost serial loop where the cube sends a tile to the vector and later receives one back, the cube
  statements that do not wait for the vector (the loads, S = Q Kᵀ, its hand-off) get stage 0 and the
  rest stage 1 (``Loop.stages``): the AIC issues stage 0 of tile j + 1 before stage 1 of tile j, so it
  computes the next tile's scores while the vector works on this one's. The vector's statements that
  take in what the cube's stage 1 sends (the forward's P·V and the O update) get stage 2: the AIV issues
  stage 1 of tile j + 1 (the next softmax) before stage 2 of tile j, so the cube's P·V of tile j
  overlaps it; a vector buffer both its stages use gets a second copy. Every hand-off the loop passes
  gets two GM slots (``Tensor.slots``) and every hand-off its own "ready" flag id (``Tensor.ready``),
  since the cube's sends no longer come in the order the vector receives them.
- :func:`pipeline_lookahead` (Ascend, right after pipeline_handoffs): in a pipelined loop each unit
  issues its earlier stage of tile j + 2 before its later stage of tile j (``Loop.lookahead`` = 2): the
  cube the next scores before it waits for what the vector sends back for tile j, the forward's vector
  the softmax of j + 2 before the O update of j. With a skew of one, the forward's chain P of j → the
  cube's P·V of j → its S of j + 2 → the softmax of j + 2 → P of j + 2 spans two tiles and bounds the
  loop (the backward's through dS likewise); with two, three. Each tile a unit's earlier stage writes
  and its later stage reads (the forward's V and alpha, the backward's Q and dO) gets a third copy,
  each hand-off sent in an earlier stage (S and P; S and dP) a third GM slot.
- :func:`receive_ahead` (Ascend, after pipeline_lookahead): a hand-off the vector's later stage receives
  with its own flag (the forward's P·V of tile j) gets ``hoist`` and ``wait_at_read``: the copy is
  issued right after the earlier stage's receive of S of j + 2, so that it runs beside that softmax,
  and waited for at its first reader (acc += P·V). Its tile then lives over the loop. Where the vector
  binds, P·V of j is ready by then (P of j went out two softmaxes earlier); where the cube binds, its
  flag wait stops the AIV until the cube has computed it (see DESIGN §2).
- :func:`wait_at_rewrite` (Ascend, after placement and tiles): a store from a vector (UB) tile inside a
  serial loop that also writes the tile gets the knob ``wait_at_rewrite``: the copy's closing MTE3 -> V wait
  moves to just before the tile's next writer (the next iteration's), so the vector computes on while
  the copy runs (the forward's P hand-off); the tile is then live over its loops (the store's and every
  loop around it), which must still fit.
- :func:`snake_deal` (Ascend): a kernel whose programs' work depends on the grid's fastest axis (the
  inner tile loop's bounds use that tile index: a causal or windowed mask) gets ``Kernel.deal =
  "snake"``: the cores take the programs in boustrophedon order, so that each core's share of heavy
  and light tiles evens out (llama2-7b's causal forward: the slowest core's pairs 432 → 365 of an even
  share of 363).
- :func:`receive_early` (Ascend, after placement and tiles): a vector hand-off load that needs no flag
  wait of its own (``wait_signal`` off: the load of its group before it waited for the one ready flag:
  the backward's dP after S) moves up to right after that load and gets ``wait_at_read``: MTE2 copies
  dP while the vector computes P, and the vector waits for it just before its first reader (the
  copies were one after the other with the vector idle in between). Only where nothing between reads
  or writes its tile and the levels still fit.
- :func:`fold_row_reductions` (Ascend, after placement and tiles): a row reduction (max or sum) over
  at least two 64-column blocks gets the knob ``fold``, a scratch of the tile's rows x 64 fp32 columns:
  the emitted code folds the row's blocks into it with elementwise Max/Add (one repeat per row, the
  plain vector rate) and then reduces 64 columns per row once (the in-repeat reduction, which runs at
  a lower rate), instead of one in-repeat reduction per block; asc-devkit's SoftmaxFlashV2 reduces
  its rows the same way. Only where the levels still fit with the scratch.
- :func:`l0c_pingpong` (Ascend, after placement and tiles): in a kernel whose every result-level (L0C)
  buffer is a fresh product stored at once and read by nothing else (every cube product of the forward
  and of the atomic backward), each matmul gets the knob ``n_chunk``: it is computed in column chunks
  that take the two halves of L0C in turn, so that the Fixpipe of one chunk runs while the cube computes
  the next (the cube tile inside the exchanged block: two levels of tiling). A kernel with an
  accumulator held in L0C across statements keeps the whole level for it.
- :func:`write_first_plain` (Ascend, before placement): an accumulating store into a workspace tile that
  each program instance of its kernel owns (the store's tile is indexed by the grid alone: the atomic
  backward's dK_ws, dV_ws, one K/V tile per program), and that an earlier kernel only zeroes, gets
  ``Store.first_plain``: the program's first store writes the tile, the later ones add. The zeroing
  goes (the backward's pre_kv kernel: 134 MB of zeros at llama2-7b), and every later load of the tile
  gets ``Load.zero_unless``, the fewest iterations of the loops around the store, so that a program
  whose loops ran no iteration (a K/V tile no query sees) still reads zeros. Only where those loops
  skip no tiles of their range (no block table) and their bounds depend on the grid alone.
- :func:`own_tile_epilogue` (Ascend, after write-first-plain): a later kernel of the same grid that only
  finishes the tiles the programs of an earlier kernel own (it loads those tiles and inputs, nothing
  else: the atomic backward's post_kv, dK = scale·dK_ws, dV = dV_ws cast) runs as the epilogue of each
  of those programs, after their loops: one kernel and its HBM-bound pass fewer, the copies beside the
  next program's cube work. The owner's stores get ``Store.signal_done`` (the AIC sets a done flag at
  the end of each program) and the epilogue's first load ``Load.wait_done`` (the AIV waits for it).
  Only where no kernel in between touches what the moved kernel reads or writes.
- :func:`receive_free_early` (Ascend, after stream_programs): a vector hand-off load that opens a stage of a
  pipelined loop into a one-copy UB tile that only that stage accesses (the forward's S) gets
  ``Load.free_early``: the emitted code raises a V -> MTE2 event of the tile's own right after its last
  access in the stage (the cast of P), and the next pair's copy waits for that event alone, not for all
  vector work issued before it (the O update, a program's closing and opening), so MTE2 refills the
  tile while the vector does that work. The tile then lives over the loop (and over a streamed body):
  only where the levels still fit with nothing else taking its bytes.
- :func:`sink_past_free` (Ascend, right after receive_free_early): in the stage of a ``Load.free_early``,
  the vector's elementwise and row-reduction statements that do not access the tile move to right after
  its last access and the sends that follow it (the forward's alpha = exp(m − m_use) and the update of
  l), then the last row reduction with a fold that reads the tile moves after the tile's other accesses
  (the forward's row sum after the cast of P: its reduce step reads the fold alone, so the tile's event
  goes up between the two); each only where nothing in between reads what it writes or writes what it
  reads or writes. The tile's event is raised that much earlier, and that work runs beside the next
  tile's copy. Only where the levels still fit.
- :func:`one_launch` (Ascend, last): every kernel of a program after the first gets ``Kernel.sync_all``:
  the program runs as one launch whose kernels are separated by the all-core barrier
  ``SyncAll<false>()`` (the backward's pre, pre_kv, main, post, post_kv: one launch and four barriers
  instead of five launches, as ops-transformer's FlashAttentionScoreGrad does its zeroing, main loop,
  scale and cast). Legal because every kernel is MIX_AIC_1_2 and launched on at most the chip's AI
  Cores (the barrier needs every block resident: asc-devkit SyncAll.md, 约束说明), and the hand-off flag
  ids stay in 0-10 (SyncAll takes 11-14).
"""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.ir import (
    SHAPE_SYMBOLS,
    TILE_SYMBOLS,
    Elementwise,
    Fill,
    Load,
    Loop,
    Mask,
    MatMul,
    Program,
    RowReduce,
    Stmt,
    Store,
    grid_loops,
    map_body,
    rename_buffers,
    straight_grid_body,
    walk,
)
from tilegen.models.stages import (
    accessed,
    handoff_direction,
    reads_in,
    stmt_unit,
    stream_split,
    unit_stages,
    writes_in,
)


def split_matmul_scale(program: Program) -> Program:
    """Move every matmul's ``alpha`` into a following elementwise multiplication."""

    def edit(stmt):
        if isinstance(stmt, MatMul) and stmt.alpha != 1.0:
            if stmt.accumulate:
                raise ValueError(f"cannot split the scale of an accumulating matmul into {stmt.dst}")
            return (dataclasses.replace(stmt, alpha=1.0), Elementwise(stmt.dst, "mul", (stmt.dst, stmt.alpha)))
        return stmt

    kernels = tuple(dataclasses.replace(k, body=map_body(k.body, edit)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


def mask_cut_tiles_only(program: Program) -> Program:
    """Set the ``cut_only`` knob on every ``Mask`` (see the module docstring)."""

    def edit(stmt):
        return dataclasses.replace(stmt, cut_only=True) if isinstance(stmt, Mask) else stmt

    kernels = tuple(dataclasses.replace(k, body=map_body(k.body, edit)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


def wait_at_first_read(program: Program, levels: frozenset[str]) -> Program:
    """Set ``wait_at_read`` on every unguarded ``Load`` (no ``rows``) into a buffer placed on one of
    ``levels`` whose first reader, later in the same body, is not the next statement, and that nothing
    between writes again (see the module docstring)."""
    scope = {b.name: b.scope for k in program.kernels for b in k.buffers}
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}  # their copies wait on a cross-core flag

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
            out[n] = dataclasses.replace(stmt, wait_at_read=True)
        return tuple(out)

    kernels = tuple(dataclasses.replace(k, body=fix(k.body)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


# Cross-core flag ids a kernel may use in mode 2: 0-10 on A2 (11-14 are SyncAll's; ascendc-api.md §7.2,
# CrossCoreSetFlag(ISASI).md; the call: impl/basic_api/kernel_operator_block_sync_intf_impl.h:255 of
# asc-devkit 0da921b). Each hand-off takes one "free" id; the "ready" ids come first.
CROSS_CORE_FLAG_IDS = 11
PIPELINE_SLOTS = 2  # GM slots of a hand-off a pipelined loop passes: tile j + 1 is written while tile j is read


def _fits(kernel, target, env) -> bool:
    """Whether every level's footprint of ``kernel`` fits its usable bytes at the bound sizes ``env``."""
    from tilegen.models.footprint import kernel_footprints

    return all(fp.value(env) <= fp.level.usable for fp in kernel_footprints(kernel, target))


def _access(stmt: Stmt, handoff: set[str]) -> tuple[set[str], set[str]]:
    """What ``stmt`` reads and writes: its buffers, and the GM tensors it loads or stores as ``gm:NAME``
    (not the hand-offs, which the slots and flags order)."""
    reads, writes = set(stmt.buffers_read()), set(stmt.buffers_written())
    if isinstance(stmt, Load) and stmt.src.tensor not in handoff:
        reads.add(f"gm:{stmt.src.tensor}")
    if isinstance(stmt, Store) and stmt.dst.tensor not in handoff:
        writes.add(f"gm:{stmt.dst.tensor}")
    return reads, writes


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
        reads, writes = _access(stmt, handoff)
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
        reads, writes = _access(s, handoff)
        touched[g == first] |= reads | writes
        written[g == first] |= writes
    carried = set()
    for name in touched[True] & touched[False]:
        writers = [s for s, _ in part if name in _access(s, handoff)[1]]
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
        late = [(n, *_access(s, handoff)) for n, (s, g) in enumerate(zip(loop.body, out)) if g == 2 and is_vector[n]]
        late_written = {b for _, _, w in late for b in w}
        for n, stmt in enumerate(loop.body):
            if out[n] == 1 and is_vector[n]:
                reads, writes = _access(stmt, handoff)
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
    """Set ``Loop.stages`` on the loops the cube can run one tile ahead in (and the vector too, where it
    takes a hand-off back from the cube's later stage), ``Tensor.slots`` and ``Tensor.ready`` on the
    hand-offs, and a second copy (``Buffer.stages``) of a vector buffer both vector stages use (see the
    module docstring). A loop is left as it is where the cube sends nothing before its first receive,
    where it has an inner loop, where a later-stage statement would have to run before an earlier-stage
    one it depends on, or where the pipelined liveness does not fit the target's levels (the vector's
    skew alone is dropped first). The vector is skewed only where every hand-off gets its own ready id.
    Without a pipelined loop the program is returned unchanged."""
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}
    env = {str(k): v for k, v in program.env}
    piped: set[str] = set()  # hand-offs a pipelined loop passes
    early: set[str] = set()  # hand-offs sent in stage 0
    order = [t for t in program.tensors if t.kind == "handoff"]
    group_of = _signal_groups(program)  # hand-offs under one ready flag (Store.signal / Load.wait_signal)
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
                    return dataclasses.replace(stmt, stages=split[0])
            return stmt

        body = map_body(k.body, edit)
        buffers = tuple(dataclasses.replace(b, stages=2) if b.name in copies else b for b in k.buffers)
        return dataclasses.replace(k, body=body, buffers=buffers), found

    kernels = []
    for k in program.kernels:
        new, found = pipelined(k, own_ids)
        if found and not _fits(new, target, env) and own_ids:
            new, found = pipelined(k, False)
        if not found or not _fits(new, target, env):
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
        dataclasses.replace(t, slots=PIPELINE_SLOTS if t.name in piped else 1, ready=ready[t.name]) if t.kind == "handoff" else t
        for t in program.tensors
    )
    return dataclasses.replace(program, kernels=tuple(kernels), tensors=tensors)


def _signal_groups(program: Program) -> dict[str, frozenset[str]]:
    """Hand-off name → the hand-offs of its signal group: stores whose ``signal`` is off belong with
    the next store that signals (its one ready flag covers them), loads whose ``wait_signal`` is off
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
                sent = None if s.signal else s.dst.tensor
            elif isinstance(s, Load) and s.src.tensor in links:
                if s.wait_signal:
                    waited = s.src.tensor
                elif waited is not None:
                    links.add_edge(waited, s.src.tensor)
    return {name: frozenset(group) for group in nx.connected_components(links) for name in group}


def l0c_pingpong(program: Program, target) -> Program:
    """Set ``MatMul.n_chunk`` in every kernel whose buffers on the target's result level are each
    written by one non-accumulating matmul, stored by the next statement and read by nothing else (see
    the module docstring). The chunks are as few as fit one half of the level's usable bytes at the
    bound tile sizes, of balanced widths rounded up to 16 columns: a 128 x 256 product in the 128 KiB L0C
    of the 910B (``targets/ascend910b2.toml``) runs as two chunks of 128 columns. Kernels without such
    products are unchanged."""
    from tilegen.core.exprs import evaluate

    level_name = target.placement["result"]
    half = target.level(level_name).usable // 2
    env = {str(k): v for k, v in program.env}

    def chunkable(k) -> bool:
        result = {b.name for b in k.buffers if b.scope == level_name}
        if not result:
            return False
        readers = [b for s, _ in walk(k.body) if not isinstance(s, Loop) for b in s.buffers_read()]
        producers: dict[str, int] = {}
        bodies = [(k.body, ())] + [(s.body, s.stages) for s, _ in walk(k.body) if isinstance(s, Loop)]
        for body, stages in bodies:
            for n, s in enumerate(body):
                written = set(s.buffers_written()) & result if not isinstance(s, Loop) else set()
                for name in written:
                    nxt = body[n + 1] if n + 1 < len(body) else None
                    fresh = isinstance(s, MatMul) and not s.accumulate
                    stored = isinstance(nxt, Store) and nxt.src == name and (not stages or stages[n] == stages[n + 1])
                    if not (fresh and stored and readers.count(name) == 1):
                        return False
                    producers[name] = producers.get(name, 0) + 1
        return set(producers) == result

    def chunk(k, stmt: MatMul) -> int:
        bufs = {b.name: b for b in k.buffers}
        a, b = bufs[stmt.a], bufs[stmt.b]
        m = int(evaluate(a.shape[1] if stmt.trans_a else a.shape[0], env))
        n = int(evaluate(b.shape[0] if stmt.trans_b else b.shape[1], env))
        widest = half // (-(-m // 16) * 16 * 4) // 16 * 16
        if widest < 16:
            return 0
        count = -(-n // widest)  # as few chunks as fit, of balanced widths
        return -(-(-(-n // count)) // 16) * 16

    kernels = []
    for k in program.kernels:
        if not chunkable(k):
            kernels.append(k)
            continue
        widths = {id(s): chunk(k, s) for s, _ in walk(k.body) if isinstance(s, MatMul)}
        if min(widths.values()) < 16:
            kernels.append(k)
            continue
        edit = lambda s: dataclasses.replace(s, n_chunk=widths[id(s)]) if isinstance(s, MatMul) else s  # noqa: E731
        kernels.append(dataclasses.replace(k, body=map_body(k.body, edit)))
    return dataclasses.replace(program, kernels=tuple(kernels))


LOOKAHEAD = 2  # each unit's earlier stage two tiles ahead of its later one (three S slots in the forward)


def pipeline_lookahead(program: Program, target) -> Program:
    """Set ``Loop.lookahead`` = 2 on every software-pipelined loop (``Loop.stages``; see the module
    docstring), with a third copy (``Buffer.stages`` = 3) of each tile a unit's earlier stage writes and
    its later stage reads, and a third GM slot (``Tensor.slots`` = 3) for each hand-off a unit sends in
    its earlier stage, where the levels still fit; other kernels are unchanged."""
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}
    env = {str(k): v for k, v in program.env}
    depth = LOOKAHEAD
    kernels, early = [], set()
    for k in program.kernels:
        bufs = {b.name: b for b in k.buffers}
        units = {b.name: b.unit for b in k.buffers}
        loops = [s for s, _ in walk(k.body) if isinstance(s, Loop) and s.stages and s.lookahead == 1]
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
        edit = lambda st: dataclasses.replace(st, lookahead=depth) if isinstance(st, Loop) and st.stages else st  # noqa: E731
        new = dataclasses.replace(
            k, body=map_body(k.body, edit), buffers=tuple(dataclasses.replace(b, stages=max(b.stages, depth + 1)) if b.name in carry else b for b in k.buffers)
        )
        if _fits(new, target, env):
            kernels.append(new)
            early |= sent
        else:
            kernels.append(k)
    tensors = tuple(dataclasses.replace(t, slots=max(t.slots, depth + 1)) if t.name in early else t for t in program.tensors)
    return dataclasses.replace(program, kernels=tuple(kernels), tensors=tensors)


def receive_ahead(program: Program, target) -> Program:
    """Set ``Load.hoist`` and ``Load.wait_at_read`` on each vector hand-off load of the later stage of a
    pipelined loop with ``Loop.lookahead`` >= 2 (see the module docstring) that waits for its own ready
    flag, where the vector's earlier stage starts from a hand-off receive of its own, no statement of
    the earlier stage and none before the load in the later stage touches its tile, its first later
    access reads it, and the levels still fit with the tile live over the loop. Other loads are
    unchanged."""
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}
    env = {str(k): v for k, v in program.env}
    kernels = []
    for k in program.kernels:
        units = {b.name: b.unit for b in k.buffers}
        chosen: set[int] = set()
        for loop, _ in walk(k.body):
            if not (isinstance(loop, Loop) and loop.stages and loop.lookahead >= 2):
                continue
            split = unit_stages(loop, units, "vector")
            if split is None:
                continue
            first, later = split
            if not (first and isinstance(first[0], Load) and first[0].src.tensor in handoff):
                continue
            for n, s in enumerate(later):
                if not (isinstance(s, Load) and s.src.tensor in handoff and s.wait_signal and not s.rows):
                    continue
                touched = {b for o in first + later[:n] for b in reads_in(o) | writes_in(o)}
                # its first later access must read it (a writer before the reader would race the copy)
                nxt = next((o for o in later[n + 1:] if s.dst in reads_in(o) | writes_in(o)), None)
                if s.dst not in touched and nxt is not None and s.dst in reads_in(nxt) and s.dst not in writes_in(nxt):
                    chosen.add(id(s))
        if not chosen:
            kernels.append(k)
            continue
        edit = lambda st: dataclasses.replace(st, hoist=True, wait_at_read=True) if id(st) in chosen else st  # noqa: E731
        new = dataclasses.replace(k, body=map_body(k.body, edit))
        kernels.append(new if _fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


FOLD_LANES = 64  # fp32 lanes of one 256-byte vector repeat: the width a row reduction folds to


def fold_row_reductions(program: Program, target) -> Program:
    """Set ``RowReduce.fold`` on every row reduction of a tile on the target's vector level whose rows
    span at least two 64-column blocks (see the module docstring): a scratch buffer ``<dst>_fold`` of
    the source's rows x 64 fp32 columns, on the same level and row split, is added to the kernel per
    reduction and planned like any tile (live only in its statement). Kernels where the levels would not fit with it
    are unchanged. (The fold is the shape of the row reductions in asc-devkit's SoftmaxFlashV2 for
    2201: ``NewReduceMaxLastNDImpl`` in impl/adv_api/detail/activation/softmax/membase/v220/
    softmax_common_impl/softmax_common_nd_reduce.h first takes the elementwise Max of the 64-column
    blocks of every row, then reduces one 64-column block per row.)"""
    from tilegen.core.exprs import evaluate
    from tilegen.core.ir import Buffer, RowReduce

    level = target.placement["vector"]
    env = {str(k): v for k, v in program.env}
    kernels = []
    for k in program.kernels:
        bufs = {b.name: b for b in k.buffers}
        folds = {}  # reduction's dst -> its own scratch, live in that statement only
        for s, _ in walk(k.body):
            if not isinstance(s, RowReduce) or s.fold:
                continue
            src = bufs[s.src]
            if src.scope == level and len(src.shape) == 2 and int(evaluate(src.shape[1], env)) >= 2 * FOLD_LANES:
                folds[s.dst] = Buffer(f"{s.dst}_fold", (src.shape[0], sympy.Integer(FOLD_LANES)), "fp32", src.scope, 1, src.unit, src.row_split)
        if not folds or any(b.name in bufs for b in folds.values()):
            kernels.append(k)
            continue
        edit = lambda st: dataclasses.replace(st, fold=folds[st.dst].name) if isinstance(st, RowReduce) and st.dst in folds else st  # noqa: E731
        new = dataclasses.replace(k, body=map_body(k.body, edit), buffers=k.buffers + tuple(folds.values()))
        kernels.append(new if _fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def wait_at_rewrite(program: Program, target) -> Program:
    """Set ``Store.wait_at_rewrite`` on every unguarded, non-atomic store of a 2-d tile on the target's
    vector level, directly in a serial loop's body that also writes that tile (see the module
    docstring), where
    the kernel's levels still fit with those tiles live over their loops. Kernels where they would not
    fit are unchanged."""
    level = target.placement["vector"]
    env = {str(k): v for k, v in program.env}

    kernels = []
    for k in program.kernels:
        bufs = {b.name: b for b in k.buffers}
        candidates = []  # ids of the stores that may take the knob, innermost loops first
        # serial loops only: in a grid loop the next writer opens the next program at once, and the
        # programs stay independent (the timeline's cost-only form schedules them alone)
        serial = [(s, d) for s, d in walk(k.body) if isinstance(s, Loop) and s.kind == "serial"]
        for loop, _ in sorted(serial, key=lambda x: -len(x[1])):
            stage = dict(zip(map(id, loop.body), loop.stages)) if loop.stages else {}
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
            edit = lambda st, t=trial: dataclasses.replace(st, wait_at_rewrite=True) if id(st) in t else st  # noqa: E731
            if _fits(dataclasses.replace(k, body=map_body(k.body, edit)), target, env):
                chosen = trial
        edit = lambda st: dataclasses.replace(st, wait_at_rewrite=True) if id(st) in chosen else st  # noqa: E731
        kernels.append(dataclasses.replace(k, body=map_body(k.body, edit)))
    return dataclasses.replace(program, kernels=tuple(kernels))


def snake_deal(program: Program) -> Program:
    """Set ``Kernel.deal = "snake"`` on every kernel whose innermost grid loop's body holds a tile loop
    with bounds that use that grid loop's variable (see the module docstring); the others keep
    ``"cyclic"``."""
    from tilegen.core.ir import grid_loops

    kernels = []
    for k in program.kernels:
        grid = grid_loops(k)
        varies = False
        if grid:
            var = grid[-1].var
            varies = any(isinstance(s, Loop) and s.kind == "serial" and var in (sympy.sympify(s.start).free_symbols | sympy.sympify(s.stop).free_symbols)
                         for s, _ in walk(grid[-1].body))
        kernels.append(dataclasses.replace(k, deal="snake") if varies else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def receive_early(program: Program, target) -> Program:
    """Move each vector hand-off load without a flag wait of its own (``wait_signal`` off) up to right
    after the load of its body that waited for the group's flag, and set its ``wait_at_read`` (see the
    module docstring): in a plain body, or inside one stage of a pipelined loop; where a statement in
    between reads or writes its tile, or the kernel's levels would not fit, the load stays."""
    handoff = {t.name for t in program.tensors if t.kind == "handoff"}
    level = target.placement["vector"]
    env = {str(k): v for k, v in program.env}

    kernels = []
    for k in program.kernels:
        scope = {b.name: b.scope for b in k.buffers}

        def edit(stmt):
            if not isinstance(stmt, Loop) or any(isinstance(s, Loop) for s in stmt.body):
                return stmt
            body, stages = list(stmt.body), list(stmt.stages) if stmt.stages else [0] * len(stmt.body)
            for n in range(len(body)):
                s = body[n]
                if not (isinstance(s, Load) and s.src.tensor in handoff and not s.wait_signal and scope.get(s.dst) == level):
                    continue
                waited = [m for m in range(n) if isinstance(body[m], Load) and body[m].src.tensor in handoff
                          and body[m].wait_signal and stages[m] == stages[n] and scope.get(body[m].dst) == level]
                if not waited:
                    continue
                at = waited[-1] + 1
                while at < n and isinstance(body[at], Load) and body[at].wait_at_read and body[at].src.tensor in handoff:
                    at += 1  # after the loads moved up before it: they keep their order
                between = [body[m] for m in range(at, n) if stages[m] == stages[n]]
                if any(s.dst in reads_in(b) | writes_in(b) for b in between):
                    continue
                after = [b for m, b in enumerate(body) if m > n and stages[m] == stages[n] and s.dst in reads_in(b) | writes_in(b)]
                if not after or s.dst not in reads_in(after[0]):
                    continue  # its wait goes before the first reader: a writer before that would race the copy
                moved = dataclasses.replace(s, wait_at_read=True)
                # the other stages' statements keep their places: the load moves within its stage's list
                body = body[:at] + [moved] + body[at:n] + body[n + 1:]
                stages = stages[:at] + [stages[n]] + stages[at:n] + stages[n + 1:]
            if body == list(stmt.body):
                return stmt
            return dataclasses.replace(stmt, body=tuple(body), stages=tuple(stages) if stmt.stages else ())

        new = dataclasses.replace(k, body=map_body(k.body, edit))
        kernels.append(new if _fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def stream_programs(program: Program, target) -> Program:
    """Set ``Kernel.stream`` (see the Kernel docstring) on every kernel of an Ascend target whose program
    body :func:`stream_split` accepts, with ``lookahead + 1`` copies (``Buffer.stages``) of each buffer
    both streams access per program, where the levels still fit with those buffers, and every buffer
    that lives over the whole pipelined loop, live over the whole body (the opening and closing
    statements run between other programs' pairs; :func:`tilegen.models.footprint.live_intervals`); other
    kernels are unchanged."""
    if target.placement.get("handoff") != "GM":
        return program
    env = {str(k): v for k, v in program.env}
    kernels = []
    for k in program.kernels:
        split = stream_split(k)
        if split is None:
            kernels.append(k)
            continue
        copies = split.loop.lookahead + 1
        cross = split.cross["cube"] | split.cross["vector"]
        if any(b.stages > 1 for b in k.buffers if b.name in cross):
            kernels.append(k)  # a per-program buffer that already rotates (not produced by the lowering)
            continue
        new = dataclasses.replace(
            k, stream=True, buffers=tuple(dataclasses.replace(b, stages=copies) if b.name in cross else b for b in k.buffers)
        )
        kernels.append(new if _fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def receive_free_early(program: Program, target) -> Program:
    """Set ``Load.free_early`` (see the module docstring) on each vector hand-off load into a one-copy UB
    tile that is the first statement of a pipelined loop to access it, where every other statement that
    accesses the tile is a statement of that loop's body in the load's stage (not a nested loop, not a
    store), nothing outside the loop accesses it, and the kernel's levels still fit with the tile live
    over the loop; other loads are unchanged."""
    if target.placement.get("handoff") != "GM":
        return program
    from tilegen.passes.verify import free_early_legal

    tensors = {t.name: t for t in program.tensors}
    level = target.placement["vector"]
    env = {str(k): v for k, v in program.env}
    kernels = []
    for k in program.kernels:
        scope = {b.name: b.scope for b in k.buffers}
        # the legality is the verifier's: the event goes after the tile's last access, a statement of the
        # loop's body itself, none a store (a copy out of the tile would still be reading it)
        chosen = {id(s) for loop, _ in walk(k.body) if isinstance(loop, Loop) and loop.stages for s in loop.body
                  if isinstance(s, Load) and scope.get(s.dst) == level and free_early_legal(k, loop, s, tensors)}
        if not chosen:
            kernels.append(k)
            continue
        new = dataclasses.replace(k, body=map_body(k.body, lambda st: dataclasses.replace(st, free_early=True) if id(st) in chosen else st))
        kernels.append(new if _fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def sink_past_free(program: Program, target) -> Program:
    """Reorder each pipelined loop with a ``Load.free_early`` as the module docstring says; the result
    is the same (only statements with no dependence between them change places)."""
    env = {str(k): v for k, v in program.env}

    def sink(loop: Loop, units: dict) -> Loop:
        if not loop.stages:
            return loop
        body, stages = list(loop.body), list(loop.stages)

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

        for load in [st for st in body if isinstance(st, Load) and st.free_early]:
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
            folds = [n for n in range(a + 1, last) if isinstance(body[n], RowReduce) and body[n].fold and body[n].src == load.dst
                     and stages[n] == stages[a] and load.dst not in writes_in(body[n])]
            if folds:
                move_after(folds[-1], dest)
        return dataclasses.replace(loop, body=tuple(body), stages=tuple(stages))

    kernels = []
    for k in program.kernels:
        if not any(isinstance(st, Load) and st.free_early for st, _ in walk(k.body)):
            kernels.append(k)
            continue
        units = {b.name: b.unit for b in k.buffers}
        new = dataclasses.replace(k, body=map_body(k.body, lambda st: sink(st, units) if isinstance(st, Loop) else st))
        kernels.append(new if _fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


def one_launch(program: Program, target) -> Program:
    """Set ``Kernel.sync_all`` on every kernel after the first (see the module docstring) on a target
    whose cube and vector units hand tiles through GM (their kernels are MIX, launched on every AI Core);
    elsewhere, or for a program of one kernel, the program is returned as it is."""
    if target.placement.get("handoff") != "GM" or len(program.kernels) < 2:
        return program
    kernels = program.kernels[:1] + tuple(dataclasses.replace(k, sync_all=True) for k in program.kernels[1:])
    return dataclasses.replace(program, kernels=kernels)


def _grid_key(kernel) -> tuple:
    """A kernel's launch grid as comparable data: (variable, start, stop) of each grid loop, outermost
    first. Two kernels with equal keys have the same program instances."""
    return tuple((str(lp.var), sympy.sympify(lp.start), sympy.sympify(lp.stop)) for lp in grid_loops(kernel))


def write_first_plain(program: Program) -> Program:
    """Set ``Store.first_plain`` on each accumulating store whose tile its program instance owns and
    that an earlier kernel only zeroes; drop the zeroing (and a kernel left without statements); set
    ``Load.zero_unless`` on the tile's later loads (see the module docstring). Anything else is left
    as it is."""
    kinds = {t.name: t.kind for t in program.tensors}
    kernels = list(program.kernels)

    def touches(tensor):
        for n, k in enumerate(kernels):
            for st, loops in walk(k.body):
                if isinstance(st, Store) and st.dst.tensor == tensor or isinstance(st, Load) and st.src.tensor == tensor:
                    yield n, st, loops

    drop: dict[int, set[int]] = {}  # kernel index -> ids of zeroing statements to remove
    plain: set[int] = set()
    zero: dict[int, sympy.Expr | None] = {}
    for z, k in enumerate(kernels):
        grid = grid_loops(k)
        if not grid:
            continue
        body = grid[-1].body
        zeros = {st.dst for st in body if isinstance(st, Fill) and st.value == 0.0}
        for st in body:
            if not (isinstance(st, Store) and st.src in zeros and not st.accumulate and not st.rows and kinds.get(st.dst.tensor) == "workspace"):
                continue
            others = [(n, x, loops) for n, x, loops in touches(st.dst.tensor) if x is not st]
            writers = [(n, x, loops) for n, x, loops in others if isinstance(x, Store)]
            if len(writers) != 1:
                continue
            m, store, loops = writers[0]
            if m <= z or not store.accumulate or store.rows or store.dst != st.dst or _grid_key(kernels[m]) != _grid_key(k):
                continue
            serial = loops[len(grid):]  # the grids are equal (_grid_key)
            names = {str(lp.var) for lp in grid}
            if any(lp.kind != "serial" or lp.blocks for lp in serial):
                continue
            if any({str(x) for x in sympy.sympify(e).free_symbols} & {str(lp.var) for lp in serial}
                   for lp in serial for e in (lp.start, lp.stop)):
                continue  # a bound that moves with an enclosing serial loop
            readers = [(n, x) for n, x, _ in others if isinstance(x, Load)]
            if any(n <= m or x.src != st.dst or _grid_key(kernels[n]) != _grid_key(k) or x.zero_unless is not None for n, x in readers):
                continue
            trips = sympy.Min(*[sympy.sympify(lp.stop) - lp.start for lp in serial]) if serial else None
            if trips is not None and not {str(x) for x in trips.free_symbols} <= names | {str(x) for x in SHAPE_SYMBOLS + TILE_SYMBOLS}:
                continue
            drop.setdefault(z, set()).add(id(st))
            plain.add(id(store))
            for _, x in readers:
                zero[id(x)] = trips
    if not plain:
        return program
    out = []
    for n, k in enumerate(kernels):
        gone = drop.get(n, set())
        body = k.body
        if gone:
            body = map_body(body, lambda st: None if id(st) in gone else st)
            read = {b for st, _ in walk(body) for b in st.buffers_read()}
            body = map_body(body, lambda st: None if isinstance(st, Fill) and st.dst not in read else st)
            if not any(isinstance(st, Store) for st, _ in walk(body)):
                continue  # nothing left for the kernel to do
            used = {b for st, _ in walk(body) for b in st.buffers_read() + st.buffers_written()}
            k = dataclasses.replace(k, body=body, buffers=tuple(b for b in k.buffers if b.name in used))

        def edit(st):
            if id(st) in plain:
                return dataclasses.replace(st, first_plain=True)
            if zero.get(id(st)) is not None:
                return dataclasses.replace(st, zero_unless=zero[id(st)])
            return st

        out.append(dataclasses.replace(k, body=map_body(k.body, edit)))
    return dataclasses.replace(program, kernels=tuple(out))


def own_tile_epilogue(program: Program) -> Program:
    """Move each kernel that only finishes owned tiles into the owning kernel as its programs' epilogue
    (see the module docstring); anything else is left as it is."""
    kinds = {t.name: t.kind for t in program.tensors}
    kernels = list(program.kernels)

    def tensors(k, cls):
        return {(st.src if cls is Load else st.dst).tensor for st, _ in walk(k.body) if isinstance(st, cls)}

    for r_idx in range(len(kernels) - 1, 0, -1):
        r = kernels[r_idx]
        if straight_grid_body(r) is None:
            continue
        grid = grid_loops(r)
        owner: dict[str, tuple[int, Store]] = {}  # tensor -> (kernel index, its first_plain store)
        for m, k in enumerate(kernels[:r_idx]):
            for st, _ in walk(k.body):
                if isinstance(st, Store) and st.first_plain:
                    owner[st.dst.tensor] = (m, st)
        loads = [st for st in grid[-1].body if isinstance(st, Load)]
        owned = [st for st in loads if st.src.tensor in owner and owner[st.src.tensor][1].dst == st.src]
        if not owned or any(st not in owned and kinds[st.src.tensor] != "input" for st in loads):
            continue
        ms = {owner[st.src.tensor][0] for st in owned}
        if len(ms) != 1:
            continue
        m = ms.pop()
        if _grid_key(kernels[m]) != _grid_key(r):
            continue
        between = kernels[m + 1:r_idx]
        reads, writes = tensors(r, Load), tensors(r, Store)
        if any((reads & tensors(k, Store)) or (writes & (tensors(k, Load) | tensors(k, Store))) for k in between):
            continue
        if any(writes & (tensors(k, Load) | tensors(k, Store)) for k in kernels[:r_idx] if k is not r):
            continue
        names = {b.name: f"{r.name}_{b.name}" for b in r.buffers}
        epilogue = []
        waited = False
        for st in grid[-1].body:
            st = rename_buffers(st, names)
            if isinstance(st, Load) and st.src.tensor in owner and not waited:
                st, waited = dataclasses.replace(st, wait_done=True), True
            epilogue.append(st)
        done = {st.src.tensor for st in owned}
        host = kernels[m]

        def edit(st):
            return dataclasses.replace(st, signal_done=True) if isinstance(st, Store) and st.first_plain and st.dst.tensor in done else st

        body = map_body(host.body, edit)

        def append(loops, depth=0):
            lp = loops[0]
            if depth == len(grid) - 1:
                return (dataclasses.replace(lp, body=lp.body + tuple(epilogue)),)
            return (dataclasses.replace(lp, body=append(lp.body, depth + 1)),)

        body = append(body)
        buffers = host.buffers + tuple(dataclasses.replace(b, name=names[b.name]) for b in r.buffers)
        kernels[m] = dataclasses.replace(host, body=body, buffers=buffers)
        del kernels[r_idx]
    return dataclasses.replace(program, kernels=tuple(kernels))
