"""Split the query heads of a GQA group over several programs of the fused backward (a schedule knob).

The fused backward's ``main`` kernel runs one program per (b, hkv, K/V tile j) that loops over the
G query heads of KV head hkv and their visible Q tiles, accumulating dK and dV of the tile on chip
(FA2/FA3's GQA backward). That gives B·Hkv·nK programs, G times fewer than MHA of the same Hq; with a
causal mask the programs of small j also do most of the work (j = 0 visits G·nQ tile pairs), so a GPU
can run short of parallel work and the last wave is long.

:func:`split_group` with ``split = S`` adds a parallel grid axis ``hs`` in [0, S): program (b, hkv,
hs, j) takes the query heads hq in [hkv·G + hs·G/S, hkv·G + (hs+1)·G/S): S must divide G, so that
every program of the grid does the same work (the cost model's counts take one program of a grid
axis for all; the Triton backend reduces a target row's split to the largest divisor of G). Each program stores its fp32 dK, dV tile partials
(dK already scaled) into the workspaces ``dK_part`` [B, Hkv, S, Sk, Dqk] and ``dV_part`` [B, Hkv, S,
Sk, Dv], every element written by exactly one program (a tile whose Q range is empty stores zeros),
so they need no zero fill; a new kernel ``post_kv`` (phase ``post``) sums the S partials of each
row in ascending hs, casts, and writes dK, dV. The sum's order is fixed, so the result is the same on
every run, unlike fp32 atomics into one workspace, which would also need a zeroing pass first and
make S programs contend for each element. Cost: 2·S·4 bytes per element of dK and dV written and
read again (for B·N = 16k tokens, Hkv = 2, D = 128, S = 4: 64 MiB, about 15 µs of HBM at 4.3 TB/s).

``heavy_first``: the grid's K/V-tile axis becomes the outermost parallel loop, which the Triton
lowering launches last-varying (``program_id(2)``): with a causal mask every (b, hkv, hs) program of
j = 0, the heaviest, starts before any of j = 1, and so on (longest-first scheduling). Without it,
j varies fastest and the heavy programs of the last heads start late.

Both are identities when ``split == 1`` and ``heavy_first`` is false; the program records
``group_split`` and ``heavy_first`` in its attrs.

The forward's ``heavy_first`` (:func:`heavy_first_forward`) is the same idea for the grid (b, hq, i)
of the ``fwd`` kernel: with a causal-like window Q tile i visits about i + 1 K/V tiles, so the heavy
programs are the last Q tiles. The Triton lowering already numbers a Q-tile axis from the last tile
down (``heavy_last``), but on launch axis 0 that orders the tiles of one (b, hq) only: the last heads'
heavy tiles still start late. Like the backward's knob, the pass makes the Q-tile axis the outermost
grid loop (launched last-varying, ``program_id(2)``), and the lowering's reversal then starts the
last Q tile of every (b, hq) before any other.
"""

from __future__ import annotations

import dataclasses

import sympy

from tilegen.core.errors import SpecError
from tilegen.core.ir import (
    B,
    Access,
    Br,
    Buffer,
    Elementwise,
    Fill,
    G,
    Hkv,
    Kernel,
    Load,
    Loop,
    Program,
    Store,
    Tensor,
    index_symbol,
    Sk,
    b,
    ceil_div,
    grid_loops,
    hkv,
    i,
    map_body,
    walk,
)

hs = index_symbol("hs")  # the program's share of the group's query heads
PARTS = {"dK": "dK_part", "dV": "dV_part"}


def check_split(split, where: str = "group_split") -> int:
    """``split`` as an int.

    Raises:
        SpecError: not an integer from 1 to 64.
    """
    if isinstance(split, bool) or not isinstance(split, int) or not 1 <= split <= 64:
        raise SpecError(where, split, "an integer from 1 to 64 (programs sharing the query heads of one KV head)")
    return split


def split_group(program: Program, split: int, heavy_first: bool = False) -> Program:
    """The fused backward with its ``main`` kernel's group loop split over ``split`` programs and, with
    ``heavy_first``, the K/V-tile grid axis outermost (see the module docstring).

    Raises:
        SpecError: ``split`` is not an integer from 1 to 64, or does not divide G.
        ValueError: ``program`` is not a fused backward with a ``main`` kernel over (b, hkv, j).
    """
    split = check_split(split)
    if program.attr("form") != "fused":
        raise ValueError(f"split_group: program {program.name} is not a fused backward")
    env = program.env_map
    if G in env and env[G] % split:
        raise SpecError("group_split", split, f"a divisor of G = {env[G]} (the query heads per KV head)")
    if split == 1 and not heavy_first:
        return program.with_attrs(group_split=1, heavy_first=False)
    main = program.kernel("main")
    grid = list(grid_loops(main))
    if [str(lp.var) for lp in grid] != ["b", "hkv", "j"]:
        raise ValueError(f"split_group: kernel main has grid {[str(lp.var) for lp in grid]}; expected (b, hkv, j)")
    body = grid[-1].body
    tensors = list(program.tensors)
    kernels = list(program.kernels)
    if split > 1:
        body, post = _split_body(program, main, body, split)
        for name, part in PARTS.items():
            t = program.tensor(name)
            tensors.append(Tensor(part, (t.shape[0], t.shape[1], sympy.Integer(split), t.shape[2], t.shape[3]), "fp32", "workspace"))
        grid.insert(2, Loop(hs, sympy.Integer(0), sympy.Integer(split), (), kind="parallel", role="head_split", note="share of the group's query heads"))
        kernels.insert(kernels.index(main) + 1, post)
    if heavy_first:
        grid = _outermost(grid, "kv_tile")
    body = _nest(grid, body)
    used = {n for s, _ in walk(body) for n in s.buffers_read() + s.buffers_written()}
    main = dataclasses.replace(main, body=body, buffers=tuple(b for b in main.buffers if b.name in used))
    kernels[[k.name for k in kernels].index("main")] = main
    out = dataclasses.replace(program, tensors=tuple(tensors), kernels=tuple(kernels))
    return out.with_attrs(group_split=split, heavy_first=bool(heavy_first))


def heavy_first_forward(program: Program) -> Program:
    """The forward with the ``fwd`` kernel's Q-tile grid axis outermost, attr ``heavy_first`` true
    (see the module docstring); every program computes what it did.

    Raises:
        ValueError: ``program`` has no ``fwd`` kernel with a Q-tile grid axis.
    """
    names = [k.name for k in program.kernels]
    if "fwd" not in names:
        raise ValueError(f"heavy_first_forward: program {program.name} has no fwd kernel")
    fwd = program.kernel("fwd")
    grid = list(grid_loops(fwd))
    if not grid or "q_tile" not in [lp.role for lp in grid]:
        raise ValueError(f"heavy_first_forward: kernel fwd has grid {[str(lp.var) for lp in grid]}; expected a Q-tile axis")
    kernels = list(program.kernels)
    kernels[names.index("fwd")] = dataclasses.replace(fwd, body=_nest(_outermost(grid, "q_tile"), grid[-1].body))
    return dataclasses.replace(program, kernels=tuple(kernels)).with_attrs(heavy_first=True)


def _outermost(grid: list[Loop], role: str) -> list[Loop]:
    """The grid loops with the (first) one of ``role`` moved to the front, the others in order."""
    at = [lp.role for lp in grid].index(role)
    return [grid[at]] + grid[:at] + grid[at + 1 :]


def _nest(grid: list[Loop], body) -> tuple:
    """``body`` inside the loops of ``grid`` (outermost first)."""
    for lp in reversed(grid):
        body = (dataclasses.replace(lp, body=tuple(body)),)
    return tuple(body)


def _split_body(program: Program, main: Kernel, body, split: int):
    """The body of one (b, hkv, hs, j) program, and the ``post_kv`` kernel."""
    casts = {s.dst: s.args[0] for s, _ in walk(body) if isinstance(s, Elementwise) and s.op == "cast"}
    stored: dict[str, tuple[str, Store]] = {}  # dK/dV -> (fp32 accumulator, the store)

    def rewrite(s):
        if isinstance(s, Loop) and s.role == "head" and s.var.name == "hq":
            lo = hkv * G + sympy.floor(hs * G / split)
            hi = hkv * G + sympy.floor((hs + 1) * G / split)
            return dataclasses.replace(s, start=lo, stop=hi, note=f"query heads of KV head hkv, share hs of {split}")
        if isinstance(s, Store) and s.dst.tensor in PARTS:
            acc = casts.get(s.src)
            if acc is None or main.buffer(acc).dtype != "fp32":
                raise ValueError(f"split_group: the store of {s.dst.tensor} in kernel main is not a cast of an fp32 accumulator")
            stored[s.dst.tensor] = (acc, s)
            idx = s.dst.index
            return Store(Access(PARTS[s.dst.tensor], (idx[0], idx[1], hs, idx[2], idx[3]), s.dst.tile), acc, rows=s.rows)
        return s

    new = map_body(tuple(body), rewrite)
    if set(stored) != set(PARTS):
        raise ValueError(f"split_group: kernel main stores {sorted(stored)}; expected dK and dV")
    dead = {s.src for _, s in stored.values()}
    new = map_body(new, lambda s: None if isinstance(s, Elementwise) and s.op == "cast" and s.dst in dead else s)
    return new, _post_kv(program, stored, split)


def _post_kv(program: Program, stored: dict, split: int) -> Kernel:
    """post_kv: per (b, hkv, Br rows i of the keys), dK = Σ_hs dK_part, dV = Σ_hs dV_part (hs
    ascending), cast. Its tiles have Br rows, not Bc: it holds six [rows, D] tiles at once, which at
    Bc = 128, D = 128 would need 320 KiB of the H200's 256 KiB of registers in the placement's count
    (and every kernel must fit the tile sizes chosen), while Br ≤ Bc on every measured backward row."""
    bufs, head, loop, tail = [], [], [], []
    for name, (_, store) in stored.items():
        cols = store.dst.tile[1]
        part, total, low = f"{name}_p", f"{name}_sum", f"{name}c"
        dt = program.tensor(name).dtype
        bufs += [Buffer(part, (Br, cols), "fp32"), Buffer(total, (Br, cols), "fp32"), Buffer(low, (Br, cols), dt)]
        head.append(Fill(total, 0.0))
        loop += [
            Load(part, Access(PARTS[name], (b, hkv, hs, i * Br, sympy.Integer(0)), (Br, cols)), pad=0.0),
            Elementwise(total, "add", (total, part)),
        ]
        dst = Access(store.dst.tensor, (b, hkv, i * Br, sympy.Integer(0)), (Br, cols))
        tail += [Elementwise(low, "cast", (total,)), Store(dst, low, rows=store.rows)]
    body = (
        *head,
        Loop(hs, sympy.Integer(0), sympy.Integer(split), tuple(loop), role="head_split", note="the group's shares, in order"),
        *tail,
    )
    for var, extent, role in ((i, ceil_div(Sk, Br), "kv_rows"), (hkv, Hkv, "head"), (b, B, "batch")):
        body = (Loop(var, sympy.Integer(0), extent, tuple(body), kind="parallel", role=role),)
    return Kernel("post_kv", "post", tuple(bufs), body)
