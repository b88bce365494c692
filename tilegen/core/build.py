"""Lower an :class:`~tilegen.core.spec.AttentionSpec` to the logical tile IR.

Two builders, both with symbolic tile sizes Br (rows of a Q tile) and Bc (rows of a K/V tile):

- :func:`build_forward`: FlashAttention-2's online softmax (Dao, "FlashAttention-2", 2023, Algorithm 1),
  one program per (b, hq, Q tile), looping over the K/V tiles the mask leaves visible; writes O and
  L = logsumexp (natural log, fp32).
- :func:`build_backward`: the textbook backward in separate phases (DESIGN §5, "unfused"): ``pre``
  computes D = rowsum(dO∘O) and zeroes the fp32 dQ accumulator; ``dv`` recomputes P = exp(S − L) and
  writes it to HBM, accumulating dV = Pᵀ dO; ``ds`` reads P back and writes dS = P∘(dO Vᵀ − D) to HBM;
  ``dqdk`` reads dS back, accumulating dK = scale·dSᵀ Q and atomically adding dS K into dQ_ws; ``post``
  writes dQ = scale·dQ_ws. P and dS are [B, Hq, Sq, Sk] HBM tensors: the "store P" program.

Padding (DESIGN §3: −inf in scores, zero in operands): tiles whose padding reaches a contraction or a
row statistic are loaded zero-padded (``pad=0``: V, dO, L, D, and Q, K, P, dS where they feed a
contraction over padded rows); Q and K feeding S are not, since ``Mask`` overwrites every padded
score. Masks and tails follow DESIGN §3. In a packed batch (``spec.packed_ids``) the output stores
(O, L, dQ, dK, dV) skip the rows outside every sequence (``Store.rows``). Loop bounds skip the tiles the mask empties; the ``Mask`` op sets
hidden keys and padded rows/columns to -inf; empty rows give O = 0, L = -inf and add nothing to the
gradients (the ``zero_if_neginf`` and ``safe_div`` ops keep them NaN-free).
"""

from __future__ import annotations

import sympy

from tilegen.core.ir import (
    Access,
    B,
    Bc,
    Br,
    Buffer,
    Dqk,
    Dv,
    Elementwise,
    Fill,
    G,
    Hkv,
    Hq,
    Kernel,
    Load,
    Loop,
    Mask,
    MaskInfo,
    MatMul,
    ModOp,
    Program,
    RowReduce,
    Sk,
    Sq,
    Store,
    Tensor,
    b,
    hkv,
    hq,
    i,
    j,
    kv_tiles,
    q_tiles,
)
from tilegen.core.spec import AttentionSpec

NEG_INF = float("-inf")
VISIBLE = "visible"  # the domain of tile pairs with at least one visible (query, key) pair


def shape_env(spec: AttentionSpec) -> dict[sympy.Symbol, int]:
    """The values of the shape symbols for ``spec``."""
    return {
        B: spec.batch,
        Hq: spec.heads_q,
        Hkv: spec.heads_kv,
        G: spec.group,
        Sq: spec.seq_q,
        Sk: spec.seq_k,
        Dqk: spec.head_dim_qk,
        Dv: spec.head_dim_v,
    }


def mask_info(spec: AttentionSpec) -> MaskInfo:
    """The spec's window with the alignment offset as an expression (Sk − Sq or 0)."""
    left, right = spec.window
    offset = Sk - Sq if spec.alignment == "bottom_right" else sympy.Integer(0)
    return MaskInfo(left=left, right=right, offset=offset)


def kv_tile_range(mask: MaskInfo, qi: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """[start, stop) of the K/V tiles with at least one key visible to some row of Q tile ``qi``.

    Rows r in [qi·Br, min(qi·Br + Br, Sq) − 1] see the columns [r0 + off − left, r1 + off + right]
    clipped to [0, Sk − 1]; the range is empty when that clip is.
    """
    tk = kv_tiles()
    r0 = qi * Br
    r1 = sympy.Min(qi * Br + Br, Sq) - 1
    start: sympy.Expr = sympy.Integer(0)
    stop: sympy.Expr = tk
    if mask.left >= 0:
        lo = r0 + mask.offset - mask.left
        start = sympy.Piecewise((tk, lo >= Sk), (sympy.Max(0, sympy.floor(lo / Bc)), True))
    if mask.right >= 0:
        hi = r1 + mask.offset + mask.right
        stop = sympy.Min(tk, sympy.floor(hi / Bc) + 1)
    return start, stop


def q_tile_range(mask: MaskInfo, kj: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """[start, stop) of the Q tiles with at least one row that sees a key of K/V tile ``kj``.

    Columns c in [kj·Bc, min(kj·Bc + Bc, Sk) − 1] are seen by the rows [c0 − off − right, c1 − off +
    left] clipped to [0, Sq − 1]. The same tile pairs as :func:`kv_tile_range`, enumerated the other way.
    """
    tq = q_tiles()
    c0 = kj * Bc
    c1 = sympy.Min(kj * Bc + Bc, Sk) - 1
    start: sympy.Expr = sympy.Integer(0)
    stop: sympy.Expr = tq
    if mask.right >= 0:
        lo = c0 - mask.offset - mask.right
        start = sympy.Piecewise((tq, lo >= Sq), (sympy.Max(0, sympy.floor(lo / Br)), True))
    if mask.left >= 0:
        hi = c1 - mask.offset + mask.left
        stop = sympy.Min(tq, sympy.floor(hi / Br) + 1)
    return start, stop


def _tensors(spec: AttentionSpec, *names_kinds: tuple[str, str]) -> tuple[Tensor, ...]:
    shapes = {
        "Q": ((B, Hq, Sq, Dqk), spec.dtype),
        "K": ((B, Hkv, Sk, Dqk), spec.dtype),
        "V": ((B, Hkv, Sk, Dv), spec.dtype),
        "O": ((B, Hq, Sq, Dv), spec.dtype),
        "dO": ((B, Hq, Sq, Dv), spec.dtype),
        "L": ((B, Hq, Sq), "fp32"),
        "D": ((B, Hq, Sq), "fp32"),
        "P": ((B, Hq, Sq, Sk), "fp32"),  # fp32: dS = P∘(dP − D) reads the unrounded P (DESIGN §3)
        "dS": ((B, Hq, Sq, Sk), spec.dtype),
        "dQ_ws": ((B, Hq, Sq, Dqk), "fp32"),
        "dK_ws": ((B, Hkv, Sk, Dqk), "fp32"),
        "dV_ws": ((B, Hkv, Sk, Dv), "fp32"),
        "dQ": ((B, Hq, Sq, Dqk), spec.dtype),
        "dK": ((B, Hkv, Sk, Dqk), spec.dtype),
        "dV": ((B, Hkv, Sk, Dv), spec.dtype),
    }
    out = []
    for name, kind in names_kinds:
        shape, dtype = shapes[name]
        layout = spec.layout if len(shape) == 4 and kind in ("input", "output") else "BNSD"
        out.append(Tensor(name, shape, dtype, kind, layout))
    return tuple(out)


BLOCKS = "BM"  # the block-class tensor of a program with a mask mod
SINKS = "sinks"  # the fp32 [Hq] sink logits of a spec with sinks (forward input)


def _param_tensors(mods) -> tuple[Tensor, ...]:
    if mods is None:
        return ()
    return tuple(Tensor(p.name, tuple(sympy.sympify(d) for d in p.shape), p.dtype, "input") for p in mods.params)


def _reads(expr) -> tuple[str, ...]:
    if expr is None:
        return ()
    return tuple(sorted({str(x.base.label) for x in expr.atoms(sympy.Indexed)}))


def _block_tensor(mods) -> Tensor:
    """[Bm, Hm, nQ, nK] fp32 block classes (0 empty, 1 partial, 2 full); Bm = B (Hm = Hq) only when the
    mask reads b (h). Its size is one entry per tile pair (kind ``tiles``), not per element."""
    dep_b, dep_h = mods.mask_depends()
    return Tensor(BLOCKS, (B if dep_b else sympy.Integer(1), Hq if dep_h else sympy.Integer(1), q_tiles(), kv_tiles()), "fp32", "tiles")


def classify_kernel(spec: AttentionSpec, mods) -> Kernel:
    """The block-classification pre-kernel: one program per (Bm, Hm, Q tile, K/V tile) writes the tile's
    class to :data:`BLOCKS` (Flex's BlockMask, computed from the mask expression and the parameters at
    run time; for a mask of indices alone the table depends on the sizes only)."""
    t = _block_tensor(mods)
    bi, hi = (b, hq)
    body = (
        ModOp("cls", "classify", (), i * Br, j * Bc, tensors=_reads(mods.mask)),
        Store(Access(BLOCKS, (bi, hi, i, j), (sympy.Integer(1),)), "cls"),
    )
    grid = _grid([(b, t.shape[0], "batch"), (hq, t.shape[1], "head"), (i, q_tiles(), "q_tile"), (j, kv_tiles(), "kv_tile")], body)
    return Kernel("classify", "classify", (Buffer("cls", (sympy.Integer(1),), "fp32"),), grid)


def _score_op(mods) -> tuple:
    """The ``ModOp`` applying the mods to the fresh score tile S, or nothing."""
    if mods is None:
        return ()
    reads = tuple(sorted(set(_reads(mods.score)) | set(_reads(mods.mask))))
    return (ModOp("S", "score", ("S",), i * Br, j * Bc, blocks=BLOCKS if mods.mask is not None else "", tensors=reads),)


def grad_partial_tensors(spec: AttentionSpec, mods) -> tuple[Tensor, ...]:
    """One [B, Hq, nQ, nK, W] fp32 tensor of per-tile partial windows per parameter-gradient term
    (``gpart{k}``; W = the window's size, :func:`tilegen.mods.grad_window`)."""
    from tilegen.core.mods import grad_window

    out = []
    for k, term in enumerate(mods.grads if mods is not None else ()):
        widths, _ = grad_window(term, mods.param(term.param), Br, Bc)
        out.append(Tensor(f"gpart{k}", (B, Hq, q_tiles(), kv_tiles(), sympy.Mul(*widths)), "fp32", "partial"))
    return tuple(out)


def _guard(spec: AttentionSpec, side: int) -> str:
    """The row-id tensor guarding the output stores of the query (0) or key (1) side: a packed batch's
    sequence ids (``spec.packed_ids``), so that no row outside every sequence is written; or ""."""
    return spec.packed_ids[side] if spec.packed_ids else ""


def _grid(vars_extents_roles, body, note: str = "") -> tuple[Loop, ...]:
    """Nest parallel loops (outermost first) around ``body``."""
    for var, extent, role in reversed(vars_extents_roles):
        body = (Loop(var, sympy.Integer(0), extent, tuple(body), kind="parallel", role=role),)
    return tuple(body)


def _q_rows(name: str, head: sympy.Expr, cols: sympy.Expr | None) -> Access:
    """A Br-row tile of a [B, H, S(, D)] tensor at Q tile i."""
    if cols is None:
        return Access(name, (b, head, i * Br), (Br,))
    return Access(name, (b, head, i * Br, sympy.Integer(0)), (Br, cols))


def _kv_rows(name: str, head: sympy.Expr, cols: sympy.Expr) -> Access:
    return Access(name, (b, head, j * Bc, sympy.Integer(0)), (Bc, cols))


def _score_tile(name: str) -> Access:
    return Access(name, (b, hq, i * Br, j * Bc), (Br, Bc))


def build_forward(spec: AttentionSpec) -> Program:
    """The FA2 forward of ``spec`` (symbolic Br, Bc).

    Per program (b, hq, i): m = -inf, l = 0, acc = 0; for each visible K/V tile j:
    S = scale·Q Kᵀ (masked), m' = max(m, rowmax S), P = exp(S − m'), l = l·e^(m−m') + rowsum P,
    acc = acc·e^(m−m') + P(dtype) V, m = m'. Then O = acc / l (0 where l = 0) and L = m + log l.

    With ``spec.sinks`` the online softmax starts from the sink instead of the empty set: m = σ_h
    (``sinks[hq]``, a 0-d buffer broadcast over the rows), l = 1 = exp(σ_h − m), acc = 0; the sink
    joins l but adds no value row, so a row without a visible key ends with O = 0, L = σ_h (DESIGN §3).
    """
    dt = spec.dtype
    mask = mask_info(spec)
    mods = spec.mods
    blocks = BLOCKS if mods is not None and mods.mask is not None else ""
    kv_head = sympy.floor(hq / G)
    bufs = (
        Buffer("Qi", (Br, Dqk), dt),
        Buffer("Kj", (Bc, Dqk), dt),
        Buffer("Vj", (Bc, Dv), dt),
        Buffer("S", (Br, Bc), "fp32"),
        Buffer("Pc", (Br, Bc), dt),
        Buffer("PV", (Br, Dv), "fp32"),
        Buffer("m", (Br,), "fp32"),
        Buffer("m_new", (Br,), "fp32"),
        Buffer("m_use", (Br,), "fp32"),
        Buffer("alpha", (Br,), "fp32"),
        Buffer("rowsum", (Br,), "fp32"),
        Buffer("l", (Br,), "fp32"),
        Buffer("acc", (Br, Dv), "fp32"),
        Buffer("Oc", (Br, Dv), dt),
        Buffer("lse", (Br,), "fp32"),
        *((Buffer("sink", (), "fp32"),) if spec.sinks else ()),
    )
    j_start, j_stop = kv_tile_range(mask, i)
    inner = (
        Load("Kj", _kv_rows("K", kv_head, Dqk), rows=_guard(spec, 1)),
        Load("Vj", _kv_rows("V", kv_head, Dv), pad=0.0, rows=_guard(spec, 1)),
        MatMul("S", "Qi", "Kj", trans_b=True, alpha=spec.softmax_scale),
        *_score_op(mods),
        Mask("S", "S", i * Br, j * Bc),
        RowReduce("m_new", "S", "max"),
        Elementwise("m_new", "max", ("m_new", "m")),
        Elementwise("m_use", "zero_if_neginf", ("m_new",)),
        Elementwise("alpha", "sub", ("m", "m_use")),
        Elementwise("alpha", "exp", ("alpha",)),
        Elementwise("S", "sub", ("S", "m_use")),
        Elementwise("S", "exp", ("S",)),
        RowReduce("rowsum", "S", "sum"),
        Elementwise("l", "mul", ("l", "alpha")),
        Elementwise("l", "add", ("l", "rowsum")),
        Elementwise("Pc", "cast", ("S",)),
        MatMul("PV", "Pc", "Vj"),
        Elementwise("acc", "mul", ("acc", "alpha")),
        Elementwise("acc", "add", ("acc", "PV")),
        Elementwise("m", "copy", ("m_new",)),
    )
    body = (
        Load("Qi", _q_rows("Q", hq, Dqk), rows=_guard(spec, 0)),
        *(
            (Load("sink", Access(SINKS, (hq,), ())), Elementwise("m", "copy", ("sink",)), Fill("l", 1.0))
            if spec.sinks
            else (Fill("m", NEG_INF), Fill("l", 0.0))
        ),
        Fill("acc", 0.0),
        Loop(j, j_start, j_stop, inner, role="kv_tile", note="visible K/V tiles of Q tile i", domain=VISIBLE, blocks=blocks),
        Elementwise("acc", "safe_div", ("acc", "l")),
        Elementwise("Oc", "cast", ("acc",)),
        Store(_q_rows("O", hq, Dv), "Oc", rows=_guard(spec, 0)),
        Elementwise("lse", "log", ("l",)),
        Elementwise("lse", "add", ("lse", "m")),
        Store(_q_rows("L", hq, None), "lse", rows=_guard(spec, 0)),
    )
    grid = _grid([(b, B, "batch"), (hq, Hq, "head"), (i, q_tiles(), "q_tile")], body)
    kernel = Kernel("fwd", "fwd", bufs, grid)
    tensors = _tensors(spec, ("Q", "input"), ("K", "input"), ("V", "input"), ("O", "output"), ("L", "output"))
    kernels: tuple[Kernel, ...] = (kernel,)
    tensors += _param_tensors(mods)
    if spec.sinks:
        tensors += (Tensor(SINKS, (Hq,), "fp32", "input"),)
    if blocks:
        kernels = (classify_kernel(spec, mods),) + kernels
        tensors += (_block_tensor(mods),)
    return Program(
        name=f"{spec.name}.fwd",
        tensors=tensors,
        kernels=kernels,
        mask=mask,
        scale=spec.softmax_scale,
        env=tuple(sorted(shape_env(spec).items(), key=lambda kv: kv[0].name)),
        attrs=(("form", "forward"),),
        mods=mods,
    )


def _q_tile_loop(start, stop, body, blocks: str = "") -> Loop:
    return Loop(i, start, stop, tuple(body), role="q_tile", note="visible Q tiles of K/V tile j", domain=VISIBLE, blocks=blocks)


def _group_loop(body) -> Loop:
    """The query heads of KV head hkv: hq in [hkv·G, hkv·G + G)."""
    return Loop(hq, hkv * G, hkv * G + G, tuple(body), role="head", note="query heads of KV head hkv")


def build_backward(spec: AttentionSpec, dkv_strategy: str = "on-chip") -> Program:
    """The unfused ("store P") backward of ``spec``: kernels pre, dv, ds, dqdk, post (DESIGN §5).

    ``dkv_strategy`` (:data:`tilegen.core.strategies.DKV_STRATEGIES`): ``"on-chip"`` accumulates
    dV (in dv) and dK (in dqdk) in a [Bc, D] fp32 buffer over the group's heads and visible Q tiles,
    then casts and stores it; ``"atomic"`` adds each tile pair's partial Pᵀ dO and dSᵀ Q atomically into
    the fp32 workspaces dV_ws and dK_ws, which the kernel ``pre_kv`` (one program per (b, hkv, K/V
    tile)) zeroes and ``post_kv`` scales (dK by the softmax scale), casts and stores as dK, dV.

    Raises:
        SpecError: an unknown ``dkv_strategy``.
    """
    from tilegen.core.errors import SpecError
    from tilegen.core.strategies import DKV_STRATEGIES

    if dkv_strategy not in DKV_STRATEGIES:
        raise SpecError("dkv_strategy", dkv_strategy, "one of " + ", ".join(DKV_STRATEGIES))
    atomic_kv = dkv_strategy == "atomic"
    dt = spec.dtype
    mask = mask_info(spec)
    scale = spec.softmax_scale
    mods = spec.mods
    blocks = BLOCKS if mods is not None and mods.mask is not None else ""
    raw = mods is not None and mods.score is not None and mods.grad_needs_score
    grads = mods.grads if mods is not None else ()
    dscore_one = mods is None or mods.score is None or sympy.sympify(mods.dscore) == 1

    pre = Kernel(
        "pre",
        "pre",
        (
            Buffer("Oi", (Br, Dv), dt),
            Buffer("dOi", (Br, Dv), dt),
            Buffer("O32", (Br, Dv), "fp32"),
            Buffer("prod", (Br, Dv), "fp32"),
            Buffer("Di", (Br,), "fp32"),
            Buffer("zeros", (Br, Dqk), "fp32"),
        ),
        _grid(
            [(b, B, "batch"), (hq, Hq, "head"), (i, q_tiles(), "q_tile")],
            (
                Load("Oi", _q_rows("O", hq, Dv), rows=_guard(spec, 0)),
                Load("dOi", _q_rows("dO", hq, Dv), rows=_guard(spec, 0)),
                Elementwise("O32", "cast", ("Oi",)),
                Elementwise("prod", "cast", ("dOi",)),
                Elementwise("prod", "mul", ("prod", "O32")),
                RowReduce("Di", "prod", "sum"),
                Store(_q_rows("D", hq, None), "Di"),
                Fill("zeros", 0.0),
                Store(_q_rows("dQ_ws", hq, Dqk), "zeros"),
            ),
        ),
    )

    # Phase 1: P = exp(scale·Q Kᵀ − L) → HBM; dV = Σ Pᵀ dO over the group's heads and visible Q tiles.
    i_start, i_stop = q_tile_range(mask, j)
    dv_inner = (
        Load("Qi", _q_rows("Q", hq, Dqk), rows=_guard(spec, 0)),
        Load("dOi", _q_rows("dO", hq, Dv), pad=0.0, rows=_guard(spec, 0)),
        Load("Li", _q_rows("L", hq, None), pad=0.0, rows=_guard(spec, 0)),
        MatMul("S", "Qi", "Kj", trans_b=True, alpha=scale),
        *((Elementwise("S_raw", "copy", ("S",)), Store(_score_tile("Sraw"), "S_raw")) if raw else ()),
        *_score_op(mods),
        Mask("S", "S", i * Br, j * Bc),
        Elementwise("L_use", "zero_if_neginf", ("Li",)),
        Elementwise("S", "sub", ("S", "L_use")),
        Elementwise("S", "exp", ("S",)),
        Elementwise("Pc", "cast", ("S",)),
        Store(_score_tile("P"), "S"),
        *(
            (MatMul("dVp", "Pc", "dOi", trans_a=True), Store(_kv_rows("dV_ws", hkv, Dv), "dVp", accumulate=True))
            if atomic_kv
            else (MatMul("dV_acc", "Pc", "dOi", trans_a=True, accumulate=True),)
        ),
    )
    dv = Kernel(
        "dv",
        "dv",
        (
            Buffer("Kj", (Bc, Dqk), dt),
            Buffer("Qi", (Br, Dqk), dt),
            Buffer("dOi", (Br, Dv), dt),
            Buffer("Li", (Br,), "fp32"),
            Buffer("L_use", (Br,), "fp32"),
            Buffer("S", (Br, Bc), "fp32"),
            *((Buffer("S_raw", (Br, Bc), "fp32"),) if raw else ()),
            Buffer("Pc", (Br, Bc), dt),
            *((Buffer("dVp", (Bc, Dv), "fp32"),) if atomic_kv else (Buffer("dV_acc", (Bc, Dv), "fp32"), Buffer("dVc", (Bc, Dv), dt))),
        ),
        _grid(
            [(b, B, "batch"), (hkv, Hkv, "head"), (j, kv_tiles(), "kv_tile")],
            (
                Load("Kj", _kv_rows("K", hkv, Dqk), rows=_guard(spec, 1)),
                *(() if atomic_kv else (Fill("dV_acc", 0.0),)),
                _group_loop((_q_tile_loop(i_start, i_stop, dv_inner, blocks),)),
                *(
                    ()
                    if atomic_kv
                    else (Elementwise("dVc", "cast", ("dV_acc",)), Store(_kv_rows("dV", hkv, Dv), "dVc", rows=_guard(spec, 1)))
                ),
            ),
        ),
    )

    # Phase 2: dP = dO Vᵀ; dS = P∘(dP − D) → HBM.
    j_start, j_stop = kv_tile_range(mask, i)
    ds_inner = (
        Load("Vj", _kv_rows("V", sympy.floor(hq / G), Dv), pad=0.0, rows=_guard(spec, 1)),
        Load("Pi", _score_tile("P"), pad=0.0),
        MatMul("dP", "dOi", "Vj", trans_b=True),
        Elementwise("dP", "sub", ("dP", "Di")),
        Elementwise("dP", "mul", ("Pi", "dP")),
        *_grad_ops(mods, raw, grads, dscore_one),
        Elementwise("dSc", "cast", ("dP",)),
        Store(_score_tile("dS"), "dSc"),
    )
    ds = Kernel(
        "ds",
        "ds",
        (
            Buffer("dOi", (Br, Dv), dt),
            Buffer("Di", (Br,), "fp32"),
            Buffer("Vj", (Bc, Dv), dt),
            Buffer("Pi", (Br, Bc), "fp32"),
            Buffer("dP", (Br, Bc), "fp32"),
            Buffer("dSc", (Br, Bc), dt),
            *((Buffer("Sraw_i", (Br, Bc), "fp32"),) if raw else ()),
            *_grad_buffers(mods, grads),
        ),
        _grid(
            [(b, B, "batch"), (hq, Hq, "head"), (i, q_tiles(), "q_tile")],
            (
                Load("dOi", _q_rows("dO", hq, Dv), pad=0.0, rows=_guard(spec, 0)),
                Load("Di", _q_rows("D", hq, None), pad=0.0),
                Loop(j, j_start, j_stop, ds_inner, role="kv_tile", note="visible K/V tiles of Q tile i", domain=VISIBLE, blocks=blocks),
            ),
        ),
    )

    # Phase 3: dK = scale·Σ dSᵀ Q; dQ_ws += dS K (atomic: other K/V tiles add to the same rows).
    dqdk_inner = (
        Load("Qi", _q_rows("Q", hq, Dqk), pad=0.0, rows=_guard(spec, 0)),
        Load("dSi", _score_tile("dS"), pad=0.0),
        *(
            (MatMul("dKp", "dSi", "Qi", trans_a=True), Store(_kv_rows("dK_ws", hkv, Dqk), "dKp", accumulate=True))
            if atomic_kv
            else (MatMul("dK_acc", "dSi", "Qi", trans_a=True, accumulate=True),)
        ),
        MatMul("dQp", "dSi", "Kj"),
        Store(_q_rows("dQ_ws", hq, Dqk), "dQp", accumulate=True),
    )
    dqdk = Kernel(
        "dqdk",
        "dqdk",
        (
            Buffer("Kj", (Bc, Dqk), dt),
            Buffer("Qi", (Br, Dqk), dt),
            Buffer("dSi", (Br, Bc), dt),
            Buffer("dQp", (Br, Dqk), "fp32"),
            *((Buffer("dKp", (Bc, Dqk), "fp32"),) if atomic_kv else (Buffer("dK_acc", (Bc, Dqk), "fp32"), Buffer("dKc", (Bc, Dqk), dt))),
        ),
        _grid(
            [(b, B, "batch"), (hkv, Hkv, "head"), (j, kv_tiles(), "kv_tile")],
            (
                Load("Kj", _kv_rows("K", hkv, Dqk), pad=0.0, rows=_guard(spec, 1)),
                *(() if atomic_kv else (Fill("dK_acc", 0.0),)),
                _group_loop((_q_tile_loop(i_start, i_stop, dqdk_inner, blocks),)),
                *(
                    ()
                    if atomic_kv
                    else (
                        Elementwise("dK_acc", "mul", ("dK_acc", scale)),
                        Elementwise("dKc", "cast", ("dK_acc",)),
                        Store(_kv_rows("dK", hkv, Dqk), "dKc", rows=_guard(spec, 1)),
                    )
                ),
            ),
        ),
    )

    post = Kernel(
        "post",
        "post",
        (Buffer("dQi", (Br, Dqk), "fp32"), Buffer("dQc", (Br, Dqk), dt)),
        _grid(
            [(b, B, "batch"), (hq, Hq, "head"), (i, q_tiles(), "q_tile")],
            (
                Load("dQi", _q_rows("dQ_ws", hq, Dqk)),
                Elementwise("dQi", "mul", ("dQi", scale)),
                Elementwise("dQc", "cast", ("dQi",)),
                Store(_q_rows("dQ", hq, Dqk), "dQc", rows=_guard(spec, 0)),
            ),
        ),
    )
    tensors = _tensors(
        spec,
        ("Q", "input"),
        ("K", "input"),
        ("V", "input"),
        ("O", "input"),
        ("L", "input"),
        ("dO", "input"),
        ("D", "workspace"),
        ("P", "workspace"),
        ("dS", "workspace"),
        ("dQ_ws", "workspace"),
        *((("dK_ws", "workspace"), ("dV_ws", "workspace")) if atomic_kv else ()),
        ("dQ", "output"),
        ("dK", "output"),
        ("dV", "output"),
    )
    kernels: tuple[Kernel, ...] = (pre, dv, ds, dqdk, post)
    if atomic_kv:
        kernels = (pre, _pre_kv(spec), dv, ds, dqdk, post, _post_kv(spec))
    tensors += _param_tensors(mods)
    if raw:
        tensors += (Tensor("Sraw", (B, Hq, Sq, Sk), "fp32", "workspace"),)
    tensors += grad_partial_tensors(spec, mods)
    if blocks:
        kernels = (classify_kernel(spec, mods),) + kernels
        tensors += (_block_tensor(mods),)
    return Program(
        name=f"{spec.name}.bwd",
        tensors=tensors,
        kernels=kernels,
        mask=mask,
        scale=scale,
        env=tuple(sorted(shape_env(spec).items(), key=lambda kv: kv[0].name)),
        attrs=(("form", "unfused"),),
        mods=mods,
    )


def _kv_grid(body) -> tuple[Loop, ...]:
    return _grid([(b, B, "batch"), (hkv, Hkv, "head"), (j, kv_tiles(), "kv_tile")], body)


def _pre_kv(spec: AttentionSpec) -> Kernel:
    """Zero the fp32 workspaces dK_ws, dV_ws of the atomic dK/dV strategy, one K/V tile per program."""
    return Kernel(
        "pre_kv",
        "pre",
        (Buffer("zk", (Bc, Dqk), "fp32"), Buffer("zv", (Bc, Dv), "fp32")),
        _kv_grid(
            (
                Fill("zk", 0.0),
                Store(_kv_rows("dK_ws", hkv, Dqk), "zk"),
                Fill("zv", 0.0),
                Store(_kv_rows("dV_ws", hkv, Dv), "zv"),
            )
        ),
    )


def _post_kv(spec: AttentionSpec) -> Kernel:
    """dK = scale·dK_ws, dV = dV_ws in the spec's dtype (the atomic dK/dV strategy), one K/V tile per program."""
    dt = spec.dtype
    return Kernel(
        "post_kv",
        "post",
        (Buffer("dKi", (Bc, Dqk), "fp32"), Buffer("dKc", (Bc, Dqk), dt), Buffer("dVi", (Bc, Dv), "fp32"), Buffer("dVc", (Bc, Dv), dt)),
        _kv_grid(
            (
                Load("dKi", _kv_rows("dK_ws", hkv, Dqk)),
                Elementwise("dKi", "mul", ("dKi", spec.softmax_scale)),
                Elementwise("dKc", "cast", ("dKi",)),
                Store(_kv_rows("dK", hkv, Dqk), "dKc", rows=_guard(spec, 1)),
                Load("dVi", _kv_rows("dV_ws", hkv, Dv)),
                Elementwise("dVc", "cast", ("dVi",)),
                Store(_kv_rows("dV", hkv, Dv), "dVc", rows=_guard(spec, 1)),
            )
        ),
    )


def _grad_buffers(mods, grads) -> tuple[Buffer, ...]:
    from tilegen.core.mods import grad_window

    out = []
    for k, term in enumerate(grads):
        widths, _ = grad_window(term, mods.param(term.param), Br, Bc)
        out.append(Buffer(f"gp{k}", (sympy.Mul(*widths),), "fp32"))
    return tuple(out)


def _grad_ops(mods, raw: bool, grads, dscore_one: bool) -> tuple:
    """After dS′ = P∘(dP − D) (in buffer dP): each parameter's per-tile partial, then dS = dS′·∂score′/∂score."""
    if mods is None:
        return ()
    out: list = []
    extra = ("Sraw_i",) if raw else ()
    if raw:
        out.append(Load("Sraw_i", _score_tile("Sraw")))  # its padding reaches no result: dS′ is 0 there
    reads = _reads(mods.score)
    for k, term in enumerate(grads):
        out.append(ModOp(f"gp{k}", "pgrad", ("dP",) + extra, i * Br, j * Bc, term=k, tensors=reads))
        out.append(Store(Access(f"gpart{k}", (b, hq, i, j, sympy.Integer(0)), (sympy.Mul(*_grad_buffers(mods, grads)[k].shape),)), f"gp{k}"))
    if not dscore_one:
        out.append(ModOp("dP", "dscore", ("dP",) + extra, i * Br, j * Bc, tensors=reads))
    return tuple(out)
