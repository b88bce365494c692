"""Ascend C lowering of score and mask mods (``ModOp``, DESIGN §3) for the vector (AIV) side: a compiler
of any mod expression to a straight-line list of vector instructions over UB rows.

The AIV applies the mods to its half of the UB score tile after the tile arrives from the cube, row by
row: each op is a count-form vector call of ``cpad`` elements on one row (the tile's row ``r``, the key
indices ``sc_col``, or a scratch row ``sm_r<k>`` of ``cpad`` floats). :class:`Compiler` walks the
expression DAG (sympy shares common subexpressions; each distinct node is compiled once) and sorts every
node into one of three homes:

- **per-tile scalars**: nodes of b, h, the sizes and parameter reads at such indices, computed once per
  tile on the scalar unit as C++ (``int64_t`` for integer nodes, exact: floor division and ``%`` through
  ``tilegen::FloorDiv``/``FloorMod``, bit operations as C++'s on two's-complement int64; ``float``
  otherwise); a parameter read is ``GlobalTensor::GetValue`` at the row-major offset of its indices,
  each clipped into its dimension (the reference reads clipped indices where no visible pair reads
  them; a visible pair never reads outside, DESIGN §3);
- **per-row scalars**: the same for nodes that also read ``q_idx`` (declared inside the row loop);
- **vector rows**: nodes that read ``kv_idx`` or ``score``, and nodes the scalar unit has no instruction
  for (exp, log, tanh, erf, sqrt, a power with a non-integer or symbolic exponent: their scalar operand
  is broadcast with ``Duplicate``). Rows that read neither ``q_idx`` nor ``score`` are computed once per
  tile and kept for the rows (pinned scratch rows); the others per row. Scratch rows are reused after
  their last use (linear scan): the op needs as many ``sm_r`` rows as are live at once.

The vector instructions (each one Ascend C API call of the count form, ``cpad`` elements; cpad a
multiple of 64 so the 64-lane compares and selects cover whole repeats):

=========================================  ===================================================================
mod language                               instructions
=========================================  ===================================================================
``+ - *`` with a scalar                    ``Adds``, ``Muls``
``+ - * /`` of two rows                    ``Add``, ``Sub``, ``Mul``, ``Div``
``exp``, ``log``, ``abs``, ``sqrt``, 1/x   ``Exp``, ``Ln``, ``Abs``, ``Sqrt``, ``Reciprocal``
``min``, ``max``                           ``Min``, ``Max``, ``Mins``, ``Maxs``
``x**n`` (integer n)                       ``Mul`` by squaring, ``Reciprocal`` for n < 0; ``x**y`` = ``Exp(y·Ln x)``
``tanh``                                   1 − 2/(e^{2x} + 1): ``Muls``, ``Exp``, ``Adds``, ``Reciprocal``
``erf``                                    Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7) on |x|, the sign by a select
``floor`` of a float                       ``Cast`` float → float, ``RoundMode::CAST_FLOOR``
``n // d``, ``n % d`` (integer n, d > 0)   ⌊(n + ½)·(1/d)⌋: exact while |n| < 2^22 (the fraction of (n + ½)/d
                                           lies in [½/d, 1 − ½/d], farther from an integer than the two
                                           roundings move it); ``n % d`` = n − d·⌊n/d⌋
``n // d``, ``n % d`` (d varying along     q₀ = ⌊fl(n/d)⌋ (``Div``; ``Muls`` by fl(1/d) for a scalar d), r = n − q₀·d,
the row, or of either sign)                then q₀ − [r·d < 0] + [(r − d)·d ≥ 0] (``Compares`` + ``Select``): exact
                                           for |n|, |d| < 2^22 (:meth:`Compiler._floordiv`)
comparisons                                ``Compares`` (with a scalar) or ``Compare`` into the bit row
                                           ``sc_bits``, then ``Duplicate`` 1 and ``Select`` 0: a 0/1 row
``&``, ``|``, ``~`` of booleans            ``Mul``/``Muls``, ``Max``/``Maxs``, 1 − x
``&``, ``|``, ``^`` of integers            each operand as an int32 row (``Cast`` CAST_RINT, or ``Duplicate`` of an
                                           int32 scalar), ``And``/``Or`` on their ``ReinterpretCast<int16_t>`` halves
                                           (A2 has them on 16-bit integers only; a bitwise operation of 32-bit words is
                                           the same on their halves: And.md 约束说明), ``Cast`` back (CAST_NONE);
                                           a ^ b = (a | b) − (a & b); ``~n`` = −n − 1, ``<<``/``>>`` by a constant are
                                           ·2ᵏ and ⌊·/2ᵏ⌋ (the tracer's forms)
``where(c, a, b)``                         ``Compares`` c > ½, ``Select`` (the tensor-scalar mode; two rows:
                                           each side selected against 0 and added, exact)
``P[i, ...]`` varying along the row        the row-major offset row (each index clipped by ``Maxs``/``Mins``),
                                           then the first form that applies: a UB table (a tensor of a size
                                           known at generate time, :func:`table_candidates`, copied once per
                                           kernel by ``tilegen::ModLoadFloats``): ``Gather`` at the byte offsets;
                                           a span (last index ±kv_idx + a per-tile or per-row value, the others
                                           fixed along the row): one ``DataCopyPad`` of the ≤ cpad elements the
                                           row reads per tile or per row, then ``Gather``; else
                                           ``tilegen::ModGather``: a scalar loop of ``GetValue`` from GM into the
                                           row (after a V → S wait; S → V after)
=========================================  ===================================================================

Integers on the vector side are exact floats: indices, integer parameter values and their arithmetic
(bit operations' results included) stay below 2^22 in magnitude (the ``MaskTile_index`` field obligation
covers the indices); a bit operation is exact on them (int32 two's complement, as int64's on values of
that range). Refused at generate time, one line naming the operation: a bit operation with a constant
outside int32 (its row holds int32 words).

Uses of the compiled programs (``ModOp``):

- ``score``: score′ into the row (SCORE = the row), then the mask's 0/1 row and -inf where it is 0
  (``tilegen::ModHide``); a full tile of the block table skips the mask;
- ``dscore``: the row (dS′) times ∂score′/∂score at the raw scores ``args[1]``, 0 where dS′ is 0;
- ``pgrad``: the contribution dS′·∂score′/∂P[index] and the bin row (the parameter index relative to
  the tile's window, :func:`tilegen.core.mods.grad_window`, row-major), accumulated into the window
  ``sm_g`` by ``tilegen::ModScatterAdd`` (a scalar loop in row, column order: deterministic). Each AIV
  writes its own partial (``gpart`` on Ascend has an extra axis of 2 for the two AIVs); the host adds the
  two halves and reduces the tiles in fixed order (:func:`tilegen.core.mods.param_grads`): no atomics.
  Every read of a floating-point parameter has such a term, so every such parameter gets a gradient.
- ``classify``: the mask's 0/1 row of each query row of the tile (see the Ascend lowering).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import sympy

from tilegen.backends.ascendc import ops as O
from tilegen.core import mods as M
from tilegen.core.errors import SpecError, TargetError

# names the emitted C++ gives the mod language's indices (grid variables b, hq; the row's query index q)
_B, _H, _Q = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("b", "hq", "q"))
_TO_C = {M.B_IDX: _B, M.H_IDX: _H, M.Q_IDX: _Q}
_READS = frozenset({M.SCORE, *M.INDEX_SYMBOLS})
_CNAMES = {M.B_IDX: "b", M.H_IDX: "hq", M.Q_IDX: "q", **{v: k for k, v in M.SIZE_SYMBOLS.items()}}

_ACCEPTED = "for the Ascend C backend, expressions of the mod language; bit operations of key-varying values with int32 constants"

# Abramowitz & Stegun 7.1.26: erf(x) = 1 - (a1 t + ... + a5 t^5) e^{-x^2}, t = 1 / (1 + p x), x >= 0
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_TRANSCENDENTAL = (sympy.exp, sympy.log, sympy.tanh, sympy.erf)
_MODES = {sympy.StrictLessThan: "LT", sympy.LessThan: "LE", sympy.StrictGreaterThan: "GT", sympy.GreaterThan: "GE",
          sympy.Equality: "EQ", sympy.Unequality: "NE"}
_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}
_C_REL = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "==", "NE": "!="}


def refuse(field_name: str, expr, what: str) -> SpecError:
    """The one-line refusal of ``expr`` (the mod of ``field_name``) naming the operation ``what``."""
    return SpecError(field_name, f"{M.to_text(expr)} ({what}: no lowering to the AIV's vector instructions)", _ACCEPTED)


def cfloat(x: float) -> str:
    if x == float("-inf"):
        return "tilegen::NEG_INF"
    if x == float("inf"):
        return "tilegen::POS_INF"
    return repr(float(x)) + "f"


@dataclass(frozen=True)
class Val:
    """A compiled node: a scalar C++ expression (``vec`` False; ``code`` C++, ``integer`` int64_t else
    float or bool) or a row (``vec`` True; ``code`` the row's name). ``row``: it depends on the query row
    (q_idx or score), so it lives inside the row loop."""

    vec: bool
    code: str
    integer: bool = False
    boolean: bool = False
    row: bool = False


@dataclass
class ParamInfo:
    """A parameter tensor as the kernel sees it: its GM name, its dimensions as C++ and its dtype;
    ``ub``: the UB view holding the whole tensor as floats (a table loaded once by the kernel,
    :func:`table_candidates`), or "" (read from GM)."""

    gm: str
    dims: tuple[str, ...]
    dtype: str
    ub: str = ""


@dataclass
class Compiled:
    """The lines of one or more compiled expressions: ``tile`` (before the row loop), ``body`` (per row),
    and the number of scratch rows ``regs`` they use at once."""

    tile: list = field(default_factory=list)
    body: list = field(default_factory=list)
    regs: int = 0
    compares: bool = False


def _deps(e) -> frozenset:
    """The index symbols and ``score`` an expression reads, through parameter reads' indices too."""
    return _deps_of(sympy.sympify(e))


@functools.lru_cache(maxsize=65536)
def _deps_of(e) -> frozenset:
    if isinstance(e, sympy.Symbol):
        return frozenset({e}) & _READS
    if isinstance(e, sympy.Indexed):
        return frozenset().union(*(_deps_of(i) for i in e.indices))
    if not e.args:
        return frozenset()
    return frozenset().union(*(_deps_of(a) for a in e.args))


@functools.lru_cache(maxsize=65536)
def _scalar_safe(e) -> bool:
    """Whether the scalar unit computes ``e`` (no transcendental function, no non-integer power)."""
    if e.has(*_TRANSCENDENTAL):
        return False
    for p in e.atoms(sympy.Pow):
        if not p.exp.is_Integer:
            return False
    return not e.has(sympy.sqrt)


class Compiler:
    """Compiles mod expressions into :class:`~tilegen.backends.ascendc.ops.ModLine` lists (see the module
    docstring). ``params``: name -> :class:`ParamInfo`; ``field_name``: the mod named in refusals;
    ``score``: the row that holds the score (``row`` or the raw scores' row)."""

    def __init__(self, params: dict, cpad: int, field_name: str, expr_for_errors, score: str = "row", counter=None, names=None):
        self.params, self.cpad, self.field, self.expr = params, cpad, field_name, expr_for_errors
        self.score = score
        self.names = {**_CNAMES, **(names or {})}
        self.memo: dict = {}
        self.tile: list = []  # LineDecl / LineColumns / LineVec (per tile)
        self.body: list = []
        self.counter = counter if counter is not None else [0]
        self.compares = False
        self.columns = False

    # --- names -----------------------------------------------------------------------------------
    def _name(self, prefix: str) -> str:
        self.counter[0] += 1
        return f"{prefix}{self.counter[0]}"

    def _emit(self, line, row: bool) -> None:
        (self.body if row else self.tile).append(line)

    def _vop(self, op: str, row: bool, a: str = "", b: str = "", x: str = "", mode: str = "", gm: str = "", dst: str | None = None) -> str:
        dst = dst or self._name("%")
        self._emit(O.LineVec(op=op, dst=dst, a=a, b=b, x=x, mode=mode, gm=gm, cpad=self.cpad), row)
        if op in ("cmps", "cmp", "sel"):
            self.compares = True
        return dst

    # --- entry -----------------------------------------------------------------------------------
    def ev(self, e) -> Val:
        e = sympy.sympify(e)
        if e in self.memo:
            return self.memo[e]
        v = self._ev(e)
        self.memo[e] = v
        return v

    def _ev(self, e) -> Val:
        deps = _deps(e)
        row = bool(deps & {M.Q_IDX, M.SCORE})
        if not deps & {M.KV_IDX, M.SCORE} and _scalar_safe(e):
            return self._scalar(e, row)
        return self._vector(e, row)

    # --- scalars ---------------------------------------------------------------------------------
    def _scalar(self, e, row: bool) -> Val:
        if e is sympy.true or e is sympy.false:
            return Val(False, "true" if e is sympy.true else "false", boolean=True)
        if isinstance(e, sympy.Expr) and e.is_number and not e.is_Number:  # pi, sqrt(2/pi): a derivative's constants
            return Val(False, cfloat(float(e)))
        if e.is_Number:
            if e.is_Integer:
                return Val(False, f"{int(e)}LL" if int(e) >= 0 else f"({int(e)}LL)", integer=True)
            return Val(False, cfloat(float(e)))
        if isinstance(e, sympy.Symbol):
            return Val(False, self.names[e], integer=True, row=row)
        code = self._c(e)
        boolean = isinstance(e, (sympy.logic.boolalg.Boolean,)) and not isinstance(e, sympy.Expr)
        integer = bool(e.is_integer) and not boolean
        name = self._name("ms")
        ctype = "bool" if boolean else ("int64_t" if integer else "float")
        self._emit(O.LineDecl(name=name, ctype=ctype, value=code), row)
        return Val(False, name, integer=integer, boolean=boolean, row=row)

    def _sc(self, e) -> str:
        """C++ of a scalar sub-node (declared once through :meth:`ev`)."""
        v = self.ev(e)
        assert not v.vec
        return v.code

    def _c(self, e) -> str:
        """C++ of scalar node ``e`` whose operands are compiled nodes."""
        if isinstance(e, sympy.Indexed):
            return self._read(e)
        if isinstance(e, sympy.Add):
            if e.is_integer:
                return "(" + " + ".join(self._sc(a) for a in e.args) + ")"
            return "(" + " + ".join(self._f(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            if e.is_integer:
                return "(" + " * ".join(self._sc(a) for a in e.args) + ")"
            return "(" + " * ".join(self._f(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow):
            n = int(e.exp)
            base = self._f(e.base) if not (e.is_integer and n > 0) else self._sc(e.base)
            prod = " * ".join([base] * abs(n))
            return f"({prod})" if n > 0 else f"(1.0f / ({prod}))"
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            num = sympy.expand(num)
            fn = "tilegen::FloorDiv" if isinstance(e, sympy.floor) else "tilegen::CeilDiv"
            if num.is_integer and den.is_integer:  # FloorDiv/CeilDiv: exact for a divisor of either sign
                return f"{fn}({self._sc(num)}, {self._sc(den)})"
            arg = self._f(e.args[0])
            return f"tilegen::ModFloorF({arg})" if isinstance(e, sympy.floor) else f"(-tilegen::ModFloorF(-({arg})))"
        if isinstance(e, sympy.Mod):
            a, m = e.args
            if a.is_integer and m.is_integer:
                return f"tilegen::FloorMod({self._sc(a)}, {self._sc(m)})"
            fa, fm = self._f(a), self._f(m)
            return f"({fa} - {fm} * tilegen::ModFloorF({fa} / {fm}))"
        if isinstance(e, sympy.Abs):
            x = self._sc(e.args[0])
            return f"({x} < 0 ? -{x} : {x})"
        if isinstance(e, (sympy.Min, sympy.Max)):
            integer = bool(e.is_integer)
            args = [self._sc(a) if integer else self._f(a) for a in sorted(e.args, key=sympy.default_sort_key)]
            fn = ("tilegen::Min64" if integer else "tilegen::ModMinF") if isinstance(e, sympy.Min) else ("tilegen::Max64" if integer else "tilegen::ModMaxF")
            out = args[0]
            for a in args[1:]:
                out = f"{fn}({out}, {a})"
            return out
        if isinstance(e, sympy.Piecewise):
            (val, cond), rest = e.args[0], e.args[1:]
            if cond is sympy.true or not rest:
                return self._f(val) if not e.is_integer else self._sc(val)
            other = sympy.Piecewise(*rest)
            pick = self._sc if e.is_integer else self._f
            return f"({self._sc(cond)} ? {pick(val)} : {pick(other)})"
        if isinstance(e, sympy.Not):
            return f"(!{self._sc(e.args[0])})"
        if isinstance(e, (sympy.And, sympy.Or)):
            op = " && " if isinstance(e, sympy.And) else " || "
            return "(" + op.join(self._sc(a) for a in sorted(e.args, key=sympy.default_sort_key)) + ")"
        if type(e) in _MODES:
            return f"({self._f(e.lhs)} {_C_REL[_MODES[type(e)]]} {self._f(e.rhs)})" if not (e.lhs.is_integer and e.rhs.is_integer) \
                else f"({self._sc(e.lhs)} {_C_REL[_MODES[type(e)]]} {self._sc(e.rhs)})"
        if isinstance(e, tuple(M.BIT_FUNCTIONS.values())):
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[type(e).__name__]
            return f"({self._sc(e.args[0])} {op} {self._sc(e.args[1])})"
        raise refuse(self.field, self.expr, f"{type(e).__name__} on the scalar unit")

    def _f(self, e) -> str:
        """C++ float of a scalar sub-node."""
        v = self.ev(e)
        return f"static_cast<float>({v.code})" if v.integer or v.boolean else v.code

    def _read(self, e: sympy.Indexed) -> str:
        p = self._param(e)
        off = self._offset_c(e, p)
        ctype = "int64_t" if p.dtype == "int32" else "float"
        return f"static_cast<{ctype}>({p.gm}.GetValue(static_cast<uint64_t>({off})))"

    def _param(self, e: sympy.Indexed) -> ParamInfo:
        name = str(e.base.label)
        if name not in self.params:
            raise SpecError(self.field, name, "a declared parameter")
        return self.params[name]

    def _offset_c(self, e: sympy.Indexed, p: ParamInfo) -> str:
        parts = []
        for i, n in zip(e.indices, p.dims):
            parts.append((f"tilegen::Clip({self._sc(i)}, 0LL, {n} - 1LL)", n))
        off = "0LL"
        for idx, n in parts:
            off = f"({off} * {n} + {idx})"
        return off

    # --- rows ------------------------------------------------------------------------------------
    def vec(self, v: Val, row: bool | None = None) -> str:
        """The row of ``v`` (a scalar broadcast by Duplicate)."""
        if v.vec:
            return v.code
        return self._vop("dup", v.row if row is None else (row or v.row), x=self._fx(v))

    def _fx(self, v: Val) -> str:
        return f"static_cast<float>({v.code})" if (v.integer or v.boolean) else v.code

    def _vector(self, e, row: bool) -> Val:
        integer = bool(e.is_integer)
        if e == M.KV_IDX:
            self.columns = True
            return Val(True, "sc_col", integer=True)
        if e == M.SCORE:
            return Val(True, self.score, row=True)
        if isinstance(e, sympy.Add):
            return self._add(e, row, integer)
        if isinstance(e, sympy.Mul):
            return self._mul(e, row, integer)
        if isinstance(e, sympy.Pow):
            return self._pow(e, row)
        if isinstance(e, sympy.exp):
            return self._un("exp", e.args[0], row)
        if isinstance(e, sympy.log):
            return self._un("ln", e.args[0], row)
        if isinstance(e, sympy.Abs):
            return self._un("abs", e.args[0], row, integer)
        if isinstance(e, sympy.tanh):
            return self._tanh(e.args[0], row)
        if isinstance(e, sympy.erf):
            return self._erf(e.args[0], row)
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            return self._floor(e, row)
        if isinstance(e, sympy.Mod):
            return self._mod(e, row)
        if isinstance(e, (sympy.Min, sympy.Max)):
            return self._minmax(e, row, integer)
        if isinstance(e, sympy.Piecewise):
            return self._piecewise(e, row)
        if type(e) in _MODES:
            return self._compare(e, row)
        if isinstance(e, (sympy.And, sympy.Or)):
            return self._logic(e, row)
        if isinstance(e, sympy.Not):
            x = self.vec(self.ev(e.args[0]), row)
            t = self._vop("muls", row, a=x, x="-1.0f")
            return Val(True, self._vop("adds", row, a=t, x="1.0f"), boolean=True, row=row)
        if isinstance(e, sympy.Indexed):
            return self._gather(e, row)
        if isinstance(e, sympy.Heaviside):  # a derivative's step (of Max, a relu): 1 above 0, H(0) at 0
            h0 = e.args[1] if len(e.args) > 1 else sympy.Rational(1, 2)
            return self.ev(sympy.Piecewise((1, e.args[0] > 0), (h0, sympy.Eq(e.args[0], 0)), (0, True)))
        if isinstance(e, sympy.sign):  # a derivative's sign (of Abs)
            return self.ev(sympy.Piecewise((1, e.args[0] > 0), (-1, e.args[0] < 0), (0, True)))
        if isinstance(e, tuple(M.BIT_FUNCTIONS.values())):
            return self._bitwise(e, row)
        if e.is_number:  # a constant the scalar unit cannot fold (exp(1), sqrt(2)): broadcast its value
            return Val(False, cfloat(float(e)))
        raise refuse(self.field, self.expr, type(e).__name__)

    def _split(self, args):
        """(scalar-safe args without kv_idx/score, the other args)."""
        sc = [a for a in args if not _deps(a) & {M.KV_IDX, M.SCORE} and _scalar_safe(a)]
        return sc, [a for a in args if a not in sc]

    def _add(self, e, row, integer) -> Val:
        sc, vs = self._split(e.args)
        acc = None
        for t in sorted(vs, key=sympy.default_sort_key):
            coeff, rest = t.as_coeff_Mul()
            x = self.vec(self.ev(rest), row)
            if acc is None:
                acc = x if coeff == 1 else self._vop("muls", row, a=x, x=cfloat(float(coeff)))
            elif coeff == 1:
                acc = self._vop("add", row, a=acc, b=x)
            elif coeff == -1:
                acc = self._vop("sub", row, a=acc, b=x)
            else:
                acc = self._vop("add", row, a=acc, b=self._vop("muls", row, a=x, x=cfloat(float(coeff))))
        if sc:
            s = self.ev(sympy.Add(*sc))
            acc = self._vop("adds", row, a=acc, x=self._fx(s))
        return Val(True, acc, integer=integer, row=row)

    def _mul(self, e, row, integer) -> Val:
        sc, vs = self._split(e.args)
        num = [f for f in vs if not (isinstance(f, sympy.Pow) and f.exp.is_Number and f.exp < 0)]
        den = [f.base ** (-f.exp) for f in vs if f not in num]
        acc = None
        for f in num:
            x = self.vec(self.ev(f), row)
            acc = x if acc is None else self._vop("mul", row, a=acc, b=x)
        if den:
            d = self.vec(self.ev(sympy.Mul(*den)), row)
            acc = self._vop("rec", row, a=d) if acc is None else self._vop("div", row, a=acc, b=d)
        if sc:
            s = self.ev(sympy.Mul(*sc))
            acc = self._vop("muls", row, a=acc, x=self._fx(s))
        return Val(True, acc, integer=integer, row=row)

    def _pow(self, e, row) -> Val:
        base, ex = e.args
        if ex.is_Integer:
            n = int(ex)
            x = self.vec(self.ev(base), row)
            acc, sq, k = None, x, abs(n)
            while k:
                if k & 1:
                    acc = sq if acc is None else self._vop("mul", row, a=acc, b=sq)
                k >>= 1
                if k:
                    sq = self._vop("mul", row, a=sq, b=sq)
            if n < 0:
                acc = self._vop("rec", row, a=acc)
            return Val(True, acc, integer=bool(e.is_integer), row=row)
        if ex == sympy.Rational(1, 2):
            return self._un("sqrt", base, row)
        if ex == sympy.Rational(-1, 2):
            return Val(True, self._vop("rec", row, a=self._un("sqrt", base, row).code), row=row)
        if base.is_Number and base > 0:
            y = self.vec(self.ev(ex), row)
            t = self._vop("muls", row, a=y, x=cfloat(math.log(float(base))))
            return Val(True, self._vop("exp", row, a=t), row=row)
        lx = self._un("ln", base, row).code
        t = self._vop("mul", row, a=self.vec(self.ev(ex), row), b=lx)
        return Val(True, self._vop("exp", row, a=t), row=row)

    def _un(self, op, arg, row, integer=False) -> Val:
        x = self.vec(self.ev(arg), row)
        return Val(True, self._vop(op, row, a=x), integer=integer, row=row)

    def _tanh(self, arg, row) -> Val:
        x = self.vec(self.ev(arg), row)
        t = self._vop("muls", row, a=x, x="2.0f")
        t = self._vop("exp", row, a=t)
        t = self._vop("adds", row, a=t, x="1.0f")
        t = self._vop("rec", row, a=t)
        t = self._vop("muls", row, a=t, x="-2.0f")
        return Val(True, self._vop("adds", row, a=t, x="1.0f"), row=row)

    def _erf(self, arg, row) -> Val:
        x = self.vec(self.ev(arg), row)
        ax = self._vop("abs", row, a=x)
        t = self._vop("muls", row, a=ax, x=cfloat(_ERF_P))
        t = self._vop("adds", row, a=t, x="1.0f")
        t = self._vop("rec", row, a=t)
        poly = self._vop("muls", row, a=t, x=cfloat(_ERF_A[4]))
        for a in reversed(_ERF_A[:4]):
            poly = self._vop("adds", row, a=poly, x=cfloat(a))
            poly = self._vop("mul", row, a=poly, b=t)
        sq = self._vop("mul", row, a=ax, b=ax)
        sq = self._vop("muls", row, a=sq, x="-1.0f")
        sq = self._vop("exp", row, a=sq)
        poly = self._vop("mul", row, a=poly, b=sq)
        poly = self._vop("muls", row, a=poly, x="-1.0f")
        pos = self._vop("adds", row, a=poly, x="1.0f")  # erf(|x|)
        neg = self._vop("muls", row, a=pos, x="-1.0f")
        return Val(True, self._select2(x, "GE", "LT", pos, neg, row), row=row)

    def _floor(self, e, row) -> Val:
        arg = e.args[0]
        num, den = sympy.fraction(sympy.together(arg))
        num = sympy.expand(num)
        ceil = isinstance(e, sympy.ceiling)
        if num.is_integer and den.is_integer and not (den.is_positive and not _deps(den) & {M.KV_IDX, M.SCORE}):
            t = self._floordiv(-num if ceil else num, den, row)  # a divisor of either sign, or one varying along the row
            return Val(True, self._vop("muls", row, a=t, x="-1.0f") if ceil else t, integer=True, row=row)
        if num.is_integer and den.is_integer:  # d > 0, fixed along the row
            if den == 1:
                return self.ev(num)
            d = self.ev(den)
            n = self.vec(self.ev(-num if ceil else num), row)
            t = self._vop("adds", row, a=n, x="0.5f")
            inv = cfloat(1.0 / float(den)) if den.is_Integer else f"(1.0f / {self._fx(d)})"
            t = self._vop("muls", row, a=t, x=inv)
            t = self._vop("floor", row, a=t)
            if ceil:
                t = self._vop("muls", row, a=t, x="-1.0f")
            return Val(True, t, integer=True, row=row)
        x = self.vec(self.ev(-arg if ceil else arg), row)
        t = self._vop("floor", row, a=x)
        if ceil:
            t = self._vop("muls", row, a=t, x="-1.0f")
        return Val(True, t, integer=True, row=row)

    def _floordiv(self, n, d, row) -> str:
        """⌊n / d⌋ of integers n, d (d ≠ 0 of either sign, a scalar or a row), exact for |n|, |d| < 2^22:
        q₀ = ⌊fl(n / d)⌋ (``Div``, or ``Muls`` by fl(1/d) for a scalar d: within 2 ulps of n/d, and an ulp
        below 2^22 is at most ½, so |fl(n/d) − n/d| ≤ 1 and q₀ is ⌊n/d⌋ − 1, ⌊n/d⌋ or ⌊n/d⌋ + 1); the
        remainder r = n − q₀·d is exact (integers below 2^24); then one correction step: q₀ − 1 where
        r·d < 0 (r of the other sign than d: q₀ too large), q₀ + 1 where (r − d)·d ≥ 0 (r/d ≥ 1: q₀ too
        small). A product's sign is exact in float (no underflow of integers, |r·d| < 2^46), so the two
        tests are exact and the result is ⌊n/d⌋, the r of which lies in [0, d) (d > 0) or (d, 0]."""
        nv = self.vec(self.ev(n), row)
        dv = self.ev(d)
        if dv.vec:
            t = self._vop("div", row, a=nv, b=dv.code)
        else:
            t = self._vop("muls", row, a=nv, x=f"(1.0f / {self._fx(dv)})")

        def times(x: str) -> str:  # x · d
            return self._vop("mul", row, a=x, b=dv.code) if dv.vec else self._vop("muls", row, a=x, x=self._fx(dv))

        q0 = self._vop("floor", row, a=t)
        r = self._vop("sub", row, a=nv, b=times(q0))
        one = self._vop("dup", row, x="1.0f")
        self._vop("cmps", row, a=times(r), x="0.0f", mode="LT", dst="sc_bits")
        low = self._vop("sel", row, a=one, x="0.0f")
        over = self._vop("sub", row, a=r, b=dv.code) if dv.vec else self._vop("adds", row, a=r, x=f"(-{self._fx(dv)})")
        self._vop("cmps", row, a=times(over), x="0.0f", mode="GE", dst="sc_bits")
        high = self._vop("sel", row, a=one, x="0.0f")
        return self._vop("add", row, a=self._vop("sub", row, a=q0, b=low), b=high)

    def _mod(self, e, row) -> Val:
        a, m = e.args
        q = self.ev(sympy.floor(a / m)) if (a.is_integer and m.is_integer) else None
        if q is None:
            q = self.ev(sympy.floor(sympy.Mul(a, sympy.Pow(m, -1), evaluate=False)))
        mv = self.ev(m)
        qv = self.vec(q, row)
        t = self._vop("mul", row, a=qv, b=mv.code) if mv.vec else self._vop("muls", row, a=qv, x=self._fx(mv))
        return Val(True, self._vop("sub", row, a=self.vec(self.ev(a), row), b=t), integer=bool(e.is_integer), row=row)

    def _fold(self, e, row, op: str, scalar_op: str) -> str:
        """The row of an associative ``e`` (Max, Min, And, Or): its row arguments combined by ``op`` in a
        fixed order, then its scalar arguments (evaluated together, once) by ``scalar_op``."""
        sc, vs = self._split(e.args)
        acc = None
        for f in sorted(vs, key=sympy.default_sort_key):
            x = self.vec(self.ev(f), row)
            acc = x if acc is None else self._vop(op, row, a=acc, b=x)
        if sc:
            s = self.ev(type(e)(*sc))
            acc = self._vop(scalar_op, row, a=acc, x=self._fx(s))
        return acc

    def _minmax(self, e, row, integer) -> Val:
        op = "max" if isinstance(e, sympy.Max) else "min"
        return Val(True, self._fold(e, row, op, op + "s"), integer=integer, row=row)

    def _bits_of(self, cond: Val, row) -> None:
        """sc_bits = (cond row > 1/2)."""
        self._vop("cmps", row, a=self.vec(cond, row), x="0.5f", mode="GT", dst="sc_bits")

    def _bitwise(self, e, row) -> Val:
        """An integer bit operation of rows: both operands as int32 rows, ``And``/``Or`` on their 16-bit
        halves (A2 has them on int16 only; a bitwise operation of two int32 words is the same operation
        on their halves), the result back to float; ``a ^ b`` = (a | b) − (a & b) (each side an integer
        of the operands' range: the float subtraction is exact)."""
        kind = type(e).__name__
        if kind == "bitwise_xor":
            either, both = self._bitrow("or", e.args, row), self._bitrow("and", e.args, row)
            return Val(True, self._vop("sub", row, a=either, b=both), integer=True, row=row)
        return Val(True, self._bitrow(kind.removeprefix("bitwise_"), e.args, row), integer=True, row=row)

    def _bitrow(self, op: str, args, row) -> str:
        a, b = (self._int_row(x) for x in args)
        return self._vop("i2f", row, a=self._vop(op, row, a=a, b=b))

    def _int_row(self, e) -> str:
        """The row of integer node ``e`` as int32 (``Cast`` CAST_RINT of its exact float row, or a scalar
        broadcast by ``Duplicate`` of int32), once per node."""
        key = ("int32", e)
        if key in self.memo:
            return self.memo[key].code
        v = self.ev(e)
        here = bool(_deps(e) & {M.Q_IDX, M.SCORE})  # where the node lives (per tile or per row), not its reader
        if v.vec:
            r = self._vop("f2i", here, a=v.code)
        else:
            if e.is_Integer and not -(2**31) <= int(e) < 2**31:
                raise refuse(self.field, self.expr, f"a bit operation with the constant {e}, outside int32")
            r = self._vop("dupi", here, x=v.code)
        self.memo[key] = Val(True, r, integer=True, row=here)
        return r

    def _where(self, c: Val, a: Val, b: Val, row) -> str:
        if not a.vec and not b.vec:
            a = Val(True, self.vec(a, row), row=row)
        if a.vec and not b.vec:
            self._bits_of(c, row)
            return self._vop("sel", row, a=a.code, x=self._fx(b))
        if b.vec and not a.vec:
            inv = self._vop("adds", row, a=self._vop("muls", row, a=self.vec(c, row), x="-1.0f"), x="1.0f")
            self._vop("cmps", row, a=inv, x="0.5f", mode="GT", dst="sc_bits")
            return self._vop("sel", row, a=b.code, x=self._fx(a))
        return self._select2(self.vec(c, row), "GT", "LE", a.code, b.code, row, x="0.5f")

    def _select2(self, src: str, mode: str, inverse: str, a: str, b: str, row, x: str = "0.0f") -> str:
        """a where (src mode x) else b, two rows: each side selected against 0 where it is taken, then
        added (exact: y + 0 = y, and an infinity or NaN of the side not taken never reaches the sum)."""
        self._vop("cmps", row, a=src, x=x, mode=mode, dst="sc_bits")
        t = self._vop("sel", row, a=a, x="0.0f")
        self._vop("cmps", row, a=src, x=x, mode=inverse, dst="sc_bits")
        u = self._vop("sel", row, a=b, x="0.0f")
        return self._vop("add", row, a=t, b=u)

    def _piecewise(self, e, row) -> Val:
        pieces = list(e.args)
        val = pieces[-1][0]  # the last piece is the otherwise (True)
        acc = self.ev(val)
        for v, c in reversed(pieces[:-1]):
            acc = Val(True, self._where(self.ev(c), self.ev(v), acc, row), row=row, integer=bool(e.is_integer))
        return acc

    def _compare(self, e, row) -> Val:
        mode = _MODES[type(e)]
        lhs, rhs = self.ev(e.lhs), self.ev(e.rhs)
        if not lhs.vec:
            lhs, rhs, mode = rhs, lhs, _FLIP[mode]
        if rhs.vec:
            self._vop("cmp", row, a=lhs.code, b=rhs.code, mode=mode, dst="sc_bits")
        else:
            self._vop("cmps", row, a=lhs.code, x=self._fx(rhs), mode=mode, dst="sc_bits")
        one = self._vop("dup", row, x="1.0f")
        return Val(True, self._vop("sel", row, a=one, x="0.0f"), boolean=True, row=row)

    def _logic(self, e, row) -> Val:
        op = "mul" if isinstance(e, sympy.And) else "max"  # and = Mul, or = Max of 0/1 rows
        return Val(True, self._fold(e, row, op, op + "s"), boolean=True, row=row)

    def _gather(self, e: sympy.Indexed, row) -> Val:
        """A parameter read whose index varies along the row, in the first form that applies: from the
        tensor's UB table (``Gather`` at the offsets, in bytes); from its span in GM, when the last
        index is ±kv_idx + (a per-tile or per-row value) and the others do not vary along the row (one
        ``DataCopyPad`` of at most cpad elements per tile or per row, then ``Gather``); else the scalar
        loop of ``GetValue`` from GM (``tilegen::ModGather``)."""
        p = self._param(e)
        integer = p.dtype == "int32"
        if p.ub:
            return Val(True, self._gather_ub(self._offsets(e, p, row), "", p.ub, row), integer=integer, row=row)
        span = self._span(e, p, row)
        if span is not None:
            return Val(True, span, integer=integer, row=row)
        return Val(True, self._vop("gather", row, a=self._offsets(e, p, row), gm=p.gm), integer=integer, row=row)

    def _offsets(self, e: sympy.Indexed, p: ParamInfo, row) -> str:
        """The row of row-major offsets of read ``e`` (each index clipped into its dimension)."""
        off_vec, off_sc = None, "0LL"
        stride = "1LL"
        for i, n in reversed(list(zip(e.indices, p.dims))):
            v = self.ev(i)
            if v.vec:
                t = self._vop("maxs", row, a=v.code, x="0.0f")
                t = self._vop("mins", row, a=t, x=f"static_cast<float>({n} - 1LL)")
                if stride != "1LL":
                    t = self._vop("muls", row, a=t, x=f"static_cast<float>({stride})")
                off_vec = t if off_vec is None else self._vop("add", row, a=off_vec, b=t)
            else:
                off_sc = f"({off_sc} + tilegen::Clip({v.code}, 0LL, {n} - 1LL) * {stride})"
            stride = f"({stride} * {n})"
        if off_sc != "0LL":
            off_vec = self._vop("adds", row, a=off_vec, x=f"static_cast<float>({off_sc})")
        return off_vec

    def _gather_ub(self, offsets: str, stage: str, table: str, row) -> str:
        """``Gather`` of the elements at ``offsets`` (a row of element offsets) from the UB row ``stage``
        (a span) or the UB table ``table``: the offsets in bytes as uint32 (``Muls`` by 4, exact below
        2^22; ``Cast`` to int32, whose non-negative values are the same words)."""
        b = self._vop("f2i", row, a=self._vop("muls", row, a=offsets, x="4.0f"))
        return self._vop("gatherub", row, a=b, b=stage, gm=table)

    def _span(self, e: sympy.Indexed, p: ParamInfo, row) -> str | None:
        """Read ``e`` through its span, or None when its index is not ±kv_idx + c in the last dimension
        (c, the other indices: per tile or per row). The row's clipped last indices lie in [lo, hi], the
        clipped ends of mcol0 + c .. mcol0 + cpad − 1 + c (c − mcol0 − cpad + 1 .. c − mcol0 for −kv_idx):
        that run of the tensor (≤ cpad elements) is loaded into a UB row by ``tilegen::ModLoadFloats``, and
        gathered at (clip(±kv_idx + c) − lo)."""
        *lead, last = e.indices
        if any(_deps(i) & {M.KV_IDX, M.SCORE} for i in lead):
            return None
        last = sympy.expand(sympy.sympify(last))
        c, term = last.as_independent(M.KV_IDX, as_Add=True)
        if term not in (M.KV_IDX, -M.KV_IDX) or _deps(c) & {M.KV_IDX, M.SCORE}:
            return None
        n = p.dims[-1]
        here = bool(_deps(e) & {M.Q_IDX, M.SCORE})  # a span per row, or per tile
        base = "0LL"
        for i, d in zip(lead, p.dims[:-1]):
            base = f"({base} * {d} + tilegen::Clip({self._sc(i)}, 0LL, {d} - 1LL))"
        plus = "" if c == 0 else f" + {self._sc(c)}"
        first, end = f"(mcol0{plus})", f"(mcol0 + {self.cpad - 1}LL{plus})"  # the row's first and last index (kv_idx + c)
        if term == -M.KV_IDX:  # -kv_idx + c: the last column reads the lowest index
            first, end = f"({plus.removeprefix(' + ') or '0LL'} - mcol0 - {self.cpad - 1}LL)", f"({plus.removeprefix(' + ') or '0LL'} - mcol0)"
        lo, length = self._name("ms"), self._name("ms")
        self._emit(O.LineDecl(name=lo, ctype="int64_t", value=f"tilegen::Clip({first}, 0LL, {n} - 1LL)"), here)
        self._emit(O.LineDecl(name=length, ctype="int64_t", value=f"(tilegen::Clip({end}, 0LL, {n} - 1LL) - {lo} + 1LL)"), here)
        start = lo if base == "0LL" else f"{base} * {n} + {lo}"
        stage = self._vop("span", here, x=length, mode=p.dtype, gm=f"{p.gm}[static_cast<uint64_t>({start})]")
        t = self._vop("maxs", row, a=self.vec(self.ev(last), row), x="0.0f")
        t = self._vop("mins", row, a=t, x=f"static_cast<float>({n} - 1LL)")
        t = self._vop("adds", row, a=t, x=f"static_cast<float>(-{lo})")
        return self._gather_ub(t, stage, "", row)

    # --- results -----------------------------------------------------------------------------------
    def into(self, v: Val, dst: str) -> None:
        """The value ``v`` written into row ``dst`` in the body (the last op renamed when it made ``v``)."""
        if not v.vec:
            self.body.append(O.LineVec(op="dup", dst=dst, x=self._fx(v), cpad=self.cpad))
            return
        if v.code == dst:
            return
        last = self.body[-1] if self.body else None
        if isinstance(last, O.LineVec) and last.dst == v.code:
            self.body[-1] = dataclasses.replace(last, dst=dst)
            self.memo = {k: m for k, m in self.memo.items() if m.code != v.code}  # that row is gone
            return
        self.body.append(O.LineVec(op="muls", dst=dst, a=v.code, x="1.0f", cpad=self.cpad))

    def finish(self) -> Compiled:
        """The tile and body lines with the virtual rows (``%n``) mapped to scratch rows ``sm_r<k>``
        (linear scan: a row computed per tile and read in the body stays for the whole loop)."""
        seq = [(0, n, ln) for n, ln in enumerate(self.tile)] + [(1, n, ln) for n, ln in enumerate(self.body)]
        last: dict[str, tuple[int, int]] = {}
        defined_in: dict[str, int] = {}
        for part, n, ln in seq:
            for r in _reads(ln):
                last[r] = (part, n)
            d = getattr(ln, "dst", "")
            if d.startswith("%"):
                defined_in.setdefault(d, part)
                last.setdefault(d, (part, n))
        pinned = {r for r, part in defined_in.items() if part == 0 and last[r][0] == 1}
        mapping: dict[str, str] = {}
        free: list[str] = []
        nregs = 0
        out_tile, out_body = [], []
        for part, n, ln in seq:
            changes = {f: mapping.get(getattr(ln, f), getattr(ln, f)) for f in _READ_FIELDS if hasattr(ln, f)}
            dying = [r for r in _reads(ln) if last[r] == (part, n) and r not in pinned]
            apart = getattr(ln, "op", "") in _DST_APART
            for r in [] if apart else dying:  # free after the last read (the dst may take the row: one elementwise instruction)
                if mapping[r] not in free:
                    free.append(mapping[r])
            d = getattr(ln, "dst", "")
            if d.startswith("%"):
                if d not in mapping:
                    if free:
                        mapping[d] = free.pop(0)
                    else:
                        mapping[d] = f"sm_r{nregs}"
                        nregs += 1
                changes["dst"] = mapping[d]
                if last[d] == (part, n) and d not in pinned:  # never read
                    free.append(mapping[d])
            for r in dying if apart else []:  # a Gather's dst must not be its source: freed after it took its row
                if mapping[r] not in free:
                    free.append(mapping[r])
            ln = dataclasses.replace(ln, **changes) if changes else ln
            (out_tile if part == 0 else out_body).append(ln)
        cols = [O.LineColumns(cpad=self.cpad)] if self.columns else []
        return Compiled(cols + out_tile, out_body, nregs, self.compares)


_READ_FIELDS = ("a", "b")
_DST_APART = ("gatherub",)  # ops whose dst may not share a row with a source (Gather.md 约束说明)


def _reads(line) -> list[str]:
    return [getattr(line, f) for f in _READ_FIELDS if getattr(line, f, "").startswith("%")]


def params_of(mods, tensors: dict, size_c: Callable, tables=()) -> dict:
    """name -> :class:`ParamInfo` of every parameter of ``mods`` (``tensors``: the program's tensors by
    name; ``size_c``: a size expression as C++; ``tables``: the names held in UB, view ``mt_<name>``)."""
    out = {}
    for p in mods.params:
        t = tensors.get(p.name)
        shape = t.shape if t is not None else p.shape
        out[p.name] = ParamInfo(f"g_{p.name}", tuple(size_c(d) for d in shape), p.dtype, f"mt_{p.name}" if p.name in tables else "")
    return out


# UB bytes a kernel gives the tables of its mods' parameters at most (beside what its tiles leave free)
MOD_TABLE_BYTES = 16384


def table_candidates(mods, tensors: dict) -> dict[str, int]:
    """name -> element count of the parameters worth a UB table: read somewhere at an index that varies
    along the key row, of a shape free of the run-time sizes (a captured tensor: its size is known at
    generate time, so the UB it takes is too), and no larger than :data:`MOD_TABLE_BYTES`."""
    out = {}
    exprs = [x for x in (mods.score, mods.mask) if x is not None]
    for p in mods.params:
        t = tensors.get(p.name)
        shape = [sympy.sympify(d) for d in (t.shape if t is not None else p.shape)]
        if any(d.free_symbols for d in shape):
            continue
        reads = [ix for x in exprs for ix in sympy.sympify(x).atoms(sympy.Indexed) if str(ix.base.label) == p.name]
        if not any(_deps(ix) & {M.KV_IDX, M.SCORE} for ix in reads):
            continue
        n = math.prod(int(d) for d in shape)
        if 0 < n * 4 <= MOD_TABLE_BYTES:
            out[p.name] = n
    return out


def compile_score_mask(mods, params: dict, cpad: int, score: bool, mask: bool, blocks_cond: str = "") -> Compiled:
    """The lines of the ``score`` op: score′ into ``row``, then (with ``mask``) the mask's 0/1 row in
    ``sm_v0`` and -inf where it is 0; ``blocks_cond``: the C++ condition of a full tile (mask skipped).
    One compiler for both, so their rows share one allocation (and their per-tile nodes)."""
    c = Compiler(params, cpad, "score_mod", mods.score, score="row")
    if score and mods.score is not None:
        c.into(c.ev(mods.score), "row")
    if mask and mods.mask is not None:
        c.field, c.expr = "mask_mod", mods.mask
        if blocks_cond:
            c.tile.append(O.LineFull(cond=blocks_cond))
            c.body.append(O.LineOpen(cond="!mfull"))
        c.into(c.ev(mods.mask), "sm_v0")
        c.body.append(O.LineHide(cpad=cpad))
        if blocks_cond:
            c.body.append(O.LineClose())
        c.compares = True
    return c.finish()


def compile_mask_row(mods, params: dict, cpad: int) -> Compiled:
    """The mask's 0/1 row in ``sm_v0`` (the block classification)."""
    c = Compiler(params, cpad, "mask_mod", mods.mask)
    c.into(c.ev(mods.mask), "sm_v0")
    out = c.finish()
    if not any(isinstance(t, O.LineColumns) for t in out.tile):
        out.tile.insert(0, O.LineColumns(cpad=cpad))
    out.compares = True
    return out


def compile_dscore(mods, params: dict, cpad: int) -> Compiled:
    """row ← row · ∂score′/∂score at the raw scores ``mraw`` (0 where the row is 0)."""
    c = Compiler(params, cpad, "score_mod", mods.score, score="mraw")
    d = c.ev(mods.dscore)
    if d.vec:
        t = c._vop("mul", True, a="row", b=d.code)
    else:
        t = c._vop("muls", True, a="row", x=c._fx(d))
    c._vop("cmps", True, a="row", x="0.0f", mode="NE", dst="sc_bits")
    c._vop("sel", True, a=t, x="0.0f", dst="row")
    return c.finish()


def compile_pgrad(mods, params: dict, cpad: int, term: int, br: int, bc: int, width: int = 1) -> Compiled:
    """Rows ``a`` = dS′·coef (0 where dS′ is 0) and ``b`` = the window slot of each key for gradient
    term ``term`` (:func:`tilegen.core.mods.grad_window` of a ``br`` x ``bc`` tile whose first query and
    key are the C++ ``mtq``, ``mtk``), accumulated into ``sm_g`` by ``tilegen::ModScatterAdd``."""
    g = mods.grads[term]
    decl = mods.param(g.param)
    widths, origins = M.grad_window(g, decl, br, bc)
    mtq, mtk = sympy.Symbol("mtq", integer=True), sympy.Symbol("mtk", integer=True)
    c = Compiler(params, cpad, "score_mod", mods.score, score="mraw", names={mtq: "mtq", mtk: "mtk"})
    coef = c.ev(g.coef)
    t = c._vop("mul", True, a="row", b=coef.code) if coef.vec else c._vop("muls", True, a="row", x=c._fx(coef))
    c._vop("cmps", True, a="row", x="0.0f", mode="NE", dst="sc_bits")
    contrib = c._vop("sel", True, a=t, x="0.0f")
    flat = sympy.Integer(0)
    for e, o, w in zip(g.index, origins, widths):
        flat = flat * w + (sympy.sympify(e) - sympy.sympify(o).xreplace({M.Q_IDX: mtq, M.KV_IDX: mtk}))
    bins = c.vec(c.ev(sympy.expand(flat)), True)
    c.body.append(O.LineScatter(a=contrib, b=bins, cpad=cpad, width=width))
    return c.finish()


def check(mods) -> None:
    """Refuse at generate time what the compiler cannot lower (a :class:`SpecError` naming the operation)."""
    params = {p.name: ParamInfo(f"g_{p.name}", tuple("1LL" for _ in p.shape), p.dtype) for p in mods.params}
    compile_score_mask(mods, params, 64, True, True)
    if mods.score is not None:
        compile_dscore(mods, params, 64)
        for k in range(len(mods.grads)):
            compile_pgrad(mods, params, 64, k, 16, 64)


# --- C++ pieces --------------------------------------------------------------------------------------


def to_c(expr):
    """``expr`` (mod-language symbols) with the emitted C++ names: b, hq, q."""
    return sympy.sympify(expr).xreplace(_TO_C)


def rowmajor(index, shape) -> sympy.Expr:
    off = sympy.Integer(0)
    for i, n in zip(index, shape):
        off = off * sympy.sympify(n) + sympy.sympify(i)
    return off


def check_cpad(cpad: int, what: str) -> None:
    if cpad * 4 % 256:
        raise TargetError(f"{what} needs the tile's columns ({cpad}) to be a multiple of 64 for Compares")
