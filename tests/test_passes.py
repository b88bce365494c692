"""Passes: dependence graph, fusion (legal and refused), clean-ups, verifier, and the tile domains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import sympy

from helpers import make_spec
from tilegen.core.build import build_backward, build_forward, kv_tile_range, mask_info, q_tile_range
from tilegen.core.errors import FusionError, VerifyError
from tilegen.core.exprs import evaluate
from tilegen.core.ir import (Access, Bc, Br, Buffer, Elementwise, Fill, Kernel, Load, Loop, Mask, MatMul, Pipelined, Program, RowReduce, Sk, Sq, Store, b, i, j,
                             lookahead_of, map_body, stages_of, walk)
from tilegen.passes.ascend.receive_free_early import FreeEarly
from tilegen.passes.cleanup import forward_stores
from tilegen.passes.depgraph import dependence_graph, edges_between
from tilegen.passes.fuse import fuse
from tilegen.passes.verify import verify
from tilegen.core.printer import fmt_stmt, format_program
from tilegen.backends import compile_backward, compile_forward
from tilegen.passes.driver import PassLog

GOLDEN = Path(__file__).parent / "golden"


def test_dependence_graph_links_phases_through_p_and_ds():
    program = build_backward(make_spec(window=(-1, 0)))
    graph = dependence_graph(program)
    flows = {
        (u.kernel, v.kernel, d["resource"], d["same_tile"])
        for u, v, d in edges_between(graph, {"dv", "ds", "dqdk"}, {"dv", "ds", "dqdk"}, scope="tensor")
        if d["kind"] == "flow"
    }
    assert ("dv", "ds", "P", True) in flows
    assert ("ds", "dqdk", "dS", True) in flows
    # the accumulators carry values across the serial loops
    carried = [d for _, _, d in graph.edges(data=True) if d["scope"] == "buffer" and d["resource"] == "dV_acc" and d["carried"]]
    assert carried


def test_fusion_refuses_non_consecutive_kernels():
    program = build_backward(make_spec())
    with pytest.raises(FusionError, match="not consecutive"):
        fuse(program, ["dv", "dqdk"], host="dv", name="x", phase="x")


def test_fusion_refuses_a_statement_without_a_level():
    program = build_backward(make_spec())
    with pytest.raises(FusionError, match="no level of the fused nest"):
        fuse(program, ["pre", "dv"], host="dv", name="x", phase="x")


def test_fusion_refuses_a_shifted_dependence():
    program = build_backward(make_spec())
    ds = program.kernel("ds")

    def shift(s):
        if isinstance(s, Load) and s.src.tensor == "P":
            return dataclasses.replace(s, src=dataclasses.replace(s.src, index=s.src.index[:3] + ((j + 1) * Bc,)))
        return s

    program = dataclasses.replace(program, kernels=tuple(
        dataclasses.replace(k, body=map_body(k.body, shift)) if k is ds else k for k in program.kernels
    ))
    with pytest.raises(FusionError, match="fusing would reorder them"):
        fuse(program, ["dv", "ds", "dqdk"], host="dv", name="main", phase="main")


def test_fusion_refuses_to_read_a_reduction_inside_it():
    """Before dQ's atomic adds are promoted out of the K/V loop, post cannot join the dQ nest: it
    reads the tile every K/V iteration adds into."""
    log = PassLog()
    compile_backward(make_spec(), dq_strategy="separate", log=log)
    before_promotion = next(p for name, p in log.steps if name == "cleanup")
    assert [k.name for k in before_promotion.kernels] == ["pre", "main", "dq", "post"]
    with pytest.raises(FusionError, match="a reduction over \\['j'\\]"):
        fuse(before_promotion, ["dq", "post"], host="dq", name="x", phase="x")
    with pytest.raises(FusionError, match="runs once per"):
        fuse(build_backward(make_spec()), ["dqdk", "post"], host="dqdk", name="x", phase="x")


def test_fused_atomic_program_golden():
    program = compile_backward(make_spec(seq_q=70, seq_k=70, window=(-1, 0)), dq_strategy="atomic")
    text = format_program(program)
    golden = GOLDEN / "bwd-atomic.txt"
    assert text == golden.read_text(), "regenerate with: python tests/golden/regen.py"


def test_fused_separate_program_golden():
    program = compile_backward(make_spec(seq_q=70, seq_k=70, heads_q=4, heads_kv=2, window=(8, 0)), dq_strategy="separate")
    assert format_program(program) == (GOLDEN / "bwd-separate.txt").read_text(), "regenerate with: python tests/golden/regen.py"


def _tiny_program(pad, chain):
    """Store a [Br, Bc] tile into HBM and load it back (pad), after ``chain`` built it."""
    t = Access("T", (b, i * Br, j * Bc), (Br, Bc))
    bufs = (Buffer("X", (Br, Bc), "fp32"), Buffer("Y", (Br, Bc), "fp32"), Buffer("Z", (Br, Bc), "fp32"))
    body = chain + (Store(t, "X"), Load("Y", t, pad=pad), Elementwise("Z", "mul", ("Y", "Y")), Store(Access("Out", (b, i * Br, j * Bc), (Br, Bc)), "Z"))
    loops = Loop(b, sympy.Integer(0), sympy.Integer(1), (Loop(i, 0, 2, (Loop(j, 0, 2, body),), kind="parallel"),), kind="parallel", role="batch")
    from tilegen.core.ir import MaskInfo, Tensor

    tensors = (Tensor("In", (sympy.Integer(1), Sq, Sk), "fp32", "input"), Tensor("T", (sympy.Integer(1), Sq, Sk), "fp32", "workspace"), Tensor("Out", (sympy.Integer(1), Sq, Sk), "fp32", "output"))
    return Program("t", tensors, (Kernel("k", "k", bufs, (loops,)),), MaskInfo(), 1.0)


def test_forwarding_needs_proved_zero_padding():
    src = Access("In", (b, i * Br, j * Bc), (Br, Bc))
    from tilegen.core.ir import Mask

    unknown = (Load("X", src),)
    masked = (Load("X", src), Mask("X", "X", i * Br, j * Bc), Elementwise("X", "exp", ("X",)))
    kept = forward_stores(_tiny_program(0.0, unknown))
    assert any(isinstance(s, Load) and s.src.tensor == "T" for k in kept.kernels for s, _ in _walk(k))
    done = forward_stores(_tiny_program(0.0, masked))
    assert not any(isinstance(s, Load) and s.src.tensor == "T" for k in done.kernels for s, _ in _walk(k))
    # a load that promises nothing about padding can always take the stored tile
    free = forward_stores(_tiny_program(None, unknown))
    assert not any(isinstance(s, Load) and s.src.tensor == "T" for k in free.kernels for s, _ in _walk(k))


def _walk(kernel):
    from tilegen.core.ir import walk

    return walk(kernel.body)


def test_verifier_names_an_quadratic_tensor_in_a_fused_program():
    program = build_backward(make_spec()).with_attrs(form="fused")
    with pytest.raises(VerifyError, match="HBM tensor P .* grows with seq_q\\*seq_k"):
        verify(program, "test")


def test_verifier_catches_read_before_write_and_bad_types():
    program = build_forward(make_spec())
    kernel = program.kernels[0]
    no_fill = dataclasses.replace(kernel, body=map_body(kernel.body, lambda s: None if isinstance(s, Fill) and s.dst == "l" else s))
    with pytest.raises(VerifyError, match="reads l before anything writes it"):
        verify(dataclasses.replace(program, kernels=(no_fill,)), "test")
    bad_mm = dataclasses.replace(kernel, body=map_body(kernel.body, lambda s: dataclasses.replace(s, trans_b=False) if isinstance(s, MatMul) and s.dst == "S" else s))
    with pytest.raises(VerifyError, match="disagree"):
        verify(dataclasses.replace(program, kernels=(bad_mm,)), "test")
    half = dataclasses.replace(kernel, buffers=tuple(dataclasses.replace(x, dtype="fp16") if x.name == "m_use" else x for x in kernel.buffers))
    with pytest.raises(VerifyError, match="arithmetic writes fp32, m_use is fp16"):
        verify(dataclasses.replace(program, kernels=(half,)), "test")


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_tile_ranges_are_exactly_the_non_empty_pairs(alignment):
    """kv_tile_range(i) and q_tile_range(j) enumerate the same pairs: those with a visible (row, key)."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        sq, sk = (int(x) for x in rng.integers(1, 90, size=2))
        br, bc = (int(x) for x in rng.choice([8, 16, 24, 32], size=2))
        left, right = (int(x) for x in rng.integers(-1, 20, size=2))
        try:
            spec = make_spec(seq_q=sq, seq_k=sk, window=(left, right), alignment=alignment)
        except ValueError:
            continue
        mask = mask_info(spec)
        env = {Sq: sq, Sk: sk, Br: br, Bc: bc}
        tq, tk = -(-sq // br), -(-sk // bc)
        r = np.arange(sq)[:, None]
        c = np.arange(sk)[None, :]
        off = spec.offset
        vis = np.ones((sq, sk), bool)
        if left >= 0:
            vis &= c >= r + off - left
        if right >= 0:
            vis &= c <= r + off + right
        truth = {(ti, tj) for ti in range(tq) for tj in range(tk) if vis[ti * br:(ti + 1) * br, tj * bc:(tj + 1) * bc].any()}
        values = {str(k): v for k, v in env.items()}
        by_q = set()
        for ti in range(tq):
            lo, hi = (int(evaluate(e, {**values, "i": ti})) for e in kv_tile_range(mask, i))
            by_q |= {(ti, tj) for tj in range(lo, hi)}
        by_k = set()
        for tj in range(tk):
            lo, hi = (int(evaluate(e, {**values, "j": tj})) for e in q_tile_range(mask, j))
            by_k |= {(ti, tj) for ti in range(lo, hi)}
        assert by_q == truth == by_k, (sq, sk, br, bc, left, right)


# --- dS reads the unrounded P (issue 12, item 2) --------------------------------------------------------


def _ds_products(program: Program) -> list[tuple[str, Elementwise, bool]]:
    """Every dS product of ``program``: an elementwise ``mul`` one of whose operands descends from
    the dP matmul (dO Vᵀ). Returns (kernel, statement, whether its other operand, P, was rounded to
    a 16-bit dtype on its way there).

    Provenance is followed statement by statement in launch order, through every buffer and every HBM
    tensor (a store hands its value's provenance to the tensor; hand-off workspaces included): a cast
    to a non-fp32 dtype, or a load of a non-fp32 tensor no earlier kernel stored, rounds; a matmul's
    result is fresh fp32 (its operands are rounded by design, DESIGN §3)."""
    tensors = {t.name: t for t in program.tensors}
    stored: dict[str, tuple[frozenset, bool, bool]] = {}  # tensor -> (sources, rounded, from dP)
    found = []
    for kernel in program.kernels:
        dtype = {buf.name: buf.dtype for buf in kernel.buffers}
        prov: dict[str, tuple[frozenset, bool, bool]] = {}
        for stmt, _ in walk(kernel.body):
            if isinstance(stmt, Load):
                name = stmt.src.tensor
                prov[stmt.dst] = stored.get(name, (frozenset({name}), tensors[name].dtype != "fp32", False))
            elif isinstance(stmt, Store):
                stored[stmt.dst.tensor] = prov[stmt.src]
            elif isinstance(stmt, Fill):
                prov[stmt.dst] = (frozenset(), False, False)
            elif isinstance(stmt, MatMul):
                srcs = prov[stmt.a][0] | prov[stmt.b][0]
                prov[stmt.dst] = (srcs, dtype[stmt.dst] != "fp32", srcs >= {"dO", "V"} and not srcs & {"Q", "K"})
            elif isinstance(stmt, (Mask, RowReduce)):
                prov[stmt.dst] = prov[stmt.src]
            elif isinstance(stmt, Elementwise):
                args = [prov[a] for a in stmt.args if isinstance(a, str)]
                srcs = frozenset().union(*(a[0] for a in args))
                rounded = any(a[1] for a in args) or (stmt.op == "cast" and dtype[stmt.dst] != "fp32")
                if stmt.op == "mul" and len(args) == 2 and args[0][2] != args[1][2]:
                    p = args[0] if not args[0][2] else args[1]
                    if p[0] >= {"Q", "K", "L"}:
                        found.append((kernel.name, stmt, p[1]))
                prov[stmt.dst] = (srcs, rounded, any(a[2] for a in args))
    return found


PROGRAMS = {
    "unfused": dict(fused=False),
    "atomic": dict(dq_strategy="atomic"),
    "separate": dict(dq_strategy="separate"),
}


@pytest.mark.parametrize("target", [None, "ascend910b2", "h200"])
@pytest.mark.parametrize("form", sorted(PROGRAMS))
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ds_never_reads_a_rounded_p(dtype, form, target):
    spec = make_spec(dtype=dtype, seq_q=70, seq_k=70, head_dim_qk=72, head_dim_v=72, window=(-1, 0))
    program = compile_backward(spec, target=target, **PROGRAMS[form])
    products = _ds_products(program)
    # one dS per nest: unfused ds, fused main, and the separate strategy's dq nest
    assert len(products) == (2 if form == "separate" else 1), [fmt_stmt(s) for _, s, _ in products]
    for kernel, stmt, rounded in products:
        assert not rounded, f"kernel {kernel}: `{fmt_stmt(stmt)}` reads P rounded to {dtype}"


def test_ds_product_walk_flags_a_rounded_p():
    """The walk above sees a rounded P: the old ds kernel (P stored in the input dtype) is flagged."""
    program = build_backward(make_spec())
    rounded = dataclasses.replace(
        program,
        tensors=tuple(dataclasses.replace(t, dtype="fp16") if t.name == "P" else t for t in program.tensors),
        kernels=tuple(
            dataclasses.replace(k, body=map_body(k.body, lambda s: dataclasses.replace(s, src="Pc") if isinstance(s, Store) and s.dst.tensor == "P" else s))
            if k.name == "dv" else k
            for k in program.kernels
        ),
    )
    assert [r for _, _, r in _ds_products(program)] == [False]
    assert [r for _, _, r in _ds_products(rounded)] == [True]


def test_sink_past_free_reorders_only_independent_work():
    """receive-free-early marks the forward's receive of S, and sink-past-free moves the work that does
    not touch S (alpha, l) and the folded row sum after the cast of P: the interpreter gives bitwise the
    same O and L with and without the reordering, and both pass the float64 reference's rule; the
    verifier refuses the knob on a tile another stage reads."""
    from helpers import assert_forward_ok, inputs
    from tilegen.backends.interp import interpret

    spec = make_spec(heads_q=2, heads_kv=1, seq_q=200, seq_k=520, head_dim_qk=64, head_dim_v=64, window=(-1, 0), dtype="bf16")
    log = PassLog()
    after = compile_forward(spec, target="ascend910b2", tile_sizes=(64, 128), log=log)  # Bc 128: a folded row sum
    before = dict(log.steps)["receive-free-early"]

    def stage(program):
        loop = next(s for k in program.kernels for s, _ in walk(k.body) if isinstance(s, Loop) and stages_of(s))
        return loop, [fmt_stmt(s) for s, g in zip(loop.body, stages_of(loop)) if g == 1]

    loop, moved = stage(after)
    assert any(isinstance(s, Load) and s.has(FreeEarly) for s in loop.body)
    cast = next(n for n, line in enumerate(moved) if line.startswith("Pc = cast(S_vector)"))
    assert moved[cast + 1].startswith("ws_Pc[") and moved[cast + 2].startswith("rowsum = rowsum(S_vector)")
    assert [line.split(" =")[0] for line in moved[cast + 3:cast + 7]] == ["alpha", "alpha", "l", "l"]
    assert stage(before)[1] != moved
    data = inputs(spec)
    feeds = {n: data[n] for n in "QKV"}
    got_before, _ = interpret(before, feeds)
    got_after, _ = interpret(after, feeds)
    np.testing.assert_array_equal(got_before["O"], got_after["O"])
    np.testing.assert_array_equal(got_before["L"], got_after["L"])
    assert_forward_ok(spec, got_after["O"], got_after["L"], data)
    # the knob on S where the later stage also reads S: refused by the verifier
    k = after.kernels[0]
    bad_loop = dataclasses.replace(loop, body=loop.body + (Elementwise("S_vector", "exp", ("S_vector",)),)).annotate(
        Pipelined(stages_of(loop) + (2,), lookahead_of(loop)))
    bad = dataclasses.replace(after, kernels=(dataclasses.replace(k, body=map_body(k.body, lambda s: bad_loop if s == loop else s)),))
    with pytest.raises(VerifyError, match="free_early needs"):
        verify(bad, "test")
    # ... and where the tile's last access sits in a nested loop (the event would go before it)
    cast = next(n for n, s in enumerate(loop.body) if fmt_stmt(s).startswith("Pc = cast(S_vector)"))
    nested = Loop(sympy.Symbol("t"), sympy.Integer(0), sympy.Integer(1), (loop.body[cast],))
    nest_loop = dataclasses.replace(loop, body=loop.body[:cast] + (nested,) + loop.body[cast + 1:])
    bad = dataclasses.replace(after, kernels=(dataclasses.replace(k, body=map_body(k.body, lambda s: nest_loop if s == loop else s)),))
    with pytest.raises(VerifyError, match="free_early needs"):
        verify(bad, "test")
