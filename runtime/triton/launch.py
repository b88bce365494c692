"""The host runtime of tilegen's generated Triton modules, as real Python.

Each generated module (tilegen.backends.triton) carries the sections of this file verbatim, so that it
runs without tilegen installed (runtime/README.md):

- ``interpreter`` (every module): the bf16 fixes of Triton's interpreter and the ``_floor_div`` helper
  the kernels call;
- ``tanh`` (a module with mods): the ``_tanh`` the kernels of a softcap call;
- ``host`` (every module): tensor views, allocation and checks, and the launch path: direct launches of
  the compiled kernels and the bound launch records of trusted calls;
- ``params`` (a module with mods): the parameter tensors by name, checked;
- ``blocks`` (a module whose mask mod has a block table): the tile lists the kernels walk.

The sections read names that a generated module defines around them (its constants and tables). The
definitions outside the sections below stand in for them, so that this file imports and its functions
can be tested on their own; a module never carries them.
"""

import math
import os

import torch
import triton
import triton.language as tl

# --- stand-ins for the generated module's own definitions (not carried) ----------------------------
SHAPES = {"B": 1, "Hq": 1, "Hkv": 1, "Sq": 16, "Sk": 16}  # the spec's sizes
LAYOUT = "BNSD"  # the spec's layout
DTYPE = torch.float16  # the spec's dtype
_LAUNCH_TENSORS = {"forward": (), "backward": ()}  # per program, each launch's tensor names (after the _launch_* functions)
PARAMS = {}  # name -> (shape, dtype, values or None): the mods' parameters
_BLOCKS = {}  # (kernel, device) -> block table and lists, for a mask of indices alone
INDEX_ONLY_MASK = False  # whether the mask reads indices alone
BLOCK_SHAPES = {}  # kind -> the shape of its block table


# tilegen:section interpreter (every module)
def _bf16_in_the_interpreter():
    """Triton's interpreter (TRITON_INTERPRET=1; seen in Triton 3.6 to 3.9) multiplies bfloat16
    ``tl.dot`` operands as their raw uint16 storage, which gives garbage: widen them to float32 first
    (exact: a bf16 is the top half of an fp32). It also casts float32 to bfloat16 by truncation, where
    a GPU rounds to nearest even: round to nearest even instead (a truncating cast biases every rounded
    tile towards zero, and sums of many rows, such as dsinks, show it). Compiled kernels on a GPU never
    take this path."""
    import numpy as np
    from triton.runtime import interpreter as ti

    original = ti.InterpreterBuilder.create_dot
    cast = ti.InterpreterBuilder.cast_impl

    def widen(handle):
        if handle.dtype == tl.bfloat16:
            return ti.TensorHandle((handle.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return handle

    def create_dot(self, a, b, d, *rest):
        return original(self, widen(a), widen(b), d, *rest)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            u = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
            r = np.where(np.isnan(src.data), np.uint16(0x7FC0), r)
            return ti.TensorHandle(r, tl.bfloat16)
        return cast(self, src, dst_type)

    # each patch once per process, on its own marker: a create_dot widened elsewhere still gets the cast
    if not getattr(original, "_widens_bf16", False):
        create_dot._widens_bf16 = True
        ti.InterpreterBuilder.create_dot = create_dot
    if not getattr(cast, "_rounds_bf16", False):
        cast_impl._rounds_bf16 = True
        ti.InterpreterBuilder.cast_impl = cast_impl


if os.environ.get("TRITON_INTERPRET") == "1" and DTYPE == torch.bfloat16:
    _bf16_in_the_interpreter()


@triton.jit
def _floor_div(a, b):
    # floor(a / b) for b > 0; Triton's // truncates towards zero
    return tl.where(a >= 0, a // b, -((b - 1 - a) // b))
# tilegen:end interpreter


# tilegen:section tanh (a module with mods)
@triton.jit
def _tanh(x):
    # tanh in fp32 from exp (Triton's interpreter has no libdevice): an odd Taylor polynomial to x^9
    # for |x| < 0.125 (truncation < 2e-11 relative), else sign(x) (1 - e^-2|x|) / (1 + e^-2|x|)
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    big = (1.0 - e) / (1.0 + e)
    x2 = x * x
    small = x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * (-0.05396825396825397 + x2 * 0.021869488536155203))))
    return tl.where(a < 0.125, small, tl.where(x < 0, -big, big))
# tilegen:end tanh


# tilegen:section host (every module)
def _logical(x):
    """The BNSD view of a 4-d array in this module's layout (no copy)."""
    return x.permute(0, 2, 1, 3) if LAYOUT == "BSND" else x


def _new(shape, dtype, device, poison, fill=None):
    """A new tensor: NaN-filled when `poison`, else filled with `fill` (an output whose stores skip
    guarded rows: the value those rows keep), else uninitialized."""
    if poison or fill is not None:
        return torch.full(tuple(shape), float("nan") if poison else fill, dtype=dtype, device=device)
    return torch.empty(tuple(shape), dtype=dtype, device=device)


def _alloc(shape, dtype, device, poison, layout, fill=None):
    """A new tensor of logical shape `shape`, laid out as `layout` (filled as `_new`)."""
    physical = (shape[0], shape[2], shape[1], shape[3]) if layout == "BSND" else tuple(shape)
    x = _new(physical, dtype, device, poison, fill)
    return x.permute(0, 2, 1, 3) if layout == "BSND" else x


def _workspaces(shapes, dtype, device, poison):
    """Contiguous tensors of `shapes` and `dtype` in one allocation, each starting on a 16-byte
    boundary (Triton specialises a pointer on it); NaN-filled when `poison`, else uninitialized."""
    per = max(1, 16 // dtype.itemsize)
    sizes = [math.prod(s) for s in shapes]
    starts, n = [], 0
    for size in sizes:
        starts.append(n)
        n += -(-size // per) * per
    buf = _new((n,), dtype, device, poison)
    return [buf[a : a + size].view(shape) for a, size, shape in zip(starts, sizes, shapes)]


def _check(name, x, shape, dtype):
    """Raise ValueError unless `x` is a tensor of `dtype` whose physical shape is `shape`."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} = {type(x).__name__} is invalid; accepted: a torch.Tensor")
    if x.dtype != dtype:
        raise ValueError(f"{name}.dtype = {x.dtype} is invalid; accepted: {dtype} (this module was generated for it)")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}.shape = {tuple(x.shape)} is invalid; accepted: {tuple(shape)} ({LAYOUT}, the spec this module was generated for)")


def _physical_shape(shape):
    return (shape[0], shape[2], shape[1], shape[3]) if LAYOUT == "BSND" else tuple(shape)

# --- launches ---------------------------------------------------------------------------------------
#
# The first launch of a kernel for a specialisation goes through Triton (`kernel[grid](...)`: it binds
# and specialises the arguments, compiles or finds the kernel, launches it) and returns the compiled
# kernel; later launches with the same specialisation call the compiled kernel's launcher directly,
# with the arguments in the order of the kernel's parameters, as Triton's own launch passes them. The
# key holds everything Triton specialises on here: the current device, every tensor's dtype and
# 16-byte alignment, and the integer arguments' values (exact: finer than Triton's "== 1", "% 16 == 0"
# and 32/64-bit classes); the constexprs, warps and stages are constants of each `_launch_*`. Where the
# launch form is not recognised (`_direct_launch` returns None), a launch hook is set (profilers), or
# under TRITON_INTERPRET=1, every launch takes Triton's path.

LAUNCHES = {"direct": 0, "ordinary": 0}  # launch counters, for tests and benchmarks
_DIRECT = {}  # key (see above) -> launch(grid, stream, args) of the compiled kernel, or None: Triton's path
_DIRECT_LIMIT = 1024  # keys kept
_DIRECT_ON = os.environ.get("TRITON_INTERPRET") != "1"
_RUNTIME_KNOBS = getattr(getattr(triton, "knobs", None), "runtime", None)  # where Triton keeps the launch hooks (3.9; None: older)
_LAUNCHER_PARAMS = ("gridX", "gridY", "gridZ", "stream", "function", "kernel_metadata", "launch_metadata", "launch_enter_hook", "launch_exit_hook")


def _device_stream():
    """(device index, raw stream) as Triton's launch reads them."""
    from triton.runtime import driver

    device = driver.active.get_current_device()
    return device, driver.active.get_current_stream(device)


def _hooks_idle():
    """No launch hook is set: each is None, or an empty hook chain (Triton 3.9 keeps chains)."""
    enter, exit_ = getattr(_RUNTIME_KNOBS, "launch_enter_hook", 0), getattr(_RUNTIME_KNOBS, "launch_exit_hook", 0)
    return (enter is None or getattr(enter, "calls", 0) == []) and (exit_ is None or getattr(exit_, "calls", 0) == [])


def _launcher_form(run):
    """`run`'s named parameters are a prefix of _LAUNCHER_PARAMS, followed by *args (and maybe **kwargs)."""
    import inspect

    params = [p for p in inspect.signature(run).parameters.values() if p.kind != p.VAR_KEYWORD]
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return bool(params) and params[-1].kind == params[-1].VAR_POSITIONAL and tuple(named) == _LAUNCHER_PARAMS[: len(named)]


def _direct_launch(kernel, compiled, n_args, consts):
    """launch(grid, stream, args) through `compiled` (what `kernel[grid](...)` returned), or None when
    the installed Triton's form is not recognised: `compiled` must have `run` (the launcher),
    `function`, `packed_metadata` and `src.signature`; the launcher's named parameters must be a prefix
    of _LAUNCHER_PARAMS followed by *args; the constexprs must be the kernel's last parameters, and the
    signature the launcher was built from must hold either every parameter (the constexprs are then
    passed too, as Triton 3.9 does) or the `n_args` runtime ones alone."""
    try:
        names = list(kernel.arg_names)
        if hasattr(compiled, "result") or sorted(names[n_args:]) != sorted(consts):
            return None
        n_sig = len(compiled.src.signature)
        tail = tuple(consts[n] for n in names[n_args:]) if n_sig == len(names) else () if n_sig == n_args else None
        run = compiled.run
        if tail is None or not _launcher_form(run):
            return None
        function, metadata = compiled.function, compiled.packed_metadata
    except Exception:  # any other form: Triton's path
        return None

    def launch(grid, stream, args):
        run(*grid, stream, function, metadata, None, None, None, *args, *tail)

    return launch


def _launch(kernel, grid, tensors, ints, consts, num_warps, num_stages, record=None):
    """Launch `kernel` on `grid` (1 to 3 axes) with the pointer arguments `tensors`, then the integer
    arguments `ints` (strides, shapes), then the constexprs `consts` (name -> value). `record`: a list
    that gets (direct launch or None, the 3-axis grid, `ints`) of this launch (see `_bind`)."""
    key = None
    if _DIRECT_ON:
        device, stream = _device_stream()
        key = (id(kernel), device, ints, *[(x.dtype, x.data_ptr() % 16 == 0) for x in tensors])
        direct = _DIRECT.get(key)
        if direct is not None and _hooks_idle():
            try:
                direct((*grid, 1, 1)[:3], stream, (*tensors, *ints))
            except TypeError:  # arguments refused before any launch: Triton's path from now on
                _DIRECT[key] = None
            else:
                LAUNCHES["direct"] += 1
                if record is not None:
                    record.append((direct, (*grid, 1, 1)[:3], ints))
                return
    compiled = kernel[grid](*tensors, *ints, **consts, num_warps=num_warps, num_stages=num_stages)
    LAUNCHES["ordinary"] += 1
    if key is not None and key not in _DIRECT:
        if len(_DIRECT) >= _DIRECT_LIMIT:  # stride-varying workloads: start again
            _DIRECT.clear()
        _DIRECT[key] = _direct_launch(kernel, compiled, len(tensors) + len(ints), consts)
    if record is not None:
        record.append((_DIRECT.get(key) if key is not None else None, (*grid, 1, 1)[:3], ints))


# --- bound launch records ---------------------------------------------------------------------------
#
# A trusted `forward`/`backward` call without poison (tilegen.torch's plan cache on a hit) whose
# launches could all be direct leaves a record under a key of everything its launches depend on beyond
# this module's constants: the current device and each input's strides and 16-byte alignment (the
# shapes and dtypes are the module's own, which `trusted` vouches for). The record holds what the call
# allocated (the shared workspace buffer with the views' shapes, strides and offsets; every other new
# tensor's shape and strides), and per launch the direct launcher, the grid and the integer arguments
# (strides of the inputs and of the new tensors, shapes) as that call passed them. A later call with the
# key allocates the same, reads the current stream once and calls the launchers with its own tensors:
# no dict, no stride(), no per-launch key. It falls back to the ordinary path (which keeps every
# check of `_launch`) while a launch hook is set, under TRITON_INTERPRET=1, with poison, when the
# alignment class or a stride of an input changes (another key: its first call records again), and
# for good for a key whose launcher refuses the arguments (TypeError; the call is then redone on the
# ordinary path, every tensor new). torch's allocators start every allocation on at least a 64-byte
# boundary, so the new tensors keep the alignment class `_bind` checked. Nothing reads a tensor's
# values on the host, so a CUDA graph can capture it.

_BOUND = {}  # ("forward" | "backward", key (see above)) -> record (see `_bind`), or None: the ordinary path
BOUND_CALLS = {"forward": 0, "backward": 0}  # calls that took their bound record, for tests and benchmarks


def _bind(kind, key, record, t, inputs, workspaces, result):
    """Keep the record of a call under (`kind`, `key`) when every launch of it could be direct:
    `record` from `_launch` (one entry per launch, in order, each with `_LAUNCH_TENSORS[kind]`'s names),
    `t` the call's tensors by name, `inputs` the names of the arguments (in `forward`/`backward` order),
    `workspaces` the names of the views of the shared workspace buffer, `result` what the call returns
    (tensors of `t`, or their BNSD/BSND transposes). Keeps None (the ordinary path) when a new tensor
    does not start on a 16-byte boundary or a result is not found."""
    if len(_BOUND) >= _DIRECT_LIMIT:
        _BOUND.clear()
    if any(launch is None for launch, _, _ in record):
        _BOUND[(kind, key)] = None
        return
    names = list(inputs) + list(workspaces) + [n for n in t if n not in inputs and n not in workspaces]
    new = [t[n] for n in names[len(inputs):]]
    ws = None
    if workspaces:
        base = t[workspaces[0]]._base
        if base is None or any(t[n]._base is not base for n in workspaces):
            _BOUND[(kind, key)] = None
            return
        ws = (base.numel(), base.dtype, tuple((tuple(t[n].shape), t[n].stride(), t[n].storage_offset()) for n in workspaces))
    allocs = tuple((tuple(x.shape), x.stride(), x.dtype) for x in new[len(workspaces):])
    returns = [next(((i, p) for i, x in enumerate(new, len(inputs)) for p in (False, True) if r.data_ptr() == x.data_ptr()
                     and (not p or x.dim() == 4) and _same_view(r, x.permute(0, 2, 1, 3) if p else x)), None) for r in result]
    if any(x.data_ptr() % 16 for x in new) or None in returns:
        _BOUND[(kind, key)] = None
        return
    index = {n: i for i, n in enumerate(names)}
    launches = tuple((launch, grid, tuple(index[n] for n in tensors), ints)
                     for (launch, grid, ints), tensors in zip(record, _LAUNCH_TENSORS[kind]))
    _BOUND[(kind, key)] = (ws, allocs, launches, tuple(returns))


def _same_view(a, b):
    return tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride() and a.dtype == b.dtype


def _bound_call(kind, key, stream, args):
    """The result of a trusted call through its bound record, or None: no record (or a None one), a
    launch hook set, or a launcher refusing the arguments (the record is then dropped for good)."""
    bound = _BOUND.get((kind, key))
    if bound is None or not _hooks_idle():
        return None
    ws, allocs, launches, returns = bound
    device = args[0].device
    xs = list(args)
    if ws is not None:
        buf = torch.empty(ws[0], dtype=ws[1], device=device)
        xs += [buf.as_strided(*view) for view in ws[2]]
    xs += [torch.empty_strided(shape, stride, dtype=dtype, device=device) for shape, stride, dtype in allocs]
    try:  # an input goes as given, not as its BNSD view: a launcher reads a tensor's data_ptr() alone
        for launch, grid, tensors, ints in launches:
            launch(grid, stream, (*[xs[i] for i in tensors], *ints))
    except TypeError:  # refused (before any launch of a new form): the ordinary path, for good
        _BOUND[(kind, key)] = None
        return None
    LAUNCHES["direct"] += len(launches)
    BOUND_CALLS[kind] += 1
    return tuple(xs[i].permute(0, 2, 1, 3) if p else xs[i] for i, p in returns)
# tilegen:end host


# tilegen:section params (a module with mods)
def _params(params, device):
    """The parameter tensors by name, checked against PARAMS (shape, dtype, device); ValueError names
    a missing, extra or malformed one."""
    given = dict(params or {})
    out = {}
    for name, (shape, dtype, values) in PARAMS.items():
        x = given.pop(name, None)
        if x is None:
            if values is None:
                raise ValueError(f"params[{name!r}] is missing; accepted: a {dtype} tensor of shape {shape}")
            x = torch.tensor(values, dtype=dtype, device=device).reshape(shape)
        _check(f"params[{name!r}]", x, shape, dtype)
        if x.device != device:
            raise ValueError(f"params[{name!r}].device = {x.device} is invalid; accepted: {device} (q's device)")
        out[name] = x
    for name in given:
        raise ValueError(f"params[{name!r}] is invalid; accepted: the parameters {', '.join(PARAMS) or 'none'}")
    return out
# tilegen:end params


# tilegen:section blocks (a module whose mask mod has a block table)
def _block_lists(bm):
    """From the class table bm [Bm, Hm, nQ, nK] (0 empty, 1 partial, 2 full): per Q tile the count and
    ascending indices of its non-empty K/V tiles (BM_kvn, BM_kvi), per K/V tile those of its non-empty
    Q tiles (BM_qn, BM_qi); int32, padded with the tile count. Sorting distinct keys: deterministic."""
    nonempty = bm > 0
    nq, nk = bm.shape[2], bm.shape[3]
    kv = torch.where(nonempty, torch.arange(nk, dtype=torch.int32, device=bm.device), nk)
    qt = torch.where(nonempty.transpose(2, 3), torch.arange(nq, dtype=torch.int32, device=bm.device), nq)
    return {
        "BM_kvn": nonempty.sum(dim=3, dtype=torch.int32).contiguous(),
        "BM_kvi": kv.sort(dim=3).values.to(torch.int32).contiguous(),
        "BM_qn": nonempty.sum(dim=2, dtype=torch.int32).contiguous(),
        "BM_qi": qt.sort(dim=3).values.to(torch.int32).contiguous(),
    }


def tile_lists(kind, bm):
    """The class table bm (float32 [Bm, Hm, nQ, nK] of BLOCK_SHAPES[kind], on q's device; codes 0
    empty, 1 partial, 2 full, as the classify kernel writes them for TILE_SIZES[kind]) with its tile
    lists: the `blocks=` argument of `forward` (kind "fwd") and `backward` ("bwd"), which then walk it
    instead of running the classify kernel. ValueError: a table of another shape or dtype."""
    _check(f"blocks[{kind!r}]", bm, BLOCK_SHAPES[kind], torch.float32)
    return {"BM": bm, **_block_lists(bm)}


def _classified(t, launch, kernel, blocks=None):
    """Run the classify kernel into t["BM"] and add the tile lists to t (or take `blocks`, a dict of
    `tile_lists`, computed by the caller); with a mask of indices alone (INDEX_ONLY_MASK) the table and
    lists are computed once per device and reused."""
    if blocks is not None:
        t.update(blocks)
        return
    key = (kernel, str(t["Q"].device))
    if INDEX_ONLY_MASK and key in _BLOCKS:
        t.update(_BLOCKS[key])
        return
    launch(t)
    lists = {"BM": t["BM"], **_block_lists(t["BM"])}
    if INDEX_ONLY_MASK:
        _BLOCKS[key] = lists
    t.update(lists)


def block_lists(kind, q, params=None):
    """The class table and tile lists the `kind` ("fwd" or "bwd") launches walk for inputs on q's
    device: dict BM, BM_kvn, BM_kvi, BM_qn, BM_qi (for inspection and tests)."""
    params = _params(params, q.device)
    B, Hq, Hkv, Sq, Sk = SHAPES["B"], SHAPES["Hq"], SHAPES["Hkv"], SHAPES["Sq"], SHAPES["Sk"]
    t = {"Q": q, **params}
    t["BM"] = torch.full(BLOCK_SHAPES[kind], float("nan"), dtype=torch.float32, device=q.device)
    _classified(t, globals()[f"_launch_{kind}_classify"], f"{kind}_classify")
    return {name: t[name] for name in ("BM", "BM_kvn", "BM_kvi", "BM_qn", "BM_qi")}
# tilegen:end blocks
