"""GPU pass fold-log2: values that only feed ``exp`` are kept multiplied by log2(e), the factor folded into
the score matmul's scale (and into the loaded L), so that ``exp`` becomes ``tl.exp2``; such a value used
elsewhere (L = m + log l) is converted back with ln 2. A score mod is not linear: the factor is applied
to its result, its argument stays in natural units. Each statement concerned gets
:class:`Log2Scaled` (``@log2_scaled``: its result kept so; the operands that arrive so); the values the
program computes are unchanged up to rounding."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation
from tilegen.core.ir import Elementwise, Fill, Kernel, Load, Loop, Mask, MatMul, ModOp, Program, RowReduce, Stmt, map_body
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class Log2Scaled(Annotation, key="log2_scaled", on=("Load", "Store", "Fill", "MatMul", "Elementwise", "RowReduce", "Mask", "ModOp")):
    """exp → exp2 with log2(e) folded in. ``result``: the statement's value is kept multiplied by log2(e)
    (a load or fill multiplies its value, a matmul its alpha, a score mod its output; an ``exp`` of it
    becomes ``exp2``). ``args``: the buffers the statement reads whose every reaching definition is kept
    so (a statement whose own result is natural converts them back with ln 2). Rendering only: every hook
    keeps its default (the interpreter computes in natural units)."""

    result: bool
    args: tuple[str, ...] = ()

    def note(self, node) -> str:
        parts = ["result x log2(e)"] if self.result else []
        if self.args:
            parts.append(f"reads {', '.join(self.args)} x log2(e)")
        return "; ".join(parts)


LINEAR = ("copy", "add", "sub", "max", "zero_if_neginf")  # elementwise ops that commute with a positive scale


def reaching(kernel: Kernel) -> tuple[dict[int, dict[str, frozenset[int]]], dict[int, Stmt]]:
    """Reaching definitions: for each statement (by id) and each buffer it reads, the ids of the
    statements whose writes of that buffer can reach it, and the statements by id. Loops may run zero or
    more times."""
    stmts: dict[int, Stmt] = {}
    uses: dict[int, dict[str, frozenset[int]]] = {}

    def run(body, state: dict[str, frozenset[int]]) -> dict[str, frozenset[int]]:
        for s in body:
            if isinstance(s, Loop):
                entry = dict(state)
                while True:  # iterate to the loop's fixed point: defs of the body reach its next trip
                    after = run(s.body, dict(entry))
                    merged = {k: entry.get(k, frozenset()) | after.get(k, frozenset()) for k in set(entry) | set(after)}
                    if merged == entry:
                        break
                    entry = merged
                state = entry
                continue
            stmts[id(s)] = s
            uses.setdefault(id(s), {})
            for name in s.buffers_read():
                uses[id(s)][name] = uses[id(s)].get(name, frozenset()) | state.get(name, frozenset())
            for name in s.buffers_written():
                state = dict(state)
                state[name] = frozenset({id(s)})
        return state

    run(kernel.body, {})
    return uses, stmts


def scaled_statements(kernel: Kernel, uses=None, stmts=None) -> frozenset[int]:
    """The statements (by id) whose result is kept multiplied by log2(e): every definition that reaches an
    ``exp`` through linear, scale-commuting ops (copy, add, sub, max, zero_if_neginf, row max, mask, a
    scaled matmul, a load, a fill). A ``ModOp`` score is a leaf: score′ = score_mod(S) is not linear in S,
    so its result is multiplied by log2(e) after the mod and its argument stays in natural units. Empty
    when any such definition is of another kind (then the kernel keeps natural exponentials)."""
    if uses is None:
        uses, stmts = reaching(kernel)
    scaled: set[int] = set()
    work: list[int] = []
    for sid, s in stmts.items():
        if isinstance(s, Elementwise) and s.op == "exp":
            work.extend(uses[sid].get(s.args[0], ()))
    while work:
        sid = work.pop()
        if sid in scaled:
            continue
        scaled.add(sid)
        s = stmts[sid]
        if isinstance(s, Elementwise) and s.op in LINEAR:
            for a in s.args:
                if isinstance(a, str):
                    work.extend(uses[sid].get(a, ()))
        elif isinstance(s, (RowReduce, Mask)):
            if isinstance(s, RowReduce) and s.op != "max":
                return frozenset()
            work.extend(uses[sid].get(s.src, ()))
        elif isinstance(s, MatMul):
            if s.accumulate:
                return frozenset()
        elif isinstance(s, (Load, Fill)):
            pass
        elif isinstance(s, ModOp) and s.op == "score":
            pass  # score′ is not linear in its argument: its output is multiplied by log2(e), its input is not
        else:
            return frozenset()
        # every use that sees this definition must see only scaled definitions
        for uid, by_name in uses.items():
            for name, defs in by_name.items():
                if sid in defs:
                    work.extend(d for d in defs if d not in scaled)
    return frozenset(scaled)


def _kernel(kernel: Kernel) -> Kernel:
    uses, stmts = reaching(kernel)
    scaled = scaled_statements(kernel, uses, stmts)
    if not scaled:
        return kernel

    def edit(s: Stmt) -> Stmt:
        if isinstance(s, Loop):
            return s
        result = id(s) in scaled
        reads = uses.get(id(s), {})
        args = tuple(sorted(n for n, defs in reads.items() if defs and all(d in scaled for d in defs)))
        return s.annotate(Log2Scaled(result, args)) if result or args else s

    return dataclasses.replace(kernel, body=map_body(kernel.body, edit))


def fold_log2(program: Program) -> Program:
    """``program`` with :class:`Log2Scaled` on the statements of each kernel that keep
    or read values in log2 units (:func:`scaled_statements`); a kernel where the fold does not apply is
    left as it is."""
    return dataclasses.replace(program, kernels=tuple(_kernel(k) for k in program.kernels))


FOLD_LOG2 = Pass(
    "fold-log2", lambda p, c: fold_log2(p),
    "what only feeds exp kept times log2(e), folded into the score's scale: exp becomes exp2 (@log2_scaled)",
    annotates=True,
)
