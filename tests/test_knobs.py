"""The Ascend schedule knobs as annotations (tilegen/passes/ascend/, DESIGN §1 "Schedule annotations"): each
registered under its printed key, every annotation of a compiled program printed and read back (by an
independent parser built on Python's ``ast`` and sympy), no pass's effect hidden from the printed text, each
knob's hooks (what the footprints, the cost model and the interpreter read of it) and each knob's legality
check."""

from __future__ import annotations

import ast
import dataclasses
import re

import numpy as np
import pytest
import sympy

from helpers import make_spec, P, loop_kernel, owned_tile_program
from tilegen import builtin_spec
from tilegen.backends import compile_backward, compile_forward
from tilegen.backends.interp import interpret
from tilegen.core import ir
from tilegen.core.annotations import Annotation, annotation_class, annotation_keys
from tilegen.core.errors import VerifyError
from tilegen.core.ir import (
    Access,
    Elementwise,
    Fill,
    Load,
    Loop,
    MatMul,
    Pipelined,
    RowReduce,
    Store,
    index_symbol,
    lookahead_of,
    map_body,
    rename_buffers,
    stages_of,
    substitute,
    walk,
)
from tilegen.core.printer import fmt_annotation, format_program
from tilegen.core.targets import load_target
from tilegen.models.cost import start_overhead_s
from tilegen.models.footprint import live_intervals
from tilegen.models.stages import stream_split
from tilegen.passes import ascend  # noqa: F401  (registers every Ascend knob)
from tilegen.passes.ascend.fold_row_reductions import Fold
from tilegen.passes.ascend.l0c_pingpong import NChunk
from tilegen.passes.ascend.one_handoff_per_direction import NoSignal, NoWait
from tilegen.passes.ascend.one_launch import SyncAll
from tilegen.passes.ascend.own_tile_epilogue import SignalDone, WaitDone
from tilegen.passes.ascend.pipeline_handoffs import HandoffSlots
from tilegen.passes.ascend.receive_ahead import Hoist
from tilegen.passes.ascend.receive_free_early import FreeEarly
from tilegen.passes.ascend.snake_deal import Deal
from tilegen.passes.ascend.stream_programs import Stream
from tilegen.passes.ascend.wait_at_first_read import WaitAtRead
from tilegen.passes.ascend.wait_at_next_store import WaitAtNextStore
from tilegen.passes.ascend.wait_at_rewrite import WaitAtRewrite
from tilegen.passes.ascend.write_first_plain import FirstPlain, ZeroUnless
from tilegen.passes.driver import PassLog
from tilegen.passes.verify import verify

# --- the registry ---------------------------------------------------------------------------------------


def test_registry_knows_every_knob_by_its_printed_key():
    for cls in (WaitAtRead, NoWait, Hoist, ZeroUnless, WaitDone, FreeEarly, NoSignal, WaitAtRewrite, FirstPlain, SignalDone,
                NChunk, Fold, SyncAll, Stream, Deal, HandoffSlots, Pipelined, WaitAtNextStore):
        assert annotation_class(cls.KEY) is cls
    assert len(set(annotation_keys())) == len(annotation_keys())
    with pytest.raises(KeyError, match="no annotation @nonesuch; known: .*wait_at_read"):
        annotation_class("nonesuch")



# --- the printed form ---------------------------------------------------------------------------------

_NAMES = {str(s): s for s in ir.SHAPE_SYMBOLS + ir.TILE_SYMBOLS + (ir.b, ir.hq, ir.hkv, ir.i, ir.j)}


def _tags(text: str) -> list[str]:
    """Every ``@key`` or ``@key(...)`` after a space in ``text`` (a buffer's ``name@SCOPE`` and the
    matmul's `` @ `` are not tags), with balanced parentheses."""
    out = []
    for m in re.finditer(r"(?<= )@\w+", text):
        end = m.end()
        if end < len(text) and text[end] == "(":
            depth = 0
            for end in range(m.end(), len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            end += 1
        out.append(text[m.start():end])
    return out


def _read(tag: str, cls) -> Annotation:
    """An annotation from its printed ``@key(field=value, ...)``: the fields by Python's ``ast`` (a
    literal, or a sympy expression of the IR's size and index symbols), independently of the printer."""
    key, _, args = tag.partition("(")
    assert key == f"@{cls.KEY}", tag
    if not args:
        return cls()
    source = f"f({args}"
    call = ast.parse(source, mode="eval").body
    kw = {}
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    for k in call.keywords:
        text = ast.get_source_segment(source, k.value)
        if "Expr" in str(types[k.arg]):
            kw[k.arg] = sympy.sympify(text, locals={**_NAMES, "ceil": sympy.ceiling})
        else:
            kw[k.arg] = ast.literal_eval(text)
    return cls(**kw)


def _every_annotated_node(program):
    for t in program.tensors:
        yield t
    for k in program.kernels:
        yield k
        yield from k.buffers
        for s, _ in walk(k.body):
            yield s


@pytest.mark.parametrize("which", ["fwd", "bwd"])
def test_every_annotation_is_printed_and_reads_back(which):
    """Each annotation of each node of tiny's Ascend programs appears in the printed program, once per
    node, and the printed form reads back (an independent parser) to an equal annotation."""
    spec = builtin_spec("tiny")
    compile_ = compile_forward if which == "fwd" else compile_backward
    program = compile_(spec, target="ascend910b2")
    text = format_program(program)
    anns = [a for node in _every_annotated_node(program) for a in node.ann]
    assert {type(a) for a in anns} >= {WaitAtRead, Pipelined, HandoffSlots}  # a real schedule
    for a in anns:
        printed = fmt_annotation(a)
        assert printed in text
        assert _read(printed, type(a)) == a
    assert sorted(_tags(text)) == sorted(fmt_annotation(a) for a in anns)  # nothing dropped, nothing more


def test_every_gpu_annotation_is_printed_and_reads_back():
    """The same on the GPU (h200) programs of tiny and of a causal spec with tails: the annotations the
    GPU passes put there (each beside its pass in tilegen/passes/gpu/) print as ``@key(...)`` like the
    Ascend knobs and read back equal."""
    from tilegen.passes.gpu.fold_log2 import Log2Scaled
    from tilegen.passes.gpu.fuse_accumulation import AccumulateInto
    from tilegen.passes.gpu.heavy_last import HeavyLast
    from tilegen.passes.gpu.mask_segments import MaskSegments
    from tilegen.passes.gpu.pipelined_loads import PipelinedLoads
    from tilegen.passes.gpu.rows import LaunchKnobs
    from tilegen.passes.gpu.transposed_tiles import TransposedTiles

    seen = set()
    for spec in (builtin_spec("tiny"), make_spec(seq_q=72, seq_k=100, window=(-1, 0))):
        for compile_ in (compile_forward, compile_backward):
            program = compile_(spec, target="h200")
            text = format_program(program)
            anns = [a for node in _every_annotated_node(program) for a in node.ann]
            for a in anns:
                printed = fmt_annotation(a)
                assert printed in text
                assert _read(printed, type(a)) == a
            assert sorted(_tags(text)) == sorted(fmt_annotation(a) for a in anns)
            seen |= {type(a) for a in anns}
    assert seen >= {PipelinedLoads, TransposedTiles, Log2Scaled, HeavyLast, AccumulateInto, MaskSegments, LaunchKnobs}


@pytest.mark.parametrize("spec_name", ["tiny", "llama2-7b"])
def test_a_pass_that_changes_the_program_changes_its_printed_text(spec_name):
    """The printer drops nothing a pass does: along the Ascend pass list, wherever a pass returns a
    program unequal to its input, the printed text differs too (before the annotations the printer never
    showed Load.wait_at_read, so wait-at-first-read changed these programs with the text unchanged)."""
    spec = builtin_spec(spec_name)
    for compile_ in (compile_forward, compile_backward):
        log = PassLog()
        compile_(spec, target="ascend910b2", log=log)
        previous = None
        for name, program in log.steps:
            if previous is not None and program != previous:
                assert format_program(program) != format_program(previous), f"{spec_name}: pass {name} changed the program, not its text"
            previous = program
        steps = dict(log.steps)
        assert "@wait_at_read" in format_program(steps["wait-at-first-read"])


def test_the_ascend_forward_prints_as_its_golden():
    from pathlib import Path

    golden = Path(__file__).resolve().parent / "golden" / "fwd-ascend-tiny.txt"
    assert format_program(compile_forward(builtin_spec("tiny"), target="ascend910b2")) == golden.read_text(), \
        "regenerate with: python tests/golden/regen.py"


# --- each knob's hooks ---------------------------------------------------------------------------------

def _load(name="x", **kw):
    return Load(name, Access("X", (sympy.Integer(0),), (sympy.Integer(4),)), **kw)



def test_fold_scratch_is_written_and_renamed_with_the_reduction():
    r = RowReduce("m", "S", "max").annotate(Fold("m_fold"))
    assert r.buffers_written() == ("m", "m_fold") and r.buffers_read() == ("S",)
    renamed = rename_buffers(r, {"m_fold": "k_m_fold", "S": "T"})
    assert renamed.get(Fold).buffer == "k_m_fold" and renamed.src == "T"
    assert RowReduce("m", "S", "max").buffers_written() == ("m",)


def test_zero_unless_trips_are_indexed_and_substituted_with_the_load():
    j, p = index_symbol("j"), index_symbol("p")
    load = _load().annotate(ZeroUnless(sympy.Min(j, ir.Sq)))
    assert load.exprs()[-1] == sympy.Min(j, ir.Sq)
    moved = substitute(load, {j: p + 1})
    assert moved.get(ZeroUnless).trips == sympy.Min(p + 1, ir.Sq)



def test_the_knobs_that_hold_a_tile_over_its_loop():
    """Annotation.held: a store waited for at its tile's rewrite, a receive issued ahead or freed early
    keeps its tile live over the loop (statements numbered 0..4: the loop is 0..3)."""
    plain = live_intervals(loop_kernel())
    assert plain["X"] == (0, 1)
    assert live_intervals(loop_kernel(store_ann=(WaitAtRewrite(),)))["X"] == (0, 3)
    for ann in (Hoist(), FreeEarly()):
        assert live_intervals(loop_kernel(load_ann=(ann,)))["X"] == (0, 3)
    assert live_intervals(loop_kernel(load_ann=(WaitAtRead(),)))["X"] == (0, 1)  # not a held buffer
    assert live_intervals(loop_kernel(store_ann=(WaitAtRewrite(),)))["Z"] == plain["Z"]


def test_a_streamed_kernel_keeps_its_per_program_buffers_live_over_the_body():
    """Annotation.streams (@stream): what both streams use per program lives over the whole body."""
    kernel = compile_forward(builtin_spec("tiny"), target="ascend910b2").kernels[0]
    assert kernel.has(Stream)
    split = stream_split(kernel)
    streamed = live_intervals(kernel)
    nested = live_intervals(kernel.unannotate(Stream))
    end = max(hi for _, hi in streamed.values())
    cross = set().union(*split.cross.values())
    assert cross and all(streamed[b] == (0, end) for b in cross)
    assert any(nested[b] != (0, end) for b in cross)


def test_sync_all_starts_after_a_barrier():
    """Annotation.joins_launch (@sync_all): the start cost is SyncAll's three flag hops, not a launch
    (the figures from the target file)."""
    tgt = load_target("ascend910b2")
    kernel = loop_kernel()
    launch = tgt.overhead["launch_us"].value * 1e-6
    barrier = 3 * tgt.timeline["cross_core_flag_cycles"].value / (tgt.cores["clock_ghz"].value * 1e9)
    assert start_overhead_s(kernel, tgt) == launch
    assert start_overhead_s(kernel.annotate(SyncAll()), tgt) == pytest.approx(barrier)



def test_first_plain_and_zero_unless_value_rules():
    """Annotation.first_writes (@first_plain) and Annotation.zeros_unless (@zero_unless) change values:
    the interpreter gives Y[p] = p · X[p] (NumPy) with both; without the first the never-zeroed workspace
    poisons every row, without the second the row whose writer ran no iteration."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    want = np.arange(3, dtype=np.float32)[:, None] * x
    program = verify(owned_tile_program((FirstPlain(),), (ZeroUnless(P),)))
    got, _ = interpret(program, {"X": x})
    np.testing.assert_array_equal(got["Y"], want)
    got, _ = interpret(owned_tile_program((FirstPlain(),), ()), {"X": x})
    assert np.isnan(got["Y"][0]).all() and np.array_equal(got["Y"][1:], want[1:])
    got, _ = interpret(owned_tile_program((), (ZeroUnless(P),)), {"X": x})
    assert np.array_equal(got["Y"][0], want[0]) and np.isnan(got["Y"][1:]).all()


# --- each knob's legality check (the verifier runs it after every pass) --------------------------------


@pytest.fixture(scope="module")
def forward():
    return compile_forward(builtin_spec("tiny"), target="ascend910b2")


@pytest.fixture(scope="module")
def backward():
    return compile_backward(builtin_spec("tiny"), target="ascend910b2", dkv_strategy="atomic")


def _edit(program, fn, kernel=0):
    k = program.kernels[kernel]
    kernels = list(program.kernels)
    kernels[kernel] = dataclasses.replace(k, body=map_body(k.body, fn))
    return dataclasses.replace(program, kernels=tuple(kernels))


def _first(program, pred):
    return next(s for k in program.kernels for s, _ in walk(k.body) if pred(s))


def test_the_compiled_programs_pass_every_check(forward, backward):
    verify(forward, "test", load_target("ascend910b2"))
    verify(backward, "test", load_target("ascend910b2"))


def test_n_chunk_check(forward):
    mm = _first(forward, lambda s: isinstance(s, MatMul) and s.has(NChunk))
    with pytest.raises(VerifyError, match="n_chunk 24 needs a positive multiple of 16"):
        verify(_edit(forward, lambda s: s.annotate(NChunk(24)) if s is mm else s))
    loop = _first(forward, lambda s: isinstance(s, Loop) and any(x is mm for x in s.body))
    n, st = next(n for n, x in enumerate(loop.body) if x is mm), stages_of(loop)
    apart = dataclasses.replace(loop, body=loop.body[:n + 1] + (Fill("m_use", 0.0),) + loop.body[n + 1:]).annotate(
        Pipelined(st[:n + 1] + (st[n],) + st[n + 1:], lookahead_of(loop)))  # a statement between the product and its store
    with pytest.raises(VerifyError, match="n_chunk needs the next statement to store"):
        verify(_edit(forward, lambda s: apart if s == loop else s))


def test_deal_check(forward):
    bad = dataclasses.replace(forward, kernels=(forward.kernels[0].annotate(Deal("zigzag")),))
    with pytest.raises(VerifyError, match="@deal: order 'zigzag' is not one of cyclic, snake"):
        verify(bad)


def test_sync_all_check(backward):
    bad = dataclasses.replace(backward, kernels=(backward.kernels[0].annotate(SyncAll()),) + backward.kernels[1:])
    with pytest.raises(VerifyError, match="sync_all on the first kernel"):
        verify(bad)


def test_stream_check(backward):
    pre = backward.kernels[0]
    assert not stream_split(pre)
    bad = dataclasses.replace(backward, kernels=(pre.annotate(Stream()),) + backward.kernels[1:])
    with pytest.raises(VerifyError, match="@stream: the program body is not one pipelined loop"):
        verify(bad)


def test_pipelined_check(forward):
    loop = _first(forward, lambda s: isinstance(s, Loop) and stages_of(s))
    short = Pipelined(stages_of(loop)[:-1], lookahead_of(loop))
    with pytest.raises(VerifyError, match="@pipelined: stages .* do not give a stage >= 0 to each of its"):
        verify(_edit(forward, lambda s: s.annotate(short) if s == loop else s))
    nested = dataclasses.replace(forward, kernels=(forward.kernels[0].unannotate(Stream),))  # (@stream checks the lookahead too)
    with pytest.raises(VerifyError, match="@pipelined: lookahead 0 is less than 1"):
        verify(_edit(nested, lambda s: s.annotate(Pipelined(stages_of(loop), 0)) if s == loop else s))


def test_hoist_check(forward):
    loop = _first(forward, lambda s: isinstance(s, Loop) and stages_of(s))
    with pytest.raises(VerifyError, match="a hoisted load receives a hand-off in a loop with lookahead >= 2"):
        verify(_edit(forward, lambda s: s.annotate(Pipelined(stages_of(loop), 1)) if s == loop else s))
    hoisted = _first(forward, lambda s: isinstance(s, Load) and s.has(Hoist))
    with pytest.raises(VerifyError, match="a hoisted load receives a hand-off"):
        verify(_edit(forward, lambda s: s.unannotate(WaitAtRead) if s is hoisted else s))


def test_free_early_check(forward):
    q = _first(forward, lambda s: isinstance(s, Load) and s.dst == "Qi")
    with pytest.raises(VerifyError, match="free_early needs a hand-off received into a one-copy vector tile"):
        verify(_edit(forward, lambda s: s.annotate(FreeEarly()) if s is q else s))


def test_handoff_flag_checks(forward):
    q = _first(forward, lambda s: isinstance(s, Load) and s.dst == "Qi")
    with pytest.raises(VerifyError, match="no_wait on a load that is not a hand-off"):
        verify(_edit(forward, lambda s: s.annotate(NoWait()) if s is q else s))
    o = _first(forward, lambda s: isinstance(s, Store) and s.dst.tensor == "O")
    with pytest.raises(VerifyError, match="no_signal on a store that is not a hand-off"):
        verify(_edit(forward, lambda s: s.annotate(NoSignal()) if s is o else s))
    slots = dataclasses.replace(forward, tensors=tuple(t.annotate(HandoffSlots(0, 11)) if t.kind == "handoff" else t for t in forward.tensors))
    with pytest.raises(VerifyError, match=r"slots 0 must be >= 1 and ready 11 in \[-1, 10\]"):
        verify(slots)


def test_fold_check(forward):
    r = _first(forward, lambda s: isinstance(s, RowReduce))
    with pytest.raises(VerifyError, match="fold buffer .* must be fp32"):
        verify(_edit(forward, lambda s: s.annotate(Fold("acc")) if s is r else s))


def test_owned_tile_checks(backward):
    main = next(n for n, k in enumerate(backward.kernels) if k.name == "main")
    done = _first(backward, lambda s: isinstance(s, Store) and s.has(SignalDone))
    with pytest.raises(VerifyError, match="wait_done, but no store of .* signals done"):
        verify(_edit(backward, lambda s: s.unannotate(SignalDone) if isinstance(s, Store) else s, main))
    assert done.has(FirstPlain)


def test_zero_unless_check():
    """@zero_unless reads the grid alone: a loop variable inside the program (bound, so the indices
    check passes) is refused by the knob's own check."""
    program = owned_tile_program((FirstPlain(),), (ZeroUnless(P),))
    t = index_symbol("t")
    bad = _edit(program, lambda s: s.annotate(ZeroUnless(t)) if isinstance(s, Load) and s.dst == "x" else s)
    with pytest.raises(VerifyError, match=r"@zero_unless: zero_unless uses \['t'\], which the grid does not bind"):
        verify(bad)


# --- the knob added after the move: @wait_at_next_store (three files: DESIGN §1, "Adding a knob") --------


def test_wait_at_next_store_marks_the_store_a_later_store_of_its_rows_waits_for():
    """The forward's O store (L follows, the same rows of the same Q tile) and the backward epilogue's
    first store (dK or dV; the other follows) carry the knob; the last store of a body never does; the
    emitted O store leaves its closing wait to L's (StoreRows' closing argument false)."""
    from tilegen.backends import ascendc

    spec = builtin_spec("tiny")
    fwd = compile_forward(spec, target="ascend910b2")
    marked = [s.dst.tensor for s, _ in walk(fwd.kernels[0].body) if isinstance(s, Store) and s.has(WaitAtNextStore)]
    assert marked == ["O"]
    bwd = compile_backward(spec, target="ascend910b2", dkv_strategy="atomic")
    assert [s.dst.tensor for k in bwd.kernels for s, _ in walk(k.body) if isinstance(s, Store) and s.has(WaitAtNextStore)] in (["dK"], ["dV"])
    text = ascendc.generate(spec, "ascend910b2").files["fwd_kernels.asc"]
    o_store = [ln for ln in text.splitlines() if "tilegen::StoreRows<half>(g_O[" in ln]
    assert o_store and all(ln.rstrip().endswith(", false, false);") for ln in o_store)
    gpu = compile_forward(spec, target="h200")  # a GPU target: not on its list
    assert not any(s.has(WaitAtNextStore) for k in gpu.kernels for s, _ in walk(k.body))


def test_wait_at_next_store_check():
    """The verifier refuses the knob on a store no later store of its rows covers (the forward's L: the
    body's last store, a 1-d tile), and where a statement between writes the store's tile."""
    fwd = compile_forward(builtin_spec("tiny"), target="ascend910b2")
    l_store = _first(fwd, lambda s: isinstance(s, Store) and s.dst.tensor == "L")
    with pytest.raises(VerifyError, match="wait_at_next_store needs a plain store of a 2-d vector tile followed"):
        verify(_edit(fwd, lambda s: s.annotate(WaitAtNextStore()) if s is l_store else s))
    o_store = _first(fwd, lambda s: isinstance(s, Store) and s.has(WaitAtNextStore))
    rewrite = Elementwise(o_store.src, "copy", (o_store.src,))
    with pytest.raises(VerifyError, match="wait_at_next_store needs"):
        verify(_edit(fwd, lambda s: (s, rewrite) if s is o_store else s))


@pytest.mark.skipif(__import__("shutil").which("g++") is None and __import__("shutil").which("clang++") is None,
                    reason="the timeline traces the hand twin, which needs a C++ compiler")
@pytest.mark.slow
def test_wait_at_next_store_needs_its_tile_held(monkeypatch):
    """Traced on the hand twin and scheduled by the timeline (its race check), tiny's forward with the
    knob is race-free and faster than without it; with the tile not held live until the later store's
    wait (the hook Annotation.held taken away) the planner gives O's tile bytes to lse, which the vector
    writes while MTE3 still reads O: the hand twin fails the run (its pipe-ordering check), and the
    timeline, on the trace taken with that check off, reports the race."""
    from tilegen.backends.ascendc.timeline import TimelineError, simulate_program
    from tilegen.backends.ascendc.twin import TwinError
    from tilegen.passes.ascend import wait_at_next_store as knob

    monkeypatch.setenv("TILEGEN_CACHE", "0")
    spec = builtin_spec("tiny")
    with_knob = simulate_program(spec, "ascend910b2", "fwd", exact=True)
    monkeypatch.setattr(knob, "wait_at_next_store", lambda program, target: program)
    without = simulate_program(spec, "ascend910b2", "fwd", exact=True)
    assert with_knob.time_s < without.time_s
    monkeypatch.undo()
    monkeypatch.setenv("TILEGEN_CACHE", "0")
    monkeypatch.setattr(knob.WaitAtNextStore, "held", lambda self, stmt: ())
    with pytest.raises(TwinError, match=r"PIPE_V overwrites UB bytes .* on PIPE_MTE3 reads, with no SetFlag/WaitFlag \(HardEvent::MTE3_V"):
        simulate_program(spec, "ascend910b2", "fwd", exact=True)
    monkeypatch.setenv("TWIN_ORDER_CHECK", "0")
    with pytest.raises(TimelineError, match="race"):
        simulate_program(spec, "ascend910b2", "fwd", exact=True)
