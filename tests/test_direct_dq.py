"""The pass direct-dq (tilegen.passes.gpu.direct_dq): on a GPU target, the atomic backward whose one
K/V tile covers the keys computes D and stores dQ in its main kernel (no pre and post kernels, no D or
dQ_ws workspace). Where it applies is checked on the compiled programs, where it must not (a Q tile
that the K/V tile does not see, more than one K/V tile, sinks) too; the programs it gives run in the
NumPy interpreter against torch autograd on float64 inputs, and the generated Triton module in
Triton's interpreter (outputs NaN-poisoned before the run) against the float64 reference."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import numpy as np
import pytest

from helpers import assert_backward_ok, inputs, make_spec
from tilegen.backends.interp import interpret
from tilegen.core.ir import Load, Store, walk
from tilegen.backends import compile_backward, compile_forward

torch = pytest.importorskip("torch")

# name: (spec fields, (Br, Bc)); one K/V tile covers Sk and sees every Q tile
APPLIES = {
    "causal-gqa-tails": (dict(heads_q=4, heads_kv=2, seq_q=40, seq_k=40, window=(-1, 0)), (16, 64)),
    "none-sq>sk": (dict(seq_q=72, seq_k=50), (32, 64)),
    "window-top-left-dqk!=dv": (dict(seq_q=40, seq_k=56, head_dim_qk=40, head_dim_v=24, window=(8, 8), alignment="top_left"), (16, 64)),
    "causal-top-left-sq>sk-bsnd": (dict(seq_q=48, seq_k=30, window=(-1, 0), alignment="top_left", layout="BSND"), (16, 32)),
}
# the pass must leave these as they are
KEPT = {
    "two-kv-tiles": (dict(seq_q=40, seq_k=40), (32, 32)),
    "q-tile-seeing-no-key": (dict(seq_q=72, seq_k=40, window=(-1, 0)), (32, 64)),  # rows 0..31: no visible key
    "sinks": (dict(seq_q=40, seq_k=40, sinks=True), (32, 64)),
}


def _backward(fields, tiles, dtype="fp32", target="h200", **kw):
    spec = make_spec(name="direct", dtype=dtype, **fields)
    return spec, compile_backward(spec, target=target, tile_sizes=tiles, **kw)


@pytest.mark.parametrize("case", list(APPLIES))
def test_one_kv_tile_gives_one_kernel(case):
    _, program = _backward(*APPLIES[case])
    assert program.attr("dq_direct") is True
    assert [k.name for k in program.kernels] == ["main"]
    assert not {"D", "dQ_ws"} & {t.name for t in program.tensors}
    assert not any(isinstance(st, Store) and st.accumulate for k in program.kernels for st, _ in walk(k.body))  # no atomic
    loads = [st.src.tensor for k in program.kernels for st, _ in walk(k.body) if isinstance(st, Load)]
    assert loads.count("O") == 1 and all(st.pad == 0.0 for st, _ in walk(program.kernels[0].body) if isinstance(st, Load))


@pytest.mark.parametrize("dtype,dO_loads", [("bf16", 1), ("fp32", 2)])
def test_d_reads_mains_do_tile_unless_computed_in_place(dtype, dO_loads):
    """D = rowsum(dO∘O) reads the dO tile main loaded (bf16: pre's statements cast it first); in fp32
    pre multiplies its dO tile in place, which main's tile must not see: a copy of its own."""
    _, program = _backward(*APPLIES["causal-gqa-tails"], dtype=dtype)
    loads = [st.src.tensor for st, _ in walk(program.kernels[0].body) if isinstance(st, Load)]
    assert loads.count("dO") == dO_loads


@pytest.mark.parametrize("case", list(KEPT))
def test_pass_leaves_what_it_cannot_fold(case):
    _, program = _backward(*KEPT[case])
    assert program.attr("dq_direct") is None
    assert {"pre", "main", "post"} <= {k.name for k in program.kernels}


def test_not_on_ascend_nor_for_the_separate_strategy():
    fields, tiles = APPLIES["causal-gqa-tails"]
    _, separate = _backward(fields, tiles, dq_strategy="separate")
    assert separate.attr("dq_direct") is None
    _, ascend = _backward(fields, (16, 64), dtype="fp16", target="ascend910b2")
    assert ascend.attr("dq_direct") is None


@pytest.mark.parametrize("case", list(APPLIES))
def test_folded_program_matches_torch_autograd(case):
    fields, tiles = APPLIES[case]
    spec, program = _backward(fields, tiles)
    assert program.attr("dq_direct") is True
    data = inputs(spec, seed=5)
    fwd, _ = interpret(compile_forward(spec, tile_sizes=tiles), {n: data[n] for n in "QKV"})
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"]}
    grads, _ = interpret(program, feeds, pad_value=float("nan"))  # a padded row's value must not matter
    from test_group_split import torch_grads  # torch autograd on float64 inputs, either alignment

    for name, ref in zip(("dQ", "dK", "dV"), torch_grads(spec, data)):
        np.testing.assert_allclose(grads[name], ref, rtol=0, atol=2e-5 * max(1.0, float(np.abs(ref).max())), err_msg=name)


@pytest.fixture(scope="module")
def tb():
    pytest.importorskip("triton")
    from tilegen.backends import triton as backend

    return backend


def _run_module(tb, spec, tiles):
    from test_triton import _logical, _physical, _to_numpy, _to_torch

    module = tb.load(spec, dq_strategy="atomic", tile_sizes=tiles)
    data = inputs(spec, seed=3)
    q, k, v, do = (_to_torch(_physical(data[n], spec.layout)) for n in ("Q", "K", "V", "dO"))
    o, lse = module.forward(q, k, v, poison=True)
    dq, dk, dv = module.backward(q, k, v, o, lse, do, poison=True)
    return module, data, [_to_numpy(_logical(g, spec.layout)) for g in (dq, dk, dv)]


@pytest.mark.parametrize("case,dtype", [("causal-gqa-tails", "bf16"), ("window-top-left-dqk!=dv", "fp16"), ("causal-top-left-sq>sk-bsnd", "fp16")])
def test_generated_module_matches_reference(tb, case, dtype):
    fields, tiles = APPLIES[case]
    spec = make_spec(name=f"direct_{dtype}", dtype=dtype, **fields)
    module, data, grads = _run_module(tb, spec, tiles)
    assert hasattr(module, "_launch_main") and not hasattr(module, "_launch_pre") and not hasattr(module, "_launch_post")
    assert_backward_ok(spec, grads, data)


def test_generated_module_keeps_pre_and_post_where_a_q_tile_sees_no_key(tb):
    fields, tiles = KEPT["q-tile-seeing-no-key"]
    spec = make_spec(name="direct_kept", **fields)
    module, data, grads = _run_module(tb, spec, tiles)
    assert hasattr(module, "_launch_pre") and hasattr(module, "_launch_post")
    assert_backward_ok(spec, grads, data)
    assert np.all(np.asarray(grads[0][:, :, :32], dtype=np.float32) == 0)  # rows 0..31 see no key: dQ = 0


def test_inspect_says_whether_the_pass_folded_and_why_not():
    """`tilegen inspect` on h200: the folded backward's kernels and the pass, or the condition that kept
    pre and post (more K/V tiles than one, a Q tile the K/V tile does not see, sinks)."""
    import dataclasses

    from tilegen.harness.report import format_inspect, inspect_report
    from tilegen.core.spec import builtin_spec

    def line(spec, tiles=None):
        report = inspect_report(spec, "h200", dq_strategy="atomic", programs=("bwd",), tile_sizes=tiles)
        text = format_inspect(report, show_nest=False, width=10**6)  # unwrapped: whole lines
        return [ln.strip() for ln in text.splitlines() if ln.strip().startswith(("== backward", "direct-dq:"))]

    llama = builtin_spec("llama3-8b")
    short = line(dataclasses.replace(llama, batch=1, seq_q=128, seq_k=128))
    assert short == ["== backward (fused, dq strategy atomic, one K/V tile: D and dQ in main (pass direct-dq)): kernels main",
                     "direct-dq: D and dQ in main, no pre or post"]
    assert line(dataclasses.replace(llama, batch=1, seq_q=4096, seq_k=4096))[1] == "direct-dq: not applied: 32 K/V tiles per program grid (Sk = 4096 > Bc = 128)"
    hidden = make_spec(name="hidden", seq_q=72, seq_k=40, window=(-1, 0))  # bottom-right: rows 0..31 see no key
    assert line(hidden, (32, 64))[1] == "direct-dq: not applied: the K/V tile sees Q tiles 1 to 2 of 3; pre and post give the others dQ = 0"
    assert line(make_spec(name="sinks", sinks=True))[1] == "direct-dq: not applied: sinks (the host's sink gradient reads D)"
