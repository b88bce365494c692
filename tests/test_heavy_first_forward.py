"""The forward's ``heavy_first`` schedule knob (tilegen/passes/group.py: heavy_first_forward).

Causal (both alignments, Sq ≠ Sk), windowed and unmasked specs, MHA and GQA, with the knob set by a
``[[triton.schedule]]`` row for ``program = "fwd"`` as users set it, run in the IR interpreter (parallel
axes in a random order) and as the generated Triton module in Triton's interpreter
(``TRITON_INTERPRET=1``). O and L are checked against torch in float64 (softmax of the masked scores,
torch.logsumexp; DESIGN §3's rule, tilegen.harness.check.compare, with the plain dtype implementation for the
tolerance), dQ, dK, dV of the module's autograd path against torch autograd in float64, and the
outputs against the same module without the knob bit for bit (every program computes what it did).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import inputs, make_spec, unwrapped  # noqa: E402
from test_group_split import _bnsd, assert_grads_ok, target_with, tb  # noqa: E402,F401  (tb: the Triton backend fixture)
from tilegen.core import reference  # noqa: E402
from tilegen.backends.interp import interpret  # noqa: E402
from tilegen.harness.check import compare, longest_sum  # noqa: E402
from tilegen.core.errors import TargetError  # noqa: E402
from tilegen.backends import compile_forward  # noqa: E402

TILES = (16, 16)

SPECS = {
    "mha-causal-bottom-right": dict(heads_q=2, heads_kv=2, seq_q=40, seq_k=56, window=(-1, 0)),
    "gqa8/2-causal-bottom-right": dict(heads_q=8, heads_kv=2, seq_q=40, seq_k=40, window=(-1, 0)),
    "gqa6/3-causal-top-left": dict(heads_q=6, heads_kv=3, seq_q=40, seq_k=24, window=(-1, 0), alignment="top_left"),
    "gqa6/3-window-bottom-right": dict(heads_q=6, heads_kv=3, seq_q=24, seq_k=40, window=(9, 3)),
    "gqa8/2-none": dict(heads_q=8, heads_kv=2, seq_q=24, seq_k=40),
}


def torch_forward(spec, data):
    """O, L of softmax(scale·QKᵀ + mask) V in float64 by torch (GQA by repeating K, V); L = −inf and
    O = 0 on a row without a visible key."""
    q, k, v = (torch.from_numpy(np.asarray(data[n], dtype=np.float64)) for n in ("Q", "K", "V"))
    g = spec.heads_q // spec.heads_kv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = spec.softmax_scale * q @ kk.transpose(-1, -2)
    r = torch.arange(spec.seq_q).view(-1, 1)
    c = torch.arange(spec.seq_k).view(1, -1)
    off = spec.seq_k - spec.seq_q if spec.alignment == "bottom_right" else 0
    left, right = spec.window
    visible = torch.ones(spec.seq_q, spec.seq_k, dtype=torch.bool)
    if left >= 0:
        visible &= c >= r + off - left
    if right >= 0:
        visible &= c <= r + off + right
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vv).numpy(), lse.numpy()


def assert_forward_matches_torch(spec, o, lse, data):
    o_ref, l_ref = torch_forward(spec, data)
    kw = dict(scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)
    o_pl, l_pl = reference.plain_forward(data["Q"], data["K"], data["V"], dtype=spec.dtype, **kw)
    n = longest_sum(spec)
    o = np.asarray(o, dtype=np.float32)
    assert not np.isnan(o).any(), "NaN in O"
    for comp in (compare("O", o, o_ref, o_pl, spec.dtype, terms=n), compare("L", np.asarray(lse), l_ref, l_pl, "fp32", terms=n)):
        assert comp.ok, comp.line()


def fwd_row(head_dim: int, heavy, tiles=TILES, causal=None) -> str:
    lines = ["[[triton.schedule]]", 'program = "fwd"', f"head_dim = {head_dim}"]
    if causal is not None:
        lines.append(f"causal = {'true' if causal else 'false'}")
    if heavy is not None:
        lines.append(f"heavy_first = {'true' if heavy else 'false'}")
    lines += [f"Br = {tiles[0]}", f"Bc = {tiles[1]}", 'source = "a forward test row"']
    return "\n".join(lines) + "\n"


def causal_like(spec) -> bool:
    return spec.window[1] >= 0 and spec.window[0] < 0


# --- the IR ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SPECS))
def test_heavy_first_forward_in_the_interpreter(name):
    spec = make_spec(name=name.replace("/", "_"), **SPECS[name])
    data = inputs(spec, seed=11)
    program = compile_forward(spec, tile_sizes=TILES, heavy_first=True)
    assert program.attr("heavy_first") is True
    from tilegen.core.ir import grid_loops

    assert [lp.role for lp in grid_loops(program.kernel("fwd"))] == ["q_tile", "batch", "head"]
    out, _ = interpret(program, {n: data[n] for n in "QKV"}, order_seed=3)
    assert_forward_matches_torch(spec, out["O"], out["L"], data)


# --- the target rows and the Triton module ------------------------------------------------------


@pytest.mark.parametrize("name", ["gqa8/2-causal-bottom-right"])  # under TRITON_INTERPRET: the interpreter tests take every spec
def test_heavy_first_forward_triton(tb, tmp_path, name):
    spec = make_spec(name=name.replace("/", "_"), **SPECS[name])
    data = inputs(spec, seed=12)
    q, k, v, do = (_bnsd(data[n]) for n in ("Q", "K", "V", "dO"))
    outs = {}
    for heavy in (False, True):
        target = target_with(tmp_path, fwd_row(32, heavy), f"h{int(heavy)}")
        fwd, _ = tb.schedule(spec, target)
        choice = fwd.choice()
        assert choice["heavy_first"] is heavy and "a forward test row" in choice["heavy_first_source"]
        text = next(t for n, t in tb.generate(spec, target).files.items() if n.endswith(".py"))
        kernel = text[text.index("def fwd_kernel") :]
        kernel = kernel[: kernel.index("\n\n\n")]
        if heavy:  # the Q-tile axis on launch axis 2, numbered from the last tile down when causal
            want = "- 1 - tl.program_id(2))" if causal_like(spec) else "i = tl.program_id(2)"
            assert want in kernel and "hq = tl.program_id(0)" in kernel, kernel[:600]
        else:
            assert "hq = tl.program_id(1)" in kernel
        module = tb.load(spec, target)
        o, lse = module.forward(q, k, v, poison=True)
        assert_forward_matches_torch(spec, o.numpy(), lse.numpy(), data)
        if heavy:  # the backward after the heavy-first forward, through autograd
            qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
            grads = torch.autograd.grad(module.attention(qq, kk, vv), (qq, kk, vv), do)
            assert_grads_ok(spec, [x.numpy() for x in grads], data)
        outs[heavy] = (o, lse)
    assert torch.equal(outs[True][0], outs[False][0]) and torch.equal(outs[True][1], outs[False][1])


def test_forward_rows_without_the_knob_keep_q_tiles_fastest(tb):
    spec = make_spec(heads_q=8, heads_kv=2, seq_q=64, seq_k=64, window=(-1, 0))
    fwd, _ = tb.schedule(spec, "h200")
    choice = fwd.choice()
    assert choice["heavy_first"] is False and choice["heavy_first_source"].startswith("the default")
    assert "group_split" not in choice


def test_forward_rows_take_heavy_first_but_not_group_split(tb, tmp_path):
    row = '[[triton.schedule]]\nprogram = "fwd"\nhead_dim = 32\ngroup_split = 2\nsource = "x"\n'
    with pytest.raises(TargetError, match=r"group_split is a backward knob; accepted on program = bwd-atomic") as err:
        tb.schedule(make_spec(), target_with(tmp_path, row))
    assert "\n" not in str(err.value)
    row = '[[triton.schedule]]\nprogram = "fwd"\nhead_dim = 32\nheavy_first = 1\nsource = "x"\n'
    with pytest.raises(TargetError, match=r"heavy_first = 1 is invalid; accepted: true, false"):
        tb.schedule(make_spec(), target_with(tmp_path, row, "b"))


def test_inspect_shows_the_forwards_heavy_first(tmp_path):
    from tilegen.backends import triton as backend
    from tilegen.harness.report import format_inspect, inspect_report

    spec = make_spec(heads_q=8, heads_kv=2, seq_q=64, seq_k=64, window=(-1, 0))
    target = target_with(tmp_path, fwd_row(32, True, causal=True))
    report = inspect_report(spec, target)
    fwd = [p for p in report["programs"] if p["label"].startswith("forward")][0]
    manifest = backend.generate(spec, target).manifest
    assert fwd["emitted"]["heavy_first"] is True
    assert manifest["schedule"]["forward"] == fwd["emitted"]  # inspect shows what generate emits
    text = unwrapped(format_inspect(report))
    assert "heavy first: yes (the target's triton.schedule[0] (fwd, head_dim 32, Br 16 x Bc 16): a forward test row)" in text
