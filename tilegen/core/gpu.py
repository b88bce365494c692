"""The GPU (Triton) annotations: what the passes of :mod:`tilegen.passes.gpu` decide about how a node is
rendered, on the node it governs (:class:`~tilegen.core.ir.Annotation`). The Triton lowering
(:mod:`tilegen.backends.triton`) and the GPU cost model (:func:`tilegen.models.cost.predict_gpu`) read
them; none changes what the program computes.

==================  =========  =================================================================================
annotation          on         set by (pass)
==================  =========  =================================================================================
PipelinedLoads      Kernel     pipelined-loads: a tile loaded with several stages lives over its whole loop
TransposedTiles     Kernel     transposed-tiles: the [Br, Bc] tiles a K/V-tile grid holds as [Bc, Br]
Log2Scaled          statement  fold-log2: its result kept multiplied by log2(e); the operands that arrive so
HeavyLast           Loop       heavy-last: a Q-tile grid axis numbered from the last tile down
AccumulateInto      MatMul     fuse-accumulation: emitted at its one reader ``acc = acc + dst`` as ``acc += a @ b``
MaskSegments        Loop       mask-segments: the tiles [lo, hi) of the loop the mask leaves whole
LaunchKnobs         Kernel     launch-knobs: num_warps, num_stages and where they come from
==================  =========  =================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from tilegen.core.ir import Annotation, Expr


@dataclass(frozen=True)
class PipelinedLoads(Annotation):
    """The kernel's loops are software-pipelined by the compiler (Triton's pipeliner issues the loads of
    the next ``num_stages − 1`` iterations while this one computes: triton-lang/triton,
    lib/Dialect/TritonGPU/Transforms/Pipeliner), so every copy of a tile loaded with several stages is
    live over its whole loop (:func:`tilegen.models.footprint.live_intervals`)."""

    def text(self) -> str:
        return "gpu: staged loads live over their loop (software pipelining)"


@dataclass(frozen=True)
class TransposedTiles(Annotation):
    """The kernel holds these [Br, Bc] buffers transposed, [Bc, Br] (its grid walks K/V tiles: ``dV +=
    Pᵀ dO`` and ``dK += dSᵀ Q`` then take P and dS straight from registers as ``tl.dot``'s left
    operand; S = Q Kᵀ is computed as Sᵀ = K Qᵀ)."""

    buffers: tuple[str, ...]

    def text(self) -> str:
        return f"gpu: [Br, Bc] tiles held transposed: {', '.join(self.buffers)}"


@dataclass(frozen=True)
class Log2Scaled(Annotation):
    """exp → exp2 with log2(e) folded in. ``result``: the statement's value is kept multiplied by log2(e)
    (a load or fill multiplies its value, a matmul its alpha, a score mod its output; an ``exp`` of it
    becomes ``exp2``). ``args``: the buffers the statement reads whose every reaching definition is kept
    so (a statement whose own result is natural converts them back with ln 2)."""

    result: bool
    args: tuple[str, ...] = ()

    def text(self) -> str:
        parts = ["result x log2(e)"] if self.result else []
        if self.args:
            parts.append(f"reads {', '.join(self.args)} x log2(e)")
        return "gpu: " + "; ".join(parts)


@dataclass(frozen=True)
class HeavyLast(Annotation):
    """A Q-tile grid axis whose programs grow with the tile index (causal): its programs are numbered from
    the last tile down, so the longest ones start first."""

    def text(self) -> str:
        return "gpu: numbered from the last tile down"


@dataclass(frozen=True)
class AccumulateInto(Annotation):
    """A matmul ``T = a @ b`` whose one reader is a later ``acc = acc + T`` of the same block: emitted there
    as ``acc = tl.dot(a, b, acc)``; T is never held (no registers)."""

    acc: str

    def text(self) -> str:
        return f"gpu: emitted as {self.acc} += this product at its add"


@dataclass(frozen=True)
class MaskSegments(Annotation):
    """A tile loop whose body masks, emitted as up to three loops: [start, lo) and [hi, stop), whose tiles
    the mask cuts, and [lo, hi), whose tiles it leaves whole (no ``tl.where``); a segment with equal
    bounds is left out. The whole tiles are those whose index v is at least every one of ``lowers``,
    below every one of ``uppers``, with every one of ``guards`` true (:meth:`whole`)."""

    lowers: tuple[Expr, ...]
    uppers: tuple[Expr, ...]
    guards: tuple[Expr, ...]

    def whole(self, start: Expr, stop: Expr) -> tuple[Expr, Expr]:
        """(lo, hi): the whole tiles of the loop [start, stop), clamped into it (lo = hi = stop when a
        guard fails)."""
        import sympy

        lo = sympy.Max(start, *self.lowers) if self.lowers else start
        lo = sympy.Min(lo, stop) if self.lowers else lo
        hi = sympy.Min(stop, *self.uppers) if self.uppers else stop
        hi = sympy.Max(hi, lo) if self.uppers else hi
        if self.guards:
            guard = sympy.And(*self.guards)
            lo = sympy.Piecewise((lo, guard), (stop, True))
            hi = sympy.Piecewise((hi, guard), (stop, True))
        return lo, hi

    def text(self) -> str:
        from tilegen.core.printer import fmt_expr

        conds = [f"v >= {fmt_expr(e)}" for e in self.lowers] + [f"v < {fmt_expr(e)}" for e in self.uppers] + [fmt_expr(g) for g in self.guards]
        return f"gpu: tiles v with {' and '.join(conds) or 'any index'} whole, the rest masked"


@dataclass(frozen=True)
class LaunchKnobs(Annotation):
    """A kernel's launch knobs: warps per program and software-pipelining depth, and where they come from
    (a ``[[triton.schedule]]`` row, ``[triton.default]``, or the caller)."""

    num_warps: int
    num_stages: int
    source: str

    def text(self) -> str:
        return f"gpu: num_warps {self.num_warps}, num_stages {self.num_stages} ({self.source})"
