"""The GPU target's measured schedule rows (the ``[triton]`` section of its target file) and the two passes
that use them: select-row, a search at the head of the GPU list that tries the rows, and launch-knobs,
the last pass, which records the schedule in the program.

select-row (when the request asks for the target's rows: ``Options.schedule_rows``): the first of the
target's ``[[triton.schedule]]`` rows for the program, padded head dim, mask, dtype, group and key
length whose trial the rest of the list accepts, else no row (the list's own choice: the tile search
scored by the cost model). Each trial runs the list with the row's options: its tile sizes (clamped to
the sequence rounded up to a power of two, as the tile search skips tiles larger than needed), its
``num_stages`` per kernel phase, the backward's dQ strategy (the row's program), ``group_split`` and
``heavy_first``, a ``bwd-separate`` row's ``dq_tiles``; a row the rest refuses (its tiles overflow a
level, counting what the module allocates: padded head dims, the tiles' dtypes, the row's stages; or its
transposed dq tiles do not apply) is skipped, with the reason. Forced tile sizes replace every row's
(the first row that applies still gives the knobs) and, when they do not fit, are the caller's error.

launch-knobs: each kernel's ``num_warps`` and ``num_stages`` and where they come from
(:class:`LaunchKnobs`, ``@launch_knobs``), and the program's attrs ``schedule_row`` (the index of the row used: :func:`recorded_row`),
``rows_skipped`` ((index, reason) pairs: :func:`recorded_skipped`), ``tiles_source`` and ``group_split_source`` (backward) or
``heavy_first_source`` (forward). The manifest and ``tilegen inspect`` read them from the program.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from tilegen.core.dtypes import DTYPES
from tilegen.core.errors import ScheduleError, SpecError, TargetError
from tilegen.core.exprs import next_pow2
from tilegen.core.annotations import Annotation
from tilegen.core.ir import Bc, Br, Program
from tilegen.core.strategies import DQ_STRATEGIES, DQ_TILES
from tilegen.core.targets import Target
from tilegen.passes.driver import Context, Pass, PassLog, run_passes, stages_key

PROGRAMS = ("fwd", "bwd-atomic", "bwd-separate")
ROW_KEYS = ("program", "head_dim", "causal", "dtype", "group", "min_seq_k", "Br", "Bc", "group_split", "heavy_first", "dq_tiles", "source", "estimate")  # the rest are phases
DEFAULT_STAGES = 2  # copies of a loaded tile the placement counts where no stage count is given
CALLER = "given by the caller"


@dataclass(frozen=True)
class LaunchKnobs(Annotation, key="launch_knobs", on=("Kernel",)):
    """A kernel's launch knobs: warps per program and software-pipelining depth, and where they come from
    (a ``[[triton.schedule]]`` row, ``[triton.default]``, or the caller). Rendering only: every hook
    keeps its default."""

    num_warps: int
    num_stages: int
    source: str


ESTIMATE_MARK = "; an estimate"  # how ScheduleRow.describe marks a row with estimate = true


@dataclass(frozen=True)
class Knobs:
    """Launch knobs of one kernel: warps per program and software-pipelining depth, and where the
    figures come from."""

    num_warps: int
    num_stages: int
    source: str


@dataclass(frozen=True)
class ScheduleRow:
    """One ``[[triton.schedule]]`` row: when it applies, the tile sizes it sets, knobs per kernel phase."""

    program: str
    head_dim: int
    causal: bool | None
    dtype: str | None
    tiles: tuple[int, int] | None
    knobs: dict[str, Knobs]
    source: str
    index: int = -1  # its position among the file's [[triton.schedule]] rows
    group: int | None = None  # applies only when G = Hq / Hkv is this (None: any)
    group_split: int | None = None  # backward: programs sharing the query heads of one KV head
    heavy_first: bool | None = None  # the K/V-tile (backward) or Q-tile (forward) grid axis outermost
    min_seq_k: int | None = None  # applies only when Sk (the key length; a packed batch's total) is at least this
    dq_tiles: str | None = None  # bwd-separate: "transposed" runs the dq kernel on Bc x Br tiles (None: "same")
    estimate: bool = False  # not measured on the target's own device (its source says where)

    def describe(self) -> str:
        """``triton.schedule[N] (bwd-atomic, head_dim 128, Br 64 x Bc 128)`` for reports; a row marked
        ``estimate = true`` ends with :data:`ESTIMATE_MARK` inside the parentheses."""
        tiles = f", Br {self.tiles[0]} x Bc {self.tiles[1]}" if self.tiles else ""
        seq = f", Sk >= {self.min_seq_k}" if self.min_seq_k else ""
        mark = ESTIMATE_MARK if self.estimate else ""
        return f"triton.schedule[{self.index}] ({self.program}, head_dim {self.head_dim}{seq}{tiles}{mark})"

    __str__ = describe  # how the printed program's attrs show it

    def stage_counts(self, default: Knobs) -> dict[str, int]:
        """{kernel phase: num_stages} this row launches with (``"*"``: the phases it leaves to ``default``)."""
        return {"*": default.num_stages, **{phase: k.num_stages for phase, k in self.knobs.items()}}

    def matches(self, program: str, head_dim: int, causal: bool, dtype: str, group: int = 1, seq_k: int = 0) -> bool:
        """Whether the row applies; ``program`` ``"bwd"`` takes a row of either backward program."""
        return (
            (self.program == program or (program == "bwd" and self.program.startswith("bwd-")))
            and self.head_dim == head_dim
            and (self.causal is None or self.causal == causal)
            and (self.dtype is None or self.dtype == dtype)
            and (self.group is None or self.group == group)
            and (self.min_seq_k is None or seq_k >= self.min_seq_k)
        )


@dataclass(frozen=True)
class TritonConfig:
    """The ``[triton]`` section: the dQ strategy, default knobs, and measured schedule rows."""

    dq_strategy: str
    dq_source: str
    default: Knobs
    rows: tuple[ScheduleRow, ...]

    def row(self, program: str, head_dim: int, causal: bool, dtype: str, group: int = 1, seq_k: int = 0) -> ScheduleRow | None:
        """The first row (file order: most specific first) that applies, or None."""
        for row in self.matching(program, head_dim, causal, dtype, group, seq_k):
            return row
        return None

    def matching(self, program: str, head_dim: int, causal: bool, dtype: str, group: int = 1, seq_k: int = 0) -> list[ScheduleRow]:
        """Every row that applies, in file order."""
        return [row for row in self.rows if row.matches(program, head_dim, causal, dtype, group, seq_k)]


def _knobs(data: Any, where: str, source: str) -> Knobs:
    if not isinstance(data, dict):
        raise TargetError(f"{where}: expected {{ num_warps = <int>, num_stages = <int> }}, got {data!r}")
    warps, stages = data.get("num_warps"), data.get("num_stages")
    if warps not in (1, 2, 4, 8, 16):
        raise TargetError(f"{where}.num_warps = {warps!r} is invalid; accepted: 1, 2, 4, 8 or 16")
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= 8:
        raise TargetError(f"{where}.num_stages = {stages!r} is invalid; accepted: an integer from 1 to 8")
    return Knobs(warps, stages, data.get("source", source))


def triton_config(target: Target) -> TritonConfig:
    """Parse the ``[triton]`` section of ``target``'s file (defaults: atomic dQ, 4 warps, 2 stages).

    Raises:
        TargetError: a malformed entry (the message names the key, the value and what is accepted).
    """
    where = target.path
    data = target.sections.get("triton", {})  # parsed from the same bytes as the rest of the target
    strategy = data.get("dq_strategy", "atomic")
    if strategy not in DQ_STRATEGIES:
        raise TargetError(f"{where}: triton.dq_strategy = {strategy!r} is invalid; accepted: {', '.join(DQ_STRATEGIES)}")
    default = _knobs(data.get("default", {"num_warps": 4, "num_stages": 2}), f"{where}: triton.default", "Triton's usual defaults")
    rows = []
    for n, row in enumerate(data.get("schedule", [])):
        rw = f"{where}: triton.schedule[{n}]"
        source = row.get("source")
        if not isinstance(source, str) or not source:
            raise TargetError(f"{rw}.source is missing; every row names where its numbers come from")
        if row.get("program") not in PROGRAMS:
            raise TargetError(f"{rw}.program = {row.get('program')!r} is invalid; accepted: {', '.join(PROGRAMS)}")
        head_dim = row.get("head_dim")
        if head_dim not in (16, 32, 64, 128, 256):
            raise TargetError(f"{rw}.head_dim = {head_dim!r} is invalid; accepted: 16, 32, 64, 128 or 256 (the padded head dim)")
        causal = row.get("causal")
        if causal is not None and not isinstance(causal, bool):
            raise TargetError(f"{rw}.causal = {causal!r} is invalid; accepted: true, false, or absent for both")
        dtype = row.get("dtype")
        if dtype is not None and dtype not in DTYPES:
            raise TargetError(f"{rw}.dtype = {dtype!r} is invalid; accepted: {', '.join(DTYPES)} or absent")
        tiles = None
        if "Br" in row or "Bc" in row:
            br, bc = row.get("Br"), row.get("Bc")
            if br not in target.tiles["Br"] or bc not in target.tiles["Bc"]:
                raise TargetError(f"{rw}: Br = {br!r}, Bc = {bc!r} are invalid; accepted: Br in {target.tiles['Br']}, Bc in {target.tiles['Bc']}")
            tiles = (br, bc)
        group = row.get("group")
        if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
            raise TargetError(f"{rw}.group = {group!r} is invalid; accepted: a positive integer (G = Hq / Hkv) or absent for any")
        split = row.get("group_split")
        if split is not None and (isinstance(split, bool) or not isinstance(split, int) or not 1 <= split <= 64):
            raise TargetError(f"{rw}.group_split = {split!r} is invalid; accepted: an integer from 1 to 64 (reduced to a divisor of G) or absent for 1")
        min_seq_k = row.get("min_seq_k")
        if min_seq_k is not None and (isinstance(min_seq_k, bool) or not isinstance(min_seq_k, int) or min_seq_k < 1):
            raise TargetError(f"{rw}.min_seq_k = {min_seq_k!r} is invalid; accepted: a positive integer (the row applies when Sk is at least this) or absent for any")
        heavy = row.get("heavy_first")
        if heavy is not None and not isinstance(heavy, bool):
            raise TargetError(f"{rw}.heavy_first = {heavy!r} is invalid; accepted: true, false, or absent for false")
        dq_tiles = row.get("dq_tiles")
        if dq_tiles is not None and (row.get("program") != "bwd-separate" or dq_tiles not in DQ_TILES):
            raise TargetError(f"{rw}.dq_tiles = {dq_tiles!r} is invalid; accepted: {' or '.join(map(repr, DQ_TILES))} on a bwd-separate row, or absent")
        estimate = row.get("estimate", False)
        if not isinstance(estimate, bool):
            raise TargetError(f"{rw}.estimate = {estimate!r} is invalid; accepted: true (not measured on this target's device), false, or absent for false")
        if split is not None and not str(row.get("program")).startswith("bwd"):
            raise TargetError(f"{rw}: group_split is a backward knob; accepted on program = bwd-atomic or bwd-separate, not {row.get('program')!r}")
        knobs = {
            phase: _knobs(value, f"{rw}.{phase}", source)
            for phase, value in row.items()
            if phase not in ROW_KEYS
        }
        rows.append(ScheduleRow(row["program"], head_dim, causal, dtype, tiles, knobs, source, n, group, split, heavy, min_seq_k, dq_tiles, estimate))
    return TritonConfig(strategy, data.get("dq_strategy_source", ""), default, tuple(rows))


def padded(n: int) -> int:
    """The padded extent of a tile dim: a power of two, at least 16 (``tl.arange``, ``tl.dot``)."""
    return next_pow2(n, 16)


@dataclass(frozen=True)
class Skipped:
    """A ``[[triton.schedule]]`` row that applied but was not used, and why (its tiles overflow a level)."""

    row: ScheduleRow
    reason: str

    def line(self) -> str:
        return f"{self.row.describe()} skipped: {self.reason}"

    __str__ = line  # how the printed program's attrs show it


def forward_knobs(row: ScheduleRow | None) -> tuple[bool, str]:
    """(heavy_first, where it comes from) of the forward under ``row``: the row's value, false when
    the row gives none."""
    if row is None or row.heavy_first is None:
        return False, "the default (Q tiles the fastest grid axis; no row sets heavy_first)"
    return bool(row.heavy_first), f"the target's {row.describe()}: {row.source}"


def group_knobs(spec, row: ScheduleRow | None) -> tuple[int, bool, str]:
    """(group_split, heavy_first, where they come from) of the backward of ``spec`` under ``row``: the
    row's values, the split reduced to the largest divisor of G = Hq / Hkv not above it; 1 and false
    when the row gives none."""
    split = row.group_split if row is not None and row.group_split is not None else None
    heavy = bool(row.heavy_first) if row is not None and row.heavy_first is not None else False
    if split is None and not heavy:
        return 1, False, "the default (one program per KV head and K/V tile; no row sets group_split or heavy_first)"
    value = max(d for d in range(1, min(split or 1, spec.group) + 1) if spec.group % d == 0)
    clamped = f", reduced to {value}, the largest divisor of G = {spec.group} not above it" if split is not None and value != split else ""
    return value, heavy, f"the target's {row.describe()}{clamped}: {row.source}"


@dataclass(frozen=True)
class RowChoice:
    """What select-row fixed for one trial (``Options.row``): the row (None: no row), the rows skipped
    before it, and whether the caller forced the tile sizes, for launch-knobs to record."""

    row: ScheduleRow | None
    skipped: tuple[Skipped, ...] = ()
    forced: bool = False


def _forced(ctx: Context) -> tuple[int, int] | None:
    """The caller's (Br, Bc) for ``ctx``'s program: a pair, or ``{"fwd": pair, "bwd": pair}``."""
    sizes = ctx.options.tile_sizes
    if isinstance(sizes, dict) and sizes and set(sizes) <= {"fwd", "bwd"}:
        sizes = sizes.get(ctx.which)
    return tuple(sizes) if sizes is not None else None


def _given_stages(ctx: Context) -> dict[str, int]:
    return {phase: stages for phase, _, stages in ctx.options.launch}


def _row_options(ctx: Context, cfg: TritonConfig, row: ScheduleRow | None, tiles, skipped: tuple[Skipped, ...]) -> Context:
    """The trial context of ``row``: its tile sizes, stages, strategy and knobs (see the module docstring)."""
    o, spec = ctx.options, ctx.spec
    stages = {**(row.stage_counts(cfg.default) if row else {"*": cfg.default.num_stages}), **_given_stages(ctx)}
    choice = RowChoice(row, skipped, _forced(ctx) is not None)
    if ctx.which == "fwd":
        return ctx.with_options(tile_sizes=tiles, num_stages=stages_key(stages), heavy_first=forward_knobs(row)[0], row=choice)
    split, heavy, _ = group_knobs(spec, row)
    strategy = o.dq_strategy or (row.program.split("-", 1)[1] if row is not None else cfg.dq_strategy)
    own = row.dq_tiles if row is not None and row.program == f"bwd-{strategy}" else None  # a bwd-separate row's
    return ctx.with_options(
        dq_strategy=strategy, tile_sizes=tiles, num_stages=stages_key(stages), group_split=split, heavy_first=heavy,
        dq_tiles=o.dq_tiles or own or "same", row=choice,
    )


def select_row_pass(list_for: Callable[[Context], tuple[Pass, ...]]) -> Pass:
    """The search select-row (see the module docstring); ``list_for(ctx)`` is the list a trial runs (the
    GPU list of the options the row fixes)."""

    def run(program: Program, ctx: Context, rest):
        cfg = triton_config(ctx.target)
        spec, o = ctx.spec, ctx.options
        kind = "fwd" if ctx.which == "fwd" else ("bwd" if o.dq_strategy is None else f"bwd-{o.dq_strategy}")
        head_dim = padded(max(spec.head_dim_qk, spec.head_dim_v))
        rows = cfg.matching(kind, head_dim, spec.mask_kind != "none", spec.dtype, spec.group, spec.seq_k)
        forced = _forced(ctx)
        skipped: list[Skipped] = []
        for candidate in rows + [None]:  # None: no row, the list's own choice
            if forced is not None:
                tiles = forced  # the caller's sizes; the first row that applies gives the knobs
            elif candidate is not None and candidate.tiles is not None:
                tiles = (min(candidate.tiles[0], padded(spec.seq_q)), min(candidate.tiles[1], padded(spec.seq_k)))
            else:
                tiles = None
            trial = _row_options(ctx, cfg, candidate, tiles, tuple(skipped))
            log = PassLog()
            try:
                final = run_passes(None, list_for(trial), trial, log)
            except (ScheduleError, SpecError) as exc:
                # forced sizes that overflow are the caller's error, not a row's; so are dq_tiles the caller asked for
                row_refused = isinstance(exc, ScheduleError) or (isinstance(exc, SpecError) and exc.field == "dq_tiles" and o.dq_tiles is None)
                if candidate is None or not row_refused or (forced is not None and isinstance(exc, ScheduleError)):
                    raise
                skipped.append(Skipped(candidate, str(exc)))
                continue
            return None, trial, (final, log)
        raise AssertionError("unreachable: the last candidate (no row) returns or raises")

    return Pass(
        "select-row", run,
        "the first of the target's [[triton.schedule]] rows that fits (tiles, stages, knobs), else the cost model's choice; "
        "rows that do not fit skipped with the reason",
        search=True, example=example_trial,
    )


def example_trial(ctx: Context) -> Context:
    """The context of select-row's last candidate (no row), for listing the passes its trials run."""
    cfg = triton_config(ctx.target)
    return _row_options(ctx, cfg, None, _forced(ctx), ())


def _stages(ctx: Context, phase: str) -> int:
    stages = dict(ctx.options.num_stages or ())
    return int(stages.get(phase, stages.get("*", DEFAULT_STAGES)))


def _launch_knobs(program: Program, ctx: Context) -> Program:
    cfg = triton_config(ctx.target)
    choice = ctx.options.row
    row = choice.row if choice is not None else None
    warps = {phase: w for phase, w, _ in ctx.options.launch}
    kernels = []
    for k in program.kernels:
        own = row.knobs.get(k.phase) if row is not None else None
        if k.phase in warps:
            knobs = LaunchKnobs(int(warps[k.phase]), _stages(ctx, k.phase), CALLER)
        elif own is not None:
            knobs = LaunchKnobs(own.num_warps, _stages(ctx, k.phase), f"the target's {row.describe()}")
        else:
            knobs = LaunchKnobs(cfg.default.num_warps, _stages(ctx, k.phase), "the target's triton.default")
        kernels.append(k.annotate(knobs))
    program = dataclasses.replace(program, kernels=tuple(kernels))
    env = program.env_map
    if (choice.forced if choice is not None else ctx.options.tile_sizes is not None):
        tiles_source = CALLER
    elif row is not None and row.tiles is not None:
        clamped = "" if (env[Br], env[Bc]) == row.tiles else ", clamped to the sequence lengths rounded up to a power of two"
        tiles_source = f"the target's {row.describe()}{clamped}: {row.source}"
    else:
        tiles_source = "the cost model: the fastest predicted feasible candidate"
    attrs: dict[str, object] = {"tiles_source": tiles_source}
    if choice is not None:  # the rows were consulted
        if row is not None:
            attrs["schedule_row"] = row.index
        if choice.skipped:
            attrs["rows_skipped"] = tuple((sk.row.index, sk.reason) for sk in choice.skipped)
        if ctx.which == "fwd":
            attrs["heavy_first_source"] = forward_knobs(row)[1]
        else:
            attrs["group_split_source"] = group_knobs(ctx.spec, row)[2]
    elif ctx.which == "fwd":
        attrs["heavy_first_source"] = CALLER if ctx.options.heavy_first else forward_knobs(None)[1]
    else:
        knobs_given = ctx.options.group_split != 1 or ctx.options.heavy_first
        attrs["group_split_source"] = CALLER if knobs_given else group_knobs(ctx.spec, None)[2]
    return program.with_attrs(**attrs)


LAUNCH_KNOBS = Pass(
    "launch-knobs", _launch_knobs,
    "each kernel's num_warps and num_stages and their source (@launch_knobs); attrs: the row used, the rows skipped, where the tiles come from",
    annotates=True,
)


# --- the schedule as the program records it (what the manifest and inspect print) -----------------


def recorded_row(program: Program, target: Target) -> ScheduleRow | None:
    """The ``[[triton.schedule]]`` row of ``target`` that ``program`` records it used (attrs
    ``schedule_row``: the row's index), or None."""
    index = program.attr("schedule_row")
    return None if index is None else next(r for r in triton_config(target).rows if r.index == index)


def recorded_skipped(program: Program, target: Target) -> tuple[Skipped, ...]:
    """The rows of ``target`` that ``program`` records were skipped, and why (attrs ``rows_skipped``:
    (row index, reason) pairs)."""
    rows = {r.index: r for r in triton_config(target).rows}
    return tuple(Skipped(rows[index], reason) for index, reason in program.attr("rows_skipped", ()))


def program_kind(program: Program) -> str:
    """``fwd``, ``bwd-atomic`` or ``bwd-separate``: which program ``program`` is."""
    return "fwd" if program.attr("form") == "forward" else f"bwd-{program.attr('dq_strategy')}"


def launch_knobs(program: Program) -> dict[str, LaunchKnobs]:
    """{kernel phase: its launch knobs} as the pass launch-knobs recorded them."""
    return {k.phase: k.get(LaunchKnobs) for k in program.kernels}


def schedule_choice(program: Program) -> dict:
    """The schedule a compiled GPU program is emitted with, read from the program, as plain data: ``Br``,
    ``Bc`` (the separate strategy: ``dq_tiles``, ``transposed`` when its dq kernel runs on Bc x Br tiles),
    ``kernels``, the tile sizes' source, the GQA / heavy-first knobs and their source, and per kernel its
    ``num_warps``, ``num_stages`` and their source. The manifest and ``tilegen inspect`` both print this."""
    env = {str(k): v for k, v in program.env}
    kind = program_kind(program)
    return {
        "Br": env["Br"],
        "Bc": env["Bc"],
        **({"dq_tiles": program.attr("dq_tiles") or "same"} if kind == "bwd-separate" else {}),
        "kernels": [k.name for k in program.kernels],
        "tiles_source": program.attr("tiles_source"),
        **(
            {
                "group_split": program.attr("group_split", 1),
                "heavy_first": bool(program.attr("heavy_first", False)),
                "group_split_source": program.attr("group_split_source"),
            }
            if kind != "fwd"
            else {"heavy_first": bool(program.attr("heavy_first", False)), "heavy_first_source": program.attr("heavy_first_source")}
        ),
        "launch": {
            k.name: {"num_warps": kn.num_warps, "num_stages": kn.num_stages, "source": kn.source}
            for k in program.kernels
            for kn in (k.get(LaunchKnobs),)
        },
    }
