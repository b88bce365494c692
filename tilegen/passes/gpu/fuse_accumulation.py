"""GPU pass fuse-accumulation: ``T = a @ b … X = X + T`` (T read once, by that add) becomes, in the emitted
code, ``X = tl.dot(a, b, X)`` at the add: the matmul gets :class:`AccumulateInto`
(``@accumulate_into``) naming X. T is then never held (the GPU cost model counts no registers for it); the values are
unchanged up to the rounding of the add."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Elementwise, Kernel, Loop, MatMul, Program, Stmt, walk
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class AccumulateInto(Annotation, key="accumulate_into", on=("MatMul",)):
    """A matmul ``T = a @ b`` whose one reader is a later ``acc = acc + T`` of the same block: emitted there
    as ``acc = tl.dot(a, b, acc)``; T is never held (:meth:`unheld`: the GPU cost model counts no
    registers for it). The values are unchanged up to the rounding of the add."""

    acc: str

    def unheld(self) -> bool:
        return True

    def note(self, node) -> str:
        return f"emitted as {self.acc} += this product at its add"


def _reads(s: Stmt) -> tuple[str, ...]:
    if isinstance(s, Loop):
        return tuple(x for st, _ in walk(s.body) for x in st.buffers_read())
    return s.buffers_read()


def _writes(s: Stmt) -> tuple[str, ...]:
    if isinstance(s, Loop):
        return tuple(x for st, _ in walk(s.body) for x in st.buffers_written())
    return s.buffers_written()


def fused_pairs(body: tuple[Stmt, ...], uses: dict[str, int]) -> dict[int, str]:
    """{index in ``body`` of a matmul: the accumulator X it is fused into}: ``T = a @ b`` (alpha 1, not
    accumulating, T read ``uses[T]`` = once in the kernel) followed in ``body`` by ``X = X + T``, when
    nothing in between writes a, b or T or reads T. The block is scanned in order, each fusion taking
    effect for the scans after it (the fused matmul stands at its add, writing X)."""
    out = list(enumerate(body))  # (index in body, statement as fused so far)
    fused: dict[int, str] = {}
    n = 0
    while n < len(out):
        at, mm = out[n]
        if isinstance(mm, MatMul) and not mm.accumulate and mm.alpha == 1.0 and uses.get(mm.dst, 0) == 1:
            for m in range(n + 1, len(out)):
                s = out[m][1]
                if isinstance(s, Elementwise) and s.op == "add" and mm.dst in s.args and len(set(s.args)) == 2:
                    acc = next(a for a in s.args if a != mm.dst)
                    if acc == s.dst:
                        fused[at] = acc
                        out[m] = (out[m][0], dataclasses.replace(mm, dst=acc, accumulate=True))
                        del out[n]
                        n -= 1
                    break
                if set(_writes(s)) & {mm.a, mm.b, mm.dst} or mm.dst in _reads(s):
                    break
        n += 1
    return fused


def _kernel(kernel: Kernel) -> Kernel:
    uses: dict[str, int] = {}
    for s, _ in walk(kernel.body):
        for name in s.buffers_read():
            uses[name] = uses.get(name, 0) + 1

    def block(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        fused = fused_pairs(body, uses)
        out = []
        for n, s in enumerate(body):
            if isinstance(s, Loop):
                s = dataclasses.replace(s, body=block(s.body))
            elif n in fused:
                s = s.annotate(AccumulateInto(fused[n]))
            out.append(s)
        return tuple(out)

    return dataclasses.replace(kernel, body=block(kernel.body))


def fuse_accumulation(program: Program) -> Program:
    """``program`` with :class:`AccumulateInto` on each matmul whose product one add
    accumulates (:func:`fused_pairs`, in every block of every kernel)."""
    return dataclasses.replace(program, kernels=tuple(_kernel(k) for k in program.kernels))


FUSE_ACCUMULATION = Pass(
    "fuse-accumulation", lambda p, c: fuse_accumulation(p),
    "T = a @ b read once by X = X + T: emitted as X = tl.dot(a, b, X), T never held (@accumulate_into)",
    annotates=True,
)
