"""A text form of the IR that shows the loop nest with placements (after Halide's print_loop_nest).

Every on-chip buffer is printed with its scope (``S@UB``), so the printed program shows where each
tile lives; the header lists tensors and buffers with shapes, dtypes, scopes and stages. The text is
deterministic, so it serves as a golden file for pass tests.

Every annotation of a node (:mod:`tilegen.core.annotations`) is printed on the node's line, after its
text, in a regular form: two spaces, then ``@key`` or ``@key(field=value, ...)`` (every field in
declaration order; :func:`fmt_annotation`), one per annotation in the node's canonical order; then the
annotations' notes (and a loop's own note), after ``   # `` and separated by ``; ``. A pipelined loop's
statements are also tagged with their stage (``[stage 1]``).
"""

from __future__ import annotations

import sympy

from tilegen.core.annotations import Annotation
from tilegen.core.ir import (
    Access,
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
    stages_of,
)

_BINARY = {"add": "+", "sub": "-", "mul": "*"}


def fmt_expr(e) -> str:
    """A compact, stable rendering of a sympy expression."""
    text = sympy.sstr(sympy.sympify(e), order="grlex")
    return text.replace("ceiling", "ceil")


def fmt_access(a: Access) -> str:
    ntile = len(a.tile)
    parts = [fmt_expr(x) for x in a.index[: len(a.index) - ntile]]
    for start, size in zip(a.index[len(a.index) - ntile :], a.tile):
        parts.append(f"{fmt_expr(start)}:+{fmt_expr(size)}")
    return f"{a.tensor}[{', '.join(parts)}]"


def fmt_value(v) -> str:
    """An annotation field's value: ``True``/``False``, an integer, a float (``repr``), a quoted string
    (``repr``), a tuple of values in parentheses, or a sympy expression (:func:`fmt_expr`)."""
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
        pad = "" if stmt.pad is None else f"  (pad {stmt.pad:g})"
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
        scale = "" if stmt.alpha == 1.0 else f"{stmt.alpha:.6g} * "
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
        return f"{r(stmt.dst)} = mod_{stmt.op}({args}{', ' if args else ''}rows {fmt_expr(stmt.row0)}+, cols {fmt_expr(stmt.col0)}+{extra}{skip})"
    raise TypeError(type(stmt))


def _body_lines(body, kernel: Kernel, depth: int) -> list[str]:
    pad = "  " * depth
    lines: list[str] = []
    for stmt in body:
        if isinstance(stmt, Loop):
            note = stmt.note
            if stmt.blocks:
                note += f" (skipping tiles {stmt.blocks} marks empty)"
            word = "parallel" if stmt.kind == "parallel" else "for"
            lines.append(fmt_annotated(f"{pad}{word} {stmt.var} in [{fmt_expr(stmt.start)}, {fmt_expr(stmt.stop)}):", stmt, (note.strip(),)))
            inner = _body_lines(stmt.body, kernel, depth + 1)
            stages = stages_of(stmt)
            if stages and len(stages) == len(inner):  # one line per statement: tag each with its stage
                inner = [f"{ln[:len(pad) + 2]}[stage {g}] {ln[len(pad) + 2:]}" for ln, g in zip(inner, stages)]
            lines.extend(inner)
        else:
            lines.append(pad + fmt_stmt(stmt, kernel))
    return lines


def format_kernel(kernel: Kernel, indent: int = 0) -> str:
    pad = "  " * indent
    lines = [fmt_annotated(f"{pad}kernel {kernel.name}  (phase {kernel.phase})", kernel)]
    if kernel.buffers:
        lines.append(f"{pad}  buffers:")
        width = max(len(buf.name) for buf in kernel.buffers)
        for buf in kernel.buffers:
            shape = ", ".join(fmt_expr(s) for s in buf.shape)
            extra = []
            if buf.stages > 1:
                extra.append(f"x{buf.stages} stages")
            if buf.unit:
                extra.append(buf.unit)
            if buf.row_split > 1:
                extra.append(f"rows split {buf.row_split} ways")
            tail = f"  ({', '.join(extra)})" if extra else ""
            lines.append(fmt_annotated(f"{pad}    {buf.name:<{width}}  [{shape}]  {buf.dtype}  {buf.scope}{tail}", buf))
    lines.extend(_body_lines(kernel.body, kernel, indent + 1))
    return "\n".join(lines)


def format_program(program: Program) -> str:
    """The whole program: header, tensors, and each kernel's loop nest with placements."""
    m = program.mask
    if m.is_none:
        mask = "none"
    else:
        mask = f"window(left={m.left}, right={m.right}), off = {fmt_expr(m.offset)}"
    attrs = ", ".join(f"{k}={v}" for k, v in program.attrs)
    lines = [f"program {program.name}  [{attrs}]", f"  scale = {program.scale:.6g};  mask: {mask}"]
    if program.env:
        lines.append("  bound: " + ", ".join(f"{k}={v}" for k, v in program.env))
    lines.append("  tensors:")
    width = max(len(t.name) for t in program.tensors)
    for t in program.tensors:
        shape = ", ".join(fmt_expr(s) for s in t.shape)
        layout = f"  {t.layout}" if len(t.shape) == 4 and t.kind in ("input", "output") else ""
        lines.append(fmt_annotated(f"    {t.name:<{width}}  [{shape}]  {t.dtype}  HBM {t.kind}{layout}", t))
    for kernel in program.kernels:
        lines.append(format_kernel(kernel, indent=1))
    return "\n".join(lines) + "\n"
