"""Ascend pass ``write-first-plain`` and its knobs ``@first_plain`` (a store) and ``@zero_unless`` (its later
loads): an accumulating store into a workspace tile that each program instance of its kernel owns (the store's
tile is indexed by the grid alone: the atomic backward's dK_ws, dV_ws, one K/V tile per program), and that an
earlier kernel only zeroes, gets :class:`FirstPlain`: the program's first store writes the tile, the later
ones add. The zeroing goes (the backward's pre_kv kernel: 134 MB of zeros at llama2-7b), and every later load
of the tile gets :class:`ZeroUnless`, the fewest iterations of the loops around the store, so that a program
whose loops ran no iteration (a K/V tile no query sees) still reads zeros. Only where those loops skip no
tiles of their range (no block table) and their bounds depend on the grid alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import SHAPE_SYMBOLS, TILE_SYMBOLS, Fill, Load, Program, Store, grid_loops, map_body, walk
from tilegen.passes.ascend.common import grid_key
from tilegen.passes.driver import Pass

_SIZE_NAMES = {str(s) for s in SHAPE_SYMBOLS + TILE_SYMBOLS}


def _grid_vars(kernel) -> set[str]:
    return {str(lp.var) for lp in grid_loops(kernel)}


@dataclass(frozen=True)
class FirstPlain(Annotation, key="first_plain", on=("Store",)):
    """An accumulating store into a tile that only its own program instance (one iteration of the
    kernel's grid) touches: the instance's first execution of the store writes the tile, the later ones
    add into it, so nothing has to zero the tile beforehand. It changes the value rule of the store
    (:meth:`first_writes`)."""

    def first_writes(self) -> bool:
        return True

    def check(self, node, at: Site) -> str:
        grid = _grid_vars(at.kernel)
        used = {str(x) for e in node.dst.index for x in sympy.sympify(e).free_symbols} - _SIZE_NAMES
        if not node.accumulate or not used <= grid:
            return (f"first_plain needs an accumulating store whose index uses no loop variable but the grid's {sorted(grid)} "
                    "(write-first-plain checks that the tile is the program's own)")
        return ""

    def note(self, node) -> str:
        return "the program's first store writes"


@dataclass(frozen=True)
class ZeroUnless(Annotation, key="zero_unless", on=("Load",)):
    """A load of a tile whose one writer (an earlier kernel's :class:`FirstPlain` store) may run no
    iteration: ``trips`` is an integer expression of the grid (the fewest iterations of the loops around
    the writer); where it is <= 0 the writer never ran, the tile holds nothing it wrote, and the load
    gives zeros, as it would have read from a tile zeroed beforehand (:meth:`zeros_unless`)."""

    trips: sympy.Expr

    def zeros_unless(self) -> sympy.Expr:
        return self.trips

    def check(self, node, at: Site) -> str:
        grid = _grid_vars(at.kernel)
        used = {str(x) for x in sympy.sympify(self.trips).free_symbols} - _SIZE_NAMES
        return "" if used <= grid else f"zero_unless uses {sorted(used - grid)}, which the grid does not bind"

    def note(self, node) -> str:
        return "zeros where trips <= 0: its writer ran no iteration"


def write_first_plain(program: Program) -> Program:
    """Put :class:`FirstPlain` on each accumulating store whose tile its program instance owns and
    that an earlier kernel only zeroes; drop the zeroing (and a kernel left without statements); put
    :class:`ZeroUnless` on the tile's later loads (see the module docstring). Anything else is left
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
            if m <= z or not store.accumulate or store.rows or store.dst != st.dst or grid_key(kernels[m]) != grid_key(k):
                continue
            serial = loops[len(grid):]  # the grids are equal (_grid_key)
            names = {str(lp.var) for lp in grid}
            if any(lp.kind != "serial" or lp.blocks for lp in serial):
                continue
            if any({str(x) for x in sympy.sympify(e).free_symbols} & {str(lp.var) for lp in serial}
                   for lp in serial for e in (lp.start, lp.stop)):
                continue  # a bound that moves with an enclosing serial loop
            readers = [(n, x) for n, x, _ in others if isinstance(x, Load)]
            if any(n <= m or x.src != st.dst or grid_key(kernels[n]) != grid_key(k) or x.has(ZeroUnless) for n, x in readers):
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
                return st.annotate(FirstPlain())
            if zero.get(id(st)) is not None:
                return st.annotate(ZeroUnless(zero[id(st)]))
            return st

        out.append(dataclasses.replace(k, body=map_body(k.body, edit)))
    return dataclasses.replace(program, kernels=tuple(out))


PASS = Pass("write-first-plain", lambda p, c: write_first_plain(p),
            "an owned workspace tile written by its first store, added to by the later ones (@first_plain, @zero_unless)")
