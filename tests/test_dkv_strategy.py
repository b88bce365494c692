"""The dK/dV strategies of the fused backward (on-chip accumulators, atomic adds into fp32 workspaces)
and the hand-off passes of GM hand-off targets (unit phases, one ready flag per direction): values
against the float64 reference in the interpreter, the statement order and the flags of the emitted
code, the tile sizes they allow, and the one-line refusals of bad values."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import assert_backward_ok, inputs, make_spec
from tilegen.backends.interp import interpret
from tilegen.core.errors import SpecError
from tilegen.core.ir import Load, Loop, MatMul, Store
from tilegen.passes.ascend.one_handoff_per_direction import signals
from tilegen.passes.ascend.own_tile_epilogue import SignalDone, WaitDone
from tilegen.passes.ascend.write_first_plain import FirstPlain, ZeroUnless
from tilegen.core.spec import builtin_spec
from tilegen.backends import compile_backward
from tilegen.passes.driver import PassLog

CASES = {
    "gqa-window": dict(heads_q=4, heads_kv=2, seq_q=130, seq_k=190, head_dim_qk=64, head_dim_v=64, window=(40, 7), dtype="fp16"),
    "mqa-causal-top-left": dict(heads_q=3, heads_kv=1, seq_q=96, seq_k=160, head_dim_qk=64, head_dim_v=32, window=(-1, 0),
                                alignment="top_left", dtype="bf16"),
    "empty-rows": dict(seq_q=90, seq_k=40, head_dim_qk=32, head_dim_v=32, window=(-1, 0), dtype="fp16"),
    # K/V tiles no query sees: their dK, dV are zeros that nothing stored (@zero_unless on the 910B)
    "empty-kv-tiles": dict(seq_q=40, seq_k=300, head_dim_qk=32, head_dim_v=32, window=(8, 0), dtype="fp16"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dq_strategy", ["atomic", "separate"])
@pytest.mark.parametrize("target", [None, "ascend910b2"])
def test_atomic_dkv_matches_the_float64_reference(case, dq_strategy, target):
    """The atomic dK/dV program (with each dQ strategy, bound with default tiles or placed and tiled for
    the 910B) in the interpreter, against the dense float64 reference (DESIGN §3's rule)."""
    spec = make_spec(**CASES[case])
    program = compile_backward(spec, dq_strategy=dq_strategy, target=target, dkv_strategy="atomic")
    assert program.attr("dkv_strategy") == "atomic"
    names = {t.name for t in program.tensors}
    assert {"dK_ws", "dV_ws"} <= names
    data = inputs(spec, seed=3)
    from tilegen.core import reference

    kw = dict(scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)
    o, lse = reference.forward(data["Q"], data["K"], data["V"], **kw)
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": o.astype(data["Q"].dtype), "L": lse.astype("float32"), "dO": data["dO"]}
    grads, _ = interpret(program, feeds)
    assert_backward_ok(spec, (grads["dQ"], grads["dK"], grads["dV"]), data, lse=lse)


def test_the_default_strategy_follows_the_target():
    """auto: on-chip without a target and on a GPU; on the 910B the faster predicted schedule: atomic for
    llama2-7b (its tiles grow from 32 x 64), on-chip for tiny (70 tokens: no larger tile is useful, and
    the atomic form's extra kernels cost more than they save); a tile size that fits only the
    atomic form takes it."""
    tiny, llama = builtin_spec("tiny-gqa"), builtin_spec("llama2-7b")
    assert compile_backward(tiny).attr("dkv_strategy") == "on-chip"
    assert compile_backward(tiny, target="h200").attr("dkv_strategy") == "on-chip"
    assert compile_backward(tiny, target="ascend910b2").attr("dkv_strategy") == "on-chip"
    assert compile_backward(llama, target="ascend910b2").attr("dkv_strategy") == "atomic"
    assert compile_backward(llama, target="ascend910b2", dkv_strategy="on-chip").attr("dkv_strategy") == "on-chip"
    forced = compile_backward(llama, target="ascend910b2", tile_sizes=(128, 128))
    assert forced.attr("dkv_strategy") == "atomic"


def test_bad_strategies_are_refused_in_one_line():
    spec = builtin_spec("tiny")
    with pytest.raises(SpecError, match=r"dkv_strategy = 'sum'.*auto, on-chip, atomic") as exc:
        compile_backward(spec, dkv_strategy="sum")
    assert "\n" not in str(exc.value)
    from tilegen.backends import generate

    with pytest.raises(SpecError, match="dkv_strategy = 'atomic'.*GPU target"):
        generate(spec, "h200", dkv_strategy="atomic")
    from tilegen.harness.report import inspect_report

    with pytest.raises(SpecError, match="dkv_strategy = 'atomic'.*GPU target"):  # inspect shows what generate emits
        inspect_report(spec, "h200", dkv_strategy="atomic")
    r = subprocess.run([sys.executable, "-m", "tilegen", "generate", "--spec", "tiny", "-o", "/nonexistent-out", "--dkv-strategy", "sum"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'sum'" in r.stderr and "Traceback" not in r.stderr


def _innermost(body):
    loops = [s for s in body if isinstance(s, Loop)]
    return _innermost(loops[0].body) if loops else body


@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_s_and_dp_in_one_cube_step_one_flag_per_direction(dkv_strategy):
    """On the 910B the backward's tile pair runs cube (S, dP) → vector (P, dS) → cube (dV, dK, dQ):
    both matmuls reading no vector result come before every hand-off back, and the emitted AIC loop
    sets the cube-to-vector ready flag once and waits for the vector's once per tile pair (before:
    twice each, S → P → dV, dP → dS → dK, dQ)."""
    from tilegen.backends import ascendc

    spec = builtin_spec("llama2-7b")
    program = compile_backward(spec, target="ascend910b2", dkv_strategy=dkv_strategy)
    body = _innermost(program.kernel("main").body)
    kinds = [(type(s).__name__, getattr(s, "dst", None)) for s in body]
    first_back = next(n for n, s in enumerate(body) if isinstance(s, Load) and s.src.tensor.startswith("ws_") and s.dst.endswith("_cube"))
    before = {s.dst for s in body[:first_back] if isinstance(s, MatMul)}
    assert before == {"S", "dP"}, kinds
    sends = [s for s in body if isinstance(s, Store) and s.dst.tensor.startswith("ws_")]
    assert sum(signals(s) for s in sends) == 2 and len(sends) == 4  # one flag per direction
    text = ascendc.generate(spec, "ascend910b2", dkv_strategy=dkv_strategy).files["bwd_kernels.asc"]
    main = text[text.index("bwd_main\n"):]  # the main kernel's block in the program's one launch

    def q_loop(side: str) -> str:  # the loop over visible Q tiles, or the stream of tile pairs (@stream)
        stream = "@stream" in side
        start = side.index("@stream") if stream else side.index("visible Q tiles")
        line = side[side.rindex("\n", 0, start) + 1 : start]
        indent = len(line) - len(line.lstrip()) - (0 if stream else 4)  # a stream block closes at its own brace's column
        end = side.index("\n" + " " * indent + "}\n", start)
        return side[start : side.index("its closing", start) if stream else end]  # a stream's pairs, not its closing

    def ready_waits(text: str) -> int:  # cross-core waits on a ready flag (not on a reused slot's free flag)
        return sum(1 for line in text.splitlines() if "CrossCoreWaitFlag(" in line and "slot reused" not in line)

    # per tile pair (the loop may be software-pipelined, or a stream: its prologue and body each issue a
    # pair's earlier stage), one ready flag set per S + dP send, one wait per Pc + dSc receive; likewise
    # on the AIVs
    aic = q_loop(main[main.index("ASCEND_IS_AIC"):main.index("ASCEND_IS_AIV")])
    s_sends = aic.count("g_ws_S[")  # the AIC only sends S and dP (FixpipeRows, or MatmulStore for a chunked product)
    assert s_sends >= 1 and aic.count("g_ws_dP[") == s_sends
    assert sum("CrossCoreSetFlag<2, PIPE_FIX>(" in ln and "signal_done" not in ln for ln in aic.splitlines()) == s_sends
    assert ready_waits(aic) == aic.count("(Pc_cube, g_ws_Pc[") == aic.count("(dSc_cube, g_ws_dSc[") >= 1
    aiv = q_loop(main[main.index("ASCEND_IS_AIV"):])
    assert ready_waits(aiv) == aiv.count("g_ws_S[") == aiv.count("g_ws_dP[") >= 1
    assert aiv.count("CrossCoreSetFlag<2, PIPE_MTE3>(") == aiv.count("g_ws_S[")


def test_atomic_dkv_lets_the_tiles_grow():
    """llama2-7b on the 910B: with dK, dV held in L0C across the Q loop the tiles stop at 32 x 64; with
    the atomic strategy L0C holds only one cube step's tiles and a larger tile fits every level."""
    spec = builtin_spec("llama2-7b")
    logs = {}
    for strategy in ("on-chip", "atomic"):
        logs[strategy] = PassLog()
        compile_backward(spec, target="ascend910b2", dkv_strategy=strategy, log=logs[strategy])
    on_chip, atomic = logs["on-chip"].schedule, logs["atomic"].schedule
    assert on_chip.chosen == (32, 64)
    br, bc = atomic.chosen
    assert br * bc >= 128 * 128
    cand = atomic.chosen_candidate()
    assert cand.feasible and dict(cand.peaks)["L0C"] <= dict(atomic.capacities)["L0C"]
    # 64 x 128 overflows L0C under the on-chip strategy (the accumulators), not under the atomic one
    assert any(c.Br == 64 and c.Bc == 128 and not c.feasible for c in on_chip.candidates)
    assert any(c.Br == 64 and c.Bc == 128 and c.feasible for c in atomic.candidates)



def test_write_first_plain_is_an_ir_knob():
    """On the 910B the atomic backward's main program owns its dK_ws, dV_ws tile: its first store writes
    it (@first_plain), pre_kv's zeroing goes, post_kv becomes main's epilogue after the cube's done
    flag, and its loads read zeros where the Q-tile loop ran no iteration (@zero_unless, an
    expression of the grid). The verifier refuses the knob
    on a store whose tile other programs share (dQ_ws, indexed by the Q tile of a serial loop); without
    a target (no lowering) pre_kv stays."""
    import dataclasses

    from tilegen.core.errors import VerifyError
    from tilegen.core.ir import map_body, walk
    from tilegen.passes.verify import verify

    spec = builtin_spec("llama2-7b")
    program = compile_backward(spec, target="ascend910b2", dkv_strategy="atomic")
    assert [k.name for k in program.kernels] == ["pre", "main", "post"]  # post_kv: main's epilogue (own-tile-epilogue)
    plain = sorted(s.dst.tensor for s, _ in walk(program.kernel("main").body) if isinstance(s, Store) and s.has(FirstPlain))
    assert plain == ["dK_ws", "dV_ws"]
    assert all(s.has(SignalDone) for s, _ in walk(program.kernel("main").body) if isinstance(s, Store) and s.has(FirstPlain))
    zeros = [s for s, _ in walk(program.kernel("main").body) if isinstance(s, Load) and s.src.tensor in ("dK_ws", "dV_ws")]
    assert [s.src.tensor for s in zeros] == ["dK_ws", "dV_ws"] and all(s.has(ZeroUnless) for s in zeros)
    assert [s.has(WaitDone) for s in zeros] == [True, False]  # one wait for the cube's one done flag per program
    assert {str(x) for x in zeros[0].get(ZeroUnless).trips.free_symbols} <= {"j", "G", "Sq", "Sk", "Br", "Bc"}
    assert "pre_kv" in [k.name for k in compile_backward(spec, dkv_strategy="atomic").kernels]
    main = program.kernel("main")
    dq = next(s for s, _ in walk(main.body) if isinstance(s, Store) and s.dst.tensor == "dQ_ws")
    bad = dataclasses.replace(program, kernels=tuple(
        dataclasses.replace(k, body=map_body(k.body, lambda s: s.annotate(FirstPlain()) if s is dq else s))
        if k is main else k for k in program.kernels))
    with pytest.raises(VerifyError, match="first_plain needs"):
        verify(bad, "test")
