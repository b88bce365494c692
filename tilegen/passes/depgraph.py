"""The dependence graph of a program's statements (networkx).

Nodes are the non-loop statements of every kernel, in program order, each with what it reads and
writes: on-chip buffers by name, HBM tensors by :class:`~tilegen.core.ir.Access`. Edges are the classic
dependences between two statements touching the same resource, at least one of them writing it:
``flow`` (read after write), ``anti`` (write after read) and ``output`` (write after write).

Each edge records:

- ``resource`` and ``scope`` (``buffer`` or ``tensor``);
- ``carried``: for buffer edges inside a kernel, the loop variables whose previous iteration the value
  comes from (empty for a dependence inside one iteration);
- ``same_tile``: for tensor edges, whether both ends access exactly the same tile expression, so that
  iteration x of one statement meets iteration x of the other only.

The fusion pass asks this graph whether a merge keeps every dependence (see :mod:`tilegen.passes.fuse`).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from tilegen.core.ir import Access, Elementwise, Load, Loop, MatMul, Program, Stmt, Store, walk


@dataclass(frozen=True)
class StmtInfo:
    """One statement in context.

    Attributes:
        id: ``"<kernel>#<n>"``, n counting the kernel's non-loop statements in program order.
        order: (kernel index, n): program order.
        loops: the enclosing loops, outermost first.
        reads / writes: ``("buffer", name, None)`` or ``("tensor", name, access)``.
        reduces: the statement adds into what it writes (accumulating matmul, atomic store, x = x op y).
    """

    id: str
    kernel: str
    order: tuple[int, int]
    stmt: Stmt
    loops: tuple[Loop, ...]
    reads: tuple[tuple[str, str, Access | None], ...]
    writes: tuple[tuple[str, str, Access | None], ...]
    reduces: bool

    @property
    def loop_vars(self) -> tuple[str, ...]:
        return tuple(str(loop.var) for loop in self.loops)


def statements(program: Program) -> list[StmtInfo]:
    """Every non-loop statement of ``program`` with its context, in program order."""
    out: list[StmtInfo] = []
    for k, kernel in enumerate(program.kernels):
        n = 0
        for stmt, loops in walk(kernel.body):
            if isinstance(stmt, Loop):
                continue
            reads = [("buffer", name, None) for name in stmt.buffers_read()]
            writes = [("buffer", name, None) for name in stmt.buffers_written()]
            if isinstance(stmt, Load):
                reads.append(("tensor", stmt.src.tensor, stmt.src))
            if isinstance(stmt, Store):
                writes.append(("tensor", stmt.dst.tensor, stmt.dst))
                if stmt.accumulate:
                    reads.append(("tensor", stmt.dst.tensor, stmt.dst))
            reduces = (
                (isinstance(stmt, MatMul) and stmt.accumulate)
                or (isinstance(stmt, Store) and stmt.accumulate)
                or (isinstance(stmt, Elementwise) and stmt.dst in stmt.args)
            )
            out.append(StmtInfo(f"{kernel.name}#{n}", kernel.name, (k, n), stmt, loops, tuple(reads), tuple(writes), reduces))
            n += 1
    return out


def _common_loops(a: StmtInfo, b: StmtInfo) -> tuple[Loop, ...]:
    if a.kernel != b.kernel:
        return ()
    common = []
    for x, y in zip(a.loops, b.loops):
        if x is not y:
            break
        common.append(x)
    return tuple(common)


def dependence_graph(program: Program) -> nx.MultiDiGraph:
    """The dependence graph of ``program`` (see the module docstring for the edge attributes)."""
    infos = statements(program)
    graph = nx.MultiDiGraph()
    for info in infos:
        graph.add_node(info.id, info=info)
    for x, first in enumerate(infos):
        for second in infos[x:]:
            same = first is second
            for kind, a_set, b_set in (
                ("flow", first.writes, second.reads),
                ("anti", first.reads, second.writes),
                ("output", first.writes, second.writes),
            ):
                for scope_a, name_a, acc_a in a_set:
                    for scope_b, name_b, acc_b in b_set:
                        if scope_a != scope_b or name_a != name_b:
                            continue
                        if scope_a == "buffer" and first.kernel != second.kernel:
                            continue  # buffers are private to a kernel
                        common = _common_loops(first, second)
                        if scope_a == "buffer":
                            if same and kind == "output":
                                continue
                            # second after first in text: loop-independent; a read of a value written
                            # later in the text of a common loop comes from the previous iteration.
                            _add(graph, first, second, kind, name_a, scope_a, carried=(), same_tile=None)
                            if common and not same:
                                _add(graph, second, first, _reverse(kind), name_a, scope_a,
                                     carried=tuple(str(loop.var) for loop in common), same_tile=None)
                            elif same and kind == "flow":
                                _add(graph, first, first, "flow", name_a, scope_a,
                                     carried=tuple(str(loop.var) for loop in common), same_tile=None)
                        else:
                            if same and kind != "output":
                                continue
                            _add(graph, first, second, kind, name_a, scope_a, carried=(), same_tile=acc_a == acc_b)
    return graph


def _reverse(kind: str) -> str:
    return {"flow": "anti", "anti": "flow", "output": "output"}[kind]


def _add(graph, src: StmtInfo, dst: StmtInfo, kind, resource, scope, carried, same_tile) -> None:
    graph.add_edge(src.id, dst.id, kind=kind, resource=resource, scope=scope, carried=carried, same_tile=same_tile)


def edges_between(graph: nx.MultiDiGraph, kernels_a: set[str], kernels_b: set[str], scope: str | None = None):
    """The edges (src info, dst info, data) from statements of ``kernels_a`` to those of ``kernels_b``."""
    for u, v, data in graph.edges(data=True):
        iu, iv = graph.nodes[u]["info"], graph.nodes[v]["info"]
        if iu.kernel in kernels_a and iv.kernel in kernels_b and (scope is None or data["scope"] == scope):
            yield iu, iv, data
