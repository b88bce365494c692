"""Read the printer's text back into the IR: :func:`parse_program` (the inverse of
:func:`tilegen.core.printer.format_program`).

``parse_program(format_program(p)) == p`` for every program the passes make, and printing the parsed
program gives the same text (tests/test_roundtrip.py checks both after every pass). The text is read line
by line, by indentation: the header (name and attributes, scale and window, bound sizes, mods), the
tensors, then each kernel with its buffers and its loop nest. A line is the node's own text, then its
annotations (``  @key`` or ``  @key(field=value, ...)``, each read with
:func:`~tilegen.core.annotations.annotation_class` and its fields), then notes after ``   # ``: words
the printer derives from the fields and the annotations, which the parser skips (a loop's own note
comes first there and is read back: the annotations' notes follow it). A ``[stage g]`` tag is the loop's
:class:`~tilegen.core.ir.Pipelined` annotation again, and is skipped too.

Index expressions are read with sympy's parser over the IR's symbols: the shape and tile sizes
(:func:`~tilegen.core.ir.size_symbol`) and every other name as a loop index
(:func:`~tilegen.core.ir.index_symbol`); ``ceil`` is ``ceiling`` and ``Pow2``
:class:`~tilegen.core.exprs.Pow2`. Mods are read in the mod language (:func:`tilegen.core.mods.parse`).
Annotation classes register when their module is imported (a target's knobs with its pass package,
``tilegen.passes.ascend``; importing :mod:`tilegen.backends` registers every one): the parser, in the
core layer, knows none by name and reads whichever are registered.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from functools import lru_cache

import sympy
from sympy.parsing.sympy_parser import parse_expr, standard_transformations

from tilegen.core.annotations import Annotation, annotation_class
from tilegen.core.errors import TilegenError
from tilegen.core.exprs import Pow2
from tilegen.core.ir import (
    ELEMENTWISE_OPS,
    MOD_OPS,
    SHAPE_SYMBOLS,
    TILE_SYMBOLS,
    Access,
    Buffer,
    Elementwise,
    Fill,
    Kernel,
    Load,
    Loop,
    Mask,
    MaskInfo,
    MatMul,
    ModOp,
    Program,
    RowReduce,
    Store,
    Tensor,
    index_symbol,
    size_symbol,
)

_SIZE_NAMES = {s.name for s in SHAPE_SYMBOLS + TILE_SYMBOLS}
_FUNCTIONS = {"ceil": sympy.ceiling, "ceiling": sympy.ceiling, "floor": sympy.floor, "Min": sympy.Min, "Max": sympy.Max,
              "Mod": sympy.Mod, "Pow2": Pow2, "Piecewise": sympy.Piecewise, "oo": sympy.oo}
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_BINARY = {"+": "add", "-": "sub", "*": "mul"}
_LOOP_KINDS = {"parallel": "parallel", "for": "serial"}


class ParseError(TilegenError, ValueError):
    """The text is not the printer's form: ``line N: `text`: expected ...`` (one line)."""

    def __init__(self, lineno: int, text: str, expected: str):
        self.lineno, self.text, self.expected = lineno, text, expected
        super().__init__(f"line {lineno}: `{text.strip()}`: expected {expected}")


class _Fail(Exception):
    """What a line's reader expected; :func:`_guard` turns it into a :class:`ParseError` naming the line."""

    def __init__(self, expected: str):
        super().__init__(expected)
        self.expected = expected


# --- pieces ------------------------------------------------------------------------------------------


def split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes, each part stripped ([] for blank text)."""
    parts, depth, quote, start, n = [], 0, "", 0, 0
    while n < len(text):
        c = text[n]
        if quote:
            if c == "\\":
                n += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(sep, n):
            parts.append(text[start:n].strip())
            start = n + len(sep)
            n = start
            continue
        n += 1
    if depth or quote:
        raise _Fail(f"balanced brackets and quotes in `{text}`")
    last = text[start:].strip()
    return parts + [last] if parts or last else []


def _top_find(text: str, pattern: re.Pattern, start: int = 0) -> int:
    """The first match of ``pattern`` at or after ``start`` outside brackets and quotes, -1 if none."""
    if "'" not in text and '"' not in text:  # no quotes: the bracket depth of a match is its prefix's
        for m in pattern.finditer(text, start):
            prefix = text[: m.start()]
            opened = prefix.count("(") + prefix.count("[") + prefix.count("{")
            if opened == prefix.count(")") + prefix.count("]") + prefix.count("}"):
                return m.start()
        return -1
    depth, quote, n = 0, "", start
    while n < len(text):
        c = text[n]
        if quote:
            if c == "\\":
                n += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and pattern.match(text, n):
            return n
        n += 1
    return -1


@lru_cache(maxsize=None)
def parse_expr_text(text: str) -> sympy.Expr:
    """An index expression as the printer writes it (:func:`~tilegen.core.printer.fmt_expr`).

    Raises:
        _Fail: not an expression of known functions and names."""
    names = {}
    for name in set(_NAME.findall(text)):
        if name in _FUNCTIONS:
            names[name] = _FUNCTIONS[name]
        elif name in _SIZE_NAMES:
            names[name] = size_symbol(name)
        else:
            names[name] = index_symbol(name)
    try:
        value = parse_expr(text, local_dict=names, global_dict={"Integer": sympy.Integer, "Float": sympy.Float,
                                                                   "Rational": sympy.Rational, "Symbol": sympy.Symbol},
                           transformations=standard_transformations)
    except Exception:  # sympy raises SyntaxError, TypeError, TokenError... for text that is not an expression
        raise _Fail(f"an index expression, not `{text}`") from None
    if not isinstance(value, sympy.Basic):
        raise _Fail(f"an index expression, not `{text}`")
    return value


def _expr(text: str) -> sympy.Expr:
    if not text:
        raise _Fail("an index expression")
    return parse_expr_text(text)


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _Fail(f"{what} (an integer), not `{text}`") from None


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _Fail(f"{what} (a number), not `{text}`") from None


def _shape(text: str) -> tuple[sympy.Expr, ...]:
    if not (text.startswith("[") and text.endswith("]")):
        raise _Fail(f"a shape `[d0, d1, ...]`, not `{text}`")
    return tuple(_expr(p) for p in split_top(text[1:-1]))


def _expr_hint(hint) -> bool:
    return any(w in str(hint) for w in ("Expr", "sympy", "Basic"))


def parse_value(text: str, expr: bool = False):
    """A field value as :func:`~tilegen.core.printer.fmt_value` writes it: a Python literal (``True``,
    ``None``, a number, a quoted string, a tuple), else a sympy expression; ``expr``: a sympy expression
    (or a tuple of them) in any case."""
    if text.startswith("(") and text.endswith(")") and (text == "()" or len(split_top(text[1:-1])) > 1 or text.endswith(",)")):
        return tuple(parse_value(p, expr) for p in split_top(text[1:-1]) if p)
    if not expr:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            pass
    return _expr(text)


def parse_annotation(text: str) -> Annotation:
    """``@key`` or ``@key(field=value, ...)`` as the annotation it prints."""
    m = re.fullmatch(r"@([A-Za-z_][\w]*)(?:\((.*)\))?", text, re.S)
    if not m:
        raise _Fail(f"an annotation `@key(field=value, ...)`, not `{text}`")
    try:
        cls = annotation_class(m.group(1))
    except KeyError as exc:
        raise _Fail(str(exc.args[0])) from None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for part in split_top(m.group(2) or ""):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in fields:
            raise _Fail(f"`field=value` with a field of @{cls.KEY} ({', '.join(fields) or 'none'}), not `{part}`")
        values[name] = parse_value(value.strip(), _expr_hint(fields[name].type))
    try:
        return cls(**values)
    except TypeError as exc:
        raise _Fail(f"the fields of @{cls.KEY} ({', '.join(fields)}): {exc}") from None


_ANN_START = re.compile(r"  @[A-Za-z_]")
_NOTE_START = re.compile(r"   # ")


def split_line(text: str) -> tuple[str, tuple[Annotation, ...], str | None]:
    """A node's line as (its own text, its annotations, the notes after ``#`` or None)."""
    note = None
    at = _top_find(text, _NOTE_START)
    if at >= 0:
        text, note = text[:at], text[at + len(_NOTE_START.pattern):]
    at = _top_find(text, _ANN_START)
    if at < 0:
        return text.rstrip(), (), note
    own, rest = text[:at].rstrip(), text[at:]
    anns, starts = [], []
    n = 0
    while n >= 0:
        starts.append(n)
        n = _top_find(rest, _ANN_START, n + 1)
    for a, z in zip(starts, starts[1:] + [len(rest)]):
        anns.append(parse_annotation(rest[a:z].strip()))
    return own, tuple(anns), note


def _check_on(node_cls: type, anns: tuple[Annotation, ...]) -> None:
    for a in anns:
        if node_cls.__name__ not in a.ON:
            raise _Fail(f"annotations of a {node_cls.__name__} (@{a.KEY} annotates {', '.join(a.ON)})")


# --- statements --------------------------------------------------------------------------------------


def _ref(text: str) -> str:
    """A buffer reference ``name@SCOPE`` (or a bare name) as the buffer's name."""
    name = text.split("@", 1)[0]
    if not _NAME.fullmatch(name):
        raise _Fail(f"a buffer name, not `{text}`")
    return name


def _operand(text: str):
    """An elementwise operand: a number (``0.5``, ``-inf``) or a buffer reference."""
    try:
        return float(text)
    except ValueError:
        return _ref(text)


def _access(text: str) -> Access:
    m = re.fullmatch(r"([A-Za-z_]\w*)\[(.*)\]", text)
    if not m:
        raise _Fail(f"a tensor tile `T[i, start:+size, ...]`, not `{text}`")
    index, tile = [], []
    for part in split_top(m.group(2)):
        start, sep, size = part.partition(":+")
        if sep:
            index.append(_expr(start.strip()))
            tile.append(_expr(size.strip()))
        elif tile:
            raise _Fail(f"single indices before the tiled dims in `{text}`")
        else:
            index.append(_expr(part))
    return Access(m.group(1), tuple(index), tuple(tile))


_TAG_START = re.compile(r"  \(")


def _tags(text: str) -> tuple[str, list[str]]:
    """``text  (tag)  (tag)`` as (text, [tag, ...]) (the tags in parentheses after two spaces)."""
    at = _top_find(text, _TAG_START)
    if at < 0:
        return text, []
    own, tags = text[:at], []
    while at >= 0:
        end = _top_find(text, _TAG_START, at + 1)
        tag = text[at + 2:end if end >= 0 else len(text)].rstrip()
        if not tag.endswith(")"):
            raise _Fail(f"a tag `(...)`, not `{tag}`")
        tags.append(tag[1:-1])
        at = end
    return own, tags


def parse_stmt(text: str, ann: tuple[Annotation, ...]):
    """One statement line's own text (no annotations, no stage tag) as its node with ``ann``."""
    m = re.fullmatch(r"(.+?) (\+?=) (.+)", text)
    if not m:
        raise _Fail("a statement `dst = ...` or `T[...] = src`")
    lhs, op, rhs = m.group(1), m.group(2), m.group(3)
    if "[" in lhs:  # a store
        src, tags = _tags(rhs)
        atomic, rows = False, ""
        for t in tags:
            r = re.fullmatch(r"rows with (\w+) >= 0", t)
            if t == "atomic add":
                atomic = True
            elif r:
                rows = r.group(1)
            else:
                raise _Fail(f"a store's tag `(atomic add)` or `(rows with R >= 0)`, not `({t})`")
        if atomic != (op == "+="):
            raise _Fail("`+=` with `(atomic add)`, `=` without")
        _check_on(Store, ann)
        return Store(_access(lhs), _ref(src), atomic, rows, ann)
    dst = _ref(lhs)
    if rhs.startswith("load "):
        body, tags = _tags(rhs[5:])
        pad, rows = None, ""
        for t in tags:
            r = re.fullmatch(r"rows with (\w+) >= 0, else 0", t)
            if t.startswith("pad "):
                pad = _float(t[4:], "a pad value")
            elif r:
                rows = r.group(1)
            else:
                raise _Fail(f"a load's tag `(pad X)` or `(rows with R >= 0, else 0)`, not `({t})`")
        _check_on(Load, ann)
        return Load(dst, _access(body), pad, rows, ann)
    mm = re.fullmatch(r"(?:(\S+) \* )?(\S+?)(ᵀ?) @ (\S+?)(ᵀ?)", rhs)
    if mm:
        alpha = 1.0 if mm.group(1) is None else _float(mm.group(1), "a matmul's alpha")
        _check_on(MatMul, ann)
        return MatMul(dst, _ref(mm.group(2)), _ref(mm.group(4)), bool(mm.group(3)), bool(mm.group(5)), op == "+=", alpha, ann)
    if op != "=":
        raise _Fail("`+=` only on a matmul `dst += a @ b` or a store")
    call = re.fullmatch(r"([A-Za-z_]\w*)\((.*)\)", rhs)
    if call:
        fn, inner = call.group(1), call.group(2)
        if fn == "fill":
            _check_on(Fill, ann)
            return Fill(dst, _float(inner, "a fill value"), ann)
        if fn in ("rowmax", "rowsum"):
            _check_on(RowReduce, ann)
            return RowReduce(dst, _ref(inner), fn[3:], ann)
        if fn == "mask":
            parts = split_top(inner)
            if len(parts) != 3:
                raise _Fail(f"`mask(src, rows R+, cols C+)`, not `{rhs}`")
            _check_on(Mask, ann)
            return Mask(dst, _ref(parts[0]), _rows(parts[1], "rows"), _rows(parts[2], "cols"), ann)
        if fn.startswith("mod_") and fn[4:] in MOD_OPS:
            return _modop(dst, fn[4:], split_top(inner), ann, rhs)
        if fn in ELEMENTWISE_OPS:
            args = tuple(_operand(a) for a in split_top(inner))
            _check_on(Elementwise, ann)
            return Elementwise(dst, fn, args, ann)
        raise _Fail(f"an operation (fill, rowmax, rowsum, mask, mod_<op>, {', '.join(ELEMENTWISE_OPS)}), not `{fn}`")
    bin_ = re.fullmatch(r"(\S+) ([-+*]) (\S+)", rhs)
    _check_on(Elementwise, ann)
    if bin_:
        return Elementwise(dst, _BINARY[bin_.group(2)], (_operand(bin_.group(1)), _operand(bin_.group(3))), ann)
    if re.fullmatch(r"\S+", rhs):
        return Elementwise(dst, "copy", (_operand(rhs),), ann)
    raise _Fail(f"a statement's right-hand side, not `{rhs}`")


def _rows(text: str, word: str) -> sympy.Expr:
    if not (text.startswith(word + " ") and text.endswith("+")):
        raise _Fail(f"`{word} E+`, not `{text}`")
    return _expr(text[len(word) + 1:-1])


def _modop(dst: str, op: str, parts: list[str], ann, rhs: str) -> ModOp:
    at = next((n for n, p in enumerate(parts) if p.startswith("rows ")), None)
    if at is None or at + 1 >= len(parts):
        raise _Fail(f"`mod_{op}(args, rows R+, cols C+, ...)`, not `{rhs}`")
    args = tuple(_ref(a) for a in parts[:at])
    row0, col0 = _rows(parts[at], "rows"), _rows(parts[at + 1], "cols")
    term, blocks, tensors = -1, "", ()
    for p in parts[at + 2:]:
        full = re.fullmatch(r"full tiles of (\w+) unmasked", p)
        if p.startswith("term "):
            term = _int(p[5:], "a term")
        elif full:
            blocks = full.group(1)
        elif p.startswith("reading "):
            tensors = tuple(p[8:].split())
        else:
            raise _Fail(f"`term N`, `full tiles of X unmasked` or `reading T ...`, not `{p}`")
    _check_on(ModOp, ann)
    return ModOp(dst, op, args, row0, col0, term, blocks, tensors, ann)


def _loop_head(text: str, ann) -> dict:
    m = re.fullmatch(r"(\w+) ([A-Za-z_]\w*) in \[(.*)\):(?:  \((.*)\))?", text)
    if not m:
        raise _Fail("a loop `for v in [start, stop):` or `parallel v in [start, stop):`")
    bounds = split_top(m.group(3))
    if len(bounds) != 2:
        raise _Fail(f"loop bounds `[start, stop)`, not `[{m.group(3)})`")
    fields = {"var": index_symbol(m.group(2)), "start": _expr(bounds[0]), "stop": _expr(bounds[1]),
              "kind": _LOOP_KINDS.get(m.group(1), m.group(1))}
    for part in split_top(m.group(4) or ""):
        dom = re.fullmatch(r"domain (\S+)", part)
        blk = re.fullmatch(r"skipping tiles (\S+) marks empty", part)
        if dom:
            fields["domain"] = dom.group(1)
        elif blk:
            fields["blocks"] = blk.group(1)
        elif _NAME.fullmatch(part):
            fields["role"] = part
        else:
            raise _Fail(f"a loop's role, `domain D` or `skipping tiles X marks empty`, not `{part}`")
    _check_on(Loop, ann)
    return fields


def _loop_note(loop: Loop, notes: str | None) -> str:
    """The loop's own note: what comes before its annotations' notes after ``#``."""
    if notes is None:
        return ""
    derived = "; ".join(n for n in (a.note(loop) for a in loop.ann) if n)
    if not derived:
        return notes
    if notes == derived:
        return ""
    if notes.endswith("; " + derived):
        return notes[: -len(derived) - 2]
    raise _Fail(f"the loop's note, then its annotations' notes `{derived}`")


# --- the program -------------------------------------------------------------------------------------


class _Lines:
    """The text's lines with their numbers (blank lines skipped) and indentation."""

    def __init__(self, text: str):
        self.items = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        self.pos = 0

    def peek(self):
        return self.items[self.pos] if self.pos < len(self.items) else None

    def indent(self) -> int:
        item = self.peek()
        return -1 if item is None else len(item[1]) - len(item[1].lstrip(" "))

    def next(self):
        item = self.peek()
        self.pos += 1
        return item


def _guard(lineno: int, line: str, fn, *args):
    try:
        return fn(*args)
    except _Fail as exc:
        raise ParseError(lineno, line, exc.expected) from None


def _body(lines: _Lines, depth: int) -> tuple:
    out = []
    while lines.indent() == depth:
        lineno, line = lines.next()
        text = re.sub(r"^\[stage \d+\] ", "", line.strip())
        own, ann, notes = _guard(lineno, line, split_line, text)
        if re.match(r"\w+ [A-Za-z_]\w* in \[", own):
            head = _guard(lineno, line, _loop_head, own, ann)
            body = _body(lines, depth + 2)
            loop = Loop(body=body, ann=ann, **head)
            loop = dataclasses.replace(loop, note=_guard(lineno, line, _loop_note, loop, notes))
            out.append(loop)
        else:
            out.append(_guard(lineno, line, parse_stmt, own, ann))
    if lines.indent() > depth:
        lineno, line = lines.peek()
        raise ParseError(lineno, line, f"a line indented by {depth} spaces")
    return tuple(out)


def _header(lineno: int, line: str) -> tuple[str, tuple]:
    m = re.fullmatch(r"program (\S+)  \[(.*)\]", line)
    if not m:
        raise _Fail("`program NAME  [attr=value, ...]`")
    attrs = []
    for part in split_top(m.group(2)):
        key, eq, value = part.partition("=")
        if not eq or not _NAME.fullmatch(key):
            raise _Fail(f"an attribute `key=value`, not `{part}`")
        attrs.append((key, parse_value(value)))
    return m.group(1), tuple(attrs)


def _scale_mask(line: str) -> tuple[float, MaskInfo]:
    m = re.fullmatch(r"  scale = (\S+);  mask: (.*)", line)
    if not m:
        raise _Fail("`  scale = X;  mask: none` or `...;  mask: window(left=L, right=R), off = E`")
    scale = _float(m.group(1), "the scale")
    mask = m.group(2)
    w = re.fullmatch(r"window\(left=(-?\d+), right=(-?\d+)\), off = (.+)", mask)
    if w:
        return scale, MaskInfo(int(w.group(1)), int(w.group(2)), _expr(w.group(3)))
    n = re.fullmatch(r"none(?:, off = (.+))?", mask)
    if n:
        return scale, MaskInfo(-1, -1, _expr(n.group(1)) if n.group(1) else sympy.Integer(0))
    raise _Fail(f"a mask `none` or `window(left=L, right=R), off = E`, not `{mask}`")


def _bound(text: str) -> tuple:
    env = []
    for part in split_top(text):
        m = re.fullmatch(r"([A-Za-z_]\w*)=(-?\d+)", part)
        if not m:
            raise _Fail(f"a bound size `NAME=int`, not `{part}`")
        env.append((size_symbol(m.group(1)), int(m.group(2))))
    return tuple(env)


def _mods(lines: _Lines):
    from tilegen.core.mods import ModError, ModSet, ParamDecl, parse

    params, score, mask = [], None, None
    while lines.indent() == 4:
        lineno, line = lines.next()
        text = line.strip()

        def read(text: str):
            nonlocal score, mask
            p = re.fullmatch(r"param ([A-Za-z_]\w*)  (\[.*?\])  (\w+)(?:  (documents|prefix|alibi)=(.*?))?(?:  values=(.*))?", text)
            if p:
                from tilegen.core.paramgen import ParamGenerator

                shape = tuple(int(d) if d.is_Integer else d for d in _shape(p.group(2)))
                gen = ParamGenerator(p.group(4), parse_value(p.group(5))) if p.group(4) else None
                values = parse_value(p.group(6)) if p.group(6) else None
                params.append(ParamDecl(p.group(1), shape, p.group(3), values, gen))
                return
            decls = {d.name: d for d in params}
            try:
                if text.startswith("score_mod = "):
                    score = parse(text[12:], "score", decls)
                elif text.startswith("mask_mod = "):
                    mask = parse(text[11:], "mask", decls)
                else:
                    raise _Fail("`param NAME  [shape]  dtype`, `score_mod = E` or `mask_mod = E`")
            except ModError as exc:
                raise _Fail(f"an expression of the mod language ({exc})") from None

        _guard(lineno, line, read, text)
    return ModSet(score=score, mask=mask, params=tuple(params))


def _tensor(text: str) -> Tensor:
    own, ann, _ = split_line(text)
    m = re.fullmatch(r"(\S+) +(\[.*?\])  (\w+)  HBM (\w+)(?:  (\w+))?", own)
    if not m:
        raise _Fail("a tensor `NAME  [shape]  dtype  HBM kind  [layout]`")
    _check_on(Tensor, ann)
    return Tensor(m.group(1), _shape(m.group(2)), m.group(3), m.group(4), m.group(5) or "BNSD", ann)


def _buffer(text: str) -> Buffer:
    own, ann, _ = split_line(text)
    m = re.fullmatch(r"(\S+) +(\[.*?\])  (\w+)  (\w+)(?:  \((.*)\))?", own)
    if not m:
        raise _Fail("a buffer `NAME  [shape]  dtype  SCOPE  (xN stages, unit, rows split N ways)`")
    stages, unit, row_split = 1, None, 1
    for part in split_top(m.group(5) or ""):
        st = re.fullmatch(r"x(\d+) stages", part)
        rs = re.fullmatch(r"rows split (\d+) ways", part)
        if st:
            stages = int(st.group(1))
        elif rs:
            row_split = int(rs.group(1))
        elif _NAME.fullmatch(part):
            unit = part
        else:
            raise _Fail(f"`xN stages`, a unit or `rows split N ways`, not `{part}`")
    _check_on(Buffer, ann)
    return Buffer(m.group(1), _shape(m.group(2)), m.group(3), m.group(4), stages, unit, row_split, ann)


def _kernel(lineno: int, line: str, lines: _Lines) -> Kernel:
    def head():
        own, ann, _ = split_line(line.strip())
        m = re.fullmatch(r"kernel (\S+)  \(phase (\S+)\)", own)
        if not m:
            raise _Fail("`kernel NAME  (phase P)`")
        _check_on(Kernel, ann)
        return m.group(1), m.group(2), ann

    name, phase, ann = _guard(lineno, line, head)
    buffers = []
    if lines.indent() == 4 and lines.peek()[1].strip() == "buffers:":
        lines.next()
        while lines.indent() == 6:
            n, ln = lines.next()
            buffers.append(_guard(n, ln, _buffer, ln.strip()))
    body = _body(lines, 4)
    return Kernel(name, phase, tuple(buffers), body, ann)


def parse_program(text: str) -> Program:
    """The :class:`~tilegen.core.ir.Program` that :func:`~tilegen.core.printer.format_program` printed as
    ``text``.

    Raises:
        ParseError: a line is not the printer's form (the message names the line number, its text and
            what was expected there)."""
    lines = _Lines(text)
    first = lines.next()
    if first is None:
        raise ParseError(1, "", "`program NAME  [attr=value, ...]`")
    name, attrs = _guard(first[0], first[1], _header, *first)
    item = lines.next()
    if item is None:
        raise ParseError(first[0] + 1, "", "`  scale = X;  mask: ...`")
    scale, mask = _guard(item[0], item[1], _scale_mask, item[1])
    env, mods = (), None
    if lines.peek() and lines.peek()[1].startswith("  bound: "):
        n, ln = lines.next()
        env = _guard(n, ln, _bound, ln[len("  bound: "):])
    if lines.peek() and lines.peek()[1] == "  mods:":
        lines.next()
        mods = _mods(lines)
    item = lines.next()
    if item is None or item[1] != "  tensors:":
        raise ParseError(item[0] if item else len(text.splitlines()) + 1, item[1] if item else "", "`  tensors:`")
    tensors = []
    while lines.indent() == 4:
        n, ln = lines.next()
        tensors.append(_guard(n, ln, _tensor, ln.strip()))
    kernels = []
    while lines.peek() is not None:
        n, ln = lines.next()
        if not ln.startswith("  kernel "):
            raise ParseError(n, ln, "`  kernel NAME  (phase P)`")
        kernels.append(_kernel(n, ln, lines))
    return Program(name, tuple(tensors), tuple(kernels), mask, scale, env, attrs, mods)
