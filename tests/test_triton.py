"""The Triton backend and the torch entry points.

Generated kernels run in Triton's interpreter (``TRITON_INTERPRET=1``) on CPU tensors and are checked
against the float64 reference (tilegen.core.reference, DESIGN §3's rule through tests/helpers.py) on small
specs: every mask kind (none, causal with both alignments, sliding windows, rows with no visible key),
GQA, tails, padded head dims, BSND, fp16, bf16 and fp32, both dQ strategies. Outputs and workspaces are
NaN-poisoned before every run. The torch entry points' CPU path is checked against torch autograd on
a float64 reference written here. Tests that need Triton skip when it cannot be imported.

The interpreter of Triton 3.9 runs these kernels; that of Triton 3.6 does not (its scalar
``tl.minimum``/``tl.where`` results are 1-element arrays that ``range`` cannot take), while compiled
3.6 kernels run on the GPU (benchmarks/gpu_attention.py checks them there).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import math

import numpy as np
import pytest
import sympy

torch = pytest.importorskip("torch")

from helpers import assert_backward_ok, assert_forward_ok, inputs, make_spec, subnormal_p_case  # noqa: E402
from tilegen.core import dtypes  # noqa: E402
from tilegen.harness.check import compare  # noqa: E402
from tilegen.core.errors import SpecError, TargetError  # noqa: E402

try:
    import triton  # noqa: F401

    HAVE_TRITON = True
except Exception:  # pragma: no cover - an environment without triton
    HAVE_TRITON = False

needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton cannot be imported")


@pytest.fixture(scope="module")
def tb():
    if not HAVE_TRITON:
        pytest.skip("triton cannot be imported")
    # a bf16 module patches the interpreter for bf16 itself when it is imported (module.py.jinja)
    from tilegen.backends import triton as backend

    return backend


def _to_torch(x: np.ndarray) -> "torch.Tensor":
    if x.dtype == dtypes.numpy_dtype("bf16"):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x).copy())


def _to_numpy(t: "torch.Tensor") -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dtypes.numpy_dtype("bf16"))
    return t.numpy()


def _physical(x: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)) if layout == "BSND" else x


def _logical(t, layout: str):
    return t.permute(0, 2, 1, 3) if layout == "BSND" else t


def _run_module(tb, spec, strategy, tiles):
    module = tb.load(spec, dq_strategy=strategy, tile_sizes=tiles)
    data = inputs(spec, seed=3)
    q, k, v, do = (_to_torch(_physical(data[n], spec.layout)) for n in ("Q", "K", "V", "dO"))
    o, lse = module.forward(q, k, v, poison=True)
    dq, dk, dv = module.backward(q, k, v, o, lse, do, poison=True)
    return data, _to_numpy(_logical(o, spec.layout)), lse.numpy(), [_to_numpy(_logical(g, spec.layout)) for g in (dq, dk, dv)]


CASES = {
    # name: (spec fields, dq strategy, tile sizes or None for the h200 schedule)
    "none-fp16-tails": (dict(seq_q=40, seq_k=40), "atomic", (32, 32)),
    "none-fp16-separate": (dict(seq_q=40, seq_k=40), "separate", (32, 32)),
    "causal-bottom-right-bf16": (dict(seq_q=40, seq_k=72, dtype="bf16", window=(-1, 0)), "atomic", (32, 32)),
    "causal-empty-rows-separate": (dict(seq_q=72, seq_k=40, window=(-1, 0)), "separate", (32, 32)),
    "causal-top-left-bf16": (dict(seq_q=56, seq_k=40, dtype="bf16", window=(-1, 0), alignment="top_left"), "atomic", (32, 32)),
    "window-gqa-dpad-bsnd-bf16": (
        dict(heads_q=4, heads_kv=2, seq_q=48, seq_k=80, head_dim_qk=40, head_dim_v=24, dtype="bf16", window=(16, 8), layout="BSND"),
        "atomic",
        (32, 32),
    ),
    "window-gqa-separate": (dict(heads_q=4, heads_kv=2, seq_q=48, seq_k=48, window=(20, 0)), "separate", (32, 16)),
    "causal-fp32-h200-schedule": (dict(seq_q=33, seq_k=33, dtype="fp32", window=(-1, 0), heads_q=1, heads_kv=1), "atomic", None),
}


@needs_triton
@pytest.mark.parametrize("case", list(CASES))
def test_generated_kernels_match_reference(tb, case):
    fields, strategy, tiles = CASES[case]
    spec = make_spec(name=case, **fields)
    data, o, lse, grads = _run_module(tb, spec, strategy, tiles)
    assert_forward_ok(spec, o, lse, data)
    assert_backward_ok(spec, grads, data)
    if case == "causal-empty-rows-separate":  # rows 0..31 see no key: O = 0, L = -inf, dQ = 0
        assert np.all(np.asarray(o[:, :, :32], dtype=np.float32) == 0)
        assert np.all(lse[:, :, :32] == -np.inf)
        assert np.all(np.asarray(grads[0][:, :, :32], dtype=np.float32) == 0)


_BF16_CAST_CHECK = """
import os
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np, triton.language as tl
from triton.runtime import interpreter as ti
original = ti.InterpreterBuilder.create_dot
def create_dot(self, *args):  # a bf16 dot widened by other code first, with the module's marker
    return original(self, *args)
create_dot._widens_bf16 = True
ti.InterpreterBuilder.create_dot = create_dot
from tilegen.backends import triton as tb
from tilegen.core.spec import AttentionSpec
spec = AttentionSpec(batch=1, heads_q=1, heads_kv=1, seq_q=16, seq_k=16, head_dim_qk=16, head_dim_v=16, dtype="bf16")
tb.load(spec, dq_strategy="atomic", tile_sizes=(16, 16))
x = np.array([0x3F80C000, 0x3F808000, 0x3F818000], np.uint32).view(np.float32)  # above / at / at a tie
out = ti.interpreter_builder.cast_impl(ti.TensorHandle(x, tl.float32), tl.bfloat16)
print(" ".join(hex(int(u)) for u in np.asarray(out.data).view(np.uint16)))
"""


@needs_triton
def test_bf16_interpreter_cast_rounds_whatever_patched_first():
    """A bf16 module imported after other code widened the interpreter's bf16 dot (and marked it as
    the module does) still makes the fp32 → bf16 cast round to nearest even, as a GPU does. In a fresh
    process: the patch is process-wide. (A shared marker once left the cast truncating whenever another
    patch ran first, and dsinks then missed the accuracy rule by 2×, depending on test order.)"""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _BF16_CAST_CHECK], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    # nearest even: 0x3f80c000 lies above the midpoint (up); 0x3f808000 and 0x3f818000 are ties (to the even one)
    assert run.stdout.split() == ["0x3f81", "0x3f80", "0x3f82"], run.stdout


@needs_triton
@pytest.mark.parametrize("strategy", ["atomic", "separate"])
def test_ds_from_unrounded_p_in_triton(tb, strategy):
    """The subnormal-P fp16 case (helpers.subnormal_p_case; D = 72 padded to 128) through the Triton
    module: dQ, dK, dV within the rule (from P rounded to fp16 dQ and dK miss it)."""
    spec, data = subnormal_p_case(1)
    module = tb.load(spec, dq_strategy=strategy, tile_sizes=(16, 32))
    q, k, v, do = (_to_torch(data[n]) for n in ("Q", "K", "V", "dO"))
    o, lse = module.forward(q, k, v, poison=True)
    grads = module.backward(q, k, v, o, lse, do, poison=True)
    assert_backward_ok(spec, [_to_numpy(g) for g in grads], data, lse=lse.numpy())


@needs_triton
def test_autograd_function_gives_the_backward(tb):
    spec = make_spec(seq_q=24, seq_k=40, window=(-1, 0))
    module = tb.load(spec, tile_sizes=(16, 32))
    data = inputs(spec, seed=5)
    q, k, v = (_to_torch(data[n]).requires_grad_(True) for n in ("Q", "K", "V"))
    out = module.attention(q, k, v)
    out.backward(_to_torch(data["dO"]))
    assert_forward_ok(spec, _to_numpy(out), module.forward(q.detach(), k.detach(), v.detach())[1].numpy(), data)
    assert_backward_ok(spec, [_to_numpy(x.grad) for x in (q, k, v)], data)


@needs_triton
def test_generation_is_deterministic_and_maps_the_ir(tb):
    spec = make_spec(heads_q=4, heads_kv=2, seq_q=40, seq_k=72, window=(-1, 0), dtype="bf16")
    first = tb.render(spec, tile_sizes=(32, 32))
    assert first == tb.render(spec, tile_sizes=(32, 32))
    assert "tl.atomic_add(" in first and 'sem="relaxed"' in first  # Store(accumulate=True)
    assert "tl.exp2(" in first and "tl.exp(" not in first  # log2(e) folded into the scale
    assert "tl.program_id(0)" in first and "tiles the mask leaves whole" in first
    assert "tl.dot(Kj, tl.trans(Qi))" in first  # the K/V-outer nest holds Sᵀ
    assert "acc = tl.dot(Pc, Vj, acc)" in first  # PV fused into the accumulator
    separate = tb.render(spec, dq_strategy="separate", tile_sizes=(32, 32))
    assert "tl.atomic_add(" not in separate and "def dq_kernel(" in separate
    compile(first, "generated.py", "exec")


@needs_triton
def test_module_rejects_other_shapes_by_name(tb):
    spec = make_spec(seq_q=24, seq_k=24)
    module = tb.load(spec, tile_sizes=(16, 16))
    q = torch.zeros(1, 2, 25, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"q\.shape = \(1, 2, 25, 32\) is invalid"):
        module.forward(q, q, q)
    with pytest.raises(ValueError, match=r"q\.dtype = torch\.float32"):
        module.forward(q.float(), q, q)


def _eval_python(text: str, values: dict) -> int:
    return eval(text, {"min": min, "max": max}, dict(values))  # noqa: S307 - our own printed code


def test_expression_printer_matches_sympy():
    from tilegen.backends.triton import PYTHON_EXPR, TRITON_EXPR
    from tilegen.core.build import kv_tile_range, q_tile_range
    from tilegen.core.ir import Bc, Br, MaskInfo, Sk, Sq, i, j

    mask = MaskInfo(left=5, right=0, offset=Sk - Sq)
    exprs = [*kv_tile_range(mask, i), *q_tile_range(mask, j), sympy.ceiling((Sk - Sq - 7) / Bc)]
    from tilegen.core.exprs import evaluate

    rng = np.random.default_rng(0)
    printed = [PYTHON_EXPR(e) for e in exprs]
    for _ in range(300):
        values = {"Sq": int(rng.integers(1, 300)), "Sk": int(rng.integers(1, 300)), "Br": 16, "Bc": 32, "i": int(rng.integers(0, 20)), "j": int(rng.integers(0, 10))}
        for e, text in zip(exprs, printed):
            assert _eval_python(text, values) == evaluate(e, values), (text, values)
    # negative numerators go through the floor helper in kernels (Triton's // truncates)
    assert "_floor_div(" in TRITON_EXPR(sympy.floor((Sk - Sq) / Bc))
    assert TRITON_EXPR(sympy.floor((i * Br + Br - 1) / Bc)) == "((i*Br + Br - 1) // (Bc))"


def test_target_section_is_validated(tmp_path):
    from tilegen.backends.triton import triton_config
    from tilegen.core.targets import load_target

    cfg = triton_config(load_target("h200"))
    assert cfg.dq_strategy in ("atomic", "separate")
    assert all(row.source for row in cfg.rows)
    text = (load_target("h200").path and open(load_target("h200").path, encoding="utf-8").read())
    bad = tmp_path / "gpu.toml"
    bad.write_text(text.replace("main = { num_warps = 8, num_stages = 2 }", "main = { num_warps = 3, num_stages = 2 }", 1), encoding="utf-8")
    with pytest.raises(TargetError, match=r"main\.num_warps = 3 is invalid; accepted: 1, 2, 4, 8 or 16"):
        triton_config(load_target(str(bad)))


# --- tilegen.torch on the CPU (the NumPy interpreter) against torch autograd ------------------------------


def _reference(q, k, v, scale, window, alignment):
    """Dense attention in torch (float64 when given float64): BNSD, GQA by repetition, rows without a
    visible key give 0."""
    hq, hkv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    sq, sk = q.shape[2], k.shape[2]
    off = sk - sq if alignment == "bottom_right" else 0
    r = torch.arange(sq)[:, None]
    c = torch.arange(sk)[None, :]
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if window[0] >= 0:
        ok &= c >= r + off - window[0]
    if window[1] >= 0:
        ok &= c <= r + off + window[1]
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.softmax(s.float() if s.dtype != torch.float64 else s, dim=-1).nan_to_num(0.0).to(q.dtype)
    return p @ v


@pytest.mark.parametrize(
    "api,dtype,causal,window,heads",
    [
        ("flash", torch.float16, True, (-1, -1), (4, 2)),
        ("flash", torch.bfloat16, False, (8, 4), (2, 2)),
        ("sdpa", torch.float16, True, (-1, -1), (4, 1)),
        ("sdpa", torch.float32, False, (-1, -1), (2, 2)),
    ],
)
def test_torch_entry_points_on_cpu_match_autograd(api, dtype, causal, window, heads):
    import tilegen.torch as tt

    hq, hkv = heads
    gen = torch.Generator().manual_seed(7)
    b, sq, sk, d = 1, 24, 40, 16
    q, k, v, do = (torch.randn(b, h, s, d, generator=gen).to(dtype) for h, s in ((hq, sq), (hkv, sk), (hkv, sk), (hq, sq)))
    scale = 1 / math.sqrt(d)
    if api == "flash":
        args = [x.transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v)]
        out = tt.flash_attn_func(*args, causal=causal, window_size=window)
        out_bnsd = out.transpose(1, 2)
        grads_of = lambda: [a.grad.transpose(1, 2) for a in args]  # noqa: E731
        eff_window, alignment = ((window[0], 0) if causal else window), "bottom_right"
    else:
        args = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out_bnsd = tt.scaled_dot_product_attention(*args, is_causal=causal, enable_gqa=hkv != hq)
        grads_of = lambda: [a.grad for a in args]  # noqa: E731
        eff_window, alignment = ((-1, 0) if causal else (-1, -1)), "top_left"
    out_bnsd.backward(do)
    ours = [out_bnsd.detach(), *grads_of()]

    def grads(kind):
        xs = [x.detach().to(kind).requires_grad_(True) for x in (q, k, v)]
        o = _reference(*xs, scale, eff_window, alignment)
        o.backward(do.to(kind))
        return [o.detach(), *(x.grad for x in xs)]

    ref = grads(torch.float64)
    plain = grads(dtype)
    name = dtypes.name_of(np.dtype(np.float32)) if dtype == torch.float32 else ("fp16" if dtype == torch.float16 else "bf16")
    for label, o_, r_, p_ in zip(("O", "dQ", "dK", "dV"), ours, ref, plain):
        comp = compare(label, o_.double().numpy(), r_.numpy(), p_.double().numpy(), name)
        assert comp.ok, comp.line()


def test_torch_entry_points_name_unsupported_arguments():
    import tilegen.torch as tt

    x = torch.zeros(1, 8, 2, 16, dtype=torch.float16)
    for kwargs, name in (
        (dict(dropout_p=0.1), "dropout_p"),
        (dict(return_attn_probs=True), "return_attn_probs"),
    ):
        with pytest.raises(tt.UnsupportedArgument, match=rf"^{name} = .* is not supported; accepted: "):
            tt.flash_attn_func(x, x, x, **kwargs)
    with pytest.raises(tt.UnsupportedArgument, match=r"^attn_mask = 'Tensor' is not supported"):
        tt.scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(SpecError, match=r"window_size = \(-1, 3\) is invalid; accepted: right = -1 or 0 when causal=True"):
        tt.flash_attn_func(x, x, x, causal=True, window_size=(-1, 3))
    with pytest.raises(SpecError, match=r"k\.dtype"):
        tt.flash_attn_func(x, x.float(), x)
    with pytest.raises(SpecError, match=r"enable_gqa = False is invalid"):
        tt.scaled_dot_product_attention(torch.zeros(1, 4, 8, 16), torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16))
