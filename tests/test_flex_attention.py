"""tilegen.torch.flex_attention: torch's FlexAttention API on tilegen's kernels, with attention-gym's
mods and BlockMasks (issue 37, parts 1 and 4).

Truth:

(a) ``tests/mod_reference.dense`` in float64, fed the SAME Python mods evaluated by torch on real tensors
    (``torch.func.vmap`` over b, h, q_idx, kv_idx, as FlexAttention applies them) and the BlockMask's
    block structure read here with Python loops over its lists (:func:`visible`): a key is visible in a
    full block, in a partial block where mask_mod says so, nowhere else (the semantics of torch's
    compiled kernels; ``torch.compile(flex_attention)`` on CPU gave the same output as this reading, to
    4e-7, for a BlockMask whose full blocks mask_mod rejects and whose unlisted blocks mask_mod accepts,
    with a tail block: too slow to compile in CI). Softmax in float64, dq/dk/dv and the gradients of
    captured tensors that require grad by torch autograd. Judged by DESIGN §3's accuracy rule
    (``tilegen.harness.check.compare``): the error of tilegen's result must not exceed twice that of
    the plain same-precision implementation (``dense(dtype=...)``: fp32 arithmetic, P and dS rounded
    to the dtype where they feed a matmul) plus an ulp of the dtype at the reference's scale; for bf16
    that is bf16's own ulp (2^-8) at max|ref|, the rounding of the output itself.
(b) For the forward, torch's own ``flex_attention`` on CPU (its eager implementation,
    ``_math_attention``, called without dynamo through torch's ``_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG``
    switch: the same code torch's eager path runs, without dynamo's tracing time): out and lse judged
    against the float64 reference with torch's result as the plain implementation of the rule, and the
    rows torch leaves empty (lse −inf) exactly ours. torch's eager path reads mask_mod alone, so for a
    BlockMask whose structure disagrees with its mask_mod torch is given the mask of (a) as its
    mask_mod instead.

Every mask generator attention-gym exports runs through ``create_block_mask`` (built by torch on CPU,
block sizes 16 or 32 so that the sequences hold several blocks and a tail block), every score-mod
generator with or without a mask, and attention-gym's BlockMask builders that call
``BlockMask.from_kv_blocks`` (``create_causal_block_mask_fast``, ``create_vsa_block_mask`` with and
without ``variable_block_sizes``, ``create_vsa_flash_block_mask``), plus a hand-made
``from_kv_blocks`` mask with full and partial blocks whose mask_mod disagrees with the blocks (the test
fails if the structure is ignored: :func:`test_block_structure_decides`), and user combinations
(softcap + sliding window, ALiBi + documents, a learned bias table + causal, GQA, Sq != Sk). Shapes are
small (B 1-2, H 2, head dim 16, 64-160 tokens, odd lengths where the generator allows), tiles forced to
16 or 32 through ``kernel_options``.

==========================================  =====================================================
attention-gym export                        status
==========================================  =====================================================
causal_mask, batchify_mask_mod,             run (create_block_mask)
generate_block_diffusion_mask,
generate_dilated_sliding_window,
generate_doc_mask_mod,
generate_packed_causal_doc_mask_mod,
generate_vision_cross_attention_mask_mod,
generate_global_sliding_window,
generate_jetspec_tree_causal_mask_mod,
generate_jetspec_training_mask_mod,
generate_natten, generate_tiled_natten,
generate_morton_natten,
generate_prefix_lm_mask,
generate_shared_prefix_mask_mod,
generate_sliding_window,
generate_sta_mask_mod_2d / _3d,
generate_spatial_head_mask_mod,
generate_temporal_head_mask_mod,
generate_vsa_mask_mod
create_causal_block_mask_fast,              run (BlockMask.from_kv_blocks, full and partial
create_vsa_block_mask,                      blocks; VSA's plain mask has no mask_mod, torch's
create_vsa_flash_block_mask                 noop_mask)
generate_tanh_softcap                       runs; ``approx=True`` refused (a custom op, approx.tanh)
generate_alibi_bias, generate_sandwich_bias,
generate_activation_score_mod,              run; the Graphormer tables and MLA's RoPE tensors get
generate_graphormer_spatial_bias /          their gradients (requires_grad)
_edge_bias, generate_mla_rope_score_mod
==========================================  =====================================================

The Triton backend (Triton's interpreter, ``TRITON_INTERPRET=1``, on CPU tensors; its cases take
seconds each) runs a representative subset, forward and backward: NATTEN with a broadcast BlockMask
whose blocks hold whole tiles (the module's mask is mask_mod alone, the classes come from the
BlockMask), the disagreeing ``from_kv_blocks`` mask on tiles that span several blocks with tail
tiles (the mask reads the class table; tile classes aggregated over the blocks), and VSA with
variable blocks and a learned bias table; the class tables are passed as the module's ``blocks=``.

Refusals, each one line naming the argument (:data:`REFUSED`): a block_mask that is not a BlockMask,
one of other lengths, batch or heads, the stub mask_mod of a sliced BlockMask, a kernel option that is
unknown, of the wrong type, not a power of two or without its pair, max_scores, return_lse with
return_aux, GQA without enable_gqa, float64 tensors, a custom op in a score_mod; a gradient through lse
is refused in backward.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
attn_gym = pytest.importorskip("attn_gym")

import torch.nn.attention.flex_attention as FA
import torch.nn.functional as F
from attn_gym import masks as AM
from attn_gym import mods as AS
from attn_gym.masks.causal import create_causal_block_mask_fast
from attn_gym.masks.document_mask import length_to_offsets
from mod_reference import dense, graphormer_inputs, mask_grid, score_grid, seeded_table

import tilegen.torch as tt
from tilegen.core.errors import SpecError, UnsupportedArgument
from tilegen.harness.check import compare, lse_rel_floor
from tilegen.torch import flex, plans

D = 16


@pytest.fixture(autouse=True)
def _torch_eager_math(monkeypatch):
    """torch's flex_attention without dynamo (its eager math, as (b) in the module docstring says)."""
    monkeypatch.setattr(FA, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)
    warnings.filterwarnings("ignore", message=".*return_lse is deprecated.*")


def _tiles(t):
    """kernel_options forcing Br × Bc = t × t (or the pair t) in both programs."""
    br, bc = (t, t) if isinstance(t, int) else t
    return {"BLOCK_M": br, "BLOCK_N": bc, "BLOCK_M1": br, "BLOCK_N1": bc}


def _qkv(b, hq, hkv, sq, sk, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    x = [torch.randn(b, h, s, D, generator=gen, dtype=torch.float64) for h, s in ((hq, sq), (hkv, sk), (hkv, sk), (hq, sq))]
    return [t.to(dtype) for t in x]  # q, k, v, do in the dtype (the reference reads these values)


def visible(block_mask, mask_mod, b, h, sq, sk):
    """bool [B, H, Sq, Sk]: the BlockMask read with Python loops over its lists (full blocks visible,
    partial blocks where mask_mod holds, nothing else), mask_mod materialised by vmap."""
    grid = torch.ones(b, h, sq, sk, dtype=torch.bool) if mask_mod is None else mask_grid(mask_mod, b, h, sq, sk).expand(b, h, sq, sk)
    out = torch.zeros(b, h, sq, sk, dtype=torch.bool)
    bsq, bsk = block_mask.BLOCK_SIZE
    lists = [(block_mask.kv_num_blocks, block_mask.kv_indices, False)]
    if block_mask.full_kv_num_blocks is not None:
        lists.append((block_mask.full_kv_num_blocks, block_mask.full_kv_indices, True))
    for bi in range(b):
        for hi in range(h):
            for r in range(math.ceil(sq / bsq)):
                rows = slice(r * bsq, min((r + 1) * bsq, sq))
                for num, idx, full in lists:
                    nb, nh = (bi if num.shape[0] > 1 else 0), (hi if num.shape[1] > 1 else 0)
                    for c in idx[nb, nh, r, : int(num[nb, nh, r])].tolist():
                        cols = slice(c * bsk, min((c + 1) * bsk, sk))
                        out[bi, hi, rows, cols] = True if full else grid[bi, hi, rows, cols]
    return out


def _judge(name, ours, ref, plain, dtype, terms, rel_floor=0.0):
    ours = ours.detach().float().numpy() if isinstance(ours, torch.Tensor) else ours
    comp = compare(name, np.asarray(ours, dtype=np.float64), ref, plain, dtype, terms=terms, rel_floor=rel_floor)
    assert comp.ok, comp.line()


def check(score_mod=None, block_mask=None, *, b=1, hq=2, hkv=None, sq, sk, tiles=32, dtype="fp32", seed=0, tables=None, gen=None,
          torch_mask=None):
    """Run tilegen.torch.flex_attention forward and backward and judge out, lse, dq, dk, dv (and the
    gradients of ``tables``, the captured tensors ``gen(tables)`` builds the score_mod from) against
    (a) and out, lse against (b) of the module docstring. ``torch_mask``: what torch's eager path is
    given as its mask_mod in place of the BlockMask's (None: the BlockMask as it is)."""
    hkv = hkv or hq
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    q, k, v, do = _qkv(b, hq, hkv, sq, sk, seed, tdt)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    tparams = {n: t.clone().float().requires_grad_(True) for n, t in (tables or {}).items()}
    if gen is not None:
        score_mod = gen(tparams)
    out, lse = tt.flex_attention(*leaves, score_mod=score_mod, block_mask=block_mask, enable_gqa=hkv != hq, return_lse=True,
                                 kernel_options=_tiles(tiles))
    out.backward(do)
    assert out.dtype == tdt and out.shape == (b, hq, sq, D) and lse.dtype == torch.float32 and lse.shape == (b, hq, sq)
    mm = None if block_mask is None or block_mask.mask_mod is FA.noop_mask else block_mask.mask_mod
    vis = None if block_mask is None else visible(block_mask, mm, b, hq, sq, sk)
    if gen is not None:
        def score_fn(s, bi, hi, i, j, **t):
            return score_grid(gen(t))(s, bi, hi, i, j)
    else:
        score_fn = None if score_mod is None else score_grid(score_mod)
    kw = {"scale": D**-0.5, "score_fn": score_fn, "mask_fn": None if vis is None else (lambda *a, **_: vis),
              "params": {n: t.detach().double().numpy() for n, t in (tables or {}).items()}}
    x64 = [x.double().numpy() for x in (q, k, v, do)]
    o_ref, l_ref, g_ref = dense(*x64, **kw)
    o_pl, l_pl, g_pl = dense(*x64, dtype=dtype, **kw)
    n = max(sq, sk, D)
    _judge("O", out, o_ref, o_pl, dtype, n)
    _judge("L", lse, l_ref, l_pl, "fp32", n)
    floor = lse_rel_floor(l_ref)
    for name, x in zip(("dQ", "dK", "dV"), leaves):
        _judge(name, x.grad, g_ref[name], g_pl[name], dtype, n, floor)
    for name, t in tparams.items():
        assert t.grad is not None and t.grad.shape == t.shape, name
        _judge("d" + name, t.grad, g_ref["d" + name], g_pl["d" + name], dtype, sq * sk, floor)
    # (b): torch's own flex_attention on CPU, forward
    tbm = block_mask
    if torch_mask is not None:
        tbm = FA.create_block_mask(torch_mask, b, hq, sq, sk, device="cpu", BLOCK_SIZE=block_mask.BLOCK_SIZE)
    with torch.no_grad():
        ot, lt = FA.flex_attention(q, k, v, score_mod=score_mod, block_mask=tbm, enable_gqa=hkv != hq, return_lse=True)
    assert torch.equal(torch.isinf(lse), torch.isinf(lt)), "rows without a visible key differ from torch's"
    _judge("O~torch", out, o_ref, ot.double().numpy(), dtype, n)
    _judge("L~torch", lse, l_ref, lt.double().numpy(), "fp32", n)
    return out, lse


def _bm(mask_mod, b, h, sq, sk, bs):
    return FA.create_block_mask(mask_mod, b, h, sq, sk, device="cpu", BLOCK_SIZE=bs)


def _offsets(lengths):
    return length_to_offsets(lengths, "cpu")


def _ancestors(n):
    parents = [-1] + [(i - 1) // 2 for i in range(1, n)]  # a binary tree
    return AM.build_tree_ancestor_matrix(parents, device="cpu")


def _topk(b, h, q_tiles, kv_tiles, k, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(kv_tiles, generator=gen)[:k] for _ in range(b * h * q_tiles)]).view(b, h, q_tiles, k)


DOCS = [17, 30, 9, 15]  # 71 tokens in 4 documents

# (id, mask generator call, B, H, Sq, Sk, BLOCK_SIZE)
MASKS = [
    ("causal", lambda: AM.causal_mask, 1, 2, 77, 77, 16),
    ("batchify", lambda: AM.batchify_mask_mod(AM.causal_mask, 20), 1, 2, 77, 77, 32),
    ("block_diffusion", lambda: AM.generate_block_diffusion_mask(32, 8), 1, 2, 64, 64, 16),
    ("dilated_sliding_window", lambda: AM.generate_dilated_sliding_window(8, 2), 1, 2, 71, 71, 16),
    ("doc_mask", lambda: AM.generate_doc_mask_mod(AM.causal_mask, _offsets(DOCS)), 1, 2, 71, 71, 16),
    ("packed_causal_doc", lambda: AM.generate_packed_causal_doc_mask_mod(_offsets(DOCS)), 2, 2, 71, 71, 32),
    ("vision_cross_attention", lambda: AM.generate_vision_cross_attention_mask_mod(torch.tensor([[0, 30], [25, 60]]), 24), 1, 2, 71, 48, 16),
    ("global_sliding_window", lambda: AM.generate_global_sliding_window(6, torch.arange(69) % 23 == 0), 1, 2, 69, 69, 16),
    ("jetspec_tree_causal", lambda: AM.generate_jetspec_tree_causal_mask_mod(49, _ancestors(20)), 1, 2, 20, 69, 16),
    ("jetspec_training", lambda: AM.generate_jetspec_training_mask_mod(21, 16), 1, 2, 48, 69, 16),
    ("natten", lambda: AM.generate_natten(9, 7, 5, 3), 1, 2, 63, 63, 16),
    ("tiled_natten", lambda: AM.generate_tiled_natten(8, 8, 5, 3, 4, 4), 1, 2, 64, 64, 32),
    ("morton_natten", lambda: AM.generate_morton_natten(8, 8, 5, 3), 1, 2, 64, 64, 16),
    ("prefix_lm", lambda: AM.generate_prefix_lm_mask(27), 1, 2, 71, 71, 16),
    ("shared_prefix", lambda: AM.generate_shared_prefix_mask_mod(_offsets(DOCS), torch.tensor([0, 0, 2, 2])), 1, 2, 71, 71, 16),
    ("sliding_window", lambda: AM.generate_sliding_window(20), 1, 2, 77, 77, 16),
    ("sta_2d", lambda: AM.generate_sta_mask_mod_2d((8, 8), (4, 4), (4, 4), text_seq_len=5), 1, 2, 69, 69, 16),
    ("sta_3d", lambda: AM.generate_sta_mask_mod_3d((2, 8, 4), (2, 4, 2), (1, 4, 2), text_seq_len=3), 1, 2, 67, 67, 16),
    ("svg_spatial", lambda: AM.generate_spatial_head_mask_mod(prompt_length=5, num_frames=4, token_per_frame=16, width=1, round_width=8), 1, 2, 69, 69, 16),
    ("svg_temporal", lambda: AM.generate_temporal_head_mask_mod(prompt_length=5, num_frames=4, token_per_frame=16, width=2), 1, 2, 69, 69, 16),
    ("vsa", lambda: AM.generate_vsa_mask_mod(_topk(1, 2, 5, 5, 2), 16), 1, 2, 80, 80, 16),
    ("vsa_variable_blocks", lambda: AM.generate_vsa_mask_mod(_topk(1, 2, 5, 5, 3), 16, torch.tensor([16, 10, 16, 16, 12])), 1, 2, 80, 80, 32),
]


@pytest.mark.parametrize("make,b,h,sq,sk,bs", [m[1:] for m in MASKS], ids=[m[0] for m in MASKS])
def test_attention_gym_masks(make, b, h, sq, sk, bs):
    mask = make()
    grid = mask_grid(mask, b, h, sq, sk)
    assert grid.any() and not grid.all()  # a mask that selects: the test can tell it from none
    check(block_mask=_bm(mask, b, h, sq, sk, bs), b=b, hq=h, sq=sq, sk=sk)


def _spatial(t):
    adj, _ = graphormer_inputs(2, 50, 0.1)
    return AS.generate_graphormer_spatial_bias(t["table"], AS.shortest_path_distances(adj, 4))


def _edge(t):
    adj, types = graphormer_inputs(2, 50, 0.1)
    path_types, path_lengths = AS.shortest_path_edge_types(adj, types, 3)
    return AS.generate_graphormer_edge_bias(t["table"], path_types, path_lengths)


def _mla(t):
    return AS.generate_mla_rope_score_mod(t["q_rope"], t["k_rope"], 2, scale=0.5)


# (id, score generator, learnable tensors {name: shape} or None, mask (None: no BlockMask), B, Sq, Sk)
SCORES = [
    ("tanh_softcap", lambda t: AS.generate_tanh_softcap(2), None, None, 1, 77, 77),
    ("alibi", lambda t: AS.generate_alibi_bias(2), None, None, 1, 60, 77),
    ("activation_gelu", lambda t: AS.generate_activation_score_mod(F.gelu), None, AM.causal_mask, 1, 77, 77),
    ("activation_gelu_tanh", lambda t: AS.generate_activation_score_mod(lambda x: F.gelu(x, approximate="tanh")), None, AM.causal_mask, 1, 77, 77),
    ("activation_sigmoid", lambda t: AS.generate_activation_score_mod(torch.sigmoid), None, AM.causal_mask, 1, 77, 77),
    ("activation_relu", lambda t: AS.generate_activation_score_mod(F.relu), None, AM.causal_mask, 1, 77, 77),
    ("sandwich", lambda t: AS.generate_sandwich_bias(2, 80, d_bar=8), None, None, 1, 60, 77),
    ("graphormer_spatial", _spatial, {"table": (2, 5)}, AM.causal_mask, 2, 50, 50),
    ("graphormer_edge", _edge, {"table": (2, 3, 3)}, None, 2, 50, 50),
    ("mla_rope", _mla, {"q_rope": (1, 2, 77, 4), "k_rope": (1, 1, 77, 4)}, AM.causal_mask, 1, 77, 77),
]


@pytest.mark.parametrize("gen,shapes,mask,b,sq,sk", [s[1:] for s in SCORES], ids=[s[0] for s in SCORES])
def test_attention_gym_score_mods(gen, shapes, mask, b, sq, sk):
    tables = {n: seeded_table(*s, seed=20 + i) for i, (n, s) in enumerate((shapes or {}).items())}
    bm = None if mask is None else _bm(mask, None, None, sq, sk, 16)
    if shapes:
        check(block_mask=bm, b=b, sq=sq, sk=sk, tables=tables, gen=gen)
    else:
        check(gen(None), bm, b=b, sq=sq, sk=sk)


# --- BlockMasks built from kv blocks ----------------------------------------------------------------


def _ordered(dense_mask):
    """(num, indices) of a [B, H, nQ, nK] bool block table, in torch's layout (listed first)."""
    num = dense_mask.sum(-1).to(torch.int32)
    idx = torch.argsort(dense_mask.to(torch.int32), dim=-1, descending=True, stable=True).to(torch.int32)
    return num, idx


# per (Q block, K/V block): 0 absent, 1 partial, 2 full; 6 × 5 blocks of 16 over Sq = 90, Sk = 75
CLASSES = torch.tensor([
    [2, 2, 0, 1, 0],
    [1, 1, 0, 0, 2],
    [0, 2, 1, 2, 0],
    [1, 0, 2, 1, 1],
    [0, 0, 0, 0, 0],
    [2, 1, 1, 0, 2],
])


def disagreeing_mask(b=1, h=1, classes=CLASSES, bs=16, sq=90, sk=75):
    """A from_kv_blocks BlockMask whose mask_mod (causal) disagrees with its blocks: full blocks above
    the diagonal (mask_mod False there), partial blocks below it and the diagonal, absent blocks below
    (mask_mod True there), an empty Q block, tail blocks of 10 rows and 11 columns."""
    table = classes if classes.dim() == 4 else classes.expand(b, h, *classes.shape)
    kvn, kvi = _ordered(table == 1)
    fkvn, fkvi = _ordered(table == 2)
    return FA.BlockMask.from_kv_blocks(kvn, kvi, fkvn, fkvi, BLOCK_SIZE=bs, mask_mod=AM.causal_mask, seq_lengths=(sq, sk))


def _vsa_variable():
    return AM.create_vsa_block_mask(_topk(1, 2, 5, 5, 3, seed=5), 16, 5, torch.tensor([16, 10, 16, 16, 12]))


# (id, BlockMask builder, B, H, Sq, Sk)
FROM_KV_BLOCKS = [
    ("causal_fast", lambda: create_causal_block_mask_fast(None, None, 77, 77, "cpu", block_size=16), 1, 2, 77, 77),
    ("causal_fast_partial_only", lambda: create_causal_block_mask_fast(1, 2, 77, 77, "cpu", block_size=32, separate_full_blocks=False), 1, 2, 77, 77),
    ("vsa", lambda: AM.create_vsa_block_mask(_topk(1, 2, 5, 5, 2, seed=4), 16, 5), 1, 2, 80, 80),
    ("vsa_variable_blocks", _vsa_variable, 1, 2, 80, 80),
    ("vsa_flash", lambda: AM.create_vsa_flash_block_mask(_topk(2, 2, 3, 3, 2, seed=6), 32, 3, 16, torch.tensor([32, 20, 32])), 2, 2, 96, 96),
    ("disagreeing", lambda: disagreeing_mask(), 1, 2, 90, 75),
    ("disagreeing_per_head", lambda: disagreeing_mask(1, 2, torch.stack([CLASSES, CLASSES.flip(0)])[None]), 1, 2, 90, 75),
]


@pytest.mark.parametrize("make,b,h,sq,sk", [m[1:] for m in FROM_KV_BLOCKS], ids=[m[0] for m in FROM_KV_BLOCKS])
def test_from_kv_blocks_masks(make, b, h, sq, sk):
    bm = make()
    vis = visible(bm, None if bm.mask_mod is FA.noop_mask else bm.mask_mod, b, h, sq, sk)
    check(block_mask=bm, b=b, hq=h, sq=sq, sk=sk, torch_mask=lambda bi, hi, qi, ki: vis[bi, hi, qi, ki])


def test_block_structure_decides():
    """The disagreeing BlockMask differs from its mask_mod alone and from the blocks' union alone on
    many pairs, so the checks above fail if tilegen ignores its full blocks, its absent blocks or its
    mask_mod (here: tilegen's output differs from each of those readings far beyond the rule)."""
    bm = disagreeing_mask()
    vis = visible(bm, AM.causal_mask, 1, 2, 90, 75)
    causal = mask_grid(AM.causal_mask, 1, 2, 90, 75)
    union = visible(bm, None, 1, 2, 90, 75)
    assert (vis != causal).sum() > 500 and (vis != union).sum() > 500
    q, k, v, _ = _qkv(1, 2, 2, 90, 75)
    out = tt.flex_attention(q, k, v, block_mask=bm, kernel_options=_tiles(16))
    for wrong in (causal, union):
        o_wrong, _, _ = dense(*(x.double().numpy() for x in (q, k, v)), scale=D**-0.5, mask_fn=lambda *a, wrong=wrong, **_: wrong)
        assert np.abs(out.numpy() - o_wrong).max() > 0.1


# --- what users combine ----------------------------------------------------------------------------


def _bias_gen(n):
    def gen(t):
        table = t["bias"]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[h, q_idx - kv_idx + n - 1]

        return score_mod

    return gen


def _alibi_doc():
    return AS.generate_alibi_bias(4), AM.generate_doc_mask_mod(AM.causal_mask, _offsets(DOCS))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softcap_with_sliding_window(dtype):
    check(AS.generate_tanh_softcap(3), _bm(AM.generate_sliding_window(24), None, None, 77, 77, 16), sq=77, sk=77, dtype=dtype)


def test_alibi_with_documents_gqa():
    score, mask = _alibi_doc()
    check(score, _bm(mask, None, 4, 71, 71, 32), hq=4, hkv=2, sq=71, sk=71)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_learned_bias_table_with_causal(dtype):
    n = 77
    check(block_mask=_bm(AM.causal_mask, None, None, n, n, 16), sq=n, sk=n, tables={"bias": 0.5 * seeded_table(2, 2 * n - 1)}, gen=_bias_gen(n), dtype=dtype)


@pytest.mark.parametrize("case", ["natten", "doc_mask", "vsa_variable_blocks"])
def test_bf16_masks(case):
    make, b, h, sq, sk, bs = next(m[1:] for m in MASKS if m[0] == case)
    check(block_mask=_bm(make(), b, h, sq, sk, bs), b=b, hq=h, sq=sq, sk=sk, dtype="bf16")


def test_bf16_from_kv_blocks():
    bm = disagreeing_mask()
    vis = visible(bm, AM.causal_mask, 1, 2, 90, 75)
    check(block_mask=bm, sq=90, sk=75, dtype="bf16", torch_mask=lambda bi, hi, qi, ki: vis[bi, hi, qi, ki])


def test_no_block_mask_and_defaults():
    """No score_mod, no BlockMask: plain attention; return_aux=AuxRequest(lse=True) as torch."""
    q, k, v, _ = _qkv(2, 2, 2, 33, 47)
    out, aux = tt.flex_attention(q, k, v, return_aux=FA.AuxRequest(lse=True))
    ot, lt = FA.flex_attention(q, k, v, return_lse=True)
    assert aux.max_scores is None
    torch.testing.assert_close(out, ot, atol=2e-6, rtol=0)
    torch.testing.assert_close(aux.lse, lt, atol=2e-6, rtol=0)
    check(sq=33, sk=47, b=2)


# --- per-call caching -------------------------------------------------------------------------------


def test_repeated_calls_take_the_plan_and_new_block_masks_only_their_table(monkeypatch):
    """A repeated call builds no plan; a new BlockMask of the same mask_mod and shapes traces nothing
    and plans nothing (its class table alone is new); a BlockMask modified in place is read again."""
    n = 64
    q, k, v, _ = _qkv(1, 2, 2, n, n)
    bm = _bm(AM.causal_mask, None, None, n, n, 16)
    first = tt.flex_attention(q, k, v, block_mask=bm, kernel_options=_tiles(16))

    def refuse(*a, **kw):
        raise AssertionError("traced or planned again")

    from tilegen.core import mods

    trace = mods.trace

    def no_trace(fn, kind):  # a Mod passes through (the interpreter's call); a function would be traced
        return trace(fn, kind) if isinstance(fn, mods.Mod) else refuse()

    monkeypatch.setattr(flex, "_plan", refuse)
    monkeypatch.setattr(mods, "trace", no_trace)
    hits = plans.PLAN_STATS["hits"]
    assert torch.equal(tt.flex_attention(q, k, v, block_mask=bm, kernel_options=_tiles(16)), first)
    assert torch.equal(tt.flex_attention(q, k, v, block_mask=_bm(AM.causal_mask, None, None, n, n, 16), kernel_options=_tiles(16)), first)
    assert plans.PLAN_STATS["hits"] == hits + 2
    bm.full_kv_num_blocks.zero_()  # in place: the blocks below the diagonal are gone, the diagonal stays
    expect = visible(bm, AM.causal_mask, 1, 2, n, n)
    o2 = tt.flex_attention(q, k, v, block_mask=bm, kernel_options=_tiles(16))
    o_ref, _, _ = dense(*(x.double().numpy() for x in (q, k, v)), scale=D**-0.5, mask_fn=lambda *a, **_: expect)
    assert np.abs(o2.numpy() - o_ref).max() < 1e-5 and np.abs(o2.numpy() - first.numpy()).max() > 0.1


# --- refusals -----------------------------------------------------------------------------------------


def _sliced():
    bm = _bm(AM.causal_mask, 2, 2, 32, 32, 16)
    return bm[0:1]


REFUSED = [
    ("not_a_block_mask", {"block_mask": torch.ones(32, 32, dtype=torch.bool)}, SpecError, ("block_mask", "BlockMask")),
    ("other_lengths", {"block_mask": FA.create_block_mask(AM.causal_mask, None, None, 48, 32, device="cpu", BLOCK_SIZE=16)}, SpecError,
     ("block_mask.seq_lengths", "(32, 32)")),
    ("other_heads", {"block_mask": FA.create_block_mask(AM.causal_mask, 1, 3, 32, 32, device="cpu", BLOCK_SIZE=16)}, SpecError, ("block_mask.shape", "heads 2")),
    ("other_batch", {"block_mask": FA.create_block_mask(AM.causal_mask, 2, 1, 32, 32, device="cpu", BLOCK_SIZE=16)}, SpecError, ("block_mask.shape", "batch 1")),
    ("sliced_stub", {"block_mask": _sliced()}, SpecError, ("block_mask.mask_mod", "sliced")),
    ("unknown_option", {"kernel_options": {"BLOCK_K": 16}}, SpecError, ("kernel_options", "BLOCK_K", "FlexKernelOptions")),
    ("option_type", {"kernel_options": {"PRESCALE_QK": 1}}, SpecError, ("kernel_options['PRESCALE_QK']", "True or False")),
    ("tile_not_pow2", {"kernel_options": {"BLOCK_M": 48, "BLOCK_N": 16}}, SpecError, ("kernel_options['BLOCK_M']", "power of two")),
    ("tile_without_pair", {"kernel_options": {"fwd_BLOCK_M": 32}}, SpecError, ("kernel_options['fwd_BLOCK_M']", "BLOCK_N")),
    ("bad_backend", {"kernel_options": {"BACKEND": "CUDNN"}}, SpecError, ("kernel_options['BACKEND']", "AUTO")),
    ("kernel_options_type", {"kernel_options": [("BLOCK_M", 16)]}, SpecError, ("kernel_options", "dict")),
    ("max_scores", {"return_aux": FA.AuxRequest(lse=True, max_scores=True)}, UnsupportedArgument, ("return_aux.max_scores",)),
    ("lse_and_aux", {"return_lse": True, "return_aux": FA.AuxRequest(lse=True)}, UnsupportedArgument, ("return_lse", "return_aux")),
    ("approx_softcap", {"score_mod": AS.generate_tanh_softcap(2, approx=True)}, SpecError, ("score_mod", "approx.tanh")),
    ("scale", {"scale": -1.0}, SpecError, ("scale",)),
]


@pytest.mark.parametrize("kw,error,parts", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refusals_are_one_line(kw, error, parts):
    q, k, v, _ = _qkv(1, 2, 2, 32, 32)
    with pytest.raises(error) as info:
        tt.flex_attention(q, k, v, **kw)
    text = str(info.value)
    assert "\n" not in text, text
    for p in parts:
        assert p in text, (p, text)


def test_tensor_refusals():
    q, k, v, _ = _qkv(1, 4, 2, 32, 32)
    with pytest.raises(SpecError, match="enable_gqa"):
        tt.flex_attention(q, k, v)
    with pytest.raises(SpecError, match=r"^q.dtype = .torch.float64."):
        tt.flex_attention(q.double(), k.double(), v.double(), enable_gqa=True)


def test_lse_gradient_is_refused():
    q, k, v, _ = _qkv(1, 2, 2, 32, 32)
    q.requires_grad_(True)
    out, lse = tt.flex_attention(q, k, v, return_lse=True)
    (out.sum() + lse.detach().sum()).backward()  # lse detached: fine
    assert q.grad is not None
    out, lse = tt.flex_attention(q, k, v, return_lse=True)
    with pytest.raises(NotImplementedError, match="gradient through lse"):
        (out.sum() + lse.sum()).backward()


# --- the Triton backend (Triton's interpreter) ---------------------------------------------------------


@pytest.fixture
def triton_path(monkeypatch):
    pytest.importorskip("triton")
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton cases run under TRITON_INTERPRET=1 (CPU tensors)")
    monkeypatch.setattr(flex, "TRITON_DEVICES", ("cuda", "cpu"))


def _last_plan():
    return next(reversed(plans.PLANS.values()))


def test_triton_natten_block_classes_from_the_block_mask(triton_path):
    """NATTEN with a broadcast BlockMask of 32-blocks over 64 tokens, tiles of 16: every tile in one
    block, so the module's mask is NATTEN alone and the classes come from the BlockMask."""
    mask = AM.generate_natten(8, 8, 3, 3)
    check(block_mask=_bm(mask, None, None, 64, 64, 32), sq=64, sk=64, tiles=16)
    plan = _last_plan()
    assert plan.table_slot == -1 and "mask_t" not in plan.call.mask_mod and plan.module.TILE_SIZES == {"fwd": [16, 16], "bwd": [16, 16]}


def test_triton_disagreeing_blocks_on_wider_tiles(triton_path):
    """The disagreeing from_kv_blocks mask (16-blocks, tails) on 16 × 32 tiles that span two K/V blocks:
    the mask reads the class table, the tile classes are aggregated over the blocks, and the tail tile
    of full blocks (rows 80-95, columns 64-95) is partial, its padding masked."""
    bm = disagreeing_mask()
    vis = visible(bm, AM.causal_mask, 1, 2, 90, 75)
    check(block_mask=bm, sq=90, sk=75, tiles=(16, 32), torch_mask=lambda bi, hi, qi, ki: vis[bi, hi, qi, ki])
    plan = _last_plan()
    assert plan.table_slot >= 0 and "mask_t" in plan.call.mask_mod
    table = flex.block_table(bm, plan.structure)
    assert {k for _, k in table.lists} == {"fwd", "bwd"}


def test_triton_vsa_with_a_learned_bias(triton_path):
    """VSA's from_kv_blocks mask with variable blocks (full and partial blocks, a padding mask_mod) and
    a learned bias table with its gradient."""
    bm = _vsa_variable()
    check(block_mask=bm, sq=80, sk=80, tables={"bias": 0.5 * seeded_table(2, 159)}, gen=_bias_gen(80))


# --- the class table ------------------------------------------------------------------------------


def test_tile_classes_against_brute_force():
    """tile_classes on tiles that nest, span and straddle blocks, with tails: each tile empty iff all
    its pairs are invisible under the blocks alone (mask_mod True), full iff all are visible and the
    tile lies inside the sequences, computed here pair by pair."""
    table = CLASSES[None, None].to(torch.int32)
    sq, sk = 90, 75
    vis = visible(disagreeing_mask(), None, 1, 1, sq, sk)[0, 0]  # partial blocks visible: the blocks' reach
    full = torch.zeros(sq, sk, dtype=torch.bool)
    for r in range(6):
        for c in range(5):
            if CLASSES[r, c] == 2:
                full[r * 16:(r + 1) * 16, c * 16:(c + 1) * 16] = True
    for br, bc in ((16, 16), (32, 16), (16, 64), (8, 24)):
        got = flex.tile_classes(table, (16, 16), sq, sk, br, bc)[0, 0]
        for i in range(math.ceil(sq / br)):
            for j in range(math.ceil(sk / bc)):
                rows, cols = slice(i * br, (i + 1) * br), slice(j * bc, (j + 1) * bc)
                inside = (i + 1) * br <= sq and (j + 1) * bc <= sk
                want = 0 if not vis[rows, cols].any() else (2 if inside and full[rows, cols].all() else 1)
                assert got[i, j] == want, (br, bc, i, j)
