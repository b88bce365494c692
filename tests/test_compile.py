"""tilegen's torch custom ops under torch.library.opcheck and torch.compile.

- ``torch.library.opcheck`` on ``tilegen::attention_fwd`` / ``tilegen::attention_bwd``: schema, fake
  (meta) implementations against the real outputs' shapes, dtypes and strides, the autograd registration,
  and AOT dispatch with dynamic shapes.
- A two-layer attention model (Linear projections, residuals, one ``scaled_dot_product_attention``
  layer, causal, and one ``flash_attn_func`` layer, GQA and a sliding window) compiled with
  ``fullgraph=True`` (a graph break would raise), once through Inductor and once through ``aot_eager``.
  Its output and parameter gradients are judged by DESIGN §3's rule against the same model in float64
  with torch's own SDPA (math kernel, explicit boolean mask) and torch autograd; fp32 torch is the
  "plain" baseline of the rule.
- ``torch._dynamo.explain`` counts one graph, no break; the compiled graph holds the two custom ops.
- A second derivative raises tilegen's one-line error, not torch's generic one.

Everything runs the NumPy interpreter on CPU; the CUDA cases skip without a GPU.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import tilegen.torch as tt  # noqa: E402
from tilegen.harness.check import compare  # noqa: E402
from tilegen.core.errors import SpecError  # noqa: E402

# --- opcheck ---------------------------------------------------------------------------------------


def _tensors(shapes, dtype, device="cpu", seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen).to(dtype=dtype, device=device).requires_grad_(grad) for s in shapes]


OP_CASES = [
    # layout, (B, Hq, Hkv, Sq, Sk, D, Dv), scale, window, alignment, dq_strategy
    ("BNSD", (1, 2, 2, 8, 8, 16, 16), None, (-1, 0), "top_left", None),
    ("BSND", (1, 4, 2, 6, 10, 8, 12), 0.3, (3, 1), "bottom_right", "separate"),
]


def _shapes(layout, dims):
    b, hq, hkv, sq, sk, d, dv = dims
    if layout == "BSND":
        return (b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv), (b, sq, hq, dv)
    return (b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, dv), (b, hq, sq, dv)


DEVICES = [
    pytest.param(("cpu", torch.float32), id="cpu-fp32"),
    pytest.param(
        ("cuda", torch.float16),
        id="cuda-fp16",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,dims,scale,window,alignment,dq", OP_CASES)
def test_opcheck_forward_op(layout, dims, scale, window, alignment, dq, device):
    q, k, v, _ = _tensors(_shapes(layout, dims), device[1], device[0], grad=True)
    args = (q, k, v, layout, scale, window[0], window[1], alignment, dq, "h200", "", "", "", [])
    torch.library.opcheck(torch.ops.tilegen.attention_fwd.default, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,dims,scale,window,alignment,dq", OP_CASES)
def test_opcheck_backward_op(layout, dims, scale, window, alignment, dq, device):
    q, k, v, do = _tensors(_shapes(layout, dims), device[1], device[0])
    scalars = (layout, scale, window[0], window[1], alignment, dq, "h200", "", "", "", [])
    out, lse = torch.ops.tilegen.attention_fwd(q, k, v, *scalars)
    do = do.transpose(1, 2).contiguous().transpose(1, 2)  # a strided dout, as autograd may pass
    torch.library.opcheck(torch.ops.tilegen.attention_bwd.default, (q, k, v, out, lse, do, *scalars))


# --- a small model ---------------------------------------------------------------------------------


class Attention(torch.nn.Module):
    """x [B, S, E] → x + Wo·attention(Wq x, Wk x, Wv x); ``kind`` picks the entry point and the mask:
    ``"sdpa"``: BNSD, causal, Hkv = Hq; ``"flash"``: BSND, GQA (Hkv = Hq/2), window (2, 1)."""

    WINDOW = (2, 1)

    def __init__(self, embed, heads, kind):
        super().__init__()
        self.heads, self.kv_heads, self.kind = heads, (heads if kind == "sdpa" else heads // 2), kind
        self.d = embed // heads
        self.wq = torch.nn.Linear(embed, heads * self.d)
        self.wkv = torch.nn.Linear(embed, 2 * self.kv_heads * self.d)
        self.wo = torch.nn.Linear(heads * self.d, embed)

    def forward(self, x, impl):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.d)
        k, v = self.wkv(x).view(b, s, 2, self.kv_heads, self.d).unbind(2)
        if self.kind == "sdpa":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # BNSD views, not contiguous
            if impl == "tilegen":
                o = tt.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            o = o.transpose(1, 2)
        elif impl == "tilegen":
            o = tt.flash_attn_func(q, k, v, window_size=self.WINDOW)
        else:
            r = torch.arange(s, device=x.device)[:, None]
            c = torch.arange(s, device=x.device)[None, :]
            mask = (c >= r - self.WINDOW[0]) & (c <= r + self.WINDOW[1])
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            o = o.transpose(1, 2)
        return x + self.wo(o.reshape(b, s, -1))


class Model(torch.nn.Module):
    def __init__(self, embed=32, heads=4, impl="tilegen"):
        super().__init__()
        self.impl = impl
        self.layers = torch.nn.ModuleList([Attention(embed, heads, "sdpa"), Attention(embed, heads, "flash")])

    def forward(self, x):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x, self.impl))
        return x


def _run_model(fn, model, x):
    """(output, {parameter name: gradient of model}) of sum(fn(x) · w) for a fixed w."""
    model.zero_grad(set_to_none=True)
    out = fn(x)
    w = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype, device=out.device).view_as(out)
    (out * w).sum().backward()
    return out.detach(), {n: p.grad.detach() for n, p in model.named_parameters()}


def _check_against_torch(compiled, device="cpu"):
    """Run ``compiled`` (a compiled fp32 tilegen Model on ``device``) and judge its output and gradients
    against torch float64 and fp32 models with the same weights."""
    torch.manual_seed(0)
    ours_model = Model().to(device)
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(1)).to(device)

    def torch_model(dtype):
        m = Model(impl="torch").to(dtype)
        m.load_state_dict({n: p.detach().cpu().to(dtype) for n, p in ours_model.state_dict().items()})
        return m

    ours = _run_model(compiled(ours_model), ours_model, x)
    ref_model, plain_model = torch_model(torch.float64), torch_model(torch.float32)
    ref = _run_model(ref_model, ref_model, x.cpu().double())
    plain = _run_model(plain_model, plain_model, x.cpu())
    checks = [("out", ours[0], ref[0], plain[0])]
    checks += [(f"d{n}", ours[1][n], ref[1][n], plain[1][n]) for n in ref[1]]
    for name, o_, r_, p_ in checks:
        comp = compare(name, o_.cpu().double().numpy(), r_.numpy(), p_.double().numpy(), "fp32", terms=64)
        assert comp.ok, comp.line()


@pytest.mark.slow
def test_inductor_fullgraph_model_matches_torch():
    """torch.compile(model, fullgraph=True) with Inductor: no graph break, output and gradients right."""
    torch._dynamo.reset()
    _check_against_torch(lambda m: torch.compile(m, fullgraph=True))


def test_aot_eager_fullgraph_model_matches_torch():
    torch._dynamo.reset()
    _check_against_torch(lambda m: torch.compile(m, fullgraph=True, backend="aot_eager"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_aot_eager_fullgraph_model_matches_torch():
    torch._dynamo.reset()
    _check_against_torch(lambda m: torch.compile(m, fullgraph=True, backend="aot_eager"), device="cuda")


def test_dynamo_sees_one_graph_holding_the_custom_ops():
    """One graph, no break, and the attention calls are the custom ops: dynamo does not trace the
    interpreter (before the ops it broke the graph there, then failed inside it)."""
    torch._dynamo.reset()
    model = Model()
    x = torch.randn(1, 6, 32)
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    targets = [str(n.target) for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert targets.count("tilegen.attention_fwd.default") == 2, targets


def test_second_derivative_raises_tilegen_error():
    q, k, v = _tensors([(1, 2, 4, 8)] * 3, torch.float32, grad=True)
    out = tt.scaled_dot_product_attention(q, k, v, is_causal=True)
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match=r"^tilegen attention has no second derivative"):
        torch.autograd.grad(dq.pow(2).sum(), q)


def test_entry_point_errors_under_compile():
    """A bad argument raises the same named SpecError when the call is compiled (without fullgraph:
    under fullgraph=True dynamo refuses any raise in traced code, a torch rule)."""
    torch._dynamo.reset()
    x = torch.zeros(1, 8, 2, 16)
    f = torch.compile(lambda a, b: tt.flash_attn_func(a, b, b), backend="aot_eager")
    with pytest.raises(SpecError, match=r"^k\.dtype = 'torch\.float64' is invalid; accepted: torch\.float16"):
        f(x, x.double())
    assert math.isfinite(float(f(x, x).sum()))


def test_dynamic_shapes_compile_once():
    """dynamic=True: no recompilation for a second sequence length (the fake implementations take symbolic
    sizes); output and dq judged against torch float64 autograd with its SDPA math kernel."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda q, k, v: tt.flash_attn_func(q, k, v, causal=True), backend=counter, fullgraph=True, dynamic=True)
    frames = []
    for s in (8, 13):
        q, k, v = _tensors([(1, s, 2, 16)] * 3, torch.float32, seed=s, grad=True)
        out = f(q, k, v)
        out.sum().backward()
        frames.append(counter.frame_count)
        results = {}
        for dtype in (torch.float64, torch.float32):
            xs = [x.detach().to(dtype).transpose(1, 2).requires_grad_(True) for x in (q, k, v)]
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                o = torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=True)
            o.sum().backward()
            results[dtype] = (o.detach().transpose(1, 2), xs[0].grad.transpose(1, 2))
        for name, ours, ref, plain in zip(("out", "dq"), (out.detach(), q.grad), results[torch.float64], results[torch.float32]):
            comp = compare(name, ours.double().numpy(), ref.numpy(), plain.double().numpy(), "fp32", terms=s)
            assert comp.ok, comp.line()
    assert frames[1] == frames[0], f"recompiled for the second length: {frames}"
