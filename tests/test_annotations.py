"""Annotations on IR nodes (tilegen.core.annotations, DESIGN §1 "Schedule annotations"): the registry and
the canonical order, the verifier's generic checks, the printer's ``@key(...)`` form, and each hook the
analyses below the knob modules call (footprints, cost model, interpreter, IR helpers), exercised with
annotation classes defined here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import sympy

from helpers import P, loop_kernel, owned_tile_program
from tilegen.backends.interp import interpret
from tilegen.core.annotations import Annotation, Site, annotation_class, annotation_keys
from tilegen.core.errors import VerifyError
from tilegen.core.ir import (
    Access,
    Buffer,
    Kernel,
    Load,
    Loop,
    MaskInfo,
    Program,
    RowReduce,
    Store,
    Tensor,
    index_symbol,
    rename_buffers,
    substitute,
)
from tilegen.core.printer import fmt_annotation, fmt_stmt, format_program
from tilegen.core.targets import load_target
from tilegen.models.cost import start_overhead_s
from tilegen.models.footprint import live_intervals
from tilegen.passes.verify import verify


@dataclass(frozen=True)
class Mark(Annotation, key="test_mark", on=("Load",)):
    """No fields, no effect."""

    def note(self, node) -> str:
        return f"marks {node.dst}"


@dataclass(frozen=True)
class Other(Annotation, key="test_other", on=("Load", "Store")):
    """Fields of every printed kind; its check refuses a negative count."""

    count: int = 1
    name: str = "x"
    flags: tuple[int, ...] = ()
    rate: float = 0.5
    on: bool = True

    def check(self, node, at: Site) -> str:
        return "" if self.count >= 0 else f"count {self.count} < 0"


@dataclass(frozen=True)
class Scratch(Annotation, key="test_scratch", on=("RowReduce",)):
    BUFFERS = ("buffer",)
    buffer: str


@dataclass(frozen=True)
class Guard(Annotation, key="test_guard", on=("Load",)):
    expr: sympy.Expr

    def zeros_unless(self) -> sympy.Expr:
        return self.expr


@dataclass(frozen=True)
class FirstWrites(Annotation, key="test_first_writes", on=("Store",)):
    def first_writes(self) -> bool:
        return True


@dataclass(frozen=True)
class Held(Annotation, key="test_held", on=("Load", "Store")):
    def held(self, stmt) -> tuple[str, ...]:
        return (stmt.dst if isinstance(stmt, Load) else stmt.src,)


@dataclass(frozen=True)
class Joins(Annotation, key="test_joins", on=("Kernel",)):
    def joins_launch(self) -> bool:
        return True


def test_registry_and_unique_keys():
    assert annotation_class("test_mark") is Mark and "test_other" in annotation_keys()
    with pytest.raises(KeyError, match="no annotation @nonesuch; known: .*test_mark"):
        annotation_class("nonesuch")
    with pytest.raises(TypeError, match="annotation key 'test_mark' is taken by .*Mark"):
        @dataclass(frozen=True)
        class Again(Annotation, key="test_mark", on=("Load",)):
            pass
    with pytest.raises(TypeError, match="needs a key"):
        class Keyless(Annotation):
            pass


def _load(name="x", **kw):
    return Load(name, Access("X", (sympy.Integer(0),), (sympy.Integer(4),)), **kw)


def test_annotations_are_kept_in_key_order_one_of_a_class():
    a = _load().annotate(Other(2)).annotate(Mark())
    b = _load().annotate(Mark(), Other(2))
    assert a == b and a.ann == (Mark(), Other(2)) and fmt_stmt(a) == fmt_stmt(b)
    c = a.annotate(Other(3))
    assert c.ann == (Mark(), Other(3)) and c.get(Other).count == 3
    assert c.unannotate(Mark).ann == (Other(3),) and not c.unannotate(Mark).has(Mark)
    assert _load().get(Mark) is None and _load().unannotate(Mark) == _load()
    with pytest.raises(TypeError, match="@test_mark annotates Load, not Store"):
        Store(Access("X", (sympy.Integer(0),), (sympy.Integer(4),)), "x").annotate(Mark())


def test_printed_form():
    assert fmt_annotation(Mark()) == "@test_mark"
    assert fmt_annotation(Other(2, "a'b", (0, 1), 0.25, False)) == "@test_other(count=2, name=\"a'b\", flags=(0, 1), rate=0.25, on=False)"
    assert fmt_annotation(Other(flags=(3,))) == "@test_other(count=1, name='x', flags=(3,), rate=0.5, on=True)"
    assert fmt_annotation(Guard(sympy.Min(index_symbol("j"), sympy.Symbol("Sq")) - 1)) == "@test_guard(expr=Min(Sq, j) - 1)"
    line = fmt_stmt(_load().annotate(Mark(), Other()))
    assert line == "x = load X[0:+4]  @test_mark  @test_other(count=1, name='x', flags=(), rate=0.5, on=True)   # marks x"


def _tiny_program(*, load_ann=(), store_ann=(), kernel_ann=(), tensor_ann=()):
    """One kernel: a grid over p in [0, 3) of [x = load X[p]; Y[p] = x]."""
    p = index_symbol("p")
    four = sympy.Integer(4)
    tensors = (Tensor("X", (sympy.Integer(3), four), "fp32", "input"), Tensor("Y", (sympy.Integer(3), four), "fp32", "output", ann=tensor_ann))
    body = (Loop(p, sympy.Integer(0), sympy.Integer(3), (
        Load("x", Access("X", (p, sympy.Integer(0)), (four,)), ann=load_ann),
        Store(Access("Y", (p, sympy.Integer(0)), (four,)), "x", ann=store_ann),
    ), kind="parallel"),)
    kernel = Kernel("k", "main", (Buffer("x", (four,), "fp32"),), body, ann=kernel_ann)
    return Program("t", tensors, (kernel,), MaskInfo(), 1.0)


def test_the_verifier_checks_every_annotation():
    program = verify(_tiny_program(load_ann=(Mark(), Other(0)), store_ann=(Other(1),)))
    assert "@test_mark  @test_other(count=0" in format_program(program)
    with pytest.raises(VerifyError, match="@test_mark annotates Load, not Store"):
        verify(_tiny_program(store_ann=(Mark(),)))
    with pytest.raises(VerifyError, match=r"annotations \['test_other', 'test_mark'\] are not one of a class in key order"):
        verify(_tiny_program(load_ann=(Other(), Mark())))
    with pytest.raises(VerifyError, match=r"kernel k: `x = load X\[p, 0:\+4\]  @test_other\(count=-1.*`: @test_other: count -1 < 0"):
        verify(_tiny_program(load_ann=(Other(-1),)))
    with pytest.raises(VerifyError, match="tensor Y: @test_other annotates Load, Store, not Tensor"):
        verify(_tiny_program(tensor_ann=(Other(),)))
    with pytest.raises(VerifyError, match="the kernel: @test_mark annotates Load, not Kernel"):
        verify(_tiny_program(kernel_ann=(Mark(),)))


def test_scratch_buffers_are_written_and_renamed_with_the_statement():
    r = RowReduce("m", "S", "max").annotate(Scratch("m_fold"))
    assert r.buffers_written() == ("m", "m_fold") and r.buffers_read() == ("S",)
    renamed = rename_buffers(r, {"m_fold": "k_m_fold", "S": "T"})
    assert renamed.get(Scratch).buffer == "k_m_fold" and renamed.src == "T"
    assert RowReduce("m", "S", "max").buffers_written() == ("m",)


def test_annotation_expressions_are_indexed_and_substituted_with_the_statement():
    j, p = index_symbol("j"), index_symbol("p")
    sq = sympy.Symbol("Sq", integer=True, positive=True)
    load = _load().annotate(Guard(sympy.Min(j, sq)))
    assert load.exprs()[-1] == sympy.Min(j, sq)
    assert substitute(load, {j: p + 1}).get(Guard).expr == sympy.Min(p + 1, sq)
    # the verifier checks the annotation's symbols like the statement's indices
    bad = _tiny_program(load_ann=(Guard(j),))
    with pytest.raises(VerifyError, match=r"uses \['j'\], which no enclosing loop binds"):
        verify(bad)



def test_held_buffers_live_over_their_loop():
    """Annotation.held: the buffers a statement holds are live over its loop (statements numbered 0..4:
    the loop is 0..3)."""
    plain = live_intervals(loop_kernel())
    assert plain["X"] == (0, 1)
    assert live_intervals(loop_kernel(store_ann=(Held(),)))["X"] == (0, 3)
    assert live_intervals(loop_kernel(load_ann=(Held(),)))["X"] == (0, 3)
    assert live_intervals(loop_kernel(load_ann=(Mark(),)))["X"] == (0, 1)
    assert live_intervals(loop_kernel(store_ann=(Held(),)))["Z"] == plain["Z"]


def test_a_kernel_that_joins_the_previous_launch_starts_after_a_barrier():
    """Annotation.joins_launch: the start cost is the all-core barrier's three flag hops, not a launch
    (the figures from the target file)."""
    tgt = load_target("ascend910b2")
    kernel = loop_kernel()
    launch = tgt.overhead["launch_us"].value * 1e-6
    barrier = 3 * tgt.timeline["cross_core_flag_cycles"].value / (tgt.cores["clock_ghz"].value * 1e9)
    assert start_overhead_s(kernel, tgt) == launch
    assert start_overhead_s(kernel.annotate(Joins()), tgt) == pytest.approx(barrier)



def test_value_rules_first_writes_and_zeros_unless():
    """Annotation.first_writes and Annotation.zeros_unless change values: the interpreter gives
    Y[p] = p · X[p] (NumPy) with both; without the first the never-zeroed workspace poisons every row,
    without the second the row whose writer ran no iteration."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    want = np.arange(3, dtype=np.float32)[:, None] * x
    got, _ = interpret(verify(owned_tile_program((FirstWrites(),), (Guard(P),))), {"X": x})
    np.testing.assert_array_equal(got["Y"], want)
    got, _ = interpret(owned_tile_program((FirstWrites(),), ()), {"X": x})
    assert np.isnan(got["Y"][0]).all() and np.array_equal(got["Y"][1:], want[1:])
    got, _ = interpret(owned_tile_program((), (Guard(P),)), {"X": x})
    assert np.array_equal(got["Y"][0], want[0]) and np.isnan(got["Y"][1:]).all()


def test_an_unannotated_program_prints_as_before():
    """A program without annotations prints without any ``@key`` tag (the goldens of test_passes hold)."""
    program = _tiny_program()
    assert " @" not in format_program(program).replace(" @ ", "")
    assert dataclasses.replace(program.kernels[0], ann=()) == program.kernels[0]


@dataclass(frozen=True)
class Streams(Annotation, key="test_streams", on=("Kernel",)):
    def streams(self) -> bool:
        return True


def test_a_streaming_annotation_keeps_per_program_buffers_live_over_the_body():
    """Annotation.streams: the footprints treat the kernel as a streamed one (as Ascend's @stream does)."""
    from tilegen import builtin_spec
    from tilegen.backends import compile_forward
    from tilegen.passes.ascend.stream_programs import Stream

    kernel = compile_forward(builtin_spec("tiny"), target="ascend910b2").kernels[0]
    assert kernel.has(Stream)
    nested = kernel.unannotate(Stream)
    assert live_intervals(nested.annotate(Streams())) == live_intervals(kernel) != live_intervals(nested)
