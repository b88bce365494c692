"""A NumPy interpreter for the tile IR.

It executes a bound program (every size symbol has a value) on NumPy arrays, emulating the hardware's
number formats: every write to a buffer or tensor rounds to that buffer's dtype (ml_dtypes for bf16);
matmuls run in float32 on the rounded inputs and accumulate in float32; elementwise work is float32.

Program instances of the launch grid's ``batch``/``head`` axes run together as vector lanes (their loop
bounds never depend on them); the other grid axes and all serial loops run one iteration at a time,
in order, or in a seeded random order for the parallel ones (``order_seed``), to show that a
result does not depend on the order in which independent programs run.

Sanitizing, as JAX Pallas' interpret mode does: output and workspace tensors and every on-chip buffer
start as NaN (per-tile gradient partials, kind ``partial``, at zero: the host allocates them
zeroed and every tile's entry is summed), so a read of anything nothing wrote poisons the result; rows past a tensor's extent are
loaded as ``pad_value`` (a large finite number), so padding that leaks into a result shows.

It measures what it executes: bytes read and written per HBM tensor (only the elements inside the
tensor's extent move; an atomic add counts as a write), the bytes of on-chip buffers per scope of one
program instance (the largest kernel), and FLOPs by kind (``matmul``: 2·M·N·K per tile; ``exp``: exp and
log; ``vector``: every other elementwise, reduction and mask element).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tilegen.backends.compiler import Backend
from tilegen.core import dtypes
from tilegen.passes.gpu.transpose_dq_tiles import TRANSPOSE_DQ
from tilegen.passes.pipeline import BIND_TILES, check_options, front_passes
from tilegen.core.exprs import UnboundSymbol, evaluate
from tilegen.core.ir import (
    BLOCK_EMPTY,
    BLOCK_FULL,
    BLOCK_PARTIAL,
    Access,
    Bc,
    Br,
    Elementwise,
    Fill,
    Kernel,
    Load,
    Loop,
    Mask,
    ModOp,
    MatMul,
    Program,
    RowReduce,
    Sk,
    Sq,
    Store,
)

LANE_ROLES = ("batch", "head")


@dataclass
class Measurement:
    """What one run moved and computed.

    Attributes:
        bytes_read / bytes_written: per HBM tensor, bytes.
        onchip_bytes: per scope, the bytes of the buffers one program instance of a kernel uses
            (largest over kernels); ``onchip_by_kernel`` per kernel.
        flops: per kind (``matmul``, ``exp``, ``vector``), floating-point operations.
    """

    bytes_read: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes_written: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    onchip_bytes: dict[str, int] = field(default_factory=dict)
    onchip_by_kernel: dict[str, dict[str, int]] = field(default_factory=dict)
    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def hbm_bytes(self) -> int:
        """Total bytes moved to and from HBM tensors."""
        return int(sum(self.bytes_read.values()) + sum(self.bytes_written.values()))

    def tensor_bytes(self, name: str) -> int:
        return int(self.bytes_read.get(name, 0) + self.bytes_written.get(name, 0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "bytes_read": dict(self.bytes_read),
            "bytes_written": dict(self.bytes_written),
            "onchip_bytes": dict(self.onchip_bytes),
            "flops": dict(self.flops),
        }


class InterpreterError(RuntimeError):
    """The program cannot run: an unbound size, an out-of-bounds access, or a missing input."""


class Interpreter:
    """Runs one bound :class:`~tilegen.core.ir.Program`.

    Args:
        program: every symbol in ``program.env`` (shapes and tile sizes).
        pad_value: the value rows past a tensor's extent load as (never 0, so leaks show).
        order_seed: when set, parallel grid axes that are not lanes run in a random order from this seed.
    """

    def __init__(self, program: Program, pad_value: float = 1.0e4, order_seed: int | None = None, progress=None):
        self.program = program
        self.progress = progress  # progress(kernel, done, total) after each trip of a kernel's outermost loops
        self._top = False
        self._kernel = ""
        self.pad_value = float(pad_value)
        self.rng = np.random.default_rng(order_seed) if order_seed is not None else None
        self.env_values = {str(k): v for k, v in program.env}
        self._shapes: dict[tuple, tuple[int, ...]] = {}
        self.measure = Measurement()
        self.tensors: dict[str, np.ndarray] = {}
        self.handoff: dict[str, np.ndarray] = {}
        self.mask = program.mask
        self.sq = program.evaluate(Sq) if Sq in program.env_map else None
        self.sk = program.evaluate(Sk) if Sk in program.env_map else None
        self.offset = program.evaluate(program.mask.offset)
        self.size_values = {n: self.env_values[n] for n in ("B", "Hq", "Hkv", "Sq", "Sk") if n in self.env_values}

    # -- setup ----------------------------------------------------------------------------------------
    def _eval(self, expr, scope):
        try:
            return evaluate(expr, scope)
        except UnboundSymbol as exc:
            raise InterpreterError(f"expression {expr} uses {exc.args[0]}, which is neither a loop variable nor bound") from None

    def _shape(self, dims) -> tuple[int, ...]:
        hit = self._shapes.get(dims)
        if hit is not None:
            return hit
        try:
            shape = tuple(evaluate(d, self.env_values) for d in dims)
        except UnboundSymbol as exc:
            raise InterpreterError(f"size {exc.args[0]} is unbound; bind the tile sizes (a schedule) before interpreting") from None
        self._shapes[dims] = shape
        return shape

    def bind_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        for tensor in self.program.tensors:
            shape = self._shape(tensor.shape)
            np_dtype = dtypes.numpy_dtype(tensor.dtype)
            if tensor.kind == "input":
                if tensor.name not in inputs:
                    raise InterpreterError(f"input tensor {tensor.name} was not given")
                array = np.asarray(inputs[tensor.name])
                if array.shape != shape:
                    raise InterpreterError(f"input {tensor.name} has shape {array.shape}, the program expects {shape}")
                if array.dtype != np_dtype:
                    raise InterpreterError(f"input {tensor.name} has dtype {array.dtype}, the program expects {np_dtype}")
                self.tensors[tensor.name] = array
            elif tensor.kind == "handoff":
                continue  # per program instance; allocated by each kernel
            elif tensor.kind == "partial":
                # per-tile gradient partials start at zero (the launcher zero-fills them): tiles a loop
                # skips contribute nothing to the fixed-order reduction
                self.tensors[tensor.name] = np.zeros(shape, dtype=np_dtype)
            else:
                self.tensors[tensor.name] = np.full(shape, np.nan, dtype=np_dtype)

    # -- execution ------------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.bind_inputs(inputs)
        with np.errstate(all="ignore"):
            for kernel in self.program.kernels:
                self._run_kernel(kernel)
        return {t.name: self.tensors[t.name] for t in self.program.tensors if t.kind in ("output", "partial")}

    def _run_kernel(self, kernel: Kernel) -> None:
        body = kernel.body
        lane_vars: list[str] = []
        lane_extents: list[int] = []
        while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "parallel" and body[0].role in LANE_ROLES:
            loop = body[0]
            if self._eval(loop.start, self.env_values) != 0:
                raise InterpreterError(f"lane loop {loop.var} of kernel {kernel.name} must start at 0")
            lane_vars.append(str(loop.var))
            lane_extents.append(self._eval(loop.stop, self.env_values))
            body = loop.body
        self.lane_shape = tuple(lane_extents)
        self.lanes = int(np.prod(self.lane_shape)) if self.lane_shape else 1
        scope: dict[str, Any] = dict(self.env_values)
        for axis, (name, extent) in enumerate(zip(lane_vars, lane_extents)):
            shape = [1] * len(lane_extents)
            shape[axis] = extent
            scope[name] = np.arange(extent, dtype=np.int64).reshape(shape)
        self.lane_vars = tuple(lane_vars)
        self.buffers: dict[str, np.ndarray] = {}
        self.buffer_info = {buf.name: buf for buf in kernel.buffers}
        self.handoff = {}
        touched: dict[str, int] = defaultdict(int)
        self._touched = set()
        self._stored: set[int] = set()  # the stores whose first execution writes (first_writes) run in this program instance
        self._kernel, self._top = kernel.name, self.progress is not None
        self._exec(body, scope)
        self._top = False
        for name in self._touched:
            buf = self.buffer_info[name]
            touched[buf.scope] += int(np.prod(self._shape(buf.shape))) * dtypes.itemsize(buf.dtype)
        self.measure.onchip_by_kernel[kernel.name] = dict(touched)
        for scope_name, nbytes in touched.items():
            self.measure.onchip_bytes[scope_name] = max(self.measure.onchip_bytes.get(scope_name, 0), nbytes)

    def _exec(self, body, scope: dict[str, Any]) -> None:
        for stmt in body:
            handler = _HANDLERS[type(stmt)]
            handler(self, stmt, scope)

    def _loop(self, loop: Loop, scope: dict[str, Any]) -> None:
        start = self._eval(loop.start, scope)
        stop = self._eval(loop.stop, scope)
        if isinstance(start, np.ndarray) or isinstance(stop, np.ndarray):
            trips = np.broadcast_to(np.asarray(stop) - np.asarray(start), self.lane_shape)
            if trips.size and not (trips == trips.flat[0]).all():
                raise InterpreterError(f"loop {loop.var}: trip count differs between lanes")
            count = int(trips.flat[0]) if trips.size else 0
        else:
            count = stop - start
        offsets = range(max(count, 0))
        if loop.blocks:
            offsets = [t for t in offsets if self._tile_class(loop, start + t, scope) != BLOCK_EMPTY]
        if loop.kind == "parallel" and self.rng is not None and count > 1:
            offsets = self.rng.permutation(count).tolist()
        name = str(loop.var)
        top, self._top = self._top, False  # only a kernel's outermost (non-lane) loops report progress
        for i, t in enumerate(offsets):
            inner = dict(scope)
            inner[name] = start + t
            if loop.kind == "parallel":
                self._stored = set()  # a new program instance: no first-writes store has run in it
            self._exec(loop.body, inner)
            if top:
                self.progress(self._kernel, i + 1, len(offsets))
        self._top = top

    # -- buffers --------------------------------------------------------------------------------------
    def _buf(self, name: str) -> np.ndarray:
        array = self.buffers.get(name)
        if array is None:
            info = self.buffer_info.get(name)
            if info is None:
                raise InterpreterError(f"buffer {name} is not declared in the kernel")
            array = np.full(self.lane_shape + self._shape(info.shape), np.nan, dtype=np.float32)
            self.buffers[name] = array
        self._touched.add(name)
        return array

    def _write(self, name: str, value, fresh: bool = False) -> None:
        """Write ``value`` (rounded to the buffer's dtype) into buffer ``name``. ``fresh``: ``value`` is a
        new array nothing else refers to, so it can become the buffer's storage without a copy."""
        buf = self._buf(name)
        dtype = self.buffer_info[name].dtype
        if dtype != "fp32":
            rounded = dtypes.round_to(np.asarray(value, dtype=np.float32), dtype)
            if rounded.shape == buf.shape:
                self.buffers[name] = rounded
            else:
                buf[...] = rounded
        elif fresh and isinstance(value, np.ndarray) and value.dtype == np.float32 and value.shape == buf.shape:
            self.buffers[name] = value
        else:
            buf[...] = value

    def _operand(self, arg, ndim: int) -> np.ndarray:
        if isinstance(arg, str):
            value = self._buf(arg)
            lane_nd = len(self.lane_shape)
            while value.ndim - lane_nd < ndim:
                value = value[..., None]
            return value
        return np.float32(arg)

    # -- tensor access --------------------------------------------------------------------------------
    def _region(self, access: Access, scope):
        tensor = self.program.tensor(access.tensor)
        ntile = len(access.tile)
        npoint = len(access.index) - ntile
        if tensor.kind == "handoff":
            store = self.handoff.get(access.tensor)
            if store is None:
                shape = self._shape(tensor.shape)
                store = np.full(self.lane_shape + shape, np.nan, dtype=dtypes.numpy_dtype(tensor.dtype))
                self.handoff[access.tensor] = store
            array = store
            point: tuple = (Ellipsis,) if not self.lane_shape else tuple(slice(None) for _ in self.lane_shape)
            extents = self._shape(tensor.shape)[npoint:]
            point = point + tuple(self._eval(x, scope) for x in access.index[:npoint])
        else:
            array = self.tensors[access.tensor]
            extents = array.shape[npoint:]
            point = self._point_index(access.index[:npoint], scope, array.shape[:npoint])
        starts = [self._eval(x, scope) for x in access.index[npoint:]]
        sizes = [self._eval(x, scope) for x in access.tile]
        slices, valid = [], []
        for start, size, extent in zip(starts, sizes, extents):
            if isinstance(start, np.ndarray) or isinstance(size, np.ndarray):
                raise InterpreterError(f"tile start of {access.tensor} depends on a lane variable")
            if start < 0 or start > extent:
                raise InterpreterError(f"access to {access.tensor} starts at {start}, outside [0, {extent}]")
            stop = min(start + size, extent)
            slices.append(slice(start, stop))
            valid.append(stop - start)
        return array, point, tuple(slices), tuple(sizes), tuple(valid)

    def _point_index(self, exprs, scope, dims) -> tuple:
        """Index tuple for the single-index dims: slices where each dim is exactly its lane (same
        extent, index = lane number), else integer arrays broadcast to the lanes."""
        values = [self._eval(x, scope) for x in exprs]
        lane_nd = len(self.lane_shape)
        identity = len(values) == lane_nd and all(
            isinstance(v, np.ndarray)
            and dims[axis] == self.lane_shape[axis]
            and v.shape == tuple(self.lane_shape[a] if a == axis else 1 for a in range(lane_nd))
            and (v.reshape(-1) == np.arange(self.lane_shape[axis])).all()
            for axis, v in enumerate(values)
        )
        if identity:
            return tuple(slice(None) for _ in values)
        if not lane_nd:
            return tuple(int(v) for v in values)
        return tuple(np.broadcast_to(np.asarray(v, dtype=np.int64), self.lane_shape) for v in values)

    def _load(self, stmt: Load, scope) -> None:
        array, point, slices, sizes, valid = self._region(stmt.src, scope)
        data = array[point + slices]
        pad = self.pad_value if stmt.pad is None else stmt.pad
        tile = np.full(self.lane_shape + sizes, pad, dtype=np.float32)
        tile[(Ellipsis,) + tuple(slice(0, v) for v in valid)] = data
        moved = int(np.prod(valid))
        if stmt.rows:  # rows of a negative id are not read: they load as 0
            skip = np.asarray(self.tensors[stmt.rows][slices[0].start:slices[0].start + valid[0]]) < 0
            tile[(Ellipsis, np.nonzero(skip)[0]) + (slice(None),) * (len(sizes) - 1)] = 0.0
            moved = (valid[0] - int(skip.sum())) * int(np.prod(valid[1:]))
        for guard in (g for a in stmt.ann if (g := a.zeros_unless()) is not None):
            # an annotation's value rule (Annotation.zeros_unless; Ascend's @zero_unless): zeros where the
            # expression is <= 0 (the tile's writer ran no iteration in this instance)
            never = np.broadcast_to(np.asarray(self._eval(guard, scope)) <= 0, self.lane_shape)
            tile[never] = 0.0
        self._write(stmt.dst, tile, fresh=True)
        itemsize = dtypes.itemsize(self.program.tensor(stmt.src.tensor).dtype)
        self.measure.bytes_read[stmt.src.tensor] += self.lanes * moved * itemsize

    def _store(self, stmt: Store, scope) -> None:
        array, point, slices, sizes, valid = self._region(stmt.dst, scope)
        src = self._buf(stmt.src)
        part = src[(Ellipsis,) + tuple(slice(0, v) for v in valid)]
        key = point + slices
        first_writes = any(a.first_writes() for a in stmt.ann)  # Annotation.first_writes (Ascend's @first_plain)
        first = first_writes and id(stmt) not in self._stored
        if first_writes:  # the instance's first execution writes the tile
            self._stored.add(id(stmt))
        if stmt.accumulate and not first:
            unique = all(isinstance(p, slice) for p in point) or not self.lane_shape
            if not unique:
                flat = np.stack([np.asarray(p).reshape(-1) for p in point if not isinstance(p, slice)])
                unique = np.unique(flat, axis=1).shape[1] == flat.shape[1]
            if unique:
                total = array[key].astype(np.float32) + part
                array[key] = total.astype(array.dtype)
            else:  # several lanes add into the same rows: serialize like an atomic unit would
                np.add.at(array, key, part.astype(array.dtype))
        elif stmt.rows:  # write only the rows whose id is >= 0 (a packed batch's tokens in a sequence)
            r0 = slices[0].start
            keep = np.asarray(self.tensors[stmt.rows][r0:r0 + valid[0]]) >= 0
            sel = (Ellipsis, keep) + (slice(None),) * (len(valid) - 1)
            view = array[key]
            view[sel] = part.astype(array.dtype)[sel]
            array[key] = view
            valid = (int(keep.sum()),) + tuple(valid[1:])
        else:
            array[key] = part.astype(array.dtype)
        itemsize = array.dtype.itemsize
        self.measure.bytes_written[stmt.dst.tensor] += self.lanes * int(np.prod(valid)) * itemsize

    # -- compute --------------------------------------------------------------------------------------
    def _fill(self, stmt: Fill, scope) -> None:
        self._write(stmt.dst, np.float32(stmt.value))

    def _matmul(self, stmt: MatMul, scope) -> None:
        a = self._buf(stmt.a)
        bb = self._buf(stmt.b)
        if stmt.trans_a:
            a = np.swapaxes(a, -1, -2)
        if stmt.trans_b:
            bb = np.swapaxes(bb, -1, -2)
        out = np.matmul(a, bb)
        if stmt.alpha != 1.0:
            out *= np.float32(stmt.alpha)
        if stmt.accumulate:
            out += self._buf(stmt.dst)
        self._write(stmt.dst, out, fresh=True)
        m, k = a.shape[-2:]
        n = bb.shape[-1]
        self.measure.flops["matmul"] += 2 * m * n * k * self.lanes

    def _elementwise(self, stmt: Elementwise, scope) -> None:
        dst_nd = len(self.buffer_info[stmt.dst].shape)
        args = [self._operand(a, dst_nd) for a in stmt.args]
        op = stmt.op
        fresh = op not in ("copy", "cast")
        if op in ("copy", "cast"):
            out = args[0]
        elif op == "exp":
            out = np.exp(args[0])
        elif op == "log":
            out = np.log(args[0])
        elif op == "zero_if_neginf":
            out = np.where(args[0] == -np.inf, np.float32(0), args[0])
        elif op == "add":
            out = args[0] + args[1]
        elif op == "sub":
            out = args[0] - args[1]
        elif op == "mul":
            out = args[0] * args[1]
        elif op == "max":
            out = np.maximum(args[0], args[1])
        elif op == "safe_div":
            den = args[1]
            out = np.where(den != 0, args[0] / np.where(den != 0, den, np.float32(1)), np.float32(0))
        else:
            raise InterpreterError(f"unknown elementwise op {op}")
        if fresh and isinstance(out, np.ndarray) and out.dtype != np.float32:
            out = out.astype(np.float32)
        self._write(stmt.dst, out, fresh=fresh)
        kind = "exp" if op in ("exp", "log") else "vector"
        if op not in ("copy",):
            self.measure.flops[kind] += int(np.prod(self._buf(stmt.dst).shape))

    def _row_reduce(self, stmt: RowReduce, scope) -> None:
        src = self._buf(stmt.src)
        out = src.max(axis=-1) if stmt.op == "max" else src.sum(axis=-1, dtype=np.float32)
        self._write(stmt.dst, out, fresh=True)
        self.measure.flops["vector"] += int(src.size)

    def _mask(self, stmt: Mask, scope) -> None:
        src = self._buf(stmt.src)
        r0 = self._eval(stmt.row0, scope)
        c0 = self._eval(stmt.col0, scope)
        nr, nc = src.shape[-2:]
        self.measure.flops["vector"] += int(src.size)
        if self._tile_fully_visible(r0, c0, nr, nc):
            self._write(stmt.dst, src)
            return
        rows = (r0 + np.arange(nr))[:, None]
        cols = (c0 + np.arange(nc))[None, :]
        visible = (rows < self.sq) & (cols < self.sk) & self._window_visible(rows, cols)
        self._write(stmt.dst, np.where(visible, src, np.float32(-np.inf)), fresh=True)

    # -- mods ---------------------------------------------------------------------------------------------
    def _tile_class(self, loop: Loop, value: int, scope) -> int:
        """The block class of the tile the loop would visit at ``value``, over every lane: empty only if
        empty in all, full only if full in all, else partial."""
        inner = dict(scope)
        inner[str(loop.var)] = value
        return self._class_at(loop.blocks, inner)

    def _class_at(self, blocks: str, scope) -> int:
        table = self.tensors[blocks]
        idx = []
        for axis, var in ((0, "b"), (1, "hq")):
            if table.shape[axis] == 1:
                idx.append(np.int64(0))
            else:
                idx.append(np.asarray(scope[var], dtype=np.int64))
        ii, jj = int(scope["i"]), int(scope["j"])
        cls = np.asarray(table[idx[0], idx[1], ii, jj])
        if np.isnan(cls).any():
            raise InterpreterError(f"block table {blocks} read before the classify kernel wrote it")
        if (cls == BLOCK_EMPTY).all():
            return BLOCK_EMPTY
        if (cls == BLOCK_FULL).all():
            return BLOCK_FULL
        return BLOCK_PARTIAL

    def _mod_env(self, stmt: ModOp, scope, nr: int, nc: int):
        r0 = self._eval(stmt.row0, scope)
        c0 = self._eval(stmt.col0, scope)
        lane_nd = len(self.lane_shape)

        def lane(name):
            v = np.asarray(scope.get(name, 0), dtype=np.int64)
            return v.reshape(v.shape + (1, 1)) if v.ndim else v

        rows = (r0 + np.arange(nr, dtype=np.int64))[:, None]
        cols = (c0 + np.arange(nc, dtype=np.int64))[None, :]
        valid = np.broadcast_to((rows < self.sq) & (cols < self.sk), self.lane_shape + (nr, nc))
        env = dict(b=lane("b"), h=lane("hq"), q_idx=rows, kv_idx=cols, sizes=self.size_values,
                   params={t: self.tensors[t] for t in stmt.tensors}, valid=valid)
        return env, rows, cols, r0, c0, lane_nd

    def _modop(self, stmt: ModOp, scope) -> None:
        from tilegen.core import mods as M

        mods = self.program.mods
        if stmt.op == "classify":
            nr, nc = self._shape((Br, Bc))
        else:
            nr, nc = self._buf(stmt.args[0]).shape[-2:]
        env, rows, cols, r0, c0, lane_nd = self._mod_env(stmt, scope, nr, nc)
        shape = self.lane_shape + (nr, nc)
        passes = 1
        if stmt.op == "score":  # the score mod on every tile, the mask on the partial ones (DESIGN §2)
            full = bool(stmt.blocks) and self._class_at(stmt.blocks, scope) == BLOCK_FULL
            passes = (mods.score is not None) + (mods.mask is not None and not full)
        self.measure.flops["vector"] += self.lanes * nr * nc * passes
        if stmt.op == "classify":
            vis = env["valid"] & self._window_visible(rows, cols)
            if mods.mask is not None:
                vis = vis & np.broadcast_to(M.evaluate(mods.mask, **env), shape)
            any_vis = vis.reshape(self.lane_shape + (-1,)).any(axis=-1)
            all_vis = vis.reshape(self.lane_shape + (-1,)).all(axis=-1)
            cls = np.where(any_vis, np.where(all_vis, BLOCK_FULL, BLOCK_PARTIAL), BLOCK_EMPTY).astype(np.float32)
            self._write(stmt.dst, cls[..., None], fresh=True)
            return
        src = self._buf(stmt.args[0])
        if stmt.op == "score":
            out = src.astype(np.float64)
            if mods.score is not None:
                out = np.broadcast_to(M.evaluate(mods.score, score=out, **env), shape)
            full = bool(stmt.blocks) and self._class_at(stmt.blocks, scope) == BLOCK_FULL
            if mods.mask is not None and not full:
                vis = np.broadcast_to(M.evaluate(mods.mask, **env), shape)
                out = np.where(vis, out, -np.inf)
            self._write(stmt.dst, np.asarray(out, dtype=np.float32), fresh=True)
            return
        raw = self._buf(stmt.args[1]).astype(np.float64) if len(stmt.args) > 1 else None
        g = src.astype(np.float64)
        if stmt.op == "dscore":
            d = np.broadcast_to(M.evaluate(mods.dscore, score=raw, **env), shape)
            self._write(stmt.dst, np.where(g == 0, 0.0, g * d).astype(np.float32), fresh=True)
            return
        if stmt.op == "pgrad":
            term = mods.grads[stmt.term]
            decl = mods.param(term.param)
            coef = np.broadcast_to(M.evaluate(term.coef, score=raw, **env), shape)
            contrib = np.where(g == 0, 0.0, g * coef)
            widths, origins = M.grad_window(term, decl, nr, nc)
            sizes = {**{k: v for k, v in self.size_values.items()}}
            wint = [int(M.evaluate(w, sizes=sizes, params={})) for w in widths]
            flat = np.zeros(shape, dtype=np.int64)
            for d, (e, o, w) in enumerate(zip(term.index, origins, wint)):
                local = np.broadcast_to(M.evaluate(e, **env) - M.evaluate(o, **{**env, "q_idx": r0, "kv_idx": c0}), shape)
                local = np.asarray(local, dtype=np.int64)
                inside = (local >= 0) & (local < w)
                if np.any(~inside & (contrib != 0)):
                    raise InterpreterError(f"parameter {decl.name}: an index leaves the tile's gradient window")
                flat = flat * w + np.clip(local, 0, w - 1)
            total = int(np.prod(wint))
            lanes = contrib.reshape(-1, nr * nc)
            flat = flat.reshape(-1, nr * nc)
            out = np.stack([np.bincount(flat[n], weights=lanes[n], minlength=total) for n in range(len(lanes))])
            self._write(stmt.dst, out.reshape(self.lane_shape + (total,)).astype(np.float32), fresh=True)
            return
        raise InterpreterError(f"unknown mod op {stmt.op}")

    def _window_visible(self, rows, cols):
        visible = np.ones(np.broadcast_shapes(rows.shape, cols.shape), dtype=bool)
        if self.mask.left >= 0:
            visible &= cols >= rows + self.offset - self.mask.left
        if self.mask.right >= 0:
            visible &= cols <= rows + self.offset + self.mask.right
        return visible

    def _tile_fully_visible(self, r0: int, c0: int, nr: int, nc: int) -> bool:
        """Whether every (row, key) of the tile is inside the extents and the window (the window's
        bounds are monotone in the row, so the corners decide)."""
        if r0 + nr > self.sq or c0 + nc > self.sk:
            return False
        if self.mask.left >= 0 and c0 < (r0 + nr - 1) + self.offset - self.mask.left:
            return False
        if self.mask.right >= 0 and c0 + nc - 1 > r0 + self.offset + self.mask.right:
            return False
        return True


_HANDLERS = {
    Loop: Interpreter._loop,
    Load: Interpreter._load,
    Store: Interpreter._store,
    Fill: Interpreter._fill,
    MatMul: Interpreter._matmul,
    Elementwise: Interpreter._elementwise,
    RowReduce: Interpreter._row_reduce,
    Mask: Interpreter._mask,
    ModOp: Interpreter._modop,
}


def interpret(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    *,
    pad_value: float = 1.0e4,
    order_seed: int | None = None,
    progress=None,
) -> tuple[dict[str, np.ndarray], Measurement]:
    """Run ``program`` on ``inputs`` (logical BNSD arrays of the input tensors' dtypes).

    ``progress``, when given, is called as ``progress(kernel name, trips done, trips in all)`` after
    each trip of a kernel's outermost loops (those below its lane loops), for progress bars.

    Returns:
        (outputs by tensor name, in their dtypes; the measurement of the run).

    Raises:
        InterpreterError: a missing or mis-shaped input, an unbound size, an out-of-range access.
    """
    interp = Interpreter(program, pad_value=pad_value, order_seed=order_seed, progress=progress)
    outputs = interp.run(inputs)
    return outputs, interp.measure


class Interp(Backend):
    """No target: the front passes (and transpose-dq-tiles when ``dq_tiles`` asks for it), then the given
    tile sizes or the defaults (:data:`tilegen.passes.pipeline.BIND_TILES`)."""

    name = "interp"

    def passes(self, ctx):
        check_options(ctx)
        dq_tiles = (TRANSPOSE_DQ,) if ctx.which == "bwd" and ctx.options.dq_tiles == "transposed" else ()
        return front_passes(ctx) + dq_tiles + (BIND_TILES,)


BACKEND = Interp()
