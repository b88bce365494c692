"""The pass transpose-dq-tiles (tilegen.passes.gpu.transpose_dq_tiles) and the schedule rows that
choose it: the separate strategy's dq kernel on Bc x Br tiles while main keeps Br x Bc. The pass's
programs run in the NumPy interpreter against torch autograd on float64 inputs (padding NaN), the
generated Triton modules in Triton's interpreter (outputs NaN-poisoned) against the float64 reference
(DESIGN §3's rule), a softcap module against tests/mod_reference.py; where it must refuse (a block
table of Br x Bc tiles, tile-shaped partials) it does, and a row asking for it is skipped."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import numpy as np
import pytest
import sympy

from helpers import assert_backward_ok, inputs, make_spec, unwrapped
from tilegen.backends.interp import interpret
from tilegen.core.errors import SpecError, TargetError
from tilegen.core.ir import Bc, Br, Loop, grid_loops, walk
from tilegen.core.spec import builtin_spec
from tilegen.backends import compile_backward, compile_forward

torch = pytest.importorskip("torch")

# name: (spec fields, (Br, Bc)); Br != Bc so that a kernel on the wrong tiles shows, with tails
CASES = {
    "none-sq>sk": (dict(seq_q=72, seq_k=50), (16, 32)),
    "causal-gqa": (dict(heads_q=4, heads_kv=2, seq_q=80, seq_k=80, window=(-1, 0)), (16, 32)),
    "window-top-left-dqk!=dv": (dict(seq_q=40, seq_k=56, head_dim_qk=40, head_dim_v=24, window=(8, 8), alignment="top_left"), (16, 32)),
    "causal-sq>sk-tall": (dict(seq_q=96, seq_k=50, window=(-1, 0), layout="BSND"), (32, 16)),
}


def _backward(fields, tiles, dq_tiles="transposed", dtype="fp32", **kw):
    spec = make_spec(name="dqt", dtype=dtype, **fields)
    return spec, compile_backward(spec, target="h200", tile_sizes=tiles, dq_strategy="separate", dq_tiles=dq_tiles, **kw)


def test_dq_kernel_walks_transposed_tiles_and_main_does_not():
    _, same = _backward(*CASES["none-sq>sk"], dq_tiles="same")
    _, program = _backward(*CASES["none-sq>sk"])
    assert program.attr("dq_tiles") == "transposed" and same.attr("dq_tiles") is None
    dq = program.kernel("dq")
    assert [lp.stop for lp in grid_loops(dq)][-1] == sympy.ceiling(sympy.Symbol("Sq", integer=True, positive=True) / Bc)
    serial = [st for st, _ in walk(dq.body) if isinstance(st, Loop) and st.kind == "serial"]
    assert serial and all(Bc not in sympy.sympify(lp.stop).free_symbols for lp in serial)  # K/V tiles of Br
    shapes = {b.name: tuple(b.shape) for b in dq.buffers}
    assert shapes["Qi"][0] == Bc and shapes["Kj"][0] == Br  # held Q tile of Bc rows, streamed K/V tiles of Br
    assert program.kernel("main") == same.kernel("main") and program.kernel("pre") == same.kernel("pre")


@pytest.mark.parametrize("case", list(CASES))
def test_transposed_program_matches_torch_autograd(case):
    fields, tiles = CASES[case]
    spec, program = _backward(fields, tiles)
    data = inputs(spec, seed=7)
    fwd, _ = interpret(compile_forward(spec, tile_sizes=tiles), {n: data[n] for n in "QKV"})
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"]}
    grads, _ = interpret(program, feeds, pad_value=float("nan"))  # a padded row's value must not matter
    from test_group_split import torch_grads  # torch autograd on float64 inputs, either alignment

    for name, ref in zip(("dQ", "dK", "dV"), torch_grads(spec, data)):
        np.testing.assert_allclose(grads[name], ref, rtol=0, atol=2e-5 * max(1.0, float(np.abs(ref).max())), err_msg=name)


def test_refused_where_the_dq_kernel_reads_tile_shaped_data():
    with pytest.raises(SpecError, match="dq_tiles = 'transposed' is invalid.*block table"):
        compile_backward(builtin_spec("document"), target="h200", dq_strategy="separate", dq_tiles="transposed")
    with pytest.raises(SpecError, match="dq_tiles = 'transposed' is invalid.*depend on the tile sizes"):
        compile_backward(builtin_spec("alibi"), target="h200", dq_strategy="separate", dq_tiles="transposed")
    with pytest.raises(SpecError, match="separate dQ strategy"):
        compile_backward(make_spec(), target="h200", dq_strategy="atomic", dq_tiles="transposed")
    with pytest.raises(SpecError, match="dq_tiles = 'transposed' is invalid; accepted: 'same' on a target whose cube and vector hand tiles over through GM"):
        compile_backward(make_spec(), target="ascend910b2", dq_strategy="separate", dq_tiles="transposed")  # one set of hand-off tiles
    with pytest.raises(SpecError, match="dq_tiles = 'sideways' is invalid; accepted: one of same, transposed"):
        compile_backward(make_spec(), target="h200", dq_strategy="separate", dq_tiles="sideways")


# --- the generated Triton module ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tb():
    pytest.importorskip("triton")
    from tilegen.backends import triton as backend

    return backend


@pytest.mark.parametrize("case,dtype", [("causal-gqa", "bf16"), ("window-top-left-dqk!=dv", "fp16"), ("causal-sq>sk-tall", "fp16"), ("none-sq>sk", "fp32")])
def test_generated_module_matches_reference(tb, case, dtype):
    from test_triton import _logical, _physical, _to_numpy, _to_torch

    fields, tiles = CASES[case]
    spec = make_spec(name=f"dqt_{dtype}", dtype=dtype, **fields)
    module = tb.load(spec, dq_strategy="separate", tile_sizes=tiles, dq_tiles="transposed")
    src = open(module.__file__, encoding="utf-8").read()
    assert "Q tiles of Bc rows, K/V tiles of Br (dq tiles transposed)" in src
    assert f"Br, Bc = {tiles[0]}, {tiles[1]}" in src and "(-((-Sq) // (Bc)))" in src  # dq's grid: Q tiles of Bc
    data = inputs(spec, seed=3)
    q, k, v, do = (_to_torch(_physical(data[n], spec.layout)) for n in ("Q", "K", "V", "dO"))
    o, lse = module.forward(q, k, v, poison=True)
    grads = module.backward(q, k, v, o, lse, do, poison=True)
    assert_backward_ok(spec, [_to_numpy(_logical(g, spec.layout)) for g in grads], data)


def test_softcap_module_matches_the_mod_reference(tb):
    from test_mods_triton import _check, _run, _softcap, _spec
    from tilegen.core import mods as M

    spec, arrays = _spec(M.softcap(30.0), M.causal(), dtype="bf16", seq_q=40, seq_k=48)
    module = tb.load(spec, dq_strategy="separate", tile_sizes=(16, 32), dq_tiles="transposed")
    assert "dq tiles transposed" in open(module.__file__, encoding="utf-8").read()
    tb_load = tb.load

    class Patched:  # _run loads by (strategy, tiles): hand it the transposed module
        def __getattr__(self, name):
            return getattr(tb, name)

        def load(self, spec_, dq_strategy=None, tile_sizes=None):
            return tb_load(spec_, dq_strategy=dq_strategy, tile_sizes=tile_sizes, dq_tiles="transposed")

    _, data, _, o, lse, out = _run(Patched(), spec, arrays, (16, 32), strategy="separate")
    _check(spec, data, arrays, o, lse, out, score_fn=_softcap)


# --- the schedule rows that choose it -------------------------------------------------------------


def test_rows_choose_the_strategy_and_skip_a_transposition_that_does_not_apply(tb):
    llama = builtin_spec("llama3-8b")
    _, bwd = tb.schedule(llama, "h200")
    assert bwd.kind == "bwd-separate" and bwd.program.attr("dq_tiles") == "transposed"
    assert (bwd.choice()["Br"], bwd.choice()["Bc"]) == (64, 128) and bwd.row.program == "bwd-separate"
    assert {k: v["num_warps"] for k, v in bwd.choice()["launch"].items()} == {"pre": 4, "main": 8, "dq": 8}
    _, short = tb.schedule(dataclasses.replace(llama, seq_q=512, seq_k=512), "h200")  # below the row's min_seq_k
    assert short.kind == "bwd-atomic" and short.program.attr("dq_tiles") is None
    _, asked = tb.schedule(llama, "h200", dq_strategy="atomic")  # the caller's strategy: only its rows
    assert asked.kind == "bwd-atomic"
    prefix = dataclasses.replace(builtin_spec("prefix-lm"), head_dim_qk=128, head_dim_v=128, seq_q=1024, seq_k=1024, dtype="bf16")
    _, blocked = tb.schedule(prefix, "h200")  # a mask mod's block table: the separate row is skipped, the atomic row used
    assert blocked.kind == "bwd-atomic"
    assert any("bwd-separate" in sk.line() and "block table" in sk.line() for sk in blocked.skipped)


def test_target_file_refuses_dq_tiles_where_it_means_nothing(tmp_path, tb):
    from tilegen.core.targets import load_target

    from pathlib import Path

    text = Path(load_target("h200").path).read_text(encoding="utf-8")
    bad = text.replace('program = "bwd-atomic"\nhead_dim = 128\ncausal = true\ngroup = 8\n',
                       'program = "bwd-atomic"\nhead_dim = 128\ncausal = true\ngroup = 8\ndq_tiles = "transposed"\n', 1)
    assert bad != text
    path = tmp_path / "bad.toml"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(TargetError, match=r"dq_tiles = 'transposed' is invalid; accepted: 'same' or 'transposed' on a bwd-separate row"):
        tb.triton_config(load_target(str(path)))


def test_cli_inspect_and_generate_take_the_targets_strategy(tmp_path, capsys):
    """Without --dq-strategy, inspect shows and generate emits the strategy the target's rows choose,
    as tilegen.torch loads it; with it, the one named."""
    import json

    from tilegen.cli import main

    assert main(["inspect", "--spec", "llama3-8b", "--target", "h200", "--program", "bwd", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "separate" in json.dumps(shown)
    assert main(["generate", "--spec", "llama3-8b", "--target", "h200", "-o", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["dq_strategy"] == "separate" and manifest["schedule"]["backward"]["kernels"] == ["pre", "main", "dq"]
    assert main(["generate", "--spec", "llama3-8b", "--target", "h200", "--dq-strategy", "atomic", "-o", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["dq_strategy"] == "atomic"


def test_sinks_module_matches_torch_autograd(tb):
    """Sinks (gpt-oss's eager attention: a sink logit per head joins each row's softmax, no value):
    dsinks comes from the separate strategy's D, computed by pre alone; checked against torch autograd
    in float64 (softmax over [scores, sink], the sink column dropped)."""
    from test_triton import _to_numpy, _to_torch

    spec = make_spec(name="dqt_sinks", dtype="fp32", heads_q=4, heads_kv=2, seq_q=48, seq_k=40, window=(-1, 0), sinks=True)
    module = tb.load(spec, dq_strategy="separate", tile_sizes=(16, 32), dq_tiles="transposed")
    data = inputs(spec, seed=11)
    sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    q, k, v, do = (_to_torch(data[n]) for n in ("Q", "K", "V", "dO"))
    o, lse = module.forward(q, k, v, sinks=torch.from_numpy(sinks), poison=True)
    dq, dk, dv, dparams = module.backward(q, k, v, o, lse, do, sinks=torch.from_numpy(sinks), poison=True)

    x = {n: torch.from_numpy(np.asarray(data[n], np.float64)).requires_grad_(n != "dO") for n in ("Q", "K", "V", "dO")}
    ts = torch.from_numpy(sinks.astype(np.float64)).requires_grad_(True)
    kk, vv = (x[n].repeat_interleave(2, dim=1) for n in ("K", "V"))
    s = spec.softmax_scale * x["Q"] @ kk.transpose(-1, -2)
    r, c = torch.arange(48).view(-1, 1), torch.arange(40).view(1, -1)
    s = s.masked_fill(c > r + (40 - 48), float("-inf"))  # causal, bottom-right
    full = torch.cat([s, ts.view(1, -1, 1, 1).expand(1, 4, 48, 1)], dim=-1)
    p = torch.softmax(full, dim=-1)[..., :-1]
    ref = torch.autograd.grad(p @ vv, (x["Q"], x["K"], x["V"], ts), x["dO"])
    for name, ours, want in zip(("dQ", "dK", "dV", "dsinks"), (dq, dk, dv, dparams["sinks"]), ref):
        np.testing.assert_allclose(_to_numpy(ours), want.numpy(), rtol=0, atol=2e-5 * max(1.0, float(want.abs().max())), err_msg=name)


def test_inspect_names_the_separate_row_it_skipped_and_the_api_agrees(tmp_path, capsys):
    """Without --dq-strategy the report takes the target's own choice, so a bwd-separate row that does
    not apply (a mask mod's block table) is named with its reason; tilegen.inspect and tilegen.generate
    take the same choice as the CLI."""
    import tilegen
    from tilegen.cli import main

    prefix = dataclasses.replace(builtin_spec("prefix-lm"), head_dim_qk=128, head_dim_v=128, seq_q=1024, seq_k=1024, dtype="bf16")
    path = tmp_path / "prefix128.toml"
    path.write_text(prefix.to_toml(), encoding="utf-8")
    assert main(["inspect", str(path), "--target", "h200", "--program", "bwd", "--verbose"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "dq strategy atomic" in out and "(bwd-separate, head_dim 128, Sk >= 1024, Br 64 x Bc 128) skipped:" in out and "block table" in out
    shown = tilegen.inspect("llama3-8b", "h200", programs=("bwd",))
    assert "dq strategy separate" in str(shown)
    result = tilegen.generate("llama3-8b", "h200", tmp_path / "gen")
    assert result.manifest["dq_strategy"] == "separate" and result.manifest["schedule"]["backward"]["dq_tiles"] == "transposed"
