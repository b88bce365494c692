"""Triton backend: a scheduled tile IR program → a Python module of Triton kernels.

The lowering walks the bound, placed programs of a spec (the forward and the fused backward, as
:mod:`tilegen.passes.pipeline` schedules them for a GPU target) and turns every kernel into a template
context: its launch grid, its parameters and a flat list of lines, one per IR statement, which the
per-op Jinja macros of ``templates/triton/`` spell in Triton. Each IR construct maps to one thing:

==================  ========================================================================================
IR                  Triton
==================  ========================================================================================
parallel ``Loop``   a launch-grid axis: ``var = tl.program_id(axis)`` (innermost loop = axis 0)
serial ``Loop``     ``for var in range(start, stop)`` with the bounds printed from the IR's sympy
                    expressions as integer code (``floor(a/b)`` → ``a // b``, or a floor helper when
                    ``a`` may be negative, since Triton's ``//`` truncates towards zero)
``Load``            ``tl.load`` of a pointer tile; rows/columns past the tensor's extent are masked and
                    take ``other=`` the IR's pad
``Store``           ``tl.store`` (clipped to the extent); ``accumulate=True`` → ``tl.atomic_add``
                    (relaxed: the sum is read only by a later launch)
``Fill``            ``tl.full``
``MatMul``          ``tl.dot`` (fp32 accumulation; transposes through ``tl.trans``), ``tl.dot(a, b, acc)``
                    when it accumulates
``Elementwise``     ``tl.exp``/``tl.log``/``tl.where``/``tl.maximum``/arithmetic, ``.to(dtype)`` for casts;
                    an [R] vector broadcasts along the rows of an [R, C] tile
``RowReduce``       ``tl.max`` / ``tl.sum`` over the tile's columns
``Mask``            ``tl.where(visible, x, -inf)`` with DESIGN §3's rule: key c visible to query r iff
                    r + off − left ≤ c ≤ r + off + right, and r < Sq, c < Sk
``ModOp`` score     score′ printed from the sympy expression (:class:`ModPrinter`: ``tl.where``, ``_tanh``,
                    ``tl.load`` of a parameter at its clamped index), then ``tl.where(mask_mod, ·, -inf)``
                    unless the tile's class is full (``if cls != 2``)
``ModOp`` dscore    ``tl.where(dS′ == 0, 0, dS′ · ∂score′/∂score)`` at the raw score
``ModOp`` pgrad     the tile's partial window [W]: dS′·coef binned by parameter index − window origin;
                    a bin of neither index → ``tl.sum``; of the query only → row sums, then a one-hot
                    [Br, W] sum; of the key only → column sums likewise; of both → a one-hot sum, a chunk
                    of bins at a time
``ModOp`` classify  visible count over the tile under extents ∧ window ∧ mask_mod → 0 / 1 / 2
``Loop.blocks``     a walk of the outer tile's list of non-empty tiles (:func:`block_list_tensors`):
                    ``for t in range(n): j = tl.load(list + t)``, the tile's class read beside it
==================  ========================================================================================

A program with mods also gets host code (``templates/triton/mods_host.py.jinja``): the parameter
checks, the lists from the class table (torch ops: a sort of distinct keys, deterministic), and per
parameter-gradient term a reduction kernel in which each program owns a block of parameter entries and
adds the tiles' windows in tile order (after summing, with torch, over the tile axes the window origin
does not read): deterministic, no float atomics. More than three grid axes (the classify kernel's
Bm × Hm × nQ × nK) share launch axis 2.

The GPU-specific choices of how a kernel is emitted are passes of the GPU list (:mod:`tilegen.passes.gpu`),
whose result is an annotation in the IR (defined beside its pass in :mod:`tilegen.passes.gpu`) that this lowering reads; none changes
what a kernel computes:

- transposed-tiles (:class:`~tilegen.passes.gpu.transposed_tiles.TransposedTiles`): in a kernel whose grid walks K/V tiles,
  every [Br, Bc] tile is held transposed, [Bc, Br]; S = Q Kᵀ becomes Sᵀ = K Qᵀ.
- fold-log2 (:class:`~tilegen.passes.gpu.fold_log2.Log2Scaled`): values that only feed ``exp`` kept multiplied by
  log2(e), so ``exp`` becomes ``tl.exp2``; such a value used elsewhere is converted back with ln 2.
- heavy-last (:class:`~tilegen.passes.gpu.heavy_last.HeavyLast`): a causal Q-tile grid axis numbered from the last
  tile down.
- fuse-accumulation (:class:`~tilegen.passes.gpu.fuse_accumulation.AccumulateInto`): ``T = a @ b … X = X + T`` emitted as
  ``X = tl.dot(a, b, X)`` at the add.
- mask-segments (:class:`~tilegen.passes.gpu.mask_segments.MaskSegments`): a masking tile loop emitted as up to three
  loops, the tiles the mask leaves whole without ``tl.where``.

Besides:

- Head dims that are not powers of two are padded to one (``tl.arange`` needs it), the extra columns
  loaded as zero and never stored; offsets are computed in 64 bits when a tensor has more than 2³¹ − 1
  elements; row and column masks are emitted only where the spec has tails.

Launch knobs (``num_warps``, ``num_stages``) and the tile sizes a GPU measurement preferred come from the
target file's ``[triton]`` section, chosen by the GPU list's select-row and recorded by its launch-knobs
(:mod:`tilegen.passes.gpu.rows`: :class:`~tilegen.passes.gpu.rows.LaunchKnobs` on each kernel, the row and
the sources in the program's attrs), never from the templates. The generated module
is a pure function of the spec and the target: the same inputs give a byte-identical file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sympy

from tilegen.backends.output import Generated, with_manifest
from tilegen.core.errors import ScheduleError, SpecError
from tilegen.core.ir import (
    Access,
    Bc,
    Br,
    Dqk,
    Dv,
    Elementwise,
    Fill,
    Kernel,
    Load,
    Loop,
    Mask,
    MatMul,
    ModOp,
    Program,
    RowReduce,
    Sk,
    Sq,
    Stmt,
    Store,
    Tensor,
    grid_loops,
    walk,
)
from tilegen.core.ir import BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL
from tilegen.passes.gpu.fold_log2 import Log2Scaled
from tilegen.passes.gpu.fuse_accumulation import AccumulateInto
from tilegen.passes.gpu.heavy_last import HeavyLast
from tilegen.passes.gpu.mask_segments import MaskSegments
from tilegen.passes.gpu.transposed_tiles import TransposedTiles
from tilegen.passes.gpu.rows import (  # noqa: F401  (re-exported: the [triton] section's parser and rows)
    CALLER,
    Knobs,
    LaunchKnobs,
    launch_knobs,
    program_kind,
    recorded_row,
    recorded_skipped,
    schedule_choice,
    ScheduleRow,
    Skipped,
    TritonConfig,
    forward_knobs,
    group_knobs,
    padded,
    triton_config,
)
from tilegen.core.ir import i as I_TILE, j as J_TILE
from tilegen.backends.compiler import Backend, compile_program
from tilegen.backends.hooks import hooks
from tilegen.passes import gpu as gpu_passes
from tilegen.passes import pipeline
from tilegen.passes.driver import Options, PassLog
from tilegen.core.exprs import next_pow2
from tilegen.core.resources import data_dir, runtime_text, section
from tilegen.core.hoststeps import carried_source
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import Target, load_target, target_key
from tilegen.models.cost import predict

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): x = (x * LOG2E) * LN2
DEFAULT_TARGET = "h200"
RUNTIME_SHAPES = ("B", "Hq", "Hkv", "Sq", "Sk")  # kernel arguments (any value); the rest are constexpr
TL_DTYPES = {"fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32"}
TORCH_DTYPES = {"fp16": "torch.float16", "bf16": "torch.bfloat16", "fp32": "torch.float32", "int32": "torch.int32"}
INT32_MAX = 2**31 - 1


# --- the schedule, as the program records it --------------------------------------------------------


def _pow2(n: int) -> int:
    """The padded extent of a tile dim: a power of two, at least 16 (``tl.arange``, ``tl.dot``)."""
    return padded(n)


@dataclass(frozen=True)
class Scheduled:
    """One program as the Triton backend emits it: the compiled program and its pass log (whose
    ``schedule`` holds the tile search's table and the cost model's prediction). The rest is read from
    the program, where the GPU list recorded it (:mod:`tilegen.passes.gpu.rows`): the schedule row used,
    the rows skipped and why, each kernel's launch knobs, where the tiles and knobs come from."""

    program: Program
    log: PassLog
    target: Target

    @property
    def kind(self) -> str:
        return program_kind(self.program)

    @property
    def knobs(self) -> dict[str, LaunchKnobs]:
        return launch_knobs(self.program)

    @property
    def row(self) -> ScheduleRow | None:
        return recorded_row(self.program, self.target)

    @property
    def skipped(self) -> tuple[Skipped, ...]:
        return recorded_skipped(self.program, self.target)

    @property
    def given(self) -> bool:
        """Whether the caller forced the tile sizes."""
        return self.program.attr("tiles_source") == CALLER

    @property
    def split_source(self) -> str:
        """Where group_split and heavy_first (backward) or heavy_first (forward) come from."""
        return self.program.attr("heavy_first_source" if self.kind == "fwd" else "group_split_source")

    def tiles_source(self) -> str:
        """Where the tile sizes come from: the caller, a ``[[triton.schedule]]`` row (with its source), or
        the cost model (the fastest predicted feasible candidate of the pass pipeline)."""
        return self.program.attr("tiles_source")

    def choice(self) -> dict:
        """:func:`schedule_choice` of the program."""
        return schedule_choice(self.program)


def _check_tiles(tile_sizes) -> None:
    """Forced tile sizes a Triton module can take: powers of two from 16 (``tl.arange`` takes a
    power-of-two length, ``tl.dot`` operands at least 16 rows).

    Raises:
        SpecError: a tile size that is not one (names both sizes).
    """
    per_program = isinstance(tile_sizes, dict) and tile_sizes and set(tile_sizes) <= {"fwd", "bwd"}
    for pair in tile_sizes.values() if per_program else (tile_sizes,):
        sizes = list(pipeline.parse_tile_sizes(pair).values())
        if any(v < 16 or v & (v - 1) for v in sizes):
            raise SpecError("tile_sizes", "x".join(map(str, sizes)), "powers of two from 16 on a GPU target (Triton's tl.arange and tl.dot)")


def check_request(target: Target, tile_sizes=None, dq_strategy: str | None = None, dq_tiles: str | None = None) -> None:
    """Refuse what no GPU schedule takes, before anything compiles.

    Raises:
        SpecError: forced tile sizes that are not powers of two from 16, an unknown dq strategy or
            dq_tiles; TargetError: a malformed ``[triton]`` section of ``target``."""
    if tile_sizes is not None:
        _check_tiles(tile_sizes)
    triton_config(target)
    if dq_strategy is not None and dq_strategy not in pipeline.DQ_STRATEGIES:
        raise SpecError("dq_strategy", dq_strategy, "one of " + ", ".join(pipeline.DQ_STRATEGIES))
    if dq_tiles is not None and dq_tiles not in pipeline.DQ_TILES:
        raise SpecError("dq_tiles", dq_tiles, "one of " + ", ".join(pipeline.DQ_TILES))


def emitted(spec: AttentionSpec, which: str, target: Target, dq_strategy: str | None = None, tile_sizes=None, knobs=None,
            dq_tiles: str | None = None, log: PassLog | None = None) -> Scheduled:
    """The ``which`` (``fwd`` or ``bwd``) program of ``spec`` as the module for the GPU ``target`` runs it:
    the GPU list with the target's measured rows (select-row, :mod:`tilegen.passes.gpu.rows`);
    arguments as :func:`schedule`, ``tile_sizes`` one pair."""
    log = log if log is not None else PassLog()
    launch = tuple(sorted((str(phase), int(value[0]), int(value[1])) for phase, value in (knobs or {}).items()))
    if which == "fwd":
        options = Options(tile_sizes=tile_sizes, schedule_rows=True, launch=launch)
    else:
        options = Options(dq_strategy=dq_strategy, tile_sizes=tile_sizes, schedule_rows=True, launch=launch, dq_tiles=dq_tiles)
    return Scheduled(compile_program(spec, which, BACKEND, target, options, log), log, target)


def schedule(
    spec: AttentionSpec, target: str | Target = DEFAULT_TARGET, dq_strategy: str | None = None, tile_sizes=None, knobs=None,
    dq_tiles: str | None = None,
) -> tuple[Scheduled, Scheduled]:
    """The forward and fused backward programs of ``spec`` scheduled for ``target``: the GPU list with the
    target's measured rows (:mod:`tilegen.passes.gpu.rows`, which says how a row is chosen, clamped,
    checked and skipped). ``tile_sizes`` (Br, Bc) forces both programs' sizes instead, or ``{"fwd":
    (Br, Bc), "bwd": (Br, Bc)}`` each one's (still checked).

    The backward's dQ strategy: ``dq_strategy`` (then only rows of that program apply), else the
    program of the first backward row (``bwd-atomic`` or ``bwd-separate``, file order) that applies
    and is used, else the target's ``triton.dq_strategy``. A ``bwd-separate`` row's ``dq_tiles``
    (``dq_tiles`` overrides it; ``"transposed"`` needs the separate strategy) runs the dq kernel on
    transposed tiles (:func:`tilegen.passes.gpu.transpose_dq_tiles.transpose_dq_tiles`); a row whose
    transposition does not apply (a block table of the mask) is skipped like one that does not fit.
    ``knobs`` {phase: (num_warps, num_stages)} overrides the target's launch knobs (for measuring
    alternatives).

    Raises:
        SpecError: a target that is not a GPU's, an unknown dq strategy or dq_tiles, or forced tile sizes
            that are not powers of two from 16; TargetError: a malformed ``[triton]`` section;
            ScheduleError: forced tile sizes that do not fit, or no tile sizes fit at all.
    """
    tgt = load_target(target)
    if tgt.kind != "gpu":
        raise SpecError("target", tgt.name, "a GPU target (kind = 'gpu'), e.g. 'h200'")
    check_request(tgt, tile_sizes, dq_strategy, dq_tiles)
    per_program = isinstance(tile_sizes, dict)
    fwd, bwd = (
        emitted(spec, which, tgt, dq_strategy, tile_sizes.get(which) if per_program else tile_sizes, knobs, dq_tiles)
        for which in ("fwd", "bwd")
    )
    return fwd, bwd


# --- expressions -------------------------------------------------------------------------------------


def _nonneg(e: sympy.Expr) -> bool:
    """Whether sympy proves ``e`` >= 0, reading every positive integer symbol s as s' + 1 with s' >= 0
    (sympy alone does not conclude Br - 1 >= 0)."""
    e = sympy.sympify(e)
    shift = {s: sympy.Symbol(s.name + "_", integer=True, nonnegative=True) + 1 for s in e.free_symbols if s.is_positive and s.is_integer}
    return bool(sympy.expand(e.subs(shift)).is_nonnegative)


class ExprPrinter:
    """Integer code for the IR's sympy index expressions.

    ``dialect="triton"``: inside a kernel, where ``//`` truncates towards zero; a floor of a numerator that
    sympy cannot prove non-negative goes through the module's ``_floor_div`` helper. ``dialect="python"``:
    host code, where ``//`` floors.
    """

    def __init__(self, dialect: str):
        assert dialect in ("triton", "python")
        self.dialect = dialect

    def __call__(self, e) -> str:
        return self.p(sympy.sympify(e))

    def _floordiv(self, num: sympy.Expr, den: sympy.Expr) -> str:
        if den == 1:
            return self.p(num)
        if self.dialect == "python" or _nonneg(num):
            return f"(({self.p(num)}) // ({self.p(den)}))"
        return f"_floor_div({self.p(num)}, {self.p(den)})"

    def _ceildiv(self, num: sympy.Expr, den: sympy.Expr) -> str:
        if den == 1:
            return self.p(num)
        if self.dialect == "triton" and _nonneg(num):
            return f"(({self.p(sympy.expand(num + den - 1))}) // ({self.p(den)}))"
        return f"(-{self._floordiv(sympy.expand(-num), den)})"

    def _split(self, arg: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
        num, den = sympy.fraction(sympy.together(arg))
        if not den.is_positive:
            raise ScheduleError(f"cannot print {arg}: the divisor {den} is not known to be positive")
        return sympy.expand(num), den

    def p(self, e: sympy.Expr) -> str:
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, sympy.Float):
            return repr(float(e))
        if isinstance(e, sympy.Symbol):
            return e.name
        if isinstance(e, sympy.floor):
            return self._floordiv(*self._split(e.args[0]))
        if isinstance(e, sympy.ceiling):
            return self._ceildiv(*self._split(e.args[0]))
        if isinstance(e, (sympy.Min, sympy.Max)):
            fn = {("triton", sympy.Min): "tl.minimum", ("triton", sympy.Max): "tl.maximum", ("python", sympy.Min): "min", ("python", sympy.Max): "max"}[
                (self.dialect, type(e))
            ]
            args = sorted(e.args, key=sympy.default_sort_key)
            text = self.p(args[0])
            for a in args[1:]:
                text = f"{fn}({text}, {self.p(a)})"
            return text
        if isinstance(e, sympy.Piecewise):
            (val, cond), rest = e.args[0], e.args[1:]
            if cond is sympy.true:
                return self.p(val)
            other = self.p(sympy.Piecewise(*rest)) if rest else "0"
            if self.dialect == "python":
                return f"({self.p(val)} if {self.p(cond)} else {other})"
            return f"tl.where({self.p(cond)}, {self.p(val)}, {other})"
        if isinstance(e, (sympy.And, sympy.Or)):
            word = {("triton", sympy.And): " & ", ("triton", sympy.Or): " | ", ("python", sympy.And): " and ", ("python", sympy.Or): " or "}[(self.dialect, type(e))]
            return "(" + word.join(self.p(a) for a in sorted(e.args, key=sympy.default_sort_key)) + ")"
        if isinstance(e, sympy.core.relational.Relational):
            return f"({self.p(e.lhs)}) {e.rel_op} ({self.p(e.rhs)})"
        if isinstance(e, sympy.Add):
            terms = e.as_ordered_terms()
            text = self.p(terms[0])
            for t in terms[1:]:
                coeff, rest = t.as_coeff_Mul()
                if coeff < 0:
                    text += f" - {self.p(-t)}"
                else:
                    text += f" + {self.p(t)}"
            return text
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            factors = sympy.Mul.make_args(rest)
            if not isinstance(coeff, sympy.Integer) or any(isinstance(f, sympy.Pow) and f.exp < 0 for f in factors):
                raise ScheduleError(f"cannot print {e} as integer code: a division outside floor/ceiling")
            texts = [self._factor(f) for f in factors]
            if coeff == -1:
                return "-" + "*".join(texts)
            if coeff == 1:
                return "*".join(texts)
            return "*".join([str(int(coeff))] + texts)
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return "*".join([self._factor(e.base)] * int(e.exp))
        raise ScheduleError(f"cannot print {e!r} ({type(e).__name__}) as integer code")

    def _factor(self, f: sympy.Expr) -> str:
        text = self.p(f)
        return text if isinstance(f, (sympy.Symbol, sympy.Integer)) else f"({text})"


TRITON_EXPR = ExprPrinter("triton")
PYTHON_EXPR = ExprPrinter("python")


_BITS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}  # tilegen.core.mods' integer bit operations


class ModPrinter:
    """Triton code for an expression of the mod language (:mod:`tilegen.mods`) inside a kernel.

    ``names`` maps the language's symbols (``score``, ``b``, ``h``, ``q_idx``, ``kv_idx``) to code; the
    sizes ``B, Hq, Hkv, Sq, Sk`` are kernel arguments of the same names. A parameter read ``p[i, ...]``
    becomes ``tl.load(p_ptr + i' * p_s0 + ...)`` with each index clamped into [0, extent − 1], so every
    address is inside the array (pairs whose index leaves it are masked by the caller). Integer floor
    division goes through ``_floor_div`` unless sympy proves the numerator non-negative (Triton's ``//``
    truncates towards zero), ``Mod`` through the same floor; ``tanh`` through the module's ``_tanh``.

    Raises:
        ScheduleError: a construct with no Triton spelling (named in the message).
    """

    FUNCS = {sympy.exp: "tl.exp", sympy.log: "tl.log", sympy.tanh: "_tanh", sympy.Abs: "tl.abs", sympy.erf: "tl.math.erf"}

    def __init__(self, names: dict, params: dict):
        self.names = names
        self.params = params  # name -> ParamDecl

    def __call__(self, e) -> str:
        return self.p(sympy.sympify(e))

    def load(self, e: sympy.Indexed) -> str:
        name = str(e.base.label)
        decl = self.params[name]
        terms = []
        for d, (idx, size) in enumerate(zip(e.indices, decl.shape)):
            idx, size = sympy.sympify(idx), sympy.sympify(size)
            if not idx.free_symbols and size.is_Integer:
                text = str(min(max(int(idx), 0), int(size) - 1))
            else:
                text = f"tl.minimum(tl.maximum({self.p(idx)}, 0), {TRITON_EXPR(size - 1)})"
            terms.append(f"({text}) * {name}_s{d}")
        return f"tl.load({name}_ptr + {' + '.join(terms)})"

    def _int_floor(self, arg: sympy.Expr) -> str:
        num, den = sympy.fraction(sympy.together(arg))
        num = sympy.expand(num)
        if den == 1:
            return self.p(num)
        if not (den.is_positive and num.is_integer and den.is_integer):
            return f"tl.floor({self.p(arg)})"
        if _nonneg(num):
            return f"(({self.p(num)}) // ({self.p(den)}))"
        return f"_floor_div({self.p(num)}, {self.p(den)})"

    def p(self, e) -> str:
        if e is sympy.true:
            return "True"
        if e is sympy.false:
            return "False"
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, (sympy.Rational, sympy.Float)) or e.is_Number:
            return repr(float(e))
        if isinstance(e, sympy.Expr) and e.is_number and e.is_real:  # a constant such as sqrt(pi) or log(2) (a derivative's)
            return repr(float(e))
        if isinstance(e, sympy.Symbol):
            return self.names.get(e, e.name)
        if isinstance(e, sympy.Indexed):
            return self.load(e)
        if isinstance(e, sympy.floor):
            return self._int_floor(e.args[0])
        if isinstance(e, sympy.Mod):
            a, m = e.args
            if a.is_integer and m.is_integer and m.is_positive:
                return f"(({self.p(a)}) - ({self.p(m)}) * {self._int_floor(a / m)})"
            return f"(({self.p(a)}) - ({self.p(m)}) * tl.floor(({self.p(a)}) / ({self.p(m)})))"
        if type(e).__name__ in _BITS and len(e.args) == 2:
            return f"(({self.p(e.args[0])}) {_BITS[type(e).__name__]} ({self.p(e.args[1])}))"
        for fn, text in self.FUNCS.items():
            if isinstance(e, fn):
                return f"{text}({self._real(e.args[0]) if fn is not sympy.Abs else self.p(e.args[0])})"
        if isinstance(e, (sympy.Min, sympy.Max)):
            fn = "tl.minimum" if isinstance(e, sympy.Min) else "tl.maximum"
            args = sorted(e.args, key=sympy.default_sort_key)
            text = self.p(args[0])
            for a in args[1:]:
                text = f"{fn}({text}, {self.p(a)})"
            return text
        if isinstance(e, sympy.Piecewise):
            (val, cond), rest = e.args[0], e.args[1:]
            if cond is sympy.true or not rest:
                return self.p(val)
            return f"tl.where({self.p(cond)}, {self.p(val)}, {self.p(sympy.Piecewise(*rest))})"
        if isinstance(e, sympy.Not):
            return f"~({self.p(e.args[0])})"
        if isinstance(e, (sympy.And, sympy.Or)):
            word = " & " if isinstance(e, sympy.And) else " | "
            return "(" + word.join(f"({self.p(a)})" for a in sorted(e.args, key=sympy.default_sort_key)) + ")"
        if isinstance(e, sympy.core.relational.Relational):
            return f"(({self.p(e.lhs)}) {e.rel_op} ({self.p(e.rhs)}))"
        if isinstance(e, sympy.Add):
            terms = e.as_ordered_terms()
            text = self.p(terms[0])
            for t in terms[1:]:
                coeff, _ = t.as_coeff_Mul()
                text += f" - {self._factor(-t)}" if coeff < 0 else f" + {self._factor(t)}"
            return f"({text})"
        if isinstance(e, sympy.Mul):
            num, den = [], []
            for f in sympy.Mul.make_args(e):
                if isinstance(f, sympy.Pow) and f.exp.is_Number and f.exp < 0:
                    den.append(f.base ** (-f.exp))
                elif isinstance(f, sympy.Rational) and not isinstance(f, sympy.Integer) and f.p == 1:
                    den.append(sympy.Integer(f.q))
                else:
                    num.append(f)
            text = " * ".join(self._factor(f) for f in num) if num else "1.0"
            for d in den:
                text = f"{text} / {self._factor(d) if not d.is_Integer else repr(float(d))}"
            return f"({text})"
        if isinstance(e, sympy.Pow):
            base, ex = e.args
            if ex.is_Integer and ex > 0:
                return "(" + " * ".join([self._factor(base)] * int(ex)) + ")"
            if ex == sympy.Rational(1, 2):
                return f"tl.sqrt({self._real(base)})"
            if ex.is_Number and ex < 0:
                return f"(1.0 / {self._factor(base ** (-ex))})"
            if base.is_Number and base > 0:  # c ** x = exp(x · ln c), ln c folded
                return f"tl.exp({self._real(ex)} * {math.log(float(base))!r})"
            return f"tl.exp({self._real(ex)} * tl.log({self._real(base)}))"
        raise ScheduleError(f"mod expression {e} ({type(e).__name__}) has no Triton spelling")

    def _real(self, e) -> str:
        """``e`` as floating-point code: an integer expression is converted (Triton's exp, log, sqrt
        take floats only), a number printed as a float literal."""
        e = sympy.sympify(e)
        if e.is_Number:
            return repr(float(e))
        if e.is_integer:
            return f"tl.cast({self.p(e)}, tl.float32)"  # a Python int in the interpreter has no .to
        return self.p(e)

    def _factor(self, f) -> str:
        text = self.p(f)
        return text if isinstance(f, (sympy.Symbol, sympy.Integer)) else f"({text})"


# --- block sparsity ----------------------------------------------------------------------------------

LIST_NAMES = {"kv_tile": lambda bm: (f"{bm}_kvn", f"{bm}_kvi"), "q_tile": lambda bm: (f"{bm}_qn", f"{bm}_qi")}


def block_list_tensors(program: Program) -> tuple[Tensor, ...]:
    """The per-row tile lists the module derives from each block-class table ``BM`` [Bm, Hm, nQ, nK]
    of ``program`` (the IR's kind ``tiles``; Flex's kv_num_blocks / kv_indices idea): int32
    ``BM_kvn`` [Bm, Hm, nQ] (how many K/V tiles of each Q tile are non-empty), ``BM_kvi`` [Bm, Hm, nQ,
    nK] (their indices, ascending, the rest padding), and ``BM_qn`` [Bm, Hm, nK], ``BM_qi`` [Bm, Hm,
    nK, nQ] the same for the Q tiles of each K/V tile (the backward's inner loop). A tile loop with
    ``blocks`` walks these lists instead of its [start, stop) (the table's empty tiles include every
    tile outside the window's range, so the two visit the same non-empty tiles, in the same order)."""
    out: list[Tensor] = []
    for t in program.tensors:
        if t.kind != "tiles":
            continue
        bm, hm, nq, nk = t.shape
        kvn, kvi = LIST_NAMES["kv_tile"](t.name)
        qn, qi = LIST_NAMES["q_tile"](t.name)
        out += [
            Tensor(kvn, (bm, hm, nq), "int32", "tiles"),
            Tensor(kvi, (bm, hm, nq, nk), "int32", "tiles"),
            Tensor(qn, (bm, hm, nk), "int32", "tiles"),
            Tensor(qi, (bm, hm, nk, nq), "int32", "tiles"),
        ]
    return tuple(out)


# --- kernel lowering ---------------------------------------------------------------------------------


@dataclass
class Line:
    """One line of a kernel body for the templates: ``kind`` picks the macro, ``f`` holds its fields."""

    indent: int
    kind: str
    f: dict = field(default_factory=dict)


class KernelLowering:
    """Lowers one kernel of a bound program into a template context (see the module docstring)."""

    def __init__(self, program: Program, kernel: Kernel, knobs: LaunchKnobs | None = None):
        self.program = program
        self.kernel = kernel
        self.knobs = knobs if knobs is not None else kernel.get(LaunchKnobs)
        self.env = {str(k): v for k, v in program.env}
        self.bufs = {b.name: b for b in kernel.buffers}
        held = kernel.get(TransposedTiles)
        self.transposed = frozenset(held.buffers) if held is not None else frozenset()
        self.log2 = any(self._scaled(s) for s, _ in walk(kernel.body))
        self.wide = any(self._numel(t) > INT32_MAX for t in program.tensors)
        used = self._tensors_used()
        self.tensors = [t for t in program.tensors if t.name in used] + [t for t in block_list_tensors(program) if t.name in used]
        self.lines: list[Line] = []
        self.param_names = {t.name for t in program.tensors}
        self.classes: list[str] = []  # the block-class variable of each enclosing sparse tile loop

    # helpers ------------------------------------------------------------------------------------------
    def _numel(self, t) -> int:
        return math.prod(self.program.evaluate(d) for d in t.shape)

    def _tensors_used(self) -> set[str]:
        out = set()
        for s, _ in walk(self.kernel.body):
            if isinstance(s, (Load, Store)) and s.rows:
                out.add(s.rows)
            if isinstance(s, Load):
                out.add(s.src.tensor)
            if isinstance(s, Store):
                out.add(s.dst.tensor)
            if isinstance(s, ModOp):
                out.update(s.tensors)
            if isinstance(s, Loop) and s.blocks:
                out.add(s.blocks)
                out.update(LIST_NAMES[s.role](s.blocks))
        return out

    def value(self, e) -> int:
        return self.program.evaluate(e)

    def width(self, dim) -> str:
        """The constexpr that sizes a tile dim (head dims padded to a power of two)."""
        dim = sympy.sympify(dim)
        if dim == Dqk:
            return "Dqk_p"
        if dim == Dv:
            return "Dv_p"
        if dim in (Br, Bc):
            return dim.name
        if not dim.free_symbols - {Br, Bc, Sq, Sk}:  # a vector of mod data (a gradient window, a class)
            return str(next_pow2(self.value(dim), 1))
        raise ScheduleError(f"kernel {self.kernel.name}: tile extent {dim} is not Br, Bc, Dqk or Dv")

    def padded(self, dim) -> bool:
        dim = sympy.sympify(dim)
        if dim in (Dqk, Dv):
            return _pow2(self.value(dim)) != self.value(dim)
        if dim in (Br, Bc):
            return False
        return next_pow2(self.value(dim), 1) != self.value(dim)

    def shape(self, name: str) -> list[str]:
        buf = self.bufs[name]
        dims = [self.width(d) for d in buf.shape]
        return dims[::-1] if name in self.transposed else dims

    def ref(self, arg, dst: str, s: Stmt | None = None, raw: bool = False) -> str:
        """An operand of the elementwise op ``s`` writing ``dst``: a float, or a buffer broadcast to dst's
        shape, converted back from the log2 domain when it is scaled but ``dst`` is not."""
        dst_scaled = self._scaled(s)
        if not isinstance(arg, str):
            value = float(arg) * (LOG2E if dst_scaled else 1.0)
            return repr(value) if math.isfinite(value) else f'float("{value}")'
        text = arg
        src_scaled = self._arg_scaled(s, arg)
        if src_scaled and not dst_scaled and not raw:
            text = f"({arg} * {LN2!r})"
        src_nd, dst_nd = len(self.bufs[arg].shape), len(self.bufs[dst].shape)
        if src_nd == 1 and dst_nd == 2:
            text += "[None, :]" if dst in self.transposed else "[:, None]"
        elif src_nd == 2 and dst_nd == 2 and (arg in self.transposed) != (dst in self.transposed):
            text = f"tl.trans({text})"
        return text

    # pointers -----------------------------------------------------------------------------------------
    def tile(self, access: Access, transposed: bool, rows: str = "") -> dict:
        """Pointer expression and mask of an access: leading point indices, then the tile's dims.
        ``rows`` (a Load's/Store's row guard): the int32 row-id tensor over the first tiled dim; the
        mask also leaves out the rows whose id is negative (ids past the extent read as −1)."""
        tensor = self.program.tensor(access.tensor)
        ntile = len(access.tile)
        npoint = len(access.index) - ntile
        terms = []
        for d, idx in enumerate(access.index[:npoint]):
            if sympy.sympify(idx) == 0:
                continue
            text = TRITON_EXPR(idx)
            if self.wide:
                text = f"({text}).to(tl.int64)"
            terms.append(f"{text} * {tensor.name}_s{d}")
        masks = []
        vecs = []
        for k, (start, size) in enumerate(zip(access.index[npoint:], access.tile)):
            d = npoint + k
            width = self.width(size)
            start_text = TRITON_EXPR(start)
            vec = f"tl.arange(0, {width})" if sympy.sympify(start) == 0 else f"({start_text} + tl.arange(0, {width}))"
            extent = tensor.shape[d]
            ext_val = self.value(extent)
            need = self.padded(size) or ext_val % self.value(size) != 0 or self.value(size) > ext_val
            vecs.append((vec, need, TRITON_EXPR(extent), d))
        nd = len(vecs)
        for k, (vec, need, extent, d) in enumerate(vecs):
            if nd == 2:
                axis = k if not transposed else 1 - k
                bvec = f"{vec}[:, None]" if axis == 0 else f"{vec}[None, :]"
            else:
                bvec = vec
            terms.append(f"{bvec} * {tensor.name}_s{d}")
            if need:
                masks.append(f"({bvec} < {extent})")
            if rows and k == 0:
                bound = f", mask={bvec} < {extent}, other=-1" if need else ""
                masks.append(f"(tl.load({rows}_ptr + {bvec} * {rows}_s0{bound}) >= 0)")
        ptr = f"{tensor.name}_ptr + " + " + ".join(terms)
        return {"ptr": ptr, "mask": " & ".join(masks) if masks else None, "col_pad": any(self.padded(s) for s in access.tile)}

    # statements ---------------------------------------------------------------------------------------
    def emit(self, body, indent: int, unmasked: bool = False) -> None:
        pending: dict[str, MatMul] = {}  # products emitted at their add (AccumulateInto), by name
        for s in body:
            fused = s.get(AccumulateInto)
            if fused is not None:
                pending[s.dst] = s
                continue
            if isinstance(s, Elementwise) and s.op == "add" and any(a in pending for a in s.args):
                mm = pending.pop(next(a for a in s.args if a in pending))
                self.matmul(dataclasses.replace(mm, dst=s.dst, accumulate=True, ann=()), indent, unmasked)
                continue
            if isinstance(s, Loop):
                self.loop(s, indent)
            else:
                getattr(self, type(s).__name__.lower())(s, indent, unmasked)

    def loop(self, loop: Loop, indent: int) -> None:
        if loop.kind == "parallel":
            raise ScheduleError(f"kernel {self.kernel.name}: parallel loop {loop.var} inside a serial one")
        if loop.blocks:
            self.sparse_loop(loop, indent)
            return
        note = loop.note
        split = loop.get(MaskSegments)
        if split is not None:
            lo, hi = split.whole(loop.start, loop.stop)
            segments = [(loop.start, lo, False, "the mask cuts these tiles"), (lo, hi, True, "tiles the mask leaves whole"), (hi, loop.stop, False, "the mask cuts these tiles")]
            for start, stop, whole, why in segments:
                if sympy.sympify(stop) == sympy.sympify(start):
                    continue
                self.lines.append(Line(indent, "for", {"var": str(loop.var), "start": TRITON_EXPR(start), "stop": TRITON_EXPR(stop), "note": f"{note}: {why}"}))
                self.emit(loop.body, indent + 1, unmasked=whole)
            return
        self.lines.append(Line(indent, "for", {"var": str(loop.var), "start": TRITON_EXPR(loop.start), "stop": TRITON_EXPR(loop.stop), "note": note}))
        self.emit(loop.body, indent + 1)

    def _block_point(self, name: str, *index: str) -> str:
        """``name_ptr + ...``: the element of a block table / list at (Bm, Hm, ...) index ``index``."""
        terms = [f"{x} * {name}_s{d}" for d, x in enumerate(index) if x != "0"]
        return f"{name}_ptr + " + " + ".join(terms)

    def _block_head(self, blocks: str) -> tuple[str, str]:
        shape = self.program.tensor(blocks).shape
        return ("b" if sympy.sympify(shape[0]) != 1 else "0", "hq" if sympy.sympify(shape[1]) != 1 else "0")

    def sparse_loop(self, loop: Loop, indent: int) -> None:
        """A tile loop with ``blocks``: walk the ascending list of the non-empty tiles of the outer tile
        (:func:`block_list_tensors`), reading each visited tile's class for the mask's skip."""
        if loop.role not in LIST_NAMES:
            raise ScheduleError(f"kernel {self.kernel.name}: sparse loop {loop.var} walks {loop.role!r} tiles; accepted: q_tile, kv_tile")
        count, items = LIST_NAMES[loop.role](loop.blocks)
        var = str(loop.var)
        outer = str(J_TILE if loop.var == I_TILE else I_TILE)
        bi, hi = self._block_head(loop.blocks)
        n, t, cls = f"n_{var}", f"t_{var}", f"cls_{var}"
        self.lines.append(Line(indent, "assign", {"dst": n, "value": f"tl.load({self._block_point(count, bi, hi, outer)})"}))
        self.lines.append(Line(indent, "for", {"var": t, "start": "0", "stop": n, "note": f"{loop.note}: the non-empty ones, from {items}"}))
        self.lines.append(Line(indent + 1, "assign", {"dst": var, "value": f"tl.load({self._block_point(items, bi, hi, outer, t)})"}))
        self.lines.append(Line(indent + 1, "assign", {"dst": cls, "value": f"tl.load({self._block_point(loop.blocks, bi, hi, str(I_TILE), str(J_TILE))})"}))
        self.classes.append(cls)
        self.emit(loop.body, indent + 1)
        self.classes.pop()

    def _mod_names(self, row0, col0, shape, transposed: bool, indent: int, score: str | None = None, flat: bool = False) -> dict:
        """Assign the tile's query rows and key columns (``q_idx``, ``kv_idx``: broadcast to the tile's
        orientation; ``q_idx1``, ``kv_idx1``: 1-d) and map the mod language's symbols to code."""
        from tilegen.core import mods as M

        rows = f"({TRITON_EXPR(row0)} + tl.arange(0, {self.width(shape[0])}))"
        cols = f"({TRITON_EXPR(col0)} + tl.arange(0, {self.width(shape[1])}))"
        self.lines.append(Line(indent, "assign", {"dst": "q_idx", "value": rows + ("[None, :]" if transposed else "[:, None]")}))
        self.lines.append(Line(indent, "assign", {"dst": "kv_idx", "value": cols + ("[:, None]" if transposed else "[None, :]")}))
        if flat:
            self.lines.append(Line(indent, "assign", {"dst": "q_idx1", "value": rows}))
            self.lines.append(Line(indent, "assign", {"dst": "kv_idx1", "value": cols}))
        names = {M.B_IDX: "b", M.H_IDX: "hq", M.Q_IDX: "q_idx", M.KV_IDX: "kv_idx"}
        if score is not None:
            names[M.SCORE] = score
        return names

    def _printer(self, names: dict) -> "ModPrinter":
        return ModPrinter(names, {p.name: p for p in self.program.mods.params})

    def _mod_src(self, name: str, s: Stmt) -> str:
        """A buffer the mod op ``s`` reads, in natural units (converted back when it is kept scaled by log2 e)."""
        return f"({name} * {LN2!r})" if self._arg_scaled(s, name) else name

    def _window_conds(self, r: str, c: str, shape, always_bounds: bool = False) -> list[str]:
        """DESIGN §3's visibility of key c to query r: extents (where the spec has tails, or always) and
        the window."""
        m = self.program.mask
        off = TRITON_EXPR(m.offset)
        off_text = "" if off == "0" else f" + {off}" if not off.startswith("-") else f" - {off[1:]}"
        conds = []
        if always_bounds or self.value(Sq) % self.value(shape[0]) != 0:
            conds.append(f"({r} < Sq)")
        if always_bounds or self.value(Sk) % self.value(shape[1]) != 0:
            conds.append(f"({c} < Sk)")
        if m.left >= 0:
            conds.append(f"({c} >= {r}{off_text}{f' - {m.left}' if m.left else ''})")
        if m.right >= 0:
            conds.append(f"({c} <= {r}{off_text}{f' + {m.right}' if m.right else ''})")
        return conds

    def modop(self, s: ModOp, indent: int, unmasked: bool) -> None:
        from tilegen.core import mods as M

        mods = self.program.mods
        if s.op == "classify":
            names = self._mod_names(s.row0, s.col0, (Br, Bc), False, indent)
            conds = self._window_conds("q_idx", "kv_idx", (Br, Bc), always_bounds=True)
            if mods.mask is not None:
                conds.append(f"({self._printer(names)(mods.mask)})")
            self.lines.append(Line(indent, "assign", {"dst": "n_vis", "value": f"tl.sum(({' & '.join(conds)}).to(tl.int32))"}))
            self.lines.append(Line(indent, "assign", {"dst": s.dst, "value": f"tl.where(n_vis == 0, {float(BLOCK_EMPTY)!r}, tl.where(n_vis == Br * Bc, {float(BLOCK_FULL)!r}, {float(BLOCK_PARTIAL)!r}))"}))
            return
        src = s.args[0]
        shape = tuple(self.bufs[src].shape)
        t = src in self.transposed
        raw = self._mod_src(s.args[1], s) if len(s.args) > 1 else None
        if s.op == "score":
            names = self._mod_names(s.row0, s.col0, shape, t, indent, score=self._mod_src(src, s))
            pr = self._printer(names)
            value = pr(mods.score) if mods.score is not None else names[M.SCORE]
            if self._scaled(s):
                value = f"({value}) * {LOG2E!r}"
            self.lines.append(Line(indent, "assign", {"dst": s.dst, "value": value}))
            if mods.mask is not None:
                inner = indent
                if s.blocks and self.classes:
                    self.lines.append(Line(indent, "if", {"cond": f"{self.classes[-1]} != {float(BLOCK_FULL)!r}", "note": "a full tile needs no mask"}))
                    inner = indent + 1
                self.lines.append(Line(inner, "mask", {"dst": s.dst, "src": s.dst, "cond": pr(mods.mask)}))
            return
        names = self._mod_names(s.row0, s.col0, shape, t, indent, score=raw, flat=s.op == "pgrad")
        pr = self._printer(names)
        g = self._mod_src(src, s)
        if s.op == "dscore":
            self.lines.append(Line(indent, "assign", {"dst": s.dst, "value": f"tl.where({g} == 0, 0.0, {g} * ({pr(mods.dscore)}))"}))
            return
        if s.op != "pgrad":
            raise ScheduleError(f"kernel {self.kernel.name}: unknown mod op {s.op}")
        self._pgrad(s, indent, shape, t, names, pr, g)

    def _pgrad(self, s: ModOp, indent: int, shape, t: bool, names: dict, pr: "ModPrinter", g: str) -> None:
        """gp [W] = the tile's partial of gradient term ``s.term``: Σ of dS′·coef binned by the
        parameter index minus the window's origin (row-major over the window's widths)."""
        from tilegen.core import mods as M

        mods = self.program.mods
        term = mods.grads[s.term]
        decl = mods.param(term.param)
        widths, origins = M.grad_window(term, decl, shape[0], shape[1])
        wint = [self.value(w) for w in widths]
        total = math.prod(wint)
        wp = next_pow2(total, 1)
        corner = {M.Q_IDX: s.row0, M.KV_IDX: s.col0}
        flat = sympy.Integer(0)
        for e, o, w in zip(term.index, origins, wint):
            flat = flat * w + (sympy.sympify(e) - sympy.sympify(o).xreplace(corner))
        flat = sympy.expand(flat)
        dq, dk = M.Q_IDX in flat.free_symbols, M.KV_IDX in flat.free_symbols
        self.lines.append(Line(indent, "assign", {"dst": "contrib", "value": f"tl.where({g} == 0, 0.0, {g} * ({pr(term.coef)}))"}))
        slots = f"tl.arange(0, {wp})"
        row_axis, col_axis = (1, 0) if t else (0, 1)
        if not dq and not dk:
            self.lines.append(Line(indent, "assign", {"dst": s.dst, "value": f"tl.where({slots} == ({pr(flat)}), tl.sum(contrib), 0.0)"}))
        elif dq != dk:
            axis, sym, one = (col_axis, M.Q_IDX, "q_idx1") if dq else (row_axis, M.KV_IDX, "kv_idx1")
            pr1 = self._printer({**names, sym: one})
            self.lines.append(Line(indent, "assign", {"dst": "contrib1", "value": f"tl.sum(contrib, axis={axis})"}))
            self.lines.append(Line(indent, "assign", {"dst": s.dst, "value": f"tl.sum(tl.where(({pr1(flat)})[:, None] == {slots}[None, :], contrib1[:, None], 0.0), axis=0)"}))
        else:  # the bin reads both indices: a one-hot reduction, a chunk of CH bins at a time
            n = self.value(shape[0]) * self.value(shape[1])
            ch = max(1, min(wp, 8192 // next_pow2(n, 1)))
            chunk = f"(w0 + tl.arange(0, {ch}))"
            self.lines.append(Line(indent, "assign", {"dst": "bins", "value": pr(flat)}))
            self.lines.append(Line(indent, "fill", {"dst": s.dst, "shape": [str(wp)], "value": "0.0", "dtype": "tl.float32"}))
            self.lines.append(Line(indent, "for", {"var": "w0", "start": "0", "stop": f"{wp}, {ch}", "note": f"{ch} bins at a time"}))
            self.lines.append(Line(indent + 1, "assign", {"dst": "part", "value": f"tl.sum(tl.sum(tl.where(bins[:, :, None] == {chunk}[None, None, :], contrib[:, :, None], 0.0), axis=0), axis=0)"}))
            self.lines.append(Line(indent + 1, "assign", {"dst": s.dst, "value": f"{s.dst} + tl.sum(tl.where({slots}[None, :] == {chunk}[:, None], part[:, None], 0.0), axis=0)"}))

    def load(self, s: Load, indent: int, unmasked: bool) -> None:
        t = self.tile(s.src, s.dst in self.transposed, s.rows)
        other = None
        if t["mask"]:
            if s.rows:  # guarded rows load as 0 (and the extent's padding with them)
                other = repr(float(s.pad)) if s.pad is not None else "0.0"
            elif s.pad is not None:
                other = repr(float(s.pad))
            elif t["col_pad"]:
                other = "0.0"
        scale = repr(LOG2E) if self._scaled(s) else None
        self.lines.append(Line(indent, "load", {"dst": s.dst, "ptr": t["ptr"], "mask": t["mask"], "other": other, "scale": scale}))

    def store(self, s: Store, indent: int, unmasked: bool) -> None:
        t = self.tile(s.dst, s.src in self.transposed, s.rows)
        value = s.src
        if self._arg_scaled(s, s.src):
            value = f"({value} * {LN2!r})"
        self.lines.append(Line(indent, "atomic_add" if s.accumulate else "store", {"ptr": t["ptr"], "value": value, "mask": t["mask"]}))

    def fill(self, s: Fill, indent: int, unmasked: bool) -> None:
        value = float(s.value) * (LOG2E if self._scaled(s) else 1.0)
        text = repr(value) if math.isfinite(value) else f'float("{value}")'
        self.lines.append(Line(indent, "fill", {"dst": s.dst, "shape": self.shape(s.dst), "value": text, "dtype": TL_DTYPES[self.bufs[s.dst].dtype]}))

    def _factor(self, name: str, flip: bool) -> str:
        return f"tl.trans({name})" if flip else name

    def matmul(self, s: MatMul, indent: int, unmasked: bool) -> None:
        ta = (s.a in self.transposed) ^ s.trans_a
        tb = (s.b in self.transposed) ^ s.trans_b
        if s.dst in self.transposed:  # stored dst = (A B)ᵀ = Bᵀ Aᵀ
            first, second = self._factor(s.b, not tb), self._factor(s.a, not ta)
        else:
            first, second = self._factor(s.a, ta), self._factor(s.b, tb)
        alpha = s.alpha * (LOG2E if self._scaled(s) else 1.0)
        fp32 = self.bufs[s.a].dtype == "fp32" or self.bufs[s.b].dtype == "fp32"
        self.lines.append(
            Line(
                indent,
                "dot",
                {
                    "dst": s.dst,
                    "a": first,
                    "b": second,
                    "acc": s.dst if s.accumulate else None,
                    "alpha": None if alpha == 1.0 else repr(alpha),
                    "precision": '"ieee"' if fp32 else None,
                    "cast": None if self.bufs[s.dst].dtype == "fp32" else TL_DTYPES[self.bufs[s.dst].dtype],
                },
            )
        )

    def elementwise(self, s: Elementwise, indent: int, unmasked: bool) -> None:
        op = s.op
        if op == "exp" and not self._scaled(s) and self._arg_scaled(s, s.args[0]):
            op = "exp2"  # the argument is kept in log2 units: exp(x) = exp2(x · log2 e)
        args = [self.ref(a, s.dst, s, raw=op == "exp2") for a in s.args]
        dtype = self.bufs[s.dst].dtype
        names = [a for a in s.args if isinstance(a, str)]
        if self.bufs[s.dst].shape and names and all(not self.bufs[a].shape for a in names):
            # only 0-d operands (m = sinks[hq]): broadcast to dst's shape, so that a loop-carried
            # value keeps one shape (Triton requires it)
            zeros = f"tl.zeros([{', '.join(self.shape(s.dst))}], tl.float32)"
            args = [f"({text} + {zeros})" if isinstance(a, str) else text for a, text in zip(s.args, args)]
        cast = TL_DTYPES[dtype] if (op == "cast" or dtype != "fp32") else None
        if op == "cast" and dtype == "fp32" and all(not isinstance(a, str) or self.bufs[a].dtype == "fp32" for a in s.args):
            op, cast = "copy", None
        self.lines.append(Line(indent, "elementwise", {"dst": s.dst, "op": op, "args": args, "cast": cast}))

    @staticmethod
    def _scaled(s: Stmt | None) -> bool:
        """Whether ``s``'s result is kept multiplied by log2(e) (:class:`~tilegen.passes.gpu.fold_log2.Log2Scaled`)."""
        ann = s.get(Log2Scaled) if s is not None else None
        return ann is not None and ann.result

    @staticmethod
    def _arg_scaled(s: Stmt | None, name) -> bool:
        """Whether the buffer ``name`` that ``s`` reads arrives multiplied by log2(e)."""
        ann = s.get(Log2Scaled) if s is not None and isinstance(name, str) else None
        return ann is not None and name in ann.args

    def rowreduce(self, s: RowReduce, indent: int, unmasked: bool) -> None:
        axis = 0 if s.src in self.transposed else 1
        self.lines.append(Line(indent, "reduce", {"dst": s.dst, "op": s.op, "src": s.src, "axis": axis}))

    def mask(self, s: Mask, indent: int, unmasked: bool) -> None:
        shape = tuple(self.bufs[s.src].shape)
        if unmasked:
            if s.dst != s.src:
                self.lines.append(Line(indent, "elementwise", {"dst": s.dst, "op": "copy", "args": [s.src], "cast": None}))
            return
        t = s.src in self.transposed
        rows = f"({TRITON_EXPR(s.row0)} + tl.arange(0, {self.width(shape[0])}))"
        cols = f"({TRITON_EXPR(s.col0)} + tl.arange(0, {self.width(shape[1])}))"
        r = rows + ("[None, :]" if t else "[:, None]")
        c = cols + ("[:, None]" if t else "[None, :]")
        conds = self._window_conds(r, c, shape)
        if not conds:
            if s.dst != s.src:
                self.lines.append(Line(indent, "elementwise", {"dst": s.dst, "op": "copy", "args": [s.src], "cast": None}))
            return
        if self.classes:  # a sparse loop: the tile's class says whether the window and extents cut it
            if s.dst != s.src:
                self.lines.append(Line(indent, "elementwise", {"dst": s.dst, "op": "copy", "args": [s.src], "cast": None}))
            last = self.lines[-2:]
            if (
                s.dst == s.src
                and len(last) == 2
                and last[0].kind == "if"
                and last[0].f["cond"] == f"{self.classes[-1]} != {float(BLOCK_FULL)!r}"
                and last[1].kind == "mask"
                and last[1].f["dst"] == s.dst
            ):  # the mask mod's where just before: one where for both
                last[1].f["cond"] = f"{last[1].f['cond']} & {' & '.join(conds)}"
                return
            self.lines.append(Line(indent, "if", {"cond": f"{self.classes[-1]} != {float(BLOCK_FULL)!r}", "note": "a full tile needs no mask"}))
            self.lines.append(Line(indent + 1, "mask", {"dst": s.dst, "src": s.dst, "cond": " & ".join(conds)}))
            return
        self.lines.append(Line(indent, "mask", {"dst": s.dst, "src": s.src, "cond": " & ".join(conds)}))

    # the whole kernel ---------------------------------------------------------------------------------
    def lower(self) -> dict:
        grid = grid_loops(self.kernel)
        merged = []
        if len(grid) > 3:  # the outer axes share launch axis 2: pid = ((outer0 · n1) + outer1) ...
            if any(sympy.sympify(lp.start) != 0 for lp in grid[: len(grid) - 2]):
                raise ScheduleError(f"kernel {self.kernel.name}: {len(grid)} grid axes and an outer one does not start at 0")
            merged, grid = list(grid[: len(grid) - 2]), list(grid[len(grid) - 2 :])
        axes = []
        for axis, loop in enumerate(reversed(grid)):
            start = TRITON_EXPR(loop.start)
            pid = f"tl.program_id({axis})"
            if loop.get(HeavyLast) is not None:
                pid = f"({TRITON_EXPR(loop.stop - loop.start)} - 1 - {pid})"
            axes.append({"var": str(loop.var), "value": pid if start == "0" else f"{start} + {pid}", "size": PYTHON_EXPR(loop.stop - loop.start), "role": loop.role})
        for axis, loop in enumerate(reversed(grid)):
            size = self.program.evaluate(loop.stop - loop.start)
            if axis > 0 and size > 65535:
                raise ScheduleError(f"kernel {self.kernel.name}: grid axis {axis} ({loop.var}) has {size} programs; CUDA allows 65535")
        decode = []
        if merged:
            extents = [lp.stop for lp in merged]
            size = sympy.Mul(*extents)
            if self.program.evaluate(size) > 65535:
                raise ScheduleError(f"kernel {self.kernel.name}: grid axis 2 ({', '.join(str(lp.var) for lp in merged)}) has {self.program.evaluate(size)} programs; CUDA allows 65535")
            axes.append({"var": ", ".join(str(lp.var) for lp in merged), "value": "tl.program_id(2)", "size": PYTHON_EXPR(size), "role": "merged"})
            for n, lp in enumerate(merged):
                inner = sympy.Mul(*extents[n + 1 :])
                value = "tl.program_id(2)" if inner == 1 else f"(tl.program_id(2) // ({TRITON_EXPR(inner)}))"
                decode.append({"dst": str(lp.var), "value": value if n == 0 else f"({value} % ({TRITON_EXPR(lp.stop)}))"})
        body = grid[-1].body if grid else self.kernel.body
        for d in decode:
            self.lines.append(Line(1, "assign", d))
        for a in reversed(axes):
            if a["role"] != "merged":
                self.lines.append(Line(1, "assign", {"dst": a["var"], "value": a["value"]}))
        self.emit(body, 1)
        return {
            "name": self.kernel.name,
            "phase": self.kernel.phase,
            "tensors": [
                {"name": t.name, "ndim": len(t.shape), "dtype": t.dtype, "kind": t.kind}
                for t in self.tensors
            ],
            "grid": [a["size"] for a in axes],
            "axes": axes,
            "lines": [dataclasses.asdict(line) for line in self.lines],
            "num_warps": self.knobs.num_warps,
            "num_stages": self.knobs.num_stages,
            "knobs_source": self.knobs.source,
            "transposed": sorted(self.transposed),
            "tiles_transposed": self.kernel.phase == "dq" and self.program.attr("dq_tiles") == "transposed",
            "log2": self.log2,
        }


# --- the module --------------------------------------------------------------------------------------


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates") / "triton")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["pyliteral"] = _pyliteral
    return env


def _pyliteral(obj) -> str:
    """``obj`` (JSON data) as a Python literal: Jinja's ``tojson`` spelling (sorted keys, HTML-safe
    escapes), but True, False and None for the booleans and null."""
    from jinja2.utils import htmlsafe_json_dumps

    if isinstance(obj, bool):
        return repr(obj)
    if obj is None:
        return "None"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{htmlsafe_json_dumps(str(k))}: {_pyliteral(obj[k])}" for k in sorted(obj)) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(_pyliteral(x) for x in obj) + "]"
    return str(htmlsafe_json_dumps(obj))


def _program_context(sched: Scheduled) -> dict:
    program = sched.program
    env = {str(k): v for k, v in program.env}
    kernels = [KernelLowering(program, k).lower() for k in program.kernels]
    for k in kernels:
        # a mask mod's classify kernel launches through _classified (it fills the block table the other
        # kernels' tile lists come from); both programs have one, on their own tile sizes
        k["launch"] = "classified" if k["phase"] == "classify" else "plain"
        if k["launch"] == "classified":
            k["name"] = f"{sched.kind.split('-')[0]}_classify"
    guarded = guarded_outputs(program)
    tensors = [
        {"name": t.name, "kind": t.kind, "dtype": t.dtype, "torch_dtype": TORCH_DTYPES[t.dtype], "ndim": len(t.shape), "layout": t.layout if len(t.shape) == 4 else "", "shape": [PYTHON_EXPR(d) for d in t.shape],
         "fill": _fill_text(guarded[t.name][1]) if t.name in guarded else None,
         # a 4-d tensor the module allocates: an output in the spec's layout (what the caller gets), any other BNSD
         "alloc_layout": t.layout if t.kind == "output" else "BNSD"}
        for t in program.tensors
    ]
    fills: dict[tuple, list[str]] = {}
    for name, (rows, value) in guarded.items():
        fills.setdefault((rows, value), []).append(name)
    fill_lines = [{"rows": rows, "what": f"{' and '.join(names)} hold {value!r} there"} for (rows, value), names in fills.items()]
    prediction = predict(program, sched.target)  # the emitted program's roofline (what the tile table shows for it)
    workspaces = shared_workspaces(tensors)
    return {
        "kind": sched.kind,
        "name": program.name,
        "tiles": {"Br": env["Br"], "Bc": env["Bc"]},
        "forced": sched.row is not None and sched.row.tiles is not None and not sched.given,  # the tiles are the row's
        "given": sched.given,
        "row_source": sched.row.source if sched.row else None,
        "skipped": [sk.line() for sk in sched.skipped],
        "kernels": kernels,
        "tensors": tensors,
        "workspaces": workspaces,
        "workspace_names": [t["name"] for t in workspaces],
        "fills": fill_lines,
        "predicted_us": None if prediction is None else round(prediction.time_s * 1e6, 3),
        "group_split": int(program.attr("group_split", 1)),
        "heavy_first": bool(program.attr("heavy_first", False)),
        "heavy_note": _forward_heavy_note(program) if sched.kind == "fwd" else "",
    }


def bound_launches(spec: AttentionSpec, prog: dict) -> bool:
    """Whether the module's ``forward``/``backward`` of ``prog`` (a :func:`_program_context`) gets the
    bound launch record (``_bind``/``_bound_call``): a repeated trusted call then allocates and calls
    the compiled kernels' launchers with the arguments recorded on its first call. Only programs whose
    host work is allocations and launches alone qualify: no mods (parameters, classify kernels), no
    sinks (dsinks computed on the host), no tensor filled before the launch and no zeroed partial."""
    plain = all(t["fill"] is None and t["kind"] in ("input", "output", "workspace") for t in prog["tensors"])
    return spec.mods is None and not spec.sinks and plain and all(k["phase"] != "classify" for k in prog["kernels"])
def _forward_heavy_note(program: Program) -> str:
    """The module docstring's line for a forward with ``heavy_first`` ("" without)."""
    if not program.attr("heavy_first", False):
        return ""
    grid = grid_loops(program.kernel("fwd"))
    reversed_ = grid[0].get(HeavyLast) is not None
    how = ", numbered from the last tile down (the heaviest programs of every head first)" if reversed_ else " (the window gives the Q tiles about the same work)"
    return f"heavy first: Q-tile grid axis outermost{how}"


def shared_workspaces(tensors: list[dict]) -> list[dict]:
    """The workspaces (tensor contexts of kind "workspace", no fill) of the first workspace's dtype that
    the module allocates in one buffer (``_workspaces``: one allocation per call instead of one per
    tensor), in program order; empty when fewer than two share it."""
    ws = [t for t in tensors if t["kind"] == "workspace" and t["fill"] is None]
    ws = [t for t in ws if t["dtype"] == ws[0]["dtype"]] if ws else []
    return ws if len(ws) > 1 else []


def _fill_text(value: float) -> str:
    return repr(value) if math.isfinite(value) else f'float("{value}")'


def guarded_outputs(program: Program) -> dict[str, tuple[str, float]]:
    """{output tensor: (row-id tensor, value)} for each output whose stores skip guarded rows
    (``Store.rows``): the module allocates it filled with the value an empty row holds (DESIGN §3:
    L = −inf, every other output 0), which the rows the kernels never write keep."""
    out = {}
    for k in program.kernels:
        for s, _ in walk(k.body):
            if isinstance(s, Store) and s.rows and program.tensor(s.dst.tensor).kind == "output":
                out[s.dst.tensor] = (s.rows, float("-inf") if s.dst.tensor == "L" else 0.0)
    return out


LAUNCHER = ("triton", "launch.py")  # under runtime/: the host runtime every module carries sections of


def render(spec: AttentionSpec, target: str | Target = DEFAULT_TARGET, dq_strategy: str | None = None, tile_sizes=None, knobs=None,
           dq_tiles: str | None = None) -> str:
    """The Python source of the Triton module for ``spec`` on ``target`` (deterministic); see
    :func:`schedule` for ``dq_strategy``, ``tile_sizes``, ``knobs`` and ``dq_tiles``."""
    fwd, bwd = schedule(spec, target, dq_strategy, tile_sizes, knobs, dq_tiles)
    return render_module(ModulePlan(spec, load_target(target), fwd, bwd))


@dataclass(frozen=True)
class ModulePlan:
    """What one Triton module renders: the spec, the loaded target and its two programs as scheduled
    (:class:`Scheduled`: the compiled program and the schedule it records)."""

    spec: AttentionSpec
    target: Target
    fwd: Scheduled
    bwd: Scheduled


def render_module(plan: ModulePlan) -> str:
    """The Python source of the Triton module of ``plan`` (deterministic): every kernel lowered from its
    program (:class:`KernelLowering`) and rendered through templates/triton/module.py.jinja."""
    spec, tgt, fwd, bwd = plan.spec, plan.target, plan.fwd, plan.bwd
    env_values = {str(k): v for k, v in fwd.program.env}
    consts = {
        "G": env_values["G"],
        "Dqk": spec.head_dim_qk,
        "Dv": spec.head_dim_v,
        "Dqk_p": _pow2(spec.head_dim_qk),
        "Dv_p": _pow2(spec.head_dim_v),
    }
    context = {
        "spec": spec,
        "spec_toml": spec.to_toml().rstrip("\n").split("\n"),
        "target": tgt.name,
        "dq_strategy": bwd.program.attr("dq_strategy"),
        "dq_direct": bool(bwd.program.attr("dq_direct")),
        "consts": consts,
        "scale": spec.softmax_scale,
        "programs": [_program_context(fwd), _program_context(bwd)],
        "shapes": {
            "B": spec.batch,
            "Hq": spec.heads_q,
            "Hkv": spec.heads_kv,
            "Sq": spec.seq_q,
            "Sk": spec.seq_k,
        },
        "runtime_shapes": RUNTIME_SHAPES,
        "layout": spec.layout,
        "dtype": spec.dtype,
        "torch_dtype": TORCH_DTYPES[spec.dtype],
        "mods": _mods_context(spec, fwd, bwd) if spec.mods is not None else None,
        "packed_rows": spec.packed_ids[0] if spec.packed_ids else "",
        "host_steps": carried_source(*(["dsinks"] if spec.sinks else []), *(["reduce_tile_windows"] if spec.mods is not None and spec.mods.grads else [])),
        "window_offset": "Sk - Sq" if spec.alignment == "bottom_right" else "0",
        "scores_doc": "score_mod(scale * q k^T)" if spec.mods is not None else "scale * q k^T",
    }
    launcher = runtime_text(*LAUNCHER)
    context["runtime"] = lambda name: section(launcher, name)
    context["fills"] = context["programs"][0]["fills"]
    context["bwd_fills"] = context["programs"][1]["fills"]
    params = set(context["mods"]["param_names"]) if context["mods"] else set()
    for prog, entry in zip(context["programs"], ("forward", "backward")):
        prog["bound"] = bound_launches(spec, prog)
        prog["entry"] = entry
        for t in prog["tensors"]:
            t["param"] = t["name"] in params  # the module takes it from `params`, by name
    env = _environment()
    context["hook"] = hooks(env, module_features(spec, context["mods"]), context, MODULE_HOOKS)
    return env.get_template("module.py.jinja").render(**context)


# the hook points of module.py.jinja (tilegen.backends.hooks; templates/triton/features/*.jinja fill them)
MODULE_HOOKS = (
    "jit_helpers", "module_defs", "mods_globals", "mods_defs", "args", "forward_doc", "backward_doc", "prologue", "setup",
    "backward_results", "backward_returns_doc", "dparams_doc", "backward_steps", "dparams_steps", "sinks_rows_doc", "sinks_rows_arg",
    "function_saves_doc", "function_grads_doc", "dparams_sinks_doc", "function_inputs", "function_prologue", "function_forward_call",
    "function_backward", "function_backward_call", "function_grads", "function_no_grads", "attention_args", "attention_softmax_doc",
    "attention_grads_doc", "attention_see_doc", "attention_apply",
)


def module_features(spec: AttentionSpec, mods: dict | None) -> list[str]:
    """The features (templates/triton/features/*.jinja) whose hooks the module of ``spec`` renders, in
    order: ``sinks``; ``mods`` (parameters by name), ``blocks`` (a mask mod's class table and tile
    lists), ``packed`` (rows outside every sequence); ``grads`` (float parameters' gradients); then
    ``dparams`` when the backward returns gradients beside dq, dk, dv (sinks or ``grads``), else
    ``no_dparams``; ``host_steps`` when the module carries functions of :mod:`tilegen.core.hoststeps`.
    ``mods``: :func:`_mods_context`'s dict, or None."""
    grads = bool(mods and mods["grads"])
    out = [name for name, on in (("sinks", bool(spec.sinks)), ("mods", mods is not None), ("blocks", bool(mods and mods["block_shapes"])),
                                 ("packed", bool(spec.packed_ids)), ("grads", grads)) if on]
    out.append("dparams" if spec.sinks or grads else "no_dparams")
    if spec.sinks or grads:
        out.append("host_steps")
    return out


def _mods_context(spec: AttentionSpec, fwd: Scheduled, bwd: Scheduled) -> dict:
    """What the module's host code needs of the mods: the parameters (shapes, dtypes, values), whether
    the mask reads indices alone, the block tables' shapes, and per gradient term of the backward its
    window (widths, origins as Python code of the tile indices b, h, i, j) for the fixed-order reduction."""
    from tilegen.core import mods as M

    mods = spec.mods
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    params = [
        {
            "name": p.name,
            "shape": [str(d) for d in p.concrete_shape(sizes)],
            "torch_dtype": TORCH_DTYPES[p.dtype],
            "data": None if p.values is None else list(p.values),
        }
        for p in mods.params
    ]
    block_shapes, tile_sizes = {}, {}
    for sched in (fwd, bwd):
        for t in sched.program.tensors:
            if t.kind == "tiles":
                block_shapes[sched.kind.split("-")[0]] = [sched.program.evaluate(d) for d in t.shape]
                tile_sizes[sched.kind.split("-")[0]] = [sched.program.evaluate(Br), sched.program.evaluate(Bc)]
    program = bwd.program
    br, bc = program.evaluate(Br), program.evaluate(Bc)
    grads = []
    for k, term in enumerate(mods.grads):
        decl = mods.param(term.param)
        dims = list(decl.concrete_shape(sizes))
        widths, origins = M.grad_window(term, decl, Br, Bc)
        wint = [program.evaluate(w) for w in widths]
        tile = {M.Q_IDX: I_TILE * br, M.KV_IDX: J_TILE * bc, Br: br, Bc: bc}
        texts, reads = [], set()
        for o in origins:
            o = sympy.sympify(o).xreplace(tile)
            reads |= {str(x) for x in o.free_symbols}
            try:
                texts.append(PYTHON_EXPR(o))
            except ScheduleError:
                raise ScheduleError(f"the window origin {o} of {term.param}'s gradient has no host spelling") from None
        grads.append({"k": k, "param": term.param, "ndim": len(dims), "dims": dims, "widths": wint, "W": math.prod(wint), "origins": texts,
                      "reads": [name in reads for name in ("b", "h", "i", "j")]})
    return {
        "score_text": M.to_text(mods.score) if mods.score is not None else "",
        "mask_text": M.to_text(mods.mask) if mods.mask is not None else "",
        "params": params,
        "param_names": [p.name for p in mods.params],
        "index_only": bool(mods.index_only_mask),
        "block_shapes": block_shapes,
        "tile_sizes": tile_sizes,
        "grads": grads,
    }


def module_name(spec: AttentionSpec) -> str:
    """The module's file stem: ``tilegen_`` and the spec's name."""
    safe = "".join(c if c.isalnum() else "_" for c in spec.name)
    return f"tilegen_{safe}"


def generate(spec: AttentionSpec, target: str | Target = DEFAULT_TARGET, dq_strategy: str | None = None, tile_sizes=None) -> Generated:
    """The generated file set for ``spec`` on a GPU target: the Triton module and a manifest."""
    fwd, bwd = schedule(spec, target, dq_strategy, tile_sizes)
    return BACKEND.render(ModulePlan(spec, load_target(target), fwd, bwd))


def files_of(plan: ModulePlan) -> Generated:
    """The file set of ``plan``: the module (:func:`render_module`) and its manifest (the schedule each
    program records)."""
    spec, fwd, bwd = plan.spec, plan.fwd, plan.bwd
    source = render_module(plan)
    manifest = {
        "backend": "triton",
        "spec": spec.to_dict(),
        "target": plan.target.name,
        "dq_strategy": bwd.program.attr("dq_strategy"),
        "schedule": {
            "forward": fwd.choice(),
            "backward": bwd.choice(),
        },
        "module": f"{module_name(spec)}.py",
    }
    return with_manifest({f"{module_name(spec)}.py": source}, manifest)


_LOADED: dict[tuple, Any] = {}


def cache_dir() -> Path:
    """Where :func:`load` keeps generated modules: ``triton/`` in tilegen's cache folder
    (``$TILEGEN_CACHE_DIR``, default ``~/.cache/tilegen``; see :mod:`tilegen.core.cache`)."""
    from tilegen.core.cache import folder

    return folder() / "triton"


def load(spec: AttentionSpec, target: str | Target = DEFAULT_TARGET, dq_strategy: str | None = None, tile_sizes=None, knobs=None,
         dq_tiles: str | None = None):
    """Generate (once per spec, target and strategy in a process) and import the module for ``spec``
    (arguments as :func:`render`).

    Triton reads a kernel's source from its file, so the module is written under :func:`cache_dir`
    with a digest of its text in the file name, then imported.
    """
    key = (
        spec,
        target_key(target),  # the target's contents: an edited file generates again
        dq_strategy,
        repr(tile_sizes),
        None if knobs is None else tuple(sorted((k, tuple(v)) for k, v in knobs.items())),
        dq_tiles,
    )
    hit = _LOADED.get(key)
    if hit is not None:
        return hit
    from tilegen.core.fileio import write_atomic

    source = render(spec, target, dq_strategy, tile_sizes, knobs, dq_tiles)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module_name(spec)}_{digest}.py"
    if not path.exists() or path.read_text(encoding="utf-8") != source:
        write_atomic(path, source)
    name = f"tilegen_generated_{digest}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    mod_spec.loader.exec_module(module)
    _LOADED[key] = module
    return module


class Triton(Backend):
    """The Triton backend (GPU targets): the pass list of :mod:`tilegen.passes.gpu` (with the target's
    measured rows for what it emits); the backward keeps dK, dV on chip."""

    name = "triton"
    dkv_strategies = ("on-chip",)
    compiles = True
    torch_module = True
    words = {
        "units": "tensor cores (cube), CUDA cores (vector)",
        "footprint_per": "per program (one SM: shared memory, registers)",
        "traffic": "HBM traffic by tensor: ",
    }

    def passes(self, ctx):
        return gpu_passes.passes(ctx)

    def check_dkv(self, dkv_strategy):
        """Refuse ``dkv_strategy`` ``atomic``: the Triton backward keeps dK, dV on chip.

        Raises:
            SpecError: ``"atomic"`` (or an unknown strategy)."""
        if self.resolve(Options(dkv_strategy=dkv_strategy)).dkv_strategy != "on-chip":
            raise SpecError("dkv_strategy", dkv_strategy, "on-chip or auto for a GPU target (its Triton backward keeps dK, dV on chip)")

    def emitted_options(self, which, dq_strategy=None, tile_sizes=None, dkv_strategy=None):
        """The target's measured rows choose (``dq_strategy`` None: the rows', else the target's)."""
        if which == "fwd":
            return Options(tile_sizes=tile_sizes, schedule_rows=True)
        return Options(dq_strategy=dq_strategy, tile_sizes=tile_sizes, schedule_rows=True, dq_tiles=None)

    def emitted(self, spec, which, target, dq_strategy=None, tile_sizes=None, dkv_strategy=None, log=None):
        """As :meth:`Backend.emitted`, the request first checked (:func:`check_request`)."""
        self.check_dkv(dkv_strategy)
        check_request(load_target(target), tile_sizes, dq_strategy)
        return compile_program(spec, which, self, target, self.emitted_options(which, dq_strategy, tile_sizes, dkv_strategy), log)

    def dq_strategy(self, spec, target, tile_sizes=None) -> str:
        """The strategy of the backward the target's rows choose (:func:`schedule`: the first backward
        ``[[triton.schedule]]`` row that applies, else ``triton.dq_strategy``)."""
        return schedule(spec, target, None, tile_sizes)[1].program.attr("dq_strategy")

    def generate(self, spec, target, dq_strategy=None, tile_sizes=None, dkv_strategy=None):
        self.check_dkv(dkv_strategy)
        return generate(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes)

    def lower(self, program: Program, target: Target, spec: AttentionSpec, label: str) -> Scheduled:
        """The compiled program with the schedule it records (select-row's row, each kernel's launch
        knobs, the rendering annotations): what :func:`render_module` lowers kernel by kernel."""
        return Scheduled(program, PassLog(), target)

    def render(self, plan: ModulePlan) -> Generated:
        """The files of ``plan`` (:func:`files_of`): the module and its manifest."""
        return files_of(plan)


BACKEND = Triton()
