"""Built-in generators of parameter values: what a spec file writes instead of a list of values.

A ``[params.NAME]`` table of a spec file (DESIGN §3, "Parameter generators") may carry one generator
key in place of ``values``; the generator fixes the parameter's dtype and, when ``shape`` is absent,
its shape, and the values follow the spec's sizes:

- ``documents = [L0, L1, ...]``: the document id of every token of a packed sequence: L0 tokens of
  document 0, then L1 of document 1, ... (int32, shape ``["Sk"]`` unless given; the lengths sum to the
  length). ``documents = N``: N documents spread evenly (the first ``length % N`` one token longer,
  as ``numpy.array_split`` cuts).
- ``prefix = P``: the prefix length of every batch entry, P tokens (int32, shape ``["B"]``), for a
  prefix-LM mask ``kv_idx < prefix[b]``; ``prefix = [P0, P1, ...]``: one per batch entry.
- ``alibi = true``: the ALiBi slope of every query head (fp32, shape ``["Hq"]``), :func:`alibi_slopes`;
  ``alibi = "bloom"`` or ``"mpt"``: the same slopes as those models round them in float32.

A size override (``--seq``, ``--heads``, ``--batch``; :meth:`AttentionSpec.replace`) regenerates the
values: a document count spreads over the new length, a list of document lengths is scaled in
proportion to it (largest remainders, every document at least one token), one prefix length fills the
new batch, the slopes follow the new head count. Only what cannot follow is refused, naming the
parameter: explicit ``values`` and a per-entry ``prefix`` list whose length changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilegen.core.errors import SpecError

ALIBI_RECIPES = ("reference", "bloom", "mpt")
# what the other keys of a [params.NAME] table accept (tilegen.core.mods.parse_param_decls checks them;
# the field reference prints them)
SHAPE_ACCEPTED = "a list of sizes: positive ints or expressions of B, Hq, Hkv, Sq, Sk"
DTYPE_ACCEPTED = "'fp32' (learnable: its gradient is returned) or 'int32' (ids, lengths)"
VALUES_ACCEPTED = "a list of numbers, as many as the shape's entries (row-major)"


@dataclass(frozen=True)
class GeneratorKind:
    """One generator key of a ``[params.NAME]`` table: its dtype, default shape and what it accepts
    (the field reference, :func:`tilegen.core.spec.field_reference`, prints these)."""

    key: str
    dtype: str
    shape: str
    accepted: str
    example: str
    doc: str


GENERATORS = {
    g.key: g
    for g in (
        GeneratorKind(
            "documents", "int32", "Sk",
            "a list of positive document lengths summing to the length of the shape, or a positive count of documents",
            "documents = [700, 900, 448]",
            "document ids of a packed sequence (0 for the first L0 tokens, 1 for the next L1, ...); a count spreads "
            "that many documents evenly. A size override scales the lengths in proportion",
        ),
        GeneratorKind(
            "prefix", "int32", "B",
            "a non-negative prefix length in tokens for every batch entry, or a list of one per batch entry",
            "prefix = 256",
            "the prefix length of each batch entry, for mask_mod = \"(kv_idx < prefix[b]) | (kv_idx <= q_idx + Sk - Sq)\"",
        ),
        GeneratorKind(
            "alibi", "fp32", "Hq",
            "true (the ALiBi reference formula), or 'bloom' / 'mpt' (that model's float32 rounding of it)",
            "alibi = true",
            "ALiBi slopes from the head count: 2^(-8(h+1)/H) for H a power of two, the reference "
            "implementation's interleaving otherwise (Press et al. 2022)",
        ),
    )
}


@dataclass(frozen=True)
class ParamGenerator:
    """How a parameter's values are made from the spec's sizes.

    Attributes:
        kind: ``"documents"``, ``"prefix"`` or ``"alibi"`` (:data:`GENERATORS`).
        arg: documents: a count (int) or the lengths (tuple of ints); prefix: one length (int) or one per
            batch entry (tuple); alibi: ``"reference"``, ``"bloom"`` or ``"mpt"``.
    """

    kind: str
    arg: Any

    def spec_value(self) -> Any:
        """The value a spec file writes for this generator (``documents = [..]``, ``alibi = true``)."""
        if self.kind == "alibi":
            return True if self.arg == "reference" else self.arg
        return list(self.arg) if isinstance(self.arg, tuple) else self.arg

    def apply(self, length: int, field: str, where: str | None = None) -> tuple[ParamGenerator, tuple]:
        """(the generator as it holds at ``length``, the values): ``length`` is the size of the
        parameter's one dimension; a list of document lengths that does not sum to it is scaled.

        Raises:
            SpecError: ``field`` (``params.NAME.KIND``) when the generator cannot fill ``length``
                entries (more documents than tokens, a per-entry prefix list of another length).
        """
        if self.kind == "documents":
            lengths = document_lengths(self.arg, length, field, where)
            gen = self if isinstance(self.arg, int) else ParamGenerator("documents", tuple(int(n) for n in lengths))
            return gen, tuple(int(i) for i in document_ids(lengths))
        if self.kind == "prefix":
            if isinstance(self.arg, int):
                return self, (int(self.arg),) * length
            if len(self.arg) != length:
                raise SpecError(
                    field, list(self.arg),
                    f"{length} prefix lengths, one per batch entry, or one length for every entry (a list of "
                    f"{len(self.arg)} does not follow a size override)", where,
                )
            return self, tuple(int(p) for p in self.arg)
        if self.kind == "alibi":
            slopes = {"reference": alibi_slopes, "bloom": bloom_alibi_slopes, "mpt": mpt_alibi_slopes}[self.arg](length)
            return self, tuple(float(s) for s in slopes)
        raise AssertionError(self.kind)


def parse_generator(key: str, value: Any, field: str, where: str | None = None) -> ParamGenerator:
    """The generator of a ``[params.NAME]`` key (``documents``, ``prefix``, ``alibi``) and its value.

    Raises:
        SpecError: ``field`` with what the key accepts (:data:`GENERATORS`).
    """
    accepted = GENERATORS[key].accepted

    def whole(x, lo):
        return isinstance(x, int) and not isinstance(x, bool) and x >= lo

    if key == "documents":
        if whole(value, 1):
            return ParamGenerator(key, int(value))
        if isinstance(value, (list, tuple)) and value and all(whole(n, 1) for n in value):
            return ParamGenerator(key, tuple(int(n) for n in value))
    elif key == "prefix":
        if whole(value, 0):
            return ParamGenerator(key, int(value))
        if isinstance(value, (list, tuple)) and value and all(whole(n, 0) for n in value):
            return ParamGenerator(key, tuple(int(n) for n in value))
    elif key == "alibi":
        if value is True or value == "reference":
            return ParamGenerator(key, "reference")
        if value in ALIBI_RECIPES:
            return ParamGenerator(key, value)
    raise SpecError(field, value, accepted, where)


def document_lengths(arg: int | tuple, length: int, field: str = "documents", where: str | None = None) -> np.ndarray:
    """int64 [documents]: the lengths of ``arg``'s documents in a sequence of ``length`` tokens.

    A count N gives N lengths differing by at most one, the longer first (``numpy.array_split``'s cut);
    lengths that sum to ``length`` are kept; others are scaled to it in proportion by largest remainders
    (Hamilton's method), every document keeping at least one token.

    Raises:
        SpecError: more documents than tokens.
    """
    n = arg if isinstance(arg, int) else len(arg)
    if n > length:
        raise SpecError(field, arg if isinstance(arg, int) else list(arg), f"at most {length} documents (one token each at least) in a length of {length}", where)
    if isinstance(arg, int):
        return np.array([len(a) for a in np.array_split(np.arange(length), n)], dtype=np.int64)
    want = np.asarray(arg, dtype=np.int64)
    total = int(want.sum())
    if total == length:
        return want
    exact = want * length / total
    out = np.maximum(np.floor(exact).astype(np.int64), 1)
    rest = exact - out
    while out.sum() < length:  # the largest remainders get a token (the first on ties)
        k = int(np.argmax(rest))
        out[k] += 1
        rest[k] -= 1
    while out.sum() > length:  # a document raised to one token: the most over-served one gives back
        k = int(np.argmin(np.where(out > 1, rest, np.inf)))
        out[k] -= 1
        rest[k] += 1
    return out


def document_ids(lengths) -> np.ndarray:
    """int32 [sum(lengths)]: document d's id d repeated ``lengths[d]`` times."""
    return np.repeat(np.arange(len(lengths), dtype=np.int32), np.asarray(lengths, dtype=np.int64))


def alibi_slopes(heads: int) -> np.ndarray:
    """float64 [heads]: the ALiBi slope of each query head.

    Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
    Extrapolation" (ICLR 2022), §3: for H heads, H a power of two, the geometric sequence starting and
    stepping by 2^(-8/H): slope_h = 2^(-8(h+1)/H), h = 0..H-1 (1/2 ... 1/256 for 8 heads). For other H,
    the reference implementation's rule (github.com/ofirpress/attention_with_linear_biases,
    fairseq/models/transformer.py, ``get_slopes``): with n the largest power of two below H, the n
    slopes of n heads, then every other slope of 2n heads (the 1st, 3rd, ...: 2^(-4(2j+1)/n)), the first
    H - n of them. Bloom and MPT use the same set (:func:`bloom_alibi_slopes`, :func:`mpt_alibi_slopes`).

    Raises:
        SpecError: ``heads`` < 1.
    """
    if heads < 1:
        raise SpecError("alibi", heads, "a head count of at least 1")
    n = 1 << (heads.bit_length() - 1)
    slopes = 2.0 ** (-8.0 * np.arange(1, n + 1) / n)
    extra = 2.0 ** (-4.0 * np.arange(1, 2 * (heads - n), 2) / n)
    return np.concatenate([slopes, extra])


def bloom_alibi_slopes(heads: int) -> list[float]:
    """Bloom's ALiBi slope of each head (transformers ``models/bloom/modeling_bloom.py``
    ``_get_alibi_slopes``, lines 46–59): with n the largest power of two <= heads, 2^(−8i/n) for
    i = 1..n, then 2^(−4j/n) for the odd j = 1, 3, … of the heads beyond n; the powers of the
    float32-rounded base taken in float32, as the model does."""
    n = 2 ** math.floor(math.log2(heads))
    base = np.float32(2 ** (-(2 ** -(math.log2(n) - 3))))  # float32 powers, as the model computes them
    slopes = np.power(base, np.arange(1, n + 1, dtype=np.float32))
    if n != heads:
        extra = np.float32(2 ** (-(2 ** -(math.log2(2 * n) - 3))))
        slopes = np.concatenate([slopes, np.power(extra, np.arange(1, 1 + 2 * min(n, heads - n), 2, dtype=np.float32))])
    return [float(x) for x in slopes]


def mpt_alibi_slopes(heads: int, alibi_bias_max: int = 8) -> list[float]:
    """MPT's ALiBi slope of each head (transformers ``models/mpt/modeling_mpt.py``
    ``build_mpt_alibi_tensor``, lines 43–63): with m the smallest power of two >= heads, 2^(−i·max/m)
    for i = 1..m; when m != heads the odd positions first, then the even ones, cut to ``heads``.
    Rounded to float32."""
    m = 2 ** math.ceil(math.log2(heads))
    slopes = [float(np.float32(1.0 / np.float32(2.0) ** np.float32(i * (alibi_bias_max / m)))) for i in range(1, m + 1)]
    if m != heads:
        slopes = (slopes[1::2] + slopes[::2])[:heads]
    return slopes
