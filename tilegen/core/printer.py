"""A text form of the IR that shows the loop nest with placements (after Halide's print_loop_nest).

Every on-chip buffer is printed with its scope (``S@UB``), so the printed program shows where each
tile lives; the header lists tensors and buffers with shapes, dtypes, scopes and stages. The text is
deterministic, so it serves as a golden file for pass tests. It is complete: every field of every node is
written (a field at its default may be left out), floats in full, so that
:func:`tilegen.core.parser.parse_program` reads the text back into an equal program (DESIGN §1).

Every annotation of a node (:mod:`tilegen.core.annotations`) is printed on the node's line, after its
text, in a regular form: two spaces, then ``@key`` or ``@key(field=value, ...)`` (every field in
declaration order; :func:`fmt_annotation`), one per annotation in the node's canonical order; then the
annotations' notes (and a loop's own note), after ``   # `` and separated by ``; ``. A pipelined loop's
statements are also tagged with their stage (``[stage 1]``).
"""

from __future__ import annotations

from functools import lru_cache

import sympy

from tilegen.core.annotations import Annotation
from tilegen.core.ir import (
    Access,
    Buffer,
    Elementwise,
    Fill,
    Kernel,
    Load,
    Loop,
    Mask,
    ModOp,
    MatMul,
    Program,
    RowReduce,
    Stmt,
    Store,
    Tensor,
    stages_of,
)

_BINARY = {"add": "+", "sub": "-", "mul": "*"}


def fmt_expr(e) -> str:
    """A compact, stable rendering of a sympy expression (``ceiling`` written ``ceil``)."""
    return _fmt_sympy(e if isinstance(e, sympy.Basic) else sympy.sympify(e))


@lru_cache(maxsize=1 << 16)
def _fmt_sympy(e: sympy.Basic) -> str:
    return sympy.sstr(e, order="grlex").replace("ceiling", "ceil")


def fmt_access(a: Access) -> str:
    ntile = len(a.tile)
    parts = [fmt_expr(x) for x in a.index[: len(a.index) - ntile]]
    for start, size in zip(a.index[len(a.index) - ntile :], a.tile):
        parts.append(f"{fmt_expr(start)}:+{fmt_expr(size)}")
    return f"{a.tensor}[{', '.join(parts)}]"


def fmt_float(v: float) -> str:
    """A float as short as it reads back exactly: ``%g`` (``0``, ``-inf``, ``0.5``) when that parses to the
    same value, else ``repr`` (every digit)."""
    short = f"{v:g}"
    return short if float(short) == v else repr(float(v))


def fmt_value(v) -> str:
    """An annotation field's (or a program attribute's) value: ``True``/``False``/``None``, an integer, a
    float (``repr``), a quoted string (``repr``), a tuple of values in parentheses, or a sympy expression
    (:func:`fmt_expr`)."""
    if v is None:
        return "None"
    if isinstance(v, (bool, int)) and not isinstance(v, sympy.Basic):
        return repr(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, tuple):
        inner = ", ".join(fmt_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, sympy.Basic):
        return fmt_expr(v)
    raise TypeError(f"annotation value {v!r} ({type(v).__name__}) has no printed form")


def fmt_annotation(a: Annotation) -> str:
    """``@key`` (an annotation without fields) or ``@key(field=value, ...)``."""
    values = a.values()
    if not values:
        return f"@{a.KEY}"
    return f"@{a.KEY}(" + ", ".join(f"{k}={fmt_value(v)}" for k, v in values) + ")"


def fmt_annotated(text: str, node, notes: tuple[str, ...] = ()) -> str:
    """``text`` (a node's line) followed by the node's annotations and the notes (``notes``: the
    node's own, first; then each annotation's)."""
    tags = "".join(f"  {fmt_annotation(a)}" for a in node.ann)
    words = [n for n in tuple(notes) + tuple(a.note(node) for a in node.ann) if n]
    return text + tags + (f"   # {'; '.join(words)}" if words else "")


def _ref(name, kernel: Kernel | None) -> str:
    if not isinstance(name, str):
        return repr(float(name)) if name not in (float("inf"), float("-inf")) else str(name)
    if kernel is None:
        return name
    try:
        scope = kernel.buffer(name).scope
    except KeyError:
        return name
    return f"{name}@{scope}"


def fmt_stmt(stmt: Stmt, kernel: Kernel | None = None) -> str:
    """One line for a non-loop statement, its annotations included."""
    return fmt_annotated(_stmt_text(stmt, kernel), stmt)


def _stmt_text(stmt: Stmt, kernel: Kernel | None) -> str:
    """The statement's own text (no annotations)."""
    r = lambda n: _ref(n, kernel)  # noqa: E731
    if isinstance(stmt, Load):
        pad = "" if stmt.pad is None else f"  (pad {fmt_float(stmt.pad)})"
        if stmt.rows:
            pad += f"  (rows with {stmt.rows} >= 0, else 0)"
        return f"{r(stmt.dst)} = load {fmt_access(stmt.src)}{pad}"
    if isinstance(stmt, Store):
        op = "+=" if stmt.accumulate else "="
        tag = "  (atomic add)" if stmt.accumulate else ""
        if stmt.rows:
            tag += f"  (rows with {stmt.rows} >= 0)"
        return f"{fmt_access(stmt.dst)} {op} {r(stmt.src)}{tag}"
    if isinstance(stmt, Fill):
        return f"{r(stmt.dst)} = fill({stmt.value})"
    if isinstance(stmt, MatMul):
        a = r(stmt.a) + ("ᵀ" if stmt.trans_a else "")
        bb = r(stmt.b) + ("ᵀ" if stmt.trans_b else "")
        scale = "" if stmt.alpha == 1.0 else f"{fmt_float(stmt.alpha)} * "
        op = "+=" if stmt.accumulate else "="
        return f"{r(stmt.dst)} {op} {scale}{a} @ {bb}"
    if isinstance(stmt, Elementwise):
        args = [r(a) for a in stmt.args]
        if stmt.op in _BINARY:
            return f"{r(stmt.dst)} = {args[0]} {_BINARY[stmt.op]} {args[1]}"
        if stmt.op == "copy":
            return f"{r(stmt.dst)} = {args[0]}"
        return f"{r(stmt.dst)} = {stmt.op}({', '.join(args)})"
    if isinstance(stmt, RowReduce):
        return f"{r(stmt.dst)} = row{stmt.op}({r(stmt.src)})"
    if isinstance(stmt, Mask):
        return f"{r(stmt.dst)} = mask({r(stmt.src)}, rows {fmt_expr(stmt.row0)}+, cols {fmt_expr(stmt.col0)}+)"
    if isinstance(stmt, ModOp):
        args = ", ".join(r(a) for a in stmt.args)
        extra = f", term {stmt.term}" if stmt.term >= 0 else ""
        skip = f", full tiles of {stmt.blocks} unmasked" if stmt.blocks else ""
        reads = f", reading {' '.join(stmt.tensors)}" if stmt.tensors else ""
        return f"{r(stmt.dst)} = mod_{stmt.op}({args}{', ' if args else ''}rows {fmt_expr(stmt.row0)}+, cols {fmt_expr(stmt.col0)}+{extra}{skip}{reads})"
    raise TypeError(type(stmt))


LOOP_WORDS = {"parallel": "parallel", "serial": "for"}  # Loop.kind -> the word a loop line begins with


def loop_head(stmt: Loop, pad: str = "") -> str:
    """A loop's line before its annotations: ``for j in [start, stop):`` (``parallel`` for a grid axis),
    then its role, domain and block-class tensor in parentheses when set."""
    fields = [w for w in (stmt.role, f"domain {stmt.domain}" if stmt.domain else "",
                          f"skipping tiles {stmt.blocks} marks empty" if stmt.blocks else "") if w]
    tail = f"  ({', '.join(fields)})" if fields else ""
    return f"{pad}{LOOP_WORDS.get(stmt.kind, stmt.kind)} {stmt.var} in [{fmt_expr(stmt.start)}, {fmt_expr(stmt.stop)}):{tail}"


def _body_lines(body, kernel: Kernel, depth: int) -> list[str]:
    pad = "  " * depth
    lines: list[str] = []
    for stmt in body:
        if isinstance(stmt, Loop):
            lines.append(fmt_annotated(loop_head(stmt, pad), stmt, (stmt.note,)))
            inner = _body_lines(stmt.body, kernel, depth + 1)
            stages = stages_of(stmt)
            if stages and len(stages) == len(inner):  # one line per statement: tag each with its stage
                inner = [f"{ln[:len(pad) + 2]}[stage {g}] {ln[len(pad) + 2:]}" for ln, g in zip(inner, stages)]
            lines.extend(inner)
        else:
            lines.append(pad + fmt_stmt(stmt, kernel))
    return lines


def fmt_buffer(buf: Buffer, width: int = 0) -> str:
    """A buffer's line: name, [shape], dtype, scope, then its stages, unit and row split when set."""
    shape = ", ".join(fmt_expr(s) for s in buf.shape)
    extra = []
    if buf.stages > 1:
        extra.append(f"x{buf.stages} stages")
    if buf.unit:
        extra.append(buf.unit)
    if buf.row_split > 1:
        extra.append(f"rows split {buf.row_split} ways")
    tail = f"  ({', '.join(extra)})" if extra else ""
    return fmt_annotated(f"{buf.name:<{width}}  [{shape}]  {buf.dtype}  {buf.scope}{tail}", buf)


def format_kernel(kernel: Kernel, indent: int = 0) -> str:
    pad = "  " * indent
    lines = [fmt_annotated(f"{pad}kernel {kernel.name}  (phase {kernel.phase})", kernel)]
    if kernel.buffers:
        lines.append(f"{pad}  buffers:")
        width = max(len(buf.name) for buf in kernel.buffers)
        lines.extend(f"{pad}    {fmt_buffer(buf, width)}" for buf in kernel.buffers)
    lines.extend(_body_lines(kernel.body, kernel, indent + 1))
    return "\n".join(lines)


def fmt_tensor(t: Tensor, width: int = 0) -> str:
    """A tensor's line: name, [shape], dtype, ``HBM``, kind, then its layout (for a 4-d input or output,
    or where it is not the default BNSD)."""
    shape = ", ".join(fmt_expr(s) for s in t.shape)
    shown = (len(t.shape) == 4 and t.kind in ("input", "output")) or t.layout != "BNSD"
    layout = f"  {t.layout}" if shown else ""
    return fmt_annotated(f"{t.name:<{width}}  [{shape}]  {t.dtype}  HBM {t.kind}{layout}", t)


def fmt_mask(m) -> str:
    """The program's window (:class:`~tilegen.core.ir.MaskInfo`): ``none`` or
    ``window(left=.., right=..), off = ..`` (``none, off = ..`` for no window and a non-zero offset)."""
    if m.is_none:
        return "none" if sympy.sympify(m.offset) == 0 else f"none, off = {fmt_expr(m.offset)}"
    return f"window(left={m.left}, right={m.right}), off = {fmt_expr(m.offset)}"


def fmt_mods(mods) -> list[str]:
    """The lines of a program's mods (:class:`~tilegen.core.mods.ModSet`): each parameter (name, [shape],
    dtype, the generator that made its values (``documents=(30, 22, 28)``) and its values when the spec
    carries them), then the score and mask mods in the mod language."""
    from tilegen.core.mods import to_text

    lines = []
    for p in mods.params:
        shape = ", ".join(fmt_expr(d) for d in p.shape)
        gen = "" if p.generator is None else f"  {p.generator.kind}={fmt_value(p.generator.arg)}"
        values = "" if p.values is None else f"  values={fmt_value(tuple(p.values))}"
        lines.append(f"param {p.name}  [{shape}]  {p.dtype}{gen}{values}")
    if mods.score is not None:
        lines.append(f"score_mod = {to_text(mods.score)}")
    if mods.mask is not None:
        lines.append(f"mask_mod = {to_text(mods.mask)}")
    return lines


def format_program(program: Program) -> str:
    """The whole program: header (name, attributes, scale, window, bound sizes, mods), tensors, and each
    kernel's buffers and loop nest with placements. Every field of every node is shown (a field at its
    default may be left out); :func:`tilegen.core.parser.parse_program` reads the text back."""
    attrs = ", ".join(f"{k}={fmt_value(v)}" for k, v in program.attrs)
    lines = [f"program {program.name}  [{attrs}]", f"  scale = {fmt_float(program.scale)};  mask: {fmt_mask(program.mask)}"]
    if program.env:
        lines.append("  bound: " + ", ".join(f"{k}={v}" for k, v in program.env))
    if program.mods is not None:
        lines.append("  mods:")
        lines.extend(f"    {ln}" for ln in fmt_mods(program.mods))
    lines.append("  tensors:")
    width = max(len(t.name) for t in program.tensors)
    lines.extend(f"    {fmt_tensor(t, width)}" for t in program.tensors)
    for kernel in program.kernels:
        lines.append(format_kernel(kernel, indent=1))
    return "\n".join(lines) + "\n"
