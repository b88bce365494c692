"""GPU pass transpose-dq-tiles (knob ``dq_tiles = "transposed"``): the separate strategy's ``dq`` kernel
on Bc x Br tiles while ``main`` keeps Br x Bc (:func:`transpose_dq_tiles`)."""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.errors import SpecError
from tilegen.core.ir import Bc, Br, Loop, Program, substitute, tensors_read, tensors_written, walk
from tilegen.passes.driver import Context, Pass



def transpose_dq_tiles(program: Program) -> Program:
    """The separate strategy's ``dq`` kernel on transposed tiles: its Q tiles Bc rows and its K/V tiles
    Br columns (``Br`` and ``Bc`` exchanged in its statements, loop bounds and buffers), while ``main``
    keeps Br x Bc. ``main`` holds two accumulators of its K/V tile (dK, dV) and streams Q tiles, ``dq``
    one of its Q tile (dQ) and streams K/V tiles: each wants its held tile tall and its streamed tile short, so
    one pair of sizes serves both (FlexAttention's backward: BLOCK_M2 = BLOCK_N1, BLOCK_N2 = BLOCK_M1,
    torch/_inductor/kernel/flex). The values are unchanged: ``dq`` computes each dQ row from every K/V
    column it sees whatever the tiling (only the accumulation order of dQ changes). The program records
    attr ``dq_tiles``.

    Raises:
        ValueError: ``program`` has no ``dq`` kernel (not the separate strategy), or a tensor that
            kernel reads or writes has a shape that depends on the tile sizes (a block table), which
            the kernel would index with the other tiling.
    """
    dq = next((k for k in program.kernels if k.phase == "dq"), None)
    if dq is None or program.attr("dq_strategy") != "separate":
        raise ValueError(f"transpose_dq_tiles: program {program.name} has no dq kernel of the separate strategy")
    touched = {n for st, _ in walk(dq.body) for n in tensors_read(st) + tensors_written(st)}
    tiled = sorted(t.name for t in program.tensors if t.name in touched and any(sympy.sympify(d).free_symbols & {Br, Bc} for d in t.shape))
    if tiled:
        raise ValueError(f"transpose_dq_tiles: kernel dq reads or writes {', '.join(tiled)}, whose shapes depend on the tile sizes")
    if any(lp.blocks for st, _ in walk(dq.body) for lp in ([st] if isinstance(st, Loop) else [])):
        raise ValueError("transpose_dq_tiles: kernel dq skips tiles by a block table of Br x Bc tiles")
    swap = {Br: Bc, Bc: Br}
    body = tuple(substitute(st, swap, simultaneous=True) for st in dq.body)
    buffers = tuple(dataclasses.replace(b, shape=tuple(sympy.sympify(d).subs(swap, simultaneous=True) for d in b.shape)) for b in dq.buffers)
    new = dataclasses.replace(dq, body=body, buffers=buffers)
    kernels = tuple(new if k is dq else k for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels).with_attrs(dq_tiles="transposed")


def _transpose_dq_tiles_pass(program: Program, ctx: Context) -> Program:
    try:
        return transpose_dq_tiles(program)
    except ValueError as exc:
        raise SpecError("dq_tiles", ctx.options.dq_tiles, f"'same' here: {str(exc).split(': ', 1)[1]}") from None


TRANSPOSE_DQ = Pass("transpose-dq-tiles", _transpose_dq_tiles_pass, "separate dQ: the dq kernel on Bc x Br tiles (knob dq_tiles)")
