"""The typed ops of the Ascend C lowering (tilegen.backends.ascendc.ops): the software pipeline's
expansion against orders written out by hand, the one expansion the template and the emitted-code model
both use, each op's cycle cost as the one the model uses, the per-instruction figures shared with the
timeline, and one template macro per op class."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tilegen.backends import ascendc
from tilegen.backends.ascendc import cost
from tilegen.backends.ascendc import ops as O
from tilegen.backends.ascendc.timeline import Costs, Instr
from tilegen.core.spec import builtin_spec
from tilegen.core.targets import load_target

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "ascendc" / "kernels.asc.jinja"


def _fill(name: str) -> O.Fill:
    """A stand-in op, told apart by its buffer's name."""
    return O.Fill(buf=name, ctype="float", value="0.0f", count=64)


def _recv(name: str) -> O.C2VRecv:
    return O.C2VRecv(ctype="float", buf=name, gm="g_ws", pitch="64LL", rows=8, cols=64, cpad=64, vector=False, ready="0",
                     free="2", slots=3, counter=f"r_{name}", address="0", wait=True, free_event="")


def _ploop(stage0, stage1, lookahead: int, hoisted=(), head: int = 0) -> O.PipelinedLoop:
    return O.PipelinedLoop(lookahead=lookahead, head=head, hoisted=tuple(hoisted), stages=(1, 2), var="j", start="0LL", stop="n",
                           note="", carry=(), skip="", stage0=tuple(stage0), stage1=tuple(stage1))


def _names(order):
    return [(op.buf, k) for op, k in order]


# the order each unit issues a two-stage loop in, written out by hand: stage 1 (ops A, B) of iteration k + d
# before stage 2 (op C) of iteration k; the first d iterations' stage 1 first (the prologue); the last d
# steps without a stage 1 (the epilogue)
HAND = {
    (1, 3): [("A", 0), ("B", 0),                                  # prologue
             ("A", 1), ("B", 1), ("C", 0),                        # steady
             ("A", 2), ("B", 2), ("C", 1),
             ("C", 2)],                                           # epilogue
    (2, 3): [("A", 0), ("B", 0), ("A", 1), ("B", 1),              # prologue
             ("A", 2), ("B", 2), ("C", 0),                        # steady
             ("C", 1), ("C", 2)],                                 # epilogue
    (2, 4): [("A", 0), ("B", 0), ("A", 1), ("B", 1),
             ("A", 2), ("B", 2), ("C", 0),
             ("A", 3), ("B", 3), ("C", 1),
             ("C", 2), ("C", 3)],
    (2, 1): [("A", 0), ("B", 0), ("C", 0)],                        # fewer iterations than the lookahead
}


@pytest.mark.parametrize("lookahead, n", sorted(HAND))
def test_pipeline_expansion_is_the_order_written_by_hand(lookahead, n):
    loop = _ploop([_fill("A"), _fill("B")], [_fill("C")], lookahead)
    assert _names(loop.expansion.order(n)) == HAND[lookahead, n]
    # the emitted-code model unrolls the loop in that order, each op with its own iteration's cut flag
    pattern = [k % 2 == 1 for k in range(n)]
    assert [(op.buf, cut) for op, cut in cost._unrolled([loop], pattern)] == [(b, pattern[k]) for b, k in HAND[lookahead, n]]


def test_hoisted_receive_goes_between_the_first_receive_and_the_rest():
    """@hoist at lookahead 2: the later stage's receive H of iteration k right after the earlier
    stage's first receive R of iteration k + 2, before the rest W of that stage (written out by hand)."""
    loop = _ploop([_recv("R"), _fill("W")], [_fill("C")], 2, hoisted=[_recv("H")], head=1)
    assert _names(loop.expansion.order(3)) == [
        ("R", 0), ("W", 0), ("R", 1), ("W", 1),  # prologue
        ("R", 2), ("H", 0), ("W", 2), ("C", 0),  # steady
        ("H", 1), ("C", 1), ("H", 2), ("C", 2),  # epilogue
    ]
    runs = loop.expansion
    assert [r.ahead for r in runs.steady] == [2, 0, 2, 0] and [r.ahead for r in runs.epilogue] == [0, 0]


def _kernels_module():
    """kernels.asc.jinja as a module (its macros), with the few globals its top level reads."""
    env = ascendc._env()
    plan = {"label": "fwd", "tiles": {"Br": 1, "Bc": 1}, "launches": [], "tensors": [], "handoffs": []}
    ctx = {"plan": plan, "spec": {"name": "x", "dtype": "fp16"}, "target": {"name": "t", "arch": "a"}, "window": 0, "ctype": "half"}
    return env.get_template("kernels.asc.jinja").make_module(ctx)


def test_template_renders_the_expansion():
    """The C++ of a pipelined loop (lookahead 2): the prologue loop runs stage 1 alone, the steady loop
    stage 1 of iteration j + 2 (guarded by j + 2 < n, so the last two steps are the epilogue) before
    stage 2 of iteration j."""
    text = str(_kernels_module().ops([_ploop([_fill("A")], [_fill("C")], 2)], "vector"))
    prologue, steady = text.split("// prologue", 1)[1].split("for (int64_t j_ = j_start; j_ < n; ++j_) {", 1)
    assert "Duplicate(A," in prologue and "Duplicate(C," not in prologue
    guard = steady.index("if (j_ + 2 < n) {")
    assert guard < steady.index("const int64_t j = j_ + 2;") < steady.index("Duplicate(A,") < steady.index("Duplicate(C,")
    assert steady.index("Duplicate(A,") < steady.index("const int64_t j = j_;") < steady.index("Duplicate(C,")


@pytest.mark.parametrize("classes, args, table", [(O.OP_CLASSES, "op, unit", "OPS"), (O.LINE_CLASSES, "t, op", "LINES")], ids=["ops", "mod lines"])
def test_every_op_class_has_its_macro(classes, args, table):
    """One macro per op class (and per line class of a mod op), named like it, in the dispatch table
    the template reads; the template decides nothing by an op's kind."""
    text = TEMPLATE.read_text()
    macros = set(re.findall(r"\{% macro (\w+)\(" + re.escape(args) + r"\) %\}", text)) - {"modline"}  # modline dispatches
    start = text.index("{% set " + table + " = {")
    entries = dict(re.findall(r'"(\w+)": (\w+)', text[start:text.index("} %}", start)]))
    names = {cls.__name__ for cls in classes}
    assert len(classes) > (20 if table == "OPS" else 8) and names == macros, sorted(names ^ macros)
    assert entries == {n: n for n in names}, sorted(set(entries) ^ names)
    assert all(cls.macro == cls.__name__ for cls in classes)
    assert not re.search(r"\.(kind|i) ==", text.replace('t.kind == "input"', ""))


def _tiny_model() -> float:
    return cost.predict_emitted(builtin_spec("tiny"), "ascend910b2", "fwd").time_s


def test_the_model_prices_each_op_by_its_cycles(monkeypatch):
    """The emitted-code model takes a helper's cycles from its op class: 10^4 more cycles per Reduce, per
    UbStore or per Matmul k-step make the forward slower."""
    base = _tiny_model()
    for cls, name in ((O.Reduce, "cycles"), (O.UbStore, "cycles")):
        with monkeypatch.context() as m:
            original = getattr(cls, name)
            m.setattr(cls, name, lambda self, *a, _f=original, **k: _f(self, *a, **k) + 1e4)
            assert _tiny_model() > base, cls.__name__
    with monkeypatch.context() as m:
        original = O.Matmul.steps

        def slower(self, *a, **k):  # 10^4 more cycles on M per k-step
            issue, steps = original(self, *a, **k)
            return issue, [(mte1, mmad + 1e4) for mte1, mmad in steps]

        m.setattr(O.Matmul, "steps", slower)
        assert _tiny_model() > base
    assert _tiny_model() == base


def test_model_and_timeline_share_the_per_instruction_figures(monkeypatch):
    """A GM copy, a vector instruction, a Fixpipe, a LoadData and an Mmad cost what the target's
    [timeline] table says, by one method of Costs each: changing one changes both the timeline's price of
    a traced instruction and the model's price of the op that issues it."""
    costs = Costs(load_target("ascend910b2").timeline)
    copy = Instr("MTE2", "DataCopyPad", 8192, 0, 0)
    vec = Instr("V", "Add", 32, 0, 0)
    load = O.UbLoad(ctype="float", buf="x", gm="g_x", offset="0", pitch="64LL", valid="8", rows=8, cols=256, cpad=256, vector=False,
                    ids="", l2=False, pad=False, pad_value="0.0f", zero_unless="", wait_done=-1)
    add = O.Binary(dst="x", count=8 * 256, rows=8, fn="Add", a="y", b="z")
    # by hand from targets/ascend910b2.toml: HBM latency 350 + 8192 B / 32 B a cycle (8 rows of 1024 B: whole
    # bursts; the AI Core's read port, 196 B a cycle, holds the two AIVs' 8192 B each for less); startup 22 + 32 repeats
    assert costs.duration(copy) == 350 + 8192 / 32 and costs.duration(vec) == 22 + 32 * 1
    assert load.cycles(costs) == 2 * 4 + 350 + 8192 / 32 and add.cycles(costs) == 22 + 32 * 1
    before = (costs.duration(copy), costs.duration(vec), load.cycles(costs), add.cycles(costs))
    monkeypatch.setattr(Costs, "copy_phases", lambda self, *a, **k: (0.0, 1e5))  # (latency, data phase)
    monkeypatch.setattr(Costs, "vector_cycles", lambda self, *a: 2e5)
    after = (costs.duration(copy), costs.duration(vec), load.cycles(costs), add.cycles(costs))
    assert after == (1e5, 2e5, 2 * 4 + 1e5, 2e5) and after != before


def test_the_mods_reads_of_captured_tensors_are_priced_by_their_form():
    """A UB table (its one copy from HBM and the int32 Cast), a span (a copy from L2 between two waits,
    the Cast), a Gather from UB and the scalar loop from GM cost what the [timeline] figures give, by
    hand from targets/ascend910b2.toml: flag 4, HBM 350 and L2 150 cycles of latency, MTE2 32 B a cycle
    from HBM and 110 from L2, vector startup 22 + 1 a repeat, UB scalar read 20 and write 4."""
    costs = Costs(load_target("ascend910b2").timeline)
    table = O.ModTable(view="mt_ids", gm="g_ids", n=1000, ctype="int32_t")
    span = O.LineVec(op="span", dst="sm_r0", x="len", mode="int32", gm="g_ids[0]", cpad=128)
    gather_ub = O.LineVec(op="gatherub", dst="sm_r1", a="sm_r2", gm="mt_ids", cpad=128)
    gather_gm = O.LineVec(op="gather", dst="sm_r1", a="sm_r2", gm="g_ids", cpad=128)
    assert table.cycles(costs) == 2 * 4 + 350 + 4000 / 32 + 22 + 16
    assert span.cycles(costs) == 2 * 4 + 150 + 512 / 110 + 22 + 2
    assert gather_ub.cycles(costs) == 22 + 2
    assert gather_gm.cycles(costs) == 2 * 4 + 128 * (20 + 150 / 8 + 4)


def _ids_spec(n: int):
    from helpers import make_spec

    from tilegen.core import mods as M

    decls = M.parse_param_decls({"ids": {"shape": [n], "dtype": "int32"}})
    return make_spec(name="ids", seq_q=96, seq_k=96, mask_mod="ids[kv_idx] == ids[q_idx]", params=decls)


def test_a_small_captured_table_is_copied_to_ub_once_and_counted_in_the_plan(monkeypatch):
    """A captured tensor of known size read along the row gets a UB table: a view of the AIV pool (its
    bytes inside the pool the kernel declares), one ModTable load before the programs (priced once per
    kernel by the model), and Gather from it; one over MOD_TABLE_BYTES is read through its spans."""
    from tilegen.backends.ascendc import mods as AM

    spec = _ids_spec(96)
    kernels = [k for p in ascendc.plan_programs(spec)[1] for k in p.kernels if any(isinstance(op, (O.Mod, O.Classify)) for op in O.walk(k.aiv.ops))]
    assert len(kernels) >= 3  # the classify kernel, the forward, the backward
    for k in kernels:
        (view,) = [v for v in k.aiv.views if v.name == "mt_ids"]
        pool = {p: b for p, _, b in k.aiv.pools}[view.pool]
        assert view.elems == 96 and view.offsets[0] + 96 * 4 <= pool
        assert [type(op).__name__ for op in k.aiv.prologue] == ["ModTable"] and k.aiv.prologue[0].n == 96
    text = ascendc.generate(spec, "ascend910b2").files["fwd_kernels.asc"]
    assert "Gather(" in text and "tilegen::ModLoadFloats(mt_ids, g_ids, 96LL)" in text and "ModGather(" not in text
    scored = dataclasses.replace(spec, score_mod="score - 0.5 * ids[kv_idx]", mask_mod="")  # no classify kernel to price
    base = cost.predict_emitted(scored, "ascend910b2", "fwd").time_s
    monkeypatch.setattr(O.ModTable, "cycles", lambda self, *a, **k: 1e7)
    assert cost.predict_emitted(scored, "ascend910b2", "fwd").time_s > base
    big = AM.MOD_TABLE_BYTES // 4 + 8
    text = ascendc.generate(_ids_spec(big), "ascend910b2").files["fwd_kernels.asc"]
    assert "mt_ids" not in text and "tilegen::ModLoadFloats(sm_" in text and "Gather(" in text
