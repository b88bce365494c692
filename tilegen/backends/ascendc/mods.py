"""Ascend C lowering of score and mask mods (``ModOp``, DESIGN §3) for the vector (AIV) side.

The AIV applies the mods to its half of the UB score tile after the tile arrives from the cube, row by
row (count-form vector calls of ``cpad`` elements on one row at a time, so the scratch is a few rows):

- the score mod must have the form score′ = F(score) + Σ terms, where F is the identity or a softcap
  ``c·tanh(score/c)`` (built from Exp, Adds, Reciprocal, Muls: the basic API has no Tanh, only the
  advanced API's ``include/adv_api/math/tanh.h``) and each term is
  - a distance term ``k·slope·|q_idx − kv_idx + K|`` (ALiBi; ``slope`` an optional parameter read
    indexed by b, h and integers, K an expression of the sizes): Adds, Abs, Muls, Add on the row, the
    key indices ``col0 + c`` held as floats in UB;
  - a table term ``k·P[…, a·q_idx + d·kv_idx + K, …]`` (a relative bias; a, d ∈ {−1, 0, 1}, the other
    indices b, h or integers): a scalar loop over the row reads P from GM (the index reverses along the
    row for a relative bias, which count-form vector moves cannot do);
- the mask mod must be and/or/not of comparisons ``V op X`` where V is ``kv_idx`` or an integer
  parameter read at ``kv_idx`` (a document id row, loaded per tile with DataCopyPad and cast to float)
  and X an integer expression of q_idx, b, h, the sizes and integer parameter reads at q_idx, b, h
  (read per row from GM): Compares and Select give a 0/1 row per comparison, Mul (and), Max (or),
  Muls/Adds (not) combine them, and a final Compares/Select writes −inf where the row is 0.
- ``dscore`` (softcap only: 1 − tanh²(score/c) at the raw score), ``pgrad`` per term: a distance term's
  partial Σ dS′·k·|…| per tile (Mul and ReduceSum per row, summed in row order on the scalar unit),
  a table term's window of Br + Bc − 1 entries accumulated by a scalar loop in (row, column) order.
  Each AIV writes its own partial (``gpart`` on Ascend has an extra axis of 2 for the two AIVs); the
  host adds the two halves and reduces the tiles in fixed order (:func:`tilegen.mods.param_grads`):
  deterministic, no atomics.

Anything else is refused at generate time with a :class:`~tilegen.core.errors.SpecError` naming the
construct. Values are exact where they are integers: indices pass through float32 compares, exact up to
2^24 (the ``MaskTile_index`` field obligation).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from tilegen.core import mods as M
from tilegen.core.errors import SpecError, TargetError

# names the emitted C++ gives the mod language's indices (grid variables b, hq; the row's query index q)
_B, _H, _Q = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("b", "hq", "q"))
_TO_C = {M.B_IDX: _B, M.H_IDX: _H, M.Q_IDX: _Q}

_ACCEPTED_SCORE = (
    "for the Ascend C backend, score or a softcap c*tanh(score/c), plus terms k*slope*abs(q_idx - kv_idx + K) "
    "(slope a parameter read at b, h) and k*table[..., ±q_idx ± kv_idx + K, ...] (the other indices b, h or integers)"
)
_ACCEPTED_MASK = (
    "for the Ascend C backend, and/or/not of comparisons of kv_idx or an integer parameter read at kv_idx "
    "with an integer expression of q_idx, b, h, the sizes and integer parameter reads at q_idx, b, h"
)


@dataclass(frozen=True)
class Term:
    """One additive term of score′ (see the module docstring). ``read`` is the parameter read or None;
    for a table term ``dim`` is the index that varies over the tile, ``a``/``d`` its q_idx/kv_idx
    coefficients and ``K`` the rest; for a distance term ``K`` is the offset inside |q_idx − kv_idx + K|."""

    kind: str  # "distance" | "table"
    k: float
    read: object
    K: object
    dim: int = -1
    a: int = 0
    d: int = 0


@dataclass(frozen=True)
class Plan:
    cap: float | None
    terms: tuple
    mask: object  # nested tuples: ("and"|"or", children) | ("not", child) | ("cmp", mode, vec_read | None, X)


def _refuse_score(expr, why: str = "") -> SpecError:
    return SpecError("score_mod", M.to_text(expr) + (f" ({why})" if why else ""), _ACCEPTED_SCORE)


def _refuse_mask(expr, why: str = "") -> SpecError:
    return SpecError("mask_mod", M.to_text(expr) + (f" ({why})" if why else ""), _ACCEPTED_MASK)


# functions of the mod language this lowering has no vector form for: named in the refusal
_UNLOWERED = {**{name: f"the integer bit operation {name}" for name in M.BIT_FUNCTIONS}, "erf": "erf (the exact gelu's)"}


def _refuse_unlowered(field: str, expr) -> None:
    """A :class:`SpecError` naming the first function of ``expr`` in :data:`_UNLOWERED`."""
    for f in sorted(expr.atoms(sympy.Function), key=sympy.default_sort_key):
        name = type(f).__name__
        if name in _UNLOWERED:
            raise SpecError(field, f"{M.to_text(expr)} ({_UNLOWERED[name]}: no lowering to the AIV's vector instructions)",
                            _ACCEPTED_SCORE if field == "score_mod" else _ACCEPTED_MASK)


def _index_ok(e) -> bool:
    """An index of b, h and integers only (no query or key index)."""
    return not ({M.Q_IDX, M.KV_IDX} & sympy.sympify(e).free_symbols) and not sympy.sympify(e).atoms(sympy.Indexed)


def _sizes_only(e) -> bool:
    return sympy.sympify(e).free_symbols <= set(M.SIZE_SYMBOLS.values()) and not sympy.sympify(e).atoms(sympy.Indexed)


def recognise(mods) -> Plan:
    """The :class:`Plan` of ``mods`` (a :class:`tilegen.mods.ModSet`).

    Raises:
        SpecError: a construct the Ascend C lowering does not emit (names it and lists what is accepted).
    """
    for field, expr in (("score_mod", mods.score), ("mask_mod", mods.mask)):
        if expr is not None:
            _refuse_unlowered(field, expr)
    cap, terms = None, ()
    if mods.score is not None:
        cap, terms = _score(mods)
    mask = _mask(mods.mask, mods) if mods.mask is not None else None
    plan = Plan(cap, terms, mask)
    _check_grads(mods, plan)
    return plan


def _score(mods):
    expr = mods.score
    parts = sympy.Add.make_args(expr)
    f = sympy.Add(*[t for t in parts if t.has(M.SCORE)])
    cap = None
    if f != M.SCORE:
        tanhs = list(f.atoms(sympy.tanh))
        ok = len(tanhs) == 1
        if ok:
            ratio = sympy.simplify(tanhs[0].args[0] / M.SCORE)
            ok = ratio.is_number and bool(ratio > 0)
            if ok:
                c = 1 / ratio
                ok = sympy.simplify(f - c * sympy.tanh(M.SCORE / c)) == 0
                cap = float(c)
        if not ok:
            raise _refuse_score(f)
    return cap, tuple(_term(t, mods) for t in parts if not t.has(M.SCORE))


def _term(t, mods) -> Term:
    k, rest = t.as_coeff_Mul()
    factors = sympy.Mul.make_args(rest)
    reads = [f for f in factors if isinstance(f, sympy.Indexed)]
    absf = [f for f in factors if isinstance(f, sympy.Abs)]
    if len(reads) + len(absf) != len([f for f in factors if f != 1]) or len(reads) > 1 or len(absf) > 1:
        raise _refuse_score(t)
    read = reads[0] if reads else None
    if absf:
        inner = sympy.expand(absf[0].args[0])
        a, d = sympy.diff(inner, M.Q_IDX), sympy.diff(inner, M.KV_IDX)
        if {a, d} != {1, -1}:
            raise _refuse_score(t, "the distance must be ±(q_idx - kv_idx) + K")
        if a == -1:
            inner = -inner
        K = sympy.expand(inner - M.Q_IDX + M.KV_IDX)
        if not _sizes_only(K) or (read is not None and not all(_index_ok(e) for e in read.indices)):
            raise _refuse_score(t, "K must be a size expression and the slope read at b, h")
        return Term("distance", float(k), read, K)
    if read is None:
        raise _refuse_score(t)
    varying = [n for n, e in enumerate(read.indices) if not _index_ok(e)]
    if len(varying) > 1:
        raise _refuse_score(t, "one index of the table may depend on q_idx, kv_idx")
    if not varying:
        return Term("table", float(k), read, sympy.Integer(0), -1, 0, 0)
    e = sympy.expand(read.indices[varying[0]])
    a, d = sympy.diff(e, M.Q_IDX), sympy.diff(e, M.KV_IDX)
    K = sympy.expand(e - a * M.Q_IDX - d * M.KV_IDX)
    if a not in (-1, 0, 1) or d not in (-1, 0, 1) or not _sizes_only(K):
        raise _refuse_score(t, "the varying index must be ±q_idx ± kv_idx + K")
    return Term("table", float(k), read, K, varying[0], int(a), int(d))


_MODES = {sympy.StrictLessThan: "LT", sympy.LessThan: "LE", sympy.StrictGreaterThan: "GT", sympy.GreaterThan: "GE",
          sympy.Equality: "EQ", sympy.Unequality: "NE"}
_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def _mask(e, mods):
    if isinstance(e, sympy.And):
        return ("and", tuple(_mask(a, mods) for a in e.args))
    if isinstance(e, sympy.Or):
        return ("or", tuple(_mask(a, mods) for a in e.args))
    if isinstance(e, sympy.Not):
        return ("not", _mask(e.args[0], mods))
    mode = _MODES.get(type(e))
    if mode is None:
        raise _refuse_mask(e)
    diff = sympy.expand(e.lhs - e.rhs)
    kv_reads = [ix for ix in diff.atoms(sympy.Indexed) if any(M.KV_IDX in sympy.sympify(i).free_symbols for i in ix.indices)]
    if len(kv_reads) > 1:
        raise _refuse_mask(e, "one key-side parameter read per comparison")
    if kv_reads:
        vec = kv_reads[0]
        if mods.param(str(vec.base.label)).dtype != "int32":
            raise _refuse_mask(e, f"{vec.base.label} must be an integer parameter")
        kv_dims = [n for n, i in enumerate(vec.indices) if not _index_ok(i)]
        if len(kv_dims) != 1 or vec.indices[kv_dims[0]] != M.KV_IDX:
            raise _refuse_mask(e, "the key-side read is P[..., kv_idx] with its other indices b, h or integers")
        dummy = sympy.Dummy("v")
        rep = diff.xreplace({vec: dummy})
        coef = sympy.diff(rep, dummy)
        rest = sympy.expand(rep - coef * dummy)
    else:
        vec = None
        coef = sympy.diff(diff, M.KV_IDX)
        rest = sympy.expand(diff - coef * M.KV_IDX)
    if coef not in (1, -1) or M.KV_IDX in rest.free_symbols or rest.has(sympy.Dummy):
        raise _refuse_mask(e, "kv_idx (or its parameter read) must appear once with coefficient ±1")
    for ix in rest.atoms(sympy.Indexed):
        if mods.param(str(ix.base.label)).dtype != "int32" or any(not (_index_ok(i) or i == M.Q_IDX) for i in ix.indices):
            raise _refuse_mask(e, f"{ix} must be an integer parameter read at q_idx, b, h")
    if not all(n.is_Integer for n in (rest / coef).atoms(sympy.Number)):
        raise _refuse_mask(e, "the compared value must be an integer expression")
    # coef·V + rest op 0  →  V op' −rest/coef
    x = sympy.expand(-rest / coef)
    return ("cmp", mode if coef == 1 else _FLIP[mode], vec, x)


def _check_grads(mods, plan: Plan) -> None:
    """Every parameter-gradient term of ``mods`` is exactly one term of ``plan`` (so its coefficient is
    that term's k·|…| or k)."""
    for g in mods.grads:
        mine = [t for t in plan.terms if t.read is not None and str(t.read.base.label) == g.param and tuple(t.read.indices) == tuple(g.index)]
        if len(mine) != 1:
            raise _refuse_score(mods.score, f"{g.param} is read in {len(mine)} terms; one term per parameter read")


def grad_term(plan: Plan, mods, k: int) -> Term:
    g = mods.grads[k]
    return next(t for t in plan.terms if t.read is not None and str(t.read.base.label) == g.param and tuple(t.read.indices) == tuple(g.index))


# --- C++ pieces --------------------------------------------------------------------------------------


def to_c(expr):
    """``expr`` (mod-language symbols) with the emitted C++ names: b, hq, q."""
    return sympy.sympify(expr).xreplace(_TO_C)


def rowmajor(index, shape) -> sympy.Expr:
    off = sympy.Integer(0)
    for i, n in zip(index, shape):
        off = off * sympy.sympify(n) + sympy.sympify(i)
    return off


def mask_depth(node) -> int:
    """Rows of 0/1 scratch the mask tree needs (a register stack)."""
    if node is None:
        return 0
    if node[0] == "cmp":
        return 1
    if node[0] == "not":
        return mask_depth(node[1])
    return max(mask_depth(c) + n for n, c in enumerate(node[1]))


def key_reads(plan: Plan) -> list:
    """The distinct key-side parameter reads of the mask (one float row each per tile), in a stable order."""
    out: list = []

    def walk(n):
        if n is None:
            return
        if n[0] == "cmp":
            if n[2] is not None and n[2] not in out:
                out.append(n[2])
        elif n[0] == "not":
            walk(n[1])
        else:
            for c in n[1]:
                walk(c)

    walk(plan.mask)
    return sorted(out, key=sympy.default_sort_key)


def check_cpad(cpad: int, what: str) -> None:
    if cpad * 4 % 256:
        raise TargetError(f"{what} needs the tile's columns ({cpad}) to be a multiple of 64 for Compares")
