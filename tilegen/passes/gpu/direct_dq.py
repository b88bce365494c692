"""GPU pass direct-dq (after the tile search): the atomic backward where one K/V tile covers the keys
(Sk <= Bc, no block table, every Q tile visible from it: each dQ tile then gets one partial, from one
program) folds its pre and post kernels into main: D = rowsum(dO∘O) is computed where main loaded it
(the statements pre ran for it, on the same Q tile), and dQ = scale·dQp is cast and stored where main
added dQp into dQ_ws. Two launches, the dQ_ws and D workspaces and the fp32 round trip go; a short
sequence's backward is one launch, as its forward (the per-call cost of a small problem is its
launches). Not with sinks (the host's sink gradient reads D), mods, a packed batch's row ids or a group
split; only where main still fits (:func:`direct_dq_or_why` names the condition). The program records
attr ``dq_direct``, or, a backward left as it is, ``dq_direct_kept``: why.
"""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.ir import Bc, Br, Load, Program, Sk, Sq, Stmt, Store, map_body, rename_buffers, straight_grid_body, walk
from tilegen.models.footprint import kernel_fits
from tilegen.passes.tiles import rescheduled
from tilegen.passes.driver import Context, Pass


def _slice_of(body: tuple[Stmt, ...], end: int) -> list[Stmt]:
    """The statements of the straight-line ``body`` before index ``end`` that the value ``body[end]``
    reads depends on, in order."""
    needed = set(body[end].buffers_read())
    keep = []
    for st in reversed(body[:end]):
        if set(st.buffers_written()) & needed:
            keep.append(st)
            needed |= set(st.buffers_read())
    return keep[::-1]


class _Kept(Exception):
    """Why :func:`direct_dq` leaves a program as it is (the message)."""


def direct_dq_or_why(program: Program, target, sinks: bool = False) -> tuple[Program, str]:
    """(the program folded, "") where :func:`direct_dq` folds it, else (``program`` as it is, why not, in
    words): one attempt of the fold."""
    try:
        return _direct_dq(program, target, sinks), ""
    except _Kept as why:
        return program, str(why)


def direct_dq(program: Program, target, sinks: bool = False) -> Program:
    """The atomic backward of a program whose K/V tiles are one per program and cover Sk (Sk <= Bc):
    its pre and post kernels folded into main (see the module docstring); anything else is returned as
    it is (:func:`direct_dq_or_why` says why). ``sinks``: the spec has sinks, whose gradient the host
    computes from D (a read the IR does not show), so D stays."""
    return direct_dq_or_why(program, target, sinks)[0]


NOT_THE_FORM = "pre and post are not in the form the fold takes"


def _direct_dq(program: Program, target, sinks: bool) -> Program:
    """:func:`direct_dq`'s fold, or _Kept naming the first condition that does not hold."""
    if sinks:
        raise _Kept("sinks (the host's sink gradient reads D)")
    if program.attr("dq_strategy") != "atomic":
        raise _Kept("the dQ strategy is not atomic")
    if program.mods is not None:
        raise _Kept("a score or mask mod (a packed batch's mask among them)")
    kinds = {t.name: t.kind for t in program.tensors}
    if any(getattr(st, "rows", "") for k in program.kernels for st, _ in walk(k.body)):
        raise _Kept("a packed batch's row ids")
    accs = [(m, st, loops) for m, k in enumerate(program.kernels) for st, loops in walk(k.body)
            if isinstance(st, Store) and st.accumulate]
    if len(accs) != 1 or kinds.get(accs[0][1].dst.tensor) != "workspace":
        raise _Kept(f"{len(accs)} accumulating stores where the fold takes dQ's alone (a group split's or atomic dK, dV's add theirs)")
    m, acc, loops = accs[0]
    main, ws = program.kernels[m], acc.dst.tensor
    env = program.env_map

    def value(e):
        return int(sympy.sympify(e).subs(env))

    kv = [lp for lp in loops if lp.role == "kv_tile"]
    q = [lp for lp in loops if lp.role == "q_tile"]
    if int(program.attr("group_split", 1) or 1) > 1:
        raise _Kept(f"a group split ({program.attr('group_split')} programs share a KV head's query heads; their dK, dV partials need post_kv)")
    if len(kv) != 1 or len(q) != 1 or kv[0].kind != "parallel" or q[0].kind != "serial" or kv[0].blocks or q[0].blocks \
            or any(lp.role not in ("batch", "head", "kv_tile", "q_tile") for lp in loops):
        raise _Kept("dQ's store is not inside one Q-tile loop of one K/V-tile grid axis without a block table")
    try:
        n_kv = value(kv[0].stop - kv[0].start)
        at_j = {kv[0].var: kv[0].start}
        q_start, q_stop = (value(sympy.sympify(e).subs(at_j)) for e in (q[0].start, q[0].stop))
        n_q = value(sympy.ceiling(Sq / Br))
    except (TypeError, ValueError):
        raise _Kept("the tile loops' bounds are not bound sizes") from None
    if n_kv != 1:
        raise _Kept(f"{n_kv} K/V tiles per program grid (Sk = {env.get(Sk)} > Bc = {env.get(Bc)})")
    if (q_start, q_stop) != (0, n_q):
        raise _Kept(f"the K/V tile sees Q tiles {q_start} to {q_stop - 1} of {n_q}; pre and post give the others dQ = 0")
    # the finisher: one kernel reading ws, as its grid's only loads, and storing the rest
    readers = [(n, k) for n, k in enumerate(program.kernels)
               if n != m and any(isinstance(st, Load) and st.src.tensor == ws for st, _ in walk(k.body))]
    if len(readers) != 1:
        raise _Kept(NOT_THE_FORM)
    r, post = readers[0]
    post_body = straight_grid_body(post)
    if post_body is None:
        raise _Kept(NOT_THE_FORM)
    post_loads = [st for st in post_body if isinstance(st, Load)]
    if len(post_loads) != 1 or post_loads[0].src != acc.dst or any(isinstance(st, Store) and st.accumulate for st in post_body):
        raise _Kept(NOT_THE_FORM)
    # the zeroer: one kernel, storing ws a filled zero tile, and D (main's only other workspace read)
    bufs = {b.name: b for b in main.buffers}
    main_ws_loads = [(st, lps) for st, lps in walk(main.body) if isinstance(st, Load) and kinds.get(st.src.tensor) == "workspace"]
    if len(main_ws_loads) != 1 or main_ws_loads[0][1] != loops:
        raise _Kept(NOT_THE_FORM)
    load_d = main_ws_loads[0][0]
    d = load_d.src.tensor
    writers = [(n, k) for n, k in enumerate(program.kernels)
               if any(isinstance(st, Store) and st.dst.tensor in (ws, d) for st, _ in walk(k.body)) and n != m]
    if len(writers) != 1 or writers[0][0] > m or r < m:
        raise _Kept(NOT_THE_FORM)
    z, pre = writers[0]
    pre_body = straight_grid_body(pre)
    if pre_body is None:
        raise _Kept(NOT_THE_FORM)
    if any(isinstance(st, Load) and st.src.tensor == d for n, k in enumerate(program.kernels) if n != m for st, _ in walk(k.body)):
        raise _Kept(NOT_THE_FORM)
    stores = {st.dst.tensor: i for i, st in enumerate(pre_body) if isinstance(st, Store)}
    if set(stores) != {ws, d} or pre_body[stores[d]].dst != load_d.src:
        raise _Kept(NOT_THE_FORM)
    pre_buffers = {b.name: b for b in pre.buffers}
    d_src = pre_body[stores[d]].src
    if (pre_buffers[d_src].shape, pre_buffers[d_src].dtype) != (bufs[load_d.dst].shape, bufs[load_d.dst].dtype):
        raise _Kept(NOT_THE_FORM)
    post_buffers = {b.name: b for b in post.buffers}
    if (post_buffers[post_loads[0].dst].shape, post_buffers[post_loads[0].dst].dtype) != (bufs[acc.src].shape, bufs[acc.src].dtype):
        raise _Kept(NOT_THE_FORM)

    def moved(kernel, stmts, own: dict[str, str]):
        """``stmts`` of ``kernel`` renamed for main: ``own`` maps buffers onto main's, the rest get the
        kernel's name as a prefix; with the buffers they bring."""
        rename = {b: own.get(b, f"{kernel.name}_{b}") for st in stmts for b in st.buffers_read() + st.buffers_written()}
        taken = {b for b in rename.values() if b not in own.values()}
        if taken & set(bufs):
            return None, None
        src = {b.name: b for b in kernel.buffers}
        return [rename_buffers(st, rename) for st in stmts], [dataclasses.replace(src[b], name=n) for b, n in rename.items() if b not in own]

    # pre's loads of a tile main has already loaded in this iteration read main's copy; the others pad
    # with zeros, as main's loads do (a padded row's D then is 0, as main's load of D gave it)
    body = loops[-1].body
    earlier = {st.src: st.dst for st in body[:body.index(load_d)] if isinstance(st, Load) and not st.rows}
    d_slice, d_own = [], {d_src: load_d.dst}
    pre_slice = _slice_of(pre_body, stores[d])
    for st in pre_slice:
        mine = earlier.get(st.src) if isinstance(st, Load) else None
        rewritten = any(st.dst in x.buffers_written() for x in pre_slice if x is not st)  # pre computes in place
        if mine is not None and not rewritten and (pre_buffers[st.dst].shape, pre_buffers[st.dst].dtype) == (bufs[mine].shape, bufs[mine].dtype):
            d_own[st.dst] = mine
            continue
        d_slice.append(dataclasses.replace(st, pad=0.0) if isinstance(st, Load) and st.pad is None else st)
    d_stmts, d_bufs = moved(pre, d_slice, d_own)
    q_stmts, q_bufs = moved(post, [st for st in post_body if st is not post_loads[0]], {post_loads[0].dst: acc.src})
    if d_stmts is None or q_stmts is None:
        raise _Kept("a buffer name of pre or post is taken in main")

    def edit(st):
        if st is load_d:
            return tuple(d_stmts)
        if st is acc:
            return tuple(q_stmts)
        return st

    new_bufs = {b.name: b for b in (*d_bufs, *q_bufs)}
    computed = dataclasses.replace(bufs[load_d.dst], stages=1)  # D is computed now, not loaded ahead
    kept = tuple(computed if b.name == load_d.dst else b for b in main.buffers)
    new_main = dataclasses.replace(main, body=map_body(main.body, edit), buffers=kept + tuple(new_bufs.values()))
    if not kernel_fits(new_main, target, {str(k): v for k, v in program.env}):
        raise _Kept("main with D's tiles would not fit the target's on-chip levels")
    kernels = [new_main if n == m else k for n, k in enumerate(program.kernels) if n not in (z, r)]
    tensors = tuple(t for t in program.tensors if t.name not in (ws, d))
    return dataclasses.replace(program, kernels=tuple(kernels), tensors=tensors).with_attrs(dq_direct=True)


def _direct_dq_pass(program: Program, ctx: Context) -> Program:
    out, why = direct_dq_or_why(program, ctx.target, ctx.spec.sinks)
    if why and ctx.which == "bwd":  # the backward records why not (inspect prints it)
        out = program.with_attrs(dq_direct_kept=why)
    if ctx.log.schedule is not None:  # the tile table describes the kernels that are emitted
        ctx.log.schedule = rescheduled(ctx.log.schedule, out, ctx.target)
    return out


DIRECT_DQ = Pass("direct-dq", _direct_dq_pass, "one K/V tile covers the keys: D computed and dQ stored by main, no pre and post launches "
                 "(attr dq_direct; else the backward's attr dq_direct_kept says why not)")
