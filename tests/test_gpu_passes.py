"""The GPU passes whose result is an annotation the Triton lowering reads (tilegen.passes.gpu:
transposed-tiles, fold-log2, heavy-last, fuse-accumulation, mask-segments): each on a small program
built by hand, against the program expected out, written by hand (the same program with the
annotations the pass must add, nothing else changed); mask-segments' whole tiles also against a brute
force walk of every (query, key) pair of every tile under DESIGN §3's visibility rule. Then that the
Triton lowering and the GPU cost model read those annotations (strip one and the emitted code or the
model's registers change)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy

from helpers import make_spec
from tilegen.core.build import build_forward
from tilegen.core.exprs import evaluate
from tilegen.core.ir import (
    Access, Bc, Br, Buffer, Dqk, Dv, Elementwise, Fill, Kernel, Load, Loop, Mask, MaskInfo, MatMul, Program, RowReduce, Sk, Sq,
    Store, Tensor, b, hq, i, j, kv_tiles, map_body, q_tiles, walk,
)
from tilegen.passes.gpu.fold_log2 import Log2Scaled, fold_log2
from tilegen.passes.gpu.fuse_accumulation import AccumulateInto, fuse_accumulation
from tilegen.passes.gpu.heavy_last import HeavyLast, heavy_last
from tilegen.passes.gpu.mask_segments import MaskSegments, mask_segments
from tilegen.passes.gpu.transposed_tiles import TransposedTiles, transposed_tiles

TENSORS = (
    Tensor("Q", (Sq, Dqk), "fp16", "input"),
    Tensor("K", (Sk, Dqk), "fp16", "input"),
    Tensor("V", (Sk, Dv), "fp16", "input"),
    Tensor("O", (Sq, Dv), "fp16", "output"),
    Tensor("L", (Sq,), "fp32", "output"),
)


def _program(*kernels: Kernel, mask: MaskInfo = MaskInfo()) -> Program:
    return Program("t", TENSORS, kernels, mask, 1.0)


def _q(start=0) -> Access:
    return Access("Q", (i * Br, start), (Br, Dqk))


def _k() -> Access:
    return Access("K", (j * Bc, 0), (Bc, Dqk))


def _v() -> Access:
    return Access("V", (j * Bc, 0), (Bc, Dv))


def _strip(program: Program) -> Program:
    """``program`` without any annotation (what every pass here may change, and nothing else)."""

    def bare(st):
        return dataclasses.replace(st, ann=())

    kernels = tuple(dataclasses.replace(k, ann=(), body=map_body(k.body, bare)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


# --- transposed-tiles --------------------------------------------------------------------------------


def test_transposed_tiles_marks_the_br_bc_tiles_of_a_kv_tile_grid_only():
    tile_bufs = (Buffer("S", (Br, Bc), "fp32"), Buffer("P", (Br, Bc), "fp16"), Buffer("Qi", (Br, Dqk), "fp16"), Buffer("acc", (Bc, Dv), "fp32"))
    body = (Loop(i, 0, q_tiles(), (Load("Qi", _q()), Fill("S", 0.0), Elementwise("P", "cast", ("S",))), role="q_tile"),)
    kv_grid = Kernel("main", "main", tile_bufs, (Loop(j, 0, kv_tiles(), body, kind="parallel", role="kv_tile"),))
    q_grid = Kernel("fwd", "fwd", tile_bufs, (Loop(i, 0, q_tiles(), (Loop(j, 0, kv_tiles(), (), role="kv_tile"),), kind="parallel", role="q_tile"),))
    before = _program(q_grid, kv_grid)
    expected = _program(q_grid, kv_grid.annotate(TransposedTiles(("P", "S"))))
    assert transposed_tiles(before) == expected


# --- fold-log2 ---------------------------------------------------------------------------------------


def _softmax_kernel(m_op: str = "max") -> Kernel:
    bufs = (
        Buffer("Qi", (Br, Dqk), "fp16"), Buffer("Kj", (Bc, Dqk), "fp16"), Buffer("S", (Br, Bc), "fp32"), Buffer("m", (Br,), "fp32"),
        Buffer("Sm", (Br, Bc), "fp32"), Buffer("P", (Br, Bc), "fp32"), Buffer("l", (Br,), "fp32"), Buffer("lg", (Br,), "fp32"),
        Buffer("Lt", (Br,), "fp32"),
    )
    body = (
        Load("Qi", _q()),
        Load("Kj", _k()),
        MatMul("S", "Qi", "Kj", trans_b=True, alpha=0.125),
        RowReduce("m", "S", m_op),
        Elementwise("Sm", "sub", ("S", "m")),
        Elementwise("P", "exp", ("Sm",)),
        RowReduce("l", "P", "sum"),
        Elementwise("lg", "log", ("l",)),
        Elementwise("Lt", "add", ("m", "lg")),
        Store(Access("L", (i * Br,), (Br,)), "Lt"),
    )
    return Kernel("fwd", "fwd", bufs, (Loop(i, 0, q_tiles(), body, kind="parallel", role="q_tile"),))


def test_fold_log2_marks_what_feeds_exp_and_what_reads_it_back():
    before = _program(_softmax_kernel())
    body = before.kernels[0].body[0].body
    marks = {  # statement index: the annotation by hand (S, m, Sm feed exp; P and Lt read them back)
        2: Log2Scaled(True, ()),
        3: Log2Scaled(True, ("S",)),
        4: Log2Scaled(True, ("S", "m")),
        5: Log2Scaled(False, ("Sm",)),
        8: Log2Scaled(False, ("m",)),
    }
    new_body = tuple(st.annotate(marks[n]) if n in marks else st for n, st in enumerate(body))
    kernel = before.kernels[0]
    expected = _program(dataclasses.replace(kernel, body=(dataclasses.replace(kernel.body[0], body=new_body),)))
    assert fold_log2(before) == expected


def test_fold_log2_leaves_a_kernel_whose_exp_is_fed_by_a_sum():
    before = _program(_softmax_kernel("sum"))  # a row sum does not commute with the scale
    assert fold_log2(before) == before


# --- heavy-last --------------------------------------------------------------------------------------


def _grid(*axes: tuple, inner=()) -> tuple:
    body = inner
    for var, role in reversed(axes):
        body = (Loop(var, 0, 4, body, kind="parallel", role=role),)
    return body


def test_heavy_last_marks_a_causal_q_tile_axis_holding_a_kv_loop():
    kv_loop = (Loop(j, 0, i + 1, (), role="kv_tile"),)
    body = _grid((b, "batch"), (hq, "head"), (i, "q_tile"), inner=kv_loop)
    causal = MaskInfo(left=-1, right=0)
    before = _program(Kernel("fwd", "fwd", (), body), mask=causal)
    q = body[0].body[0].body[0]
    expected_body = (dataclasses.replace(body[0], body=(dataclasses.replace(body[0].body[0], body=(q.annotate(HeavyLast()),)),)),)
    assert heavy_last(before) == _program(Kernel("fwd", "fwd", (), expected_body), mask=causal)
    # not without a causal-like window, nor on a Q-tile axis without a K/V loop, nor on one that shares
    # launch axis 2 with others (a fourth grid axis)
    for mask in (MaskInfo(), MaskInfo(left=8, right=8)):
        plain = _program(Kernel("fwd", "fwd", (), body), mask=mask)
        assert heavy_last(plain) == plain
    empty = _program(Kernel("fwd", "fwd", (), _grid((b, "batch"), (i, "q_tile"))), mask=causal)
    assert heavy_last(empty) == empty
    merged = _program(Kernel("fwd", "fwd", (), _grid((i, "q_tile"), (b, "batch"), (hq, "head"), (j, "head"), inner=kv_loop)), mask=causal)
    assert heavy_last(merged) == merged


# --- fuse-accumulation -------------------------------------------------------------------------------


def _accumulating(inner: tuple) -> Program:
    bufs = (
        Buffer("a", (Br, Bc), "fp16"), Buffer("c", (Br, Bc), "fp16"), Buffer("Vj", (Bc, Dv), "fp16"), Buffer("T", (Br, Dv), "fp32"),
        Buffer("T2", (Br, Dv), "fp32"), Buffer("O", (Br, Dv), "fp32"), Buffer("X", (Br, Dv), "fp32"),
    )
    loop = Loop(j, 0, kv_tiles(), (Load("a", Access("Q", (i * Br, j * Bc), (Br, Bc))), Load("Vj", _v())) + inner, role="kv_tile")
    body = (Fill("O", 0.0), Fill("X", 0.0), loop, Store(Access("O", (i * Br, 0), (Br, Dv)), "O"))
    return _program(Kernel("fwd", "fwd", bufs, (Loop(i, 0, q_tiles(), body, kind="parallel", role="q_tile"),)))


def _annotated_at(program: Program, marks: dict[int, str]) -> Program:
    """``program`` with AccumulateInto(acc) on the statements of its K/V loop at the given indices."""
    kernel = program.kernels[0]
    grid = kernel.body[0]
    loop = grid.body[2]
    body = tuple(st.annotate(AccumulateInto(marks[n])) if n in marks else st for n, st in enumerate(loop.body))
    grid = dataclasses.replace(grid, body=grid.body[:2] + (dataclasses.replace(loop, body=body),) + grid.body[3:])
    return dataclasses.replace(program, kernels=(dataclasses.replace(kernel, body=(grid,)),))


def test_fuse_accumulation_marks_a_product_its_one_add_accumulates():
    one = _accumulating((MatMul("T", "a", "Vj"), Elementwise("O", "add", ("O", "T"))))
    assert fuse_accumulation(one) == _annotated_at(one, {2: "O"})
    # two products into one accumulator, the second scanned after the first is fused at its add
    two = _accumulating((MatMul("T", "a", "Vj"), MatMul("T2", "a", "Vj"), Elementwise("O", "add", ("O", "T")), Elementwise("O", "add", ("O", "T2"))))
    assert fuse_accumulation(two) == _annotated_at(two, {2: "O", 3: "O"})


@pytest.mark.parametrize("inner", [
    (MatMul("T", "a", "Vj", alpha=0.5), Elementwise("O", "add", ("O", "T"))),  # a scaled product
    (MatMul("T", "a", "Vj"), Elementwise("O", "add", ("O", "T")), Elementwise("X", "add", ("X", "T"))),  # read twice
    (MatMul("T", "a", "Vj"), Load("a", Access("Q", (i * Br, 0), (Br, Bc))), Elementwise("O", "add", ("O", "T"))),  # operand rewritten
    (MatMul("T", "a", "Vj"), Elementwise("O", "add", ("X", "T"))),  # the add is not an accumulation
], ids=["alpha", "read-twice", "operand-rewritten", "not-an-accumulation"])
def test_fuse_accumulation_leaves_what_it_cannot_fuse(inner):
    program = _accumulating(inner)
    assert fuse_accumulation(program) == program


# --- mask-segments -----------------------------------------------------------------------------------

MASK_CASES = {  # spec fields, (Br, Bc): tails in both dims, causal and banded windows, both alignments
    "causal": (dict(seq_q=72, seq_k=100, window=(-1, 0)), (16, 32)),
    "band-top-left": (dict(seq_q=96, seq_k=80, window=(64, 40), alignment="top_left"), (32, 16)),
    "none-tails": (dict(seq_q=50, seq_k=70), (32, 32)),
}


@pytest.mark.parametrize("case", list(MASK_CASES))
def test_mask_segments_marks_the_masking_loop_and_its_whole_tiles(case):
    fields, (br, bc) = MASK_CASES[case]
    spec = make_spec(**fields)
    before = build_forward(spec).bind({Br: br, Bc: bc})
    after = mask_segments(before)
    loops = [st for k in before.kernels for st, _ in walk(k.body) if isinstance(st, Loop) and any(isinstance(x, Mask) for x in st.body)]
    assert len(loops) == 1
    marked = [st for k in after.kernels for st, _ in walk(k.body) if isinstance(st, Loop) and st.get(MaskSegments) is not None]
    assert len(marked) == 1 and _strip(after) == before  # the one masking loop annotated, nothing else changed
    loop, seg = marked[0], marked[0].get(MaskSegments)
    mask = next(x for x in loop.body if isinstance(x, Mask))
    lo_e, hi_e = seg.whole(loop.start, loop.stop)
    env = {str(k): v for k, v in before.env}
    sq, sk = spec.seq_q, spec.seq_k
    left, right = spec.window
    off = sk - sq if spec.alignment == "bottom_right" else 0
    whole_seen = 0
    for qi in range(-(-sq // br)):
        at = {**env, "i": qi, "b": 0, "hq": 0}
        start, stop, lo, hi = (int(evaluate(sympy.sympify(e), at)) for e in (loop.start, loop.stop, lo_e, hi_e))
        assert start <= lo <= hi <= stop or (lo == hi == stop)
        for kj in range(start, stop):
            at_j = {**at, "j": kj}
            r0, c0 = int(evaluate(sympy.sympify(mask.row0), at_j)), int(evaluate(sympy.sympify(mask.col0), at_j))
            r, c = np.meshgrid(np.arange(r0, r0 + br), np.arange(c0, c0 + bc), indexing="ij")
            visible = (r < sq) & (c < sk)
            if left >= 0:
                visible &= c >= r + off - left
            if right >= 0:
                visible &= c <= r + off + right
            whole = bool(visible.all())  # DESIGN §3: key c visible to query r, inside both extents
            assert (lo <= kj < hi) == whole, (qi, kj, lo, hi)
            whole_seen += whole
    assert whole_seen  # the case has whole tiles to leave unmasked


def test_mask_segments_leaves_a_loop_under_a_mask_mod():
    from tilegen.core.spec import builtin_spec

    before = build_forward(builtin_spec("document")).bind({Br: 32, Bc: 32})  # a mask mod: the block classes decide
    assert mask_segments(before) == before


# --- the lowering and the cost model read the annotations -------------------------------------------


def _lines(program: Program, name: str) -> list[tuple[str, dict]]:
    """The Triton lowering's lines of kernel ``name``: (kind, fields)."""
    from tilegen.backends.triton import KernelLowering

    return [(line["kind"], line["f"]) for line in KernelLowering(program, program.kernel(name)).lower()["lines"]]


def _without(program: Program, kind: type) -> Program:
    def drop(node):
        return node.unannotate(kind)

    return dataclasses.replace(program, kernels=tuple(drop(dataclasses.replace(k, body=map_body(k.body, drop))) for k in program.kernels))


def test_the_triton_lowering_reads_the_annotations():
    from tilegen.backends import compile_forward

    program = compile_forward(make_spec(seq_q=72, seq_k=100, window=(-1, 0)), target="h200", tile_sizes=(16, 32))

    def loops(p):
        return [f["note"] for kind, f in _lines(p, "fwd") if kind == "for"]

    def fused_dots(p):
        return [f["dst"] for kind, f in _lines(p, "fwd") if kind == "dot" and f["acc"] is not None]

    def exps(p):
        return sorted({f["op"] for kind, f in _lines(p, "fwd") if kind == "elementwise" and f["op"].startswith("exp")})

    assert len(loops(program)) == 3 and any("tiles the mask leaves whole" in n for n in loops(program))
    assert len(loops(_without(program, MaskSegments))) == 1
    assert fused_dots(program) and not fused_dots(_without(program, AccumulateInto))
    assert exps(program) == ["exp2"] and exps(_without(program, Log2Scaled)) == ["exp"]


def test_the_gpu_model_counts_no_registers_for_a_fused_product():
    from tilegen.backends import compile_forward
    from tilegen.core.targets import load_target
    from tilegen.models.cost import predict_gpu

    target = load_target("h200")
    program = compile_forward(make_spec(seq_q=512, seq_k=512, head_dim_qk=128, head_dim_v=128), target="h200", tile_sizes=(128, 64))
    fused = [st.dst for st, _ in walk(program.kernel("fwd").body) if isinstance(st, MatMul) and st.get(AccumulateInto) is not None]
    assert fused  # P·V is accumulated into O
    with_fusion = predict_gpu(program, target).kernels[0].registers
    without = predict_gpu(_without(program, AccumulateInto), target).kernels[0].registers
    buf = program.kernel("fwd").buffer(fused[0])
    warps = predict_gpu(program, target).kernels[0].warps
    held = 128 * 128 * 4 / 4 / (32 * warps)  # T [Br, Dv] fp32 in 4-byte registers over the program's threads
    assert buf.shape == (Br, Dv) and with_fusion < without <= with_fusion + held


# --- select-row and launch-knobs: the schedule recorded in the program ---------------------------------


def test_the_gpu_list_as_inspect_passes_prints_it():
    from tilegen.backends import pass_lists

    names = {which: [p.name for p in passes] for which, passes in pass_lists(make_spec(window=(-1, 0)), "h200", dq_strategy="separate").items()}
    emit = ["direct-dq", "transposed-tiles", "fold-log2", "heavy-last", "fuse-accumulation", "mask-segments", "launch-knobs"]
    assert names["fwd"] == ["select-row", "build", "place", "pipelined-loads", "choose-tiles"] + emit
    assert names["bwd"][0] == "select-row" and names["bwd"][-len(emit) - 3:] == ["place", "pipelined-loads", "choose-tiles"] + emit


def test_select_row_and_launch_knobs_record_the_schedule_in_the_program(tmp_path):
    """A planted row whose tiles overflow shared memory, ahead of h200's own: the program records the
    planted row as skipped (with the level), the next row that applies as used, and each kernel's
    launch knobs as that row's (or [triton.default]'s) entries in the target file, read here with
    tomllib."""
    import tomllib
    from pathlib import Path

    from tilegen.backends import backend_for
    from tilegen.backends.compiler import compile_program
    from tilegen.passes.gpu.rows import LaunchKnobs, recorded_row
    from tilegen.core.targets import load_target
    from tilegen.passes.driver import Options, PassLog

    base = Path(load_target("h200").path).read_text()
    planted = base.replace(
        '[[triton.schedule]]\nprogram = "bwd-atomic"',
        '[[triton.schedule]]\nprogram = "bwd-atomic"\nhead_dim = 128\nBr = 256\nBc = 256\n'
        'main = { num_warps = 8, num_stages = 4 }\nsource = "planted: too large"\n\n'
        '[[triton.schedule]]\nprogram = "bwd-atomic"',
        1,
    )
    path = tmp_path / "h200-planted.toml"
    path.write_text(planted)
    data = tomllib.loads(planted)["triton"]
    spec = make_spec(seq_q=4096, seq_k=4096, head_dim_qk=128, head_dim_v=128, dtype="bf16")
    log = PassLog()
    program = compile_program(spec, "bwd", backend_for(str(path)), str(path), Options(dq_strategy="atomic", schedule_rows=True, dq_tiles=None), log)

    def applies(row):  # the row's conditions against the spec, by hand
        return (row["program"] == "bwd-atomic" and row["head_dim"] == 128 and row.get("causal", False) is False
                and row.get("dtype", "bf16") == "bf16" and row.get("group", 1) == 1 and row.get("min_seq_k", 0) <= 4096)

    candidates = [n for n, row in enumerate(data["schedule"]) if applies(row)]
    planted_at, used_at = candidates[0], candidates[1]
    assert data["schedule"][planted_at]["source"] == "planted: too large"
    skipped = program.attr("rows_skipped")  # (row index, reason) pairs
    assert [index for index, _ in skipped] == [planted_at] and "SMEM" in skipped[0][1]
    assert program.attr("schedule_row") == used_at  # the row's index in the target file
    row = recorded_row(program, load_target(str(path)))
    assert row.index == used_at and row.source == data["schedule"][used_at]["source"]
    assert program.attr("tiles_source").startswith(f"the target's triton.schedule[{used_at}]")
    used = data["schedule"][used_at]
    env = {str(k): v for k, v in program.env}
    assert (env["Br"], env["Bc"]) == (used["Br"], used["Bc"])
    for kernel in program.kernels:
        knobs = kernel.get(LaunchKnobs)
        own = used.get(kernel.phase)
        expected = own if own is not None else data["default"]
        assert (knobs.num_warps, knobs.num_stages) == (expected["num_warps"], expected["num_stages"]), kernel.name
        assert knobs.source == (f"the target's {row.describe()}" if own is not None else "the target's triton.default")
        staged = {b.stages for b in kernel.buffers if b.stages > 1}
        assert staged <= {expected["num_stages"]}  # the placement counted the stages the kernel launches with
    assert [name for name, _ in log.steps][-1] == "launch-knobs"


def test_a_pass_declared_to_annotate_only_may_change_nothing_else():
    """The driver does not run the whole verifier again after an annotating pass, so it refuses one that
    changed the program beyond its annotations and attrs (a planted pass that also drops a statement),
    and still runs the checks of the annotations it added (a planted one on a node it does not apply to)."""
    from tilegen.core.errors import VerifyError
    from tilegen.passes.driver import Context, Pass, run_passes

    before = _program(_softmax_kernel())
    ctx = Context(make_spec(), None, "fwd")
    assert run_passes(before, (Pass("fold-log2", lambda p, c: fold_log2(p), "", annotates=True),), ctx) == fold_log2(before)

    def sloppy(p, c):
        p = fold_log2(p)
        k = p.kernels[0]
        grid = dataclasses.replace(k.body[0], body=k.body[0].body[:-1])  # the store of L goes too
        return dataclasses.replace(p, kernels=(dataclasses.replace(k, body=(grid,)),))

    with pytest.raises(VerifyError, match="verify after sloppy: it changed the program beyond its annotations"):
        run_passes(before, (Pass("sloppy", sloppy, "", annotates=True),), ctx)

    def misplaced(p, c):  # HeavyLast annotates a Loop: put on the kernel, bypassing Annotated.annotate's own check
        k = p.kernels[0]
        return dataclasses.replace(p, kernels=(dataclasses.replace(k, ann=(HeavyLast(),)),))

    with pytest.raises(VerifyError, match="the kernel: @heavy_last annotates Loop, not Kernel"):
        run_passes(before, (Pass("misplaced", misplaced, "", annotates=True),), ctx)


def test_print_after_all_shows_the_emitted_program_on_a_gpu(capsys):
    """``inspect --print-after-all`` on a GPU target walks the list generate runs (select-row's choice):
    the last step is launch-knobs, whose program records the row the manifest names."""
    from tilegen.backends import triton as tb
    from tilegen.cli import main
    from tilegen.core.spec import builtin_spec

    assert main(["inspect", "--spec", "llama2-7b", "--target", "h200", "--print-after-all", "--program", "fwd"]) == 0
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("# --- fwd:")]
    assert steps[-1] == "# --- fwd: after launch-knobs"
    row = tb.generate(builtin_spec("llama2-7b"), "h200").manifest["schedule"]["forward"]["tiles_source"]
    assert row.startswith("the target's triton.schedule[") and f"tiles_source={row!r}" in out


# --- pipelined-loads: the footprints read it through Annotation.pipelined_loads ---------------------


def test_pipelined_loads_keeps_every_staged_tile_live_over_its_loop():
    """A loop loads K then V (each 2 stages on SMEM), each used up before the next load: without the
    annotation the two are never live together (SMEM peak = the larger tile), with @pipelined_loads
    (Triton's pipeliner prefetches both) they are (the sum). The bytes of each tile come from
    buffer_bytes; which tiles overlap is counted here by hand. The tile search's footprint view ignores
    the rendering annotations and not this one."""
    from tilegen.core.targets import load_target
    from tilegen.models.footprint import buffer_bytes, footprint_view, kernel_footprints
    from tilegen.passes.gpu.pipelined_loads import PipelinedLoads

    target = load_target("h200")
    smem = next(lvl for lvl in target.levels if lvl.name == "SMEM")
    bufs = (
        Buffer("Kj", (Bc, Dqk), "fp16", "SMEM", stages=2), Buffer("Vj", (Bc, Dv), "fp16", "SMEM", stages=2),
        Buffer("Kf", (Bc, Dqk), "fp32", "RF"), Buffer("Vf", (Bc, Dv), "fp32", "RF"),
    )
    loop = Loop(j, 0, kv_tiles(), (Load("Kj", _k()), Elementwise("Kf", "cast", ("Kj",)), Load("Vj", _v()), Elementwise("Vf", "cast", ("Vj",))), role="kv_tile")
    kernel = Kernel("fwd", "fwd", bufs, (Loop(i, 0, q_tiles(), (loop,), kind="parallel", role="q_tile"),))
    env = {"Br": 64, "Bc": 64, "Dqk": 64, "Dv": 128, "Sq": 256, "Sk": 256}
    k_bytes, v_bytes = (int(buffer_bytes(b, smem, env)) for b in bufs[:2])
    assert k_bytes != v_bytes

    def smem_peak(kern):
        return max(int(fp.value(env)) for fp in kernel_footprints(kern, target) if fp.level.name == "SMEM")

    assert smem_peak(kernel) == max(k_bytes, v_bytes)
    assert smem_peak(kernel.annotate(PipelinedLoads())) == k_bytes + v_bytes

    program = _program(kernel)
    rendered = _program(kernel.annotate(TransposedTiles(("Kf",))))  # a rendering annotation: no footprint changes
    assert footprint_view(rendered) == footprint_view(program)
    assert footprint_view(_program(kernel.annotate(PipelinedLoads()))) != footprint_view(program)
