"""Loop fusion of consecutive kernels into one nest, proved legal on the dependence graph.

``fuse(program, names, host)`` merges the kernels ``names`` (consecutive in launch order) into one
kernel whose loop nest is ``host``'s. Every statement of every merged kernel is placed at the level of
the host nest that iterates exactly its iteration space (its enclosing loops' dimensions: b, hkv, hq
(which fixes hkv), i, j), before or after the inner loop as in its own nest; a load whose dimensions no
level iterates exactly is sunk into the innermost body (a load is pure; cleanup hoists it back out as
far as it can go). Anything else that has no level is refused.

The merge is legal when (checked on :func:`~tilegen.passes.depgraph.dependence_graph`):

1. the merged nests walk the same (Q tile, K/V tile) pairs: their tile loops share a ``domain``;
2. every dependence between two merged kernels goes through the same tile of an HBM tensor
   (``same_tile``), written at iteration x and read at iteration x only (the write's index names every
   loop of the writer, so distinct iterations write distinct tiles), and both ends land at the same
   level, writer first — so iteration x of the fused nest produces before it consumes;
3. a statement that opens or closes a reduction (an accumulator's fill, its final cast or store) keeps
   the loops its reduction runs over: the host's loops inside its level are the ones inside it at home.

Variables: in a nest over KV heads (``hkv`` outer, ``hq`` inner in [hkv·G, hkv·G + G)) the head index
floor(hq/G) of a merged statement is hkv; in a nest over query heads, hkv is floor(hq/G).
"""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.errors import FusionError
from tilegen.core.ir import (
    Buffer,
    G,
    Kernel,
    Load,
    Loop,
    Program,
    Stmt,
    hkv,
    hq,
    rename_buffers,
    substitute,
)
from tilegen.core.printer import fmt_access, fmt_stmt
from tilegen.passes.depgraph import dependence_graph, edges_between

_DIMS = {"b": {"b"}, "hkv": {"hkv"}, "hq": {"hq", "hkv"}, "i": {"i"}, "j": {"j"}}


def _dims(var_names) -> frozenset[str]:
    out: set[str] = set()
    for name in var_names:
        out |= _DIMS.get(name, {name})
    return frozenset(out)


def spine(kernel: Kernel) -> tuple[Loop, ...]:
    """The kernel's chain of loops: at each level the single loop of the body (none when absent)."""
    loops: list[Loop] = []
    body = kernel.body
    while True:
        inner = [s for s in body if isinstance(s, Loop)]
        if len(inner) != 1:
            if len(inner) > 1:
                raise FusionError(f"kernel {kernel.name} has {len(inner)} sibling loops; fusion needs one nest")
            return tuple(loops)
        loops.append(inner[0])
        body = inner[0].body


def _place(kernel: Kernel, host_levels: list[frozenset[str]], renames: dict[str, str], mapping, after_host: bool):
    """Assign each statement of ``kernel`` to a host level, before ("pre") or after ("post") its inner loop.

    Returns ({(level, where): [statements]}, {statement number: level}); statements are numbered in
    program order, as :func:`~tilegen.passes.depgraph.statements` numbers them.
    """
    innermost = len(host_levels) - 1
    placed: dict[tuple[int, str], list[Stmt]] = {}
    level_of: dict[int, int] = {}
    counter = 0

    def visit(body, loops: tuple[Loop, ...]):
        nonlocal counter
        dims = _dims(str(loop.var) for loop in loops)
        inner = _dims(str(loop.var) for loop in _inner_loops(body)) - dims
        seen_loop = False
        for stmt in body:
            if isinstance(stmt, Loop):
                visit(stmt.body, loops + (stmt,))
                seen_loop = True
                continue
            new = substitute(rename_buffers(stmt, renames), mapping)
            if dims in host_levels:
                level = host_levels.index(dims)
                host_inner = host_levels[-1] - host_levels[level]
                if inner and inner != host_inner and not isinstance(stmt, Load):
                    raise FusionError(
                        f"`{fmt_stmt(stmt)}` of kernel {kernel.name} brackets a loop over {sorted(inner)}, "
                        f"but the fused nest's loops inside that level run over {sorted(host_inner)}"
                    )
                if inner:
                    where = "post" if seen_loop else "pre"
                else:  # nothing to bracket here: keep launch order relative to the host's inner loop
                    where = "post" if after_host and level != innermost else "pre"
            elif isinstance(stmt, Load) and not seen_loop:
                level, where = innermost, "pre"
            else:
                raise FusionError(
                    f"`{fmt_stmt(stmt)}` of kernel {kernel.name} runs once per ({', '.join(sorted(dims))}); "
                    "no level of the fused nest iterates exactly that, and only loads may be sunk"
                )
            placed.setdefault((level, where), []).append(new)
            level_of[counter] = level
            counter += 1

    visit(kernel.body, ())
    return placed, level_of


def _inner_loops(body) -> tuple[Loop, ...]:
    out: list[Loop] = []
    level = [s for s in body if isinstance(s, Loop)]
    while level:
        out.extend(level)
        level = [s for loop in level for s in loop.body if isinstance(s, Loop)]
    return tuple(out)


def _domains(loops: tuple[Loop, ...]) -> set[str]:
    return {loop.domain for loop in loops if loop.domain}


def fuse(program: Program, names: list[str], host: str, name: str, phase: str) -> Program:
    """Merge the consecutive kernels ``names`` into one kernel ``name`` with ``host``'s loop nest.

    Raises:
        FusionError: the kernels are not consecutive, their nests walk different tile pairs, or a
            dependence would be broken (the message names the statement, tensor or loop).
    """
    order = [k.name for k in program.kernels]
    try:
        idx = [order.index(n) for n in names]
    except ValueError as exc:
        raise FusionError(f"no kernel {exc.args[0].split()[0]} in program {program.name}") from None
    if idx != list(range(idx[0], idx[0] + len(idx))):
        raise FusionError(f"kernels {names} are not consecutive in launch order {order}")
    kernels = [program.kernels[x] for x in idx]
    host_kernel = program.kernel(host)
    host_spine = spine(host_kernel)
    host_vars = [str(loop.var) for loop in host_spine]
    host_levels = [_dims(host_vars[:n]) for n in range(len(host_vars) + 1)]
    mapping = {sympy.floor(hq / G): hkv} if "hkv" in host_vars else {hkv: sympy.floor(hq / G)}

    # 1. Same tile pairs.
    host_domains = _domains(host_spine)
    for kernel in kernels:
        doms = _domains(spine(kernel))
        if doms and doms != host_domains:
            raise FusionError(f"kernel {kernel.name} walks tile pairs {doms}, the host nest {host_domains}")

    # Place every statement.
    placed: dict[tuple[int, str], list[Stmt]] = {}
    levels_of: dict[str, dict[int, int]] = {}
    buffers: list[Buffer] = []
    host_index = order.index(host)
    for kernel in kernels:
        renames = {buf.name: f"{kernel.name}_{buf.name}" for buf in kernel.buffers}
        buffers.extend(dataclasses.replace(buf, name=renames[buf.name]) for buf in kernel.buffers)
        after = order.index(kernel.name) > host_index
        kernel_placed, where_of = _place(kernel, host_levels, renames, mapping, after)
        levels_of[kernel.name] = where_of
        for key, stmts in kernel_placed.items():
            placed.setdefault(key, []).extend(stmts)

    # 2. Dependences between merged kernels.
    graph = dependence_graph(program)
    merged = set(names)
    for src, dst, data in edges_between(graph, merged, merged, scope="tensor"):
        if src.kernel == dst.kernel:
            continue
        a = substitute(src.stmt, mapping)
        b = substitute(dst.stmt, mapping)
        acc_a = a.dst if hasattr(a, "dst") and not isinstance(a.dst, str) else a.src
        acc_b = b.dst if hasattr(b, "dst") and not isinstance(b.dst, str) else b.src
        if acc_a != acc_b:
            raise FusionError(
                f"{data['kind']} dependence on {data['resource']}: {src.kernel} touches {fmt_access(acc_a)}, "
                f"{dst.kernel} touches {fmt_access(acc_b)}; fusing would reorder them"
            )
        writer = src if data["kind"] in ("flow", "output") else dst
        used = {str(s) for e in acc_a.index for s in sympy.sympify(e).free_symbols}
        if not _dims(writer.loop_vars) <= _dims(used):
            raise FusionError(
                f"{writer.kernel} writes {fmt_access(acc_a)} from several iterations (a reduction over "
                f"{sorted(_dims(writer.loop_vars) - _dims(used))}); {dst.kernel if writer is src else src.kernel} "
                "must wait for all of them, so the two cannot share an iteration"
            )
        level_a = levels_of[src.kernel][src.order[1]]
        level_b = levels_of[dst.kernel][dst.order[1]]
        if level_a != level_b:
            raise FusionError(
                f"{data['kind']} dependence on {fmt_access(acc_a)} between {src.kernel} and {dst.kernel} "
                f"would cross loop levels ({level_a} vs {level_b}) in the fused nest"
            )

    # Rebuild the nest from the inside out.
    body: tuple[Stmt, ...] = tuple(placed.get((len(host_spine), "pre"), []))
    for level in range(len(host_spine) - 1, -1, -1):
        loop = dataclasses.replace(host_spine[level], body=body)
        body = tuple(placed.get((level, "pre"), [])) + (loop,) + tuple(placed.get((level, "post"), []))
    fused = Kernel(name, phase, tuple(buffers), body)
    kernels_out = program.kernels[: idx[0]] + (fused,) + program.kernels[idx[-1] + 1 :]
    fused_from = tuple(sorted(set(program.attr("fused_from", ()) or ()) | set(names)))
    return dataclasses.replace(program, kernels=kernels_out).with_attrs(fused_from=fused_from)
