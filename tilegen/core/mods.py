"""Score and mask modifications ("mods"): a small expression language, its tracer, its derivatives.

A **score mod** maps the scaled score of one (query, key) pair to a new score; a **mask mod** says
whether the key is visible to the query (DESIGN §3). Both are expressions over

==========  ================================================================================
``score``   the scaled score scale·q·k (real; score mods only)
``b``       the batch index
``h``       the query head index (GQA: the query's head, not the KV head)
``q_idx``   the query's row, 0..Sq-1
``kv_idx``  the key's row, 0..Sk-1
``B, Hq, Hkv, Sq, Sk``  the problem's sizes
==========  ================================================================================

and named **parameter arrays** read at integer index expressions (``slopes[h]``, ``table[h, q_idx -
kv_idx + Sk - 1]``, ``doc[q_idx]``). Operators: ``+ - * / // % **``, comparisons, ``&``, ``|``, ``~``
(and ``and``/``or``/``not`` in text), ``where(c, a, b)`` (or ``a if c else b``), ``exp``, ``log``,
``tanh``, ``abs``, ``min``, ``max``, ``floor``, ``sqrt``. Booleans are not numbers: ``==`` / ``!=`` of
two booleans and ``where`` with two boolean branches become ``& | ~`` of them; a boolean compared with
a number, in arithmetic or under ``< <= > >=`` is a :class:`ModError` naming the operation, as are a
division by zero and a torch operation tilegen cannot express. On integers, ``& | ^`` are the functions
``bitwise_and/or/xor`` (:class:`_BitOp`), ``~a`` is −a−1, ``a << n`` a·2ⁿ and ``a >> n`` ⌊a/2ⁿ⌋. Expressions are sympy expressions (the IR's
sizes already are), so the compiler differentiates them itself: :class:`ModSet` carries
``∂score′/∂score`` and, for every read of a floating-point parameter, ``∂score′/∂param[index]``.

Two ways in:

- **Text** (spec files, the CLI): :func:`parse` reads the language with Python's ``ast`` through a
  whitelist; an unknown name or function is an error naming it.
- **Python functions** (the NumPy and torch APIs): ``score_mod(score, b, h, q_idx, kv_idx)`` and
  ``mask_mod(b, h, q_idx, kv_idx)`` written with this module's helpers, or in plain torch as for
  FlexAttention, are traced: they are called once with symbolic values (:class:`Traced`), whose
  operators and ``__torch_function__`` (:func:`torch_dispatch`: torch's functions, tensor methods,
  captured tensors read at index expressions) build the expression. A Python ``if``, ``and``,
  ``or`` or ``not`` on a traced value cannot be traced and raises :class:`ModError` saying so. Arrays a
  function reads are wrapped with :func:`param` (``bias = mods.param("bias", array)``).

Built-ins (each returns a :class:`Mod`, usable as ``score_mod=``/``mask_mod=`` and callable inside a
user-written mod): :func:`softcap`, :func:`alibi`, :func:`relative_bias`, :func:`document`,
:func:`prefix_lm`, :func:`causal`, :func:`sliding_window`. The last two map to the spec's window (the
window fast path of every backend); ``&`` combines mask mods.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import operator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter

from tilegen.core.errors import SpecError
from tilegen.core.hoststeps import reduce_tile_windows
from tilegen.core.ir import B, Hkv, Hq, Sk, Sq

# --- symbols -----------------------------------------------------------------------------------------

SCORE = sympy.Symbol("score", real=True)
B_IDX = sympy.Symbol("b", integer=True, nonnegative=True)
H_IDX = sympy.Symbol("h", integer=True, nonnegative=True)
Q_IDX = sympy.Symbol("q_idx", integer=True, nonnegative=True)
KV_IDX = sympy.Symbol("kv_idx", integer=True, nonnegative=True)
INDEX_SYMBOLS = (B_IDX, H_IDX, Q_IDX, KV_IDX)
SIZE_SYMBOLS = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk}
PARAM_DTYPES = ("fp32", "int32")

FUNCTIONS: dict[str, Callable] = {
    "exp": sympy.exp,
    "log": sympy.log,
    "tanh": sympy.tanh,
    "abs": sympy.Abs,
    "Abs": sympy.Abs,
    "min": sympy.Min,
    "Min": sympy.Min,
    "max": sympy.Max,
    "Max": sympy.Max,
    "floor": sympy.floor,
    "sqrt": sympy.sqrt,
    "Mod": sympy.Mod,
    "Eq": lambda a, b: _eq(a, b),
    "Ne": lambda a, b: _ne(a, b),
    "And": sympy.And,
    "Or": sympy.Or,
    "Not": sympy.Not,
    "erf": sympy.erf,
}


class ModError(SpecError):
    """An invalid score or mask mod: names the mod (``score_mod``/``mask_mod``), the construct and what
    is accepted."""


# --- parameters --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamDecl:
    """A named parameter array a mod reads.

    Attributes:
        name: a Python identifier, not one of the language's names.
        shape: sizes, each an int or a sympy expression of ``B, Hq, Hkv, Sq, Sk``.
        dtype: ``"fp32"`` (differentiable: its gradient is returned) or ``"int32"`` (indices, document ids).
        values: the array's values (flattened, row-major) when a spec file carries them, else None.
        generator: the :class:`~tilegen.core.paramgen.ParamGenerator` that made ``values`` from the
            spec's sizes (``documents = [...]``, ``prefix = P``, ``alibi = true``), or None for values
            given as such; :class:`~tilegen.core.spec.AttentionSpec` regenerates them when a size changes.
    """

    name: str
    shape: tuple
    dtype: str = "fp32"
    values: tuple | None = None
    generator: Any = None

    @property
    def differentiable(self) -> bool:
        return self.dtype == "fp32"

    def concrete_shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        env = {SIZE_SYMBOLS[k]: int(v) for k, v in sizes.items() if k in SIZE_SYMBOLS}
        return tuple(int(sympy.sympify(d).subs(env)) for d in self.shape)

    def to_dict(self) -> dict:
        """The ``[params.NAME]`` table of a spec file: shape, dtype, and the generator's key (which the
        values follow) or the values."""
        out: dict[str, Any] = {"shape": [d if isinstance(d, int) else str(d) for d in self.shape], "dtype": self.dtype}
        if self.generator is not None:
            out[self.generator.kind] = self.generator.spec_value()
        elif self.values is not None:
            out["values"] = list(self.values)
        return out


def param_base(decl: ParamDecl) -> sympy.IndexedBase:
    """The sympy ``IndexedBase`` of a parameter: integer-valued for an int32 array, so that its reads
    are legal indices of another read (``k_start[seq[q_idx]]``); without assumptions for fp32."""
    if decl.dtype == "int32":
        return sympy.IndexedBase(decl.name, integer=True)
    return sympy.IndexedBase(decl.name)


def _param_dtype(array: np.ndarray, name: str) -> str:
    if np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
        return "int32"
    if np.issubdtype(array.dtype, np.floating):
        return "fp32"
    raise ModError(name, str(array.dtype), "a floating-point array (a learnable parameter) or an integer array (ids, lengths)")


class Param:
    """A parameter array for a traced mod: ``p[idx, ...]`` gives a traced read.

    ``array`` is a NumPy array or a torch tensor (a float tensor with ``requires_grad`` gets its gradient
    through the torch entry points); it is read at generate/run time, never during tracing.
    """

    def __init__(self, name: str, array: Any):
        if not isinstance(name, str) or not name.isidentifier() or name in _RESERVED:
            raise ModError("param", name, "a Python identifier that is not a name of the mod language")
        shape = tuple(int(d) for d in getattr(array, "shape", ()))
        if not shape:
            raise ModError(name, getattr(array, "shape", array), "an array of at least one dimension (wrap a scalar as a constant instead)")
        self.name = name
        self.array = array
        dtype = _param_dtype(np.asarray(array.detach().cpu().numpy() if hasattr(array, "detach") else array), name)
        self.decl = ParamDecl(name, shape, dtype)
        self.base = param_base(self.decl)

    def __getitem__(self, index) -> "Traced":
        if _TRACING is not None:
            _TRACING.append(self)
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) != len(self.decl.shape):
            raise ModError(self.name, f"{len(idx)} indices", f"{len(self.decl.shape)} indices (its shape is {list(self.decl.shape)})")
        exprs = tuple(_sym(x, f"index of {self.name}") for x in idx)
        for e in exprs:
            if not (e.is_integer or e.is_Integer):
                raise ModError(self.name, str(e), "integer index expressions (use // for division)")
        return Traced(self.base[exprs] if len(exprs) > 1 else self.base[exprs[0]])

    def __repr__(self) -> str:
        return f"Param({self.name!r}, shape={list(self.decl.shape)}, dtype={self.decl.dtype})"


def param(name: str, array: Any) -> Param:
    """Wrap ``array`` (NumPy array or torch tensor) as the parameter ``name`` for a traced mod."""
    return Param(name, array)


# --- tracing -----------------------------------------------------------------------------------------


def _sym(x: Any, where: str) -> sympy.Basic:
    if isinstance(x, Traced):
        return x.expr
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):  # a tensor: a 0-d constant or refused
        return _tsym(x, where)
    if isinstance(x, _VecOps):
        raise ModError("mod", f"a vector (a row of a captured tensor) as {where}", "one value per (b, h, q_idx, kv_idx): reduce the row with any(), all() or sum(), or read one element")
    if isinstance(x, (bool, np.bool_)):
        return sympy.true if x else sympy.false
    if isinstance(x, (int, np.integer)):
        return sympy.Integer(int(x))
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(float(x)):
            raise ModError("mod", x, f"finite constants ({where})")
        return sympy.Float(float(x))
    if isinstance(x, sympy.Basic):
        return x
    raise ModError("mod", type(x).__name__, f"numbers, traced values and parameter reads ({where}); wrap arrays with tilegen.mods.param(name, array)")


def _exact(d):
    """A divisor as sympy takes it exactly: an integral float constant (``x / 3.0``) as the integer,
    so that the quotient stays a rational multiple (⌊(q_idx − kv_idx)/3.0⌋ floors exactly) rather than
    a product with a rounded reciprocal."""
    if isinstance(d, sympy.Float) and float(d).is_integer():
        return sympy.Integer(int(d))
    return d


def _is_bool(e) -> bool:
    # not sympy.logic.boolalg.Boolean: every sympy Symbol (score, Hq, ...) is one
    return isinstance(e, (sympy.logic.boolalg.BooleanFunction, sympy.logic.boolalg.BooleanAtom, sympy.core.relational.Relational))


class Traced:
    """A symbolic value inside a traced mod. Arithmetic, comparisons and ``& | ~`` build expressions;
    ``bool()`` (a Python ``if``, ``and``, ``or``, ``not``, or ``while``) raises :class:`ModError`."""

    __slots__ = ("expr",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, expr):
        self.expr = expr

    def _op(self, other, fn, sign: str):
        if isinstance(other, _VecOps):  # a row of a captured tensor: its reflected operator broadcasts
            return NotImplemented
        return Traced(_apply(fn, self.expr, _sym(other, "an operand"), sign))

    def _rop(self, other, fn, sign: str):
        if isinstance(other, _VecOps):
            return NotImplemented
        return Traced(_apply(fn, _sym(other, "an operand"), self.expr, sign))

    def __add__(self, o): return self._op(o, lambda a, b: a + b, "+")
    def __radd__(self, o): return self._rop(o, lambda a, b: a + b, "+")
    def __sub__(self, o): return self._op(o, lambda a, b: a - b, "-")
    def __rsub__(self, o): return self._rop(o, lambda a, b: a - b, "-")
    def __mul__(self, o): return self._op(o, lambda a, b: a * b, "*")
    def __rmul__(self, o): return self._rop(o, lambda a, b: a * b, "*")
    def __truediv__(self, o): return self._op(o, lambda a, b: a / _exact(b), "/")
    def __rtruediv__(self, o): return self._rop(o, lambda a, b: a / _exact(b), "/")
    def __floordiv__(self, o): return self._op(o, lambda a, b: sympy.floor(a / b), "//")
    def __rfloordiv__(self, o): return self._rop(o, lambda a, b: sympy.floor(a / b), "//")
    def __mod__(self, o): return self._op(o, sympy.Mod, "%")
    def __rmod__(self, o): return self._rop(o, sympy.Mod, "%")
    def __pow__(self, o): return self._op(o, lambda a, b: a ** b, "**")
    def __rpow__(self, o): return self._rop(o, lambda a, b: a ** b, "**")
    def __neg__(self): return Traced(_apply(lambda a, _: -a, self.expr, None, "unary -"))
    def __pos__(self): return self
    def __abs__(self): return Traced(_apply(lambda a, _: sympy.Abs(a), self.expr, None, "abs"))
    def __lt__(self, o): return self._op(o, sympy.Lt, "<")
    def __le__(self, o): return self._op(o, sympy.Le, "<=")
    def __gt__(self, o): return self._op(o, sympy.Gt, ">")
    def __ge__(self, o): return self._op(o, sympy.Ge, ">=")
    def __eq__(self, o): return self._op(o, _eq, "==")  # type: ignore[override]
    def __ne__(self, o): return self._op(o, _ne, "!=")  # type: ignore[override]
    def __and__(self, o): return self._op(o, _and, "&")
    def __rand__(self, o): return self._rop(o, _and, "&")
    def __or__(self, o): return self._op(o, _or, "|")
    def __ror__(self, o): return self._rop(o, _or, "|")
    def __xor__(self, o): return self._op(o, _xor, "^")
    def __rxor__(self, o): return self._rop(o, _xor, "^")
    def __lshift__(self, o): return self._op(o, _lshift, "<<")
    def __rlshift__(self, o): return self._rop(o, _lshift, "<<")
    def __rshift__(self, o): return self._op(o, _rshift, ">>")
    def __rrshift__(self, o): return self._rop(o, _rshift, ">>")
    def __invert__(self): return Traced(_not(self.expr))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch's dispatch for a traced value (torch.where, torch.abs, F.gelu, a captured tensor indexed
        by traced indices, ...): :func:`torch_dispatch` builds the expression."""
        return torch_dispatch(func, args, kwargs or {})

    def __getattr__(self, name):
        """A tensor method (``.clamp``, ``.abs()``, ``.to()``, ``.new_ones``...) routed through the same
        dispatch as torch's functions."""
        if name.startswith("__"):
            raise AttributeError(name)
        return torch_method(self, name)

    def __bool__(self):
        raise ModError(
            "mod",
            str(self.expr),
            "no Python branch on a traced value (if/and/or/not/while): use tilegen.mods.where(cond, a, b) and &, |, ~",
        )

    def __index__(self):
        raise ModError("mod", str(self.expr), "parameter reads through tilegen.mods.param(name, array)[...], not NumPy/torch indexing with a traced value")

    __int__ = __float__ = __index__

    def __repr__(self) -> str:
        return f"Traced({self.expr})"


def _apply(fn, a, b, sign: str):
    """``fn(a, b)`` for the operator ``sign``; sympy's TypeError (a boolean in arithmetic or under
    < <= > >=, which sympy has no number for) and a division by zero as a ModError naming the
    operation."""
    try:
        out = fn(a, b)
    except ZeroDivisionError:
        raise ModError("mod", f"({a}) {sign} ({b})", f"a non-zero divisor of {sign}") from None
    except ModError:
        raise
    except (TypeError, ValueError):  # sympy's Min/Max of a boolean: ValueError (not comparable)
        what = f"{sign}({a})" if b is None else f"({a}) {sign} ({b})"
        raise ModError("mod", what, f"numbers as operands of {sign} (a comparison is a boolean, not 0/1: where(cond, 1, 0) for a number)") from None
    if isinstance(out, sympy.Basic) and out.has(sympy.zoo, sympy.nan):
        raise ModError("mod", f"({a}) {sign} ({b})", f"a non-zero divisor of {sign} (finite arithmetic)")
    return out


class _BitOp(sympy.Function):
    """An integer bit operation of two integer expressions (two's complement, as torch's and NumPy's
    on int32/int64). Constant arguments fold; the NumPy evaluation is :data:`NUMPY_FUNCTIONS`, the
    Triton printer spells it with Triton's operator, the Ascend C lowering runs it on int32 rows
    (``And``/``Or`` on their 16-bit halves, :mod:`tilegen.backends.ascendc.mods`)."""

    nargs = 2
    is_integer = True
    _fn: Callable = None  # type: ignore[assignment]

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(cls._fn(int(a), int(b)))
        return None


class bitwise_and(_BitOp):  # the mod language spells it so
    _fn = staticmethod(lambda a, b: a & b)


class bitwise_or(_BitOp):
    _fn = staticmethod(lambda a, b: a | b)


class bitwise_xor(_BitOp):
    _fn = staticmethod(lambda a, b: a ^ b)


BIT_FUNCTIONS = {"bitwise_and": bitwise_and, "bitwise_or": bitwise_or, "bitwise_xor": bitwise_xor}
FUNCTIONS.update(BIT_FUNCTIONS)


def _int_arrays(*xs):
    return [np.floor(x).astype(np.int64) if np.asarray(x).dtype.kind == "f" else np.asarray(x).astype(np.int64) for x in xs]


def _erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is optional
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return erf(x)


NUMPY_FUNCTIONS: dict[str, Callable] = {
    "bitwise_and": lambda a, b: np.bitwise_and(*_int_arrays(a, b)),
    "bitwise_or": lambda a, b: np.bitwise_or(*_int_arrays(a, b)),
    "bitwise_xor": lambda a, b: np.bitwise_xor(*_int_arrays(a, b)),
    "erf": _erf,
}


def _is_int(e) -> bool:
    return not _is_bool(e) and bool(getattr(e, "is_integer", False))


def _bits(a, b, sign: str, fn):
    if _is_int(a) and _is_int(b):
        return fn(a, b)
    raise ModError("mod", f"({a}) {sign} ({b})", f"booleans (comparisons) on both sides of {sign}, or integers on both sides (a bit operation)")


def _and(a, b):
    if _is_bool(a) and _is_bool(b):
        return sympy.And(a, b)
    return _bits(a, b, "&", bitwise_and)


def _or(a, b):
    if _is_bool(a) and _is_bool(b):
        return sympy.Or(a, b)
    return _bits(a, b, "|", bitwise_or)


def _xor(a, b):
    if _is_bool(a) and _is_bool(b):
        return _ne(a, b)
    return _bits(a, b, "^", bitwise_xor)


def _shift_amount(a, n, sign: str) -> int:
    if not (_is_int(a) and getattr(n, "is_Integer", False) and int(n) >= 0):
        raise ModError("mod", f"({a}) {sign} ({n})", f"an integer shifted by a constant integer >= 0 ({sign})")
    return int(n)


def _lshift(a, n):
    """``a << n``: a·2ⁿ (exact on integers)."""
    return a * 2 ** _shift_amount(a, n, "<<")


def _rshift(a, n):
    """``a >> n``: ⌊a / 2ⁿ⌋ (an arithmetic shift, exact on integers of either sign)."""
    return sympy.floor(a / 2 ** _shift_amount(a, n, ">>"))


def _not(a):
    if _is_bool(a):
        return sympy.Not(a)
    if _is_int(a):
        return -a - 1  # two's complement: ~a == -a - 1
    raise ModError("mod", str(a), "a boolean (a comparison) or an integer after ~")


def _both(a, b, op: str) -> bool:
    """Whether ``a`` and ``b`` are both booleans (False: both numbers); a boolean against a number is a
    ModError (sympy would compare them structurally: ``Eq(q_idx < 8, 1)`` is False)."""
    ba, bb = _is_bool(a), _is_bool(b)
    if ba != bb:
        raise ModError("mod", f"{a} {op} {b}", f"booleans on both sides of {op}, or numbers on both sides")
    return ba


def _eq(a, b):
    """``a == b``: sympy's Eq of numbers; of booleans, the same truth as And/Or/Not of them (an Eq of
    two relations is no relation the analyses, the printers or the NumPy/torch evaluations take)."""
    if _both(a, b, "=="):
        return sympy.Or(sympy.And(a, b), sympy.And(sympy.Not(a), sympy.Not(b)))
    return sympy.Eq(a, b)


def _ne(a, b):
    """``a != b``: sympy's Ne of numbers; of booleans, their exclusive or as And/Or/Not."""
    if _both(a, b, "!="):
        return sympy.Or(sympy.And(a, sympy.Not(b)), sympy.And(sympy.Not(a), b))
    return sympy.Ne(a, b)


def _where(c, a, b):
    """``a`` where ``c`` else ``b``: a Piecewise of numbers; of two booleans, (c & a) | (~c & b)."""
    c = _sym(c, "where's condition")
    if not _is_bool(c):
        raise ModError("mod", str(c), "a boolean condition (a comparison) as where's first argument")
    a, b = _sym(a, "where"), _sym(b, "where")
    if _both(a, b, "where's two branches"):
        return sympy.Or(sympy.And(c, a), sympy.And(sympy.Not(c), b))
    return sympy.Piecewise((a, c), (b, True))


def _fn(f):
    def traced(*args):
        return Traced(f(*(_sym(a, f.__name__ if hasattr(f, "__name__") else "a function") for a in args)))

    return traced


def where(cond, a, b) -> Traced:
    """``a`` where ``cond`` holds, else ``b`` (elementwise; traced)."""
    return Traced(_where(cond, a, b))


exp = _fn(sympy.exp)
log = _fn(sympy.log)
tanh = _fn(sympy.tanh)
sqrt = _fn(sympy.sqrt)
floor = _fn(sympy.floor)


def minimum(a, b) -> Traced:
    """The smaller of two numbers (elementwise; traced); a boolean operand is a ModError."""
    return Traced(_apply(sympy.Min, _sym(a, "minimum"), _sym(b, "minimum"), "minimum"))


def maximum(a, b) -> Traced:
    """The larger of two numbers (elementwise; traced); a boolean operand is a ModError."""
    return Traced(_apply(sympy.Max, _sym(a, "maximum"), _sym(b, "maximum"), "maximum"))


def logical_and(a, b) -> Traced:
    return Traced(_and(_sym(a, "logical_and"), _sym(b, "logical_and")))


def logical_or(a, b) -> Traced:
    return Traced(_or(_sym(a, "logical_or"), _sym(b, "logical_or")))


def logical_not(a) -> Traced:
    return Traced(_not(_sym(a, "logical_not")))


# --- torch dispatch: FlexAttention mods written in plain torch ---------------------------------------
#
# torch's dispatch for traced mods: a FlexAttention ``score_mod``/``mask_mod`` written in plain torch.
#
# A :class:`Traced` value carries ``__torch_function__``, so torch's functions and
# tensor methods called on it (``torch.where``, ``torch.abs``, ``torch.exp2``, ``F.gelu``, ``.clamp``,
# ``.to()``, ``b.new_ones(())``...) and a captured tensor indexed by traced values (``bias[q_idx -
# kv_idx]``, ``doc_ids[b, q_idx] == doc_ids[b, kv_idx]``) reach :func:`torch_dispatch`, which builds the sympy
# expression. A captured tensor read this way becomes a parameter of the mod (:class:`Param`
# named ``<kind>_t<k>``, one per tensor object, in order of first read; a float tensor that requires grad
# gets its gradient through the torch entry points). Elementwise semantics are FlexAttention's: every
# traced value is one element (torch vmaps the mods over b, h, q_idx, kv_idx).
#
# Accepted: arithmetic, comparisons, logic, ``where``, ``abs``, ``clamp``/``clip``/``clamp_min``/
# ``clamp_max``, ``minimum``/``maximum``, ``exp``, ``exp2`` (2**x), ``expm1``, ``log``, ``log2``,
# ``log10``, ``log1p``, ``tanh``, ``sigmoid`` (1/(1+e⁻ˣ)), ``relu``, ``gelu`` (exact x·(1+erf(x/√2))/2
# and ``approximate="tanh"``: x·(1+tanh(√(2/π)(x+0.044715x³)))/2, torch's own forms), ``sqrt``,
# ``rsqrt``, ``square``, ``reciprocal``, ``floor``, ``ceil``, ``//``, ``%``, ``& | ^ ~ << >>`` on
# integers, ``new_ones``/``new_zeros``/``new_full``/``ones_like``/``zeros_like``/``full_like`` of a
# scalar, dtype conversions, and reads of captured tensors of any dtype and rank (a read of all but the
# last index gives a row: indexed further, or a short vector for elementwise operators, any/all/sum and
# torch.dot, unrolled). Anything else is a :class:`ModError` naming the torch
# operation; :func:`trace` adds the mod's name.


def _torch():
    import torch

    return torch


def torch_op_name(func) -> str:
    """A readable name of a torch callable (``torch.abs``, ``torch.nn.functional.gelu``,
    ``Tensor.clamp``, ``approx.tanh`` for a custom op)."""
    qualified = getattr(func, "_qualified_op_name", None)
    if qualified:
        return str(qualified).replace("::", ".")
    name = getattr(func, "__name__", None) or repr(func)
    qual = str(getattr(func, "__qualname__", name))
    module = getattr(func, "__module__", None) or ""
    if qual.startswith(("TensorBase.", "_TensorBase.", "Tensor.")):
        return "Tensor." + name
    if qual.startswith("_VariableFunctionsClass.") or module == "torch":
        return "torch." + name
    for private, public in (("torch._C._nn", "torch.nn.functional"), ("torch._C._special", "torch.special"), ("torch._C._linalg", "torch.linalg")):
        if module == private:
            return f"{public}.{name}"
    return f"{module}.{qual}" if module else qual


def _trefuse(what: str, accepted: str) -> ModError:
    return ModError("mod", what, accepted)


# --- values -------------------------------------------------------------------------------------------


def _tsym(x: Any, func: str) -> Any:
    """A sympy expression for an operand of ``func``: a traced value, a Python number or bool, or a
    0-d tensor without grad (its value). A whole tensor is refused: a mod reads tensors element-wise,
    at index expressions."""
    if isinstance(x, Traced):
        return x.expr
    if isinstance(x, _Row):
        raise _trefuse(f"{func} of a row of the captured tensor {x.param.name}", "a read at one element (index every dimension)")
    torch = _torch()
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 and not x.requires_grad:
            v = x.item()
            return _sym(v, func)
        raise _trefuse(f"{func} of a whole tensor of shape {list(x.shape)}", "tensors read at index expressions of b, h, q_idx, kv_idx (t[q_idx - kv_idx]); a 0-d tensor without grad as a constant")
    if isinstance(x, (int, float, bool, sympy.Basic)):
        return _sym(x, func)
    try:
        import numpy as np

        if isinstance(x, np.generic):
            return _sym(x, func)
    except ImportError:  # pragma: no cover
        pass
    raise _trefuse(f"{func} of a {type(x).__name__}", "traced values, numbers and captured tensors read at index expressions")


def _ttraced(x: Any, func: str) -> Traced:
    return x if isinstance(x, Traced) else Traced(_tsym(x, func))


# --- captured tensors ----------------------------------------------------------------------------------


class _Capture:
    """The captured tensors of one trace: tensor object → :class:`~tilegen.core.mods.Param`."""

    def __init__(self, kind: str):
        self.kind = kind
        self.params: dict[int, Param] = {}
        self.keep: list = []  # the tensors, so that ids stay unique while tracing

    def param(self, tensor) -> Param:
        p = self.params.get(id(tensor))
        if p is None:
            name = f"{self.kind}_t{len(self.params)}"
            p = Param(name, tensor)
            p.boolean = tensor.dtype == _torch().bool  # its reads are booleans (stored as int32 0/1)
            self.params[id(tensor)] = p
            self.keep.append(tensor)
        return p


_CAPTURE: _Capture | None = None  # set by trace() while a function is traced


class _VecOps:
    """Elementwise operators of a short vector along a captured tensor's last dimension (:class:`_Row`,
    :class:`_Vec`): the result is a :class:`_Vec`; ``any``/``all``/``sum`` over it and ``torch.dot`` of
    two give a traced value (attention-gym's VSA compares a row of top-k tile ids with the key's tile;
    MLA-RoPE takes a dot product of two rows)."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        fn = getattr(_torch().Tensor, name, None)
        if fn is None or not callable(fn):
            raise AttributeError(name)
        return lambda *args, **kwargs: torch_dispatch(fn, (self,) + args, kwargs)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return torch_dispatch(func, args, kwargs or {})

    def __bool__(self):
        raise _trefuse("a Python branch on a row of a captured tensor", "where(), any(), all() on traced values")

    __hash__ = None  # type: ignore[assignment]


def _vec_dunder(name):
    def f(self, other):
        return _vec_op(_BINARY[name], name, self, other)

    f.__name__ = name
    return f


class _Row(_VecOps):
    """A read of a captured tensor at its leading indices (``intervals[image_idx]``); indexing it
    further gives the element (``interval[0]``); with one dimension left it is also a vector."""

    __slots__ = ("index", "param")

    def __init__(self, param: Param, index: tuple):
        self.param, self.index = param, index

    def __getitem__(self, idx):
        return _tread(self.param, self.index + _index_tuple(idx, self.param))

    def items(self, what: str) -> list:
        shape = self.param.decl.shape
        if len(self.index) != len(shape) - 1:
            raise _trefuse(f"{what} of {self.param.name} read with {len(self.index)} of its {len(shape)} indices", "a row: every index but the last")
        return [_tread(self.param, self.index + (sympy.Integer(i),)) for i in range(int(shape[-1]))]


class _Vec(_VecOps):
    """A short vector of traced values (the result of an elementwise operation on a row)."""

    __slots__ = ("values",)

    def __init__(self, values: list):
        self.values = list(values)

    def items(self, what: str) -> list:
        return self.values

    def __getitem__(self, idx):
        e = _tsym(idx, "an index of a vector")
        if not e.is_Integer or not -len(self.values) <= int(e) < len(self.values):
            raise _trefuse(f"Tensor.__getitem__ of a vector at {e}", f"a constant index in -{len(self.values)}..{len(self.values) - 1}")
        return self.values[int(e)]


def _vec_items(x, what: str):
    """The elements of a vector operand (a row or a vector), or None for a scalar."""
    return x.items(what) if isinstance(x, _VecOps) else None


def _vec_op(fn, name: str, a, b):
    va, vb = _vec_items(a, name), _vec_items(b, name)
    if va is not None and vb is not None and len(va) != len(vb) and 1 not in (len(va), len(vb)):
        raise _trefuse(f"{name} of vectors of {len(va)} and {len(vb)} elements", "vectors of one length (or one element)")
    n = max(len(va) if va is not None else 1, len(vb) if vb is not None else 1)

    def at(v, x, i):
        if v is None:
            return _ttraced(x, name)
        return v[i if len(v) > 1 else 0]

    return _Vec([fn(at(va, a, i), at(vb, b, i)) for i in range(n)])


def _vec_reduce(name: str, x, kwargs: dict, args: tuple):
    dim = kwargs.get("dim", args[0] if args else None)
    if dim not in (None, -1, 0) and not (isinstance(dim, (tuple, list)) and list(dim) in ([-1], [0])):
        raise _trefuse(f"Tensor.{name} over dim={dim}", "a reduction over the vector's one dimension (dim=-1)")
    items = x.items(name)
    if name == "sum":
        return functools.reduce(operator.add, items)
    fn = operator.or_ if name == "any" else operator.and_
    return functools.reduce(fn, [Traced(_as_bool(t.expr)) for t in items])


def _index_tuple(idx, param) -> tuple:
    idx = idx if isinstance(idx, tuple) else (idx,)
    out = []
    for x in idx:
        if x is None or x is Ellipsis or isinstance(x, slice):
            raise _trefuse(f"Tensor.__getitem__ of {param.name} with {x!r}", "indices that are integers or integer expressions of b, h, q_idx, kv_idx (no slice, None or ...)")
        out.append(_tsym(x, f"an index of {param.name}"))
    return tuple(out)


def _tread(param: Param, index: tuple):
    """``param[index]``: the element (a Traced) when every dimension is indexed, else a :class:`_Row`.
    A negative constant index counts from the end, as torch's."""
    shape = param.decl.shape
    if len(index) > len(shape):
        raise _trefuse(f"Tensor.__getitem__ of {param.name} with {len(index)} indices", f"at most {len(shape)} indices (its shape is {list(shape)})")
    fixed = []
    for d, e in enumerate(index):
        if _is_bool(e) or not (e.is_integer or e.is_Integer):
            raise _trefuse(f"Tensor.__getitem__ of {param.name} at {e}", "integer index expressions (// for division, .long() of an integer)")
        if e.is_Integer and int(e) < 0:
            e = sympy.Integer(int(e) + int(shape[d]))
        fixed.append(e)
    if len(fixed) < len(shape):
        return _Row(param, tuple(fixed))
    if _TRACING is not None:
        _TRACING.append(param)
    e = param.base[tuple(fixed)] if len(fixed) > 1 else param.base[fixed[0]]
    return Traced(sympy.Ne(e, 0) if getattr(param, "boolean", False) else e)


def _tgetitem(tensor, idx):
    torch = _torch()
    if isinstance(tensor, Traced):
        raise _trefuse(f"Tensor.__getitem__ of the traced value {tensor.expr}", "indexing captured tensors, not traced values")
    if not isinstance(tensor, torch.Tensor):
        raise _trefuse(f"Tensor.__getitem__ of a {type(tensor).__name__}", "captured tensors read at index expressions")
    if _CAPTURE is None:
        raise _trefuse("Tensor.__getitem__ outside a trace", "tilegen.mods.trace")
    p = _CAPTURE.param(tensor)
    return _tread(p, _index_tuple(idx, p))


# --- the operations -----------------------------------------------------------------------------------

_BINARY = {
    "add": operator.add, "__add__": operator.add, "__radd__": lambda a, b: b + a, "__iadd__": operator.add,
    "sub": operator.sub, "subtract": operator.sub, "__sub__": operator.sub, "__rsub__": lambda a, b: b - a, "__isub__": operator.sub,
    "mul": operator.mul, "multiply": operator.mul, "__mul__": operator.mul, "__rmul__": lambda a, b: b * a, "__imul__": operator.mul,
    "true_divide": operator.truediv, "__truediv__": operator.truediv, "__rtruediv__": lambda a, b: b / a, "__itruediv__": operator.truediv, "__div__": operator.truediv, "__rdiv__": lambda a, b: b / a,
    "floor_divide": operator.floordiv, "__floordiv__": operator.floordiv, "__rfloordiv__": lambda a, b: b // a, "__ifloordiv__": operator.floordiv,
    "remainder": operator.mod, "__mod__": operator.mod, "__rmod__": lambda a, b: b % a, "__imod__": operator.mod,
    "pow": operator.pow, "__pow__": operator.pow, "__rpow__": lambda a, b: b ** a, "float_power": operator.pow,
    "eq": operator.eq, "__eq__": operator.eq, "ne": operator.ne, "__ne__": operator.ne, "not_equal": operator.ne,
    "lt": operator.lt, "__lt__": operator.lt, "less": operator.lt, "le": operator.le, "__le__": operator.le, "less_equal": operator.le,
    "gt": operator.gt, "__gt__": operator.gt, "greater": operator.gt, "ge": operator.ge, "__ge__": operator.ge, "greater_equal": operator.ge,
    "bitwise_and": operator.and_, "__and__": operator.and_, "__rand__": lambda a, b: b & a, "__iand__": operator.and_,
    "bitwise_or": operator.or_, "__or__": operator.or_, "__ror__": lambda a, b: b | a, "__ior__": operator.or_,
    "bitwise_xor": operator.xor, "__xor__": operator.xor, "__rxor__": lambda a, b: b ^ a, "__ixor__": operator.xor,
    "bitwise_left_shift": operator.lshift, "__lshift__": operator.lshift, "__rlshift__": lambda a, b: b << a,
    "bitwise_right_shift": operator.rshift, "__rshift__": operator.rshift, "__rrshift__": lambda a, b: b >> a,
    "minimum": lambda a, b: minimum(a, b), "fmin": lambda a, b: minimum(a, b),
    "maximum": lambda a, b: maximum(a, b), "fmax": lambda a, b: maximum(a, b),
}


def _logical(fn):
    def f(a, b):
        return Traced(fn(_as_bool(a.expr), _as_bool(b.expr)))

    return f


def _as_bool(e):
    return e if _is_bool(e) else _apply(lambda x, _: sympy.Ne(x, 0), e, None, "bool()")


_BINARY.update({
    "logical_and": _logical(sympy.And), "logical_or": _logical(sympy.Or),
    "logical_xor": _logical(lambda a, b: _ne(a, b)),
})

for _name in _BINARY:
    if _name.startswith("__"):
        setattr(_VecOps, _name, _vec_dunder(_name))

_GELU_TANH_C = math.sqrt(2.0 / math.pi)


def _real(e):
    """``e`` as a real number: a boolean is refused (torch would make it 0/1; say so)."""
    if _is_bool(e):
        raise _trefuse(str(e), "a number, not a boolean (torch.where(cond, 1.0, 0.0) for 0/1)")
    return e


def _unary_fns():
    f = sympy.Float
    return {
        "abs": sympy.Abs, "absolute": sympy.Abs, "__abs__": sympy.Abs,
        "neg": lambda x: -x, "negative": lambda x: -x, "__neg__": lambda x: -x,
        "exp": sympy.exp, "exp2": lambda x: sympy.Integer(2) ** x, "expm1": lambda x: sympy.exp(x) - 1,
        "log": sympy.log, "log2": lambda x: sympy.log(x) / f(math.log(2.0)), "log10": lambda x: sympy.log(x) / f(math.log(10.0)),
        "log1p": lambda x: sympy.log(1 + x),
        "tanh": sympy.tanh, "sigmoid": lambda x: 1 / (1 + sympy.exp(-x)), "expit": lambda x: 1 / (1 + sympy.exp(-x)),
        "special_expit": lambda x: 1 / (1 + sympy.exp(-x)),
        "relu": lambda x: sympy.Max(x, 0),
        "sqrt": sympy.sqrt, "rsqrt": lambda x: 1 / sympy.sqrt(x), "square": lambda x: x**2, "reciprocal": lambda x: 1 / x,
        "floor": sympy.floor, "ceil": lambda x: -sympy.floor(-x),
        "gelu": lambda x: x * (1 + sympy.erf(x * f(1 / math.sqrt(2.0)))) / 2,
        "gelu_tanh": lambda x: x * (1 + sympy.tanh(f(_GELU_TANH_C) * (x + f(0.044715) * x**3))) / 2,
    }


_UNARY = _unary_fns()
_IDENTITY = {"contiguous", "clone", "detach", "requires_grad_", "float", "double", "half", "bfloat16", "positive", "__pos__"}
_INT_CASTS = {"int", "long", "short", "char", "byte"}


def _cast(x: Traced, dtype, name: str) -> Traced:
    torch = _torch()
    e = x.expr
    if dtype is None:
        return x
    if dtype == torch.bool:
        return Traced(_as_bool(e))
    if dtype.is_floating_point:
        return Traced(sympy.Piecewise((sympy.Float(1.0), e), (sympy.Float(0.0), True)) if _is_bool(e) else e)
    # an integer dtype
    if _is_bool(e):
        return Traced(sympy.Piecewise((sympy.Integer(1), e), (sympy.Integer(0), True)))
    if e.is_integer:
        return x
    raise _trefuse(f"{name} to {dtype} of {e}", "an integer conversion of an integer-valued expression (torch truncates towards zero: use torch.floor or // first)")


def _dtype_of(args, kwargs):
    torch = _torch()
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.Tensor):
            dtype = a.dtype
        elif isinstance(a, Traced):
            dtype = None  # type_as a traced value: its kind is already the expression's
    return dtype


def _scalar(value, dtype) -> Traced:
    torch = _torch()
    if dtype == torch.bool:
        return Traced(sympy.true if value else sympy.false)
    return Traced(_sym(value, "a constant"))


def _size_ok(size, name):
    if size in ((), [], None) or (isinstance(size, (tuple, list)) and all(int(s) == 1 for s in size)):
        return
    if isinstance(size, int) and size == 1:
        return
    raise _trefuse(f"{name} of size {size}", "a scalar (size ()): a mod computes one element")


def torch_dispatch(func, args: tuple, kwargs: dict):
    """The traced result of the torch callable ``func`` on ``args``/``kwargs`` (some of them traced).

    Raises:
        ModError: an operation tilegen cannot express, naming it (``torch.sinh``, ``Tensor.unsqueeze``,
            the custom op ``approx.tanh``...).
    """
    torch = _torch()
    full = torch_op_name(func)
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        raise _trefuse(f"the custom op {full}", "torch operations tilegen expresses or tilegen.mods helpers; a custom op is opaque to tracing")
    name = getattr(func, "__name__", "")
    if name == "__get__":  # a property (Tensor.dtype, .shape...) of a traced value
        raise _trefuse(f"a tensor attribute of a traced value ({full})", "traced values as numbers: no .shape, .dtype or .device")
    if name == "__getitem__":
        if isinstance(args[0], _VecOps):
            return args[0][args[1]]
        return _tgetitem(args[0], args[1])
    if name == "unsqueeze" and isinstance(args[0], Traced):  # a scalar as a vector of one, to broadcast
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if dim not in (-1, 0):
            raise _trefuse(f"{full} with dim={dim}", "dim=-1 (a traced value is one element)")
        return _Vec([args[0]])
    if any(isinstance(a, _VecOps) for a in args):
        if name in _BINARY and len(args) == 2 and not kwargs:
            return _vec_op(_BINARY[name], full, args[0], args[1])
        if name in ("any", "all", "sum") and isinstance(args[0], _VecOps):
            return _vec_reduce(name, args[0], kwargs, args[1:])
        if name in ("dot", "inner", "vdot") and len(args) == 2 and all(isinstance(a, _VecOps) for a in args):
            prod = _vec_op(operator.mul, full, args[0], args[1])
            return functools.reduce(operator.add, prod.values)
        raise _trefuse(f"{full} of a vector (a row of a captured tensor)", "elementwise operators, any/all/sum over it, torch.dot of two rows, or a read at one element")
    if name in _BINARY and len(args) >= 2:
        extra = {k: v for k, v in kwargs.items() if k != "out"}
        if name in ("add", "sub", "subtract") and "alpha" in extra:
            alpha = extra.pop("alpha")
            args = (args[0], _ttraced(args[1], full) * alpha)
        if extra:
            raise _trefuse(f"{full} with {', '.join(sorted(extra))}", f"{full} of two operands")
        a, b = _ttraced(args[0], full), _ttraced(args[1], full)
        return _BINARY[name](a, b)
    if name in ("div", "divide", "__div__") and len(args) >= 2:
        mode = kwargs.get("rounding_mode")
        a, b = _ttraced(args[0], full), _ttraced(args[1], full)
        if mode is None:
            return a / b
        if mode == "floor":
            return a // b
        raise _trefuse(f"{full} with rounding_mode={mode!r}", "rounding_mode None or 'floor' (trunc rounds towards zero: use // on non-negative values)")
    if name in ("min", "max") and len(args) == 2 and not isinstance(args[1], int) and not kwargs:
        a, b = _ttraced(args[0], full), _ttraced(args[1], full)
        return minimum(a, b) if name == "min" else maximum(a, b)
    if name in ("where",) and len(args) + len(kwargs) >= 3:
        vals = list(args) + [kwargs[k] for k in ("input", "other") if k in kwargs]
        if kwargs.get("condition") is not None:
            vals = [kwargs["condition"]] + vals
        cond, a, b = vals[0], vals[1], vals[2]
        if isinstance(func, type(torch.Tensor.where)) and full.startswith("Tensor."):  # x.where(cond, y)
            a, cond, b = vals[0], vals[1], vals[2]
        return where(_ttraced(cond, full), _ttraced(a, full), _ttraced(b, full))
    if name in ("clamp", "clip", "clamp_", "clip_"):
        x = _ttraced(args[0], full)
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")
        if lo is not None:
            x = maximum(x, _ttraced(lo, full))
        if hi is not None:
            x = minimum(x, _ttraced(hi, full))
        return x
    if name in ("clamp_min", "clamp_max"):
        x, bound = _ttraced(args[0], full), _ttraced(args[1] if len(args) > 1 else kwargs.get("min", kwargs.get("max")), full)
        return maximum(x, bound) if name == "clamp_min" else minimum(x, bound)
    if name == "gelu":
        approx = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        if approx not in ("none", "tanh"):
            raise _trefuse(f"{full} with approximate={approx!r}", "approximate='none' or 'tanh'")
        x = _tsym(args[0], full)
        return Traced(_apply(lambda e, _: _UNARY["gelu" if approx == "none" else "gelu_tanh"](_real(e)), x, None, full))
    if name in ("logical_not", "bitwise_not", "__invert__"):
        e = _tsym(args[0], full)
        return Traced(_not(_as_bool(e) if name == "logical_not" else e))
    if name in _UNARY and len(args) == 1 and not {k for k, v in kwargs.items() if k not in ("out", "inplace") or (k == "inplace" and v)}:
        x = _tsym(args[0], full)
        if name in ("abs", "absolute", "__abs__", "neg", "negative", "__neg__"):
            return Traced(_apply(lambda e, _: _UNARY[name](_real(e)), x, None, full))
        return Traced(_apply(lambda e, _: _UNARY[name](_real(e)), x, None, full))
    if name in _IDENTITY:
        x = _ttraced(args[0], full)
        return _cast(x, torch.float32, full) if name in ("float", "double", "half", "bfloat16") else x
    if name in _INT_CASTS:
        return _cast(_ttraced(args[0], full), torch.int64, full)
    if name == "bool":
        return _cast(_ttraced(args[0], full), torch.bool, full)
    if name in ("to", "type", "type_as"):
        x = _ttraced(args[0], full)
        dtype = _dtype_of(args[1:], kwargs)
        if isinstance(dtype, str) or (dtype is not None and not isinstance(dtype, torch.dtype)):
            raise _trefuse(f"{full} to {dtype!r}", "a torch dtype")
        return _cast(x, dtype, full)
    if name in ("new_ones", "new_zeros", "new_full", "new_empty"):
        size = args[1] if len(args) > 1 else kwargs.get("size", ())
        _size_ok(size, full)
        if name == "new_full":
            value = args[2] if len(args) > 2 else kwargs.get("fill_value")
        elif name == "new_empty":
            raise _trefuse(full, "new_ones, new_zeros or new_full (an empty tensor has no value)")
        else:
            value = 1 if name == "new_ones" else 0
        return _scalar(value, kwargs.get("dtype"))
    if name in ("ones_like", "zeros_like", "full_like"):
        value = {"ones_like": 1, "zeros_like": 0}.get(name, args[1] if len(args) > 1 else kwargs.get("fill_value"))
        return _scalar(value, kwargs.get("dtype"))
    raise _trefuse(full, "torch operations tilegen expresses or tilegen.mods helpers: arithmetic, comparisons, where, abs, clamp, minimum/maximum, exp, exp2, log, log2, tanh, "
                 "sigmoid, gelu, sqrt, floor, // % & | ^ ~ << >> on integers, new_ones/new_zeros/ones_like, captured tensors read at index expressions")


def torch_method(x: Traced, name: str):
    """``x.name`` for a tensor method ``name``, as a callable routed through :func:`torch_dispatch`."""
    torch = _torch()
    fn = getattr(torch.Tensor, name, None)
    if fn is None or not callable(fn):
        raise AttributeError(f"'Traced' object has no attribute {name!r} (a traced value stands for one element of a tensor)")

    def call(*args, **kwargs):
        return torch_dispatch(fn, (x,) + args, kwargs)

    return call


# --- the Mod object ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mod:
    """A score mod (``kind="score"``: an expression of ``score``) or a mask mod (``kind="mask"``: a
    boolean expression, plus a window (left, right) that the spec's window fast path takes).

    ``params`` maps each parameter name to its :class:`Param` (arrays bound at run time). A Mod is
    callable with (traced) arguments, so built-ins compose inside user-written mods.
    """

    kind: str
    expr: Any
    params: tuple = ()
    window: tuple[int, int] = (-1, -1)

    def __call__(self, *args):
        if _TRACING is not None:
            _TRACING.extend(self.params)
        if self.kind == "score":
            names = (SCORE,) + INDEX_SYMBOLS
        else:
            names = INDEX_SYMBOLS
        if len(args) != len(names):
            raise ModError(f"{self.kind}_mod", f"{len(args)} arguments", f"{len(names)} arguments ({', '.join(map(str, names))})")
        expr = self.expr
        if self.kind == "mask" and self.window != (-1, -1):
            expr = sympy.And(expr, window_expr(self.window))
        mapping = {s: _sym(a, "an argument") for s, a in zip(names, args)}
        return Traced(expr.xreplace(mapping))

    def __and__(self, other: "Mod") -> "Mod":
        if not (isinstance(other, Mod) and self.kind == other.kind == "mask"):
            raise ModError("mask_mod", type(other).__name__, "two mask mods on either side of &")
        expr = sympy.And(self.expr, other.expr)
        return Mod("mask", expr, _merge_params(self.params, other.params), intersect_windows(self.window, other.window))


def _merge_params(a: tuple, b: tuple) -> tuple:
    out = {p.name: p for p in a}
    for p in b:
        if p.name in out and out[p.name] is not p:
            raise ModError("param", p.name, "distinct names for distinct parameter arrays")
        out[p.name] = p
    return tuple(out[k] for k in sorted(out))


def intersect_windows(w1: tuple[int, int], w2: tuple[int, int]) -> tuple[int, int]:
    def side(a, b):
        if a < 0:
            return b
        if b < 0:
            return a
        return min(a, b)

    return (side(w1[0], w2[0]), side(w1[1], w2[1]))


def window_expr(window: tuple[int, int]):
    """DESIGN §3's window as a mask expression (bottom-right alignment: off = Sk - Sq)."""
    left, right = window
    conds = [sympy.true]
    if left >= 0:
        conds.append(KV_IDX >= Q_IDX + Sk - Sq - left)
    if right >= 0:
        conds.append(KV_IDX <= Q_IDX + Sk - Sq + right)
    return sympy.And(*conds)


_TRACING: list | None = None  # the Params read while a function is traced


def _collect_params(expr, known: Mapping[str, Param]) -> tuple:
    names = {str(x.base.label) for x in expr.atoms(sympy.Indexed)}
    return tuple(known[n] for n in sorted(names))


def trace(fn: Any, kind: str) -> Mod:
    """A :class:`Mod` from ``fn``: a Mod (returned as is), or a Python function traced with symbolic
    arguments (``score_mod(score, b, h, q_idx, kv_idx)``, ``mask_mod(b, h, q_idx, kv_idx)``).

    Raises:
        ModError: a branch on a traced value, an unknown construct, a mask that is not boolean, a
            score mod that is boolean, an argument count that does not match.
    """
    field = f"{kind}_mod"
    if isinstance(fn, Mod):
        if fn.kind != kind:
            raise ModError(field, f"a {fn.kind} mod", f"a {kind} mod (tilegen.mods built-ins: {_BUILTINS[kind]})")
        return fn
    if not callable(fn):
        raise ModError(field, type(fn).__name__, f"a function {_SIGNATURE[kind]} or a tilegen.mods built-in")
    args = ((Traced(SCORE),) if kind == "score" else ()) + tuple(Traced(s) for s in INDEX_SYMBOLS)
    global _TRACING, _CAPTURE
    params: dict[str, Param] = {}
    read: list = []
    _TRACING = read
    outer = _CAPTURE
    _CAPTURE = _Capture(kind)
    name = getattr(fn, "__name__", "function")
    try:
        out = fn(*args)
    except ModError as exc:
        raise ModError(field, name, f"{exc.accepted} (at {exc.value})") from None
    except (IndexError, KeyError) as exc:
        raise ModError(field, name, f"reads of arrays at index expressions (a captured tensor, or tilegen.mods.param(name, array)) ({_first_line(exc)})") from None
    except AttributeError as exc:  # an attribute that is no tensor method
        raise ModError(field, name, f"torch operations and tilegen.mods helpers on traced values ({_first_line(exc)})") from None
    except (TypeError, ValueError, ArithmeticError, RuntimeError) as exc:
        raise ModError(field, name, f"a function {_SIGNATURE[kind]} of torch operations tilegen expresses, or of tilegen.mods helpers ({_first_line(exc)})") from None
    finally:
        _TRACING = None
        _CAPTURE = outer
    if isinstance(out, _VecOps):
        raise ModError(field, name, "one value per (b, h, q_idx, kv_idx): reduce a row of a captured tensor with any(), all() or sum(), or read one element (at a vector result)")
    for p in read + closure_params(fn):
        if p.name in params and params[p.name] is not p:
            raise ModError("param", p.name, "distinct names for distinct parameter arrays")
        params[p.name] = p
    expr = _sym(out, f"the result of {field}")
    if expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise ModError(field, str(expr), "finite arithmetic (no division by zero, no infinite constant)")
    if kind == "mask" and not _is_bool(expr):
        raise ModError(field, str(expr), "a boolean result (comparisons combined with &, |, ~)")
    if kind == "score" and _is_bool(expr):
        raise ModError(field, str(expr), "a number (a score), not a boolean: masks go in mask_mod")
    for ix in expr.atoms(sympy.Indexed):
        if str(ix.base.label) not in params:
            raise ModError(field, str(ix.base.label), "parameters created with tilegen.mods.param(name, array) and read inside the function")
    mod = Mod(kind, expr, _collect_params(expr, params))
    if len(TRACED) >= 256:
        TRACED.clear()
    TRACED[id(fn)] = (fn, mod)
    return mod


TRACED: dict[int, tuple] = {}  # id(function) -> (function, its latest traced Mod): the captured tensors' arrays


def traced_params(fn, kind: str) -> tuple:
    """The :class:`Param` objects of ``fn``'s latest trace as a ``kind`` mod (captured tensors
    included), tracing it again when that trace is no longer held."""
    if isinstance(fn, Mod):
        return fn.params
    hit = TRACED.get(id(fn))
    return hit[1].params if hit is not None and hit[0] is fn else trace(fn, kind).params


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def closure_params(fn) -> list[Param]:
    """Params a function can read: its closure cells, its globals and its defaults (one level into
    built-in Mods it closes over)."""
    found: list[Param] = []
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _cell_ok(c)]
    code = getattr(fn, "__code__", None)
    if code is not None:
        g = getattr(fn, "__globals__", {})
        cells += [g[n] for n in code.co_names if n in g]
    cells += list(getattr(fn, "__defaults__", None) or ())
    for value in cells:
        if isinstance(value, Param):
            found.append(value)
        elif isinstance(value, Mod):
            found.extend(value.params)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, Param))
    return found


def _cell_ok(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


_SIGNATURE = {"score": "score_mod(score, b, h, q_idx, kv_idx)", "mask": "mask_mod(b, h, q_idx, kv_idx)"}
_BUILTINS = {"score": "softcap, alibi, relative_bias", "mask": "document, prefix_lm, causal, sliding_window"}


# --- built-ins ---------------------------------------------------------------------------------------


def _as_param(name: str, array: Any, shapes: tuple[str, ...]) -> Param:
    """``array`` as the parameter ``name`` of a built-in, declared with the built-in's shape ``shapes``
    (expressions of the sizes; a leading ``B`` for the per-batch form of one more dimension), so that an
    array of the wrong size is refused against the problem's sizes (:func:`check_param_arrays`) rather
    than read out of range. A :class:`Param` passed in keeps its own declaration."""
    if isinstance(array, Param):
        return array
    p = Param(name, array)
    extra = len(p.decl.shape) - len(shapes)
    if extra in (0, 1):
        dims = ("B",) * extra + tuple(shapes)
        p.decl = dataclasses.replace(p.decl, shape=tuple(sympy.sympify(d, locals=SIZE_SYMBOLS) for d in dims))
    return p


def softcap(cap: float) -> Mod:
    """Gemma-2's logit soft-capping on the scaled score: score′ = cap·tanh(score/cap); cap > 0
    (Gemma-2: 50, transformers ``Gemma2Config.attn_logit_softcapping``)."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not (float(cap) > 0 and math.isfinite(cap)):
        raise ModError("softcap", cap, "a finite number > 0")
    c = sympy.Integer(int(cap)) if float(cap).is_integer() else sympy.Float(float(cap))
    return Mod("score", c * sympy.tanh(SCORE / c))


def alibi(slopes: Any) -> Mod:
    """ALiBi by FlashAttention's convention: score′ = score − slope·|q_idx + Sk − Sq − kv_idx| with
    ``slopes`` fp32 [Hq] (one per query head) or [B, Hq] (Press et al. 2022; flash_attn
    ``alibi_slopes``). Learnable: its gradient is returned."""
    p = _as_param("alibi_slopes", slopes, ("Hq",))
    nd = len(p.decl.shape)
    if nd not in (1, 2) or p.decl.dtype != "fp32":
        raise ModError("alibi_slopes", list(p.decl.shape), "a float array of shape [Hq] or [B, Hq]")
    slope = p.base[H_IDX] if nd == 1 else p.base[B_IDX, H_IDX]
    return Mod("score", SCORE - slope * sympy.Abs(Q_IDX + Sk - Sq - KV_IDX), (p,))


def relative_bias(table: Any) -> Mod:
    """A learned relative-position bias: score′ = score + table[h, q_idx − kv_idx + Sk − 1] with
    ``table`` fp32 [Hq, Sq + Sk − 1] (one entry per head and distance)."""
    p = _as_param("rel_bias", table, ("Hq", "Sq + Sk - 1"))
    if len(p.decl.shape) != 2 or p.decl.dtype != "fp32":
        raise ModError("rel_bias", list(p.decl.shape), "a float array of shape [Hq, Sq + Sk - 1]")
    return Mod("score", SCORE + p.base[H_IDX, Q_IDX - KV_IDX + Sk - 1], (p,))


def document(doc_ids: Any, doc_ids_kv: Any = None) -> Mod:
    """A document (packed-batch) mask: key visible iff doc[q_idx] == doc_kv[kv_idx]; ``doc_ids`` int
    [S] or [B, S] (one id per token; ``doc_ids_kv`` defaults to the same array when Sq == Sk)."""
    pq = _as_param("doc", doc_ids, ("Sq",))
    pk = pq if doc_ids_kv is None else _as_param("doc_kv", doc_ids_kv, ("Sk",))
    for p in {id(pq): pq, id(pk): pk}.values():
        if len(p.decl.shape) not in (1, 2) or p.decl.dtype != "int32":
            raise ModError(p.name, list(p.decl.shape), "an integer array of shape [S] or [B, S]")

    def at(p, idx):
        return p.base[idx] if len(p.decl.shape) == 1 else p.base[B_IDX, idx]

    params = (pq,) if pk is pq else (pq, pk)
    return Mod("mask", sympy.Eq(at(pq, Q_IDX), at(pk, KV_IDX)), params)


def prefix_lm(prefix_len: Any) -> Mod:
    """Prefix-LM: keys in the prefix [0, prefix_len) are visible to every query, the rest causally
    (bottom-right): kv_idx < prefix_len | kv_idx <= q_idx + Sk − Sq. ``prefix_len`` an int, or an int
    array [B] (one prefix per batch row)."""
    if isinstance(prefix_len, (int, np.integer)) and not isinstance(prefix_len, bool):
        if prefix_len < 0:
            raise ModError("prefix_len", prefix_len, "an integer >= 0 or an integer array [B]")
        n, params = sympy.Integer(int(prefix_len)), ()
    else:
        p = _as_param("prefix_len", prefix_len, ("B",))
        if len(p.decl.shape) != 1 or p.decl.dtype != "int32":
            raise ModError("prefix_len", list(p.decl.shape), "an integer >= 0 or an integer array [B]")
        n, params = p.base[B_IDX], (p,)
    return Mod("mask", sympy.Or(KV_IDX < n, KV_IDX <= Q_IDX + Sk - Sq), params)


def causal() -> Mod:
    """The causal mask (bottom-right when Sq != Sk): the spec's window (-1, 0)."""
    return Mod("mask", sympy.true, (), (-1, 0))


def sliding_window(left: int, right: int = 0) -> Mod:
    """DESIGN §3's window (left, right), -1 for unbounded: the spec's window fast path."""
    for name, v in (("left", left), ("right", right)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < -1:
            raise ModError(name, v, "an integer >= 0, or -1 for unbounded")
    return Mod("mask", sympy.true, (), (int(left), int(right)))


# --- text --------------------------------------------------------------------------------------------

_RESERVED = {"score", "b", "h", "q_idx", "kv_idx", "where", *SIZE_SYMBOLS, *FUNCTIONS, "True", "False"}


def parse(text: str, kind: str, params: Mapping[str, ParamDecl]) -> Any:
    """The expression of ``text`` in the mod language (a score mod when ``kind == "score"``).

    Raises:
        ModError: a syntax error, an unknown name or function, a parameter read with the wrong number
            of indices or a non-integer index, ``score`` in a mask mod, a boolean score mod.
    """
    field = f"{kind}_mod"
    if not isinstance(text, str) or not text.strip():
        raise ModError(field, text, "a non-empty expression string")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ModError(field, text, f"an expression of the mod language ({exc.msg} at column {exc.offset})") from None
    names: dict[str, Any] = {"b": B_IDX, "h": H_IDX, "q_idx": Q_IDX, "kv_idx": KV_IDX, **SIZE_SYMBOLS}
    if kind == "score":
        names["score"] = SCORE
    conv = _Converter(field, text, names, params)
    expr = conv.visit(tree.body)
    if kind == "mask" and not _is_bool(expr):
        raise ModError(field, text, "a boolean expression (comparisons combined with &, |, ~)")
    if kind == "score" and _is_bool(expr):
        raise ModError(field, text, "a number (the new score), not a boolean")
    return expr


_BIN_SIGNS = {"Add": "+", "Sub": "-", "Mult": "*", "Div": "/", "FloorDiv": "//", "Mod": "%", "Pow": "**", "BitAnd": "&", "BitOr": "|"}
_COMPARE_SIGNS = {"Lt": "<", "LtE": "<=", "Gt": ">", "GtE": ">=", "Eq": "==", "NotEq": "!="}


class _Converter:
    def __init__(self, field, text, names, params):
        self.field, self.text, self.names, self.params = field, text, names, params

    def fail(self, what: str, accepted: str):
        raise ModError(self.field, self.text, f"{accepted} (found {what})")

    def visit(self, node):
        method = getattr(self, "v_" + type(node).__name__, None)
        if method is None:
            self.fail(f"the Python construct {type(node).__name__}", "the mod language: numbers, names, + - * / // % **, comparisons, & | ~, and/or/not, where(), a if c else b, exp log tanh abs min max floor sqrt, param[index]")
        return method(node)

    def v_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            return sympy.true if v else sympy.false
        if isinstance(v, int):
            return sympy.Integer(v)
        if isinstance(v, float) and math.isfinite(v):
            return sympy.Float(v)
        self.fail(repr(v), "finite numbers")

    def v_Name(self, node):
        if node.id in self.names:
            return self.names[node.id]
        if node.id in ("True", "False"):
            return sympy.true if node.id == "True" else sympy.false
        if node.id in self.params:
            self.fail(f"the parameter {node.id} without an index", f"{node.id}[index, ...]")
        if node.id == "score":
            self.fail("score", "no score in a mask mod (masks depend on b, h, q_idx, kv_idx and parameters)")
        known = sorted(set(self.names) | set(self.params))
        self.fail(f"the unknown name {node.id!r}", "the names " + ", ".join(known))

    def v_BinOp(self, node):
        a, b = self.visit(node.left), self.visit(node.right)
        op = type(node.op).__name__
        table = {
            "Add": lambda: a + b,
            "Sub": lambda: a - b,
            "Mult": lambda: a * b,
            "Div": lambda: a / b,
            "FloorDiv": lambda: sympy.floor(a / b),
            "Mod": lambda: sympy.Mod(a, b),
            "Pow": lambda: a ** b,
            "BitAnd": lambda: _and(a, b),
            "BitOr": lambda: _or(a, b),
        }
        if op not in table:
            self.fail(f"the operator {op}", "+ - * / // % ** & |")
        try:
            return _apply(lambda x, y: table[op](), a, b, _BIN_SIGNS[op])
        except ModError as exc:
            self.fail(exc.value, exc.accepted)

    def v_UnaryOp(self, node):
        a = self.visit(node.operand)
        op = type(node.op).__name__
        if op == "USub":
            try:
                return _apply(lambda x, _: -x, a, None, "unary -")
            except ModError as exc:
                self.fail(exc.value, exc.accepted)
        if op == "UAdd":
            return a
        if op in ("Invert", "Not"):
            if not _is_bool(a):
                self.fail(str(a), "a boolean after ~ / not")
            return sympy.Not(a)
        self.fail(f"the operator {op}", "-, +, ~, not")

    def v_BoolOp(self, node):
        vals = [self.visit(v) for v in node.values]
        for v in vals:
            if not _is_bool(v):
                self.fail(str(v), "booleans on both sides of and/or")
        return sympy.And(*vals) if isinstance(node.op, ast.And) else sympy.Or(*vals)

    def v_Compare(self, node):
        ops = {"Lt": sympy.Lt, "LtE": sympy.Le, "Gt": sympy.Gt, "GtE": sympy.Ge, "Eq": _eq, "NotEq": _ne}
        left = self.visit(node.left)
        out = []
        for op, right_node in zip(node.ops, node.comparators):
            name = type(op).__name__
            if name not in ops:
                self.fail(f"the comparison {name}", "< <= > >= == !=")
            right = self.visit(right_node)
            try:
                out.append(ops[name](left, right))
            except ModError as exc:
                self.fail(exc.value, exc.accepted)
            except TypeError:  # sympy orders numbers only: a boolean under < <= > >=
                self.fail(f"{left} {_COMPARE_SIGNS[name]} {right}", "numbers on both sides of < <= > >=")
            left = right
        return sympy.And(*out) if len(out) > 1 else out[0]

    def v_IfExp(self, node):
        try:
            return _where(self.visit(node.test), self.visit(node.body), self.visit(node.orelse))
        except ModError as exc:
            self.fail(exc.value, exc.accepted)

    def v_Call(self, node):
        if not isinstance(node.func, ast.Name):
            self.fail("a call of an expression", "calls of where, exp, log, tanh, abs, min, max, floor, sqrt")
        name = node.func.id
        if node.keywords:
            self.fail(f"keyword arguments to {name}", "positional arguments")
        if name == "Piecewise":  # to_text's spelling of where(): its arguments are (value, cond) tuples
            pairs = []
            for a in node.args:
                if not isinstance(a, ast.Tuple) or len(a.elts) != 2:
                    self.fail("a Piecewise argument that is not (value, cond)", "Piecewise((value, cond), ...)")
            return sympy.Piecewise(*[(self.visit(a.elts[0]), self.visit(a.elts[1])) for a in node.args])
        args = [self.visit(a) for a in node.args]
        if name == "where":
            if len(args) != 3:
                self.fail(f"where with {len(args)} arguments", "where(cond, a, b)")
            try:
                return _where(*args)
            except ModError as exc:
                self.fail(exc.value, exc.accepted)
        if name not in FUNCTIONS:
            self.fail(f"the unknown function {name!r}", "the functions where, " + ", ".join(sorted(FUNCTIONS)))
        try:
            return FUNCTIONS[name](*args)
        except ModError as exc:
            self.fail(exc.value, exc.accepted)
        except TypeError:
            self.fail(f"{name} with {len(args)} arguments", f"{name} with its usual arguments")

    def v_Tuple(self, node):
        self.fail("a tuple", "a single expression")

    def v_Subscript(self, node):
        if not isinstance(node.value, ast.Name) or node.value.id not in self.params:
            what = node.value.id if isinstance(node.value, ast.Name) else "an expression"
            self.fail(f"an index into {what}", "indices into declared parameters: " + (", ".join(sorted(self.params)) or "none declared"))
        decl = self.params[node.value.id]
        sl = node.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        idx = tuple(self.visit(e) for e in elts)
        if len(idx) != len(decl.shape):
            self.fail(f"{decl.name} with {len(idx)} indices", f"{len(decl.shape)} indices (its shape is {list(decl.shape)})")
        for e in idx:
            if not (e.is_integer or e.is_Integer):
                self.fail(f"the non-integer index {e} of {decl.name}", "integer index expressions (use // for division)")
        base = param_base(decl)
        return base[idx] if len(idx) > 1 else base[idx[0]]


def to_text(expr) -> str:
    """``expr`` in the mod language (round-trips through :func:`parse`)."""
    return sympy.sstr(expr, order="none")


# --- the compiled mods of a program ------------------------------------------------------------------


@dataclass(frozen=True)
class ParamGradTerm:
    """One read ``param[index]`` of a floating-point parameter in the score mod and its coefficient
    ∂score′/∂param[index] (an expression of ``score`` and the indices)."""

    param: str
    index: tuple
    coef: Any


@dataclass(frozen=True)
class ModSet:
    """The mods of one program, as the IR carries them (``Program.mods``).

    Attributes:
        score: score′ as an expression of ``score`` and the indices, or None (identity).
        mask: the visibility expression (boolean), or None (every key visible, before the window).
        params: the parameters the expressions read.
        dscore: ∂score′/∂score, simplified (sympy ``diff``); ``1`` when the mod only adds a bias.
        grads: one :class:`ParamGradTerm` per read of a floating-point parameter.
    """

    score: Any = None
    mask: Any = None
    params: tuple = ()

    @property
    def dscore(self):
        return _dscore(self.score)

    @property
    def grads(self) -> tuple:
        return _grads(self.score, tuple(p.name for p in self.params if p.differentiable))

    @property
    def grad_needs_score(self) -> bool:
        """Whether ∂score′/∂score or a parameter coefficient reads the unmodified score."""
        d = self.dscore
        terms = [d] + [g.coef for g in self.grads]
        return any(SCORE in sympy.sympify(t).free_symbols for t in terms)

    def param(self, name: str) -> ParamDecl:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def mask_depends(self) -> tuple[bool, bool]:
        """(depends on b, depends on h): the block table has a B (H) axis only when the mask does."""
        if self.mask is None:
            return False, False
        free = _free_indices(self.mask)
        return B_IDX in free, H_IDX in free

    @property
    def index_only_mask(self) -> bool:
        """Whether the mask reads no parameter (its block classes are known at compile time)."""
        return self.mask is not None and not self.mask.atoms(sympy.Indexed)

    def describe(self) -> dict:
        out: dict[str, Any] = {}
        if self.score is not None:
            out["score_mod"] = to_text(self.score)
            out["dscore"] = to_text(self.dscore)
        if self.mask is not None:
            out["mask_mod"] = to_text(self.mask)
        if self.params:
            out["params"] = {p.name: p.to_dict() | {"values": None} if p.values else p.to_dict() for p in self.params}
        return out


def _free_indices(expr) -> set:
    free = set(expr.free_symbols)
    for ix in expr.atoms(sympy.Indexed):
        for e in ix.indices:
            free |= set(sympy.sympify(e).free_symbols)
    return free


@lru_cache(maxsize=None)
def _dscore(score):
    if score is None:
        return sympy.Integer(1)
    return sympy.diff(score, SCORE)


@lru_cache(maxsize=None)
def _grads(score, names: tuple) -> tuple:
    if score is None:
        return ()
    out = []
    reads = sorted((ix for ix in score.atoms(sympy.Indexed) if str(ix.base.label) in names), key=sympy.default_sort_key)
    for ix in reads:
        d = sympy.Dummy("p")
        coef = sympy.diff(score.xreplace({ix: d}), d).xreplace({d: ix})
        out.append(ParamGradTerm(str(ix.base.label), tuple(ix.indices), coef))
    return tuple(out)


def modset_from_spec(spec) -> ModSet | None:
    """The :class:`ModSet` of an :class:`~tilegen.core.spec.AttentionSpec` (None when it has no mods)."""
    if not spec.score_mod and not spec.mask_mod:
        return None
    return _modset(spec.score_mod, spec.mask_mod, tuple(spec.params))


@functools.lru_cache(maxsize=128)
def _modset(score_mod: str, mask_mod: str, decls: tuple) -> ModSet:
    """The parsed mods of a spec's texts (cached: a spec's ``mods`` is read by every pass)."""
    params = {p.name: p for p in decls}
    score = parse(score_mod, "score", params) if score_mod else None
    mask = parse(mask_mod, "mask", params) if mask_mod else None
    return ModSet(score=score, mask=mask, params=decls)


# --- NumPy evaluation --------------------------------------------------------------------------------


def _gather_fn(name: str, array: np.ndarray, valid_ref: list):
    def gather(*idx):
        out_idx = []
        for d, x in enumerate(idx):
            x = np.asarray(x)
            xi = np.floor(x).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64)
            clipped = np.clip(xi, 0, array.shape[d] - 1)
            valid = valid_ref[0]
            bad = xi != clipped
            if valid is not None:
                bad = bad & valid
            if np.any(bad):
                v = int(np.broadcast_to(xi, np.shape(bad))[np.nonzero(bad)][0]) if np.ndim(bad) else int(xi)
                raise ModError(name, f"index {v} in dimension {d}", f"indices 0..{array.shape[d] - 1} (its shape is {list(array.shape)}) at every visible (query, key) pair")
            out_idx.append(clipped)
        return array[tuple(out_idx)]

    return gather


class _ElementwisePrinter(NumPyPrinter):
    """NumPy code for mod expressions: And and Or as nested binary ``numpy.logical_and/or`` calls, which
    broadcast their operands (sympy's ``logical_and.reduce`` over a tuple of operands needs them the
    same shape: a row of q_idx, a column of kv_idx and a scalar of the sizes do not stack). Printing
    them, rather than rewriting the tree into non-boolean functions, keeps every And/Or/Not nested in
    an Or, a Piecewise condition or an Eq of booleans a valid sympy expression."""

    def _binary(self, expr, fn: str) -> str:
        f = self._module_format(f"numpy.{fn}")
        return functools.reduce(lambda a, b: f"{f}({a}, {b})", (self._print(a) for a in expr.args))

    def _print_And(self, expr):
        return self._binary(expr, "logical_and")

    def _print_Or(self, expr):
        return self._binary(expr, "logical_or")

    def _print_Xor(self, expr):
        return self._binary(expr, "logical_xor")

    def _print_floor(self, expr):
        """⌊n/d⌋ of an integer n and a positive integer d as ``floor_divide(n, d)``: exact, where the
        float quotient of an expanded sum (q_idx/3 − kv_idx/3 for (q_idx − kv_idx)//3) can round
        below an integer and floor one too low."""
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if den != 1 and num.is_integer and den.is_integer and den.is_positive:
            f = self._module_format("numpy.floor_divide")
            return f"{f}({self._print(sympy.expand(num))}, {self._print(den)})"
        return f"{self._module_format('numpy.floor')}({self._print(expr.args[0])})"


@lru_cache(maxsize=None)
def _lambdified(expr):
    """(parameter names read, function of score, b, h, q_idx, kv_idx, sizes..., argument names); each
    parameter read ``p[i, j]`` is a call of the gather :data:`_CURRENT` holds for ``p``."""
    reads = sorted({str(ix.base.label) for ix in expr.atoms(sympy.Indexed)})
    fns = {n: sympy.Function(f"_g_{n}") for n in reads}
    # a read is a number (an index into another read, or an operand of a comparison): the Function
    # that replaces it is too, so the rebuilt tree stays valid
    replaced = expr.replace(lambda e: isinstance(e, sympy.Indexed), lambda e: fns[str(e.base.label)](*e.indices))
    args = [SCORE, *INDEX_SYMBOLS, *SIZE_SYMBOLS.values()]
    arg_names = ["score", "b", "h", "q_idx", "kv_idx", *SIZE_SYMBOLS]
    gathers = {f"_g_{n}": (lambda *a, _n=n: _CURRENT[_n](*a)) for n in reads}
    # lambdify's own printer settings (it builds them only when given no printer)
    printer = _ElementwisePrinter({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True, "user_functions": {k: k for k in [*gathers, *NUMPY_FUNCTIONS]}})
    return reads, sympy.lambdify(args, replaced, modules=[gathers, NUMPY_FUNCTIONS, "numpy"], printer=printer), arg_names


_CURRENT: dict[str, Callable] = {}


def evaluate(expr, *, score=None, b=0, h=0, q_idx=0, kv_idx=0, sizes: Mapping[str, int], params: Mapping[str, np.ndarray], valid=None):
    """``expr`` evaluated elementwise with NumPy broadcasting (float64 scores; bool masks).

    ``params`` maps names to arrays; indices outside an array are an error where ``valid`` (a bool
    array broadcast like the result, or None for everywhere) is True, and read clipped elsewhere.

    Raises:
        ModError: a parameter index out of range at a valid element; a missing parameter array.
    """
    reads, fn, _ = _lambdified(expr)
    valid_ref = [valid]
    for n in reads:
        if n not in params:
            raise ModError(n, None, "an array for every parameter the mods read")
        _CURRENT[n] = _gather_fn(n, np.asarray(params[n]), valid_ref)
    size_vals = [int(sizes.get(k, 1)) for k in SIZE_SYMBOLS]
    # the inputs broadcast to one shape (views): numpy.select, a Piecewise's printing, takes its
    # conditions and values of one shape
    score, b, h, q_idx, kv_idx = np.broadcast_arrays(0.0 if score is None else score, b, h, q_idx, kv_idx)
    with np.errstate(all="ignore"):
        out = fn(score, b, h, q_idx, kv_idx, *size_vals)
    return out


def check_param_arrays(mods: ModSet, arrays: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """The parameter arrays as NumPy (fp32 / int32), checked against their declarations.

    Raises:
        ModError: a missing or extra array, a wrong shape or dtype kind.
    """
    out = {}
    names = {p.name for p in mods.params}
    for extra in sorted(set(arrays) - names):
        raise ModError(extra, "an array", "arrays only for the parameters the mods read: " + (", ".join(sorted(names)) or "none"))
    for p in mods.params:
        if p.name in arrays and arrays[p.name] is not None:
            a = arrays[p.name]
        elif p.values is not None:
            a = np.asarray(p.values).reshape(p.concrete_shape(sizes))
        else:
            raise ModError(p.name, None, f"an array of shape {list(p.concrete_shape(sizes))} ({p.dtype})")
        a = np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a)
        want = p.concrete_shape(sizes)
        if tuple(a.shape) != want:
            raise ModError(p.name, list(a.shape), f"shape {list(want)} (declared {[str(d) for d in p.shape]})")
        if p.dtype == "int32":
            if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
                raise ModError(p.name, str(a.dtype), "an integer array")
            a = a.astype(np.int32)
        else:
            if not np.issubdtype(a.dtype, np.floating):
                raise ModError(p.name, str(a.dtype), "a floating-point array")
            a = a.astype(np.float32)
        out[p.name] = a
    return out


def mods_from_api(score_mod: Any, mask_mod: Any) -> tuple[str, str, tuple, tuple[int, int], dict]:
    """(score text, mask text, param decls, window from the mask mod, arrays by name) for the API.

    Raises:
        ModError: an invalid mod (see :func:`trace`).
    """
    score = trace(score_mod, "score") if score_mod is not None else None
    mask = trace(mask_mod, "mask") if mask_mod is not None else None
    params = _merge_params(score.params if score else (), mask.params if mask else ())
    window = mask.window if mask is not None else (-1, -1)
    mask_expr = mask.expr if mask is not None and mask.expr is not sympy.true else None
    score_text = to_text(score.expr) if score is not None else ""
    mask_text = to_text(mask_expr) if mask_expr is not None else ""
    decls = tuple(p.decl for p in params)
    arrays = {p.name: p.array for p in params}
    return score_text, mask_text, decls, window, arrays


def parse_param_decls(data: Any, where: str | None = None) -> tuple:
    """``[params]`` of a spec file: ``name = {shape = [...], dtype = "fp32"|"int32", values = [...]}``,
    or a generator key in place of ``values`` (``documents``, ``prefix``, ``alibi``:
    :mod:`tilegen.core.paramgen`), which sets the dtype and, when ``shape`` is absent, the shape.

    Raises:
        SpecError: a bad name, shape, dtype, values list or generator (naming ``params.NAME.KEY``).
    """
    from tilegen.core.paramgen import DTYPE_ACCEPTED, GENERATORS, SHAPE_ACCEPTED, VALUES_ACCEPTED, parse_generator

    if not isinstance(data, Mapping):
        raise SpecError("params", data, "a table of name = {shape = [...], dtype = 'fp32' | 'int32'}", where)
    out = []
    keys = ("shape", "dtype", "values", *GENERATORS)
    for name, d in data.items():
        field = f"params.{name}"
        if not isinstance(name, str) or not name.isidentifier() or name in _RESERVED:
            raise SpecError("params", name, "parameter names that are identifiers and not names of the mod language", where)
        if not isinstance(d, Mapping):
            raise SpecError(field, d, "a table {shape = [...], dtype = ...}", where)
        unknown = set(d) - set(keys)
        if unknown:
            raise SpecError(field, sorted(unknown)[0], "the keys " + ", ".join(keys), where)
        given = [k for k in ("values", *GENERATORS) if k in d]
        if len(given) > 1:
            raise SpecError(f"{field}.{given[1]}", d[given[1]], f"absent beside {given[0]} (one of values, {', '.join(GENERATORS)})", where)
        generator = None
        if given and given[0] in GENERATORS:
            kind = GENERATORS[given[0]]
            generator = parse_generator(kind.key, d[kind.key], f"{field}.{kind.key}", where)
            if d.get("dtype", kind.dtype) != kind.dtype:
                raise SpecError(f"{field}.dtype", d["dtype"], f"{kind.dtype!r} (or absent) with {kind.key}", where)
            d = {"shape": [kind.shape], "dtype": kind.dtype, **d}
            if not (isinstance(d["shape"], (list, tuple)) and len(d["shape"]) == 1):
                raise SpecError(f"{field}.shape", d["shape"], f"one size (or absent for [{kind.shape!r}]) with {kind.key}", where)
        shape = d.get("shape")
        if not isinstance(shape, (list, tuple)) or not shape:
            raise SpecError(f"{field}.shape", shape, SHAPE_ACCEPTED, where)
        dims = []
        for s in shape:
            if isinstance(s, int) and not isinstance(s, bool) and s > 0:
                dims.append(s)
                continue
            try:
                e = parse(str(s), "score", {}) if isinstance(s, str) else None
            except ModError:
                e = None
            if e is None or not e.free_symbols <= set(SIZE_SYMBOLS.values()):
                raise SpecError(f"{field}.shape", s, SHAPE_ACCEPTED, where)
            dims.append(e)
        dtype = d.get("dtype", "fp32")
        if dtype not in PARAM_DTYPES:
            raise SpecError(f"{field}.dtype", dtype, DTYPE_ACCEPTED, where)
        values = d.get("values")
        if values is not None:
            flat = np.asarray(values).ravel()
            if flat.dtype.kind not in "iuf":
                raise SpecError(f"{field}.values", values, VALUES_ACCEPTED, where)
            values = tuple(int(v) for v in flat) if dtype == "int32" else tuple(float(v) for v in flat)
        out.append(ParamDecl(name, tuple(dims), dtype, values, generator))
    return tuple(sorted(out, key=lambda p: p.name))


# --- per-tile parameter-gradient windows --------------------------------------------------------------


def grad_window(term: ParamGradTerm, decl: ParamDecl, rows, cols) -> tuple[tuple, tuple]:
    """(widths, origins) of the window of ``decl``'s entries a [rows, cols] tile can touch through
    ``term.index``, one per dimension: an index affine in q_idx and kv_idx with coefficients in
    {−1, 0, 1} spans (rows if it reads q_idx) + (cols if it reads kv_idx) − 1 entries from its value at
    the tile corner that minimises it (an expression of ``b``, ``h`` and the tile origin ``q_idx``,
    ``kv_idx``); any other index spans the whole dimension from 0. A tile's partial has prod(widths)
    entries, row-major over the window.
    """
    widths, origins = [], []
    for e, size in zip(term.index, decl.shape):
        e = sympy.sympify(e)
        dq, dk = sympy.diff(e, Q_IDX), sympy.diff(e, KV_IDX)
        affine = all(d.is_Integer and int(d) in (-1, 0, 1) for d in (dq, dk)) and not e.has(sympy.floor, sympy.Abs, sympy.Piecewise, sympy.Mod, sympy.Min, sympy.Max)
        if not affine:
            widths.append(sympy.sympify(size))
            origins.append(sympy.Integer(0))
            continue
        w = sympy.Integer(1)
        corner = {}
        if dq != 0:
            w += rows - 1
            corner[Q_IDX] = Q_IDX if int(dq) > 0 else Q_IDX + rows - 1
        if dk != 0:
            w += cols - 1
            corner[KV_IDX] = KV_IDX if int(dk) > 0 else KV_IDX + cols - 1
        widths.append(w)
        origins.append(e.xreplace(corner))
    return tuple(widths), tuple(origins)


def param_grads(program, outputs: Mapping[str, np.ndarray], windows_per_tile: int = 1) -> dict[str, np.ndarray]:
    """The gradient of every floating-point parameter from the partial tensors ``gpart{k}`` a run of
    ``program`` wrote ([B, Hq, nQ, nK, windows_per_tile, W]: the Ascend kernels write one window per
    AIV, 2): each term's windows (:func:`grad_window`, origins at the tile corners) reduced in fixed
    tile order by :func:`tilegen.core.hoststeps.reduce_tile_windows` (the one implementation the
    generated Triton modules carry too), the terms of one parameter summed in term order. fp32 arrays of
    the parameters' shapes.

    Raises:
        ValueError: a non-zero partial entry falls outside the parameter array (names the term).
    """
    env = {str(k): int(v) for k, v in program.env}
    sizes = {k: env[k] for k in SIZE_SYMBOLS if k in env}
    br, bc = env["Br"], env["Bc"]
    tiles = (env["B"], env["Hq"], -(-env["Sq"] // br), -(-env["Sk"] // bc), windows_per_tile)
    mods = program.mods
    out: dict[str, np.ndarray] = {}
    for p in mods.params:
        if p.differentiable:
            out[p.name] = np.zeros(p.concrete_shape(sizes), dtype=np.float32)
    for k, term in enumerate(mods.grads):
        widths, origins = grad_window(term, mods.param(term.param), br, bc)
        widths = tuple(int(evaluate(w, sizes=sizes, params={})) for w in widths)
        free = set().union(*(sympy.sympify(o).free_symbols for o in origins))
        reads = (B_IDX in free, H_IDX in free, Q_IDX in free, KV_IDX in free, False)  # the AIV halves share the tile's origin

        def origin_of(b, h, i, j, _half, origins=origins):
            return [evaluate(o, b=b, h=h, q_idx=i * br, kv_idx=j * bc, sizes=sizes, params={}) for o in origins]

        part = np.asarray(outputs[f"gpart{k}"]).reshape(tiles + (-1,))
        shape = out[term.param].shape
        grad, outside = reduce_tile_windows(part, reads, origin_of, widths, shape)
        if outside != 0:
            raise ValueError(f"gpart{k} ({term.param}'s gradient): a non-zero partial entry falls outside the parameter array")
        out[term.param] = (out[term.param].astype(np.float64) + grad).astype(np.float32)
    return out
