"""Ascend pass ``own-tile-epilogue`` and its knobs ``@signal_done`` (a store) and ``@wait_done`` (a load): a
later kernel of the same grid that only finishes the tiles the programs of an earlier kernel own (it loads
those tiles and inputs, nothing else: the atomic backward's post_kv, dK = scale·dK_ws, dV = dV_ws cast) runs
as the epilogue of each of those programs, after their loops: one kernel and its HBM-bound pass fewer, the
copies beside the next program's cube work. The owner's stores get :class:`SignalDone` (the AIC sets a done
flag at the end of each program) and the epilogue's first load :class:`WaitDone` (the AIV waits for it). Only
where no kernel in between touches what the moved kernel reads or writes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Load, Program, Store, grid_loops, map_body, rename_buffers, walk
from tilegen.passes.ascend.common import grid_key, straight_grid_body
from tilegen.passes.ascend.write_first_plain import FirstPlain
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class SignalDone(Annotation, key="signal_done", on=("Store",)):
    """At the end of each program instance whose loops ran (the waiting load's ``@zero_unless`` > 0)
    the unit that runs the store sets a done flag, once all its stores of the instance have landed, for
    a later load of the tile on the other unit (:class:`WaitDone`)."""

    def note(self, node) -> str:
        return "done flag at the program's end"


@dataclass(frozen=True)
class WaitDone(Annotation, key="wait_done", on=("Load",)):
    """A load of a tile the other unit wrote earlier in the same program instance (a
    :class:`SignalDone` store): the generated code first waits for that unit's done flag, set once its
    program's stores have landed; where ``@zero_unless`` says the writer ran no iteration neither unit
    touches the flag (a run of empty programs would otherwise pile up more sets than the flag's counter
    holds). The result is the same either way in the interpreter, which runs one statement at a time."""

    def check(self, node, at: Site) -> str:
        tensor = node.src.tensor
        if any(isinstance(x, Store) and x.has(SignalDone) and x.dst.tensor == tensor for x, _ in walk(at.kernel.body)):
            return ""
        return f"wait_done, but no store of {tensor} in the kernel signals done"

    def note(self, node) -> str:
        return "after the other unit's done flag"


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
                if isinstance(st, Store) and st.has(FirstPlain):
                    owner[st.dst.tensor] = (m, st)
        loads = [st for st in grid[-1].body if isinstance(st, Load)]
        owned = [st for st in loads if st.src.tensor in owner and owner[st.src.tensor][1].dst == st.src]
        if not owned or any(st not in owned and kinds[st.src.tensor] != "input" for st in loads):
            continue
        ms = {owner[st.src.tensor][0] for st in owned}
        if len(ms) != 1:
            continue
        m = ms.pop()
        if grid_key(kernels[m]) != grid_key(r):
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
                st, waited = st.annotate(WaitDone()), True
            epilogue.append(st)
        done = {st.src.tensor for st in owned}
        host = kernels[m]

        def edit(st):
            return st.annotate(SignalDone()) if isinstance(st, Store) and st.has(FirstPlain) and st.dst.tensor in done else st

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


PASS = Pass("own-tile-epilogue", lambda p, c: own_tile_epilogue(p),
            "a kernel that only finishes owned tiles runs as the owner's epilogue (@signal_done, @wait_done)")
