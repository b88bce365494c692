"""Mask mods built from boolean logic on integer arithmetic (``//``, ``%``, comparisons of booleans,
``& | ~``), as FlexAttention users write them, traced by tilegen.mods and run by the NumPy interpreter.

Two masks of attention-gym (github.com/meta-pytorch/attention-gym) are written here as a user would,
in plain Python that runs on torch index tensors and on traced values alike: the Block Diffusion
training mask (BD3-LM, arXiv 2503.09573 §3.1; upstream ``attn_gym/masks/block_diffusion.py``,
``generate_block_diffusion_mask``) and JetSpec's multi-block draft training mask (upstream
``attn_gym/masks/jetspec.py``, ``generate_jetspec_training_mask_mod``). When the attn-gym package is
installed its own generators are checked too.

Truth, independent of sympy and of tilegen.mods: the same Python function evaluated on torch index
tensors (a dense boolean [Sq, Sk] mask), and dense float64 attention with that mask and torch autograd
(tests/mod_reference.py) for the output and dQ, dK, dV under DESIGN §3's rule. Constructs the mod
language cannot express are refused at trace time with one line naming them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilegen.torch as tt
from mod_reference import dense
from tilegen.models import analysis
from tilegen.core import mods
from tilegen.harness.check import compare
from tilegen.core.errors import SpecError
from tilegen.core.spec import AttentionSpec


# --- the masks, as a user writes them ----------------------------------------------------------------


def block_diffusion(seq_len: int, block_size: int):
    """BD3-LM's training mask over 2·seq_len positions: noised tokens x_t at [0, seq_len), clean x_0
    after. Noised attend their own block (noised), and clean blocks strictly before theirs; clean
    attend clean blocks up to their own."""

    def mask(b, h, q_idx, kv_idx):
        q_clean = q_idx >= seq_len
        kv_clean = kv_idx >= seq_len
        q_block = (q_idx % seq_len) // block_size
        kv_block = (kv_idx % seq_len) // block_size
        own_block = (q_block == kv_block) & (q_clean == kv_clean)  # == of two booleans
        earlier_clean = (q_block > kv_block) & ~q_clean & kv_clean
        clean_causal = (q_block >= kv_block) & q_clean & kv_clean
        return own_block | earlier_clean | clean_causal

    return mask


def jetspec_training(prefix_length: int, block_size: int):
    """JetSpec's draft training mask: every query sees the verified prefix, and in its own sampled
    block (keys laid out after the prefix) the anchor and the positions up to its own."""

    def mask(b, h, q_idx, kv_idx):
        rel = kv_idx - prefix_length  # negative over the prefix: floor // and % as in Python
        same_block = (q_idx // block_size) == (rel // block_size)
        causal_in_block = (rel % block_size) <= (q_idx % block_size)
        return (kv_idx < prefix_length) | ((kv_idx >= prefix_length) & same_block & causal_in_block)

    return mask


def band_parity(width: int):
    """Other boolean forms: != of booleans, where() with boolean branches, ~ over an Or."""

    def mask(b, h, q_idx, kv_idx):
        near = (q_idx - kv_idx <= width) & (kv_idx - q_idx <= width)
        parity = (q_idx % 2 == 0) != (kv_idx % 3 == 0)
        return mods.where(near, ~(parity | (kv_idx > q_idx + 1)), q_idx // 4 == kv_idx // 4)

    return mask


def _torch_where(c, a, b):
    return torch.where(c, a, b)


# (name, mask factory, Sq, Sk); band_parity's where() is tilegen.mods.where under tracing and
# torch.where on tensors (the test swaps it in).
CASES = [
    ("block-diffusion", lambda: block_diffusion(8, 4), 16, 16),
    ("block-diffusion-3", lambda: block_diffusion(12, 3), 24, 24),
    ("jetspec-training", lambda: jetspec_training(4, 4), 12, 16),
    ("jetspec-training-5", lambda: jetspec_training(3, 5), 15, 18),
    ("band-parity", lambda: band_parity(3), 16, 16),
]


def _dense_mask(fn, sq: int, sk: int) -> np.ndarray:
    """The mask by evaluating ``fn`` on torch index tensors (no sympy, no tilegen.mods)."""
    where = mods.where
    mods.where = _torch_where  # band_parity reads it at call time
    try:
        b = torch.zeros(1, 1, 1, 1, dtype=torch.int64)
        out = fn(b, b, torch.arange(sq).view(1, 1, sq, 1), torch.arange(sk).view(1, 1, 1, sk))
    finally:
        mods.where = where
    return torch.broadcast_to(out, (1, 1, sq, sk))[0, 0].numpy()


@pytest.mark.parametrize("name,make,sq,sk", CASES, ids=[c[0] for c in CASES])
def test_traced_logic_evaluates_as_the_python_mask(name, make, sq, sk):
    """The traced expression evaluated by the interpreter's NumPy path, and again after the text round
    trip of the spec (to_text -> parse), equals the dense mask element by element."""
    fn = make()
    want = _dense_mask(fn, sq, sk)
    assert want.any(axis=1).all() and not want.all(), name  # every row sees a key; not the trivial mask
    expr = mods.trace(fn, "mask").expr
    sizes = {"B": 1, "Hq": 1, "Hkv": 1, "Sq": sq, "Sk": sk}
    grid = dict(q_idx=np.arange(sq).reshape(-1, 1), kv_idx=np.arange(sk).reshape(1, -1), sizes=sizes, params={})
    assert np.array_equal(np.broadcast_to(mods.evaluate(expr, **grid), (sq, sk)), want)
    again = mods.parse(mods.to_text(expr), "mask", {})
    assert np.array_equal(np.broadcast_to(mods.evaluate(again, **grid), (sq, sk)), want)


@pytest.mark.parametrize("name,make,sq,sk", CASES, ids=[c[0] for c in CASES])
def test_block_classes_of_logic_masks(name, make, sq, sk):
    """The compile-time tile classes (empty / partial / full on 4 x 4 tiles) equal those of the dense
    mask (a tile past Sq or Sk is never full: its padding is not visible): the analysis' three-valued
    logic takes the traced expression."""
    fn = make()
    br = bc = 4
    nq, nk = -(-sq // br), -(-sk // bc)
    padded = np.zeros((nq * br, nk * bc), dtype=bool)
    padded[:sq, :sk] = _dense_mask(fn, sq, sk)
    classes = analysis.block_classes(mods.ModSet(mask=mods.trace(fn, "mask").expr), sizes={"B": 1, "Hq": 1, "Hkv": 1, "Sq": sq, "Sk": sk},
                                     window=(-1, -1), offset=0, br=br, bc=bc)
    tiles = padded.reshape(nq, br, nk, bc).transpose(0, 2, 1, 3).reshape(nq, nk, -1)
    expected = np.where(tiles.all(-1), 2, np.where(tiles.any(-1), 1, 0))
    assert np.array_equal(classes.table.reshape(nq, nk), expected)


def _attention_check(fn, sq, sk, seed=0):
    """tilegen.torch's SDPA with ``mask_mod=fn`` (CPU: the interpreter), forward and backward, against
    dense float64 attention with the dense mask (torch autograd)."""
    g = torch.Generator().manual_seed(seed)
    b, hq, hkv, d = 1, 2, 1, 16
    q, do = (torch.randn(b, hq, sq, d, generator=g) for _ in range(2))
    k, v = (torch.randn(b, hkv, sk, d, generator=g) for _ in range(2))
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = tt.scaled_dot_product_attention(*leaves, mask_mod=fn, enable_gqa=True)
    out.backward(do)
    vis = torch.from_numpy(_dense_mask(fn, sq, sk))
    kw = dict(scale=d ** -0.5, mask_fn=lambda bi, hi, qi, ki: vis.view(1, 1, sq, sk))
    o_ref, _, g_ref = dense(q.numpy(), k.numpy(), v.numpy(), do.numpy(), **kw)
    o_pl, _, g_pl = dense(q.numpy(), k.numpy(), v.numpy(), do.numpy(), dtype="fp32", **kw)
    for label, ours, ref, plain in [("out", out, o_ref, o_pl)] + [(n, x.grad, g_ref[n], g_pl[n]) for n, x in zip(("dQ", "dK", "dV"), leaves)]:
        comp = compare(label, ours.detach().numpy().astype(np.float64), ref, plain, "fp32", terms=sq * sk)
        assert comp.ok, comp.line()


@pytest.mark.parametrize("name,make,sq,sk", CASES[::2], ids=[c[0] for c in CASES[::2]])
def test_attention_with_logic_masks(name, make, sq, sk):
    _attention_check(make(), sq, sk)


def test_attention_gym_generators():
    """attention-gym's own generators, when the package is installed: the traced mask against the
    dense one, and the attention against the float64 reference."""
    pytest.importorskip("attn_gym")
    from attn_gym.masks.block_diffusion import generate_block_diffusion_mask
    from attn_gym.masks.jetspec import generate_jetspec_training_mask_mod

    for fn, sq, sk in ((generate_block_diffusion_mask(8, 4), 16, 16), (generate_jetspec_training_mask_mod(4, 4), 12, 16)):
        want = _dense_mask(fn, sq, sk)
        got = mods.evaluate(mods.trace(fn, "mask").expr, q_idx=np.arange(sq).reshape(-1, 1), kv_idx=np.arange(sk).reshape(1, -1),
                            sizes={"Sq": sq, "Sk": sk}, params={})
        assert np.array_equal(np.broadcast_to(got, (sq, sk)), want), fn.__name__
        _attention_check(fn, sq, sk, seed=1)


# --- what the language cannot express: one line at trace time ---------------------------------------


REFUSED = [
    ("tensor method", lambda b, h, q, k: q.cumsum(0) >= k, r"torch operations tilegen expresses or tilegen.mods helpers: .* \(at Tensor.cumsum\)$"),
    ("boolean times a number", lambda b, h, q, k: (q < 8) * 2 >= k, r"numbers as operands of \*"),
    ("boolean == number", lambda b, h, q, k: (q < 8) == 1, r"booleans on both sides of ==, or numbers on both sides"),
    ("boolean != number", lambda b, h, q, k: (q < 8) != 0, r"booleans on both sides of !=, or numbers on both sides"),
    ("ordering of booleans", lambda b, h, q, k: (q < 8) < (k < 8), r"numbers as operands of <"),
    ("negated boolean", lambda b, h, q, k: -(q < 8) < k, r"numbers as operands of unary -"),
    ("modulo by zero", lambda b, h, q, k: q % 0 == k, r"a non-zero divisor of %"),
    ("division by zero", lambda b, h, q, k: q // 0 == k, r"a non-zero divisor of //"),
    ("where of a boolean and a number", lambda b, h, q, k: mods.where(q < 8, k < 3, 1), r"booleans on both sides of where's two branches"),
    ("maximum of a boolean", lambda b, h, q, k: mods.maximum(q < 8, k) > 0, r"numbers as operands of maximum \(.*\) \(at \(q_idx < 8\) maximum \(kv_idx\)\)$"),
]


@pytest.mark.parametrize("what,fn,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_inexpressible_constructs_are_refused_at_trace_time(what, fn, message):
    with pytest.raises(mods.ModError, match=r"^mask_mod = '<lambda>' is invalid; accepted: .*" + message) as exc:
        mods.trace(fn, "mask")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("(q_idx < 8) == 1", "booleans on both sides of ==, or numbers on both sides"),
        ("(q_idx < 8) < (kv_idx < 8)", "numbers on both sides of < <= > >="),
        ("Eq(q_idx < 8, 2)", "booleans on both sides of ==, or numbers on both sides"),
        ("(q_idx < 8) * 2 > kv_idx", r"numbers as operands of \*"),
        ("q_idx % 0 == kv_idx", "a non-zero divisor of %"),
        ("-(q_idx < 8) < kv_idx", "numbers as operands of unary -"),
    ],
)
def test_inexpressible_constructs_in_spec_text_are_one_line(text, message):
    with pytest.raises(SpecError, match=message) as exc:
        AttentionSpec(1, 1, 1, 8, 8, 16, 16, mask_mod=text)
    assert "\n" not in str(exc.value)


def test_boolean_equality_in_spec_text_evaluates():
    """``==`` and ``!=`` of comparisons in a spec's mask text, and Eq/Ne spelled as calls."""
    sq = sk = 12
    grid = dict(q_idx=np.arange(sq).reshape(-1, 1), kv_idx=np.arange(sk).reshape(1, -1), sizes={"Sq": sq, "Sk": sk}, params={})
    qi, ki = np.arange(sq).reshape(-1, 1), np.arange(sk).reshape(1, -1)
    for text, want in [
        ("(q_idx < 6) == (kv_idx < 6)", (qi < 6) == (ki < 6)),
        ("Ne(q_idx % 2 == 0, kv_idx % 2 == 0) | (q_idx == kv_idx)", ((qi % 2 == 0) != (ki % 2 == 0)) | (qi == ki)),
        ("(kv_idx <= q_idx) if (q_idx // 4 == kv_idx // 4) else (kv_idx < 2)", np.where(qi // 4 == ki // 4, ki <= qi, ki < 2)),
    ]:
        got = mods.evaluate(mods.parse(text, "mask", {}), **grid)
        assert np.array_equal(np.broadcast_to(got, (sq, sk)), np.broadcast_to(want, (sq, sk))), text
