"""The backward's group-split schedule knobs (``group_split``, ``heavy_first``; tilegen/passes/group.py).

GQA specs (Hq 8 / Hkv 2, Hq 6 / Hkv 3), causal, windowed and unmasked, with the query heads of a KV
head split over 1, 2 and G programs, run in the IR interpreter and as generated Triton kernels in
Triton's interpreter (``TRITON_INTERPRET=1``), the knobs set by a ``[[triton.schedule]]`` row of a
target file as users set them. dQ, dK, dV are checked against torch autograd in float64 (DESIGN §3's
rule, tilegen.harness.check.compare, with the plain dtype implementation for the tolerance).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import inputs, make_spec, unwrapped  # noqa: E402
from tilegen.core import reference  # noqa: E402
from tilegen.backends.interp import interpret  # noqa: E402
from tilegen.harness.check import compare, longest_sum, lse_rel_floor  # noqa: E402
from tilegen.core.errors import SpecError, TargetError  # noqa: E402
from tilegen.backends import compile_backward, compile_forward  # noqa: E402

H200 = Path(__file__).resolve().parents[1] / "targets" / "h200.toml"
TILES = (16, 16)

SPECS = {
    "gqa8/2-causal": dict(heads_q=8, heads_kv=2, seq_q=40, seq_k=40, window=(-1, 0)),
    "gqa8/2-none": dict(heads_q=8, heads_kv=2, seq_q=24, seq_k=40),
    "gqa6/3-window-bottom-right": dict(heads_q=6, heads_kv=3, seq_q=24, seq_k=40, window=(9, 3)),
    "gqa6/3-causal-top-left": dict(heads_q=6, heads_kv=3, seq_q=40, seq_k=24, window=(-1, 0), alignment="top_left"),
}


def torch_grads(spec, data):
    """dQ, dK, dV of softmax(scale·QKᵀ + mask) V by torch autograd in float64 (GQA by repeating K, V)."""
    q, k, v, do = (torch.from_numpy(np.asarray(data[n], dtype=np.float64)) for n in ("Q", "K", "V", "dO"))
    q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
    g = spec.heads_q // spec.heads_kv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = spec.softmax_scale * q @ kk.transpose(-1, -2)
    sq, sk = spec.seq_q, spec.seq_k
    r = torch.arange(sq).view(-1, 1)
    c = torch.arange(sk).view(1, -1)
    off = sk - sq if spec.alignment == "bottom_right" else 0
    left, right = spec.window
    visible = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        visible &= c >= r + off - left
    if right >= 0:
        visible &= c <= r + off + right
    s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row without a visible key: O = 0, no gradient
    o = p @ vv
    return [x.numpy() for x in torch.autograd.grad(o, (q, k, v), do)]


def assert_grads_ok(spec, grads, data):
    kw = dict(scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)
    lse = reference.forward(data["Q"], data["K"], data["V"], **kw)[1]
    ref = torch_grads(spec, data)
    plain = reference.plain_backward(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    for name, ours, r, p in zip(("dQ", "dK", "dV"), grads, ref, plain):
        ours = np.asarray(ours, dtype=np.float32)
        assert not np.isnan(ours).any(), f"NaN in {name}"
        comp = compare(name, ours, r, p, spec.dtype, rel_floor=lse_rel_floor(lse), terms=longest_sum(spec))
        assert comp.ok, comp.line()


def splits(spec):
    g = spec.heads_q // spec.heads_kv
    return sorted({1, 2, g} & {d for d in range(1, g + 1) if g % d == 0})


# --- the IR ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("heavy", [False, True])
@pytest.mark.parametrize("name", list(SPECS))
def test_split_program_in_the_interpreter(name, heavy):
    spec = make_spec(name=name.replace("/", "_"), **SPECS[name])
    data = inputs(spec, seed=5)
    fwd, _ = interpret(compile_forward(spec, tile_sizes=TILES), {n: data[n] for n in "QKV"})
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"]}
    for split in splits(spec):
        program = compile_backward(spec, tile_sizes=TILES, group_split=split, heavy_first=heavy)
        assert program.attr("group_split") in (split, None if split == 1 and not heavy else split)
        names = [k.name for k in program.kernels]
        assert ("post_kv" in names) == (split > 1)
        out, _ = interpret(program, feeds, order_seed=split)  # parallel axes in a random order
        assert_grads_ok(spec, (out["dQ"], out["dK"], out["dV"]), data)


def test_split_with_the_separate_dq_strategy():
    spec = make_spec(name="sep", **SPECS["gqa8/2-causal"])
    data = inputs(spec, seed=6)
    fwd, _ = interpret(compile_forward(spec, tile_sizes=TILES), {n: data[n] for n in "QKV"})
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"]}
    program = compile_backward(spec, tile_sizes=TILES, dq_strategy="separate", group_split=4, heavy_first=True)
    assert [k.name for k in program.kernels] == ["pre", "main", "post_kv", "dq"]
    out, _ = interpret(program, feeds)
    assert_grads_ok(spec, (out["dQ"], out["dK"], out["dV"]), data)


def test_split_must_divide_the_group():
    spec = make_spec(heads_q=6, heads_kv=2)  # G = 3
    with pytest.raises(SpecError, match=r"group_split = 2 is invalid; accepted: a divisor of G = 3"):
        compile_backward(spec, tile_sizes=TILES, group_split=2)
    with pytest.raises(SpecError, match=r"group_split = 0 is invalid"):
        compile_backward(spec, tile_sizes=TILES, group_split=0)
    with pytest.raises(SpecError, match=r"unfused backward"):
        compile_backward(spec, fused=False, tile_sizes=TILES, group_split=3)


# --- the target rows and the Triton kernels ------------------------------------------------------


def target_with(tmp_path, rows: str, name: str = "t") -> str:
    """A copy of the h200 target with ``rows`` before its own [[triton.schedule]] rows (first match wins)."""
    text = H200.read_text()
    at = text.index("\n[[triton.schedule]]") + 1
    path = tmp_path / f"{name}.toml"
    path.write_text(text[:at] + rows.strip() + "\n\n" + text[at:])
    return str(path)


def split_row(head_dim: int, group: int, split: int, heavy: bool, tiles=TILES) -> str:
    return f"""
[[triton.schedule]]
program = "bwd-atomic"
head_dim = {head_dim}
group = {group}
group_split = {split}
heavy_first = {"true" if heavy else "false"}
Br = {tiles[0]}
Bc = {tiles[1]}
source = "a test row"
"""


@pytest.fixture(scope="module")
def tb():
    pytest.importorskip("triton")
    from tilegen.backends import triton as backend

    return backend


def _bnsd(x):
    return torch.from_numpy(np.ascontiguousarray(x).copy())


@pytest.mark.parametrize("name", ["gqa8/2-causal"])  # under TRITON_INTERPRET: the interpreter tests take every spec
def test_split_triton_kernels(tb, tmp_path, name):
    spec = make_spec(name=name.replace("/", "_"), **SPECS[name])
    data = inputs(spec, seed=7)
    q, k, v, do = (_bnsd(data[n]) for n in ("Q", "K", "V", "dO"))
    g = spec.heads_q // spec.heads_kv
    results = {}
    for split in sorted({1, g}):  # one program per KV head, and the whole group split (the interpreter tests take 2)
        heavy = split == g  # both orders of the grid
        target = target_with(tmp_path, split_row(32, g, split, heavy), f"s{split}")
        fwd, bwd = tb.schedule(spec, target)
        assert bwd.choice()["group_split"] == split and bwd.choice()["heavy_first"] == heavy
        assert "a test row" in bwd.choice()["group_split_source"]
        module = tb.load(spec, target)
        o, lse = module.forward(q, k, v, poison=True)
        grads = module.backward(q, k, v, o, lse, do, poison=True)
        assert_grads_ok(spec, [x.numpy() for x in grads], data)
        again = module.backward(q, k, v, o, lse, do, poison=True)
        for a, b_ in zip(grads[1:], again[1:]):  # dK, dV summed in a fixed order: the same bits
            assert torch.equal(a, b_)
        results[split] = grads
    assert len(results) >= 2


def test_rows_without_the_knobs_keep_one_program_per_kv_head(tb):
    spec = make_spec(heads_q=8, heads_kv=2, seq_q=64, seq_k=64, window=(-1, 0))
    _, bwd = tb.schedule(spec, "h200")
    choice = bwd.choice()
    assert choice["group_split"] == 1 and choice["heavy_first"] is False
    assert choice["group_split_source"].startswith("the default")
    assert "post_kv" not in choice["kernels"]


def test_row_split_is_reduced_to_a_divisor_and_matched_by_group(tb, tmp_path):
    target = target_with(tmp_path, split_row(32, 3, 2, False) + split_row(32, 4, 8, False))
    _, bwd = tb.schedule(make_spec(heads_q=6, heads_kv=2), target)  # G = 3: the first row, 2 -> 1
    assert bwd.choice()["group_split"] == 1 and "reduced to 1" in bwd.choice()["group_split_source"]
    _, bwd = tb.schedule(make_spec(heads_q=8, heads_kv=2), target)  # G = 4: the second row, 8 -> 4
    assert bwd.choice()["group_split"] == 4 and "triton.schedule[1]" in bwd.choice()["group_split_source"]
    _, bwd = tb.schedule(make_spec(heads_q=2, heads_kv=2), target)  # MHA: no row of a group applies
    assert bwd.choice()["group_split"] == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        ("group_split = 0", r"group_split = 0 is invalid; accepted: an integer from 1 to 64"),
        ("group_split = true", r"group_split = True is invalid"),
        ('heavy_first = "yes"', r"heavy_first = 'yes' is invalid; accepted: true, false"),
        ("group = 0", r"group = 0 is invalid; accepted: a positive integer"),
    ],
)
def test_bad_rows_are_refused_in_one_line(tb, tmp_path, extra, message):
    row = f'[[triton.schedule]]\nprogram = "bwd-atomic"\nhead_dim = 64\n{extra}\nsource = "x"\n'
    with pytest.raises(TargetError, match=message) as err:
        tb.schedule(make_spec(), target_with(tmp_path, row))
    assert "\n" not in str(err.value)


def test_forward_rows_take_no_group_split(tb, tmp_path):
    row = '[[triton.schedule]]\nprogram = "fwd"\nhead_dim = 32\ngroup_split = 2\nsource = "x"\n'
    with pytest.raises(TargetError, match=r"group_split is a backward knob"):
        tb.schedule(make_spec(), target_with(tmp_path, row))


def test_inspect_shows_the_emitted_split(tmp_path):
    from tilegen.harness.report import format_inspect, inspect_report
    from tilegen.backends import triton as backend

    spec = make_spec(heads_q=8, heads_kv=2, seq_q=64, seq_k=64, window=(-1, 0))
    target = target_with(tmp_path, split_row(32, 4, 2, True))
    report = inspect_report(spec, target)
    bwd = [p for p in report["programs"] if p["label"].startswith("backward")][0]
    manifest = backend.generate(spec, target).manifest
    assert bwd["emitted"]["group_split"] == 2 and bwd["emitted"]["heavy_first"] is True
    assert manifest["schedule"]["backward"] == bwd["emitted"]  # inspect shows what generate emits
    text = unwrapped(format_inspect(report))
    assert "group split: 2, heavy first" in text and "a test row" in text
    assert "launch post_kv" in text
