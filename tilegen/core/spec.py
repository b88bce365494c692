"""The attention spec: what a user asks tilegen to compile.

An :class:`AttentionSpec` fixes the problem (shapes, dtype, scale, mask, layout); the compiler decides
the schedule. Semantics follow DESIGN.md §3:

- Q [B, Hq, Sq, Dqk], K [B, Hkv, Sk, Dqk], V [B, Hkv, Sk, Dv], O [B, Hq, Sq, Dv] in logical BNSD order;
  ``layout = "BSND"`` means the arrays in memory are [B, S, N, D].
- ``scale`` defaults to 1/sqrt(Dqk).
- Key j is visible to query i iff ``i + off - left <= j <= i + off + right`` with ``window = (left,
  right)``, -1 meaning unbounded, ``off = Sk - Sq`` for ``alignment = "bottom_right"`` (FlashAttention >=
  2.1, Ascend sparse mode 3) and ``off = 0`` for ``"top_left"`` (Ascend sparse mode 2). ``causal`` is the
  window (-1, 0).

- ``score_mod`` / ``mask_mod``: expressions of the mod language (:mod:`tilegen.mods`) over ``score, b,
  h, q_idx, kv_idx`` and the parameter arrays of ``params``; the mask mod is and-ed with the window.
- ``sinks``: one learnable logit per query head (an fp32 [Hq] input ``sinks``) joins every row's softmax
  denominator and carries no value (DESIGN §3).

Spec files are TOML or YAML with the fields of :class:`AttentionSpec` (plus the shorthands ``heads``,
``seq`` and ``head_dim`` that set both of a pair, ``mask = "none" | "causal" | "window"``, and a
``[params.NAME]`` table per parameter array: ``shape``, ``dtype``, and ``values`` or one generator,
``documents``, ``prefix`` or ``alibi``, whose values follow the sizes: :mod:`tilegen.core.paramgen`).
:func:`field_reference` lists every field with its type, range, default and example, from the tables
the checks below read.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tilegen.core.dtypes import DTYPES, itemsize
from tilegen.core.errors import MissingFieldError, SpecError, SpecErrors
from tilegen.core.paramgen import GENERATORS
from tilegen.core.resources import builtin_spec_files

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LAYOUTS = ("BNSD", "BSND")
ALIGNMENTS = ("bottom_right", "top_left")
MASK_KINDS = ("none", "causal", "window")
MAX_DIM = 1 << 30  # batch and heads beyond this are rejected up front
MAX_SEQ = 1 << 24  # seq_q, seq_k: the static traffic analysis walks one tile loop (cost linear in seq / tile)
MAX_HEAD_DIM = 1024
MAX_WINDOW = 1 << 30  # a window side at least Sq + Sk wide is the same as -1 (unbounded)
MAX_TENSOR_BYTES = (1 << 63) - 1  # generated kernels address every tensor with int64 byte offsets


@dataclass(frozen=True)
class AttentionSpec:
    """One attention problem.

    Attributes:
        batch: B, 1..2**30.
        heads_q: Hq, query heads, 1..2**30.
        heads_kv: Hkv, key/value heads, 1..2**30, divides ``heads_q`` (GQA/MQA when smaller).
        seq_q: Sq, query length, 1..2**24.
        seq_k: Sk, key/value length, 1..2**24.
        head_dim_qk: Dqk, head dim of Q and K, 1..1024.
        head_dim_v: Dv, head dim of V and O, 1..1024.
        dtype: ``"fp16"``, ``"bf16"`` or ``"fp32"`` (inputs and outputs; L is always fp32).
        scale: softmax scale, or None for 1/sqrt(Dqk).
        window: (left, right), each -1 (unbounded) or 0..2**30; (-1, -1) is no mask, (-1, 0) is causal.
        alignment: ``"bottom_right"`` or ``"top_left"`` (where the causal diagonal sits when Sq != Sk).
        layout: ``"BNSD"`` or ``"BSND"``.
        name: a label for reports and file names.
        score_mod: the score modification as mod-language text (``""``: none), DESIGN §3.
        mask_mod: the mask modification as mod-language text (``""``: none), and-ed with the window.
        params: the parameter arrays the mods read (:class:`tilegen.mods.ParamDecl`), sorted by name.
        sinks: learnable attention sinks (DESIGN §3): an fp32 [Hq] input ``sinks``, one logit per query
            head that joins every row's softmax denominator and carries no value.
        packed_ids: () or (query ids, key ids): the names of two int32 params of shapes [Sq] and [Sk]
            holding each token's sequence id in a packed batch, negative outside every sequence; the
            kernels write no output row of a negative id (DESIGN §3, "Packed batches").
    """

    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim_qk: int
    head_dim_v: int
    dtype: str = "fp16"
    scale: float | None = None
    window: tuple[int, int] = (-1, -1)
    alignment: str = "bottom_right"
    layout: str = "BNSD"
    name: str = "custom"
    score_mod: str = ""
    mask_mod: str = ""
    params: tuple = ()
    sinks: bool = False
    packed_ids: tuple = ()

    def __post_init__(self) -> None:
        _generate_params(self)
        validate(self)

    # -- derived quantities -------------------------------------------------------------------------
    @property
    def softmax_scale(self) -> float:
        """The scale actually used: ``scale`` or 1/sqrt(Dqk) (the real Dqk, never a padded one)."""
        return float(self.scale) if self.scale is not None else 1.0 / math.sqrt(self.head_dim_qk)

    @property
    def group(self) -> int:
        """Query heads per KV head (Hq / Hkv)."""
        return self.heads_q // self.heads_kv

    @property
    def mask_kind(self) -> str:
        """``"none"``, ``"causal"`` or ``"window"``."""
        if self.window == (-1, -1):
            return "none"
        if self.window == (-1, 0):
            return "causal"
        return "window"

    @property
    def logical_shapes(self) -> dict[str, tuple[int, ...]]:
        """Logical (BNSD) shape of every tensor of the forward and backward, by name: Q, K, V, O, dO,
        dQ, dK, dV ([B, H, S, D]) and L ([B, Hq, Sq]); the layout only changes how they lie in memory."""
        b, hq, hkv, sq, sk = self.batch, self.heads_q, self.heads_kv, self.seq_q, self.seq_k
        dqk, dv = self.head_dim_qk, self.head_dim_v
        return {
            "Q": (b, hq, sq, dqk), "K": (b, hkv, sk, dqk), "V": (b, hkv, sk, dv),
            "O": (b, hq, sq, dv), "dO": (b, hq, sq, dv), "L": (b, hq, sq),
            "dQ": (b, hq, sq, dqk), "dK": (b, hkv, sk, dqk), "dV": (b, hkv, sk, dv),
        }

    @property
    def offset(self) -> int:
        """``off`` of DESIGN §3: Sk - Sq for bottom-right alignment, 0 for top-left."""
        return self.seq_k - self.seq_q if self.alignment == "bottom_right" else 0

    def replace(self, **changes: Any) -> "AttentionSpec":
        """A copy with some fields changed (validated again). Generated parameter values
        (:mod:`tilegen.core.paramgen`) are made again for the new sizes; explicit ``values`` must fit
        them (else :class:`SpecError` naming ``params.NAME.values``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (the form spec files use)."""
        out: dict[str, Any] = {
            "name": self.name,
            "batch": self.batch,
            "heads_q": self.heads_q,
            "heads_kv": self.heads_kv,
            "seq_q": self.seq_q,
            "seq_k": self.seq_k,
            "head_dim_qk": self.head_dim_qk,
            "head_dim_v": self.head_dim_v,
            "dtype": self.dtype,
            "mask": self.mask_kind,
            "alignment": self.alignment,
            "layout": self.layout,
        }
        if self.mask_kind == "window":
            out["window"] = list(self.window)
        if self.scale is not None:
            out["scale"] = self.scale
        if self.score_mod:
            out["score_mod"] = self.score_mod
        if self.mask_mod:
            out["mask_mod"] = self.mask_mod
        if self.params:
            out["params"] = {p.name: p.to_dict() for p in self.params}
        if self.sinks:
            out["sinks"] = True
        if self.packed_ids:
            out["packed_ids"] = list(self.packed_ids)
        return out

    @property
    def has_mods(self) -> bool:
        """Whether a score or mask mod is present."""
        return bool(self.score_mod or self.mask_mod)

    @property
    def mods(self):
        """The parsed :class:`tilegen.mods.ModSet`, or None without mods."""
        from tilegen.core.mods import modset_from_spec

        return modset_from_spec(self)

    def to_toml(self) -> str:
        """The spec as TOML text, loadable by :func:`load_spec`."""
        lines = []
        tables = []
        for key, value in self.to_dict().items():
            if key == "params":
                for name, decl in value.items():
                    tables.append(f"\n[params.{name}]")
                    tables.append("shape = [" + ", ".join(repr(d) if isinstance(d, int) else f'"{d}"' for d in decl["shape"]) + "]")
                    tables.append(f'dtype = "{decl["dtype"]}"')
                    for key, v in decl.items():
                        if key in ("shape", "dtype"):
                            continue
                        if isinstance(v, list):
                            tables.append(f"{key} = [" + ", ".join(repr(x) for x in v) + "]")
                        else:
                            tables.append(f"{key} = " + ("true" if v is True else _toml_str(v) if isinstance(v, str) else repr(v)))
                continue
            if isinstance(value, str):
                lines.append(f'{key} = {_toml_str(value)}')
            elif isinstance(value, list):
                lines.append(f"{key} = [{', '.join(_toml_str(v) if isinstance(v, str) else str(v) for v in value)}]")
            elif isinstance(value, bool):
                lines.append(f"{key} = {'true' if value else 'false'}")
            else:
                lines.append(f"{key} = {value!r}")
        return "\n".join(lines + tables) + "\n"


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_int(field: str, value: Any, lo: int, hi: int, where: str | None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SpecError(field, value, f"an integer from {lo} to {hi}", where)
    if not lo <= int(value) <= hi:
        raise SpecError(field, value, f"an integer from {lo} to {hi}", where)


def _check_choice(field: str, value: Any, choices: tuple[str, ...], where: str | None) -> None:
    if not isinstance(value, str) or value not in choices:
        raise SpecError(field, value, "one of " + ", ".join(repr(c) for c in choices), where)


def visible_row_range(seq_q: int, seq_k: int, window: tuple[int, int], offset: int) -> tuple[int, int]:
    """[first, stop) of the query rows with at least one visible key (DESIGN §3), in closed form.

    Row r sees a key in [0, Sk) iff r + off + right >= 0 (right bounded) and r + off − left <= Sk − 1
    (left bounded); with left, right >= 0 the two bounds never cross. Empty when first >= stop.
    """
    left, right = window
    first = max(0, -offset - right) if right >= 0 else 0
    stop = min(seq_q, seq_k - offset + left) if left >= 0 else seq_q
    return first, max(first, stop)


_INT_RANGES = {
    "batch": (1, MAX_DIM), "heads_q": (1, MAX_DIM), "heads_kv": (1, MAX_DIM),
    "seq_q": (1, MAX_SEQ), "seq_k": (1, MAX_SEQ),
    "head_dim_qk": (1, MAX_HEAD_DIM), "head_dim_v": (1, MAX_HEAD_DIM),
}
_CHOICES = {"dtype": DTYPES, "alignment": ALIGNMENTS, "layout": LAYOUTS, "mask": MASK_KINDS}
_SCALE_ACCEPTED = "a positive finite number, or absent for 1/sqrt(head_dim_qk)"
_WINDOW_ACCEPTED = f"[left, right]: two integers, each from 0 to {MAX_WINDOW} or -1 for unbounded (with mask = 'window')"
_PACKED_ACCEPTED = "[] or two names [query ids, key ids] of int32 params of shapes [seq_q] and [seq_k]"
_MOD_ACCEPTED = "an expression string of the mod language, or absent"
# what the fields without a range or a list of choices accept, in the words of their errors
_TEXT = {
    "name": "a non-empty string without '/', '\\' or NUL",
    "scale": _SCALE_ACCEPTED,
    "sinks": "true or false",
    "window": _WINDOW_ACCEPTED,
    "packed_ids": _PACKED_ACCEPTED,
    "score_mod": _MOD_ACCEPTED,
    "mask_mod": _MOD_ACCEPTED,
}


def _accepted(field: str) -> str:
    """What ``field`` accepts, in words (for messages about a missing or invalid field)."""
    if field in _INT_RANGES:
        lo, hi = _INT_RANGES[field]
        return f"an integer from {lo} to {hi}"
    if field in _CHOICES:
        return "one of " + ", ".join(repr(c) for c in _CHOICES[field])
    return _TEXT.get(field, "a value")


def _check_field(field: str, value: Any, where: str | None) -> None:
    """The check of one field on its own (no cross-field rule); raises :class:`SpecError`."""
    if field in _INT_RANGES:
        _check_int(field, value, *_INT_RANGES[field], where)
    elif field in _CHOICES:
        _check_choice(field, value, _CHOICES[field], where)
    elif field == "name":
        if not isinstance(value, str) or not value or any(c in value for c in "/\\\0"):
            raise SpecError("name", value, _accepted("name"), where)
    elif field == "scale" and value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise SpecError("scale", value, _SCALE_ACCEPTED, where)
        if not (math.isfinite(float(value)) and float(value) > 0):
            raise SpecError("scale", value, _SCALE_ACCEPTED, where)
    elif field == "sinks":
        if not isinstance(value, (bool, np.bool_)):
            raise SpecError("sinks", value, _accepted("sinks"), where)
    elif field == "window":
        if (
            not isinstance(value, tuple)
            or len(value) != 2
            or any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not -1 <= w <= MAX_WINDOW for w in value)
        ):
            raise SpecError("window", value, _WINDOW_ACCEPTED, where)


def validate(spec: AttentionSpec, where: str | None = None) -> None:
    """Check every field of ``spec``; raise :class:`SpecError` naming the first bad field.

    Besides each field's range, the largest tensor (the fp32 dQ accumulator [B, Hq, Sq, Dqk], or the
    biggest of Q, K, V, O, dO and the gradients) must stay under 2**63 bytes, which int64 byte offsets
    address; the error names ``batch`` (or ``heads_q`` when one batch is too large) with the range that
    fits the other fields.
    """
    for field in ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim_qk", "head_dim_v"):
        _check_field(field, getattr(spec, field), where)
    if spec.heads_q % spec.heads_kv:
        raise SpecError("heads_kv", spec.heads_kv, f"a divisor of heads_q = {spec.heads_q}", where)
    for field in ("dtype", "alignment", "layout"):
        _check_field(field, getattr(spec, field), where)
    # bytes per (batch, head) of the query side (Q, O, dO, L, the fp32 dQ accumulator) and the K/V side,
    # in Python ints (NumPy integers would wrap)
    b, hq, hkv, sq, sk, dqk, dv = (int(getattr(spec, f)) for f in ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim_qk", "head_dim_v"))
    item = itemsize(spec.dtype)
    per_q = sq * max(dqk * 4, dv * item)
    per_kv = sk * max(dqk, dv) * item
    per_batch = max(hq * per_q, hkv * per_kv)
    if b * per_batch > MAX_TENSOR_BYTES:
        why = "the largest tensor must stay under 2**63 bytes: kernels use int64 byte offsets"
        if per_batch <= MAX_TENSOR_BYTES:
            raise SpecError("batch", spec.batch, f"an integer from 1 to {MAX_TENSOR_BYTES // per_batch} for these heads, seq and head dims ({why})", where)
        raise SpecError("heads_q", spec.heads_q, f"an integer from 1 to {MAX_TENSOR_BYTES // max(per_q, per_kv)} at batch 1 for these seq and head dims ({why})", where)
    for field in ("name", "scale", "window", "sinks"):
        _check_field(field, getattr(spec, field), where)
    _check_mods(spec, where)
    if spec.sinks and any(getattr(p, "name", None) == "sinks" for p in spec.params or ()):
        raise SpecError("params.sinks", "sinks", "another name: sinks = true reserves the input 'sinks'", where)
    _check_packed_ids(spec, where)


def _check_packed_ids(spec: AttentionSpec, where: str | None) -> None:
    ids = spec.packed_ids
    accepted = _PACKED_ACCEPTED
    if ids == ():
        return
    if not isinstance(ids, tuple) or len(ids) != 2 or not all(isinstance(n, str) for n in ids):
        raise SpecError("packed_ids", ids, accepted, where)
    decls = {p.name: p for p in spec.params}
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    for name, length in zip(ids, (spec.seq_q, spec.seq_k)):
        p = decls.get(name)
        if p is None or p.dtype != "int32" or p.concrete_shape(sizes) != (length,):
            raise SpecError("packed_ids", list(ids), f"{accepted} ({name!r} is not one)", where)
    window = spec.window
    first, stop = visible_row_range(spec.seq_q, spec.seq_k, window, spec.offset)
    if first >= stop:
        raise SpecError(
            "window",
            window,
            f"a mask that leaves at least one query row a visible key (seq_q={spec.seq_q}, "
            f"seq_k={spec.seq_k}, alignment={spec.alignment!r} leave every row empty)",
            where,
        )


def _generate_params(spec: AttentionSpec) -> None:
    """Make the values of ``spec``'s generated parameters (:mod:`tilegen.core.paramgen`) for its sizes,
    in place (the spec is being built). Nothing when no parameter has a generator, or while the sizes
    are not valid yet (:func:`validate` then names them).

    Raises:
        SpecError: ``params.NAME.KEY`` when the generator cannot fill the parameter at these sizes.
    """
    params = spec.params
    if not isinstance(params, tuple) or not any(getattr(p, "generator", None) is not None for p in params):
        return
    try:
        for field in ("batch", "heads_q", "heads_kv", "seq_q", "seq_k"):
            _check_field(field, getattr(spec, field), None)
    except SpecError:
        return
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    out = []
    for p in params:
        if getattr(p, "generator", None) is not None:
            try:
                shape = p.concrete_shape(sizes)
            except (TypeError, ValueError):
                shape = None
            if shape is not None and len(shape) == 1 and shape[0] > 0:
                gen, values = p.generator.apply(shape[0], f"params.{p.name}.{p.generator.kind}")
                p = dataclasses.replace(p, values=values, generator=gen)
        out.append(p)
    object.__setattr__(spec, "params", tuple(out))


def _check_mods(spec: AttentionSpec, where: str | None) -> None:
    """Parse the mods against the declared params (a ModError names the construct); check each
    parameter's values against its shape."""
    for field in ("score_mod", "mask_mod"):
        if not isinstance(getattr(spec, field), str):
            raise SpecError(field, getattr(spec, field), _MOD_ACCEPTED, where)
    if spec.params == () and not spec.score_mod and not spec.mask_mod:
        return  # no mods: the mod language (sympy) is not imported
    from tilegen.core.mods import ModError, ParamDecl, parse

    if not isinstance(spec.params, tuple) or not all(isinstance(p, ParamDecl) for p in spec.params):
        raise SpecError("params", spec.params, "a tuple of tilegen.mods.ParamDecl", where)
    params = {p.name: p for p in spec.params}
    if len(params) != len(spec.params):
        raise SpecError("params", [p.name for p in spec.params], "distinct parameter names", where)
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    for p in spec.params:
        try:
            shape = p.concrete_shape(sizes)
        except (TypeError, ValueError):
            raise SpecError(f"params.{p.name}.shape", list(map(str, p.shape)), "sizes that are positive for this spec", where) from None
        if any(d <= 0 for d in shape):
            raise SpecError(f"params.{p.name}.shape", list(map(str, p.shape)), f"sizes that are positive for this spec (got {shape})", where)
        if p.values is not None and len(p.values) != int(np.prod(shape)):
            raise SpecError(
                f"params.{p.name}.values", f"{len(p.values)} values",
                f"{int(np.prod(shape))} values (shape {list(shape)}): explicit values do not follow a size change; "
                f"a generator does ({', '.join(GENERATORS)}; tilegen spec --fields)", where,
            )
    for field, kind in (("score_mod", "score"), ("mask_mod", "mask")):
        text = getattr(spec, field)
        if text:
            try:
                parse(text, kind, params)
            except ModError as exc:
                raise SpecError(exc.field, exc.value, exc.accepted, where) from None


_FIELDS = {f.name for f in dataclasses.fields(AttentionSpec)}
_SHORTHANDS = {"heads": ("heads_q", "heads_kv"), "seq": ("seq_q", "seq_k"), "head_dim": ("head_dim_qk", "head_dim_v")}


def spec_from_dict(data: Mapping[str, Any], where: str | None = None) -> AttentionSpec:
    """Build a spec from plain data (a parsed TOML/YAML file).

    Accepts the fields of :class:`AttentionSpec`, the shorthands ``heads``, ``seq`` and ``head_dim`` and
    ``mask = "none" | "causal" | "window"`` (with ``window = [left, right]`` for ``"window"``).

    Raises:
        SpecError: an unknown key (with the closest known one), a missing field, a wrong type or an
            invalid value. When several fields are wrong, a :class:`~tilegen.core.errors.SpecErrors` lists
            every one (one line each); the rules across fields (heads_kv divides heads_q, the tensor
            size, the mask leaving a row visible) are checked once every field is valid on its own.
    """
    if not isinstance(data, Mapping):
        raise SpecError("spec", type(data).__name__, "a table of fields (TOML table or YAML mapping)", where)
    data = dict(data)
    errors: list[SpecError] = []
    copies: set[str] = set()  # fields set from another one (a shorthand, heads_kv = heads_q): checked once
    allowed = (_FIELDS - {"window"}) | set(_SHORTHANDS) | {"mask", "window"}
    if "params" in data:
        from tilegen.core.mods import parse_param_decls

        try:
            data["params"] = parse_param_decls(data["params"], where)
        except SpecError as exc:
            errors.append(exc)
            data.pop("params")
    for key in list(data):
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            errors.append(SpecError(str(key), data.pop(key), f"{hint}a known field: " + ", ".join(sorted(allowed)), where))
    for short, (a, b) in _SHORTHANDS.items():
        if short in data:
            for full in (a, b):
                if full in data:
                    errors.append(SpecError(full, data.pop(full), f"absent when the shorthand {short!r} is given", where))
            data[a] = data[b] = data.pop(short)
            copies.add(b)
    if "heads_q" in data and "heads_kv" not in data:
        data["heads_kv"] = data["heads_q"]
        copies.add("heads_kv")
    if "head_dim_qk" in data and "head_dim_v" not in data:
        data["head_dim_v"] = data["head_dim_qk"]
        copies.add("head_dim_v")
    mask = data.pop("mask", None)
    window = data.pop("window", None)
    if mask is None:
        mask = "window" if window is not None else "none"
    try:
        _check_choice("mask", mask, MASK_KINDS, where)
    except SpecError as exc:
        errors.append(exc)
    else:
        if mask == "window":
            if not isinstance(window, (list, tuple)) or len(window) != 2:
                errors.append(SpecError("window", window, _WINDOW_ACCEPTED, where))
            else:
                data["window"] = tuple(window)
        elif window is not None:
            errors.append(SpecError("window", window, f"absent when mask = {mask!r}", where))
        else:
            data["window"] = (-1, 0) if mask == "causal" else (-1, -1)
    if isinstance(data.get("packed_ids"), list):
        data["packed_ids"] = tuple(data["packed_ids"])
    for required in ("batch", "heads_q", "seq_q", "seq_k", "head_dim_qk"):
        if required not in data:
            short = next(s for s, pair in _SHORTHANDS.items() if required in pair) if required != "batch" else None
            also = f"; or {short!r} for both of the pair" if short else ""
            errors.append(MissingFieldError(required, _accepted(required) + also, where))
    for field, value in data.items():
        if field in copies or field in ("score_mod", "mask_mod", "params"):
            continue
        try:
            _check_field(field, value, where)
        except SpecError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)
    try:
        spec = AttentionSpec(**data)
    except SpecError as exc:
        raise SpecError(exc.field, exc.value, exc.accepted, where) from None
    for given, made in zip(data.get("params", ()), spec.params):
        # lengths written in the file are the lengths meant: scaled only by a later size override
        if given.generator != made.generator:
            field = f"params.{given.name}.{given.generator.kind}"
            length = len(made.values)
            raise SpecError(field, given.generator.spec_value(), f"document lengths summing to {length} (the parameter's length, shape [{', '.join(map(str, made.shape))}]), or a count of documents", where)
    return spec


def load_spec(path: str | Path) -> AttentionSpec:
    """Load a spec from a ``.toml``, ``.yaml`` or ``.yml`` file.

    Raises:
        SpecError: unreadable file, unknown extension, a parse error, or an invalid field.
    """
    path = Path(path)
    where = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise SpecError("spec file", str(path), "a file ending in .toml, .yaml or .yml", None)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("spec file", str(path), f"a readable file ({exc.strerror or exc})", None) from None
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # parse errors of either format
        raise SpecError("spec file", str(path), f"valid {suffix[1:].upper()} ({exc})".replace("\n", " "), None) from None
    if isinstance(data, Mapping) and "name" not in data:
        data = {**data, "name": path.stem}
    return spec_from_dict(data, where)


def builtin_specs() -> dict[str, Path]:
    """Names of the built-in specs and their files."""
    return builtin_spec_files()


def builtin_spec(name: str) -> AttentionSpec:
    """The built-in spec called ``name`` (``llama2-7b``, ``llama3-8b``, ``tiny``, ...).

    Raises:
        SpecError: no built-in spec has that name.
    """
    specs = builtin_specs()
    if name not in specs:
        close = difflib.get_close_matches(str(name), list(specs), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError("spec", name, f"{hint}one of " + ", ".join(specs), None)
    return load_spec(specs[name])


# --- the field reference --------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDoc:
    """One key of a spec file, as :func:`field_reference` lists it.

    Attributes:
        name: the key (``params.NAME.KEY`` for the keys of a parameter table).
        type: the TOML type.
        accepted: what the checks accept, in the words of their errors.
        default: the value when absent (``required`` for a field that must be given).
        example: one TOML line.
        doc: what it means.
    """

    name: str
    type: str
    accepted: str
    default: str
    example: str
    doc: str

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


# (key, type, default when not the dataclass's, example, meaning); the accepted words come from the
# tables the checks read (_INT_RANGES, _CHOICES, _TEXT, tilegen.core.paramgen), the defaults of the
# fields without an entry here from AttentionSpec itself
_REFERENCE = (
    ("name", "string", "the file's name without its extension", 'name = "llama3-8b"', "a label for reports and file names"),
    ("batch", "integer", "required", "batch = 1", "B, the batch size"),
    ("heads_q", "integer", "required (or heads)", "heads_q = 32", "Hq, the query heads"),
    ("heads_kv", "integer", "heads_q", "heads_kv = 8", "Hkv, the key/value heads; divides heads_q (GQA, MQA when smaller)"),
    ("heads", "integer", "absent", "heads = 16", "sets heads_q and heads_kv to the same value"),
    ("seq_q", "integer", "required (or seq)", "seq_q = 8192", "Sq, the query length"),
    ("seq_k", "integer", "required (or seq)", "seq_k = 8192", "Sk, the key/value length"),
    ("seq", "integer", "absent", "seq = 4096", "sets seq_q and seq_k to the same value"),
    ("head_dim_qk", "integer", "required (or head_dim)", "head_dim_qk = 128", "Dqk, the head dim of Q and K"),
    ("head_dim_v", "integer", "head_dim_qk", "head_dim_v = 128", "Dv, the head dim of V and O"),
    ("head_dim", "integer", "absent", "head_dim = 64", "sets head_dim_qk and head_dim_v to the same value"),
    ("dtype", "string", None, 'dtype = "bf16"', "the dtype of Q, K, V, O and the gradients (L is always fp32)"),
    ("scale", "number", "1/sqrt(head_dim_qk)", "scale = 0.125", "the softmax scale"),
    ("mask", "string", "'none' ('window' when window is given)", 'mask = "causal"', "the window: none, causal (-1, 0), or window = [left, right]"),
    ("window", "array of 2 integers", "absent (mask decides)", "window = [4096, 0]",
     "key j is visible to query i iff i + off - left <= j <= i + off + right (-1: unbounded); with mask = 'window'"),
    ("alignment", "string", None, 'alignment = "top_left"', "where the causal diagonal sits when Sq != Sk: off = Sk - Sq (bottom_right) or 0"),
    ("layout", "string", None, 'layout = "BSND"', "how Q, K, V, O lie in memory: [B, N, S, D] or [B, S, N, D]"),
    ("score_mod", "string", "absent (none)", 'score_mod = "30 * tanh(score / 30)"',
     "a score modification over score, b, h, q_idx, kv_idx, the sizes and the params (tilegen.mods)"),
    ("mask_mod", "string", "absent (none)", 'mask_mod = "doc[q_idx] == doc[kv_idx]"', "a mask modification, and-ed with the window"),
    ("sinks", "boolean", None, "sinks = true", "one learnable logit per query head in every row's softmax denominator (input sinks [Hq])"),
    ("packed_ids", "array of 2 strings", "[] (no packed batch)", 'packed_ids = ["doc", "doc"]',
     "the int32 params holding each query's and key's sequence id in a packed batch; no output row is written where negative"),
)


def _default_text(name: str) -> str:
    field = next(f for f in dataclasses.fields(AttentionSpec) if f.name == name)
    value = field.default
    return "false" if value is False else "true" if value is True else repr(value)


def field_reference() -> list[FieldDoc]:
    """Every key of a spec file: the fields of :class:`AttentionSpec`, the shorthands (``heads``,
    ``seq``, ``head_dim``, ``mask``) and the keys of a ``[params.NAME]`` table, the generators
    (``documents``, ``prefix``, ``alibi``) included, each with its type, what the checks accept (the
    words of their errors: the same tables :func:`validate` and :func:`spec_from_dict` read, so that the
    reference cannot drift from them), its default and an example. ``tilegen spec --fields`` prints it;
    :func:`format_field_reference` renders it as text or Markdown."""
    from tilegen.core.paramgen import DTYPE_ACCEPTED, GENERATORS, SHAPE_ACCEPTED, VALUES_ACCEPTED

    out = []
    for name, type_, default, example, doc in _REFERENCE:
        pair = _SHORTHANDS.get(name)
        accepted = _accepted(pair[0] if pair else name)
        out.append(FieldDoc(name, type_, accepted, default if default is not None else _default_text(name), example, doc))
    params = [
        ("shape", "array of integers or strings", "the generator's shape; required without one", 'shape = ["Hq"]', SHAPE_ACCEPTED,
         "the parameter's shape in terms of the spec's sizes"),
        ("dtype", "string", "'fp32'; the generator's dtype with one", 'dtype = "int32"', DTYPE_ACCEPTED, "the parameter's dtype"),
        ("values", "array of numbers", "absent: the caller gives the array (run: random or --data)", "values = [0.25, 0.0625]",
         VALUES_ACCEPTED, "the values, flattened row-major; they do not follow a size override"),
    ]
    for key, type_, default, example, accepted, doc in params:
        out.append(FieldDoc(f"params.NAME.{key}", type_, accepted, default, example, doc))
    for g in GENERATORS.values():
        type_ = "boolean or string" if g.key == "alibi" else "integer or array of integers"
        out.append(FieldDoc(f"params.NAME.{g.key}", type_, g.accepted, "absent", g.example,
                            f"{g.doc}; sets dtype {g.dtype!r} and, without shape, shape [{g.shape!r}]; instead of values"))
    return out


def format_field_reference(markdown: bool = False, width: int = 100) -> str:
    """:func:`field_reference` as text wrapped at ``width`` columns, or as one Markdown table."""
    import textwrap

    fields = field_reference()
    if markdown:
        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        lines = ["| field | type | accepted | default | example | meaning |", "|---|---|---|---|---|---|"]
        lines += [f"| `{f.name}` | {cell(f.type)} | {cell(f.accepted)} | {cell(f.default)} | `{cell(f.example)}` | {cell(f.doc)} |" for f in fields]
        return "\n".join(lines) + "\n"
    lines = ["Spec file fields (TOML or YAML; a [params.NAME] table per parameter array the mods read):"]
    for f in fields:
        lines.append("")
        lines.append(f"{f.name} ({f.type})")
        for label, text in (("accepted", f.accepted), ("default", f.default), ("example", f.example), ("meaning", f.doc)):
            lines.extend(textwrap.wrap(f"{label}: {text}", width, initial_indent="    ", subsequent_indent="        ", break_on_hyphens=False))
    return "\n".join(lines) + "\n"


UNBOUNDED = 1 << 62  # stands for ±infinity in int64 arithmetic (positions are far below 2^62)


def visible_band(seq_q: int, seq_k: int, window, alignment: str) -> tuple[int, int]:
    """[dl, dh]: the visible values of c − r (DESIGN §3), ±UNBOUNDED where a side is unbounded."""
    left, right = window
    off = seq_k - seq_q if alignment == "bottom_right" else 0
    return (off - left if left >= 0 else -UNBOUNDED), (off + right if right >= 0 else UNBOUNDED)
