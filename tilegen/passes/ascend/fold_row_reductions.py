"""Ascend pass ``fold-row-reductions`` and its knob ``@fold`` (after placement and tiles): a row reduction (max
or sum) over at least two 64-column blocks gets :class:`Fold`, a scratch of the tile's rows x 64 fp32 columns:
the emitted code folds the row's blocks into it with elementwise Max/Add (one repeat per row, the plain vector
rate) and then reduces 64 columns per row once (the in-repeat reduction, which runs at a lower rate), instead
of one in-repeat reduction per block; asc-devkit's SoftmaxFlashV2 reduces its rows the same way. Only where
the levels still fit with the scratch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Buffer, Program, RowReduce, map_body, walk
from tilegen.passes.ascend.common import env_of, fits
from tilegen.passes.driver import Pass

FOLD_LANES = 64  # fp32 lanes of one 256-byte vector repeat: the width a row reduction folds to


@dataclass(frozen=True)
class Fold(Annotation, key="fold", on=("RowReduce",)):
    """``buffer``: an fp32 scratch buffer of src's rows x 64 columns, which the reduction also writes
    (:meth:`scratch`). The emitted code first folds src's 64-column blocks into it with elementwise
    Max/Add (one repeat per row), then reduces the 64 columns of each row once, instead of one in-repeat
    reduction per block. The result is the same up to the order of a sum's additions."""

    BUFFERS = ("buffer",)
    buffer: str

    def check(self, node, at: Site) -> str:
        bufs = {b.name: b for b in at.kernel.buffers}
        s, f = bufs.get(node.src), bufs.get(self.buffer)
        if f is None:
            return f"fold buffer {self.buffer} is not declared"
        if s is None:
            return ""
        same = lambda a, b: sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0  # noqa: E731
        if (len(f.shape) != 2 or not same(f.shape[0], s.shape[0]) or not same(f.shape[1], FOLD_LANES) or f.dtype != "fp32"
                or (f.scope, f.unit, f.row_split) != (s.scope, s.unit, s.row_split)):
            return (f"fold buffer {self.buffer} must be fp32 [{s.shape[0]}, {FOLD_LANES}] beside {s.name} "
                    f"(its level, unit and row split), not {f.dtype} {list(f.shape)} on {f.scope}")
        return ""

    def note(self, node) -> str:
        return f"folded to {FOLD_LANES} columns in {self.buffer} first"


def fold_of(reduce: RowReduce) -> str:
    """The scratch buffer a row reduction folds into (:class:`Fold`), "" when it reduces block by block."""
    f = reduce.get(Fold)
    return f.buffer if f is not None else ""


def fold_row_reductions(program: Program, target) -> Program:
    """Put :class:`Fold` on every row reduction of a tile on the target's vector level whose rows
    span at least two 64-column blocks (see the module docstring): a scratch buffer ``<dst>_fold`` of
    the source's rows x 64 fp32 columns, on the same level and row split, is added to the kernel per
    reduction and planned like any tile (live only in its statement). Kernels where the levels would not fit with it
    are unchanged. (The fold is the shape of the row reductions in asc-devkit's SoftmaxFlashV2 for
    2201: ``NewReduceMaxLastNDImpl`` in impl/adv_api/detail/activation/softmax/membase/v220/
    softmax_common_impl/softmax_common_nd_reduce.h first takes the elementwise Max of the 64-column
    blocks of every row, then reduces one 64-column block per row.)"""
    from tilegen.core.exprs import evaluate

    level = target.placement["vector"]
    env = env_of(program)
    kernels = []
    for k in program.kernels:
        bufs = {b.name: b for b in k.buffers}
        folds = {}  # reduction's dst -> its own scratch, live in that statement only
        for s, _ in walk(k.body):
            if not isinstance(s, RowReduce) or s.has(Fold):
                continue
            src = bufs[s.src]
            if src.scope == level and len(src.shape) == 2 and int(evaluate(src.shape[1], env)) >= 2 * FOLD_LANES:
                folds[s.dst] = Buffer(f"{s.dst}_fold", (src.shape[0], sympy.Integer(FOLD_LANES)), "fp32", src.scope, 1, src.unit, src.row_split)
        if not folds or any(b.name in bufs for b in folds.values()):
            kernels.append(k)
            continue
        edit = lambda st: st.annotate(Fold(folds[st.dst].name)) if isinstance(st, RowReduce) and st.dst in folds else st  # noqa: E731
        new = dataclasses.replace(k, body=map_body(k.body, edit), buffers=k.buffers + tuple(folds.values()))
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("fold-row-reductions", lambda p, c: fold_row_reductions(p, c.target), "a row max/sum over several 64-column blocks folded to one block first (@fold)")
