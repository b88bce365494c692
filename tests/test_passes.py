"""Passes: dependence graph, fusion (legal and refused), clean-ups, verifier, and the tile domains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import sympy

from helpers import make_spec
from tilegen.build import build_backward, build_forward, kv_tile_range, mask_info, q_tile_range
from tilegen.errors import FusionError, VerifyError
from tilegen.ir import Access, Bc, Br, Buffer, Elementwise, Fill, Kernel, Load, Loop, MatMul, Program, Sk, Sq, Store, b, i, j, map_body
from tilegen.passes import pipeline
from tilegen.passes.cleanup import forward_stores
from tilegen.passes.depgraph import dependence_graph, edges_between
from tilegen.passes.fuse import fuse
from tilegen.passes.verify import verify
from tilegen.printer import format_program

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
    log = pipeline.PassLog()
    pipeline.compile_backward(make_spec(), dq_strategy="separate", log=log)
    before_promotion = next(p for name, p in log.steps if name == "cleanup")
    assert [k.name for k in before_promotion.kernels] == ["pre", "main", "dq", "post"]
    with pytest.raises(FusionError, match="a reduction over \\['j'\\]"):
        fuse(before_promotion, ["dq", "post"], host="dq", name="x", phase="x")
    with pytest.raises(FusionError, match="runs once per"):
        fuse(build_backward(make_spec()), ["dqdk", "post"], host="dqdk", name="x", phase="x")


def test_fused_atomic_program_golden():
    program = pipeline.compile_backward(make_spec(seq_q=70, seq_k=70, window=(-1, 0)), dq_strategy="atomic")
    text = format_program(program)
    golden = GOLDEN / "bwd-atomic.txt"
    assert text == golden.read_text(), "regenerate with: python tests/golden/regen.py"


def test_fused_separate_program_golden():
    program = pipeline.compile_backward(make_spec(seq_q=70, seq_k=70, heads_q=4, heads_kv=2, window=(8, 0)), dq_strategy="separate")
    assert format_program(program) == (GOLDEN / "bwd-separate.txt").read_text(), "regenerate with: python tests/golden/regen.py"


def _tiny_program(pad, chain):
    """Store a [Br, Bc] tile into HBM and load it back (pad), after ``chain`` built it."""
    t = Access("T", (b, i * Br, j * Bc), (Br, Bc))
    bufs = (Buffer("X", (Br, Bc), "fp32"), Buffer("Y", (Br, Bc), "fp32"), Buffer("Z", (Br, Bc), "fp32"))
    body = chain + (Store(t, "X"), Load("Y", t, pad=pad), Elementwise("Z", "mul", ("Y", "Y")), Store(Access("Out", (b, i * Br, j * Bc), (Br, Bc)), "Z"))
    loops = Loop(b, sympy.Integer(0), sympy.Integer(1), (Loop(i, 0, 2, (Loop(j, 0, 2, body),), kind="parallel"),), kind="parallel", role="batch")
    from tilegen.ir import MaskInfo, Tensor

    tensors = (Tensor("In", (sympy.Integer(1), Sq, Sk), "fp32", "input"), Tensor("T", (sympy.Integer(1), Sq, Sk), "fp32", "workspace"), Tensor("Out", (sympy.Integer(1), Sq, Sk), "fp32", "output"))
    return Program("t", tensors, (Kernel("k", "k", bufs, (loops,)),), MaskInfo(), 1.0)


def test_forwarding_needs_proved_zero_padding():
    src = Access("In", (b, i * Br, j * Bc), (Br, Bc))
    from tilegen.ir import Mask

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
    from tilegen.ir import walk

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
        by_q = set()
        for ti in range(tq):
            lo, hi = (int(sympy.sympify(e).subs(env).subs(i, ti)) for e in kv_tile_range(mask, i))
            by_q |= {(ti, tj) for tj in range(lo, hi)}
        by_k = set()
        for tj in range(tk):
            lo, hi = (int(sympy.sympify(e).subs(env).subs(j, tj)) for e in q_tile_range(mask, j))
            by_k |= {(ti, tj) for ti in range(lo, hi)}
        assert by_q == truth == by_k, (sq, sk, br, bc, left, right)
