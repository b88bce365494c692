"""Hardware targets, loaded from ``targets/<name>.toml``.

A target file gives the on-chip levels (capacity, reserved bytes, alignment, fractal granule, owning
unit), the core counts and clock, the peak rates per unit and dtype (TFLOP/s; vector and exp in tera
element-operations/s), HBM and L2 bandwidth (GB/s), the placement rules and the tile-size candidates;
an Ascend target may add ``[timeline]``, the cost per instruction kind of the emitted code (cycles,
bytes per cycle) that :mod:`tilegen.backends.ascendc.timeline` and :func:`tilegen.backends.ascendc.cost.predict_emitted` use, and a GPU
target ``[gpu_model]``, the parameters of :func:`tilegen.models.cost.predict_gpu` (each fitted or sourced), and
``[gpu_model_compiled]``, its parameters when it takes the compiler's own figures; a GPU target may list
``devices``, parts of the CUDA device names it describes (``tilegen.torch`` picks a target by them).
Every figure is a table ``{ value = ..., source = "...", estimate = true? }``: the source is kept so
that reports can show where a number comes from, and estimates are marked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tilegen.core.errors import TargetError
from tilegen.core.resources import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Figure:
    """A number with its source; ``estimate`` when no official datasheet gives it; ``low``/``high``: the
    range it could take (None: not given; every entry of a ``[timeline]`` table gives one)."""

    value: float
    source: str
    estimate: bool = False
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Level:
    """An on-chip memory level of one core (bytes).

    ``usable`` = capacity − reserved; ``fractal`` is the dimension granule of cube levels (16), else 0;
    ``pow2``: every tile extent held on the level is padded to a power of two at least this large (a
    GPU level of the Triton backend, whose ``tl.arange`` extents must be powers of two), else None.
    """

    name: str
    unit: str
    capacity: Figure
    alignment: Figure
    reserved: Figure | None = None
    fractal: Figure | None = None
    scratch: Figure | None = None
    pow2: Figure | None = None

    @property
    def scratch_bytes(self) -> int:
        """Bytes a backend keeps on this level for its own temporaries (not IR buffers)."""
        return int(self.scratch.value) if self.scratch else 0
    @property
    def usable(self) -> int:
        return int(self.capacity.value) - int(self.reserved.value if self.reserved else 0)


@dataclass(frozen=True)
class Target:
    """One hardware target (see the module docstring for the file format)."""

    name: str
    kind: str
    arch: str
    description: str
    generate: bool
    generate_refusal: str
    cores: dict[str, Figure]
    levels: tuple[Level, ...]
    placement: dict[str, Any]
    tiles: dict[str, tuple[int, ...]]
    peak: dict[str, Figure]
    bandwidth: dict[str, Figure]
    overhead: dict[str, Figure]
    path: str
    timeline: dict[str, Figure] = dataclasses.field(default_factory=dict)  # [timeline]: cost table of tilegen.backends.ascendc.timeline
    digest: str = ""  # SHA-256 of the file's bytes this target was parsed from
    sections: dict[str, Any] = dataclasses.field(default_factory=dict)  # tables read by backends ([triton])
    gpu_model: dict[str, Figure] = dataclasses.field(default_factory=dict)  # [gpu_model]: parameters of tilegen.models.cost.predict_gpu
    # [gpu_model_compiled]: its parameters when it is given the compiler's registers, spills and shared bytes
    gpu_model_compiled: dict[str, Figure] = dataclasses.field(default_factory=dict)
    # devices: substrings of the CUDA device name (torch.cuda.get_device_name) of the devices the file
    # describes; tilegen.torch.device.gpu_target picks the target by them when the caller names none
    devices: tuple[str, ...] = ()

    def level(self, name: str) -> Level:
        for lvl in self.levels:
            if lvl.name == name:
                return lvl
        raise KeyError(name)

    @property
    def parallel_units(self) -> int:
        """Program instances that run at once: the ``[cores]`` table's AI Cores (``aic``: Ascend) or, without
        them, its SMs (``sm``: a GPU)."""
        return int(self.cores["aic" if "aic" in self.cores else "sm"].value)

    @property
    def vector_split(self) -> int:
        """Vector cores sharing the rows of one program's vector work (2 AIV per AIC on 910B)."""
        fig = self.cores.get("aiv_per_aic")
        return int(fig.value) if fig else 1

    def matmul_flops(self, dtype: str) -> float:
        """Peak matmul rate for operands of ``dtype``, FLOP/s."""
        return self.peak[f"cube_{dtype}"].value * 1e12

    def rate(self, unit: str) -> float:
        """``vector`` or ``exp`` peak, operations/s."""
        return self.peak[unit].value * 1e12

    def bytes_per_s(self, level: str) -> float:
        """``hbm`` or ``l2`` bandwidth, bytes/s."""
        return self.bandwidth[level].value * 1e9

    def with_capacity(self, level: str, capacity: int) -> "Target":
        """A copy with one level's capacity changed (for what-if schedules and tests)."""
        levels = tuple(
            dataclasses.replace(lvl, capacity=Figure(capacity, "changed by the user")) if lvl.name == level else lvl
            for lvl in self.levels
        )
        return dataclasses.replace(self, levels=levels)


BACKEND_SECTIONS = ("triton",)  # tables a backend parses itself; kept raw in Target.sections


def _figure(data: Any, where: str) -> Figure:
    if not isinstance(data, dict) or "value" not in data or not isinstance(data.get("source"), str) or not data["source"]:
        raise TargetError(f"{where}: expected {{ value = <number>, source = \"...\" }}, got {data!r}")
    value = data["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TargetError(f"{where}: value {value!r} must be a positive number")
    bounds = []
    for key in ("low", "high"):
        b = data.get(key)
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or b <= 0):
            raise TargetError(f"{where}: {key} {b!r} must be a positive number")
        bounds.append(None if b is None else float(b))
    low, high = bounds
    if (low is not None and low > value) or (high is not None and high < value):
        raise TargetError(f"{where}: the range [{low}, {high}] must hold the value {value}")
    return Figure(float(value), data["source"], bool(data.get("estimate", False)), low, high)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TargetError(f"{path}: cannot read target file ({exc})") from None


@lru_cache(maxsize=64)
def _parse(where: str, raw: bytes) -> Target:
    """The target in ``raw`` (the bytes of the file at ``where``); memoised by the bytes themselves, so
    an edited file is parsed again."""
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TargetError(f"{where}: cannot read target file ({exc})") from None
    for key in ("name", "kind", "arch", "description", "cores", "levels", "placement", "tiles", "peak", "bandwidth"):
        if key not in data:
            raise TargetError(f"{where}: missing key {key!r}")
    if data["kind"] not in ("ascend", "gpu"):
        raise TargetError(f"{where}: kind = {data['kind']!r}; accepted: 'ascend', 'gpu'")
    levels = []
    for n, lvl in enumerate(data["levels"]):
        lw = f"{where}: levels[{n}]"
        for key in ("name", "unit", "capacity", "alignment"):
            if key not in lvl:
                raise TargetError(f"{lw}: missing key {key!r}")
        levels.append(
            Level(
                name=lvl["name"],
                unit=lvl["unit"],
                capacity=_figure(lvl["capacity"], f"{lw}.capacity"),
                alignment=_figure(lvl["alignment"], f"{lw}.alignment"),
                reserved=_figure(lvl["reserved"], f"{lw}.reserved") if "reserved" in lvl else None,
                fractal=_figure(lvl["fractal"], f"{lw}.fractal") if "fractal" in lvl else None,
                scratch=_figure(lvl["scratch"], f"{lw}.scratch") if "scratch" in lvl else None,
                pow2=_figure(lvl["pow2"], f"{lw}.pow2") if "pow2" in lvl else None,
            )
        )
        least = levels[-1].pow2
        if least is not None and (least.value != int(least.value) or int(least.value) & (int(least.value) - 1)):
            raise TargetError(f"{lw}.pow2 = {least.value!r} is invalid; accepted: a power of two (the least padded extent)")
    placement = {}
    for key, value in data["placement"].items():
        placement[key] = _figure(value, f"{where}: placement.{key}") if isinstance(value, dict) else value
    names = {lvl.name for lvl in levels}
    for role in ("operand", "result", "vector", "left", "right"):
        if role in placement and placement[role] not in names:
            raise TargetError(f"{where}: placement.{role} = {placement[role]!r} is not a level ({sorted(names)})")
    tiles = {}
    for key in ("Br", "Bc"):
        values = data["tiles"].get(key)
        if not values or any(not isinstance(v, int) or v <= 0 for v in values):
            raise TargetError(f"{where}: tiles.{key} must be a list of positive integers")
        tiles[key] = tuple(sorted(values))
    devices = data.get("devices", [])
    if not isinstance(devices, list) or any(not isinstance(d, str) or not d.strip() for d in devices):
        raise TargetError(f"{where}: devices = {devices!r} is invalid; accepted: a list of non-empty strings (parts of CUDA device names)")
    section = lambda name: {k: _figure(v, f"{where}: {name}.{k}") for k, v in data.get(name, {}).items()}  # noqa: E731
    target = Target(
        name=data["name"],
        kind=data["kind"],
        arch=data["arch"],
        description=data["description"],
        generate=bool(data.get("generate", False)),
        generate_refusal=data.get("generate_refusal", ""),
        cores=section("cores"),
        levels=tuple(levels),
        placement=placement,
        tiles=tiles,
        peak=section("peak"),
        bandwidth=section("bandwidth"),
        overhead=section("overhead"),
        path=where,
        timeline=section("timeline"),
        gpu_model=section("gpu_model"),
        gpu_model_compiled=section("gpu_model_compiled"),
        digest=hashlib.sha256(raw).hexdigest(),
        sections={k: data[k] for k in BACKEND_SECTIONS if k in data},
        devices=tuple(devices),
    )
    for key in ("cube_fp16", "cube_bf16", "cube_fp32", "vector", "exp"):
        if key not in target.peak:
            raise TargetError(f"{where}: missing peak.{key}")
    for key in ("hbm", "l2"):
        if key not in target.bandwidth:
            raise TargetError(f"{where}: missing bandwidth.{key}")
    for key, fig in target.timeline.items():
        if fig.low is None or fig.high is None:
            raise TargetError(f"{where}: timeline.{key} gives no range: every entry of the cost table has low = and high = (the values it could take)")
    return target


def target_names() -> list[str]:
    """The names of the targets shipped in ``targets/``."""
    return sorted(p.stem for p in data_dir("targets").glob("*.toml"))


def _load_path(path: str) -> Target:
    return _parse(path, _read(Path(path)))


def load_target(name: str | Target) -> Target:
    """The target called ``name`` (a file in ``targets/``) or at path ``name`` (a ``.toml`` file), as
    the file reads now (every call reads it; parsing is memoised by its bytes).

    Raises:
        TargetError: unknown name (the message lists the known ones) or an invalid file.
    """
    if isinstance(name, Target):
        return name
    if not isinstance(name, str) or not name:
        raise TargetError(f"target = {name!r} is invalid; accepted: one of {', '.join(target_names())} or a path to a .toml file")
    path = Path(name)
    if path.suffix == ".toml" and path.is_file():
        return _load_path(str(path.resolve()))
    candidate = data_dir("targets") / f"{name}.toml"
    if not candidate.is_file():
        raise TargetError(f"target = {name!r} is invalid; accepted: one of {', '.join(target_names())} or a path to a .toml file")
    return _load_path(str(candidate))


def target_key(target: str | Target | None) -> str | None:
    """A stable key for caches: the parsed target, which holds the SHA-256 of the file's bytes it was
    parsed from and the sections backends read (such as ``[triton]``).

    Raises:
        TargetError: as :func:`load_target`.
    """
    if target is None:
        return None
    return repr(load_target(target))
