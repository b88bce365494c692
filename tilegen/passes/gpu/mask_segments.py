"""GPU pass mask-segments (after the tile search: it reads the bound sizes): a tile loop whose body masks is
emitted as up to three loops: tiles the mask cuts (masked), tiles it leaves whole (no ``tl.where``),
tiles it cuts again. The bounds come from the same sympy rule as the interpreter's "tile fully visible"
test; the loop gets :class:`MaskSegments` (``@mask_segments``: the bounds on its variable). Not with a mask mod: there the
block classes say which tiles are whole. The program and its counts are unchanged: the whole tiles'
mask hides nothing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Expr, Kernel, Loop, Mask, Program, Sk, Sq
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class MaskSegments(Annotation, key="mask_segments", on=("Loop",)):
    """A tile loop whose body masks, emitted as up to three loops: [start, lo) and [hi, stop), whose tiles
    the mask cuts, and [lo, hi), whose tiles it leaves whole (no ``tl.where``); a segment with equal
    bounds is left out. The whole tiles are those whose index v is at least every one of ``lowers``,
    below every one of ``uppers``, with every one of ``guards`` true (:meth:`whole`). Rendering only:
    every hook keeps its default (the whole tiles' mask hides nothing)."""

    lowers: tuple[Expr, ...]
    uppers: tuple[Expr, ...]
    guards: tuple[Expr, ...]

    def whole(self, start: Expr, stop: Expr) -> tuple[Expr, Expr]:
        """(lo, hi): the whole tiles of the loop [start, stop), clamped into it (lo = hi = stop when a
        guard fails)."""
        lo = sympy.Max(start, *self.lowers) if self.lowers else start
        lo = sympy.Min(lo, stop) if self.lowers else lo
        hi = sympy.Min(stop, *self.uppers) if self.uppers else stop
        hi = sympy.Max(hi, lo) if self.uppers else hi
        if self.guards:
            guard = sympy.And(*self.guards)
            lo = sympy.Piecewise((lo, guard), (stop, True))
            hi = sympy.Piecewise((hi, guard), (stop, True))
        return lo, hi

    def note(self, node) -> str:
        return "the tiles within these bounds run unmasked, the rest masked"


def unmasked_conditions(program: Program, loop: Loop, mask: Mask, tails: dict[str, bool], shape: tuple) -> MaskSegments | None:
    """Where a tile loop's tiles need no mask, as bounds on its variable v (the annotation; its
    :meth:`MaskSegments.whole` clamps them into the loop's [start, stop)); None when a
    condition is not linear.

    A tile [r0, r0 + R) × [c0, c0 + C) needs no mask iff r0 + R ≤ Sq and c0 + C ≤ Sk (when the spec has
    tails there) and, for a bounded window, c0 ≥ r0 + R − 1 + off − left and c0 + C − 1 ≤ r0 + off + right.
    Each condition is linear in the loop variable, with a positive or negative coefficient, and gives a
    lower (ceiling) or upper (floor) bound on it; conditions without it form a guard. With a mask mod
    (``Program.mods.mask``) any tile may be cut, so there is no split (None): the block classes decide.
    """
    if program.mods is not None and program.mods.mask is not None:
        return None
    v = loop.var
    rows, cols = shape
    m = program.mask
    conds: list[sympy.Expr] = []  # each: expr <= 0
    if tails["rows"]:
        conds.append(mask.row0 + rows - Sq)
    if tails["cols"]:
        conds.append(mask.col0 + cols - Sk)
    if m.left >= 0:
        conds.append(mask.row0 + rows - 1 + m.offset - m.left - mask.col0)
    if m.right >= 0:
        conds.append(mask.col0 + cols - 1 - mask.row0 - m.offset - m.right)
    lowers, uppers, guards = [], [], []
    for c in conds:
        c = sympy.expand(c)
        a = c.coeff(v)
        rest = sympy.expand(c - a * v)
        if a == 0:
            guards.append(rest <= 0)
        elif a.is_positive:
            uppers.append(sympy.floor(-rest / a) + 1)  # a*v + rest <= 0  <=>  v <= -rest/a
        elif a.is_negative:
            lowers.append(sympy.ceiling(rest / -a))
        else:
            return None
    return MaskSegments(tuple(lowers), tuple(uppers), tuple(guards))


def _kernel(program: Program, kernel: Kernel) -> Kernel:
    bufs = {b.name: b for b in kernel.buffers}

    def edit(body):
        out = []
        for s in body:
            if isinstance(s, Loop):
                s = dataclasses.replace(s, body=edit(s.body))
                masks = [st for st in s.body if isinstance(st, Mask)]
                if s.kind == "serial" and not s.blocks and len(masks) == 1:
                    shape = tuple(bufs[masks[0].src].shape)
                    tails = {
                        "rows": program.evaluate(Sq) % program.evaluate(shape[0]) != 0,
                        "cols": program.evaluate(Sk) % program.evaluate(shape[1]) != 0,
                    }
                    split = unmasked_conditions(program, s, masks[0], tails, shape)
                    if split is not None:
                        s = s.annotate(split)
            out.append(s)
        return tuple(out)

    return dataclasses.replace(kernel, body=edit(kernel.body))


def mask_segments(program: Program) -> Program:
    """``program`` (bound) with :class:`MaskSegments` on each serial tile loop with one
    mask among its statements (no block table) where :func:`unmasked_conditions` gives the split."""
    return dataclasses.replace(program, kernels=tuple(_kernel(program, k) for k in program.kernels))


MASK_SEGMENTS = Pass(
    "mask-segments", lambda p, c: mask_segments(p),
    "a masking tile loop emitted as cut | whole | cut tiles, the whole ones without tl.where (@mask_segments)",
    annotates=True,
)
