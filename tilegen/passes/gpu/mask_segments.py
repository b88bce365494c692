"""GPU pass mask-segments (after the tile search: it reads the bound sizes): a tile loop whose body masks is
emitted as up to three loops: tiles the mask cuts (masked), tiles it leaves whole (no ``tl.where``),
tiles it cuts again. The bounds come from the same sympy rule as the interpreter's "tile fully visible"
test; the loop gets :class:`~tilegen.core.gpu.MaskSegments` (the bounds on its variable). Not with a mask mod: there the
block classes say which tiles are whole. The program and its counts are unchanged: the whole tiles'
mask hides nothing."""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.gpu import MaskSegments
from tilegen.core.ir import Kernel, Loop, Mask, Program, Sk, Sq, annotate
from tilegen.passes.driver import Pass


def unmasked_conditions(program: Program, loop: Loop, mask: Mask, tails: dict[str, bool], shape: tuple) -> MaskSegments | None:
    """Where a tile loop's tiles need no mask, as bounds on its variable v (the annotation; its
    :meth:`~tilegen.core.gpu.MaskSegments.whole` clamps them into the loop's [start, stop)); None when a
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
                        s = annotate(s, split)
            out.append(s)
        return tuple(out)

    return dataclasses.replace(kernel, body=edit(kernel.body))


def mask_segments(program: Program) -> Program:
    """``program`` (bound) with :class:`~tilegen.core.gpu.MaskSegments` on each serial tile loop with one
    mask among its statements (no block table) where :func:`unmasked_conditions` gives the split."""
    return dataclasses.replace(program, kernels=tuple(_kernel(program, k) for k in program.kernels))


MASK_SEGMENTS = Pass(
    "mask-segments", lambda p, c: mask_segments(p),
    "a masking tile loop emitted as cut | whole | cut tiles, the whole ones without tl.where (MaskSegments)",
    annotates=True,
)
