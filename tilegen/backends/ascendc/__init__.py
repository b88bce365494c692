"""Ascend C backend for 910B (NPU arch 2201): the scheduled IR → kernels, host code, build files.

The pipeline has already fused the backward, split each matmul's scale onto the vector unit, placed
every buffer (L1 / L0C on the cube, UB on the vector cores, rows split over the 2 AIVs) with GM
hand-off tiles between the units, and chosen the tile sizes. This module turns each kernel of such a
program into a MIX_AIC_1_2 kernel: one loop nest, emitted twice, once per unit:

- the AIC (cube) side keeps the statements on cube buffers: loads into L1 (ND→NZ DataCopy), matmuls
  (LoadData into L0A/L0B, Mmad into L0C), stores from L0C (Fixpipe, with SetAtomicAdd for atomic adds);
- the AIV (vector) side keeps the statements on UB buffers, each of the 2 AIVs on its half of the rows:
  loads and stores with DataCopyPad, elementwise ops, row reductions and masks;
- a store to a hand-off tile and the matching load become a send and a receive through the core's GM
  workspace slot, ordered by cross-core flags (data ready / slot free, mode 2).

Program instances of the launch grid are spread over the AI Cores round robin; every AIV runs the same
instances as its AIC. Decisions come from the IR (tile sizes, placement, loop bounds, masks, pads);
the lowering here (:meth:`AscendC.lower`) computes offsets, counts and flags into typed ops
(:mod:`tilegen.backends.ascendc.ops`), and the Jinja templates in ``templates/ascendc/``
(:meth:`AscendC.render`) render them through one macro per op class, calling the fixed helpers of
``tilegen_runtime.h``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import lru_cache

import jinja2
import sympy

from tilegen.core import dtypes
from tilegen.backends.output import Generated, launch_label, with_manifest
from tilegen.core.errors import SpecError, TargetError
from tilegen.core.exprs import evaluate
from tilegen.models.analysis import target_l2_reuse
from tilegen.core import ir
from tilegen.core.ir import (
    Access,
    Buffer,
    Elementwise,
    Fill,
    Kernel,
    Load,
    Loop,
    Mask,
    MatMul,
    ModOp,
    Program,
    RowReduce,
    Store,
    grid_loops,
    lookahead_of,
    stages_of,
    walk,
)
from tilegen.backends.ascendc import mods as AM
from tilegen.backends.ascendc import ops as O
from tilegen.core import mods as M
from tilegen.backends.compiler import Backend, compile_program
from tilegen.backends.hooks import hooks
from tilegen.core.strategies import DKV_AUTO
from tilegen.passes import ascend as ascend_passes
from tilegen.passes.ascend.fold_row_reductions import fold_of
from tilegen.passes.ascend.l0c_pingpong import chunk_of
from tilegen.passes.ascend.mask_cut_tiles_only import CutOnly
from tilegen.passes.ascend.one_handoff_per_direction import signals, waits
from tilegen.passes.ascend.one_launch import SyncAll
from tilegen.passes.ascend.own_tile_epilogue import SignalDone, WaitDone
from tilegen.passes.ascend.pipeline_handoffs import ready_of, slots_of
from tilegen.passes.ascend.receive_ahead import Hoist
from tilegen.passes.ascend.receive_free_early import FreeEarly
from tilegen.passes.ascend.snake_deal import deal_of
from tilegen.passes.ascend.stream_programs import Stream
from tilegen.passes.ascend.wait_at_first_read import WaitAtRead
from tilegen.passes.ascend.wait_at_next_store import WaitAtNextStore
from tilegen.passes.ascend.wait_at_rewrite import WaitAtRewrite
from tilegen.passes.ascend.write_first_plain import FirstPlain, ZeroUnless
from tilegen.passes.driver import Options
from tilegen.models.footprint import buffer_bytes, plan
from tilegen.models.stages import accessed, carried, handoff_direction, reads_in, stmt_unit, stream_split, writes_in
from tilegen.core.resources import data_dir, drop_sections, runtime_text
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import Target, load_target

CTYPE = {"fp16": "half", "bf16": "bfloat16_t", "fp32": "float", "int32": "int32_t"}
SHAPE_NAMES = ("B", "Hq", "Hkv", "G", "Sq", "Sk")


# --- C++ expressions -----------------------------------------------------------------------------------


def cexpr(expr, consts: dict[str, int]) -> str:
    """A sympy integer expression as C++ int64 code. Symbols in ``consts`` (tile sizes, head dims)
    become literals; the others (loop variables, shape sizes) stay names."""
    e = sympy.sympify(expr)
    if consts:
        e = e.subs({s: consts[str(s)] for s in e.free_symbols if str(s) in consts})
    return _c(e)


def _c(e) -> str:
    if e.is_Integer:
        v = int(e)
        return f"{v}LL" if v >= 0 else f"({v}LL)"
    if e.is_Symbol:
        return str(e)
    if isinstance(e, sympy.Add):
        terms = [_c(a) for a in e.args]
        return "(" + " + ".join(terms) + ")"
    if isinstance(e, sympy.Mul):
        num, den = sympy.fraction(e)
        if den != 1:
            raise ValueError(f"non-integer expression {e} in emitted code")
        return "(" + " * ".join(_c(a) for a in e.args) + ")"
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        fn = "tilegen::FloorDiv" if isinstance(e, sympy.floor) else "tilegen::CeilDiv"
        return f"{fn}({_c(num)}, {_c(den)})"
    if isinstance(e, (sympy.Min, sympy.Max)):
        fn = "tilegen::Min64" if isinstance(e, sympy.Min) else "tilegen::Max64"
        args = [_c(a) for a in e.args]
        out = args[0]
        for a in args[1:]:
            out = f"{fn}({out}, {a})"
        return out
    if isinstance(e, sympy.Piecewise):
        (v1, c1), (v2, _c2) = e.args
        return f"(({_rel(c1)}) ? {_c(v1)} : {_c(v2)})"
    raise ValueError(f"cannot emit {e!r} ({type(e).__name__}) as C++")


def _rel(c) -> str:
    ops = {sympy.GreaterThan: ">=", sympy.StrictGreaterThan: ">", sympy.LessThan: "<=", sympy.StrictLessThan: "<"}
    for cls, op in ops.items():
        if isinstance(c, cls):
            return f"{_c(c.lhs)} {op} {_c(c.rhs)}"
    raise ValueError(f"cannot emit condition {c!r}")


def cfloat(x: float) -> str:
    if x == float("-inf"):
        return "tilegen::NEG_INF"
    if x == float("inf"):
        return "tilegen::POS_INF"
    return repr(float(x)) + "f"


# --- descriptor fields ---------------------------------------------------------------------------------
#
# Every value the runtime helpers (runtime/ascendc/tilegen_runtime.h) and the kernels compute and then
# narrow into a hardware descriptor or a narrow API argument. Types are those of NPU arch 2201 in the
# asc-devkit headers (cannmirror/asc-devkit@0da921b9, include/basic_api/kernel_struct_*.h); ranges are
# the ones the devkit itself checks (impl/basic_api/*_check.h, impl/basic_api/dav_c220/*) or, where it
# checks none, the range its API page documents (docs/zh/api/...). The runtime header is where they are
# written, once: its ``namespace field`` holds one struct per field (C type, lo, hi, the source as the
# comment above it), which TILEGEN_NARROW reads and :data:`FIELDS` parses. The lowering derives each
# value as a sympy expression of the spec (the largest value the field takes over the loop nest), proves
# it in range at generate time and emits the run-time-size-dependent ones as host checks (tiling.h,
# TilegenRefusal); the runtime narrows each through TILEGEN_NARROW, which the CPU twin checks again.
# Notes on some ranges: MmadParams.m starts at 2 because m = 1 is GEMV (L0A read as ND, docs/zh/api/.../
# Mmad.md) and the helpers load L0A as ZZ; VectorOp.count is the counter-mode mask of the count-form
# vector calls; CrossCoreSetFlag.flagId stops at 10 since 11-14 are SyncAll's. Fields written as literals
# (ndNum = 1, srcNdMatrixStride = 0, dstNzNStride = 1, dstNzMatrixStride = 0, DataCopyExtParams.rsv = 0,
# InitConstValueParams.repeatTimes = 1 and dstGap = 0, LoadData2DParams.sid/dstGap/addrMode = 0,
# MmadParams.unitFlag = 0) are in range by inspection and not listed.

RUNTIME_HEADER = ("ascendc", "tilegen_runtime.h")  # under runtime/ (tilegen.core.resources.runtime_text)


@dataclass(frozen=True)
class FieldRange:
    """A narrow field: its C type on arch 2201, accepted range [lo, hi] and where the range comes from."""

    name: str  # "Struct_member" (the C++ identifier of its range in tilegen_runtime.h)
    ctype: str
    lo: int
    hi: int
    source: str


_FIELD_STRUCT = re.compile(
    r"// (?P<source>[^\n]+)\nstruct (?P<name>\w+) \{\n    using T = (?P<ctype>\w+);\n"
    r"    static constexpr int64_t lo = (?P<lo>-?\d+)LL;\n    static constexpr int64_t hi = (?P<hi>-?\d+)LL;\n\};\n"
)


def header_fields(text: str) -> dict[str, FieldRange]:
    """The field ranges of a runtime header's ``namespace field`` (``text``: the header), by name.

    Raises:
        ValueError: the header has no ``namespace field``, or a line in it is not part of a field struct.
    """
    begin, end = "namespace field {\n", "}  // namespace field\n"
    if begin not in text or end not in text:
        raise ValueError("the runtime header has no 'namespace field { ... }  // namespace field'")
    body = text[text.index(begin) + len(begin) : text.index(end)]
    fields, pos = {}, 0
    for m in _FIELD_STRUCT.finditer(body):
        if m.start() != pos:
            raise ValueError(f"namespace field: not a field struct: {body[pos:m.start()]!r}")
        fields[m["name"]] = FieldRange(m["name"], m["ctype"], int(m["lo"]), int(m["hi"]), m["source"])
        pos = m.end()
    if pos != len(body) or not fields:
        raise ValueError(f"namespace field: not a field struct: {body[pos:]!r}")
    return fields


@lru_cache(maxsize=1)
def fields() -> dict[str, FieldRange]:
    """Every narrow field by name: the runtime header's (:func:`header_fields`, read once per process)
    and ``MaskTile_index``: MaskTile compares column indices as floats, exact while every compared
    integer is <= 2^24 (a proof obligation of the lowering alone; the header narrows no such field).
    Also ``FIELDS``, the module attribute."""
    return {
        **header_fields(runtime_text(*RUNTIME_HEADER)),
        "MaskTile_index": FieldRange("MaskTile_index", "float", 0, 2**24, "IEEE 754 binary32 (24-bit significand)"),
    }


def __getattr__(name: str):
    # FIELDS is read from the runtime header when first asked for, not at import: the package imports
    # without its data folders (tools that only read the code)
    if name == "FIELDS":
        return fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def runtime_sections(spec: AttentionSpec) -> set[str]:
    """The sections of the runtime header that the kernels of ``spec`` call (``tilegen:section`` markers
    in runtime/ascendc/tilegen_runtime.h): ``packed`` for a packed batch, ``sinks``, ``mods`` for a score
    or mask mod."""
    return {name for name, used in (("packed", bool(spec.packed_ids)), ("sinks", bool(spec.sinks)), ("mods", spec.mods is not None)) if used}


def runtime_header(spec: AttentionSpec) -> str:
    """``tilegen_runtime.h`` for the kernels of ``spec``: runtime/ascendc/tilegen_runtime.h with the
    sections ``spec`` does not use (:func:`runtime_sections`) and the marker lines left out, every other
    byte as it is."""
    return drop_sections(runtime_text(*RUNTIME_HEADER), runtime_sections(spec))


@dataclass(frozen=True)
class FieldUse:
    """One proof obligation: ``field`` takes at most ``value`` at ``where``.

    ``value`` is a sympy expression of the run-time sizes B, Hq, Hkv, G, Sq, Sk and integers: the largest
    value over the loop nest (a count of valid rows is bounded by the tile's rows), exact where the value
    does not depend on a loop (row pitches and gaps). The smallest values hold by construction: the
    helpers skip a move whose count would be 0.
    """

    field: str
    value: object
    where: str


def _sizes(spec: AttentionSpec) -> dict[str, int]:
    from tilegen.core.build import shape_env

    return {str(k): v for k, v in shape_env(spec).items()}


def prove_fields(uses: list[FieldUse], spec: AttentionSpec) -> list[dict]:
    """Check every obligation at the spec's sizes; return the host checks of the size-dependent ones.

    Returns:
        [{"field", "cond" (C++ bool of B, Hq, Hkv, G, Sq, Sk), "text"}], one per distinct obligation, in
        a stable order.

    Raises:
        SpecError: a field does not fit for ``spec`` (names the field, its value, the accepted range and
            the header it comes from).
    """
    sizes = _sizes(spec)
    guards: dict[tuple, dict] = {}
    for use in uses:
        rng = fields()[use.field]
        expr = sympy.sympify(use.value)
        free = {str(s) for s in expr.free_symbols}
        if free - set(SHAPE_NAMES):
            raise ValueError(f"{use.field} at {use.where}: {expr} depends on {sorted(free - set(SHAPE_NAMES))}, not only on sizes")
        value = int(evaluate(expr, sizes))
        if not rng.lo <= value <= rng.hi:
            raise SpecError(
                rng.name.replace("_", ".", 1), value, f"[{rng.lo}, {rng.hi}] ({rng.ctype}; {rng.source}); it is {use.where} for this spec"
            )
        if free:
            c = cexpr(expr, {})
            if "tilegen::" in c:  # host code: no device helpers
                raise ValueError(f"{use.field} at {use.where}: {expr} is not a plain polynomial of the sizes")
            text = f"{rng.name.replace('_', '.', 1)} = {expr} ({use.where}) must be in [{rng.lo}, {rng.hi}]"
            guards.setdefault((use.field, str(expr)), {"field": use.field, "cond": f"{rng.lo}LL <= {c} && {c} <= {rng.hi}LL", "text": text})
    return [guards[k] for k in sorted(guards)]


# --- the plan ----------------------------------------------------------------------------------------


@dataclass
class View:
    """A named LocalTensor view into one unit's buffer pool: copies (stages) at byte offsets."""

    name: str
    ctype: str
    pool: str
    elems: int
    offsets: list[int]


@dataclass
class Side:
    """One unit's part of a kernel: its pools (TBuf position, bytes), views, producer counters, ops."""

    pools: list[tuple[str, str, int]] = field(default_factory=list)  # (pool var, TPosition, bytes)
    views: list[View] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)
    drains: list[tuple[str, str]] = field(default_factory=list)  # (counter, flag) waited once at the end
    frees: list[str] = field(default_factory=list)  # the V -> MTE2 events of the tiles with @free_early
    ops: list[O.Op] = field(default_factory=list)  # typed ops (tilegen.backends.ascendc.ops)
    chunked: bool = False  # the cube's products run through the halves of L0C (@n_chunk)
    prologue: list[O.Op] = field(default_factory=list)  # ops run once before the programs (the mods' UB tables)


@dataclass
class KernelPlan:
    name: str
    source_kernel: str
    grid: list[tuple[str, str]]  # (var, extent)
    aic: Side
    aiv: Side
    shape_names: list[str]
    deal: str = "cyclic"  # how the cores take the grid's programs (@deal)
    stream: bool = False  # the programs as one stream of tile pairs (@stream): each side's ops are one O.Stream


@dataclass
class TensorArg:
    """A kernel argument: an HBM tensor with its C type, element count (C++), kind and layout; for
    non-inputs the ATen expression that allocates it in the torch binding; ``ident``, its C++ name
    in the host code (the torch binding and the twin harness): the tensor's name, but ``param_<name>``
    for an input beside the attention operands (a mod's parameter array, the sinks, a packed batch's
    ids), whose name the spec chooses, so that it cannot shadow an identifier of that code (``s``,
    ``stream``, ``Ptr``, ``dir``, ``blocks``, ...), none of which starts with ``param_``; ``zeroed``: the
    host zeroes it before the launches (a gradient partial: tiles the kernels skip contribute 0);
    ``returned``: the host hands it back (outputs, partials, the block table)."""

    name: str
    ctype: str
    numel: str
    kind: str
    layout: str
    alloc: str = ""
    ident: str = ""
    zeroed: bool = False
    returned: bool = False


_ATEN = {"half": "at::ScalarType::Half", "bfloat16_t": "at::ScalarType::BFloat16", "float": "at::ScalarType::Float"}


def _aten_alloc(t, numel: str, spec: AttentionSpec, zeroed: bool) -> str:
    if zeroed:
        return f"at::zeros({{static_cast<int64_t>({numel})}}, Q.options().dtype(at::ScalarType::Float))"
    if t.kind == "tiles":  # written by the classify kernel
        return f"at::empty({{static_cast<int64_t>({numel})}}, Q.options().dtype(at::ScalarType::Float))"
    like = {"O": "Q", "dQ": "Q", "dK": "K", "dV": "V"}.get(t.name)
    if like and t.name != "O":
        return f"at::empty_like({like})"
    if t.name == "O":
        dims = "{B, Sq, Hq, %d}" % spec.head_dim_v if t.layout == "BSND" else "{B, Hq, Sq, %d}" % spec.head_dim_v
        return f"at::empty({dims}, Q.options())"
    if len(t.shape) == 3:
        return f"at::empty({{B, Hq, Sq}}, Q.options().dtype({_ATEN[CTYPE[t.dtype]]}))"
    return f"at::empty({{static_cast<int64_t>({numel})}}, Q.options().dtype({_ATEN[CTYPE[t.dtype]]}))"


@dataclass
class ProgramPlan:
    label: str
    kernels: list[KernelPlan]
    tensors: list[TensorArg]
    handoffs: list[dict]  # name, ctype, rows, cols, offset (bytes in a core's slot area)
    ws_per_core: int
    tiles: dict[str, int]
    program: Program
    uses: list[FieldUse] = field(default_factory=list)  # descriptor-field obligations of its kernels
    extras: list[str] = field(default_factory=list)  # inputs beside the attention operands (parameters, sinks, packed ids)
    partials: list[str] = field(default_factory=list)  # parameter-gradient partials it returns
    launches: list[dict] = field(default_factory=list)  # one per launch, see launch_protocol
    operands: list[dict] = field(default_factory=list)  # the attention operands the host op takes (name, arg, dtype, dims, head_dim)
    results: list[str] = field(default_factory=list)  # what the host op returns, in order


# --- lowering ----------------------------------------------------------------------------------------


class _Lower:
    def __init__(self, program: Program, kernel: Kernel, target: Target, spec: AttentionSpec, handoffs: dict, uses=None):
        self.uses: list[FieldUse] = uses if uses is not None else []
        self.program = program
        self.kernel = kernel
        self.target = target
        self.spec = spec
        self.env = {str(k): v for k, v in program.env}
        self.consts = {k: v for k, v in self.env.items() if k in ("Br", "Bc", "Dqk", "Dv")}
        self.buffers = {b.name: b for b in kernel.buffers}
        self.tensors = {t.name: t for t in program.tensors}
        self.handoffs = handoffs
        self.frees: set[str] = set()  # the V -> MTE2 events of @free_early (the vector's)
        self.split = target.vector_split
        self.step = int(target.placement["k_step"].value)
        self._mod_programs: dict = {}
        self.mod_tables: dict[str, int] = {}  # the mods' parameters held in UB (name -> elements), set by side("vector")
        self.pgrad_bufs = {s.dst for s in _stmts(kernel.body) if isinstance(s, ModOp) and s.op == "pgrad"}
        self.class_bufs = {s.dst for s in _stmts(kernel.body) if isinstance(s, ModOp) and s.op == "classify"}
        # GM accesses of a region the launch touches again (priced at the L2 rates by the cost model)
        self.l2 = target_l2_reuse(program, kernel, target)
        # the cube's products run in column chunks through the halves of L0C (tilegen::MatmulStore)
        products = [s for s in _stmts(kernel.body) if isinstance(s, MatMul)]
        self.chunked = any(chunk_of(s) for s in products)
        if self.chunked and not all(chunk_of(s) for s in products):
            raise TargetError(f"kernel {kernel.name} mixes chunked and whole products (@n_chunk): L0C is either the halves of tilegen::Cube or the planned accumulators")

    def l2_resident(self, stmt) -> bool:
        """Whether ``stmt``'s GM region is re-accessed within the launch (:func:`tilegen.models.analysis.l2_reuse`)."""
        return self.l2 is not None and id(stmt) in self.l2.stmts

    # descriptor fields: ``field`` takes at most ``value`` (an expression of the sizes, see FIELDS)
    def need(self, field_name: str, value, what: str) -> None:
        self.uses.append(FieldUse(field_name, sympy.sympify(value), f"{what} in {self.kernel.name}"))

    def fits(self, field_name: str, value) -> bool:
        """Whether ``value`` lies in the field's range at the spec's sizes."""
        rng = fields()[field_name]
        return rng.lo <= int(evaluate(value, _sizes(self.spec))) <= rng.hi

    def pitch_expr(self, access: Access):
        """Row pitch in elements of an access's tensor as a sympy expression of the sizes."""
        t = self.tensors[access.tensor]
        if t.kind == "handoff":
            return sympy.Integer(int(evaluate(t.shape[-1], self.env)))
        if len(t.shape) == 3:
            return sympy.Integer(1)
        subs = {sym: self.consts[str(sym)] for e in t.shape for sym in sympy.sympify(e).free_symbols if str(sym) in self.consts}
        shape = [sympy.sympify(e).subs(subs) for e in t.shape]
        return shape[1] * shape[3] if t.layout == "BSND" else shape[3]

    # sizes
    def dims(self, buf: Buffer) -> list[int]:
        return [int(evaluate(d, self.env)) for d in buf.shape]

    def cpad(self, buf: Buffer) -> int:
        item = dtypes.itemsize(buf.dtype)
        cols = self.dims(buf)[-1]
        return -(-cols * item // 32) * 32 // item

    def half(self, buf: Buffer) -> int:
        return -(-self.dims(buf)[0] // self.split)

    # pools and views
    def side(self, unit: str) -> Side:
        side = Side()
        levels = (
            [(self.target.placement["operand"], "TPosition::A1"), (self.target.placement["result"], "TPosition::CO1")]
            if unit == "cube"
            else [(self.target.placement["vector"], "TPosition::VECCALC")]
        )
        for level_name, position in levels:
            level = self.target.level(level_name)
            if unit == "cube" and level_name == self.target.placement["result"] and self.chunked:
                # the products are chunked (@n_chunk): the whole level is the two halves of tilegen::Cube
                side.pools.append((f"pool_{level_name.lower()}", position, level.usable))
                continue
            if not _live_spans(self.kernel, level_name):
                continue
            spans = self.spans(level_name)
            offsets, peak = plan(spans, level, self.env)
            pool = f"pool_{level_name.lower()}"
            extra = level.scratch_bytes if unit == "vector" else 0
            side.pools.append((pool, position, peak + extra))
            for buf, _, _ in spans:
                single = buffer_bytes(_single(buf), level, self.env)
                item = dtypes.itemsize(buf.dtype)
                side.views.append(
                    View(buf.name, CTYPE[buf.dtype], pool, single // item, [offsets[buf.name] + s * single for s in range(buf.stages)])
                )
            if unit == "vector":
                # backend scratch after the planned buffers: reduction tmp and result, the column
                # index of a mask, its compare bits: 8 bytes a row for MaskTile's 64-lane compares of up to
                # 64 rows at a time (sizes within the level's declared scratch)
                cols = self.scratch_cols()
                tmp = max([reduce_tmp_elems(self.dims(self.buffers[st.src])[1], 4, st.op == "max")
                           for st in _stmts(self.kernel.body) if isinstance(st, RowReduce)] + [8])
                scratch = [("sc_tmp", "float", tmp), ("sc_out", "float", 8), ("sc_col", "float", cols), ("sc_bits", "uint8_t", 512)]
                scratch += self.row_scratch(spans, extra - sum(-(-e * (1 if c == "uint8_t" else 4) // 32) * 32 for _, c, e in scratch))
                offset = -(-peak // 32) * 32
                mod_scratch = self.mod_scratch(cols, level.usable - offset - sum(_scratch_bytes(c, e) for _, c, e in scratch))
                for name, ctype, elems in scratch + mod_scratch:
                    size = _scratch_bytes(ctype, elems)
                    side.views.append(View(name, ctype, pool, elems, [offset]))
                    offset += size
                if mod_scratch:  # the mods' rows may use the UB the planned buffers leave free
                    if offset > level.usable:
                        raise TargetError(
                            f"the score/mask mods of {self.kernel.name} need {offset - peak} bytes of UB scratch beside "
                            f"{peak} bytes of tiles, over the {level.usable} usable; choose smaller tile sizes"
                        )
                    side.pools[-1] = (pool, position, max(peak + extra, offset))
                elif offset - peak > extra:
                    raise TargetError(f"vector scratch needs {offset - peak} bytes, the target reserves {extra}")
        if unit == "cube":
            for role, position in (("left", "TPosition::A2"), ("right", "TPosition::B2")):
                level = self.target.level(self.target.placement[role])
                need = self._staging_bytes(role)
                if need:
                    side.pools.append((f"pool_{level.name.lower()}", position, need))
        return side

    def spans(self, level: str) -> list[tuple[Buffer, int, int]]:
        """The live spans of the buffers at ``level`` that get a view of their own: all but the results
        of the mods' gradient-window and classify ops, which the emitted code keeps in the scratch
        ``sm_g`` (:meth:`mod_scratch`), not in a planned tile."""
        return [s for s in _live_spans(self.kernel, level) if s[0].name not in self.pgrad_bufs | self.class_bufs]

    def scratch_cols(self) -> int:
        """Elements of the AIV scratch row sc_col: the widest padded UB tile row (at least 64)."""
        spans = self.spans(self.target.placement["vector"])
        return max([self.cpad(b) for b, _, _ in spans if len(b.shape) == 2] + [64] + self.classify_cols())
    def row_scratch(self, spans, left: int) -> list[tuple[str, str, int]]:
        """The scratch of the row helpers (tilegen_runtime.h): ``sc_row``, a row vector rounded up to 64
        floats (Compares/Select take multiples of 256 B; RowsReduce's partial results), and ``sc_brc``,
        the Brcb blocks of RowsVecOp: 8 floats per row, for as many rows (a multiple of 8, at most the
        rows of the largest tile of this AIV) as the ``left`` bytes of the declared scratch hold.

        Raises:
            TargetError: fewer than 8 rows of Brcb blocks fit in the scratch.
        """
        halves = [self.half(b) for b, _, _ in spans if b.shape] or [8]  # 0-d tiles (a sink logit) hold no rows
        row = -(-max(halves) // 64) * 64
        left -= row * 4
        tile_rows = max([self.half(b) for b, _, _ in spans if len(b.shape) == 2] + [8])
        group = min(-(-tile_rows // 8) * 8, left // 256 * 8)
        if group < 8:
            raise TargetError(f"the row broadcast of {self.kernel.name} needs 256 bytes of UB scratch, {max(left, 0)} are left")
        return [("sc_row", "float", row), ("sc_brc", "float", group * 8)]

    def classify_cols(self) -> list[int]:
        """[cpad of Bc] for a block-classification kernel (its rows are Bc keys), else []."""
        if not any(isinstance(s, ModOp) and s.op == "classify" for s in _stmts(self.kernel.body)):
            return []
        bc = int(evaluate(ir.Bc, self.env))
        return [-(-bc * 4 // 32) * 32 // 4]

    def mod_scratch(self, cols: int, room: int) -> list[tuple[str, str, int]]:
        """The AIV scratch of this kernel's mod ops (ascendc_mods): a work row, the mask's 0/1 row, the
        compiled programs' rows ``sm_r<k>`` (as many as any op keeps live at once), the gradient window,
        and the UB tables ``mt_<name>`` of the parameters that get one (:func:`AM.table_candidates`,
        smallest first, at most :data:`AM.MOD_TABLE_BYTES` together, and only while everything fits in
        ``room``, the bytes of UB the tiles and the other scratch leave: the largest table is given up
        first). Sets :attr:`mod_tables`, which the compiled programs read."""
        ops = [s for s in _stmts(self.kernel.body) if isinstance(s, ModOp)]
        if not ops:
            return []
        chosen: dict[str, int] = {}
        for name, n in sorted(AM.table_candidates(self.program.mods, self.tensors).items(), key=lambda x: (x[1], x[0])):
            if (sum(chosen.values()) + n) * 4 <= AM.MOD_TABLE_BYTES:
                chosen[name] = n
        while True:
            self.mod_tables = dict(chosen)
            regs = max(self.mod_program(s).regs for s in ops)
            out = [("sm_a", "float", cols), ("sm_v0", "float", cols)]
            out += [(f"sm_r{n}", "float", cols) for n in range(regs)]
            widths = [self.grad_width(s.term) for s in ops if s.op == "pgrad"] + [8 for s in ops if s.op == "classify"]
            if widths:
                out.append(("sm_g", "float", max(widths + [8])))
            out += [(f"mt_{name}", "float", -(-n // 8) * 8) for name, n in chosen.items()]
            if not chosen or sum(_scratch_bytes(c, e) for _, c, e in out) <= room:
                return out
            del chosen[max(chosen, key=lambda k: (chosen[k], k))]

    def mod_params(self) -> dict:
        return AM.params_of(self.program.mods, self.tensors, lambda d: cexpr(d, self.consts), self.mod_tables)

    def mod_table_ops(self) -> list[O.ModTable]:
        """The loads of this kernel's UB tables (run once per AIV before its programs), with their
        descriptor-field obligations."""
        out = []
        for name, n in self.mod_tables.items():
            ctype = CTYPE[self.tensors[name].dtype]
            self.need("DataCopyExtParams_blockLen", n * 4, f"the UB table of {name}")
            self.need("VectorOp_count", n, f"the UB table of {name}")
            out.append(O.ModTable(view=f"mt_{name}", gm=f"g_{name}", n=n, ctype=ctype))
        return out

    def mod_program(self, stmt: ModOp) -> AM.Compiled:
        """The compiled lines of mod op ``stmt`` (:mod:`tilegen.backends.ascendc.mods`), once per op and
        set of UB tables."""
        key = (id(stmt), tuple(sorted(self.mod_tables)))
        if key not in self._mod_programs:
            mods, params = self.program.mods, self.mod_params()
            if stmt.op == "classify":
                bc = int(evaluate(ir.Bc, self.env))
                prog = AM.compile_mask_row(mods, params, -(-bc * 4 // 32) * 32 // 4)
            else:
                buf = self.buffers[stmt.args[0]]
                cpad = self.cpad(buf)
                if stmt.op == "score":
                    cond = f"g_{stmt.blocks}.GetValue({self.block_offset(stmt.blocks)}) == 2.0f" if stmt.blocks else ""
                    prog = AM.compile_score_mask(mods, params, cpad, True, True, cond)
                elif stmt.op == "dscore":
                    prog = AM.compile_dscore(mods, params, cpad)
                elif stmt.op == "pgrad":
                    br, bc = (int(evaluate(x, self.env)) for x in (ir.Br, ir.Bc))
                    prog = AM.compile_pgrad(mods, params, cpad, stmt.term, br, bc, self.grad_width(stmt.term))
                else:
                    raise TargetError(f"no Ascend C lowering for mod op {stmt.op}")
            self._mod_programs[key] = prog
        return self._mod_programs[key]

    def grad_width(self, term: int) -> int:
        """Entries of parameter-gradient term ``term``'s per-tile window (tilegen.mods.grad_window)."""
        from tilegen.core.mods import grad_window

        g = self.program.mods.grads[term]
        widths, _ = grad_window(g, self.program.mods.param(g.param), ir.Br, ir.Bc)
        return int(evaluate(sympy.Mul(*widths), {**self.env, **_sizes(self.spec)}))

    def block_offset(self, blocks: str) -> str:
        """C++ offset of the current (b, hq, i, j) tile's entry in the block-class table ``blocks``
        [Bm, Hm, nQ, nK] (Bm = B, Hm = Hq only when the mask reads b, h)."""
        dep_b, dep_h = self.program.mods.mask_depends()
        index = (ir.b if dep_b else 0, ir.hq if dep_h else 0, ir.i, ir.j)
        return cexpr(AM.rowmajor(index, self.tensors[blocks].shape), self.consts)

    def _staging_bytes(self, role: str) -> int:
        level = self.target.level(self.target.placement[role])
        best = 0
        for stmt in _stmts(self.kernel.body):
            if isinstance(stmt, MatMul):
                a, b = self.buffers[stmt.a], self.buffers[stmt.b]
                m, k = (self.dims(a)[1], self.dims(a)[0]) if stmt.trans_a else self.dims(a)
                n = self.dims(b)[0] if stmt.trans_b else self.dims(b)[1]
                n = min(n, chunk_of(stmt)) if chunk_of(stmt) else n  # a chunked product loads a chunk's columns
                rows, cols = (m, min(k, self.step)) if role == "left" else (min(k, self.step), n)
                raw = -(-rows // 16) * 16 * -(-cols // 16) * 16 * dtypes.itemsize(a.dtype)
                best = max(best, -(-raw // int(level.alignment.value)) * int(level.alignment.value) * 2)
        if best and not self.chunked:  # ZeroAcc needs a 16-wide zero tile of any accumulator's rows/cols
            for name, buf in self.buffers.items():
                if buf.scope == self.target.placement["result"]:
                    m, n = self.dims(buf)
                    best = max(best, -(-(m if role == "left" else n) // 16) * 16 * 16 * 2 * 2)
        return best

    # GM addressing: (offset expression, row pitch expression) of an access's first element
    def gm_address(self, access: Access, row_shift: str = "0LL") -> tuple[str, str]:
        t = self.tensors[access.tensor]
        idx = [cexpr(x, self.consts) for x in access.index]
        if t.kind == "handoff":
            cols = int(evaluate(t.shape[-1], self.env))
            return f"(({idx[0]} + {row_shift}) * {cols}LL)", f"{cols}LL"
        shape = [cexpr(s, self.consts) for s in t.shape]
        if len(t.shape) == 3:
            b, h, s = idx
            _, H, S = shape
            return f"((({b} * {H} + {h}) * {S}) + {s} + {row_shift})", "1LL"
        b, h, s, d = idx
        _, H, S, D = shape
        s = f"({s} + {row_shift})"
        if t.layout == "BSND":
            return f"(((({b} * {S} + {s}) * {H} + {h}) * {D}) + {d})", f"({H} * {D})"
        return f"(((({b} * {H} + {h}) * {S} + {s}) * {D}) + {d})", D

    def row_ids(self, stmt, access: Access, row_shift: str = "0LL") -> str:
        """C++ GlobalTensor of the sequence ids of the access's first row on (``Load.rows`` /
        ``Store.rows``: a packed batch's int32 [S] ids, DESIGN §3), or "" when unguarded."""
        if not stmt.rows:
            return ""
        start = cexpr(access.index[len(access.index) - len(access.tile)], self.consts)
        return f"g_{stmt.rows}[{start} + {row_shift}]"

    def valid_rows(self, access: Access, row_shift: str, rows: int) -> str:
        t = self.tensors[access.tensor]
        ntile = len(access.tile)
        start = cexpr(access.index[len(access.index) - ntile], self.consts)
        if t.kind == "handoff":
            extent = str(int(evaluate(t.shape[0], self.env))) + "LL"
        else:
            extent = cexpr(t.shape[len(t.shape) - ntile], self.consts)
        return f"tilegen::Clip({extent} - ({start} + {row_shift}), 0LL, {rows}LL)"


def _scratch_bytes(ctype: str, elems: int) -> int:
    """UB bytes of a scratch view of ``elems`` elements (bytes for uint8_t, else 4-byte words), 32-byte aligned."""
    return -(-elems * (1 if ctype == "uint8_t" else 4) // 32) * 32


def reduce_tmp_elems(count: int, itemsize: int, is_max: bool) -> int:
    """Elements of the ``sharedTmpBuffer`` that ReduceMax / ReduceSum (count form, no index) need for
    ``count`` elements of ``itemsize`` bytes on A2: the first round's outputs (2 per 256-byte repeat for
    ReduceMax, which writes value and index; 1 for ReduceSum) rounded up to a 32-byte block. Source:
    asc-devkit@0da921b9 docs/zh/api/SIMD-API/基础API/Memory矢量计算/归约计算/ReduceMax.md and ReduceSum.md
    ("sharedTmpBuffer所需空间设置"); ReduceSum's count form on A2 (方式一) does not use it, the formula
    is kept as its upper bound."""
    per_repeat, per_block = 256 // itemsize, 32 // itemsize
    repeats = max(1, -(-count // per_repeat))
    out = repeats * (2 if is_max else 1)
    return -(-out // per_block) * per_block


def _single(buf: Buffer) -> Buffer:
    from dataclasses import replace

    return replace(buf, stages=1)


def _stmts(body):
    for s in body:
        if isinstance(s, Loop):
            yield from _stmts(s.body)
        else:
            yield s


def _live_spans(kernel: Kernel, level: str):
    from tilegen.models.footprint import live_intervals

    intervals = live_intervals(kernel)
    return [(b, *intervals[b.name]) for b in kernel.buffers if b.scope == level and b.name in intervals]


def _unit_of_stmt(stmt, buffers: dict[str, Buffer], tensors) -> str:
    return stmt_unit(stmt, {name: b.unit for name, b in buffers.items()})


def lower_kernel(
    program: Program, kernel: Kernel, target: Target, spec: AttentionSpec, name: str, handoffs: dict, uses=None, done_flag: int = 0
) -> KernelPlan:
    """One kernel's plan; appends its descriptor-field obligations (:class:`FieldUse`) to ``uses``.
    ``done_flag``: the cross-core flag id of the owned tiles' done flag (@signal_done)."""
    lo = _Lower(program, kernel, target, spec, handoffs, uses)
    lo.done_flag = done_flag
    aic, aiv = lo.side("cube"), lo.side("vector")
    aic.chunked = lo.chunked
    grid = grid_loops(kernel)
    inner = grid[-1].body if grid else kernel.body
    counters: dict[str, set] = {"cube": set(), "vector": set()}
    split = stream_split(kernel) if kernel.has(Stream) else None
    if kernel.has(Stream) and split is None:
        raise TargetError(f"kernel {kernel.name} is marked @stream but its program body is not one pipelined loop between plain statements")
    if split is None:
        aic.ops = _lower_body(lo, inner, "cube", counters)
        aiv.ops = _lower_body(lo, inner, "vector", counters)
    else:
        programs = tuple((str(l.var), cexpr(l.stop, lo.consts)) for l in grid)
        aic.ops, aiv.ops = (_stream_parts(lo, split, unit, counters, programs, deal_of(kernel)) for unit in ("cube", "vector"))
    done = [st for st, _ in walk(inner) if isinstance(st, Store) and st.has(SignalDone)]
    if done:
        if any(_unit_of_stmt(st, lo.buffers, lo.tensors) != "cube" for st in done):
            raise TargetError("@signal_done on a vector store: only the cube's owned-tile stores signal the vector")
        # each program instance whose loops ran, after them: the cube's owned-tile stores have landed (FIX runs
        # in order). The AIV waits for it only where it loads the tiles (zero_unless > 0) and the AIC sets it
        # under the same test: a run of empty programs, with nothing else to pace the AIC, would otherwise
        # pass the flag's 15 pending sets (NPU架构版本2201.md: a reverse sync every 15, or the cores hang).
        waiting = [st for st, _ in walk(inner) if isinstance(st, Load) and st.has(WaitDone)]
        if len(waiting) != 1:
            raise TargetError(f"kernel {kernel.name}: @signal_done needs exactly one @wait_done load, found {len(waiting)}")
        zero = waiting[0].get(ZeroUnless)
        cond = cexpr(zero.trips, lo.consts) if zero is not None else ""
        # after the program's last stage: in a stream, the program's closing ops
        signal = O.DoneSignal(flag=done_flag, cond=cond)
        if split is not None:
            aic.ops[0] = dataclasses.replace(aic.ops[0], close=aic.ops[0].close + (signal,))
        else:
            aic.ops.append(signal)
    for unit, side in (("cube", aic), ("vector", aiv)):
        side.counters = sorted(counters[unit])
        # a sender waits at the end for the free flags still pending: one per slot it used
        side.drains = [(c, handoffs[c[2:]]["free"], handoffs[c[2:]]["slots"]) for c in side.counters if c.startswith("n_")]
    aiv.frees = sorted(lo.frees)
    aiv.prologue = lo.mod_table_ops()
    used = set()
    for expr in [l.stop for l in grid] + [s for st in _stmts(kernel.body) for s in st.exprs()]:
        used |= {str(s) for s in sympy.sympify(expr).free_symbols}
    for t in program.tensors:
        for d in t.shape:
            used |= {str(s) for s in sympy.sympify(d).free_symbols}
    shape_names = [n for n in SHAPE_NAMES if n in used] + [n for n in ("Sq", "Sk") if n not in used]
    return KernelPlan(
        name=name,
        source_kernel=kernel.name,
        deal=deal_of(kernel),
        stream=split is not None,
        grid=[(str(l.var), cexpr(l.stop, lo.consts)) for l in grid],
        aic=aic,
        aiv=aiv,
        shape_names=list(dict.fromkeys(shape_names)),
    )


def _stream_parts(lo: _Lower, split, unit: str, counters, grid: tuple[tuple[str, str], ...], deal: str) -> list[O.Op]:
    """``unit``'s ops of a streamed kernel (@stream; :class:`tilegen.models.stages.StreamSplit`):
    one :class:`~tilegen.backends.ascendc.ops.Stream` holding the pipelined loop, the program's opening ops
    of each stream (``open_a`` before the earlier stage of its first pair, ``open_b`` before the later
    stage of its first pair), its closing ops (``close``: after the later stage of its last pair; the
    waits the loop leaves for after it come first) and the buffers both streams use per program
    (``cross``: a copy per program in flight, chosen by the program's ordinal in the stream); ``grid`` and
    ``deal``: the kernel's grid loops (variable, extent) and how its cores take their programs."""
    (open_a, _), (open_b, _, closing) = split.early[unit], split.late[unit]
    loop_ops = _lower_body(lo, (split.loop,), unit, counters)
    open_a_ops, open_b_ops = _lower_body(lo, open_a, unit, counters), _lower_body(lo, open_b, unit, counters)
    if loop_ops and isinstance(loop_ops[0], O.Loop):  # the unit runs the loop in one stage: all of it in stream a
        plain = loop_ops[0]
        stage = min(g for st, g in zip(split.loop.body, stages_of(split.loop)) if _unit_of_stmt(st, lo.buffers, lo.tensors) == unit)
        loop_ops[0] = O.PipelinedLoop(lookahead=lookahead_of(split.loop), head=0, hoisted=(), stages=(stage, stage + 1),
                                      var=plain.var, start=plain.start, stop=plain.stop, note=plain.note, carry=(),
                                      skip=plain.skip, stage0=plain.body, stage1=())
    if not loop_ops or not isinstance(loop_ops[0], O.PipelinedLoop):
        raise TargetError(f"the {unit} of {lo.kernel.name} does not run the streamed loop (@stream)")
    cross = split.cross[unit]

    def own_copy(op):  # the program's copy is chosen by its ordinal (the stream's opening), not by the load
        return dataclasses.replace(op, stages=1) if isinstance(op, O.L1Load) and op.dst in cross else op

    head = split.head
    return [O.Stream(
        ploop=loop_ops[0],
        head=O.StreamHead(str(head.var), cexpr(head.start, lo.consts), cexpr(head.stop, lo.consts)) if head else None,
        open_a=tuple(own_copy(op) for op in open_a_ops),
        open_b=tuple(own_copy(op) for op in open_b_ops),
        close=tuple(loop_ops[1:] + _lower_body(lo, closing, unit, counters)),
        cross=tuple(O.Cross(b, CTYPE[lo.buffers[b].dtype], lo.buffers[b].stages) for b in sorted(split.cross[unit])),
        grid=grid,
        deal=deal,
    )]


def _held(lo: _Lower, body, unit: str) -> list[str]:
    """The tiles of ``unit`` that stores of ``body`` with @wait_at_rewrite leave in flight, sorted."""
    return sorted({s.src for s in body if isinstance(s, Store) and s.has(WaitAtRewrite) and lo.buffers[s.src].unit == unit})


def _wait_op(lo: _Lower, buf: str) -> O.Op:
    """The wait for a copy issued with @wait_at_read: an L1 tile's own MTE2 -> MTE1 event
    (WaitLoaded), a UB tile's MTE2 -> V (WaitReceived)."""
    cls = O.WaitLoaded if lo.buffers[buf].unit == "cube" else O.WaitReceived
    return cls(buf=buf, ctype=CTYPE[lo.buffers[buf].dtype])


def _lower_body(lo: _Lower, body, unit: str, counters) -> list[O.Op]:
    ops: list[O.Op] = []
    deferred: list[str] = []  # copies of this body issued with @wait_at_read, not yet waited for
    held = set(_held(lo, body, unit))  # stores waited for before their tile's next writer (@wait_at_rewrite)
    freed = {st.dst for st in body if isinstance(st, Load) and st.has(FreeEarly)}
    last_use: dict[str, tuple] = {}  # a @free_early tile -> (statement, its ops' span) of its last access
    for stmt in body:
        start = len(ops)
        for buf in [b for b in deferred if b in reads_in(stmt)]:
            ops.append(_wait_op(lo, buf))  # just before the tile's first reader
            deferred.remove(buf)
        rewritten = sorted(held & writes_in(stmt))
        if rewritten:  # the store of this tile (this iteration's, or the last one's) has read it
            ops.append(O.WaitStored(bufs=tuple(rewritten)))
        if isinstance(stmt, Loop):
            op = _pipelined_loop(lo, stmt, unit, counters) if stages_of(stmt) else None
            if op is None:
                inner = _lower_body(lo, stmt.body, unit, counters)
                if inner:
                    # both units skip the same empty tiles (the host's block table)
                    skip = f"g_{stmt.blocks}.GetValue({lo.block_offset(stmt.blocks)}) == 0.0f" if stmt.blocks else ""
                    op = O.Loop(var=str(stmt.var), start=cexpr(stmt.start, lo.consts), stop=cexpr(stmt.stop, lo.consts),
                                note=stmt.note, body=tuple(inner), skip=skip)
            if op is not None:
                ops.append(op)
                tail = _held(lo, stmt.body, unit)
                if tail:  # the last iteration's stores, before anything after the loop
                    ops.append(O.WaitStored(bufs=tuple(tail)))
            last_use.update({b: (stmt, start, len(ops)) for b in freed & accessed((stmt,))})
            continue
        op = _lower_stmt(lo, stmt, unit, counters)
        if isinstance(op, O.Reduce) and op.fold:
            # @fold: the fold (the last read of src), then the reduction of the fold alone
            ops.append(O.Fold(dst=op.dst, src=op.src, rows=op.rows, cols=op.cols, cpad=op.cpad, is_max=op.is_max, fold=op.fold))
            op = dataclasses.replace(op, src="")
        if op is not None:
            if isinstance(op, (O.FixStore, O.C2VSend)) and ops and isinstance(ops[-1], O.Matmul) and ops[-1].n_chunk:
                # a chunked product and its store are one MatmulStore (the verifier: the store is next)
                op = dataclasses.replace(op, product=ops.pop())
                lo.need("FixpipeParamsV220_nSize", min(op.product.n_chunk, op.cols), f"the chunked store of {op.src}")
            # @wait_at_read: an L1 copy (wait_at_first_read) or a UB hand-off (receive_early) waited
            # for at the tile's first reader
            if isinstance(op, (O.L1Load, O.C2VRecv)) and stmt.has(WaitAtRead):
                op = dataclasses.replace(op, defer=True)
                deferred.append(stmt.dst)
            ops.append(op)
        last_use.update({b: (stmt, start, len(ops)) for b in freed & accessed((stmt,))})
    ops.extend(_wait_op(lo, buf) for buf in deferred)  # no reader in the body: wait at its end
    # @free_early: the tile's event is raised right after the ops of its last access in this body (the
    # stage); of a folded row reduction of the tile, right after the fold (its reduce step reads the fold)
    places = []
    for op in [o for o in ops if isinstance(o, O.C2VRecv) and o.free_event]:
        stmt, start, end = last_use[op.buf]
        at = end
        if isinstance(stmt, RowReduce) and fold_of(stmt) and stmt.src == op.buf:
            at = next(n for n in range(start, end) if isinstance(ops[n], O.Fold)) + 1
        if any(isinstance(o, O.WaitReceived) and o.buf == op.buf for o in ops[at:]):
            at = len(ops)  # a copy of the tile still waited for after it: the event after that wait
        places.append((at, O.FreeMte2(buf=op.buf, event=op.free_event)))
        lo.frees.add(op.free_event)
    for at, free in sorted(places, key=lambda p: -p[0]):
        ops.insert(at, free)
    if any(isinstance(o, O.Matmul) and o.n_chunk for o in ops):
        raise TargetError(f"a chunked product of {lo.kernel.name} is not stored by the statement after it (@n_chunk)")
    return ops


def _pipelined_loop(lo: _Lower, loop: Loop, unit: str, counters) -> O.PipelinedLoop | None:
    """A loop with ``@pipelined`` stages whose statements on ``unit`` fall in two stages (the cube's 0 and 1,
    the vector's 1 and 2): a :class:`~tilegen.backends.ascendc.ops.PipelinedLoop` (expanded into its
    prologue, steady state and epilogue by :func:`tilegen.backends.ascendc.ops.expand`; a tile the block
    table marks empty skips both its stages); None where the unit runs it plainly.
    ``carry``: the multi-buffered buffers the earlier stage writes and the later one reads; the later
    stage of iteration j reads them through a ring of lookahead + 1 views that the earlier stage of j
    fills at j mod (lookahead + 1) (a load into an L1 tile switches the view itself; any other first
    writer gets a :class:`~tilegen.backends.ascendc.ops.Rotate` before it). ``hoisted``: the later
    stage's receives with ``@hoist``, issued between the earlier stage's first receive (``head`` ops)
    and its rest.

    Raises:
        TargetError: a carried buffer has fewer than lookahead + 1 copies, a hand-off the earlier stage
            sends fewer than lookahead + 1 slots, or a hoisted receive has no receive to follow.
    """
    stages = stages_of(loop)
    mine = sorted({g for s, g in zip(loop.body, stages) if _unit_of_stmt(s, lo.buffers, lo.tensors) == unit})
    if len(mine) != 2:
        return None
    parts = [tuple(s for s, g in zip(loop.body, stages) if g == stage) for stage in mine]
    carry = sorted(carried(parts[0], parts[1], {b for b, buf in lo.buffers.items() if buf.stages > 1}))
    stage0 = _lower_body(lo, parts[0], unit, counters)
    rotated = {op.dst for op in stage0 if isinstance(op, O.L1Load) and op.stages > 1}
    for name in [b for b in carry if b not in rotated]:
        first = next(n for n, op in enumerate(stage0) if name in op.buffers())
        stage0.insert(first, O.Rotate(buf=name, stages=lo.buffers[name].stages))
    stage1 = [op.renamed({b: f"{b}_p" for b in carry}) for op in _lower_body(lo, parts[1], unit, counters)]
    ahead = lookahead_of(loop)
    short = [b for b in carry if lo.buffers[b].stages < ahead + 1]
    if short:
        raise TargetError(f"the {unit}'s stage {mine[0]} runs {ahead} tiles ahead in {lo.kernel.name}, so {short[0]} needs {ahead + 1} copies, "
                          f"it has {lo.buffers[short[0]].stages} (@pipelined lookahead, Buffer.stages)")
    sent = {st.dst.tensor for st in parts[0]
            if isinstance(st, Store) and st.dst.tensor in lo.handoffs and _unit_of_stmt(st, lo.buffers, lo.tensors) == unit}
    few = sorted(t for t in sent if lo.handoffs[t]["slots"] < ahead + 1)
    if ahead > 1 and few:
        raise TargetError(f"the {unit}'s stage {mine[0]} runs {ahead} tiles ahead in {lo.kernel.name}, so hand-off {few[0]} needs "
                          f"{ahead + 1} GM slots, it has {lo.handoffs[few[0]]['slots']} (@pipelined lookahead, @handoff_slots)")
    # @hoist: the later stage's receive of tile j goes right after the earlier stage's first receive
    # (of tile j + lookahead), before the rest of that stage's work
    hoist = {st.dst for st in parts[1] if isinstance(st, Load) and st.has(Hoist)}
    hoisted = [op for op in stage1 if isinstance(op, O.C2VRecv) and op.buf in hoist]
    head = 0
    if hoisted:
        recv = [n for n, op in enumerate(stage0) if isinstance(op, O.C2VRecv)]
        if ahead < 2 or not recv or any(not isinstance(op, O.Rotate) for op in stage0[:recv[0]]):
            raise TargetError(f"the hoisted receive of {hoisted[0].buf} in {lo.kernel.name} needs a lookahead of 2 and a receive "
                              "that opens the earlier stage (@hoist)")
        head = recv[0] + 1
        stage1 = [op for op in stage1 if op not in hoisted]
    return O.PipelinedLoop(
        lookahead=ahead,
        head=head,
        hoisted=tuple(hoisted),
        stages=(mine[0], mine[1]),
        var=str(loop.var),
        start=cexpr(loop.start, lo.consts),
        stop=cexpr(loop.stop, lo.consts),
        note=loop.note,
        carry=tuple(O.Carry(b, CTYPE[lo.buffers[b].dtype]) for b in carry),
        # both stages of an empty tile are skipped (the block table), on both units alike
        skip=f"g_{loop.blocks}.GetValue({lo.block_offset(loop.blocks)}) == 0.0f" if loop.blocks else "",
        stage0=tuple(stage0),
        stage1=tuple(stage1),
    )


def _handoff_fields(lo: _Lower, handoff: str, counter: str, offset: str) -> dict:
    """The slot and flag fields of a send or receive through ``handoff``: ``counter`` counts its tiles
    on this side, the n-th goes to slot n mod slots (``address``: its first element)."""
    h = lo.handoffs[handoff]
    address = offset if h["slots"] == 1 else f"({counter}++ % {h['slots']}LL) * {h['slot_elems']}LL + {offset}"
    return {"ready": h["ready"], "free": h["free"], "slots": h["slots"], "counter": counter, "address": address}


def _lower_stmt(lo: _Lower, stmt, unit: str, counters) -> O.Op | None:
    bufs, tensors = lo.buffers, lo.tensors
    handoff_tensor = None
    if isinstance(stmt, (Load, Store)):
        acc = stmt.src if isinstance(stmt, Load) else stmt.dst
        if tensors[acc.tensor].kind == "handoff":
            handoff_tensor = acc.tensor
    stmt_unit = _unit_of_stmt(stmt, bufs, tensors)
    if handoff_tensor is None and stmt_unit != unit:
        return None
    if handoff_tensor is not None and stmt_unit != unit:
        return None
    if unit == "cube":
        return _cube_op(lo, stmt, handoff_tensor, counters)
    return _vector_op(lo, stmt, handoff_tensor, counters)


def _cube_op(lo: _Lower, stmt, handoff: str | None, counters) -> O.Op:
    bufs = lo.buffers
    if isinstance(stmt, Load):
        buf = bufs[stmt.dst]
        rows, cols = lo.dims(buf)
        off, pitch = lo.gm_address(stmt.src)
        pitch_e = lo.pitch_expr(stmt.src)
        # one ND->NZ burst per tile while the row pitch fits srcDValue, else one per row (nValue = 1)
        rowwise = not lo.fits("Nd2NzParams_srcDValue", pitch_e)
        rpad, cpad16 = -(-rows // 16) * 16, -(-cols // 16) * 16
        what = f"the load of {stmt.src.tensor} into {buf.name}"
        lo.need("Nd2NzParams_nValue", 1 if rowwise else rows, what)
        lo.need("Nd2NzParams_dValue", cols, what)
        lo.need("Nd2NzParams_srcDValue", cols if rowwise else pitch_e, f"the row pitch of {what}")
        lo.need("Nd2NzParams_dstNzC0Stride", rpad, what)
        if stmt.pad is not None or stmt.rows:
            lo.need("InitConstValueParams_blockNum", rpad * cpad16 * dtypes.itemsize(buf.dtype) // 32, f"the zero tail of {buf.name}")
        if handoff:
            fields_ = _handoff_fields(lo, handoff, f"r_{handoff}", "0")
            if fields_["slots"] > 1:
                counters["cube"].add(f"r_{handoff}")
            return O.V2CRecv(dst=buf.name, ctype=CTYPE[buf.dtype], gm=f"g_{stmt.src.tensor}", rows=rows, cols=cols, rowwise=rowwise,
                             wait=waits(stmt), **fields_)
        # defer (@wait_at_read) is set by _lower_body, which places the wait
        return O.L1Load(ids=lo.row_ids(stmt, stmt.src), rowwise=rowwise, dst=buf.name, stages=buf.stages, ctype=CTYPE[buf.dtype],
                        gm=f"g_{stmt.src.tensor}", offset=off, valid=lo.valid_rows(stmt.src, "0LL", rows), rows=rows, cols=cols,
                        pitch=pitch, zero_tail=stmt.pad is not None, l2=lo.l2_resident(stmt))
    if isinstance(stmt, Store):
        buf = bufs[stmt.src]
        rows, cols = lo.dims(buf)
        off, pitch = lo.gm_address(stmt.dst)
        what = f"the store of {buf.name} into {stmt.dst.tensor}"
        lo.need("FixpipeParamsV220_nSize", cols, what)
        lo.need("FixpipeParamsV220_mSize", rows, what)
        lo.need("FixpipeParamsV220_srcStride", -(-rows // 16) * 16, what)
        lo.need("FixpipeParamsV220_dstStride", lo.pitch_expr(stmt.dst), f"the row pitch of {what}")
        if lo.tensors[stmt.dst.tensor].dtype != "fp32":
            raise TargetError(f"store of cube buffer {buf.name} into {lo.tensors[stmt.dst.tensor].dtype} tensor: Fixpipe casts are not lowered")
        if stmt.rows:
            raise TargetError(f"store of cube buffer {buf.name} into {stmt.dst.tensor} with a packed-batch row guard: not lowered (stores of guarded rows go through the AIV)")
        if handoff:
            counters["cube"].add(f"n_{handoff}")
            return O.C2VSend(src=buf.name, gm=f"g_{stmt.dst.tensor}", m=rows, cols=cols, atomic=stmt.accumulate, signal=signals(stmt),
                             **_handoff_fields(lo, handoff, f"n_{handoff}", "0"))
        atomic: bool | str = stmt.accumulate
        if stmt.has(FirstPlain):  # the program's first store writes its tile, the later ones add (@first_plain)
            counters["cube"].add(f"w_{stmt.dst.tensor}")
            atomic = f"tilegen::AddAfterFirst(w_{stmt.dst.tensor}, pid)"
        return O.FixStore(src=buf.name, gm=f"g_{stmt.dst.tensor}", offset=off, m=rows, valid=lo.valid_rows(stmt.dst, "0LL", rows),
                          cols=cols, pitch=pitch, atomic=atomic, l2=lo.l2_resident(stmt))
    if isinstance(stmt, MatMul):
        a, b, c = bufs[stmt.a], bufs[stmt.b], bufs[stmt.dst]
        m, k = (lo.dims(a)[1], lo.dims(a)[0]) if stmt.trans_a else lo.dims(a)
        n = lo.dims(b)[0] if stmt.trans_b else lo.dims(b)[1]
        if stmt.alpha != 1.0:
            raise TargetError("a matmul kept its scale: run the split-matmul-scale lowering first")
        if a.dtype not in ("fp16", "bf16"):
            raise TargetError(f"the cube path takes fp16 or bf16 operands, {a.name} is {a.dtype}")
        _matmul_fields(lo, m, n, k, stmt.trans_a, stmt.trans_b, f"the matmul {c.name} = {a.name} x {b.name}", chunk_of(stmt))
        return O.Matmul(n_chunk=chunk_of(stmt), c=c.name, a=a.name, b=b.name, ctype=CTYPE[a.dtype], m=m, n=n, k=k,
                        trans_a=stmt.trans_a, trans_b=stmt.trans_b, accumulate=stmt.accumulate)
    if isinstance(stmt, Fill):
        buf = bufs[stmt.dst]
        if stmt.value != 0:
            raise TargetError(f"cube buffer {buf.name} filled with {stmt.value}; only zero fills are lowered")
        m, n = lo.dims(buf)
        what = f"the zero fill of {buf.name}"
        lo.need("InitConstValueParams_blockNum", -(-max(m, n) // 16), what)
        lo.need("MmadParams_m", m, what)
        lo.need("MmadParams_n", n, what)
        return O.ZeroAcc(c=buf.name, m=m, n=n)
    raise TargetError(f"no cube lowering for {type(stmt).__name__}")


def _matmul_fields(lo: _Lower, m: int, n: int, k: int, trans_a: bool, trans_b: bool, what: str, n_chunk: int = 0) -> None:
    """The largest LoadData2DParams and MmadParams values MatmulTile (tilegen_runtime.h) writes for an
    m x k by k x n product contracted in steps of k_step: the last step starts at k0 = k0max; with
    ``n_chunk`` (MatmulStore) the columns come in chunks of that width, the last from n0max."""
    step = lo.step
    m1, n1, k16 = -(-m // 16), -(-n // 16), -(-k // 16)
    nc = min(n_chunk, n) if n_chunk else n
    n0max16 = (n - 1) // nc * nc // 16  # first fractal column of the last chunk
    k0max = (k - 1) // step * step
    kc_max = min(step, k)
    a_rows16 = k16 if trans_a else m1
    b_rows16 = n1 if trans_b else k16
    last_kk = k0max // 16 + -(-(k - k0max) // 16) - 1  # largest k0 / 16 + kk over every step
    lo.need("LoadData2DParams_repeatTimes", -(-kc_max // 16), f"the L0A load of {what}")
    lo.need("LoadData2DParams_startIndex", (m1 - 1) * a_rows16 + k0max // 16 if trans_a else k0max // 16 * a_rows16 + m1 - 1,
            f"the L0A load of {what}")
    lo.need("LoadData2DParams_srcStride", 1 if trans_a else a_rows16, f"the L0A load of {what}")
    lo.need("LoadData2DParams_repeatTimes", -(-nc // 16), f"the L0B load of {what}")
    lo.need("LoadData2DParams_startIndex", last_kk * b_rows16 + n0max16 if trans_b else last_kk + n0max16 * b_rows16,
            f"the L0B load of {what}")
    lo.need("LoadData2DParams_srcStride", 1 if trans_b else b_rows16, f"the L0B load of {what}")
    lo.need("MmadParams_m", m, what)
    lo.need("MmadParams_n", nc, what)
    lo.need("MmadParams_k", kc_max, what)


def _vector_op(lo: _Lower, stmt, handoff: str | None, counters) -> O.Op:
    bufs = lo.buffers
    if isinstance(stmt, ModOp):
        return _mod_op(lo, stmt)
    if isinstance(stmt, Store) and stmt.src in lo.pgrad_bufs:
        return _pgrad_store(lo, stmt)
    if isinstance(stmt, Store) and stmt.src in lo.class_bufs:
        t = lo.tensors[stmt.dst.tensor]
        return O.ClassStore(gm=f"g_{t.name}", offset=cexpr(AM.rowmajor(stmt.dst.index, t.shape), lo.consts))
    if isinstance(stmt, Load) and not bufs[stmt.dst].shape:  # a 0-d tile (the sink logit sigma_h): one scalar read
        t = lo.tensors[stmt.src.tensor]
        return O.ScalarLoad(buf=stmt.dst, ctype=CTYPE[t.dtype], gm=f"g_{t.name}", offset=cexpr(AM.rowmajor(stmt.src.index, t.shape), lo.consts))
    if isinstance(stmt, (Load, Store)):
        name = stmt.dst if isinstance(stmt, Load) else stmt.src
        access = stmt.src if isinstance(stmt, Load) else stmt.dst
        buf = bufs[name]
        half = lo.half(buf)
        dims = lo.dims(buf)
        shift = f"({half}LL * sub)"
        off, pitch = lo.gm_address(access, shift)
        item = dtypes.itemsize(buf.dtype)
        what = f"the load of {access.tensor} into {buf.name}" if isinstance(stmt, Load) else f"the store of {buf.name} into {access.tensor}"
        if len(dims) == 2:
            lo.need("DataCopyExtParams_blockCount", half, what)
            lo.need("DataCopyExtParams_blockLen", dims[-1] * item, what)
            gap = "DataCopyExtParams_srcStride" if isinstance(stmt, Load) else "DataCopyExtParams_dstStride"
            lo.need(gap, (lo.pitch_expr(access) - dims[-1]) * item, f"the row gap of {what}")
            if isinstance(stmt, Load) and (stmt.pad is not None or stmt.rows):
                lo.need("VectorOp_count", half * lo.cpad(buf), what)
        else:
            lo.need("DataCopyExtParams_blockLen", half * item, what)
        tile = {"ctype": CTYPE[buf.dtype], "buf": buf.name, "gm": f"g_{access.tensor}", "pitch": pitch, "rows": half,
                "cols": dims[-1] if len(dims) == 2 else 1, "cpad": lo.cpad(buf) if len(dims) == 2 else 1, "vector": len(dims) == 1}
        ids = "" if handoff else lo.row_ids(stmt, access, shift)
        if ids and tile["vector"] and isinstance(stmt, Store) and half > lo.scratch_cols():
            raise TargetError(f"the guarded store of {buf.name} stages {half} elements in sc_col, which holds {lo.scratch_cols()}")
        if isinstance(stmt, Load):
            # zeros where the tile's writer ran no iteration (@zero_unless)
            zero = stmt.get(ZeroUnless)
            if (zero is not None or stmt.has(WaitDone)) and (handoff or ids):
                raise TargetError(f"the load of {stmt.src.tensor} into {buf.name}: zero_unless and wait_done are lowered for a plain UB load only")
            if handoff:
                fields_ = _handoff_fields(lo, handoff, f"r_{handoff}", off)
                if fields_["slots"] > 1:
                    counters["vector"].add(f"r_{handoff}")
                return O.C2VRecv(**tile, wait=waits(stmt), free_event=f"fr_{buf.name}" if stmt.has(FreeEarly) else "", **fields_)
            return O.UbLoad(**tile, offset=off, valid=lo.valid_rows(access, shift, half), ids=ids, l2=lo.l2_resident(stmt),
                            pad=stmt.pad is not None, pad_value=cfloat(stmt.pad or 0.0),
                            zero_unless=cexpr(zero.trips, lo.consts) if zero is not None else "",
                            wait_done=lo.done_flag if stmt.has(WaitDone) else -1)  # the other unit's done flag first
        if stmt.has(FirstPlain) or stmt.has(SignalDone):
            raise TargetError(f"the vector store into {stmt.dst.tensor}: @first_plain and @signal_done are lowered for the cube's stores only")
        if handoff:
            counters["vector"].add(f"n_{handoff}")
            return O.V2CSend(**tile, atomic=stmt.accumulate, closing=not stmt.has(WaitAtRewrite), signal=signals(stmt),
                             **_handoff_fields(lo, handoff, f"n_{handoff}", off))
        return O.UbStore(**tile, offset=off, valid=lo.valid_rows(access, shift, half), ids=ids, l2=lo.l2_resident(stmt),
                         atomic=stmt.accumulate, closing=not (stmt.has(WaitAtRewrite) or stmt.has(WaitAtNextStore)))
    if isinstance(stmt, Fill):
        buf = bufs[stmt.dst]
        lo.need("VectorOp_count", _count(lo, buf), f"the fill of {buf.name}")
        return O.Fill(buf=buf.name, ctype=CTYPE[buf.dtype], value=cfloat(stmt.value), count=_count(lo, buf))
    if isinstance(stmt, RowReduce):
        src, dst = bufs[stmt.src], bufs[stmt.dst]
        lo.need("VectorOp_count", lo.dims(src)[1], f"the row reduction of {src.name}")
        lo.need("VectorOp_repeatTime", lo.half(src), f"the row reduction of {src.name} (a repeat per row)")
        if fold_of(stmt):
            if lo.dims(src)[1] < 128:
                raise TargetError(f"the folded row reduction of {src.name} needs at least 128 columns, it has {lo.dims(src)[1]}")
            lo.need("VectorOp_repStride", lo.cpad(src) // 8, f"the row pitch of {src.name} in blocks (its fold, a repeat per row)")
        return O.Reduce(dst=dst.name, src=src.name, rows=lo.half(src), cols=lo.dims(src)[1], cpad=lo.cpad(src), is_max=stmt.op == "max",
                        fold=fold_of(stmt) or "")
    if isinstance(stmt, Mask):
        buf = bufs[stmt.src]
        if stmt.src != stmt.dst:
            raise TargetError("mask must be in place on Ascend")
        cpad = lo.cpad(buf)
        if cpad * 4 % 256:
            raise TargetError(f"the mask of {buf.name} needs its columns ({cpad}) to be a multiple of 64 for its 64-lane Compare/Select")
        m = lo.program.mask
        lo.need("VectorOp_count", cpad, f"the mask of {buf.name}")
        # the compared integers: columns col0 + c < Sk + cpad, row bounds clipped to [0, Sk - 1] below
        # and at most Sq - 1 + offset above (offset <= Sk)
        for size in (ir.Sq, ir.Sk):
            lo.need("MaskTile_index", size + cpad, f"the column index of the mask of {buf.name}")
        return O.MaskTile(buf=buf.name, rows=lo.half(buf), cpad=cpad, row0=f"({cexpr(stmt.row0, lo.consts)} + {lo.half(buf)}LL * sub)",
                          col0=cexpr(stmt.col0, lo.consts), off=cexpr(m.offset, lo.consts), left=m.left, right=m.right,
                          cut_only=stmt.has(CutOnly))
    if isinstance(stmt, Elementwise):
        return _elementwise(lo, stmt)
    raise TargetError(f"no vector lowering for {type(stmt).__name__}")


def _mod_op(lo: _Lower, stmt: ModOp) -> O.Op:
    """A ModOp on this AIV's rows of a UB tile: the compiled lines of :mod:`tilegen.backends.ascendc.mods`
    (per tile ``tile``, per row ``body``, rows past Sq left to the window mask, then ``post``)."""
    if stmt.op == "classify":
        return _classify_op(lo, stmt)
    buf = lo.buffers[stmt.args[0]]
    rows, cpad = lo.half(buf), lo.cpad(buf)
    what = f"the {stmt.op} mod of {buf.name}"
    lo.need("VectorOp_count", cpad, what)
    for size in (ir.Sq, ir.Sk):
        lo.need("MaskTile_index", size + cpad, f"the indices of {what}")
    prog = lo.mod_program(stmt)
    if prog.compares:
        AM.check_cpad(cpad, what)
    _span_fields(lo, prog, cpad, what)
    tile, body, post = list(prog.tile), list(prog.body), []
    if stmt.op in ("dscore", "pgrad") and len(stmt.args) > 1:
        body.insert(0, O.LineRaw(buf=stmt.args[1]))
    elif stmt.op in ("dscore", "pgrad"):
        body.insert(0, O.LineRaw(buf=stmt.args[0]))  # the derivative reads no score: mraw is never read
    if stmt.op == "pgrad":
        width = lo.grad_width(stmt.term)
        lo.need("VectorOp_count", width, what)
        tile = [O.LineDecl(name="mtq", ctype="int64_t", value=cexpr(stmt.row0, lo.consts)),
                O.LineDecl(name="mtk", ctype="int64_t", value=cexpr(stmt.col0, lo.consts)), O.LineZero(n=width)] + tile
        post.append(O.LineToStore())
    return O.Mod(note=f"{stmt.op} mod of {buf.name}", buf=buf.name, rows=rows, cpad=cpad, row0=f"({cexpr(stmt.row0, lo.consts)} + {rows}LL * sub)",
                 col0=cexpr(stmt.col0, lo.consts), tile=tuple(tile), body=tuple(body), post=tuple(post))


def _span_fields(lo: _Lower, prog: AM.Compiled, cpad: int, what: str) -> None:
    """The descriptor fields of a compiled program's span loads (up to cpad elements by DataCopyPad)."""
    if any(isinstance(t, O.LineVec) and t.op == "span" for t in prog.tile + prog.body):
        lo.need("DataCopyExtParams_blockLen", cpad * 4, f"the spans of {what}")


def _classify_op(lo: _Lower, stmt: ModOp) -> O.Classify:
    """The block class of one (Q tile, K/V tile) pair on AIV 0 of the core: per query row of the tile a
    0/1 row of the mask mod, the window and the extents, summed with ReduceSum; the class (0 none
    visible, 2 all Br x Bc visible, else 1) goes to the block table with the kernel's Store."""
    br, bc = (int(evaluate(x, lo.env)) for x in (ir.Br, ir.Bc))
    cpad = -(-bc * 4 // 32) * 32 // 4
    what = "the block classification"
    AM.check_cpad(cpad, what)
    lo.need("VectorOp_count", cpad, what)
    for size in (ir.Sq, ir.Sk):
        lo.need("MaskTile_index", size + cpad, f"the indices of {what}")
    m = lo.program.mask
    prog = lo.mod_program(stmt)
    _span_fields(lo, prog, cpad, what)
    return O.Classify(note=f"{stmt.op} mod", rows=br, cpad=cpad, row0=cexpr(stmt.row0, lo.consts), col0=cexpr(stmt.col0, lo.consts),
                      tile=tuple(prog.tile), body=tuple(prog.body), post=(), blocks=stmt.dst,
                      window=O.ModWindow(cexpr(m.offset, lo.consts), m.left, m.right), cols=bc, full=br * bc)


def _pgrad_store(lo: _Lower, stmt: Store) -> O.ModStore:
    """The store of a tile's gradient window: each AIV writes its own half ([..., 2, W] on Ascend)."""
    t = lo.tensors[stmt.dst.tensor]
    term = next(s.term for s in _stmts(lo.kernel.body) if isinstance(s, ModOp) and s.dst == stmt.src)
    width = lo.grad_width(term)
    tile = cexpr(AM.rowmajor(stmt.dst.index[:4], t.shape[:4]), lo.consts)
    lo.need("DataCopyExtParams_blockLen", width * 4, f"the store of {stmt.src}")
    return O.ModStore(gm=f"g_{t.name}", offset=f"(({tile}) * 2LL + sub) * {width}LL", n=width)


def _count(lo: _Lower, buf: Buffer) -> int:
    dims = lo.dims(buf)
    return lo.half(buf) * lo.cpad(buf) if len(dims) == 2 else lo.half(buf)


def _elementwise(lo: _Lower, stmt: Elementwise) -> O.Elementwise:
    bufs = lo.buffers
    dst = bufs[stmt.dst]
    args = list(stmt.args)
    base = {"dst": dst.name, "count": _count(lo, dst), "rows": lo.half(dst)}
    lo.need("VectorOp_count", _count(lo, dst), f"the {stmt.op} into {dst.name}")
    two_d = len(dst.shape) == 2
    if stmt.op in ("copy", "cast"):
        src = bufs[args[0]]
        if not src.shape and dst.shape:
            if src.dtype != dst.dtype or len(dst.shape) != 1:
                raise TargetError(f"broadcast of the 0-d {src.name} into {dst.name}: only an fp32 row vector of the same dtype is lowered")
            return O.Broadcast(**base, src=src.name)
        if src.dtype == dst.dtype:
            return O.Adds(**base, src=src.name, scalar="0.0f")
        mode = "RoundMode::CAST_NONE" if dtypes.itemsize(src.dtype) < dtypes.itemsize(dst.dtype) else "RoundMode::CAST_RINT"
        return O.Cast(
            **base,
            src=src.name,
            dtype_dst=CTYPE[dst.dtype],
            dtype_src=CTYPE[src.dtype],
            mode=mode,
            cols=lo.dims(dst)[-1] if two_d else lo.half(dst),
            dpad=lo.cpad(dst) if two_d else lo.half(dst),
            spad=lo.cpad(src) if two_d else lo.half(src),
            crows=lo.half(dst) if two_d else 1,
        )
    if stmt.op in ("exp", "log"):
        return O.Unary(**base, fn="Exp" if stmt.op == "exp" else "Ln", src=args[0])
    if stmt.op == "zero_if_neginf":
        return O.ZeroIfNegInf(**base, src=args[0])
    a, b = args
    if isinstance(b, (int, float)) and stmt.op in ("mul", "add", "sub"):
        scalar = float(b) if stmt.op != "sub" else -float(b)
        fn = "Muls" if stmt.op == "mul" else "Adds"
        return O.Scalar(**base, fn=fn, src=a, scalar=cfloat(scalar))
    if isinstance(a, str) and isinstance(b, str):
        A, Bb = bufs[a], bufs[b]
        if two_d and len(Bb.shape) == 1:
            lo.need("VectorOp_repeatTime", lo.half(dst), f"the row broadcast into {dst.name} (a repeat per row)")
            lo.need("VectorOp_repStride", lo.cpad(dst) // 8, f"the row broadcast into {dst.name} (row pitch in blocks)")
            if stmt.op in ("sub", "add"):
                return O.RowsAdd(**base, src=a, vec=b, sign="-1.0f" if stmt.op == "sub" else "1.0f", cpad=lo.cpad(dst))
            if stmt.op == "mul":
                return O.RowsMul(**base, src=a, vec=b, cpad=lo.cpad(dst))
            if stmt.op == "safe_div":
                return O.RowsDiv(**base, src=a, vec=b, cpad=lo.cpad(dst))
        fns = {"add": "Add", "sub": "Sub", "mul": "Mul", "max": "Max"}
        if stmt.op in fns and A.shape == Bb.shape == dst.shape:
            return O.Binary(**base, fn=fns[stmt.op], a=a, b=b)
    raise TargetError(f"no vector lowering for {stmt.op} of {stmt.args}")


# --- programs and files --------------------------------------------------------------------------------


def _c_ident(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", text)


def lower_program(program: Program, target: Target, spec: AttentionSpec, label: str) -> ProgramPlan:
    handoffs = {}
    offset = 0
    ho_list = []
    for t in program.tensors:
        if t.kind != "handoff":
            continue
        rows, cols = (int(evaluate(d, {str(k): v for k, v in program.env})) for d in t.shape)
        size = -(-rows * cols * dtypes.itemsize(t.dtype) // 512) * 512  # a slot, 512 B aligned
        ho_list.append(
            {"name": t.name, "ctype": CTYPE[t.dtype], "rows": rows, "cols": cols, "offset": offset, "elems": rows * cols,
             "slots": slots_of(t), "slot_elems": size // dtypes.itemsize(t.dtype), "ready_id": ready_of(t)}
        )
        handoffs[t.name] = ho_list[-1]
        offset += size * slots_of(t)
    uses: list[FieldUse] = []
    # flag ids (@handoff_slots' ready, set by the pipeline-handoffs pass): -1 is the direction's shared id
    # (FLAG_C2V_READY = 0, FLAG_V2C_READY = 1, slot-free ids from FLAG_FREE_BASE = 2, tilegen_runtime.h);
    # else each hand-off's ready id as the pass chose it, the free ids after the largest
    own = [h["ready_id"] for h in ho_list if h["ready_id"] >= 0]
    free_base = max(own) + 1 if own else None
    for n, h in enumerate(ho_list):
        h["elems"] += h["slot_elems"] * (h["slots"] - 1)  # the GlobalTensor spans every slot
        if h["ready_id"] >= 0:
            h["ready"] = f"{h['ready_id']}"
            h["free"] = f"{free_base + n}"
        else:
            h["ready"] = "tilegen::FLAG_C2V_READY" if handoff_direction(program, h["name"]) == "c2v" else "tilegen::FLAG_V2C_READY"
            h["free"] = f"tilegen::FLAG_FREE_BASE + {n}"
    if ho_list:
        top = free_base + len(ho_list) - 1 if own else 2 + len(ho_list) - 1
        uses.append(FieldUse("CrossCoreSetFlag_flagId", sympy.Integer(top), f"the slot-free flag of hand-off {ho_list[-1]['name']} ({label})"))
    # the done flag of a program's owned tiles (@signal_done -> @wait_done): the id after the hand-offs'
    done_flag = (top + 1) if ho_list else 0
    if any(isinstance(st, Store) and st.has(SignalDone) for k in program.kernels for st, _ in walk(k.body)):
        uses.append(FieldUse("CrossCoreSetFlag_flagId", sympy.Integer(done_flag), f"the done flag of the owned tiles ({label})"))
    consts = {str(k): v for k, v in program.env if str(k) in ("Br", "Bc", "Dqk", "Dv")}
    base_inputs = ("Q", "K", "V") if label == "fwd" else ("Q", "K", "V", "O", "L", "dO")
    tensors = []
    for t in program.tensors:
        if t.kind == "handoff":
            continue
        numel = _host_numel(t, consts)
        zeroed = t.kind == "partial"  # tiles the kernels skip contribute 0
        alloc = _aten_alloc(t, numel, spec, zeroed) if t.kind != "input" else ""
        ident = f"param_{t.name}" if t.kind == "input" and t.name not in base_inputs else t.name
        tensors.append(TensorArg(t.name, CTYPE[t.dtype], numel, t.kind, t.layout, alloc, ident, zeroed,
                                 t.kind in ("output", "partial", "tiles")))
    base = _c_ident(f"tilegen_{spec.name}_{label}")
    # the forward's one kernel is called like its program ("fwd"): no repeated suffix (tilegen_x_fwd)
    kernels = [
        lower_kernel(program, k, target, spec, base if k.name == label else f"{base}_{k.name}", handoffs, uses, done_flag)
        for k in program.kernels
    ]
    tiles = {str(k): v for k, v in program.env if str(k) in ("Br", "Bc")}
    operands = [_OPERANDS[n](spec) for n in base_inputs]
    results = ["O", "L"] if label == "fwd" else ["dQ", "dK", "dV"]
    extras = [t.name for t in tensors if t.kind == "input" and t.name not in base_inputs]
    partials = [t.name for t in tensors if t.kind == "partial"]
    # a kernel with @sync_all runs in the launch before it, after SyncAll<false>(); a launch of
    # several kernels is called like its program (tilegen_x_bwd)
    groups: list[list[tuple[Kernel, KernelPlan]]] = []
    for k, kp in zip(program.kernels, kernels):
        if k.has(SyncAll) and groups:
            groups[-1].append((k, kp))
        else:
            groups.append([(k, kp)])
    several = sum(len(g) > 1 for g in groups) > 1
    launches = []
    for n, g in enumerate(groups):
        name = g[0][1].name if len(g) == 1 else f"{base}_{n}" if several else base
        launches.append(launch_protocol(name, [kp for _, kp in g], [k.name for k, _ in g]))
    return ProgramPlan(label, kernels, tensors, ho_list, max(offset, 512), tiles, program, uses, extras, partials, launches, operands,
                       results + partials)


def launch_protocol(name: str, kernels: list[KernelPlan], names: list[str]) -> dict:
    """How one launch runs ``kernels`` (a kernel with ``@sync_all`` and the ones before it in its
    launch; ``names`` their IR kernel names), as kernels.asc renders it: the launch's function ``name`` and
    ``label``; ``kernels``; and

    - ``steps``: per kernel in order, ``{"kernel", "sync_all"}``: ``sync_all`` when every core of the
      launch must have finished the kernels before it (their GM stores landed) before it starts:
      ``SyncAll<false>()`` (PipeBarrier<PIPE_ALL>, then the AIVs, all AICs and the AIVs again:
      impl/basic_api/dav_c220/kernel_operator_sync_impl.h SyncAllImpl), then the scalar data cache
      written back and dropped (``DataCacheCleanAndInvalid``, ENTIRE_DATA_CACHE), as at a launch's end,
      so that the kernel's ``GetValue`` reads what other cores stored before the barrier (GetValue.md);
    - ``batch_mode``: the launch holds a SyncAll, so it starts only once all its blocks have cores
      (``__schedmode__(1)``, SIMD-BuiltIn关键字.md): a SyncAll cannot then wait on blocks that another
      SyncAll kernel keeps from starting (SyncAll.md 约束说明);
    - ``scoped``: several kernels share the launch's function, each in a block of its own (their local
      names repeat).
    """
    steps = [{"kernel": kp, "sync_all": i > 0} for i, kp in enumerate(kernels)]
    return {"name": name, "kernels": kernels, "label": launch_label(name, names), "steps": steps,
            "batch_mode": any(s["sync_all"] for s in steps), "scoped": len(kernels) > 1}


# the attention operands of the host ops (tilegen_ops.asc): C++ name -> its check (torch argument name,
# ATen dtype, dims, head dim or 0)
_OPERANDS = {
    "Q": lambda spec: {"name": "Q", "arg": "q", "dtype": "kDtype", "dims": 4, "head_dim": spec.head_dim_qk},
    "K": lambda spec: {"name": "K", "arg": "k", "dtype": "kDtype", "dims": 4, "head_dim": spec.head_dim_qk},
    "V": lambda spec: {"name": "V", "arg": "v", "dtype": "kDtype", "dims": 4, "head_dim": spec.head_dim_v},
    "O": lambda spec: {"name": "O", "arg": "o", "dtype": "kDtype", "dims": 4, "head_dim": spec.head_dim_v},
    "L": lambda spec: {"name": "L", "arg": "lse", "dtype": "at::ScalarType::Float", "dims": 3, "head_dim": 0},
    "dO": lambda spec: {"name": "dO", "arg": "do", "dtype": "kDtype", "dims": 4, "head_dim": spec.head_dim_v},
}


def host_features(plans: list[ProgramPlan], spec: AttentionSpec) -> list[str]:
    """The features (templates/ascendc/features/*.jinja) whose hooks the host files of ``spec`` render,
    in order: the Python entry of tilegen_op.py (``raw_entry``, the forward and backward ops as they are,
    when the kernels take inputs beside the attention operands or return partials: the host steps are
    then the caller's; else ``autograd_entry``, an autograd.Function), then ``mods`` and ``sinks``."""
    raw = any(p.extras or p.partials for p in plans)
    return ["raw_entry" if raw else "autograd_entry"] + [f for f, used in (("mods", spec.mods is not None), ("sinks", bool(spec.sinks))) if used]


HOST_HOOKS = ("usage", "entry", "backward_doc", "binding_note")  # the hook points of the host templates


def _host_numel(t, consts: dict) -> str:
    """A tensor's element count as C++ of the sizes that host code can evaluate too (no device helpers):
    a tile count ceil(S / T) as (S + T - 1) / T; a gradient partial has one window per AIV (x 2)."""
    if t.kind not in ("tiles", "partial"):
        return cexpr(t.numel, consts)
    dims = []
    for d in t.shape:
        d = sympy.sympify(d)
        d = d.subs({x: consts[str(x)] for x in d.free_symbols if str(x) in consts})
        if isinstance(d, sympy.ceiling):
            n, q = sympy.fraction(sympy.together(d.args[0]))
            dims.append(f"(({_c(n)} + {_c(q - 1)}) / {_c(q)})")
        else:
            dims.append(cexpr(d, {}))
    text = "(" + " * ".join(dims) + ")"
    return f"(2LL * {text})" if t.kind == "partial" else text


def reduce_partials(program: Program, partials: dict) -> dict:
    """The parameter gradients of a compiled backward program from the Ascend kernels' partials
    ``gpart{k}`` [B, Hq, nQ, nK, 2, W] (one window per AIV): :func:`tilegen.core.mods.param_grads` with
    two windows per tile, reduced in fixed order; deterministic."""
    return M.param_grads(program, partials, windows_per_tile=2)


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates") / "ascendc")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def check_request(spec: AttentionSpec, target: str | Target) -> Target:
    """The loaded ``target`` when this backend can generate ``spec`` for it.

    Raises:
        TargetError: the target is not an Ascend 910B one (generation is for NPU arch 2201); the
            message lists the targets that are.
        SpecError: the spec needs something the backend does not lower (fp32 inputs on the cube, a score
            or mask mod outside the forms of :mod:`tilegen.backends.ascendc.mods`; names the construct).
    """
    from tilegen.core.targets import target_names

    tgt = load_target(target)
    if tgt.kind != "ascend" or not tgt.generate:
        accepted = [n for n in target_names() if (t := load_target(n)).kind == "ascend" and t.generate]
        reason = tgt.generate_refusal or f"{tgt.name} is a {tgt.kind} target"
        raise TargetError(
            f"target = {tgt.name!r} is invalid for the Ascend C backend ({reason}); accepted: {', '.join(accepted)}"
        )
    if spec.dtype not in ("fp16", "bf16"):
        raise SpecError("dtype", spec.dtype, "'fp16' or 'bf16' for the Ascend C backend (its cube path takes 16-bit operands)")
    if spec.mods is not None:
        AM.check(spec.mods)  # a construct the AIV lowering does not emit is refused here, before compiling
    return tgt


def plan_programs(spec: AttentionSpec, target: str | Target = "ascend910b2", dq_strategy: str = "atomic", tile_sizes=None, dkv_strategy: str | None = None):
    """The loaded target and the plans of the forward and backward programs (each with its
    descriptor-field obligations in ``uses``), not yet proven; ``dkv_strategy`` as
    :meth:`tilegen.backends.compiler.Backend.resolve` (None: atomic on the 910B). Raises as
    :func:`check_request`, and SpecError for an unknown strategy."""
    tgt = check_request(spec, target)
    fwd = compile_program(spec, "fwd", BACKEND, tgt, Options(tile_sizes=tile_sizes))
    bwd = compile_program(spec, "bwd", BACKEND, tgt, Options(dq_strategy=dq_strategy, tile_sizes=tile_sizes, dkv_strategy=dkv_strategy))
    return tgt, [BACKEND.lower(fwd, tgt, spec, "fwd"), BACKEND.lower(bwd, tgt, spec, "bwd")]


def _manifest_schedule(plan_: ProgramPlan) -> dict:
    """A program's entry of the manifest's schedule: its tiles, its kernels' symbols (``kernels``) with
    the program's names for them (``phases``, the IR's ``Kernel.name``, same order), and its launches
    (symbol -> the kernels' symbols it runs, SyncAll between)."""
    return {
        "Br": plan_.tiles["Br"], "Bc": plan_.tiles["Bc"], "kernels": [k.name for k in plan_.kernels],
        "phases": [k.name for k in plan_.program.kernels], "launches": {g["name"]: [k.name for k in g["kernels"]] for g in plan_.launches},
    }


def generate(
    spec: AttentionSpec, target: str | Target = "ascend910b2", dq_strategy: str = "atomic", tile_sizes=None, dkv_strategy: str | None = None
) -> Generated:
    """All files of the Ascend C kernel set of ``spec`` for ``target``.

    Every value written into a hardware descriptor is proven in range for the spec's sizes (see
    :data:`FIELDS`); those that depend on a run-time size become the host checks of ``tiling.h``
    (``TilegenRefusal``), which the torch binding and the twin harness apply before a launch.
    ``tile_sizes`` (Br, Bc) forces the tile sizes of both programs (they must fit). ``dkv_strategy``:
    how the backward reduces dK, dV (:data:`tilegen.core.strategies.DKV_STRATEGIES`; None or
    ``"auto"``: ``"atomic"`` on the 910B).

    Raises:
        TargetError: the target is not an Ascend 910B one (generation is for NPU arch 2201).
        SpecError: the spec needs something the backend does not lower (fp32 inputs on the cube), or a
            descriptor field does not fit for its sizes (names the field, the value and the range).
    """
    tgt, plans = plan_programs(spec, target, dq_strategy, tile_sizes, dkv_strategy)
    return BACKEND.render(KernelSet(spec, tgt, dq_strategy, plans))


@dataclass(frozen=True)
class KernelSet:
    """What :meth:`AscendC.render` takes: the forward and backward plans (:meth:`AscendC.lower`) of
    ``spec`` for the loaded ``target`` and the dQ strategy they were compiled with."""

    spec: AttentionSpec
    target: Target
    dq_strategy: str
    plans: list[ProgramPlan]


def render_files(kset: KernelSet) -> Generated:
    """The files of a kernel set (the kernels, host code, build files and manifest.json) from its plans:
    the descriptor fields proven (:func:`prove_fields`), then the templates of ``templates/ascendc``.

    Raises:
        SpecError: a descriptor field does not fit for the spec's sizes (names the field, the value and
            the range)."""
    spec, tgt, dq_strategy, plans = kset.spec, kset.target, kset.dq_strategy, kset.plans
    guards = prove_fields([u for p in plans for u in p.uses], spec)
    env = _env()
    ident = _c_ident(spec.name)
    bsnd = spec.layout == "BSND"
    ctx = {
        "spec": spec,
        "ident": ident,
        "target": tgt,
        "plans": plans,
        "dq_strategy": dq_strategy,
        "ctype": CTYPE[spec.dtype],
        "window": spec.window,
        "scale": spec.softmax_scale,
        "k_step": int(tgt.placement["k_step"].value),
        "guards": guards,
        # where B, N (heads) and S sit in a 4-d tensor of the spec's layout, and the shapes as the docs name them
        "dims": {"B": 0, "N": 2, "S": 1} if bsnd else {"B": 0, "N": 1, "S": 2},
        "shapes": {
            "q": f"B, Sq, Hq, {spec.head_dim_qk}" if bsnd else f"B, Hq, Sq, {spec.head_dim_qk}",
            "k": f"B, Sk, Hkv, {spec.head_dim_qk}" if bsnd else f"B, Hkv, Sk, {spec.head_dim_qk}",
            "q_dims": "B, Sq, Hq, D" if bsnd else "B, Hq, Sq, D",
        },
    }
    ctx["hook"] = hooks(env, host_features(plans, spec), ctx, HOST_HOOKS)
    files = {"tilegen_runtime.h": runtime_header(spec)}
    for plan_ in plans:
        files[f"{plan_.label}_kernels.asc"] = env.get_template("kernels.asc.jinja").render(ctx, plan=plan_)
    for name in ("tiling.h", "tilegen_ops.asc", "CMakeLists.txt", "tilegen_op.py", "twin_main.cpp"):
        files[name] = env.get_template(f"{name}.jinja").render(ctx)
    manifest = {
        "backend": "ascendc",
        "spec": spec.to_dict(),
        "target": tgt.name,
        "arch": tgt.arch,
        "dq_strategy": dq_strategy,
        "dkv_strategy": plans[1].program.attr("dkv_strategy"),
        "schedule": {"forward": _manifest_schedule(plans[0]), "backward": _manifest_schedule(plans[1])},
        "workspace": {p.label: {"per_core_bytes": p.ws_per_core, "handoffs": [h["name"] for h in p.handoffs]} for p in plans},
    }
    return with_manifest(files, manifest)


class AscendC(Backend):
    """The Ascend C backend (910B): the pass list of :mod:`tilegen.passes.ascend`; ``dkv_strategy``
    None or auto lets that list choose (:data:`tilegen.passes.ascend.CHOOSE_DKV`)."""

    name = "ascendc"
    dkv_default = DKV_AUTO
    twin = True
    simulates = True
    gm_handoff = True

    def passes(self, ctx):
        return ascend_passes.passes(ctx)

    def generate(self, spec, target, dq_strategy=None, tile_sizes=None, dkv_strategy=None):
        return generate(spec, target, dq_strategy=dq_strategy or "atomic", tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)

    def lower(self, program: Program, target: Target, spec: AttentionSpec, label: str) -> ProgramPlan:
        """The plan of a compiled program: its kernels' typed ops (:mod:`tilegen.backends.ascendc.ops`),
        buffers, hand-offs and descriptor-field obligations (:func:`lower_program`)."""
        return lower_program(program, target, spec, label)

    def render(self, plan: KernelSet) -> Generated:
        """The files of the kernel set ``plan`` (:func:`render_files`)."""
        return render_files(plan)


BACKEND = AscendC()
