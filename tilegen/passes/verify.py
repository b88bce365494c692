"""The verifier: runs after every pass and names what it finds broken.

Checks, per kernel:

- every name is declared (buffers, tensors) and every index uses only bound sizes and enclosing loop
  variables;
- def-before-use: a buffer is written before any read on every path (a serial loop may run zero times,
  so what it writes is not defined after it; a loop may read, before writing it, a buffer that is
  already defined when the loop starts — an accumulator);
- shapes and dtypes agree: loads and stores move a tile of the buffer's shape and dtype; matmul
  operands are (M, K) and (K, N) of one dtype into an fp32 (M, N) accumulator; arithmetic is fp32 on
  equal shapes, [R] vectors broadcast over [R, C], or 0-d buffers (scalars) broadcast over anything;
  atomic adds go into fp32 tensors;
- on-chip buffers have sizes free of the sequence lengths, batch and heads (tile sizes and head dims);
- in a fused program, no HBM tensor grows with seq_q·seq_k (the invariant of the project, DESIGN §2);
- every annotation applies to its node's class and passes its own legality check
  (:meth:`tilegen.core.annotations.Annotation.check`: each knob's rules live beside its pass);
- with a target: every buffer sits on one of its levels, and the level's footprint fits.

After a pass declared to add annotations only (``Pass.annotates``), :func:`verify_annotating` checks
instead that the program is the one before but for annotations and attrs, and runs every annotation's
check: the rest was verified already, and an annotation whose hooks keep their defaults changes nothing
the other checks read.
"""

from __future__ import annotations

from functools import lru_cache

import sympy

from tilegen.core.annotations import Site
from tilegen.core.errors import VerifyError
from tilegen.core.ir import (
    SHAPE_SYMBOLS,
    TILE_SYMBOLS,
    B,
    Elementwise,
    Fill,
    Hkv,
    Hq,
    Kernel,
    Load,
    Loop,
    Mask,
    ModOp,
    MOD_OPS,
    MatMul,
    Program,
    RowReduce,
    Sk,
    Sq,
    Store,
)

_SIZE_NAMES = {str(s) for s in SHAPE_SYMBOLS + TILE_SYMBOLS}


def _same(a, b) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


@lru_cache(maxsize=4096)
def grows_with_seq_product(numel) -> bool:
    """Whether an element count has a term of total degree >= 2 in (Sq, Sk)."""
    expr = sympy.expand(sympy.sympify(numel))
    try:
        poly = sympy.Poly(expr, Sq, Sk)
    except sympy.PolynomialError:
        return True  # not polynomial in the lengths (ceil, ...): be strict
    return poly.total_degree() >= 2


class _Checker:
    def __init__(self, program: Program, where: str):
        self.program = program
        self.where = where
        self.tensors = {t.name: t for t in program.tensors}

    def fail(self, kernel: Kernel | None, message: str) -> None:
        place = f" kernel {kernel.name}:" if kernel is not None else ""
        raise VerifyError(f"verify after {self.where}:{place} {message}")

    def annotations(self, node, at: Site, what: str) -> None:
        """Every annotation of ``node`` applies to its class and passes its check (``what``: how the
        message names the node)."""
        kernel = at.kernel if not isinstance(node, Kernel) else node
        kinds = [type(a) for a in node.ann]
        if len(set(kinds)) != len(kinds) or list(node.ann) != sorted(node.ann, key=lambda a: a.KEY):
            self.fail(kernel, f"{what}: annotations {[a.KEY for a in node.ann]} are not one of a class in key order")
        for a in node.ann:
            if type(node).__name__ not in a.ON:
                self.fail(kernel, f"{what}: @{a.KEY} annotates {', '.join(a.ON)}, not {type(node).__name__}")
            why = a.check(node, at)
            if why:
                self.fail(kernel, f"{what}: @{a.KEY}: {why}")

    def check_annotations(self) -> None:
        """Only the annotations of every tensor, kernel, buffer, loop and statement."""
        for n, t in enumerate(self.program.tensors):
            self.annotations(t, Site(self.program, index=n), f"tensor {t.name}")
        for i, kernel in enumerate(self.program.kernels):
            self.annotations(kernel, Site(self.program, kernel, index=i), "the kernel")
            for n, buf in enumerate(kernel.buffers):
                self.annotations(buf, Site(self.program, kernel, index=n), f"buffer {buf.name}")

            def visit(body, loops):
                for n, stmt in enumerate(body):
                    what = f"loop over {stmt.var}" if isinstance(stmt, Loop) else f"`{_fmt(stmt)}`"
                    self.annotations(stmt, Site(self.program, kernel, loops, body, n), what)
                    if isinstance(stmt, Loop):
                        visit(stmt.body, loops + (stmt,))

            visit(kernel.body, ())

    def check(self) -> None:
        names = [t.name for t in self.program.tensors]
        if len(set(names)) != len(names):
            self.fail(None, f"duplicate tensor names in {names}")
        for n, t in enumerate(self.program.tensors):
            self.annotations(t, Site(self.program, index=n), f"tensor {t.name}")
        if self.program.attr("form") == "fused":
            for t in self.program.tensors:
                if t.kind in ("tiles", "partial"):
                    continue  # one entry (or one parameter window) per tile pair, DESIGN §2
                if grows_with_seq_product(t.numel):
                    self.fail(
                        None,
                        f"HBM tensor {t.name} [{', '.join(map(str, t.shape))}] grows with seq_q*seq_k in a fused program "
                        "(P and dS must stay on chip)",
                    )
        for kernel in self.program.kernels:
            self.check_kernel(kernel)

    def check_kernel(self, kernel: Kernel) -> None:
        bufs = {}
        for buf in kernel.buffers:
            if buf.name in bufs:
                self.fail(kernel, f"buffer {buf.name} declared twice")
            bufs[buf.name] = buf
            for dim in buf.shape:
                bad = {s.name for s in sympy.sympify(dim).free_symbols} & {str(B), str(Hq), str(Hkv), str(Sq), str(Sk)}
                if bad:
                    self.fail(kernel, f"on-chip buffer {buf.name} has a size depending on {sorted(bad)}")
        at = Site(self.program, kernel, index=next(n for n, k in enumerate(self.program.kernels) if k is kernel))
        self.annotations(kernel, at, "the kernel")
        for n, buf in enumerate(kernel.buffers):
            self.annotations(buf, Site(self.program, kernel, index=n), f"buffer {buf.name}")
        self.bufs = bufs
        self.kernel = kernel
        self.block(kernel.body, frozenset(), set(), ())

    def exprs_ok(self, stmt, loop_vars: frozenset[str]) -> None:
        for expr in stmt.exprs():
            unknown = {s.name for s in sympy.sympify(expr).free_symbols} - _SIZE_NAMES - loop_vars
            if unknown:
                self.fail(self.kernel, f"`{_fmt(stmt)}` uses {sorted(unknown)}, which no enclosing loop binds")

    def block(self, body, loop_vars: frozenset[str], defined: set[str], loops: tuple[Loop, ...]) -> set[str]:
        defined = set(defined)
        for n, stmt in enumerate(body):
            self.exprs_ok(stmt, loop_vars)
            at = Site(self.program, self.kernel, loops, body, n)
            if isinstance(stmt, Loop):
                var = str(stmt.var)
                if var in loop_vars:
                    self.fail(self.kernel, f"loop variable {var} shadows an enclosing loop")
                self.annotations(stmt, at, f"loop over {var}")
                inner = self.block(stmt.body, loop_vars | {var}, defined, loops + (stmt,))
                if stmt.kind == "parallel":
                    defined = inner
                continue
            for name in stmt.buffers_read() + stmt.buffers_written():
                if name not in self.bufs:
                    self.fail(self.kernel, f"`{_fmt(stmt)}` uses undeclared buffer {name}")
            for name in stmt.buffers_read():
                if name not in defined:
                    self.fail(self.kernel, f"`{_fmt(stmt)}` reads {name} before anything writes it")
            self.annotations(stmt, at, f"`{_fmt(stmt)}`")
            self.types(stmt)
            defined.update(stmt.buffers_written())
        return defined

    def types(self, stmt) -> None:
        k = self.kernel
        buf = self.bufs
        if isinstance(stmt, (Load, Store)):
            access = stmt.src if isinstance(stmt, Load) else stmt.dst
            bname = stmt.dst if isinstance(stmt, Load) else stmt.src
            tensor = self.tensors.get(access.tensor)
            if tensor is None:
                self.fail(k, f"`{_fmt(stmt)}` uses unknown tensor {access.tensor}")
            if len(access.index) != len(tensor.shape) or len(access.tile) > len(tensor.shape):
                self.fail(k, f"`{_fmt(stmt)}` indexes {tensor.name} with {len(access.index)} indices, it has {len(tensor.shape)} dims")
            b = buf[bname]
            if len(b.shape) != len(access.tile) or not all(_same(x, y) for x, y in zip(b.shape, access.tile)):
                self.fail(k, f"`{_fmt(stmt)}` moves a tile {list(access.tile)} through buffer {b.name} {list(b.shape)}")
            if b.dtype != tensor.dtype:
                self.fail(k, f"`{_fmt(stmt)}`: buffer {b.name} is {b.dtype}, tensor {tensor.name} is {tensor.dtype}")
            if isinstance(stmt, Store) and stmt.accumulate and tensor.dtype != "fp32":
                self.fail(k, f"`{_fmt(stmt)}` adds atomically into {tensor.dtype} tensor {tensor.name}; accumulate in fp32")
            if isinstance(stmt, Store) and tensor.kind == "input":
                self.fail(k, f"`{_fmt(stmt)}` writes input tensor {tensor.name}")
            if stmt.rows:
                guard = self.tensors.get(stmt.rows)
                if guard is None or guard.kind != "input" or guard.dtype != "int32" or len(guard.shape) != 1 or not access.tile:
                    self.fail(k, f"`{_fmt(stmt)}`: its row guard {stmt.rows} must be an int32 1-d input tensor over a tiled dimension")
        elif isinstance(stmt, MatMul):
            a, bb, d = buf[stmt.a], buf[stmt.b], buf[stmt.dst]
            if len(a.shape) != 2 or len(bb.shape) != 2 or len(d.shape) != 2:
                self.fail(k, f"`{_fmt(stmt)}`: matmul operands must be 2-d tiles")
            m, ka = (a.shape[1], a.shape[0]) if stmt.trans_a else (a.shape[0], a.shape[1])
            kb, n = (bb.shape[1], bb.shape[0]) if stmt.trans_b else (bb.shape[0], bb.shape[1])
            if not (_same(ka, kb) and _same(m, d.shape[0]) and _same(n, d.shape[1])):
                self.fail(k, f"`{_fmt(stmt)}`: shapes ({m}, {ka}) @ ({kb}, {n}) -> {list(d.shape)} disagree")
            if a.dtype != bb.dtype:
                self.fail(k, f"`{_fmt(stmt)}`: operands {a.dtype} and {bb.dtype} differ")
            if d.dtype != "fp32":
                self.fail(k, f"`{_fmt(stmt)}`: the accumulator {d.name} must be fp32, is {d.dtype}")
        elif isinstance(stmt, Elementwise):
            from tilegen.core.ir import ELEMENTWISE_OPS

            if stmt.op not in ELEMENTWISE_OPS:
                self.fail(k, f"`{_fmt(stmt)}`: unknown op {stmt.op}")
            if len(stmt.args) != ELEMENTWISE_OPS[stmt.op]:
                self.fail(k, f"`{_fmt(stmt)}`: {stmt.op} takes {ELEMENTWISE_OPS[stmt.op]} operands")
            d = buf[stmt.dst]
            for arg in stmt.args:
                if not isinstance(arg, str):
                    continue
                a = buf[arg]
                same_shape = len(a.shape) == len(d.shape) and all(_same(x, y) for x, y in zip(a.shape, d.shape))
                row_vec = len(a.shape) == 1 and len(d.shape) == 2 and _same(a.shape[0], d.shape[0])
                scalar = len(a.shape) == 0  # a 0-d buffer (one value per program instance) broadcasts
                if not (same_shape or row_vec or scalar):
                    self.fail(k, f"`{_fmt(stmt)}`: operand {arg} {list(a.shape)} does not broadcast to {list(d.shape)}")
                if stmt.op not in ("copy", "cast") and a.dtype != "fp32":
                    self.fail(k, f"`{_fmt(stmt)}`: arithmetic runs in fp32; cast {arg} ({a.dtype}) first")
            if stmt.op == "copy" and isinstance(stmt.args[0], str) and buf[stmt.args[0]].dtype != d.dtype:
                self.fail(k, f"`{_fmt(stmt)}`: copy between dtypes; use cast")
            if stmt.op not in ("copy", "cast") and d.dtype != "fp32":
                self.fail(k, f"`{_fmt(stmt)}`: arithmetic writes fp32, {d.name} is {d.dtype}")
        elif isinstance(stmt, RowReduce):
            s, d = buf[stmt.src], buf[stmt.dst]
            if len(s.shape) != 2 or len(d.shape) != 1 or not _same(s.shape[0], d.shape[0]):
                self.fail(k, f"`{_fmt(stmt)}`: reduces {list(s.shape)} into {list(d.shape)}")
            if s.dtype != "fp32" or d.dtype != "fp32":
                self.fail(k, f"`{_fmt(stmt)}`: row reductions run in fp32")
        elif isinstance(stmt, Mask):
            s, d = buf[stmt.src], buf[stmt.dst]
            if len(s.shape) != 2 or s.shape != d.shape or s.dtype != "fp32" or d.dtype != "fp32":
                self.fail(k, f"`{_fmt(stmt)}`: mask works on fp32 tiles of one shape")
        elif isinstance(stmt, ModOp):
            d = buf[stmt.dst]
            if stmt.op not in MOD_OPS:
                self.fail(k, f"`{_fmt(stmt)}`: unknown mod op {stmt.op!r}")
            if self.program.mods is None:
                self.fail(k, f"`{_fmt(stmt)}`: the program has no mods")
            if d.dtype != "fp32" or any(buf[a].dtype != "fp32" for a in stmt.args):
                self.fail(k, f"`{_fmt(stmt)}`: mod ops work on fp32 tiles")
            if stmt.op in ("score", "dscore") and any(buf[a].shape != d.shape for a in stmt.args):
                self.fail(k, f"`{_fmt(stmt)}`: score and dscore work on tiles of one shape")
            for t in stmt.tensors:
                if t not in self.tensors:
                    self.fail(k, f"`{_fmt(stmt)}`: reads the unknown parameter tensor {t}")
        elif isinstance(stmt, Fill):
            pass


def _fmt(stmt) -> str:
    from tilegen.core.printer import fmt_stmt

    return fmt_stmt(stmt)


def verify(program: Program, where: str = "?", target=None) -> Program:
    """Check ``program`` (and, with a target, its placement and, once the tiles are bound, every
    level's footprint against the level's usable capacity); return it unchanged.

    Raises:
        VerifyError: the first broken rule, naming the pass (``where``), the kernel and the statement,
            buffer or level.
    """
    _Checker(program, where).check()
    if target is not None:
        _check_target(program, where, target)
    return program


def _unannotated(program: Program) -> Program:
    """``program`` with no annotation on any node and no attrs: what an annotating pass must not change."""
    import dataclasses

    from tilegen.core.ir import map_body

    def bare(node):
        return dataclasses.replace(node, ann=()) if node.ann else node

    kernels = tuple(
        bare(dataclasses.replace(k, body=map_body(k.body, bare), buffers=tuple(bare(b) for b in k.buffers))) for k in program.kernels
    )
    return dataclasses.replace(program, kernels=kernels, tensors=tuple(bare(t) for t in program.tensors), attrs=())


def verify_annotating(before: Program, after: Program, where: str = "?") -> Program:
    """Check ``after``, the result of a pass declared to add annotations (and attrs) only, against
    ``before``: nothing else changed, and every annotation applies to its node and passes its check
    (:meth:`~tilegen.core.annotations.Annotation.check`); return ``after``.

    Raises:
        VerifyError: the pass (``where``) changed more than annotations and attrs, or an annotation is
            illegal where it is.
    """
    if _unannotated(after) != _unannotated(before):
        raise VerifyError(f"verify after {where}: it changed the program beyond its annotations and attrs (it is declared to annotate only)")
    _Checker(after, where).check_annotations()
    return after


def _check_target(program: Program, where: str, target) -> None:
    from tilegen.models.footprint import footprints

    levels = {lvl.name: lvl for lvl in target.levels}
    for kernel in program.kernels:
        for buf in kernel.buffers:
            if buf.scope not in levels:
                raise VerifyError(
                    f"verify after {where}: kernel {kernel.name}: buffer {buf.name} is in scope {buf.scope}, "
                    f"not a level of target {target.name} ({', '.join(levels)})"
                )
    env = {str(k): v for k, v in program.env}
    if "Br" not in env or "Bc" not in env:
        return  # tile sizes not bound yet
    for fp in footprints(program, target):
        value = fp.value(env)
        if value > fp.level.usable:
            raise VerifyError(
                f"verify after {where}: kernel {fp.kernel}: level {fp.level.name} needs {value} bytes, "
                f"usable {fp.level.usable}"
            )
