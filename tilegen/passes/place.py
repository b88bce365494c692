"""Placement: bind every on-chip buffer to a level of the target.

Each statement runs on a unit: a matmul on the ``cube`` (Ascend AIC; a GPU's tensor cores), an
elementwise op, reduction or mask on the ``vector`` unit (Ascend AIV; a GPU's ALUs); a fill, load or
store runs on the unit of the buffer's neighbouring accesses. A buffer then lives where its unit keeps
such data (the target's ``[placement]`` table):

- matmul results and accumulators: ``result`` (Ascend L0C, GPU registers);
- tiles loaded for the cube, matmul operands: ``operand`` (Ascend L1, staged through L0A/L0B per
  matmul; GPU shared memory);
- everything the vector unit touches: ``vector`` (Ascend UB, its rows split over the 2 AIVs of the
  core; GPU registers). On a GPU, a tile the vector unit computes and a matmul reads (P, dS) is an
  ``operand``: ``tl.dot`` reads it through a shared-memory copy, the footprint that limits the tiles.

On a target whose cube cannot hand data to the vector unit on chip (``handoff = "GM"``: Ascend 910B,
where Fixpipe writes L0C only to GM), a buffer used by both units is split in two, one per unit, and
every change of unit along the program goes through a per-core GM workspace tile: a store from one
unit's copy and a load into the other's. Those workspaces (kind ``handoff``) have the tile's size,
independent of the sequence length.

Loads from HBM inside a serial loop are multi-buffered: the next tile is fetched while this one is
used. ``stages = 2`` (double buffering) unless the caller gives the kernel phase's count (a Triton
kernel's ``num_stages``: its software pipeliner keeps that many copies of each tile it prefetches).
"""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.errors import ScheduleError
from tilegen.core.ir import (
    Access,
    Buffer,
    Elementwise,
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
    Tensor,
    walk,
)
from tilegen.core.targets import Target


def op_unit(stmt: Stmt) -> str | None:
    if isinstance(stmt, MatMul):
        return "cube"
    if isinstance(stmt, (Elementwise, RowReduce, Mask, ModOp)):
        return "vector"
    return None  # Fill, Load, Store: decided by the buffer's other accesses


def _accesses(kernel: Kernel) -> dict[str, list[tuple[int, Stmt, str | None]]]:
    """Per buffer, its accesses in program order: (position, statement, unit or None)."""
    out: dict[str, list] = {}
    position = 0
    for stmt, _ in walk(kernel.body):
        if isinstance(stmt, Loop):
            continue
        for name in dict.fromkeys(stmt.buffers_read() + stmt.buffers_written()):
            out.setdefault(name, []).append((position, stmt, op_unit(stmt)))
        position += 1
    return out


def _resolve_units(accesses) -> list[str]:
    """The unit of each access: fills and loads take the next access's unit, stores the previous one."""
    units = [u for _, _, u in accesses]
    known = [u for u in units if u is not None]
    if not known:
        return ["vector"] * len(units)
    for n, (_, stmt, unit) in enumerate(accesses):
        if unit is not None:
            continue
        if isinstance(stmt, Store):
            before = [u for u in units[:n] if u is not None]
            units[n] = before[-1] if before else next(u for u in units[n:] if u is not None)
    for n in range(len(units) - 1, -1, -1):
        if units[n] is None:
            after = [u for u in units[n + 1 :] if u is not None]
            units[n] = after[0] if after else next(u for u in reversed(units[:n]) if u is not None)
    return units


def _split_mixed(kernel: Kernel, program: Program) -> tuple[Kernel, list[Tensor], dict[str, str]]:
    """Split every buffer used by both units at each change of unit, through a GM hand-off tile."""
    accesses = _accesses(kernel)
    buffers = {b.name: b for b in kernel.buffers}
    unit_of: dict[str, str] = {}
    before: dict[int, list[Stmt]] = {}  # position -> hand-off statements to insert before it
    renames: dict[tuple[int, str], str] = {}  # (position, old name) -> new name
    new_buffers: list[Buffer] = []
    tensors: list[Tensor] = []
    for name, acc in accesses.items():
        units = _resolve_units(acc)
        if len(set(units)) == 1:
            unit_of[name] = units[0]
            continue
        first = units[0]
        copies = {first: name}
        unit_of[name] = first
        ws = Tensor(f"ws_{name}", buffers[name].shape, buffers[name].dtype, "handoff")
        tile = Access(ws.name, tuple(sympy.Integer(0) for _ in ws.shape), ws.shape)
        needed = False
        fresh: set[str] = set()  # units whose copy holds the latest value
        writer = first
        for n, (position, stmt, _) in enumerate(acc):
            unit = units[n]
            if unit not in copies:
                copies[unit] = f"{name}_{unit}"
                new_buffers.append(dataclasses.replace(buffers[name], name=copies[unit]))
                unit_of[copies[unit]] = unit
            reads = name in stmt.buffers_read()
            writes = name in stmt.buffers_written()
            if reads and fresh and unit not in fresh:
                # the latest value lives on the other unit: pass it through the GM workspace
                before.setdefault(position, []).extend([Store(tile, copies[writer]), Load(copies[unit], tile)])
                needed = True
                fresh.add(unit)
            if writes:
                fresh = {unit}
                writer = unit
            renames[(position, name)] = copies[unit]
        if needed:
            tensors.append(ws)
    counter = iter(range(1 << 62))

    def edit(body):
        out: list[Stmt] = []
        for stmt in body:
            if isinstance(stmt, Loop):
                out.append(dataclasses.replace(stmt, body=edit(stmt.body)))
                continue
            position = next(counter)
            out.extend(before.get(position, ()))
            names = {old: new for (pos, old), new in renames.items() if pos == position}
            out.append(_rename_in(stmt, names) if names else stmt)
        return tuple(out)

    body = edit(kernel.body)
    kernel = dataclasses.replace(kernel, body=body, buffers=kernel.buffers + tuple(new_buffers))
    return kernel, tensors, unit_of


def _rename_in(stmt: Stmt, names: dict[str, str]) -> Stmt:
    from tilegen.core.ir import rename_buffers

    return rename_buffers(stmt, names)


def place(program: Program, target: Target, num_stages: dict[str, int] | None = None) -> Program:
    """Bind every buffer of ``program`` to a level of ``target`` (see the module docstring).

    ``num_stages``: copies of a tile loaded in a serial loop, by kernel phase (``"*"``: any other
    phase); 2 where absent.

    Raises:
        ScheduleError: the target's placement table names no level for a role the program needs.
    """
    num_stages = num_stages or {}
    rules = target.placement
    handoff = rules.get("handoff") == "GM"
    kernels: list[Kernel] = []
    tensors = list(program.tensors)
    for kernel in program.kernels:
        if handoff:
            kernel, new_tensors, unit_of = _split_mixed(kernel, program)
            tensors.extend(t for t in new_tensors if t.name not in {x.name for x in tensors})
        else:
            unit_of = {name: "vector" for name in _accesses(kernel)}
        written_by_matmul = {s.dst for s, _ in walk(kernel.body) if isinstance(s, MatMul)}
        operands = {n for s, _ in walk(kernel.body) if isinstance(s, MatMul) for n in (s.a, s.b)}
        handoff_tensors = {t.name for t in tensors if t.kind == "handoff"}
        loaded_in_loop = {
            s.dst
            for s, loops in walk(kernel.body)
            if isinstance(s, Load)
            and s.src.tensor not in handoff_tensors
            and any(loop.kind == "serial" for loop in loops)
        }
        placed = []
        for buf in kernel.buffers:
            unit = unit_of.get(buf.name, "vector")
            if handoff:
                if unit == "cube":
                    role = "result" if buf.name in written_by_matmul else "operand"
                else:
                    role = "vector"
            else:
                if buf.name in written_by_matmul:
                    role = "result"
                elif buf.name in operands:
                    role = "operand"
                else:
                    role = "vector"
                unit = "cube" if role in ("result", "operand") else "vector"
            level = rules.get(role)
            if level is None:
                raise ScheduleError(f"target {target.name}: placement has no level for role {role!r} (buffer {buf.name})")
            split = target.vector_split if handoff and role == "vector" else 1
            stages = num_stages.get(kernel.phase, num_stages.get("*", 2)) if buf.name in loaded_in_loop else 1
            placed.append(dataclasses.replace(buf, scope=level, unit=unit, row_split=split, stages=stages))
        kernels.append(dataclasses.replace(kernel, buffers=tuple(placed)))
    return dataclasses.replace(program, kernels=tuple(kernels), tensors=tuple(tensors)).with_attrs(target=target.name)


def placed(program: Program) -> bool:
    """Whether every buffer has a level (no ``LOCAL`` scope is left)."""
    return all(b.scope != "LOCAL" for k in program.kernels for b in k.buffers)
