"""Context-parallel (ring) attention over ``torch.distributed`` with tilegen kernels.

The sequence is split over the ranks of a process group; each rank keeps its query chunk and passes its
key/value chunk around the ring with point-to-point transfers (``torch.distributed.batch_isend_irecv``),
the next chunk's transfer posted before the current chunk's kernel runs. Each step runs the kernel of
:func:`tilegen.torch.attention_forward` on the pair (local queries, visiting keys) with the mask that
pair needs, and merges the partial result through the logsumexp (:func:`tilegen.torch.merge_attention`).
The backward runs the ring again: :func:`tilegen.torch.attention_backward` with the merged out and lse,
dQ summed locally in fp32 and each block's dK/dV accumulator (fp32) travelling with the block, back to
its owner after the last step. No communication layer of its own: the process group does it (gloo on
CPU, NCCL on CUDA).

Layout of the global sequence over W ranks (``balance``), for queries and keys alike:

- ``"plain"``: rank r holds chunk r of W equal chunks. Causal work is unbalanced (rank r does r + 1
  blocks' worth).
- ``"zigzag"``: the sequence is cut into 2W equal chunks and rank r holds chunks r and 2W − 1 − r, in
  that order (ring-flash-attention's zigzag, PyTorch's head-tail load balancer): every rank does the
  same causal work. Local lengths must be even.

:func:`shard_sequence` and :func:`unshard_sequence` cut and reassemble a global tensor by these rules.

Layout: every entry point takes ``layout="BSND"`` ([B, S, H, D], sequence dim 1) or ``"BNSD"`` ([B, H, S,
D], sequence dim 2), required (``seq_dim=`` instead for the shard functions' other tensors): the two
layouts' shapes are often both valid, and cutting or attending along the wrong dim gives a result of
the right shape over the heads. Shapes that cannot be the stated layout raise, naming the other layout
when they fit it.

Masks: the global mask is DESIGN §3's (window (left, right), −1 unbounded; causal = (−1, 0)), aligned
bottom-right over the global lengths (off = W·Sk − W·Sq). For each pair of contiguous pieces
(query range, key range) the step clips both ranges to the keys and queries the band can reach, which
leaves a top-left window (left − d, right + d) on the clipped block (d = its diagonal offset), always
expressible; a pair outside the band is skipped. Whole rectangles of fully visible pieces run as one
call, and a rank's own zigzag block under a plain causal mask runs as one causal call (its pieces are in
increasing order), so causal zigzag needs one kernel call per step as in ring-flash-attention.

Errors: arguments are checked on every rank and compared across ranks (one ``all_gather_object``) before
any transfer, so a bad or mismatched argument raises the same one-line :class:`SpecError` on every rank
instead of leaving the others waiting. A failure after that point (a kernel that raises on one rank)
leaves the other ranks in their receive until the process group's timeout
(``init_process_group(timeout=...)``): set it bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tilegen.core.errors import MissingFieldError, SpecError
from tilegen import torch as tt
from tilegen.core import validate
from tilegen.torch.call import check_tensors
from tilegen.torch.device import check_gpu_target, gpu_target

__all__ = ["ring_attention", "shard_sequence", "unshard_sequence", "ring_plan", "BALANCES", "LAYOUTS"]

BALANCES = ("zigzag", "plain")
LAYOUTS = ("BSND", "BNSD")
_LAYOUT_SEQ_DIM = {"BSND": 1, "BNSD": 2}
_LAYOUT_WORDS = "'BSND' ([B, S, H, D]) or 'BNSD' ([B, H, S, D])"


# --- where each rank's pieces sit in the global sequence ---------------------------------------------


def _pieces(rank: int, world: int, n_local: int, balance: str) -> tuple[tuple[int, int, int], ...]:
    """The contiguous pieces of rank ``rank``'s chunk: (global start, local start, length) each."""
    if balance == "plain":
        return ((rank * n_local, 0, n_local),)
    half = n_local // 2
    return ((rank * half, 0, half), ((2 * world - 1 - rank) * half, half, half))


def _seq_dim(x_ndim: int, layout, seq_dim, where: str) -> int:
    """The sequence dim of a tensor of ``x_ndim`` dimensions from exactly one of ``layout`` (q, k, v,
    out and their gradients: ``"BSND"`` → 1, ``"BNSD"`` → 2) and ``seq_dim`` (any other tensor)."""
    if layout is None and seq_dim is None:
        raise MissingFieldError("layout", f"{_LAYOUT_WORDS}, or seq_dim=N for a tensor of another layout", where=where)
    if layout is not None and seq_dim is not None:
        raise SpecError("seq_dim", seq_dim, f"None when layout is given (layout={layout!r} sets the sequence dim)", where=where)
    if layout is not None:
        _check_choice("layout", layout, LAYOUTS, where=where)
        if x_ndim != 4:
            raise SpecError("layout", layout, f"a layout of 4 dimensions for 4-dimensional tensors (this one has {x_ndim}; seq_dim=N for others)", where=where)
        return _LAYOUT_SEQ_DIM[layout]
    if isinstance(seq_dim, bool) or not isinstance(seq_dim, int) or not -x_ndim <= seq_dim < x_ndim:
        raise SpecError("seq_dim", seq_dim, f"an int in [{-x_ndim}, {x_ndim}) (a dim of the {x_ndim}-dimensional tensor)", where=where)
    return seq_dim % x_ndim


def _other_layout_hint(shape: tuple, dim: int, layout, parts: int) -> str:
    """``"; dim 2 (BNSD's sequence dim) would split: is the tensor BNSD?"`` (or the same for BSND) when
    the other layout's sequence dim would split into ``parts`` where the stated one does not, else ''."""
    if layout is None:
        return ""
    other = LAYOUTS[1 - LAYOUTS.index(layout)]
    n = shape[_LAYOUT_SEQ_DIM[other]]
    return f"; dim {_LAYOUT_SEQ_DIM[other]} ({other}'s sequence dim) would split: is the tensor {other}?" if n >= parts and n % parts == 0 else ""


def shard_sequence(x: torch.Tensor, rank: int, world_size: int, *, layout: str | None = None, balance: str = "zigzag", seq_dim: int | None = None) -> torch.Tensor:
    """Rank ``rank``'s chunk of a global tensor (contiguous copy), by the ``balance`` rule above.

    Args:
        x: the global tensor; its sequence dim has the global length, a positive multiple of W (of 2W
            for zigzag).
        layout: required for q, k, v, out and their gradients: ``"BSND"`` ([B, S, H, D], sequence dim 1)
            or ``"BNSD"`` ([B, H, S, D], sequence dim 2). For any other tensor (an lse [B, H, S], a vector
            of positions) give ``seq_dim`` instead; exactly one of the two.
        seq_dim: the sequence dim of a tensor that is neither layout.

    Returns:
        x's dtype and device, its sequence dim W times shorter.

    Raises:
        SpecError: layout and seq_dim both missing (``layout is missing``) or both given, a layout for a
            tensor that is not 4-dimensional, a sequence length that does not split (zero, shorter than
            the number of chunks, or not a multiple of it; the message names the other layout when its
            sequence dim would split), a bad rank, world size or balance.
    """
    where = "shard_sequence"
    _check_choice("balance", balance, BALANCES, where=where)
    if not isinstance(x, torch.Tensor):
        raise SpecError("x", type(x).__name__, "a torch.Tensor", where=where)
    dim = _seq_dim(x.dim(), layout, seq_dim, where)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1 or isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise SpecError("rank", (rank, world_size), "0 <= rank < world_size, world_size >= 1", where=where)
    parts = world_size * (2 if balance == "zigzag" else 1)
    total = x.shape[dim]
    if total < parts or total % parts:
        named = f"{layout}'s sequence dim {dim}" if layout else f"dim {dim}"
        raise SpecError(
            "x.shape", tuple(x.shape),
            f"a length along {named} that is a positive multiple of {parts} ({balance}, {world_size} ranks){_other_layout_hint(tuple(x.shape), dim, layout, parts)}",
            where=where,
        )
    n_local = total // world_size
    return torch.cat([x.narrow(dim, g, n) for g, _, n in _pieces(rank, world_size, n_local, balance)], dim=dim).contiguous()


def unshard_sequence(chunks, *, layout: str | None = None, balance: str = "zigzag", seq_dim: int | None = None) -> torch.Tensor:
    """The global tensor from every rank's chunk (``chunks[r]`` from rank r): the inverse of
    :func:`shard_sequence`, with the same ``layout`` / ``seq_dim`` and ``balance``.

    Args:
        chunks: a list of W tensors of one shape, dtype and device.

    Raises:
        SpecError: layout and seq_dim both missing or both given, an empty list, chunks of different
            shapes, a layout for tensors that are not 4-dimensional, an odd local length for zigzag.
    """
    where = "unshard_sequence"
    _check_choice("balance", balance, BALANCES, where=where)
    chunks = list(chunks)
    if not chunks or not all(isinstance(c, torch.Tensor) for c in chunks):
        raise SpecError("chunks", [type(c).__name__ for c in chunks], "a non-empty list of tensors, one per rank", where=where)
    shapes = [tuple(c.shape) for c in chunks]
    if len(set(shapes)) > 1:
        raise SpecError("chunks", shapes, "chunks of one shape (every rank's)", where=where)
    dim = _seq_dim(chunks[0].dim(), layout, seq_dim, where)
    world = len(chunks)
    n_local = chunks[0].shape[dim]
    if n_local < 1 or (balance == "zigzag" and n_local % 2):
        raise SpecError("chunks", shapes, f"a {'positive even' if balance == 'zigzag' else 'positive'} local length along dim {dim} ({balance})", where=where)
    placed = []
    for r, c in enumerate(chunks):
        placed += [(g, c.narrow(dim, lo, n)) for g, lo, n in _pieces(r, world, n_local, balance)]
    return torch.cat([p for _, p in sorted(placed, key=lambda t: t[0])], dim=dim)


# --- the per-step plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One kernel call of a ring step: local query rows [q0, q1), local key rows [k0, k1) of the visiting
    block, and the top-left window (left, right) on that block ((-1, -1): full)."""

    q0: int
    q1: int
    k0: int
    k1: int
    window: tuple[int, int]


def _band(qg: int, m: int, kg: int, n: int, window: tuple[int, int], off: int):
    """The pair (global queries [qg, qg+m), global keys [kg, kg+n)) under the global band
    ``i + off − left <= j <= i + off + right``: None when no query sees a key, else (dq0, dq1, dk0, dk1,
    top-left window) relative to the pieces' starts, clipped to the rows and keys the band reaches."""
    left, right = window
    k0, k1 = kg, kg + n
    if left >= 0:
        k0 = max(k0, qg + off - left)
    if right >= 0:
        k1 = min(k1, qg + m - 1 + off + right + 1)
    if k0 >= k1:
        return None
    q0, q1 = qg, qg + m
    if right >= 0:
        q0 = max(q0, k0 - off - right)
    if left >= 0:
        q1 = min(q1, k1 - 1 - off + left + 1)
    if q0 >= q1:
        return None
    d = q0 + off - k0  # key j of the clipped block is visible to its query i iff i + d − left <= j <= i + d + right
    lo_free = left < 0 or (q1 - q0 - 1) + d - left <= 0
    hi_free = right < 0 or d + right >= (k1 - k0) - 1
    w = (-1 if lo_free else left - d, -1 if hi_free else right + d)
    return q0 - qg, q1 - qg, k0 - kg, k1 - kg, w


def ring_plan(rank: int, source: int, world: int, n_q: int, n_k: int, *, balance: str, window: tuple[int, int]) -> tuple[Call, ...]:
    """The kernel calls of rank ``rank`` on the K/V block of rank ``source`` (empty: the step is skipped).

    Args:
        n_q, n_k: the local query and key lengths (the same on every rank); window: the global
            (left, right) of DESIGN §3, bottom-right aligned over the global lengths.
    """
    off = world * n_k - world * n_q
    qp, kp = _pieces(rank, world, n_q, balance), _pieces(source, world, n_k, balance)
    pairs = {}
    for a, (qg, ql, m) in enumerate(qp):
        for b, (kg, kl, n) in enumerate(kp):
            band = _band(qg, m, kg, n, window, off)
            if band is not None:
                dq0, dq1, dk0, dk1, w = band
                pairs[a, b] = Call(ql + dq0, ql + dq1, kl + dk0, kl + dk1, w)
    if not pairs:
        return ()
    if rank == source and n_q == n_k and window == (-1, 0):
        # The rank's own pieces, in increasing global order for queries and keys alike, under the plain
        # causal mask: local key j is visible to local query i iff j <= i, one causal call on the chunk.
        return (Call(0, n_q, 0, n_k, (-1, 0)),)
    rows = sorted({a for a, _ in pairs})
    cols = sorted({b for _, b in pairs})

    def whole(a: int, b: int) -> bool:
        return pairs.get((a, b)) == Call(qp[a][1], qp[a][1] + qp[a][2], kp[b][1], kp[b][1] + kp[b][2], (-1, -1))

    if all(whole(a, b) for a in rows for b in cols):
        # A rectangle of fully visible pieces, adjacent locally (a rank has at most two): one call.
        return (Call(qp[rows[0]][1], qp[rows[-1]][1] + qp[rows[-1]][2], kp[cols[0]][1], kp[cols[-1]][1] + kp[cols[-1]][2], (-1, -1)),)
    return tuple(pairs[key] for key in sorted(pairs))


# --- communication ---------------------------------------------------------------------------------

_TAGS = {"k": 11, "v": 12, "dk": 13, "dv": 14}


class _Ring:
    """Point-to-point transfers to the next rank and from the previous one, posted in one batch."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        self.send_to = dist.get_global_rank(group, nxt) if group is not None else nxt
        self.recv_from = dist.get_global_rank(group, prv) if group is not None else prv

    def start(self, tensors: dict) -> tuple[dict, tuple]:
        """Post the sends of ``tensors`` (name → tensor) and receives of same-shaped contiguous ones;
        returns the receive buffers and what :meth:`wait` takes (the requests, and the tensors sent,
        kept alive until the transfer is done)."""
        sent = {name: t.contiguous() for name, t in tensors.items()}
        received = {name: torch.empty_like(t) for name, t in sent.items()}
        ops = []
        for name in tensors:
            ops.append(dist.P2POp(dist.isend, sent[name], self.send_to, group=self.group, tag=_TAGS[name]))
            ops.append(dist.P2POp(dist.irecv, received[name], self.recv_from, group=self.group, tag=_TAGS[name]))
        return received, (dist.batch_isend_irecv(ops), sent)

    @staticmethod
    def wait(pending: tuple) -> None:
        for req in pending[0]:
            req.wait()


# --- the checks ----------------------------------------------------------------------------------


def _check_choice(field: str, value: Any, accepted: tuple[str, ...], where: str | None = None) -> None:
    if not isinstance(value, str) or value not in accepted:
        raise SpecError(field, value, " or ".join(repr(a) for a in accepted), where=where)


def _shape_check(q, k, v, layout: str, balance: str, softmax_scale) -> tuple[int, int]:
    """The shapes of one rank under ``layout`` (tilegen.torch's checks, and zigzag's even halves);
    return the local lengths (n_q, n_k)."""
    check_tensors(q, k, v, layout=layout, scale=softmax_scale, scale_name="softmax_scale")
    seq_dim = _LAYOUT_SEQ_DIM[layout]
    n_q, n_k = q.shape[seq_dim], k.shape[seq_dim]
    if balance == "zigzag" and (n_q % 2 or n_k % 2):
        raise SpecError("q.shape", (tuple(q.shape), tuple(k.shape)), f"even local lengths of q and k for balance='zigzag' (two halves per rank, {layout})")
    return n_q, n_k


def _local_check(q, k, v, *, causal, window_size, softmax_scale, layout, balance, deterministic, target) -> tuple:
    """Check one rank's arguments; return (window, seq_dim, n_q, n_k) or raise SpecError.

    Shapes that fail under the stated layout but pass under the other raise with the other named (q, k
    and v given in the other layout); shapes valid under both cannot be told apart here."""
    if layout is None:
        raise MissingFieldError("layout", _LAYOUT_WORDS)
    _check_choice("layout", layout, LAYOUTS)
    _check_choice("balance", balance, BALANCES)
    if not isinstance(deterministic, bool):
        raise SpecError("deterministic", deterministic, "True or False")
    window = validate.window(causal, window_size, causal_name="causal", window_name="window_size")
    try:
        n_q, n_k = _shape_check(q, k, v, layout, balance, softmax_scale)
    except SpecError as exc:
        other = LAYOUTS[1 - LAYOUTS.index(layout)]
        try:
            _shape_check(q, k, v, other, balance, softmax_scale)
        except SpecError:
            raise exc from None
        raise SpecError(exc.field, exc.value, f"{exc.accepted}; these shapes fit layout={other!r}: are q, k, v {other}?") from None
    check_gpu_target(gpu_target(target, q))
    return window, _LAYOUT_SEQ_DIM[layout], n_q, n_k


def _collective_check(group, check, signature) -> tuple:
    """Run ``check`` on every rank and compare ``signature`` across ranks; raise the same SpecError on
    every rank when any rank fails or the signatures differ."""
    try:
        result, error = check(), None
    except SpecError as exc:
        result, error = None, (isinstance(exc, MissingFieldError), exc.field, exc.value, exc.accepted)
    world = dist.get_world_size(group)
    gathered = [None] * world
    dist.all_gather_object(gathered, (error, signature), group=group)
    for r, (err, _) in enumerate(gathered):
        if err is not None:
            missing, field, value, accepted = err
            if missing:
                raise MissingFieldError(field, accepted, where=f"ring_attention on rank {r}")
            raise SpecError(field, value, accepted, where=f"ring_attention on rank {r}")
    first = gathered[0][1]
    for r, (_, sig) in enumerate(gathered):
        if sig != first:
            raise SpecError(f"arguments on rank {r}", sig, f"those of rank 0, {first} (shapes, dtype and options equal on every rank)", where="ring_attention")
    return result


# --- the ring --------------------------------------------------------------------------------------


def _narrow(x: torch.Tensor, dim: int, lo: int, hi: int) -> torch.Tensor:
    return x.narrow(dim, lo, hi - lo)


def _ring_forward(q, k, v, p) -> tuple[torch.Tensor, torch.Tensor]:
    ring, dim = p["ring"], p["seq_dim"]
    out = torch.zeros((*q.shape[:3], v.shape[3]), dtype=torch.float32, device=q.device)
    lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if p["layout"] == "BSND" else tuple(q.shape[:3])
    lse = torch.full(lse_shape, float("-inf"), dtype=torch.float32, device=q.device)
    for step in range(ring.world):
        pending = None
        if step + 1 < ring.world:
            received, pending = ring.start({"k": k, "v": v})  # the next block travels while this one computes
        source = (ring.rank - step) % ring.world
        for c in ring_plan(ring.rank, source, ring.world, p["n_q"], p["n_k"], balance=p["balance"], window=p["window"]):
            tt.attention_forward(
                _narrow(q, dim, c.q0, c.q1), _narrow(k, dim, c.k0, c.k1), _narrow(v, dim, c.k0, c.k1),
                softmax_scale=p["scale"], window_size=c.window, alignment="top_left", layout=p["layout"],
                out=_narrow(out, dim, c.q0, c.q1), lse=lse[:, :, c.q0:c.q1], target=p["target"],
            )
        if pending is not None:
            ring.wait(pending)
            k, v = received["k"], received["v"]
    return out, lse


def _ring_backward(q, k, v, out, lse, dout, p) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ring, dim = p["ring"], p["seq_dim"]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    acc = None  # the dK/dV accumulators of the block now here, travelling with it
    grad_pending = None
    for step in range(ring.world):
        pending = None
        if step + 1 < ring.world:
            received, pending = ring.start({"k": k, "v": v})
        source = (ring.rank - step) % ring.world
        dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        for c in ring_plan(ring.rank, source, ring.world, p["n_q"], p["n_k"], balance=p["balance"], window=p["window"]):
            qs = lambda x: _narrow(x, dim, c.q0, c.q1)  # noqa: E731
            ks = lambda x: _narrow(x, dim, c.k0, c.k1)  # noqa: E731
            tt.attention_backward(
                qs(q), ks(k), ks(v), qs(out), lse[:, :, c.q0:c.q1], qs(dout),
                softmax_scale=p["scale"], window_size=c.window, alignment="top_left", layout=p["layout"],
                dq=qs(dq), dk=ks(dk), dv=ks(dv), deterministic=p["deterministic"], target=p["target"],
            )
        if grad_pending is not None:
            ring.wait(grad_pending)  # the accumulators of this block from the previous rank
            dk.add_(acc["dk"], alpha=1.0)
            dv.add_(acc["dv"], alpha=1.0)
        if ring.world > 1:
            acc, grad_pending = ring.start({"dk": dk, "dv": dv})
        else:  # one rank: the block never leaves
            acc = {"dk": dk, "dv": dv}
        if pending is not None:
            ring.wait(pending)
            k, v = received["k"], received["v"]
    if grad_pending is not None:
        ring.wait(grad_pending)  # after W steps each block's accumulators are back with their owner
    return dq, acc["dk"], acc["dv"]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p):
        out, lse = _ring_forward(q, k, v, p)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.p = p
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(q, k, v, out, lse, dout.contiguous(), ctx.p)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None



def ring_attention(
    q,
    k,
    v,
    *,
    group=None,
    causal: bool = False,
    window_size=(-1, -1),
    softmax_scale=None,
    layout: str | None = None,
    balance: str = "zigzag",
    deterministic: bool = False,
    return_lse: bool = False,
    target: str | None = None,
):
    """Context-parallel attention over the ranks of ``group``; gradients flow to q, k, v.

    Every rank calls it with its own chunk (:func:`shard_sequence`); the result is that rank's chunk of
    the attention over the whole sequence (:func:`unshard_sequence` reassembles it).

    Args:
        q: the local queries, [B, Sq, Hq, D] (BSND) or [B, Hq, Sq, D] (BNSD); k: [.., Sk, Hkv, D] (Hkv
            divides Hq, GQA/MQA); v: like k with head dim Dv; float16, bfloat16 or float32; CPU (gloo,
            the interpreter) or CUDA (NCCL, the Triton kernels). The same shapes on every rank; global
            lengths W·Sq and W·Sk.
        layout: required: ``"BSND"`` or ``"BNSD"``, the layout of q, k, v (and of out and the
            gradients). Shapes that cannot be that layout raise, naming the other layout when they fit it;
            shapes valid in both (Hkv = Hq, any local lengths) are taken as stated.
        group: a ``torch.distributed`` process group (None: the default group).
        causal, window_size: the global mask (DESIGN §3: (left, right), −1 unbounded, causal = (left, 0)),
            bottom-right aligned over the global lengths.
        softmax_scale: S = scale·QKᵀ; None → 1/√D.
        balance: ``"zigzag"`` (rank r holds chunks r and 2W−1−r of 2W) or ``"plain"`` (chunk r of W).
        deterministic: True picks the backward without atomics on the GPU; the ring's own sums are in a
            fixed order either way.
        return_lse: also return the local rows' logsumexp (float32 [B, Hq, Sq], no gradient).
        target: the GPU target file whose schedule CUDA tensors use; None (the default): the target of
            their CUDA device (:func:`tilegen.torch.device.gpu_target`: ``H100`` → ``h100``, ``H200`` → ``h200``,
            another GPU → the nearest target, with one warning).

    With NCCL, set each rank's device first (``torch.cuda.set_device``): the cross-rank check uses
    ``all_gather_object``, which runs on the current device.

    Returns:
        out: the local rows, q's shape with Dv, q's dtype (and lse when ``return_lse``).

    Raises:
        SpecError (ValueError): a bad or cross-rank mismatched argument, named, on every rank;
            ``layout is missing`` when no layout is given.
        RuntimeError: torch.distributed not initialised.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("tilegen.distributed.ring_attention needs torch.distributed initialised (init_process_group)")
    if not isinstance(return_lse, bool):
        raise SpecError("return_lse", return_lse, "True or False")
    kw = dict(causal=causal, window_size=window_size, softmax_scale=softmax_scale, layout=layout, balance=balance, deterministic=deterministic, target=target)
    signature = (
        tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__ for x in (q, k, v)),
        str(getattr(q, "dtype", None)),
        repr(sorted(kw.items())),
    )
    window, seq_dim, n_q, n_k = _collective_check(group, lambda: _local_check(q, k, v, **kw), signature)
    p = dict(
        ring=_Ring(group), seq_dim=seq_dim, n_q=n_q, n_k=n_k, window=window, balance=balance, layout=layout,
        scale=None if softmax_scale is None else float(softmax_scale), deterministic=deterministic, target=target,
    )
    out, lse = _RingAttention.apply(q, k, v, p)
    return (out, lse) if return_lse else out
