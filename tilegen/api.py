"""The Python API: NumPy in, NumPy out, backed by the interpreter.

``attention`` and ``attention_backward`` build an :class:`~tilegen.core.spec.AttentionSpec` from the arrays,
run the whole pipeline (build, passes, schedule) and execute the program in the NumPy interpreter. They
are for checking and for small problems; the generated kernels are what runs fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilegen.core import dtypes, validate
from tilegen.core.errors import SpecError
from tilegen.core.sinks import sink_grad
from tilegen.core.spec import AttentionSpec
from tilegen.backends.interp import interpret
from tilegen.backends import compile_backward, compile_forward

def _logical(x: np.ndarray, layout: str) -> np.ndarray:
    """A BNSD view of ``x`` (no copy): BSND arrays are transposed, their strides honoured."""
    return x if layout == "BNSD" else x.transpose(0, 2, 1, 3)


def _physical(x: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(x if layout == "BNSD" else x.transpose(0, 2, 1, 3))


def make_spec(
    q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), alignment="bottom_right", layout="BNSD", score_mod=None, mask_mod=None
) -> AttentionSpec:
    """The spec of an attention call on these arrays (validated; errors name the argument).

    Args:
        q: [B, Hq, Sq, Dqk] (BNSD) or [B, Sq, Hq, Dqk] (BSND).
        k: [B, Hkv, Sk, Dqk] or [B, Sk, Hkv, Dqk]; v likewise with Dv.

    Raises:
        SpecError (a ValueError): wrong type, dtype, rank or shape, mismatched dtypes, heads not
            divisible, a bad window, scale, alignment or layout; an invalid mod
            (:class:`tilegen.mods.ModError`). The checks: :mod:`tilegen.core.validate`.
    """
    spec, _ = make_spec_and_params(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window=window, alignment=alignment, layout=layout, score_mod=score_mod, mask_mod=mask_mod
    )
    return spec


def make_spec_and_params(
    q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), alignment="bottom_right", layout="BNSD", score_mod=None, mask_mod=None,
    softcap=None, alibi_slopes=None, sinks=False,
) -> tuple[AttentionSpec, dict]:
    """:func:`make_spec` and the parameter arrays the mods read, by name (checked against the spec's
    declarations: shapes, dtype kinds). ``softcap`` and ``alibi_slopes`` (as :func:`attention`) join
    the score mod; ``sinks`` (bool) sets the spec's ``sinks`` field."""
    from tilegen.core.mods import check_param_arrays, mods_from_api, intersect_windows

    layout = validate.layout(layout)
    validate.alignment(alignment)
    lq, lk, lv = validate.qkv(q, k, v, kind=validate.NUMPY, layout=layout)
    bsz, hq, sq, dqk = lq
    scale = validate.scale(softmax_scale)
    score_mod = flash_score_mod(score_mod, softcap, validate.alibi_slopes(alibi_slopes, hq, bsz))
    score_text, mask_text, decls, mod_window, arrays = mods_from_api(score_mod, mask_mod)
    spec = AttentionSpec(
        batch=bsz,
        heads_q=hq,
        heads_kv=lk[1],
        seq_q=sq,
        seq_k=lk[2],
        head_dim_qk=dqk,
        head_dim_v=lv[3],
        dtype=validate.NUMPY.names[q.dtype],
        scale=scale,
        window=intersect_windows(validate.window(causal, window), mod_window),
        alignment=alignment,
        layout=layout,
        name="api",
        score_mod=score_text,
        mask_mod=mask_text,
        params=decls,
        sinks=bool(sinks),
    )
    sizes = {"B": spec.batch, "Hq": spec.heads_q, "Hkv": spec.heads_kv, "Sq": spec.seq_q, "Sk": spec.seq_k}
    params = check_param_arrays(spec.mods, arrays, sizes) if spec.has_mods else {}
    return spec, params


def flash_score_mod(score_mod, softcap, alibi_slopes):
    """The score mod of FlashAttention's ``softcap`` and ``alibi_slopes`` (DESIGN §3): score′ =
    c·tanh(score/c), then − slope·|q_idx + Sk − Sq − kv_idx| (FlashAttention 2's order); or
    ``score_mod`` itself. ``alibi_slopes``: a float [Hq] or [B, Hq] array (checked by the caller,
    :func:`tilegen.core.validate.alibi_slopes`; its values are the parameter's).

    Raises:
        SpecError: softcap not None/0/a positive finite number; softcap or alibi_slopes together with
            score_mod (write them inside the score mod instead).
    """
    from tilegen.core import mods as M

    cap = validate.softcap(softcap)
    validate.score_mod_alone(score_mod, cap, alibi_slopes)
    if cap is None and alibi_slopes is None:
        return score_mod
    sc = M.softcap(cap) if cap is not None else None
    al = M.alibi(alibi_slopes) if alibi_slopes is not None else None
    if sc is None:
        return al
    if al is None:
        return sc
    return M.Mod("score", al.expr.xreplace({M.SCORE: sc.expr}), al.params)


def attention(
    q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), alignment="bottom_right", layout="BNSD", target=None, tile_sizes=None,
    score_mod=None, mask_mod=None, softcap=None, alibi_slopes=None, sinks=None,
):
    """FlashAttention forward in the interpreter.

    Args:
        q, k, v: arrays of one dtype (float16, bfloat16, float32); BNSD: q [B, Hq, Sq, Dqk], k [B, Hkv,
            Sk, Dqk], v [B, Hkv, Sk, Dv]; BSND: [B, S, N, D]. GQA/MQA when Hkv divides Hq.
        softmax_scale: S = scale·QKᵀ; None → 1/sqrt(Dqk).
        causal: window (left, 0); window: (left, right), -1 unbounded (DESIGN §3).
        alignment: ``"bottom_right"`` (FlashAttention >= 2.1) or ``"top_left"``.
        target: a target name whose schedule to use (None: default tile sizes).
        tile_sizes: (Br, Bc) or {"Br": .., "Bc": ..} to force the tile sizes.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` or a :mod:`tilegen.mods` built-in
            (DESIGN §3: applied to the scaled score where the mask holds).
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx)`` or a built-in, and-ed with causal/window.
        softcap: FlashAttention's softcap c (None or 0.0: off): score′ = c·tanh(score/c) on the scaled
            score (Gemma-2), before the mask.
        alibi_slopes: float [Hq] or [B, Hq]: score′ −= slope·|i + Sk − Sq − j| (FlashAttention's ALiBi),
            after the softcap.
        sinks: float [Hq], one learnable logit σ_h per query head that joins every row's softmax
            denominator and carries no value (gpt-oss): L = logsumexp(S ∪ {σ_h}), P = exp(S − L).

    Returns:
        (o in the input dtype and layout, lse float32 [B, Hq, Sq], natural log; on a row with no
        visible key o = 0 and lse = -inf, or σ_h with sinks).

    Raises:
        SpecError (ValueError): a bad argument, named.
    """
    spec, params = make_spec_and_params(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window=window, alignment=alignment, layout=layout, score_mod=score_mod, mask_mod=mask_mod,
        softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks is not None,
    )
    sk = validate.sinks(sinks, spec.heads_q)
    if sk is not None:
        params = {**params, "sinks": sk}
    program = compile_forward(spec, target=target, tile_sizes=tile_sizes)
    outputs, _ = interpret(program, {"Q": _logical(q, layout), "K": _logical(k, layout), "V": _logical(v, layout), **params})
    return _physical(outputs["O"], layout), outputs["L"]


def attention_backward(
    q,
    k,
    v,
    o,
    lse,
    do,
    *,
    softmax_scale=None,
    causal=False,
    window=(-1, -1),
    alignment="bottom_right",
    layout="BNSD",
    dq_strategy="atomic",
    target=None,
    tile_sizes=None,
    score_mod=None,
    mask_mod=None,
    softcap=None,
    alibi_slopes=None,
    sinks=None,
    dkv_strategy=None,
):
    """FlashAttention recompute backward in the interpreter (the fused program).

    Args:
        q, k, v: as for :func:`attention`; o: the forward output (input dtype, q's layout with Dv);
        lse: float32 [B, Hq, Sq] from the forward; do: dL/dO like o.
        dq_strategy: ``"atomic"`` (fp32 workspace, atomic adds) or ``"separate"`` (a second nest over Q
            tiles, deterministic); see ``tilegen.passes.pipeline.DQ_STRATEGIES``.
        dkv_strategy: ``"on-chip"`` (dK, dV accumulated on chip over the Q tiles), ``"atomic"`` (each
            tile pair's partials added atomically into fp32 workspaces) or None / ``"auto"`` (atomic
            for an Ascend ``target``, else on-chip); see ``tilegen.passes.pipeline.DKV_STRATEGIES``.

        score_mod, mask_mod, softcap, alibi_slopes, sinks: as for :func:`attention` (the same the
            forward ran with; the lse of a forward with sinks already holds them, so the kernels are
            those without sinks).

    Returns:
        (dq like q, dk like k, dv like v), in the input dtype and layout; dk and dv are summed over each
        GQA group. When a learnable parameter is given (a mod's float parameter array, alibi_slopes,
        sinks): (dq, dk, dv, dparams) with dparams a dict by name (``"alibi_slopes"``, ``"sinks"``, the
        mods' parameter names) of float32 arrays of the parameters' shapes, reduced in a fixed order
        (deterministic): the mods' from per-tile partials, dσ on the host (:func:`sink_grad`).

    Raises:
        SpecError (ValueError): a bad argument, named.
    """
    spec, params = make_spec_and_params(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window=window, alignment=alignment, layout=layout, score_mod=score_mod, mask_mod=mask_mod,
        softcap=softcap, alibi_slopes=alibi_slopes,
    )
    sk = validate.sinks(sinks, spec.heads_q)
    expect_o = spec.logical_shapes["O"]
    validate.backward_inputs(o, do, lse, dtype=q.dtype, shape=_physical_shape(expect_o, layout), shape_note=f"layout {layout}",
                             lse_shape=expect_o[:3], kind=validate.NUMPY, layout=layout)
    program = compile_backward(spec, dq_strategy=dq_strategy, target=target, tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)
    feeds = {
        "Q": _logical(q, layout),
        "K": _logical(k, layout),
        "V": _logical(v, layout),
        "O": _logical(o, layout),
        "L": lse,
        "dO": _logical(do, layout),
        **params,
    }
    grads, _ = interpret(program, feeds)
    out = tuple(_physical(grads[n], layout) for n in ("dQ", "dK", "dV"))
    mods = program.mods
    dparams = {}
    if mods is not None and mods.grads:
        from tilegen.core.mods import param_grads

        dparams = param_grads(program, grads)
    if sk is not None:
        dparams["sinks"] = sink_grad(_logical(o, layout), _logical(do, layout), lse, sk)
    return out + (dparams,) if dparams else out


# --- packed variable-length batches (TND, cu_seqlens) -------------------------------------------------

VARLEN_Q_SEQ, VARLEN_K_SEQ, VARLEN_Q_OFF = "q_seq", "k_seq", "q_off"  # the varlen spec's int32 parameters
VARLEN_OUTSIDE_Q, VARLEN_OUTSIDE_K = -1, -2  # sequence ids of tokens outside every sequence (never equal)


@dataclass(frozen=True)
class Varlen:
    """A packed batch as the mod machinery sees it (DESIGN §3, "Packed batches").

    Attributes:
        cu_q, cu_k: the cumulative sequence starts (int64 copies), [nseq + 1] each.
        q_seq: int32 [total_q], the sequence of each query token (−1 outside every sequence).
        k_seq: int32 [total_k], the sequence of each key token (−2 outside every sequence).
        q_off: int32 [total_q], the bottom-right offset of each query token's sequence,
            Sk_s − Sq_s + (cu_k[s] − cu_q[s]) = cu_k[s+1] − cu_q[s+1] (0 outside): key j of the packed
            batch sits at local distance q_idx + q_off − kv_idx from the diagonal of query q_idx.
    """

    cu_q: np.ndarray
    cu_k: np.ndarray
    q_seq: np.ndarray
    k_seq: np.ndarray
    q_off: np.ndarray

    @property
    def nseq(self) -> int:
        return len(self.cu_q) - 1

    @property
    def q_inside(self) -> np.ndarray:
        return self.q_seq >= 0

    @property
    def k_inside(self) -> np.ndarray:
        return self.k_seq >= 0

    def params(self) -> dict[str, np.ndarray]:
        return {VARLEN_Q_SEQ: self.q_seq, VARLEN_K_SEQ: self.k_seq, VARLEN_Q_OFF: self.q_off}


def varlen_layout(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int, max_seqlen_q=None, max_seqlen_k=None) -> Varlen:
    """The per-token arrays of a packed batch (:class:`Varlen`), checked.

    Raises:
        SpecError: a bad ``cu_seqlens_q``/``cu_seqlens_k`` (type, dtype, shape, decreasing, past the
            tokens), different sequence counts, or a ``max_seqlen_*`` below the longest sequence.
    """
    cq = validate.offsets("cu_seqlens_q", cu_seqlens_q, total_q)
    ck = validate.offsets("cu_seqlens_k", cu_seqlens_k, total_k)
    if len(cq) != len(ck):
        raise SpecError("cu_seqlens_k.shape", cu_seqlens_k.shape, f"({len(cq)},): one entry per sequence of cu_seqlens_q, plus one")
    validate.max_seqlen("max_seqlen_q", max_seqlen_q, int(np.diff(cq).max()))
    validate.max_seqlen("max_seqlen_k", max_seqlen_k, int(np.diff(ck).max()))
    q_seq = np.full(total_q, VARLEN_OUTSIDE_Q, dtype=np.int32)
    k_seq = np.full(total_k, VARLEN_OUTSIDE_K, dtype=np.int32)
    q_off = np.zeros(total_q, dtype=np.int32)
    for s_ in range(len(cq) - 1):
        q_seq[cq[s_]:cq[s_ + 1]] = s_
        k_seq[ck[s_]:ck[s_ + 1]] = s_
        q_off[cq[s_]:cq[s_ + 1]] = ck[s_ + 1] - cq[s_ + 1]
    return Varlen(cq, ck, q_seq, k_seq, q_off)


def varlen_block_classes(cu_q: np.ndarray, cu_k: np.ndarray, total_q: int, total_k: int, br: int, bc: int, window=(-1, -1)) -> np.ndarray:
    """The block classes of a packed batch in closed form on the host: float32 [nQ, nK] (nQ = ⌈total_q /
    br⌉, nK = ⌈total_k / bc⌉) with the classify kernel's codes (``tilegen.core.ir.BLOCK_EMPTY`` 0, ``_PARTIAL``
    1, ``_FULL`` 2) for the varlen spec's mask (DESIGN §3, "Packed batches"): the document mask and the
    window (left, right) aligned bottom-right per sequence, on Q tile × K/V tile of br × bc tokens.

    For sequence s (rows [cq_s, cq_{s+1}), columns [ck_s, ck_{s+1}), offset off_s = ck_{s+1} − cq_{s+1})
    and a tile, the visible pairs are those of the rectangle rows × columns clipped to the sequence with
    c − r in [off_s − left, off_s + right]; over a rectangle c − r takes every integer from c_lo − r_hi
    to c_hi − r_lo, so a tile is non-empty iff for some s that interval meets the window's, and full iff
    one sequence holds all br × bc pairs (rows and columns inside it, hence inside the tokens) with
    c_hi − r_lo ≤ off_s + right and c_lo − r_hi ≥ off_s − left. Per sequence only the tiles its
    rectangle touches are visited: O(Σ_s tiles of s).

    Args:
        cu_q, cu_k: the checked offsets (int64 [nseq + 1], :class:`Varlen`'s ``cu_q``/``cu_k``).
        total_q, total_k: the token counts; br, bc: tile rows; window: (left, right), −1 unbounded.
    """
    from tilegen.core.ir import BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL

    left, right = window
    nq, nk = -(-total_q // br), -(-total_k // bc)
    visible = np.zeros((nq, nk), dtype=bool)
    full = np.zeros((nq, nk), dtype=bool)
    for s_ in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[s_]), int(cu_q[s_ + 1]), int(cu_k[s_]), int(cu_k[s_ + 1])
        if q0 == q1 or k0 == k1:
            continue
        off = k1 - q1
        ti = np.arange(q0 // br, -(-q1 // br))[:, None]
        tj = np.arange(k0 // bc, -(-k1 // bc))[None, :]
        r0, r1 = ti * br, ti * br + br - 1  # the tile's rows and columns, first and last
        c0, c1 = tj * bc, tj * bc + bc - 1
        lo_r, hi_r, lo_c, hi_c = np.maximum(r0, q0), np.minimum(r1, q1 - 1), np.maximum(c0, k0), np.minimum(c1, k1 - 1)
        vis = np.ones(np.broadcast_shapes(ti.shape, tj.shape), dtype=bool)
        whole = (r0 >= q0) & (r1 <= q1 - 1) & (c0 >= k0) & (c1 <= k1 - 1)
        if right >= 0:
            vis &= lo_c - hi_r <= off + right
            whole = whole & (c1 - r0 <= off + right)
        if left >= 0:
            vis &= hi_c - lo_r >= off - left
            whole = whole & (c0 - r1 >= off - left)
        visible[ti, tj] |= vis
        full[ti, tj] |= whole
    out = np.full((nq, nk), float(BLOCK_EMPTY), dtype=np.float32)
    out[visible] = float(BLOCK_PARTIAL)
    out[full] = float(BLOCK_FULL)
    return out


def varlen_mods(lay: Varlen, window: tuple[int, int], softcap, alibi_slopes, heads_q: int):
    """(score_mod text, mask_mod text, ParamDecls, parameter arrays) of a packed batch: the document
    mask q_seq[q_idx] == k_seq[kv_idx] and the window per sequence, bottom-right, through q_off;
    FlashAttention's softcap and ALiBi (−slope·|i + Sk_s − Sq_s − j| in sequence-local indices
    = −slope·|q_idx + q_off[q_idx] − kv_idx|)."""
    from tilegen.core.mods import ParamDecl

    total_q, total_k = len(lay.q_seq), len(lay.k_seq)
    decls = [ParamDecl(VARLEN_Q_SEQ, (total_q,), "int32"), ParamDecl(VARLEN_K_SEQ, (total_k,), "int32")]
    arrays = {VARLEN_Q_SEQ: lay.q_seq, VARLEN_K_SEQ: lay.k_seq}
    left, right = window
    diag = f"q_idx + {VARLEN_Q_OFF}[q_idx]"
    mask = [f"Eq({VARLEN_Q_SEQ}[q_idx], {VARLEN_K_SEQ}[kv_idx])"]
    if right >= 0:
        mask.append(f"(kv_idx <= {diag} + {right})")
    if left >= 0:
        mask.append(f"(kv_idx >= {diag} - {left})")
    cap = validate.softcap(softcap)
    score = "score" if cap is None else f"{cap!r}*tanh(score/{cap!r})"
    if validate.alibi_slopes(alibi_slopes, heads_q, lay.nseq, rows_are="sequence") is not None:
        if alibi_slopes.shape == (heads_q,):
            decls.append(ParamDecl("alibi_slopes", (heads_q,), "fp32"))
            arrays["alibi_slopes"] = alibi_slopes.astype(np.float32)
            slope = "alibi_slopes[h]"
        elif alibi_slopes.shape == (lay.nseq, heads_q):
            # one slope row per sequence, read per query token (its gradient folds back per sequence)
            per_token = np.zeros((total_q, heads_q), dtype=np.float32)
            per_token[lay.q_inside] = alibi_slopes.astype(np.float32)[lay.q_seq[lay.q_inside]]
            decls.append(ParamDecl("alibi_slopes", (total_q, heads_q), "fp32"))
            arrays["alibi_slopes"] = per_token
            slope = "alibi_slopes[q_idx, h]"
        score = f"({score}) - {slope}*Abs({diag} - kv_idx)"
    if len(mask) > 1 or alibi_slopes is not None:
        decls.append(ParamDecl(VARLEN_Q_OFF, (total_q,), "int32"))
        arrays[VARLEN_Q_OFF] = lay.q_off
    score_text = "" if score == "score" else score
    return score_text, " & ".join(mask), tuple(sorted(decls, key=lambda d: d.name)), arrays


def _varlen_setup(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window, softcap, alibi_slopes, sinks):
    """(spec or None when a side has no token, params, layout, sinks array) of a varlen call."""
    validate.qkv(q, k, v, kind=validate.NUMPY, layout=validate.TND)
    return varlen_spec(q.shape, k.shape, v.shape, dtypes.name_of(q.dtype), cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                       max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal, window=window, softcap=softcap,
                       alibi_slopes=alibi_slopes, sinks=sinks)


def varlen_spec(shape_q, shape_k, shape_v, dtype: str, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q=None, max_seqlen_k=None,
                softmax_scale=None, causal=False, window=(-1, -1), softcap=None, alibi_slopes=None, sinks=None):
    """The spec of a packed batch of these TND shapes (B = 1 over the tokens, BSND), its parameter
    arrays by name (int32 ``q_seq``, ``k_seq``, ``q_off``; fp32 ``alibi_slopes``), the
    :class:`Varlen` layout and the sinks as float32 [Hq] (or None). The spec is None when total_q or
    total_k is 0 (every row is empty; nothing to run).

    Raises:
        SpecError: a bad argument, named.
    """
    lay = varlen_layout(cu_seqlens_q, cu_seqlens_k, int(shape_q[0]), int(shape_k[0]), max_seqlen_q, max_seqlen_k)
    win = validate.window(causal, window)
    hq = int(shape_q[1])
    sk = validate.sinks(sinks, hq)
    score, mask, decls, arrays = varlen_mods(lay, win, softcap, alibi_slopes, hq)
    scale = validate.scale(softmax_scale)
    if shape_q[0] == 0 or shape_k[0] == 0:
        return None, arrays, lay, sk
    spec = AttentionSpec(
        batch=1, heads_q=hq, heads_kv=int(shape_k[1]), seq_q=int(shape_q[0]), seq_k=int(shape_k[0]), head_dim_qk=int(shape_q[2]),
        head_dim_v=int(shape_v[2]), dtype=dtype, scale=scale, window=(-1, -1),
        layout="BSND", name="varlen", score_mod=score, mask_mod=mask, params=decls, sinks=sk is not None,
        packed_ids=(VARLEN_Q_SEQ, VARLEN_K_SEQ),
    )
    return spec, arrays, lay, sk


def attention_varlen(
    q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q=None, max_seqlen_k=None, softmax_scale=None, causal=False, window=(-1, -1),
    softcap=None, alibi_slopes=None, sinks=None, target=None, tile_sizes=None,
):
    """Attention over a packed batch of variable-length sequences (FlashAttention's varlen), in the
    interpreter.

    Sequence s holds query tokens [cu_seqlens_q[s], cu_seqlens_q[s+1]) and key tokens
    [cu_seqlens_k[s], cu_seqlens_k[s+1]); each query attends only within its sequence, with causal and
    window aligned bottom-right per sequence (Sq_s, Sk_s), as FlashAttention >= 2.1 (DESIGN §3,
    "Packed batches"). It runs as one batch of total tokens under a document mask plus a per-sequence
    offset (a mask mod), whose block classes skip the tiles between sequences.

    Args:
        q: [total_q, Hq, Dqk]; k: [total_k, Hkv, Dqk]; v: [total_k, Hkv, Dv] (TND); one dtype (float16,
            bfloat16, float32); Hkv divides Hq (GQA).
        cu_seqlens_q, cu_seqlens_k: int32 [num_seqs + 1], non-decreasing, starting >= 0 and ending at
            most at total_q / total_k; empty sequences (Sq_s = 0 or Sk_s = 0) are legal; tokens past the
            last offset (or before the first) belong to no sequence.
        max_seqlen_q, max_seqlen_k: None, or at least the longest sequence (FlashAttention's grid
            bound; checked, else unused: the tiles visited come from cu_seqlens).
        softmax_scale, causal, window: as :func:`attention`, per sequence.
        softcap: None/0.0 (off) or c > 0: score′ = c·tanh(score/c).
        alibi_slopes: float [Hq] or [num_seqs, Hq]: score′ −= slope·|i + Sk_s − Sq_s − j| (i, j local).
        sinks: float [Hq] learnable sink logits (see :func:`attention`).

    Returns:
        (o [total_q, Hq, Dv] in q's dtype, lse float32 [Hq, total_q]). A row with no visible key (Sk_s = 0,
        or a window that leaves it none) gives o = 0, lse = −inf (σ_h with sinks). Tokens outside every
        sequence hold o = 0, lse = −inf.

    Raises:
        SpecError (ValueError): a bad argument, named (``cu_seqlens_q``, ``q.shape``, ...).
    """
    spec, params, lay, sk = _varlen_setup(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window, softcap, alibi_slopes, sinks)
    total_q, hq, dv = q.shape[0], q.shape[1], v.shape[2]
    if spec is None:  # no query token, or no key token: every row is empty
        o = np.zeros((total_q, hq, dv), dtype=q.dtype)
        lse = np.full((hq, total_q), -np.inf, dtype=np.float32)
        if sk is not None:
            lse[:, lay.q_inside] = sk[:, None]
        return o, lse
    feeds = {"Q": q[None].transpose(0, 2, 1, 3), "K": k[None].transpose(0, 2, 1, 3), "V": v[None].transpose(0, 2, 1, 3), **params}
    if sk is not None:
        feeds["sinks"] = sk
    program = compile_forward(spec, target=target, tile_sizes=tile_sizes)
    outputs, _ = interpret(program, feeds)
    o = np.ascontiguousarray(outputs["O"][0].transpose(1, 0, 2))
    lse = np.ascontiguousarray(outputs["L"][0])
    o[~lay.q_inside] = 0
    lse[:, ~lay.q_inside] = -np.inf
    return o, lse


def attention_varlen_backward(
    q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q=None, max_seqlen_k=None, softmax_scale=None, causal=False,
    window=(-1, -1), softcap=None, alibi_slopes=None, sinks=None, dq_strategy="atomic", target=None, tile_sizes=None,
):
    """The backward of :func:`attention_varlen` in the interpreter (the fused program).

    Args:
        q, k, v, cu_seqlens_*, and the keywords: as for :func:`attention_varlen` (the same values);
        o [total_q, Hq, Dv], lse float32 [Hq, total_q]: its outputs; do: dLoss/do like o.

    Returns:
        (dq, dk, dv) in the input dtype (TND; dk, dv summed over each GQA group), then ``dsinks``
        float32 [Hq] when sinks are given, then ``dalibi_slopes`` float32 (alibi_slopes' shape) when
        alibi_slopes are given. Tokens outside every sequence get zero gradients. Every reduction runs
        in a fixed order: the results are bitwise reproducible (with ``dq_strategy="separate"`` dq too).

    Raises:
        SpecError (ValueError): a bad argument, named.
    """
    spec, params, lay, sk = _varlen_setup(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window, softcap, alibi_slopes, sinks)
    total_q, hq, dv_ = q.shape[0], q.shape[1], v.shape[2]
    validate.backward_inputs(o, do, lse, dtype=q.dtype, shape=(total_q, hq, dv_), shape_note="q's tokens and heads, v's head dim",
                             lse_shape=(hq, total_q), kind=validate.NUMPY, layout=validate.TND)
    extras = []
    if spec is None:
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        dparams: dict = {}
    else:
        program = compile_backward(spec, dq_strategy=dq_strategy, target=target, tile_sizes=tile_sizes)
        t = lambda x: x[None].transpose(0, 2, 1, 3)  # noqa: E731  TND -> BNSD view, B = 1
        feeds = {"Q": t(q), "K": t(k), "V": t(v), "O": t(o), "L": lse[None], "dO": t(do), **params}
        grads, _ = interpret(program, feeds)
        dq, dk, dv = (np.ascontiguousarray(grads[n][0].transpose(1, 0, 2)) for n in ("dQ", "dK", "dV"))
        dq[~lay.q_inside] = 0
        dk[~lay.k_inside] = 0
        dv[~lay.k_inside] = 0
        dparams = {}
        if program.mods is not None and program.mods.grads:
            from tilegen.core.mods import param_grads

            dparams = param_grads(program, grads)
    if sk is not None:
        extras.append(sink_grad(o.transpose(1, 0, 2), do.transpose(1, 0, 2), lse, sk, rows=lay.q_inside))
    if alibi_slopes is not None:
        g = dparams.get("alibi_slopes")
        if g is None:
            g = np.zeros(alibi_slopes.shape, dtype=np.float32)
        elif alibi_slopes.ndim == 2:  # per-token rows folded back per sequence, in token order
            per_seq = np.zeros(alibi_slopes.shape, dtype=np.float64)
            for s_ in range(lay.nseq):
                per_seq[s_] = np.sum(g[lay.cu_q[s_]:lay.cu_q[s_ + 1]].astype(np.float64), axis=0)
            g = per_seq.astype(np.float32)
        extras.append(g)
    return (dq, dk, dv, *extras)


def _physical_shape(shape, layout):
    return shape if layout == "BNSD" else (shape[0], shape[2], shape[1], shape[3])


# --- generate and inspect ------------------------------------------------------------------------------


def _as_spec(spec) -> AttentionSpec:
    """An :class:`AttentionSpec`, a built-in spec's name or a spec file's path, as a spec."""
    from pathlib import Path

    from tilegen.core.spec import builtin_spec, builtin_specs, load_spec

    if isinstance(spec, AttentionSpec):
        return spec
    if isinstance(spec, (str, Path)):
        if isinstance(spec, str) and spec in builtin_specs():
            return builtin_spec(spec)
        if Path(spec).suffix.lower() in (".toml", ".yaml", ".yml"):
            return load_spec(spec)
    raise SpecError("spec", spec, "an AttentionSpec, a built-in spec name (" + ", ".join(builtin_specs()) + ") or a .toml/.yaml file")


@dataclass
class GenerateResult:
    """What :func:`generate` wrote.

    Attributes:
        spec, target: what was generated, for which target (its name).
        out_dir: the folder written; files: the file names in it.
        schedule: {"forward": {"Br", "Bc", "kernels"}, "backward": ...}, as in manifest.json.
        manifest: the whole manifest (backend, dq strategy, SHA-256 of each file, ...).
    """

    spec: AttentionSpec
    target: str
    out_dir: Any
    files: list
    schedule: dict
    manifest: dict

    def to_json(self) -> str:
        return json.dumps(
            {"spec": self.spec.to_dict(), "target": self.target, "out_dir": str(self.out_dir), "files": self.files,
             "schedule": self.schedule, "manifest": self.manifest},
            indent=2,
        )


@dataclass
class InspectResult:
    """What :func:`inspect` found: ``report`` is the plain data ``tilegen inspect --json`` prints.

    Attributes:
        spec, target: the problem and the target's name (None: default tile sizes, no prediction).
        programs: one dict per program (label, kernels, tiles, schedule candidates, footprints,
            prediction with ``time_s`` in seconds, HBM bytes by tensor); a program without a fitting
            tile has ``error`` and ``rejected`` instead.
    """

    spec: AttentionSpec
    target: str | None
    report: dict

    @property
    def programs(self) -> list:
        return self.report["programs"]

    def tiles(self, program: str = "forward") -> dict:
        """{"Br", "Bc"} of the program whose label starts with ``program`` ("forward", "backward")."""
        return self._program(program)["tiles"]

    def predicted_s(self, program: str = "forward") -> float:
        """The predicted time of a program in seconds (needs a target)."""
        return self._program(program)["prediction"]["time_s"]

    def _program(self, program: str) -> dict:
        for p in self.programs:
            if p["label"].startswith(program):
                return p
        raise SpecError("program", program, "one of " + ", ".join(p["label"] for p in self.programs))

    def to_json(self) -> str:
        return json.dumps(self.report, indent=2)

    def __str__(self) -> str:
        from tilegen.harness.report import format_inspect

        return format_inspect(self.report)


def generate(
    spec, target: str = "ascend910b2", out_dir=None, *, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None
) -> GenerateResult:
    """Write the kernels, host code, build files and manifest of ``spec`` for ``target`` into
    ``out_dir`` (created if needed), as ``tilegen generate`` does.

    Args:
        spec: an :class:`AttentionSpec`, a built-in spec's name or a spec file.
        target: ``ascend910b1``..``b4`` (Ascend C) or ``h100``, ``h200`` (Triton), or a target file.
        dq_strategy: ``"atomic"`` or ``"separate"``; None: the target's choice (a GPU target's
            ``[[triton.schedule]]`` rows, otherwise atomic), as ``tilegen generate`` and ``tilegen.torch``.
        tile_sizes: (Br, Bc) to force for both programs.
        dkv_strategy: how the backward reduces dK, dV: ``"on-chip"`` (accumulators held over the Q
            loop), ``"atomic"`` (atomic adds into fp32 workspaces, Ascend C only) or None / ``"auto"``
            (atomic on the Ascend 910B, on-chip on a GPU).

    Raises:
        SpecError, TargetError, ScheduleError: a bad spec, target, strategy or output folder; no fitting tile.
    """
    from tilegen.backends import generate as generate_files
    from tilegen.backends.output import write

    spec = _as_spec(spec)
    if out_dir is None:
        raise SpecError("out_dir", None, "a folder to write the files into")
    generated = generate_files(spec, target, dq_strategy, tile_sizes, dkv_strategy)
    names = write(generated, out_dir)
    return GenerateResult(spec, generated.manifest["target"], out_dir, names, generated.manifest["schedule"], generated.manifest)


def inspect(
    spec, target: str | None = None, *, dq_strategy: str | None = None, tile_sizes=None, programs=("fwd", "bwd"), dkv_strategy: str | None = None
) -> InspectResult:
    """The schedule of ``spec`` on ``target`` as ``tilegen inspect`` reports it (tile sizes and every
    candidate, footprints against capacity, predicted traffic, FLOPs and time, the loop nest);
    ``dq_strategy`` and ``dkv_strategy`` as :func:`generate`.

    Raises:
        SpecError, TargetError: a bad spec, target or strategy.
    """
    from tilegen.harness.report import inspect_report

    spec = _as_spec(spec)
    report = inspect_report(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes, programs=tuple(programs), dkv_strategy=dkv_strategy)
    return InspectResult(spec, report["target"]["name"] if report["target"] else None, report)
