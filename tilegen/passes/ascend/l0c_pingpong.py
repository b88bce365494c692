"""Ascend pass ``l0c-pingpong`` and its knob ``@n_chunk`` (after placement and tiles): in a kernel whose every
result-level (L0C) buffer is a fresh product stored at once and read by nothing else (every cube product of
the forward and of the atomic backward), each matmul gets :class:`NChunk`: it is computed in column chunks
that take the two halves of L0C in turn, so that the Fixpipe of one chunk runs while the cube computes the
next (the cube tile inside the exchanged block: two levels of tiling). A kernel with an accumulator held in
L0C across statements keeps the whole level for it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Loop, MatMul, Program, Store, map_body, stages_of, walk
from tilegen.passes.ascend.common import env_of
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class NChunk(Annotation, key="n_chunk", on=("MatMul",)):
    """The matmul computes dst in column chunks of ``width`` (a multiple of 16), each in one half of the
    result level (L0C) in turn, and the next statement (the Store of dst, the only reader) drains each
    chunk while the other half accumulates the next. The values are unchanged: each column of dst is the
    same dot products. (Without the annotation dst is computed whole.)"""

    width: int

    def chunk_columns(self) -> int:
        return self.width

    def check(self, node, at: Site) -> str:
        if self.width % 16 or self.width <= 0 or node.accumulate:
            return f"n_chunk {self.width} needs a positive multiple of 16 and a product that does not accumulate"
        readers = Counter(b for s, _ in walk(at.kernel.body) if not isinstance(s, Loop) for b in s.buffers_read())
        nxt = at.next
        if not (isinstance(nxt, Store) and nxt.src == node.dst) or readers[node.dst] != 1:
            return f"n_chunk needs the next statement to store {node.dst} and nothing else to read it"
        return ""

    def note(self, node) -> str:
        return f"in column chunks of {self.width}, L0C ping-pong"


def chunk_of(matmul: MatMul) -> int:
    """The column chunk of a matmul (:class:`NChunk`), 0 when it is computed whole."""
    c = matmul.get(NChunk)
    return c.width if c is not None else 0


def l0c_pingpong(program: Program, target) -> Program:
    """Put :class:`NChunk` on the matmuls of every kernel whose buffers on the target's result level are each
    written by one non-accumulating matmul, stored by the next statement and read by nothing else (see
    the module docstring). The chunks are as few as fit one half of the level's usable bytes at the
    bound tile sizes, of balanced widths rounded up to 16 columns: a 128 x 256 product in the 128 KiB L0C
    of the 910B (``targets/ascend910b2.toml``) runs as two chunks of 128 columns. Kernels without such
    products are unchanged."""
    from tilegen.core.exprs import evaluate

    level_name = target.placement["result"]
    half = target.level(level_name).usable // 2
    env = env_of(program)

    def chunkable(k) -> bool:
        result = {b.name for b in k.buffers if b.scope == level_name}
        if not result:
            return False
        readers = [b for s, _ in walk(k.body) if not isinstance(s, Loop) for b in s.buffers_read()]
        producers: dict[str, int] = {}
        bodies = [(k.body, ())] + [(s.body, stages_of(s)) for s, _ in walk(k.body) if isinstance(s, Loop)]
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
        edit = lambda s: s.annotate(NChunk(widths[id(s)])) if isinstance(s, MatMul) else s  # noqa: E731
        kernels.append(dataclasses.replace(k, body=map_body(k.body, edit)))
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("l0c-pingpong", lambda p, c: l0c_pingpong(p, c.target), "each fresh cube product in column chunks through the two halves of L0C (@n_chunk)")
