"""Scalar clean-ups that turn a fused nest into the kernel one would write by hand.

Each is a function Program → Program:

- :func:`forward_stores`: a load of the tile a store in the same block just wrote reads the stored
  buffer instead (array contraction). When the load promised zero padding, the stored buffer must be
  proved zero-padded by :func:`padding_facts`.
- :func:`propagate_copies`: ``x = copy(y)`` of one dtype: uses of x read y.
- :func:`dedupe_loads`: a second load of the same tile reuses the first.
- :func:`hoist_loads`: loop-invariant loads and elementwise work move before the serial loop.
- :func:`eliminate_dead`: statements whose results reach no live tensor, stores to tensors nobody
  reads, and then unused buffers, tensors and kernels, go.
- :func:`drop_stores`: slicing: remove the stores to some tensors in some kernels (then
  ``eliminate_dead`` removes what only fed them).
- :func:`promote_accumulation`: an atomic add into an HBM tile that a serial loop repeats becomes an
  on-chip accumulator, stored once after the loop.
- :func:`fold_zero_init`: "zero the tile in one kernel, add into it once in a later one" becomes a
  plain store.
- :func:`tidy_names`: drop the ``<kernel>_`` prefixes fusion added where the rest is unique.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import sympy

from tilegen.core.ir import (
    Elementwise,
    Fill,
    Kernel,
    Load,
    Loop,
    Mask,
    ModOp,
    MatMul,
    Program,
    RowReduce,
    Stmt,
    Store,
    map_body,
    rename_buffers,
    used_buffers,
    used_tensors,
    walk,
)

# --- padding facts ------------------------------------------------------------------------------------

ZERO, FINITE, NEGINF, UNKNOWN = "zero", "finite", "neginf", "unknown"


def _join(a: str, b: str) -> str:
    if a == b:
        return a
    if {a, b} == {ZERO, FINITE}:
        return FINITE
    return UNKNOWN


def _arith(a: str, b: str) -> str:
    """Padding of a ± b."""
    if UNKNOWN in (a, b):
        return UNKNOWN
    if NEGINF in (a, b):
        return NEGINF if {a, b} <= {NEGINF, ZERO, FINITE} and (a, b).count(NEGINF) == 1 else UNKNOWN
    return ZERO if a == b == ZERO else FINITE


def _transfer(stmt: Stmt, facts: dict[str, str], kernel: Kernel) -> str | None:
    """The padding fact of what ``stmt`` writes, given the facts before it."""

    def get(arg) -> str:
        if isinstance(arg, str):
            return facts.get(arg, UNKNOWN)
        return ZERO if arg == 0 else FINITE

    def vec(arg) -> str:
        fact = get(arg)
        if isinstance(arg, str) and len(kernel.buffer(arg).shape) == 1:
            # a row vector broadcast over a tile: its own padding in padded rows, and its (finite)
            # valid entries in the padded columns of valid rows
            return _join(fact, FINITE) if fact in (ZERO, FINITE) else UNKNOWN
        return fact

    if isinstance(stmt, Load):
        return UNKNOWN if stmt.pad is None else (ZERO if stmt.pad == 0 else FINITE)
    if isinstance(stmt, Fill):
        return ZERO if stmt.value == 0 else (NEGINF if stmt.value == float("-inf") else FINITE)
    if isinstance(stmt, Mask):
        return NEGINF
    if isinstance(stmt, ModOp):
        if stmt.op == "dscore":  # 0 where dS′ is 0
            return ZERO if get(stmt.args[0]) == ZERO else UNKNOWN
        return FINITE if stmt.op == "classify" else UNKNOWN
    if isinstance(stmt, MatMul):
        a, b = get(stmt.a), get(stmt.b)
        new = ZERO if a == b == ZERO else (FINITE if {a, b} <= {ZERO, FINITE} else UNKNOWN)
        return _arith(new, get(stmt.dst)) if stmt.accumulate else new
    if isinstance(stmt, RowReduce):
        return get(stmt.src)
    if isinstance(stmt, Elementwise):
        args = [vec(a) for a in stmt.args]
        op = stmt.op
        if op in ("copy", "cast"):
            return args[0]
        if op == "exp":
            return {NEGINF: ZERO, ZERO: FINITE, FINITE: FINITE}.get(args[0], UNKNOWN)
        if op == "log":
            return NEGINF if args[0] == ZERO else UNKNOWN
        if op == "zero_if_neginf":
            return {NEGINF: ZERO, ZERO: ZERO, FINITE: FINITE}.get(args[0], UNKNOWN)
        if op in ("add", "sub"):
            return _arith(args[0], args[1])
        if op == "mul":
            if UNKNOWN in args or NEGINF in args:
                return UNKNOWN
            return ZERO if ZERO in args else FINITE
        if op == "max":
            if args[0] == NEGINF:
                return args[1]
            if args[1] == NEGINF:
                return args[0]
            if UNKNOWN in args:
                return UNKNOWN
            return ZERO if args[0] == args[1] == ZERO else FINITE
        if op == "safe_div":
            return args[0] if args[0] in (ZERO, FINITE) and args[1] in (ZERO, FINITE) else UNKNOWN
        return UNKNOWN
    return None


def padding_facts(kernel: Kernel) -> dict[int, str]:
    """What the buffer a store writes holds past the tensors' extents (padded rows and columns), at that
    store: ``zero``, ``finite``, ``neginf`` or ``unknown``, assuming finite inputs. Keyed by ``id(store)``.

    Flow-sensitive: each write replaces the buffer's fact; a loop's body is swept twice and its facts
    joined with those before it (it may run zero or more times). Rules: a load with ``pad=0`` is zero
    there; ``Mask`` writes -inf; exp(-inf) = 0; 0·finite = 0; a [R] vector broadcast over a tile brings
    its own padding to padded rows and finite values to padded columns.
    """
    at_store: dict[int, str] = {}

    def run(body, facts: dict[str, str]) -> dict[str, str]:
        for stmt in body:
            if isinstance(stmt, Loop):
                entry = dict(facts)
                for _ in range(2):
                    out = run(stmt.body, dict(entry))
                    entry = {k: _join(entry.get(k, v), v) if k in entry else v for k, v in out.items()}
                facts = entry
                continue
            if isinstance(stmt, Store):
                at_store[id(stmt)] = facts.get(stmt.src, UNKNOWN)
            new = _transfer(stmt, facts, kernel)
            if new is not None:
                for dst in stmt.buffers_written():
                    facts[dst] = new
        return facts

    run(kernel.body, {})
    return at_store


# --- helpers ------------------------------------------------------------------------------------------


def _map_kernels(program: Program, fn) -> Program:
    kernels = tuple(fn(k) for k in program.kernels)
    kernels = tuple(k for k in kernels if k is not None)
    return dataclasses.replace(program, kernels=kernels)


def _def_counts(kernel: Kernel) -> Counter:
    counts: Counter = Counter()
    for stmt, _ in walk(kernel.body):
        for name in stmt.buffers_written():
            counts[name] += 1
    return counts


def _tensors_written(kernel: Kernel) -> set[str]:
    return {stmt.dst.tensor for stmt, _ in walk(kernel.body) if isinstance(stmt, Store)}


def _reads_before(kernel: Kernel, name: str, target: Stmt) -> bool:
    """Whether buffer ``name`` is read (in program text order) before statement ``target``."""
    for stmt, _ in walk(kernel.body):
        if stmt is target:
            return False
        if name in stmt.buffers_read():
            return True
    return False


def _rename(kernel: Kernel, names: dict[str, str]) -> Kernel:
    body = tuple(rename_buffers(s, names) for s in kernel.body)
    return dataclasses.replace(kernel, body=body)


def _prune_buffers(kernel: Kernel) -> Kernel:
    used = used_buffers(kernel.body)
    return dataclasses.replace(kernel, buffers=tuple(b for b in kernel.buffers if b.name in used))


# --- forwarding, copies, loads ------------------------------------------------------------------------


def forward_stores(program: Program) -> Program:
    """Replace loads of a tile stored earlier in the same block by a copy (or cast) of the stored buffer."""

    def on_kernel(kernel: Kernel) -> Kernel:
        facts = padding_facts(kernel)

        def block(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
            out: list[Stmt] = []
            stored: dict = {}  # access -> (buffer, padding fact at the store)
            for stmt in body:
                if isinstance(stmt, Loop):
                    stmt = dataclasses.replace(stmt, body=block(stmt.body))
                    written = used_buffers(stmt.body)
                    tensors = {s.dst.tensor for s, _ in walk(stmt.body) if isinstance(s, Store)}
                    stored = {a: b for a, b in stored.items() if b[0] not in written and a.tensor not in tensors}
                    out.append(stmt)
                    continue
                if isinstance(stmt, Load) and stmt.src in stored:
                    src, fact = stored[stmt.src]
                    if stmt.pad is None or (stmt.pad == 0 and fact == ZERO):
                        src_dtype = kernel.buffer(src).dtype
                        op = "copy" if src_dtype == kernel.buffer(stmt.dst).dtype else "cast"
                        out.append(Elementwise(stmt.dst, op, (src,)))
                        continue
                for name in stmt.buffers_written():
                    stored = {a: b for a, b in stored.items() if b[0] != name}
                if isinstance(stmt, Store):
                    stored = {a: b for a, b in stored.items() if a.tensor != stmt.dst.tensor}
                    if not stmt.accumulate:
                        stored[stmt.dst] = (stmt.src, facts.get(id(stmt), UNKNOWN))
                out.append(stmt)
            return tuple(out)

        return dataclasses.replace(kernel, body=block(kernel.body))

    return _map_kernels(program, on_kernel)


def _copy_removable(kernel: Kernel, stmt: Stmt, counts: Counter) -> bool:
    """``x = copy(y)`` can go (every x read as y) when x and y have one dtype and shape, x is not read
    before the copy, and either both are written once, or every write of y precedes the copy and y is
    not read after it (x's later writes may then reuse y's storage)."""
    if not (isinstance(stmt, Elementwise) and stmt.op in ("copy", "cast") and isinstance(stmt.args[0], str)):
        return False
    x, y = kernel.buffer(stmt.dst), kernel.buffer(stmt.args[0])
    if x.dtype != y.dtype or x.shape != y.shape or x.name == y.name or _reads_before(kernel, x.name, stmt):
        return False
    if counts[x.name] == 1 and counts[y.name] == 1:
        return True
    seen = False
    for other, _ in walk(kernel.body):
        if other is stmt:
            seen = True
            continue
        if not seen and x.name in other.buffers_written():
            return False  # the copy is not x's first write
        if seen and (y.name in other.buffers_written() or y.name in other.buffers_read()):
            return False
    return True


def propagate_copies(program: Program) -> Program:
    """Remove ``x = copy(y)`` where :func:`_copy_removable` allows, reading y for x."""

    def on_kernel(kernel: Kernel) -> Kernel:
        while True:
            counts = _def_counts(kernel)
            target = None
            for stmt, _ in walk(kernel.body):
                if _copy_removable(kernel, stmt, counts):
                    target = stmt
                    break
            if target is None:
                return _prune_buffers(kernel)
            body = map_body(kernel.body, lambda s, t=target: None if s is t else s)
            kernel = _rename(dataclasses.replace(kernel, body=body), {target.dst: target.args[0]})

    return _map_kernels(program, on_kernel)


def dedupe_loads(program: Program) -> Program:
    """A load of a tile an enclosing or earlier statement of the same block already loaded reuses it
    (the tensor must not be written in the kernel; the kept load takes the stricter padding)."""

    def on_kernel(kernel: Kernel) -> Kernel:
        counts = _def_counts(kernel)
        written = _tensors_written(kernel)
        renames: dict[str, str] = {}
        pads: dict[int, float] = {}
        drop: set[int] = set()

        def visit(body, available: list[Load]):
            available = list(available)
            for stmt in body:
                if isinstance(stmt, Loop):
                    visit(stmt.body, available)
                    continue
                if isinstance(stmt, Load) and stmt.src.tensor not in written and counts[stmt.dst] == 1:
                    match = next((a for a in available if a.src == stmt.src and counts[a.dst] == 1), None)
                    if match is not None and not _reads_before(kernel, stmt.dst, stmt):
                        renames[stmt.dst] = match.dst
                        drop.add(id(stmt))
                        if stmt.pad is not None and match.pad is None:
                            pads[id(match)] = stmt.pad
                        elif stmt.pad is not None and match.pad is not None and stmt.pad != match.pad:
                            drop.discard(id(stmt))
                            del renames[stmt.dst]
                        continue
                    available.append(stmt)

        visit(kernel.body, [])
        if not drop:
            return kernel

        def edit(s):
            if id(s) in drop:
                return None
            if id(s) in pads:
                return dataclasses.replace(s, pad=pads[id(s)])
            return s

        kernel = dataclasses.replace(kernel, body=map_body(kernel.body, edit))
        return _prune_buffers(_rename(kernel, renames))

    return _map_kernels(program, on_kernel)


def hoist_loads(program: Program) -> Program:
    """Loop-invariant code motion: move a statement out of a serial loop when its buffer is written
    only by it and not read before it, and it is either a load whose tile does not depend on the loop
    variable from a tensor the kernel does not write, or elementwise work on buffers the loop does not
    write."""

    def on_kernel(kernel: Kernel) -> Kernel:
        counts = _def_counts(kernel)
        written = _tensors_written(kernel)

        def block(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
            out: list[Stmt] = []
            for stmt in body:
                if not isinstance(stmt, Loop):
                    out.append(stmt)
                    continue
                stmt = dataclasses.replace(stmt, body=block(stmt.body))
                if stmt.kind == "serial":
                    hoisted, kept = [], []
                    in_loop = {n for s, _ in walk(stmt.body) for n in s.buffers_written()}
                    for inner in stmt.body:
                        free = set()
                        for e in inner.exprs():
                            free |= sympy.sympify(e).free_symbols
                        single = len(inner.buffers_written()) == 1 and counts[inner.buffers_written()[0]] == 1
                        movable = (
                            isinstance(inner, Load) and stmt.var not in free and inner.src.tensor not in written
                        ) or (
                            isinstance(inner, (Elementwise, RowReduce))
                            and not (set(inner.buffers_read()) & in_loop - set(inner.buffers_written()))
                            and not (set(inner.buffers_read()) & set(inner.buffers_written()))
                        )
                        if movable and single and not _reads_before(kernel, inner.buffers_written()[0], inner):
                            hoisted.append(inner)
                            in_loop.discard(inner.buffers_written()[0])
                        else:
                            kept.append(inner)
                    out.extend(hoisted)
                    stmt = dataclasses.replace(stmt, body=tuple(kept))
                out.append(stmt)
            return tuple(out)

        return dataclasses.replace(kernel, body=block(kernel.body))

    return _map_kernels(program, on_kernel)


# --- dead code and slicing ----------------------------------------------------------------------------


def drop_stores(program: Program, kernels: set[str], tensors: set[str]) -> Program:
    """Remove, in ``kernels``, every store to one of ``tensors`` (then run :func:`eliminate_dead`)."""

    def on_kernel(kernel: Kernel) -> Kernel:
        if kernel.name not in kernels:
            return kernel
        body = map_body(kernel.body, lambda s: None if isinstance(s, Store) and s.dst.tensor in tensors else s)
        return dataclasses.replace(kernel, body=body)

    return _map_kernels(program, on_kernel)


def eliminate_dead(program: Program) -> Program:
    """Remove what reaches no output: dead statements, stores to tensors no later statement reads
    (workspaces only), empty serial loops, unused buffers, tensors and empty kernels."""
    keep_tensors = {t.name for t in program.tensors if t.kind in ("input", "output", "partial", "tiles")}
    needed_tensors = {t.name for t in program.tensors if t.kind in ("output", "partial", "tiles")}
    new_kernels: list[Kernel] = []
    for kernel in reversed(program.kernels):
        stmts = [s for s, _ in walk(kernel.body) if not isinstance(s, Loop)]
        live: set[int] = set()
        needed_bufs: set[str] = set()
        changed = True
        read_here: set[str] = set()  # tensors live loads of this kernel read
        while changed:
            changed = False
            for s in stmts:
                if id(s) in live:
                    continue
                is_live = (
                    isinstance(s, Store) and (s.dst.tensor in needed_tensors or s.dst.tensor in read_here)
                ) or any(b in needed_bufs for b in s.buffers_written())
                if is_live:
                    live.add(id(s))
                    needed_bufs.update(s.buffers_read())
                    if isinstance(s, Load):
                        read_here.add(s.src.tensor)
                    changed = True

        def prune(s):
            if isinstance(s, Loop):
                return s if (s.body or s.kind == "parallel") else None
            return s if id(s) in live else None

        body = map_body(kernel.body, prune)
        if not any(not isinstance(s, Loop) for s, _ in walk(body)):
            continue  # nothing left: the kernel goes
        kernel = _prune_buffers(dataclasses.replace(kernel, body=body))
        for s, _ in walk(kernel.body):
            if isinstance(s, Load):
                needed_tensors.add(s.src.tensor)
            if isinstance(s, Store) and s.accumulate:
                needed_tensors.add(s.dst.tensor)
        new_kernels.append(kernel)
    kernels = tuple(reversed(new_kernels))
    used = used_tensors(kernels) | keep_tensors
    tensors = tuple(t for t in program.tensors if t.name in used)
    return dataclasses.replace(program, kernels=kernels, tensors=tensors)


# --- reductions ---------------------------------------------------------------------------------------


def promote_accumulation(program: Program, kernel_name: str) -> Program:
    """In kernel ``kernel_name``, an atomic add ``T[a] += x`` directly inside a serial loop whose variable
    ``a`` does not mention becomes ``acc = 0`` before the loop, ``acc += x`` inside (folded into the
    matmul that produced x when x has no other use) and ``T[a] += acc`` after it. ``T`` must not be
    otherwise touched in the kernel."""
    kernel = program.kernel(kernel_name)
    touches = Counter()
    for s, _ in walk(kernel.body):
        if isinstance(s, Load):
            touches[s.src.tensor] += 1
        if isinstance(s, Store):
            touches[s.dst.tensor] += 1
    new_buffers = list(kernel.buffers)
    counts = _def_counts(kernel)
    uses = Counter()
    for s, _ in walk(kernel.body):
        uses.update(s.buffers_read())

    def block(body):
        out = []
        for stmt in body:
            if not isinstance(stmt, Loop):
                out.append(stmt)
                continue
            stmt = dataclasses.replace(stmt, body=block(stmt.body))
            if stmt.kind != "serial":
                out.append(stmt)
                continue
            before, after, inner = [], [], []
            for s in stmt.body:
                free = set()
                for e in s.exprs():
                    free |= sympy.sympify(e).free_symbols
                if isinstance(s, Store) and s.accumulate and stmt.var not in free and touches[s.dst.tensor] == 1:
                    src = kernel.buffer(s.src)
                    acc = f"{s.dst.tensor.removesuffix('_ws')}_acc"
                    new_buffers.append(dataclasses.replace(src, name=acc, dtype=program.tensor(s.dst.tensor).dtype))
                    before.append(Fill(acc, 0.0))
                    producer = next((p for p in inner if isinstance(p, MatMul) and p.dst == s.src and not p.accumulate), None)
                    if producer is not None and counts[s.src] == 1 and uses[s.src] == 1:
                        inner[inner.index(producer)] = dataclasses.replace(producer, dst=acc, accumulate=True)
                    else:
                        inner.append(Elementwise(acc, "add", (acc, s.src)))
                    after.append(dataclasses.replace(s, src=acc))
                else:
                    inner.append(s)
            out.extend(before)
            out.append(dataclasses.replace(stmt, body=tuple(inner)))
            out.extend(after)
        return tuple(out)

    new_kernel = dataclasses.replace(kernel, body=block(kernel.body), buffers=tuple(new_buffers))
    new_kernel = _prune_buffers(new_kernel)
    kernels = tuple(new_kernel if k.name == kernel_name else k for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


def _grid_signature(kernel: Kernel):
    from tilegen.core.ir import grid_loops

    return tuple((str(l.var), l.start, l.stop) for l in grid_loops(kernel))


def fold_zero_init(program: Program) -> Program:
    """``T[a] = 0`` (a filled zero tile) in kernel A and ``T[a] += x`` once per program in a later kernel
    B over the same grid, nothing else touching T in between: B stores ``T[a] = x`` and A's store goes."""
    from tilegen.core.ir import grid_loops

    infos = []
    for k, kernel in enumerate(program.kernels):
        grid = grid_loops(kernel)
        fills = {s.dst for s, _ in walk(kernel.body) if isinstance(s, Fill) and s.value == 0}
        for s, loops in walk(kernel.body):
            if isinstance(s, (Load, Store)):
                infos.append((k, kernel, s, loops, grid, fills))
    changes: dict[int, Stmt | None] = {}
    for x, (k1, kern1, s1, loops1, grid1, fills1) in enumerate(infos):
        if not (isinstance(s1, Store) and not s1.accumulate and s1.src in fills1 and len(loops1) == len(grid1)):
            continue
        for k2, kern2, s2, loops2, grid2, _ in infos[x + 1 :]:
            tensor = s2.src.tensor if isinstance(s2, Load) else s2.dst.tensor
            if tensor != s1.dst.tensor:
                continue
            if (
                isinstance(s2, Store)
                and s2.accumulate
                and k2 > k1
                and s2.dst == s1.dst
                and len(loops2) == len(grid2)
                and _grid_signature(kern1) == _grid_signature(kern2)
            ):
                changes[id(s1)] = None
                changes[id(s2)] = dataclasses.replace(s2, accumulate=False)
            break
    if not changes:
        return program

    def edit(s):
        return changes.get(id(s), s) if id(s) in changes else s

    return _map_kernels(program, lambda kern: dataclasses.replace(kern, body=map_body(kern.body, edit)))


def tidy_names(program: Program) -> Program:
    """Drop the ``<kernel>_`` prefix fusion gave buffers, where the rest of the name stays unique."""

    def on_kernel(kernel: Kernel) -> Kernel:
        names = [b.name for b in kernel.buffers]
        short = {}
        for name in names:
            stripped = name
            while True:
                prefix = next((p for p in _prefixes(program) if stripped.startswith(p + "_")), None)
                if prefix is None:
                    break
                stripped = stripped[len(prefix) + 1 :]
            if stripped != name:
                short[name] = stripped
        counts = Counter(short.get(n, n) for n in names)
        renames = {n: s for n, s in short.items() if counts[s] == 1}
        if not renames:
            return kernel
        kernel = _rename(kernel, renames)
        buffers = tuple(dataclasses.replace(b, name=renames.get(b.name, b.name)) for b in kernel.buffers)
        return dataclasses.replace(kernel, buffers=buffers)

    return _map_kernels(program, on_kernel)


def _prefixes(program: Program) -> tuple[str, ...]:
    return tuple(sorted(program.attr("fused_from", ()) or (), key=len, reverse=True))


def cleanup(program: Program) -> Program:
    """Forward, propagate, dedupe and hoist to a fixed point, then remove what is dead."""
    for _ in range(8):
        before = program
        program = forward_stores(program)
        program = propagate_copies(program)
        program = hoist_loads(program)
        program = dedupe_loads(program)
        program = eliminate_dead(program)
        if program == before:
            break
    return program
