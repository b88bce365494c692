"""Fast evaluation of the IR's sympy index expressions.

Each expression is compiled once (``sympy.lambdify`` to NumPy) with every free symbol as an argument,
so the same compiled function serves any binding of the sizes (tile-size candidates) and vectors of
loop-variable values (the interpreter's lanes, the static counter's iteration tables).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np
import sympy


@lru_cache(maxsize=None)
def compile_expr(expr: sympy.Expr) -> tuple[tuple[str, ...], Any]:
    """(argument names, function) for ``expr``; integers come back as Python ints or int64 arrays."""
    expr = sympy.sympify(expr)
    names = tuple(sorted(str(s) for s in expr.free_symbols))
    if not names:
        const = int(expr)
        return names, (lambda *args, _c=const: _c)
    symbols = sorted(expr.free_symbols, key=str)
    if len({str(s) for s in symbols}) != len(symbols):
        raise ValueError(f"{expr}: two symbols share a name")
    return names, sympy.lambdify(symbols, expr, "numpy")


def next_pow2(n: int, least: int = 1) -> int:
    """The smallest power of two that is >= ``n`` and >= ``least`` (ints; ``least`` a power of two)."""
    return max(int(least), 1 << (max(int(n), 1) - 1).bit_length())


class Pow2(sympy.Function):
    """``Pow2(n, least)``: :func:`next_pow2` as a sympy function, for footprint expressions of levels
    that pad every tile extent to a power of two (evaluates when ``n`` is an integer)."""

    @classmethod
    def eval(cls, n, least):
        if n.is_Integer and least.is_Integer:
            return sympy.Integer(next_pow2(int(n), int(least)))
        return None


class UnboundSymbol(KeyError):
    """An expression names a symbol the caller did not bind."""


def evaluate(expr, values: Mapping[str, Any]):
    """``expr`` with its symbols (by name) taken from ``values``: an int, or an int64 array when some
    value is an array.

    Raises:
        UnboundSymbol: a symbol of ``expr`` is missing from ``values``.
    """
    if isinstance(expr, int):
        return expr
    if isinstance(expr, sympy.Symbol):
        try:
            return values[expr.name]
        except KeyError:
            raise UnboundSymbol(expr.name) from None
    if isinstance(expr, sympy.Integer):
        return int(expr)
    names, fn = compile_expr(expr if isinstance(expr, sympy.Basic) else sympy.sympify(expr))
    try:
        args = [values[n] for n in names]
    except KeyError as exc:
        raise UnboundSymbol(exc.args[0]) from None
    out = fn(*args)
    if isinstance(out, np.ndarray):
        return int(out) if out.ndim == 0 else out.astype(np.int64)
    return int(out)
