"""A text form of the IR that shows the loop nest with placements (after Halide's print_loop_nest).

Every on-chip buffer is printed with its scope (``S@UB``), so the printed program shows where each
tile lives; the header lists tensors and buffers with shapes, dtypes, scopes and stages. The text is
deterministic, so it serves as a golden file for pass tests.
"""

from __future__ import annotations

import sympy

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


def _annotated(node) -> str:
    """The node's annotations as a trailing ``  [...; ...]`` ("" without)."""
    return f"  [{'; '.join(a.text() for a in node.annotations)}]" if node.annotations else ""


def fmt_stmt(stmt: Stmt, kernel: Kernel | None = None) -> str:
    """One line for a non-loop statement, its annotations last."""
    return _fmt_stmt(stmt, kernel) + _annotated(stmt)


def _fmt_stmt(stmt: Stmt, kernel: Kernel | None = None) -> str:
    r = lambda n: _ref(n, kernel)  # noqa: E731
    if isinstance(stmt, Load):
        pad = "" if stmt.pad is None else f"  (pad {stmt.pad:g})"
        if stmt.rows:
            pad += f"  (rows with {stmt.rows} >= 0, else 0)"
        if not stmt.wait_signal:
            pad += "  (no wait: its group's flag was waited for)"
        if stmt.hoist:
            pad += "  (received ahead, beside the earlier stage's work)"
        if stmt.free_early:
            pad += "  (the next tile's copy waits for this tile's last access only)"
        if stmt.wait_done:
            pad += "  (after the other unit's done flag)"
        if stmt.zero_unless is not None:
            pad += f"  (zeros unless {fmt_expr(stmt.zero_unless)} > 0: its writer's iterations)"
        return f"{r(stmt.dst)} = load {fmt_access(stmt.src)}{pad}"
    if isinstance(stmt, Store):
        op = "+=" if stmt.accumulate else "="
        tag = "  (atomic add)" if stmt.accumulate else ""
        if stmt.first_plain:
            tag = "  (atomic add; the program's first store writes)"
        if stmt.signal_done:
            tag += "  (done flag at the program's end)"
        if stmt.rows:
            tag += f"  (rows with {stmt.rows} >= 0)"
        if not stmt.signal:
            tag += "  (no flag: a later store of its group sets it)"
        if stmt.wait_at_rewrite:
            tag += f"  (waited for before {stmt.src} is next written)"
        return f"{fmt_access(stmt.dst)} {op} {r(stmt.src)}{tag}"
    if isinstance(stmt, Fill):
        return f"{r(stmt.dst)} = fill({stmt.value})"
    if isinstance(stmt, MatMul):
        a = r(stmt.a) + ("ᵀ" if stmt.trans_a else "")
        bb = r(stmt.b) + ("ᵀ" if stmt.trans_b else "")
        scale = "" if stmt.alpha == 1.0 else f"{stmt.alpha:.6g} * "
        op = "+=" if stmt.accumulate else "="
        chunk = f"  (in column chunks of {stmt.n_chunk}, L0C ping-pong)" if stmt.n_chunk else ""
        return f"{r(stmt.dst)} {op} {scale}{a} @ {bb}{chunk}"
    if isinstance(stmt, Elementwise):
        args = [r(a) for a in stmt.args]
        if stmt.op in _BINARY:
            return f"{r(stmt.dst)} = {args[0]} {_BINARY[stmt.op]} {args[1]}"
        if stmt.op == "copy":
            return f"{r(stmt.dst)} = {args[0]}"
        return f"{r(stmt.dst)} = {stmt.op}({', '.join(args)})"
    if isinstance(stmt, RowReduce):
        fold = f"  (folded to 64 columns in {r(stmt.fold)} first)" if stmt.fold else ""
        return f"{r(stmt.dst)} = row{stmt.op}({r(stmt.src)}){fold}"
    if isinstance(stmt, Mask):
        only = ", cut tiles only" if stmt.cut_only else ""
        return f"{r(stmt.dst)} = mask({r(stmt.src)}, rows {fmt_expr(stmt.row0)}+, cols {fmt_expr(stmt.col0)}+{only})"
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
            note = f"   # {stmt.note}" if stmt.note else ""
            if stmt.blocks:
                note += f" (skipping tiles {stmt.blocks} marks empty)"
            word = "parallel" if stmt.kind == "parallel" else "for"
            if stmt.stages:
                note += f" (pipelined: the cube issues stage 0 of {stmt.var} + {stmt.lookahead} before stage 1 of {stmt.var}"
                if 2 in stmt.stages:
                    note += f", the vector stage 1 of {stmt.var} + {stmt.lookahead} before stage 2 of {stmt.var}"
                note += ")"
            note += _annotated(stmt)
            lines.append(f"{pad}{word} {stmt.var} in [{fmt_expr(stmt.start)}, {fmt_expr(stmt.stop)}):{note}")
            inner = _body_lines(stmt.body, kernel, depth + 1)
            if stmt.stages:  # one line per statement: tag each with its stage
                inner = [f"{ln[:len(pad) + 2]}[stage {g}] {ln[len(pad) + 2:]}" for ln, g in zip(inner, stmt.stages)]
            lines.extend(inner)
        else:
            lines.append(pad + fmt_stmt(stmt, kernel))
    return lines


def format_kernel(kernel: Kernel, indent: int = 0) -> str:
    pad = "  " * indent
    deal = "; programs dealt by turns (snake)" if kernel.deal == "snake" else ""
    deal += "; in the previous kernel's launch, after SyncAll" if kernel.sync_all else ""
    deal += "; programs streamed: the pipelined loop runs across them" if kernel.stream else ""
    lines = [f"{pad}kernel {kernel.name}  (phase {kernel.phase}{deal}){_annotated(kernel)}"]
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
            lines.append(f"{pad}    {buf.name:<{width}}  [{shape}]  {buf.dtype}  {buf.scope}{tail}")
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
        if t.kind == "handoff" and (t.slots > 1 or t.ready >= 0):
            layout += f"  ({t.slots} slots, ready flag {t.ready})"
        lines.append(f"    {t.name:<{width}}  [{shape}]  {t.dtype}  HBM {t.kind}{layout}")
    for kernel in program.kernels:
        lines.append(format_kernel(kernel, indent=1))
    return "\n".join(lines) + "\n"
