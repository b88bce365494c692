"""``torch.nn.attention.flex_attention`` on tilegen's kernels: :func:`flex_attention` (DESIGN §3,
"FlexAttention's BlockMask").

It takes torch's arguments and gives torch's results: BNSD tensors, a ``score_mod(score, b, h, q_idx,
kv_idx)`` written in plain torch (traced by :func:`tilegen.core.mods.trace`, once per function
object), a ``BlockMask`` with its block structure, ``(out, lse)`` with lse in natural log.

**The BlockMask as tilegen's block classes.** A BlockMask of Q blocks of BSq rows and K/V blocks of BSk
columns lists, per (b, h, Q block), the K/V blocks that are *partial* (``kv_num_blocks`` /
``kv_indices``: mask_mod decides each key) and *full* (``full_kv_num_blocks`` / ``full_kv_indices``:
every key visible, mask_mod not called); any other block is masked whatever mask_mod says. That is
how torch's compiled kernels read it (checked once with ``torch.compile(flex_attention)`` on CPU: a
full block whose mask_mod says False is visible, a block listed nowhere is masked where mask_mod says
True; its eager path evaluates mask_mod alone). Here the lists become a class table ``C`` (int32
[Bb, Hb, ⌈Sq/BSq⌉, ⌈Sk/BSk⌉], 0 absent, 1 partial, 2 full; Bb, Hb the BlockMask's batch and head
sizes, 1 broadcast), built once per BlockMask object on its device (kept while its tensors keep their
version counters), and the mask tilegen runs is

    visible(b, h, i, j) = C[b', h', i // BSq, j // BSk] == 2  ∨  (C[...] == 1 ∧ mask_mod(b, h, i, j))

(b' = b when Bb > 1, else 0; h' likewise), a mask mod of the mod language that reads ``C`` as a
captured int32 tensor. So correctness follows on every backend, and the skipping with it: the tiles
this mask leaves empty are skipped, full ones run without mask arithmetic (DESIGN §3's block classes).
The traced text depends on the table's shape, not its values: one trace (and one spec, one module)
serves every BlockMask of the same mask_mod object, block size and shape; a new BlockMask per step
costs only its table. On the Triton path the tile classes come from ``C`` on the device, without the
classify kernel: a tile of Br × Bc is empty when every block it touches is absent, full when every
one is full and the tile lies inside Sq × Sk, partial otherwise (``tile_classes``), computed once per
(BlockMask, module, program) and passed as the module's ``blocks=``. Where every tile of both
programs lies inside one block (Br | BSq, Bc | BSk) and no tile passes Sq or Sk, a tile's class is its
block's, so the module's mask is mask_mod alone (no read of ``C`` in the partial tiles) and the
classes carry the block structure; otherwise the mask above, with ``C``.

**Where it runs**, by query's device (as :func:`tilegen.torch.scaled_dot_product_attention`): CUDA,
the generated Triton module of the spec; CPU, tilegen's NumPy interpreter (exact, slow: checking and
small problems); NPU, a ``NotImplementedError`` naming what is missing. A call keeps a plan in the
plan table (:mod:`tilegen.torch.plans`) under the tensors' dtype, device, shape and strides, the
score_mod object, the BlockMask's structure (mask_mod object, block size, shapes, device), scale,
enable_gqa, the honoured kernel options and the target: a repeated call builds no spec, traces
nothing, loads no module and checks no argument again; it reads the BlockMask's table (and tile
lists) from their cache and runs the module's ``forward``/``backward`` with ``trusted=True`` through
:class:`FlexFunction`. Under ``torch.compile`` the call is a graph break (``torch.compiler.disable``):
it runs eagerly between the compiled parts.

``kernel_options``: None or a dict of torch's ``FlexKernelOptions`` keys (optionally prefixed ``fwd_``
/ ``bwd_``). Honoured: the tile sizes, ``BLOCK_M`` × ``BLOCK_N`` (or ``fwd_BLOCK_M`` ×
``fwd_BLOCK_N``) for the forward's Br × Bc and ``BLOCK_M1`` × ``BLOCK_N1`` (or ``bwd_``…) for the
backward's, each pair both or neither, powers of two from 16. Checked and ignored (tilegen's schedule
comes from the target's measured rows): ``num_warps``, ``num_stages``, ``BLOCK_M2``, ``BLOCK_N2``,
``PRESCALE_QK``, ``ROWS_GUARANTEED_SAFE``, ``BLOCKS_ARE_CONTIGUOUS``, ``WRITE_DQ``,
``FORCE_USE_FLEX_ATTENTION``, ``USE_TMA``, ``BACKEND`` and the ROCm keys. Anything else is a one-line
error naming the key.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tilegen.core import validate
from tilegen.core.errors import SpecError, UnsupportedArgument
from tilegen.torch import device, mod_args, ops, plans
from tilegen.torch.call import Call, check_tensors

TRITON_DEVICES: tuple[str, ...] = ("cuda",)  # devices whose calls run the Triton module (tests add "cpu": Triton's interpreter)

LSE_GRADIENT = ("flex_attention: a gradient through lse is not supported (tilegen's backward takes dO alone); "
                "use lse.detach() in the loss, or out alone")

_LARGE = 1 << 30  # torch's block size of a BlockMask of one block (its _LARGE_SPARSE_BLOCK_SIZE)
_INT_OPTIONS = ("num_warps", "num_stages", "BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2")
_ROCM_OPTIONS = ("kpack", "matrix_instr_nonkdim", "waves_per_eu")
_BOOL_OPTIONS = ("PRESCALE_QK", "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS", "WRITE_DQ", "FORCE_USE_FLEX_ATTENTION", "USE_TMA")
_BACKENDS = ("AUTO", "TRITON", "TRITON_DECODE", "FLASH")
_TILE_OPTIONS = {"fwd": ("BLOCK_M", "BLOCK_N"), "bwd": ("BLOCK_M1", "BLOCK_N1")}  # program -> (Br, Bc) keys


def _fa():
    import torch.nn.attention.flex_attention as fa

    return fa


# --- kernel options -----------------------------------------------------------------------------------


def kernel_tiles(kernel_options) -> dict:
    """The tile sizes ``kernel_options`` forces: ``{"fwd": (Br, Bc) or None, "bwd": (Br, Bc) or None}``
    (see the module's docstring for the keys honoured and ignored).

    Raises:
        SpecError (ValueError): not None or a dict; an unknown key; a value of the wrong type; a tile
            size that is not a power of two from 16, or one of a pair without the other (named).
    """
    if kernel_options is None:
        return {"fwd": None, "bwd": None}
    if not isinstance(kernel_options, dict):
        raise SpecError("kernel_options", type(kernel_options).__name__, "None or a dict of torch's FlexKernelOptions")
    known = set(_INT_OPTIONS) | set(_ROCM_OPTIONS) | set(_BOOL_OPTIONS) | {"BACKEND"} | set(getattr(_fa().FlexKernelOptions, "__annotations__", {}))
    for key, value in kernel_options.items():
        base = key[4:] if isinstance(key, str) and key.startswith(("fwd_", "bwd_")) else key
        name = f"kernel_options[{key!r}]"
        if base not in known:
            raise SpecError("kernel_options", key, "keys of torch's FlexKernelOptions (optionally prefixed fwd_ or bwd_): " + ", ".join(sorted(known)))
        if base in _INT_OPTIONS or base in _ROCM_OPTIONS:
            low = 0 if base in _ROCM_OPTIONS else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SpecError(name, value, f"an integer >= {low}")
        elif base in _BOOL_OPTIONS and not isinstance(value, bool):
            raise SpecError(name, value, "True or False")
        elif base == "BACKEND" and value not in _BACKENDS:
            raise SpecError(name, value, "one of " + ", ".join(_BACKENDS) + " (tilegen runs its own kernels whichever is named)")
    out = {}
    for prog, (km, kn) in _TILE_OPTIONS.items():
        picked = []
        for k in (km, kn):
            name = f"{prog}_{k}" if f"{prog}_{k}" in kernel_options else k
            value = kernel_options.get(name)
            if value is not None and (value < 16 or value & (value - 1)):
                raise SpecError(f"kernel_options[{name!r}]", value, "a power of two from 16 (a tile size of the Triton kernels)")
            picked.append((name, value))
        (nm, m), (nn, n) = picked
        if (m is None) != (n is None):
            missing = f"{prog}_{kn}' or '{kn}" if m is not None else f"{prog}_{km}' or '{km}"
            given = nm if m is not None else nn
            raise SpecError(f"kernel_options[{given!r}]", m if m is not None else n, f"a tile pair: '{missing}' too (tilegen forces Br and Bc together)")
        out[prog] = None if m is None else (m, n)
    return out


# --- the BlockMask ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class BlockStructure:
    """What a BlockMask's shapes and mask_mod (not its values) decide: one per (mask_mod object, block
    size, table shape, device); see the module's docstring.

    Attributes:
        key: the structure's key (part of the plan key).
        mask_mod: the BlockMask's mask_mod, or None for torch's ``noop_mask``.
        block: (BSq, BSk).
        shape: (Bb, Hb, nQ, nK) of the class table.
        effective: the mask mod tilegen traces (the block classes and mask_mod, reading ``placeholder``).
        placeholder: the int32 CPU tensor of ``shape`` the effective mask captured in place of a table.
        table_name: the name of that captured tensor's parameter (``mask_t0``).
    """

    key: tuple
    mask_mod: Any
    block: tuple
    shape: tuple
    effective: Any
    placeholder: Any
    table_name: str


_STRUCTURES: dict[tuple, BlockStructure] = {}


def _effective_mask(placeholder, block: tuple, mask_mod, by_b: bool, by_h: bool):
    """The mask mod of a BlockMask (module docstring): the class ``c`` of (b, h, q_idx // BSq,
    kv_idx // BSk) read from ``placeholder``, ``c == 2 or (c == 1 and mask_mod)`` (``c > 0`` for torch's
    noop mask). A dimension of one block is read at 0."""
    bsq, bsk = block
    _, _, nq, nk = placeholder.shape

    def block_mask(b, h, q_idx, kv_idx):
        c = placeholder[b if by_b else 0, h if by_h else 0, q_idx // bsq if nq > 1 else 0, kv_idx // bsk if nk > 1 else 0]
        if mask_mod is None:
            return c > 0
        return (c == 2) | ((c == 1) & mask_mod(b, h, q_idx, kv_idx))

    block_mask.__name__ = getattr(mask_mod, "__name__", "block_mask") if mask_mod is not None else "block_mask"
    return block_mask


def block_structure(block_mask, sizes: tuple, dev) -> BlockStructure | None:
    """The :class:`BlockStructure` of ``block_mask`` for a call of ``sizes`` (B, Hq, Sq, Sk) on ``dev``
    (None for None), checked as torch checks it; cached per structure.

    Raises:
        SpecError (ValueError): not a BlockMask; the stub mask_mod of a sliced BlockMask; batch or head
            sizes other than the call's or 1; seq_lengths other than (Sq, Sk) (but for torch's one-block
            mask); tables of the wrong rank or shape, or on another device (named).
    """
    if block_mask is None:
        return None
    fa = _fa()
    if not isinstance(block_mask, fa.BlockMask):
        raise SpecError("block_mask", type(block_mask).__name__, "None or a torch.nn.attention.flex_attention.BlockMask (create_block_mask, BlockMask.from_kv_blocks)")
    mm = block_mask.mask_mod
    if mm is getattr(fa, "_sliced_mask_mod_error", None):
        raise SpecError("block_mask.mask_mod", "the stub of a sliced BlockMask", "a mask_mod assigned to the sliced BlockMask (as torch requires)")
    b, hq, sq, sk = sizes
    kvn = block_mask.kv_num_blocks
    if kvn.dim() != 3:
        raise SpecError("block_mask.kv_num_blocks.shape", list(kvn.shape), "[B or 1, Hq or 1, query blocks] (keep the batch and head dims: bm[b:b+1], not bm[b])")
    bb, hb, rows = (int(x) for x in kvn.shape)
    if bb not in (1, b):
        raise SpecError("block_mask.shape", tuple(block_mask.shape), f"batch {b} (query's) or 1")
    if hb not in (1, hq):
        raise SpecError("block_mask.shape", tuple(block_mask.shape), f"heads {hq} (query's) or 1")
    bsq, bsk = (int(x) for x in block_mask.BLOCK_SIZE)
    if not (bsq == bsk == _LARGE) and tuple(block_mask.seq_lengths) != (sq, sk):
        raise SpecError("block_mask.seq_lengths", tuple(block_mask.seq_lengths), f"({sq}, {sk}), the lengths of query and key (create the BlockMask for them)")
    if kvn.device != dev:
        raise SpecError("block_mask.kv_num_blocks.device", str(kvn.device), f"query's device {dev}")
    nq, nk = -(-sq // bsq), -(-sk // bsk)
    if rows < nq:
        raise SpecError("block_mask.kv_num_blocks.shape", list(kvn.shape), f"at least {nq} query blocks of {bsq} rows (Sq = {sq})")
    for num, idx in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices")):
        n, i = getattr(block_mask, num), getattr(block_mask, idx)
        if n is not None and (tuple(n.shape) != (bb, hb, rows) or i.dim() != 4 or tuple(i.shape[:3]) != (bb, hb, rows) or i.device != dev):
            raise SpecError(f"block_mask.{idx}.shape", list(i.shape), f"[{bb}, {hb}, {rows}, K/V blocks] on {dev}, beside kv_num_blocks {list(kvn.shape)}")
    mm = None if mm is fa.noop_mask else mm
    key = (id(mm), bb, hb, nq, nk, bsq, bsk, str(dev))
    hit = _STRUCTURES.get(key)
    if hit is not None and hit.mask_mod is mm:
        return hit
    from tilegen.core.mods import traced_params

    placeholder = torch.zeros((bb, hb, nq, nk), dtype=torch.int32)
    effective = _effective_mask(placeholder, (bsq, bsk), mm, bb > 1, hb > 1)
    mod_args.mod_texts(None, effective)  # traced once here; its name for the table follows
    name = next(p.name for p in traced_params(effective, "mask") if p.array is placeholder)
    out = BlockStructure(key, mm, (bsq, bsk), (bb, hb, nq, nk), effective, placeholder, name)
    if len(_STRUCTURES) >= 256:
        _STRUCTURES.clear()
    _STRUCTURES[key] = out
    return out


@dataclass(eq=False)
class BlockTable:
    """A BlockMask's class table on its device and the tile lists made from it (per module and
    program), kept per BlockMask object while its tensors keep their version counters."""

    versions: tuple
    table: torch.Tensor
    lists: dict = field(default_factory=dict)

    def tile_lists(self, module, kind: str, structure: BlockStructure, sizes: tuple) -> dict:
        """``module.tile_lists(kind, ...)`` of this table for ``module``'s ``kind`` ("fwd"/"bwd") tiles."""
        key = (id(module), kind)
        hit = self.lists.get(key)
        if hit is None:
            br, bc = module.TILE_SIZES[kind]
            cls = tile_classes(self.table, structure.block, sizes[2], sizes[3], br, bc)
            hit = self.lists[key] = module.tile_lists(kind, cls.float().expand(module.BLOCK_SHAPES[kind]).contiguous())
        return hit


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _versions(block_mask) -> tuple:
    return tuple(t._version for t in (block_mask.kv_num_blocks, block_mask.kv_indices, block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
                 if t is not None)


def class_table(block_mask, shape: tuple) -> torch.Tensor:
    """The class table of ``block_mask`` (int32 ``shape`` = (Bb, Hb, nQ, nK) on its device): 1 for the
    blocks ``kv_indices[..., :kv_num_blocks]`` lists, 2 for those ``full_kv_indices[...,
    :full_kv_num_blocks]`` lists (a block in both is full), 0 elsewhere; entries past the counts and
    indices outside [0, nK) are ignored."""
    bb, hb, nq, nk = shape
    dev = block_mask.kv_num_blocks.device
    table = torch.zeros((bb, hb, nq, nk + 1), dtype=torch.int32, device=dev)
    for code, num, idx in ((1, block_mask.kv_num_blocks, block_mask.kv_indices), (2, block_mask.full_kv_num_blocks, block_mask.full_kv_indices)):
        if num is None:
            continue
        num, idx = num[:, :, :nq], idx[:, :, :nq, :].long()
        listed = (torch.arange(idx.shape[-1], device=dev) < num[..., None]) & (idx >= 0) & (idx < nk)
        col = torch.where(listed, idx, nk)
        table.scatter_reduce_(-1, col, torch.where(listed, code, 0).to(torch.int32), "amax")
    return table[..., :nk].contiguous()


def block_table(block_mask, structure: BlockStructure) -> BlockTable:
    """The :class:`BlockTable` of ``block_mask`` (cached per object; rebuilt when one of its tensors was
    modified in place)."""
    versions = _versions(block_mask)
    hit = _TABLES.get(block_mask)
    if hit is not None and hit.versions == versions and tuple(hit.table.shape) == structure.shape:
        return hit
    hit = BlockTable(versions, class_table(block_mask, structure.shape))
    _TABLES[block_mask] = hit
    return hit


def _cover(size: int, tile: int, block: int, dev):
    """Per tile of ``tile`` rows over ``size``: the blocks of ``block`` rows it touches ([tiles, span],
    the last one repeated) and whether it passes ``size``."""
    n = -(-size // tile)
    start = torch.arange(n, device=dev) * tile
    lo, hi = start // block, (torch.clamp(start + tile, max=size) - 1) // block
    span = -(-tile // block) + 1
    return torch.minimum(lo[:, None] + torch.arange(span, device=dev), hi[:, None]), start + tile > size


def tile_classes(table: torch.Tensor, block: tuple, sq: int, sk: int, br: int, bc: int) -> torch.Tensor:
    """The class of every Br × Bc tile (int32 [Bb, Hb, ⌈Sq/Br⌉, ⌈Sk/Bc⌉], 0 empty / 1 partial / 2
    full) under a block class table of (BSq, BSk) blocks: empty when every block the tile touches is
    absent, full when every one is full and the tile lies inside Sq × Sk (DESIGN §3: a tile reaching
    past them is never full), partial otherwise. On the table's device, no host synchronisation."""
    rows, rpad = _cover(sq, br, block[0], table.device)
    cols, cpad = _cover(sk, bc, block[1], table.device)
    g = table[:, :, rows[:, :, None, None], cols[None, None, :, :]]  # [Bb, Hb, nQt, span, nKt, span]
    lo, hi = g.amin(dim=(3, 5)), g.amax(dim=(3, 5))
    inside = ~(rpad[:, None] | cpad[None, :])
    return torch.where(hi == 0, 0, torch.where((lo == 2) & inside, 2, 1)).to(torch.int32)


# --- the plan and the autograd function ----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FlexPlan:
    """What a call needs beyond its tensors.

    Attributes:
        call: the normalised call (its mods as text).
        decls: the parameter declarations, in the order of ``params``.
        params: the parameter tensors (the captured tensors), None at ``table_slot``.
        table_slot: the index of the block class table among them, or -1 (no table read by the mask).
        structure: the BlockMask's structure, or None.
        module: the Triton module, or None (the interpreter).
        stamp: the target file's (path, mtime_ns, size) (:func:`tilegen.torch.plans.fresh`).
        tiles: {"fwd": (Br, Bc) or None, "bwd": ...} forced by kernel_options.
        refs: the objects the key names by id (score_mod, the structure), kept alive with the plan.
    """

    call: Call
    decls: tuple
    params: tuple
    table_slot: int
    structure: BlockStructure | None
    module: Any
    stamp: tuple
    tiles: dict
    refs: tuple

    def tensors(self, table: BlockTable | None) -> list:
        params = list(self.params)
        if self.table_slot >= 0:
            params[self.table_slot] = table.table
        return params

    def _kw(self, kind: str, params, table: BlockTable | None) -> dict:
        kw = {}
        if self.call.score_mod or self.call.mask_mod:
            kw["params"] = mod_args.kernel_params(self.decls, params)
        if table is not None:
            kw["blocks"] = table.tile_lists(self.module, kind, self.structure, (self.call.batch, self.call.heads_q, self.call.seq_q, self.call.seq_k))
        return kw

    def forward(self, q, k, v, params, table):
        """(out, lse) on the Triton module or the interpreter."""
        if self.module is not None:
            out, lse = self.module.forward(q, k, v, trusted=True, **self._kw("fwd", params, table))
            return out.contiguous(), lse
        from tilegen import api

        o, lse = api.attention(*(device.to_numpy(x) for x in (q, k, v)), **self.call.api_kwargs(), tile_sizes=self.tiles["fwd"],
                               **mod_args.interp_mods(self.call, self.decls, params))
        return device.from_numpy(o, q), torch.from_numpy(np.ascontiguousarray(lse, dtype=np.float32))

    def backward(self, q, k, v, out, lse, dout, params, table):
        """(dq, dk, dv, {parameter name: gradient}) on the Triton module or the interpreter."""
        if self.module is not None:
            res = self.module.backward(q, k, v, out, lse, dout, trusted=dout.dtype == out.dtype and dout.shape == out.shape,
                                       **self._kw("bwd", params, table))
            return (*res[:3], res[3] if len(res) > 3 else {})
        from tilegen import api

        res = api.attention_backward(*(device.to_numpy(x) for x in (q, k, v, out)), lse.detach().float().contiguous().numpy(), device.to_numpy(dout),
                                     dq_strategy="atomic", **self.call.api_kwargs(), tile_sizes=self.tiles["bwd"],
                                     **mod_args.interp_mods(self.call, self.decls, params))
        dparams = {n: torch.from_numpy(np.ascontiguousarray(g)) for n, g in (res[3] if len(res) > 3 else {}).items()}
        return (*(device.from_numpy(g, x) for g, x in zip(res[:3], (q, k, v))), dparams)


class FlexFunction(torch.autograd.Function):
    """(out, lse) of a planned call; gradients flow to q, k, v and to every floating-point parameter
    tensor that requires grad (the captured tensors, reduced in a fixed order, DESIGN §3). A gradient
    through lse is refused (:data:`LSE_GRADIENT`); there is no second derivative."""

    @staticmethod
    def forward(ctx, q, k, v, plan: FlexPlan, table, *params):
        ctx.set_materialize_grads(False)
        out, lse = plan.forward(q, k, v, params, table)
        ctx.save_for_backward(q, k, v, out, lse, *params)
        ctx.plan, ctx.table = plan, table
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if torch.is_grad_enabled():
            raise NotImplementedError(ops.NO_SECOND_DERIVATIVE)
        if dlse is not None and bool((dlse != 0).any()):
            raise NotImplementedError(LSE_GRADIENT)
        q, k, v, out, lse, *params = ctx.saved_tensors
        if dout is None:
            return (None,) * (5 + len(params))
        dq, dk, dv, dparams = ctx.plan.backward(q, k, v, out, lse, dout, params, ctx.table)
        grads = []
        for i, (d, p) in enumerate(zip(ctx.plan.decls, params)):
            g = dparams.get(d.name) if ctx.needs_input_grad[5 + i] else None
            grads.append(None if g is None else g.to(device=p.device, dtype=p.dtype).reshape(p.shape))
        return (dq, dk, dv, None, None, *grads)


def _texts(score_mod, mask_mod, q, bound: dict) -> tuple:
    """(Call fields of the mods, parameter tensors, the mask mod's own window) of a score_mod and a mask
    mod."""
    score_text, mask_text, decls, tensors, window = mod_args.of_call(score_mod, mask_mod, q, bound)
    return {"score_mod": score_text, "mask_mod": mask_text, "param_decls": decls}, tensors, window


def _nests(module, structure: BlockStructure, sq: int, sk: int) -> bool:
    """Every tile of both programs of ``module`` lies inside one block of ``structure`` and inside
    Sq × Sk, and its block tables have the BlockMask's batch and head dimensions: a tile's class is then
    its block's (module docstring)."""
    sizes = getattr(module, "TILE_SIZES", None)
    if not sizes:
        return False
    bsq, bsk = structure.block
    for kind, (br, bc) in sizes.items():
        shape = module.BLOCK_SHAPES[kind]
        if bsq % br or bsk % bc or sq % br or sk % bc or shape[0] < structure.shape[0] or shape[1] < structure.shape[1]:
            return False
    return True


def _plan(q, k, v, shapes, score_mod, structure, table, scale, tiles, target, triton) -> FlexPlan:
    """Build the plan of a call (its arguments checked): the mods traced (cached per function object),
    the parameters checked against q, the spec, and on the Triton path the module loaded."""
    from tilegen.backends import triton as triton_backend

    target = device.gpu_target(target, q)
    device.check_gpu_target(target)
    base = {"layout": "BNSD", "scale": scale, "alignment": "bottom_right", "target": target}
    tile_sizes = tiles if any(tiles.values()) else None
    if triton and structure is not None and structure.mask_mod is not None and all(x % 16 == 0 for x in (*structure.block, shapes[0][2], shapes[1][2])):
        # mask_mod alone, where every tile lies in one block (Triton tiles: powers of two from 16)
        from tilegen.core.mods import modset_from_spec

        fields, tensors, window = _texts(score_mod, structure.mask_mod, q, {})
        call = Call.of(q, shapes, **base, **fields)
        decls, tensors = mod_args.op_params(call, q, tensors)
        spec = call.spec(decls)
        by_b, by_h = modset_from_spec(spec).mask_depends()
        if window == (-1, -1) and (by_b or structure.shape[0] == 1) and (by_h or structure.shape[1] == 1):
            module = triton_backend.load(spec, target, None, tile_sizes=tile_sizes)
            if _nests(module, structure, shapes[0][2], shapes[1][2]):
                return FlexPlan(call, decls, tuple(tensors), -1, structure, module, plans.stamp(target), tiles, (score_mod, structure))
    bound = {} if structure is None else {structure.table_name: table.table}
    fields, tensors, _ = _texts(score_mod, None if structure is None else structure.effective, q, bound)
    call = Call.of(q, shapes, **base, **fields)
    decls, tensors = mod_args.op_params(call, q, tensors)
    slot = -1 if structure is None else [d.name for d in decls].index(structure.table_name)
    if triton:
        module = triton_backend.load(call.spec(decls), target, None, tile_sizes=tile_sizes)
    else:
        module = None
        call.spec(decls)  # its checks, before anything runs
    kept = tuple(None if i == slot else t for i, t in enumerate(tensors))
    return FlexPlan(call, decls, kept, slot, structure, module, plans.stamp(target), tiles, (score_mod, structure))


def flex_plan(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, kernel_options=None, *, target: str | None = None,
              triton: bool | None = None) -> tuple[FlexPlan, BlockTable | None]:
    """The plan a :func:`flex_attention` call with these arguments runs (from the plan table, or built,
    checked and kept there) and the BlockMask's :class:`BlockTable` (None without one).

    ``triton``: None, the Triton module for a device of :data:`TRITON_DEVICES`, the interpreter
    otherwise; True, the Triton module whatever the device (to inspect on a machine without a GPU what
    a CUDA call runs: the module is generated and imported, nothing is launched). The plan's
    ``module.TILE_SIZES``, ``call.mask_mod`` and ``table_slot`` say which tiles and which mask
    (module docstring).

    Raises:
        as :func:`flex_attention`.
    """
    tiles = kernel_tiles(kernel_options)
    if score_mod is getattr(_fa(), "_identity", None):
        score_mod = None
    if not (all(isinstance(x, torch.Tensor) for x in (query, key, value)) and query.dim() == key.dim() == 4):
        check_tensors(query, key, value, layout="BNSD", scale=scale, scale_name="scale")  # names what is wrong
    dev = query.device
    triton = dev.type in TRITON_DEVICES if triton is None else bool(triton)
    structure = block_structure(block_mask, (query.shape[0], query.shape[1], query.shape[2], key.shape[2]), dev)
    plan_key = plans.hashable(("flex", plans.meta(query), plans.meta(key), plans.meta(value), id(score_mod), None if structure is None else structure.key,
                               type(scale), scale, type(enable_gqa), enable_gqa, tiles["fwd"], tiles["bwd"], target, triton))
    plan = plans.lookup(plan_key)
    if plan is not None and plan.refs[0] is not score_mod:
        plan = None
    table = None if structure is None else block_table(block_mask, structure)
    if plan is None:
        shapes = check_tensors(query, key, value, layout="BNSD", scale=scale, scale_name="scale")
        validate.flag("enable_gqa", enable_gqa)
        if shapes[1][1] != shapes[0][1] and not enable_gqa:
            raise SpecError("enable_gqa", enable_gqa, f"True when key/value have fewer heads ({shapes[1][1]}) than query ({shapes[0][1]})")
        if dev.type == "npu":
            device.refuse_npu()
        plan = _plan(query, key, value, shapes, score_mod, structure, table, scale, tiles, target, triton)
        if plan_key is not None:
            plans.store(plan_key, plan)
    return plan, table


@torch.compiler.disable
def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False, kernel_options=None, *,
                   return_aux=None, target: str | None = None):
    """``torch.nn.attention.flex_attention`` on tilegen's kernels (BNSD); gradients flow to query, key,
    value and every floating-point tensor the score_mod captures that requires grad.

    Args:
        query: [B, Hq, Sq, D]; key: [B, Hkv, Sk, D]; value: [B, Hkv, Sk, Dv]; float16, bfloat16 or
            float32, one device (cuda: the Triton module; cpu: the interpreter), any strides.
        score_mod: None or ``score_mod(score, b, h, q_idx, kv_idx)`` in plain torch (or with
            :mod:`tilegen.mods` helpers): score′ of the scaled score, h the query head; traced once per
            function object (DESIGN §3 lists what traces); the tensors it captures are its parameters.
        block_mask: None (every key visible) or a ``BlockMask`` (``create_block_mask``,
            ``BlockMask.from_kv_blocks``) of seq_lengths (Sq, Sk) (torch's one-block mask of any
            lengths too), batch B or 1, heads Hq or 1, on query's device: its absent blocks masked, its
            full blocks visible without mask_mod, its partial blocks by mask_mod, as torch's kernels
            read it (module docstring: the block class table). Built once per object (mask_mod traced
            once per function object); a BlockMask whose tensors are modified in place is read again.
        scale: S = scale·QKᵀ; None → 1/√D.
        enable_gqa: must be True when Hkv < Hq (Hkv dividing Hq); query head h reads KV head h // (Hq/Hkv).
        return_lse: also return lse.
        kernel_options: None or a dict of FlexKernelOptions (module docstring: the tile sizes are
            honoured, the other keys checked and ignored).
        return_aux: None or ``AuxRequest(lse=...)``: returns (out, AuxOutput(lse, None)); max_scores
            is refused.
        target: the GPU target file whose schedule CUDA tensors use; None (the default): the target of
            their CUDA device (:func:`tilegen.torch.device.gpu_target`: ``H100`` → ``h100``, ``H200`` → ``h200``,
            another GPU → the nearest target, with one warning).

    Returns:
        out [B, Hq, Sq, Dv] in query's dtype; with return_lse also lse, float32 [B, Hq, Sq], the
        natural-log logsumexp of each row's visible modified scores. A row with no visible key: out 0,
        lse −inf (torch's values on CPU). lse takes no gradient (a loss that reads it raises
        NotImplementedError in backward); no second derivative.

    Raises:
        SpecError (ValueError): a bad tensor, scale, flag, BlockMask, kernel option, mod or captured
            tensor, named in one line; ModError for a construct of a mod tilegen cannot express.
        UnsupportedArgument (NotImplementedError): return_aux asking for max_scores, or return_lse
            together with return_aux.
        NotImplementedError: NPU tensors (the Ascend C operator is not wired here).
    """
    validate.flag("return_lse", return_lse)
    want_lse = bool(return_lse)
    if return_aux is not None:
        if return_lse:
            raise UnsupportedArgument("return_lse", True, "False when return_aux is given (torch refuses both)")
        if getattr(return_aux, "max_scores", False):
            raise UnsupportedArgument("return_aux.max_scores", True, "False (tilegen's kernels return lse, not the row maxima)")
        want_lse = bool(getattr(return_aux, "lse", False))
    plan, table = flex_plan(query, key, value, score_mod, block_mask, scale, enable_gqa, kernel_options, target=target)
    out, lse = FlexFunction.apply(query, key, value, plan, table if plan.module is not None or plan.table_slot >= 0 else None, *plan.tensors(table))
    if return_aux is not None:
        return out, _fa().AuxOutput(lse=lse if want_lse else None, max_scores=None)
    return (out, lse) if want_lse else out


__all__ = ["TRITON_DEVICES", "FlexFunction", "FlexPlan", "block_structure", "class_table", "flex_attention", "flex_plan", "kernel_tiles", "tile_classes"]
