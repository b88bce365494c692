"""attention-gym's mask and score-mod generators through the Ascend C backend's general mod lowering
(tilegen/backends/ascendc/mods.py), run on the hand twin (g++) and, where ASC_DEVKIT is set, the
real-API twin, forward (O, L) and backward (dQ, dK, dV, captured float tensors' gradients) against
the dense float64 reference of tests/mod_reference.py fed the SAME Python mods evaluated by torch
(``torch.func.vmap`` over b, h, q_idx, kv_idx, as FlexAttention applies them: neither the tracer, nor
the sympy forms, nor the lowering is shared with the truth).

Two twin builds cover them all (a build is ~10 s on the hand twin, ~30 s on the real-API twin, most of it
the same for any mod): each group runs its generators side by side, one per query head: head h of the
group's spec applies generator h (called with h = 0, so each runs as written for a single-head problem);
the reference is the same head-multiplexed function, and a failure names the generators of the heads
that miss.

=========================  ==================================================================  ========
group (B, H, Sq, Sk)       generators                                                          status
=========================  ==================================================================  ========
masks (1, 29, 34, 40)      causal, batchify, block_diffusion, dilated_sliding_window,          runs
                           jetspec_training, natten, tiled_natten, prefix_lm, sliding_window,
                           sta_2d, sta_3d, svg_spatial, svg_temporal (arithmetic);
                           doc_mask, packed_causal_doc, shared_prefix, global_sliding_window,
                           vsa, vsa_variable_blocks (captured tables); vision_cross_attention,
                           jetspec_tree_causal (made for Sq != Sk); morton_natten and two
                           mods of bit operations on key-varying integers (int32 rows, And/Or
                           on their 16-bit halves); three of floor division and % by divisors
                           that vary along the row or change sign (exact: one correction step);
                           reads of captured tensors too large for a UB table through their
                           spans and through the scalar loop from GM (the small tables above are
                           UB tables read by Gather)
scores (2, 10, 10, 10)     tanh_softcap, alibi, activation gelu (exact, tanh), sigmoid, relu,  runs
                           graphormer_spatial, graphormer_edge, sandwich, mla_rope
                           (+ the gradients of the spatial Graphormer table and both RoPE tensors)
=========================  ==================================================================  ========
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
attn_gym = pytest.importorskip("attn_gym")

import torch.nn.functional as F
from attn_gym import masks as AM
from attn_gym import mods as AS
from attn_gym.masks.document_mask import length_to_offsets
from helpers import inputs, make_spec
from mod_reference import dense, seeded_table

from tilegen.backends import ascendc
from tilegen.backends.ascendc import twin
from tilegen.core import mods as M
from tilegen.harness.check import compare, longest_sum

pytestmark = pytest.mark.skipif(twin.compiler() is None, reason="no g++ for the CPU twin")


# the mask group's sizes: queries and keys of different lengths (a cross-attention), so that every
# generator runs on a partial last tile in both directions and on keys past the last query
SQ, SK = 34, 40


def _offsets():
    return length_to_offsets([7, 12, 5, 9, 7], "cpu")  # 40 tokens in 5 documents


def _topk():  # VSA: 2 of the 10 key tiles of 4 tokens for each of the 9 query tiles
    gen = torch.Generator().manual_seed(2)
    return torch.stack([torch.randperm(10, generator=gen)[:2] for _ in range(9)]).view(1, 1, 9, 2)


def _graph(b, n):
    gen = torch.Generator().manual_seed(11)
    adj = torch.rand(b, n, n, generator=gen) < 0.3
    adj = adj | adj.transpose(1, 2)
    return adj, torch.randint(0, 3, (b, n, n), generator=gen)


def _tree(n):  # a random tree of n nodes, parents before children
    gen = torch.Generator().manual_seed(5)
    return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]


def _globals():
    flags = torch.zeros(SK, dtype=torch.bool)
    flags[[1, 9, 23]] = True
    return flags


# name -> generator call, one query head each of the mask group (B = 1, Sq = SQ, Sk = SK): arithmetic
# on the indices, captured tensors (tables) read at them, and the generators made for Sq != Sk
MASKS = {
    "causal": lambda: AM.causal_mask,
    "batchify": lambda: AM.batchify_mask_mod(AM.causal_mask, 8),
    "block_diffusion": lambda: AM.generate_block_diffusion_mask(8, 2),
    "dilated_sliding_window": lambda: AM.generate_dilated_sliding_window(4, 2),
    "jetspec_training": lambda: AM.generate_jetspec_training_mask_mod(4, 4),
    "natten": lambda: AM.generate_natten(4, 4, 3, 3),
    "tiled_natten": lambda: AM.generate_tiled_natten(4, 4, 3, 3, 2, 2),
    "prefix_lm": lambda: AM.generate_prefix_lm_mask(5),
    "sliding_window": lambda: AM.generate_sliding_window(3),
    "sta_2d": lambda: AM.generate_sta_mask_mod_2d((4, 6), (2, 4), (2, 2), text_seq_len=3),
    "sta_3d": lambda: AM.generate_sta_mask_mod_3d((2, 4, 4), (2, 2, 4), (1, 2, 2), text_seq_len=2),
    "svg_spatial": lambda: AM.generate_spatial_head_mask_mod(prompt_length=3, num_frames=3, token_per_frame=4, width=1, round_width=2),
    "svg_temporal": lambda: AM.generate_temporal_head_mask_mod(prompt_length=3, num_frames=3, token_per_frame=4, width=2),
    "doc_mask": lambda: AM.generate_doc_mask_mod(AM.causal_mask, _offsets()),
    "packed_causal_doc": lambda: AM.generate_packed_causal_doc_mask_mod(_offsets()),
    "shared_prefix": lambda: AM.generate_shared_prefix_mask_mod(_offsets(), torch.tensor([0, 0, 2, 2, 4])),
    "global_sliding_window": lambda: AM.generate_global_sliding_window(2, _globals()),
    "vsa": lambda: AM.generate_vsa_mask_mod(_topk(), 4),
    "vsa_variable_blocks": lambda: AM.generate_vsa_mask_mod(_topk(), 4, torch.tensor([4, 3, 4, 2, 4, 4, 1, 4, 3, 4])),
    "vision_cross_attention": lambda: AM.generate_vision_cross_attention_mask_mod(torch.tensor([[0, 10], [5, 20], [12, 30], [25, 34]]), 10),
    "jetspec_tree_causal": lambda: AM.generate_jetspec_tree_causal_mask_mod(SK - SQ, AM.build_tree_ancestor_matrix(_tree(SQ), device="cpu")),
    "morton_natten": lambda: AM.generate_morton_natten(8, 8, 3, 3),
    # bit operations of key-varying integers as users write them: with a per-row scalar, ~, negative operands
    # (two's complement), shifts, ^
    "bits_rows": lambda: lambda b, h, q, kv: (((q ^ kv) & 5) != 0) & (((kv | 8) - (kv & ~q)) < q + 6),
    "bits_signed": lambda: lambda b, h, q, kv: ((((kv - q) & 7) < 4) | (((kv - 20) | (q - 17)) >= -3)) & ((((kv << 2) ^ (q >> 1)) % 5) < 3),
    # floor division and % by divisors that vary along the row (of either sign), numerators up to 2^22
    "div_rows": lambda: lambda b, h, q, kv: (((kv * 65521 + q * 7919) // (kv % 7 + 1)) % 3) == 0,
    "div_signed": lambda: lambda b, h, q, kv: ((((kv * 40503 - q * 9973) // ((kv % 5 + 1) * (1 - 2 * (q % 2))))
                                                 + ((q * 31 - kv * 17) % ((kv % 5 + 1) * (1 - 2 * (q % 2))))) % 4) < 2,
    # exact quotients n / d with d = +-41, +-61 read from a table (so that no common factor cancels): n * fl(1/d)
    # lands below the integer for d > 0, and only the correction step makes the floor exact
    "div_scalar": lambda: _div_scalar(torch.tensor([41, -41, 61, -61])),
    # captured tensors too large for a UB table (> MOD_TABLE_BYTES): read at q, ±kv_idx + c through their spans
    # (per row, in both directions, and per tile), and at a stride along the row through the scalar loop from GM
    "spans": lambda: _spans(_ints(SQ, 128, seed=3), _ints(5000, seed=4), seeded_table(SQ, 128, seed=6)),
    "gm_gather": lambda: _gm_gather(_ints(SK, 128, seed=5)),
}


def _ints(*shape, seed):
    return torch.randint(0, 10, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _spans(tab, far, real):  # clipped at the top (kv + 85) and the bottom (45 - kv) of their rows by the tile's padding columns
    return lambda b, h, q, kv: (((tab[q, kv + 85] + tab[q, 45 - kv] + far[kv + 2]) % 3) != 0) | (real[q, 40 - kv] > 1.0)


def _gm_gather(tab):
    return lambda b, h, q, kv: tab[kv, 3] + tab[kv, q] > 8


def _div_scalar(d):
    return lambda b, h, q, kv: (((kv * 37 + q) * 2501 // d[q % 4]) % 3) == 1
# learnable tensors of the score group (their gradients are checked)
LEARN = {"spatial": (2, 5), "q_rope": (2, 2, 10, 4), "k_rope": (2, 1, 10, 4)}
EDGE = seeded_table(2, 2, 3, seed=19)  # read through per-position slices: fixed here


def _scores(t):
    adj, types = _graph(2, 10)
    path_types, path_lengths = AS.shortest_path_edge_types(adj, types, 2)
    return {
        "tanh_softcap": AS.generate_tanh_softcap(2),
        "alibi": AS.generate_alibi_bias(2),
        "gelu": AS.generate_activation_score_mod(F.gelu),
        "gelu_tanh": AS.generate_activation_score_mod(lambda x: F.gelu(x, approximate="tanh")),
        "sigmoid": AS.generate_activation_score_mod(torch.sigmoid),
        "relu": AS.generate_activation_score_mod(F.relu),
        "graphormer_spatial": AS.generate_graphormer_spatial_bias(t["spatial"], AS.shortest_path_distances(adj, 3)),
        "graphormer_edge": AS.generate_graphormer_edge_bias(EDGE, path_types, path_lengths),
        "sandwich": AS.generate_sandwich_bias(2, 12, d_bar=8),
        "mla_rope": AS.generate_mla_rope_score_mod(t["q_rope"], t["k_rope"], 2, scale=0.5),
    }


def _mux_mask(fns):
    def mask_mod(b, h, q_idx, kv_idx):
        out = fns[-1](b, h * 0, q_idx, kv_idx)
        for n in range(len(fns) - 2, -1, -1):
            out = torch.where(h == n, fns[n](b, h * 0, q_idx, kv_idx), out)
        return out

    return mask_mod


def _mux_score(fns):
    def score_mod(score, b, h, q_idx, kv_idx):
        out = fns[-1](score, b, h * 0, q_idx, kv_idx)
        for n in range(len(fns) - 2, -1, -1):
            out = torch.where(h == n, fns[n](score, b, h * 0, q_idx, kv_idx), out)
        return out

    return score_mod


def _vmapped(fn, score: bool):
    lead = (0,) if score else ()
    g = fn
    for d in (3, 2, 1, 0):
        g = torch.func.vmap(g, in_dims=lead + tuple(0 if i == d else None for i in range(4)))
    return g


def _ref_mask(fn):
    def mask_fn(bi, hi, i, j, **_):
        return _vmapped(fn, False)(torch.arange(bi.shape[0]), torch.arange(hi.shape[1]), torch.arange(i.shape[2]), torch.arange(j.shape[3]))

    return mask_fn


def _ref_score(make):
    """score_fn of the reference: the generators rebuilt from the learnable tensors it is given."""

    def score_fn(s, bi, hi, i, j, **p):
        fn = _mux_score(list(make({k: p[f"ref_{k}"] for k in LEARN}).values()))
        b, h, sq, sk = s.shape
        return _vmapped(fn, True)(s, torch.arange(b), torch.arange(h), torch.arange(sq), torch.arange(sk))

    return score_fn


def _group(name):
    """(spec, arrays, reference kwargs, head names, learnable name map) of a group."""
    if name == "scores":
        tables = {k: seeded_table(*shape, seed=20 + n) for n, (k, shape) in enumerate(LEARN.items())}
        fns = _scores(tables)
        score, _, decls, _, arrays = M.mods_from_api(_mux_score(list(fns.values())), None)
        names = {}
        for k, t in tables.items():  # the tracer's name of each learnable tensor
            names[k] = next(n for n, a in arrays.items() if np.asarray(a).shape == t.shape and np.array_equal(np.asarray(a), t.numpy()))
        spec = make_spec(name="gym-scores", batch=2, heads_q=len(fns), heads_kv=len(fns), seq_q=10, seq_k=10, score_mod=score,
                         mask_mod="kv_idx <= q_idx", params=decls)
        ref = {"score_fn": _ref_score(_scores), "mask_fn": lambda bi, hi, i, j, **_: j <= i,
               "params": {f"ref_{k}": t.double().numpy() for k, t in tables.items()}}
        return spec, arrays, ref, list(fns), names
    gens, b, sq, sk = MASKS, 1, SQ, SK
    fns = [g() for g in gens.values()]
    mux = _mux_mask(fns)
    _, mask, decls, window, arrays = M.mods_from_api(None, mux)
    spec = make_spec(name=f"gym-{name}", batch=b, heads_q=len(fns), heads_kv=len(fns), seq_q=sq, seq_k=sk, mask_mod=mask, params=decls,
                     **({"window": window} if window != (-1, -1) else {}))
    return spec, arrays, {"mask_fn": _ref_mask(mux)}, list(gens), {}


GROUPS = ("masks", "scores")
_BUILDS: dict = {}


def _build(name: str, real: bool):
    key = (name, real)
    if key not in _BUILDS:
        spec, arrays, ref, heads, names = _group(name)
        files = ascendc.generate(spec, "ascend910b2").files
        programs = [p.program for p in ascendc.plan_programs(spec)[1]]
        exe = twin.build_real(files, os.environ["ASC_DEVKIT"]) if real else twin.build(files)
        _BUILDS[key] = (exe, programs, spec, arrays, ref, heads, names, files)
    return _BUILDS[key]


def _check(name: str, real: bool = False) -> None:
    exe, programs, spec, arrays, ref, heads, names = _build(name, real)[:7]
    data = inputs(spec)
    fwd, bwd = twin.run_attention(exe, spec, data, params=arrays, programs=programs)
    kw = dict(scale=spec.softmax_scale, window=spec.window, **ref)
    o, lse, grads = dense(data["Q"], data["K"], data["V"], data["dO"], **kw)
    o_pl, lse_pl, grads_pl = dense(data["Q"], data["K"], data["V"], data["dO"], dtype=spec.dtype, **kw)
    n = longest_sum(spec)
    got = {"O": fwd["O"], "L": fwd["L"], **{g: bwd[g] for g in ("dQ", "dK", "dV")}}
    bad = []
    for g, x in got.items():
        want, plain = (o, o_pl) if g == "O" else (lse, lse_pl) if g == "L" else (grads[g], grads_pl[g])
        for h, head in enumerate(heads):  # per head: a miss names its generator
            c = compare(g, np.asarray(x)[:, h], want[:, h], plain[:, h], spec.dtype if g != "L" else "fp32", terms=n)
            if not c.ok:
                bad.append(f"{head}: {c.line()}")
    for k, pname in names.items():
        c = compare("d" + k, bwd["dparams"][pname], grads[f"dref_{k}"], grads_pl[f"dref_{k}"], "fp32", terms=n * spec.batch * spec.heads_q)
        if not c.ok:
            bad.append(c.line())
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", GROUPS)
def test_attention_gym_generators_on_the_hand_twin(name):
    _check(name)


def _real_api_missing() -> str:
    devkit = os.environ.get("ASC_DEVKIT")
    if not devkit or not os.path.isfile(os.path.join(devkit, "include", "kernel_operator.h")):
        return "ASC_DEVKIT (an asc-devkit snapshot)"
    return "" if twin.real_compiler() else "clang++-16"


@pytest.mark.skipif(bool(_real_api_missing()), reason=f"real-API twin needs {_real_api_missing()}")
@pytest.mark.parametrize("name", GROUPS)
def test_attention_gym_generators_on_the_real_api_twin(name):
    _check(name, real=True)
