"""The ``tilegen`` command line.

Verbs:
  run       run a spec's programs in the interpreter on seeded random data and check them
  inspect   the schedule on a target: tile sizes and why, footprints vs capacity, predicted
            traffic, FLOPs and time, the loop nest with placements; --compare: store P vs recompute
  generate  write kernels (Ascend C for 910B, Triton for H200), host code, build files, manifest
  spec      print or write a spec as TOML; --from-hf maps a HuggingFace config.json; --fields lists
            every field a spec file takes

Every verb takes a spec as a file (TOML/YAML) or ``--spec NAME`` (a built-in; ``demo`` when neither is
given), and size overrides that shrink a big spec to something the interpreter runs in seconds. Errors
print one line and exit 2 (``--debug`` shows the traceback); a failed check exits 1; Ctrl-C, start-up
included, prints ``tilegen: interrupted`` and exits 130 (128 + SIGINT, the shell's convention).
"""

from __future__ import annotations

import argparse
import textwrap
import os
import sys
from typing import TYPE_CHECKING

# Only the standard library and tilegen.errors at import time: the ``tilegen`` entry point imports this
# module before main() runs, and a Ctrl-C while numpy, sympy or the specs load (a second or more) is
# turned into one line only inside main(). Everything else is imported where it is used.
from tilegen.core.errors import ScheduleError, SpecError, TilegenError

if TYPE_CHECKING:
    from tilegen.core.spec import AttentionSpec

DEFAULT_SPEC = "demo"
DEFAULT_TWIN_TARGET = "ascend910b2"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _nonnegative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value} is not an integer from 0 to 2**63 - 1")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``tilegen: error: ...``, exit 2), like every other error here."""

    def error(self, message: str):
        self.exit(2, f"tilegen: error: {message} (see {self.prog} --help)\n")


def _tiles(text: str) -> tuple[int, int]:
    parts = text.lower().replace(",", "x").split("x")
    try:
        br, bc = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BRxBC (for example 64x128)") from None
    if not (1 <= br <= 4096 and 1 <= bc <= 4096):
        raise argparse.ArgumentTypeError(f"{text!r}: Br and Bc must be integers from 1 to 4096")
    return br, bc


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    # the names from the files alone (tilegen.core.resources): --help imports no NumPy
    from tilegen.core.resources import builtin_spec_files

    p.add_argument("spec_file", nargs="?", metavar="SPEC_FILE", help="a spec file (.toml, .yaml)")
    p.add_argument("--spec", metavar="NAME", help=f"a built-in spec ({', '.join(builtin_spec_files())}); default {DEFAULT_SPEC}")
    p.add_argument("--batch", type=_positive, metavar="B", help="override the batch size")
    p.add_argument("--heads", type=_positive, metavar="H", help="override the query heads (KV heads keep the group size)")
    p.add_argument("--seq", type=_positive, metavar="N", help="override both sequence lengths")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress bars of long steps on stderr (default: when stderr is a terminal, or $TILEGEN_PROGRESS=1)",
    )


def _window_arg(text: str) -> tuple[int, int]:
    try:
        left, right = (int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not L,R (two integers, -1 for unbounded; e.g. 4096,0)") from None
    return left, right


def _pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not B,H (two integers, e.g. 0,3)") from None
    return a, b


def _add_override_args(p: argparse.ArgumentParser) -> None:
    """The overrides of run, inspect and generate beyond the sizes of :func:`_add_spec_args`."""
    p.add_argument("--seq-q", type=_positive, metavar="N", help="override the query length")
    p.add_argument("--seq-k", type=_positive, metavar="N", help="override the key/value length")
    p.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], help="override the dtype")
    mask = p.add_mutually_exclusive_group()
    mask.add_argument("--causal", action="store_true", help="override the window: causal (-1,0); a mask_mod stays, and-ed with it")
    mask.add_argument("--window", type=_window_arg, metavar="L,R", help="override the window (left, right; -1 unbounded); a mask_mod stays, and-ed with it")
    mask.add_argument("--no-mask", action="store_true", help="override the window: none (a mask_mod stays)")


def resolve_spec(args: argparse.Namespace, base: AttentionSpec | None = None) -> AttentionSpec:
    """The spec the arguments name (or ``base``), with the overrides applied (validated)."""
    from tilegen.core.spec import builtin_spec, load_spec

    if args.spec_file and args.spec:
        raise SpecError("--spec", args.spec, "either a SPEC_FILE or --spec NAME, not both")
    if base is not None:
        spec = base
    else:
        if args.spec_file:
            spec = load_spec(args.spec_file)
        else:
            try:
                spec = builtin_spec(args.spec or DEFAULT_SPEC)
            except SpecError as exc:  # name the flag the user typed
                raise SpecError("--spec", exc.value, exc.accepted) from None
    changes = {}
    if args.batch is not None:
        changes["batch"] = args.batch
    if args.seq is not None:
        for flag in ("seq_q", "seq_k"):
            if getattr(args, flag, None) is not None:
                raise SpecError("--" + flag.replace("_", "-"), getattr(args, flag), "absent when --seq sets both lengths")
        changes["seq_q"] = changes["seq_k"] = args.seq
    for flag in ("seq_q", "seq_k", "dtype"):
        if getattr(args, flag, None) is not None:
            changes[flag] = getattr(args, flag)
    if getattr(args, "causal", False):
        changes["window"] = (-1, 0)
    elif getattr(args, "no_mask", False):
        changes["window"] = (-1, -1)
    elif getattr(args, "window", None) is not None:
        changes["window"] = args.window
    if args.heads is not None:
        if args.heads % spec.group:
            raise SpecError("--heads", args.heads, f"a multiple of the spec's group size {spec.group} (heads_q / heads_kv)")
        changes["heads_q"] = args.heads
        changes["heads_kv"] = args.heads // spec.group
    if changes:
        try:
            spec = spec.replace(**changes)
        except SpecError as exc:
            raise SpecError(exc.field, exc.value, exc.accepted, "after the overrides") from None
    return spec


def describe(spec: AttentionSpec) -> str:
    mask = spec.mask_kind if spec.mask_kind != "window" else f"window{spec.window}"
    if spec.mask_kind != "none":
        mask += f" {spec.alignment}"
    dims = f"Dqk={spec.head_dim_qk}" + (f", Dv={spec.head_dim_v}" if spec.head_dim_v != spec.head_dim_qk else "")
    return (
        f"{spec.name}: B={spec.batch}, Hq={spec.heads_q}, Hkv={spec.heads_kv}, Sq={spec.seq_q}, Sk={spec.seq_k}, "
        f"{dims}, {spec.dtype}, {mask}, {spec.layout}, scale={spec.softmax_scale:.6g}"
        + (", with mods" if spec.has_mods else "")
        + (", with sinks" if spec.sinks else "")
    )


def describe_mods(spec: AttentionSpec) -> str:
    """``mods: score_mod ...; mask_mod ... (and-ed with the window)`` for a spec with mods."""
    parts = []
    if spec.score_mod:
        parts.append(f"score_mod {spec.score_mod}")
    if spec.mask_mod:
        parts.append(f"mask_mod {spec.mask_mod} (and-ed with the window)")
    return "mods: " + "; ".join(parts)


def cmd_run(args: argparse.Namespace) -> int:
    from tilegen.harness.runner import check_spec, compile_run, mod_params, validate_run

    spec = resolve_spec(args)
    backward = "unfused" if args.unfused else "both"
    data, data_note = load_data(args.data, args.data_index) if args.data else (None, None)
    if args.twin_target is not None and not (args.twin or args.asc_devkit):
        raise SpecError("--twin-target", args.twin_target, "only together with --twin (or --asc-devkit)")
    target = _run_target(args.target)
    args.dq_strategy = _dq_strategy(args, spec, target)
    twin = (args.twin_target or _default_twin_target(target)) if args.twin or args.asc_devkit else None
    validate_run(
        spec, tile_sizes=args.tiles, dq_strategy=args.dq_strategy, data=data, twin_target=twin, asc_devkit=args.asc_devkit,
        target=target,
    )
    # the mods' parameter arrays are checked (and their source named) before any work
    params_note = mod_params(spec, args.seed, {k: v for k, v in (data or {}).items() if k not in ("Q", "K", "V", "dO")})[1] if spec.has_mods or spec.sinks else None
    # compiled here for the header (the schedule and its sources); check_spec finds them in the compile cache
    planned = compile_run(spec, target=target, tile_sizes=args.tiles, dq_strategy=args.dq_strategy, backward=backward)
    if not args.json:
        print(f"tilegen run  {describe(spec)}" + (f"  target {target.name}" if target is not None else ""))
        for label, (program, source) in planned.items():
            source = source.replace("given by the caller", "given by --tiles")
            print(f"{label}: kernels {', '.join(k.name for k in program.kernels)}; {_tiles_text(program)} ({source})")
        if data_note:
            print(data_note)
        if spec.has_mods or spec.sinks:
            if spec.has_mods:
                print(describe_mods(spec))
            if params_note:
                print(params_note)
            print("reference: dense float64 in torch (score' materialised from the spec's expressions by sympy.lambdify; "
                  "dQ, dK, dV and the parameters' gradients by torch autograd)")
    with progress_bar(force=args.progress) as progress:
        run = lambda: check_spec(  # noqa: E731
            spec, seed=args.seed, tile_sizes=args.tiles, target=target, dq_strategy=args.dq_strategy, backward=backward,
            data=data, twin_target=twin, asc_devkit=args.asc_devkit, progress=progress,
        )
        report = _backend_guard(spec, args, f"--twin ({twin})", run) if twin is not None else run()
    if args.json:
        print(_run_json(spec, report, data_note))
        return 0 if report.ok else 1
    if report.twin_schedule is not None:
        for label, s in report.twin_schedule.items():
            print(f"{label} on the {twin} twin (Ascend C): kernels {', '.join(s['kernels'])}; Br={s['Br']}, Bc={s['Bc']}")
    print("accuracy vs the float64 reference (rule: max-abs <= 2 x plain same-precision + a floor, see tilegen/harness/check.py):")
    for comp in report.comparisons:
        print("  " + comp.line())
    if report.outside:
        print("  tokens outside every sequence (packed batch), never written: "
              + ", ".join(f"{name} {'ok' if ok else 'WRITTEN (FAIL)'}" for name, ok in report.outside))
    if backward == "both":
        print("  (* = the unfused backward)")
    print(traffic_table(report))
    print("check: " + ("passed" if report.ok else "FAILED"))
    return 0 if report.ok else 1


def _run_target(name: str | None):
    """``run --target``: the loaded target, or None; an unknown one is a one-line error naming the flag."""
    if name is None:
        return None
    from tilegen.core.errors import TargetError
    from tilegen.core.targets import load_target, target_names

    try:
        return load_target(name)
    except TargetError:
        raise TargetError(
            f"--target = {name!r} is invalid; accepted: one of {', '.join(target_names())} or a path to a .toml file"
        ) from None


def _default_twin_target(target) -> str:
    """The twin's target when --twin-target is not given: ``run --target`` when its backend's code runs on
    the twin (an Ascend one)."""
    from tilegen.backends import backend_for

    return target.name if target is not None and backend_for(target).twin else DEFAULT_TWIN_TARGET


def _tiles_text(program) -> str:
    env = {str(k): v for k, v in program.env_map.items()}
    return f"Br={env['Br']}, Bc={env['Bc']}"


class progress_bar:
    """A tqdm bar on ``stream`` (stderr) for the interpreter's trips, shown only when the stream is a
    terminal (or ``force``, or ``$TILEGEN_PROGRESS``: :func:`tilegen.core.progress.wanted`) and the run
    lasts longer than ``delay`` seconds; used as ``with progress_bar() as p:``, ``p`` being None when
    there is no bar (so nothing is counted) or ``p(label, kernel, done, total)``."""

    def __init__(self, stream=None, delay: float = 1.0, force: bool | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.delay = delay
        self.force = force
        self.bar = None
        self.current = None

    def __enter__(self):
        import time

        from tilegen.core import progress

        if not progress.wanted(self.stream, self.force):
            return None
        self.t0 = time.monotonic()
        return self.update

    def update(self, label: str, kernel: str, done: int, total: int) -> None:
        if self.bar is None:
            import time

            if time.monotonic() - self.t0 < self.delay:
                return
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=f"{label}: {kernel}", file=self.stream, leave=False, unit="trip", dynamic_ncols=True)
            self.current = (label, kernel)
        if self.current != (label, kernel):
            self.current = (label, kernel)
            self.bar.reset(total=total)
            self.bar.set_description(f"{label}: {kernel}")  # refreshes: each kernel shows up
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False


def _run_json(spec: AttentionSpec, report, data_note: str | None) -> str:
    """``tilegen run --json``: the spec, each program's kernels and tile sizes, every comparison, the
    measured HBM bytes per tensor and program, and the verdict."""
    import dataclasses
    import json

    programs = {}
    for label, program in report.programs.items():
        env = {str(k): v for k, v in program.env_map.items() if str(k) in ("Br", "Bc")}
        m = report.measurements[label]
        names = sorted(set(m.bytes_read) | set(m.bytes_written))
        programs[label] = {"kernels": [k.name for k in program.kernels], **env, "tiles_source": report.tiles_source.get(label),
                           "hbm_bytes": m.hbm_bytes, "hbm_bytes_by_tensor": {n: m.tensor_bytes(n) for n in names}}
    out = {
        "spec": spec.to_dict(),
        "target": report.target,
        "inputs": data_note or "random",
        "params": report.params_note,
        "programs": programs,
        "twin_schedule": report.twin_schedule,
        "comparisons": [{**dataclasses.asdict(c), "ok": c.ok} for c in report.comparisons],
        "outside_untouched": dict(report.outside),
        "ok": report.ok,
    }
    return json.dumps(out, indent=2)


def load_data(path: str, index: int) -> tuple[dict, str]:
    """Q, K, V, dO from an .npz file; arrays with one more leading axis than [B, H, S, D] are indexed.

    Returns:
        (the arrays by name, a line saying which arrays and which entry of the leading axis were used).
    """
    import zipfile

    import numpy as np

    accepted = "an .npz archive (numpy.savez) with arrays Q, K, V, dO"
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise SpecError("--data", path, f"{accepted}; this file is empty (0 bytes)")
    try:
        loaded = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise SpecError("--data", path, f"a readable .npz file with arrays Q, K, V, dO ({exc.strerror or exc})") from None
    except (ValueError, EOFError, zipfile.BadZipFile):  # numpy's errors for what is no .npy/.npz (or a truncated one)
        raise SpecError("--data", path, f"{accepted}; this file is not one") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise SpecError("--data", path, f"{accepted}; this file is a single .npy array")
    try:
        with loaded as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # a damaged member, an object array
        raise SpecError("--data", path, f"{accepted}, each readable ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    out = {}
    used = []
    for name in ("Q", "K", "V", "dO"):
        if name in arrays:
            a = arrays[name]
            if a.ndim == 5:
                if not 0 <= index < a.shape[0]:
                    raise SpecError("--data-index", index, f"0..{a.shape[0] - 1} (the leading axis of {name})")
                used.append(f"{name}[{index}] of {a.shape[0]}")
                a = a[index]
            else:
                used.append(name)
            out[name] = a
    for name in sorted(set(arrays) - {"Q", "K", "V", "dO"}):  # parameter arrays of the mods, by name
        out[name] = arrays[name]
        used.append(name)
    return out, f"inputs from {path}: {', '.join(used) or 'none'}"


def traffic_table(report) -> str:
    """HBM bytes per tensor (read + written) per program, side by side."""
    from tilegen.harness.report import format_bytes

    labels = list(report.measurements)
    names: list[str] = []
    for m in report.measurements.values():
        for n in list(m.bytes_read) + list(m.bytes_written):
            if n not in names:
                names.append(n)
    width = max(14, *(len(label) for label in labels))
    lines = ["HBM traffic measured by the interpreter (bytes read + written):"]
    lines.append("  " + "tensor".ljust(8) + "".join(label.rjust(width + 2) for label in labels))
    for n in names:
        cells = [report.measurements[label].tensor_bytes(n) for label in labels]
        lines.append("  " + n.ljust(8) + "".join((format_bytes(c) if c else "-").rjust(width + 2) for c in cells))
    totals = [report.measurements[label].hbm_bytes for label in labels]
    lines.append("  " + "total".ljust(8) + "".join(format_bytes(t).rjust(width + 2) for t in totals))
    fused = next((label for label in labels if label.startswith("backward fused")), None)
    if fused and "backward unfused" in report.measurements:
        ratio = report.measurements["backward unfused"].hbm_bytes / max(1, report.measurements[fused].hbm_bytes)
        lines.append(f"  the unfused backward moves {ratio:.2f}x the bytes of the fused one")
    return "\n".join(lines)


INSPECT_PROGRAMS = {"fwd": ("fwd",), "bwd": ("bwd",), "all": ("fwd", "bwd")}  # inspect --program


def cmd_inspect(args: argparse.Namespace) -> int:
    from tilegen.core.targets import target_names

    spec = resolve_spec(args)
    if args.compare and args.target is None:
        raise SpecError("--target", None, "a target for --compare (e.g. ascend910 for the seed's figures)")
    if args.cp is not None:
        return _inspect_cp(spec, args)
    if args.passes:
        return _inspect_passes(spec, args)
    if args.print_after_all:
        return _inspect_after_all(spec, args)
    if args.plot:
        from tilegen.harness.plot import check_path, require_matplotlib

        if args.compare:
            raise SpecError("--plot", args.plot, "a picture of the schedule, without --compare")
        check_path(args.plot)
        require_matplotlib()
    if args.tiles_map:
        from tilegen.harness.plot import check_path, require_matplotlib

        check_path(args.tiles_map, "--tiles-map")
        require_matplotlib()
    if args.compile:
        from tilegen.backends import backend_for

        if args.compare:
            raise SpecError("--compile", True, "without --compare (the store-P-versus-recompute report)")
        if args.target is None or not backend_for(args.target).compiles:
            raise SpecError("--target", args.target, "for --compile, a GPU target (h100, h200): its Triton kernels compiled for its architecture")
    simulate = args.simulate or args.timeline
    if simulate:
        from tilegen.backends import backend_for
        from tilegen.core.targets import load_target

        timed = [n for n in target_names() if backend_for(n).simulates and load_target(n).timeline]
        if args.target is None or args.compare:
            raise SpecError("--simulate", args.target, f"a --target with a [timeline] cost table ({', '.join(timed)}), without --compare")
        tgt = load_target(args.target)
        if not backend_for(tgt).simulates or not tgt.timeline:
            raise SpecError("--target", args.target, f"for --simulate, an Ascend target with a [timeline] cost table ({', '.join(timed)})")
        if args.timeline:
            from tilegen.harness.plot import check_path, require_matplotlib

            check_path(args.timeline, "--timeline")
            require_matplotlib()
    from tilegen.core.progress import step

    # The report goes through the compile cache: a repeated call only loads it (and formats it).
    with step("inspect: the passes and the tile search"):
        report = _inspect_data(spec, args)
    _warn_memory(spec, args.target)
    timeline = _inspect_timeline(spec, args) if simulate else None
    text = _inspect_text(spec, args, report, timeline)
    compiled = None
    if args.compile:
        from tilegen.harness.report import compiled_report

        compiled = compiled_report(spec, args.target, dq_strategy=args.dq_strategy, tile_sizes=args.tiles, programs=INSPECT_PROGRAMS[args.program])
        if args.json:
            import json

            report = json.loads(text)
            report["compiled"] = compiled
            text = json.dumps(report, indent=2) + "\n"
    if args.json and timeline is not None:
        import json

        report = json.loads(text)
        report["timeline"] = {k: v for k, v in timeline.items() if k != "programs"}
        report["timeline"]["programs"] = [{k: v for k, v in p.items() if k != "_timeline"} for p in timeline["programs"]]
        text = json.dumps(report, indent=2) + "\n"
    print(text, end="")
    if timeline is not None and not args.json:
        from tilegen.harness.report import format_timeline

        print(format_timeline(timeline), end="")
    if compiled is not None and not args.json:
        from tilegen.harness.report import format_compiled
        from tilegen.harness.text import wrap_lines

        print(wrap_lines(format_compiled(compiled)), end="")
    if args.plot:
        with step(f"draw {args.plot}"):
            _inspect_plot(spec, args)
    if args.timeline:
        from tilegen.harness.plot import plot_timeline

        with step(f"draw the timeline to {args.timeline}"):
            path = plot_timeline(timeline, args.timeline)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    if args.tiles_map:
        with step(f"draw {args.tiles_map}"):
            _inspect_tiles_map(spec, args)
    return 0


def _inspect_tiles_map(spec: AttentionSpec, args: argparse.Namespace) -> None:
    from tilegen.harness.plot import plot_tiles_map
    from tilegen.harness.report import tiles_map_data

    maps = tiles_map_data(spec, args.target, at=args.tiles_at, dq_strategy=_dq_strategy(args, spec, args.target), tile_sizes=args.tiles, programs=INSPECT_PROGRAMS[args.program])
    where = f"on {args.target}" if args.target else "(no target: default tile sizes)"
    path = plot_tiles_map(maps, args.tiles_map, f"tilegen inspect --tiles-map: {describe(spec)} {where}")
    print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)


def _inspect_cp(spec: AttentionSpec, args: argparse.Namespace) -> int:
    """``inspect --cp N``: the ring's per-step table (:mod:`tilegen.harness.scaling`), through the compile cache."""
    import json

    from tilegen.core.cache import cached
    from tilegen.harness.scaling import cp_report, format_cp
    from tilegen.core.targets import target_key

    if args.target is None:
        raise SpecError("--target", None, "a target with interconnect figures for --cp (h100, h200, ascend910b1..b4)")
    if args.compare or args.plot:
        raise SpecError("--cp", args.cp, "the ring table alone (without --compare or --plot)")
    report = cached(("inspect-cp", spec, target_key(args.target), args.cp, args.dq_strategy), lambda: cp_report(spec, args.target, args.cp, dq_strategy=_dq_strategy(args, spec, args.target)))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from tilegen.harness.text import wrap_lines

        print(wrap_lines(format_cp(report)), end="")
    return 0


def _inspect_timeline(spec: AttentionSpec, args: argparse.Namespace) -> dict:
    from tilegen.harness.report import timeline_report

    return timeline_report(
        spec, args.target, dq_strategy=_dq_strategy(args, spec, args.target), tile_sizes=args.tiles, programs=INSPECT_PROGRAMS[args.program], dkv_strategy=args.dkv_strategy
    )


def _inspect_plot(spec: AttentionSpec, args: argparse.Namespace) -> None:
    from tilegen.harness.plot import plot_inspect
    from tilegen.harness.report import inspect_report

    programs = INSPECT_PROGRAMS[args.program]
    report = inspect_report(spec, args.target, dq_strategy=args.dq_strategy, tile_sizes=args.tiles, programs=programs, dkv_strategy=args.dkv_strategy)
    maps = None
    if spec.mask_mod:  # draw the mask's block classes where they are known before the run
        from tilegen.harness.report import tiles_map_data

        try:
            maps = tiles_map_data(spec, args.target, dq_strategy=_dq_strategy(args, spec, args.target), tile_sizes=args.tiles, programs=programs)
        except SpecError:
            maps = None
    path = plot_inspect(report, args.plot, block_maps=maps)
    print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)


def _warn_memory(spec: AttentionSpec, target) -> None:
    from tilegen.harness.memory import device_memory_warning

    if target is not None:
        note = device_memory_warning(spec, target)
        if note:
            print(f"tilegen: {note}", file=sys.stderr)


def _inspect_passes(spec: AttentionSpec, args: argparse.Namespace) -> int:
    from tilegen.backends import backend_for, pass_lists

    lists = pass_lists(spec, args.target, dq_strategy=_dq_strategy(args, spec, args.target), dkv_strategy=args.dkv_strategy, tile_sizes=args.tiles)
    print(f"tilegen inspect --passes  {describe(spec)}  backend {backend_for(args.target).name}")
    for which in INSPECT_PROGRAMS[args.program]:
        print(f"{which}:")
        for n, p in enumerate(lists[which], 1):
            print(f"  {n:2d}. {p.name}{'  (search)' if p.search else ''}")
            print(textwrap.fill(p.doc, 100, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return 0


def _inspect_after_all(spec: AttentionSpec, args: argparse.Namespace) -> int:
    from tilegen.backends import backend_for
    from tilegen.core.printer import format_program
    from tilegen.passes.driver import PassLog

    backend = backend_for(args.target)
    for which in INSPECT_PROGRAMS[args.program]:
        log = PassLog()  # the programs the backend emits, as inspect shows them
        dq = _dq_strategy(args, spec, args.target) if which == "bwd" else None
        backend.emitted(spec, which, args.target, dq_strategy=dq, tile_sizes=args.tiles, dkv_strategy=args.dkv_strategy, log=log)
        last = None
        for name, program in log.steps:
            text = format_program(program)
            if text != last:  # only the passes that changed the program (Halide's LoweringLogger)
                print(f"# --- {which}: after {name}\n{text}")
            else:
                print(f"# --- {which}: {name}: unchanged\n")
            last = text
    return 0


def _inspect_data(spec: AttentionSpec, args: argparse.Namespace) -> dict:
    """The report inspect prints (:func:`~tilegen.harness.report.inspect_report`, or with --compare
    :func:`~tilegen.harness.report.tradeoff_report`), through the compile cache.

    Raises:
        ScheduleError: no program has a schedule (a program that fits is shown beside one that does not).
    """
    from tilegen.core.cache import cached
    from tilegen.core.targets import target_key

    def compare() -> dict:
        from tilegen.harness.report import tradeoff_report

        return tradeoff_report(spec, args.target, layers=args.layers, dq_strategy=_dq_strategy(args, spec, args.target))

    def inspect() -> dict:
        from tilegen.harness.report import inspect_report

        return inspect_report(
            spec, args.target, dq_strategy=args.dq_strategy, tile_sizes=args.tiles, programs=INSPECT_PROGRAMS[args.program],
            expressions=args.json, dkv_strategy=args.dkv_strategy,
        )

    # a report served from the cache loads no compiler module (the passes, sympy)
    key = (spec, target_key(args.target), args.dq_strategy, args.dkv_strategy, args.tiles, args.program)
    if args.compare:
        return cached(("inspect-compare", *key, args.layers), compare)
    report = cached(("inspect", *key, args.json), inspect)
    if report["programs"] and all("error" in p for p in report["programs"]):
        raise ScheduleError(report["programs"][0]["error"])
    return report


def _inspect_text(spec: AttentionSpec, args: argparse.Namespace, report: dict, timeline: dict | None) -> str:
    """The report as JSON, or as text at most 100 columns wide: the summary (with the simulated times
    of --simulate), then with --verbose the details."""
    import json

    from tilegen.harness.text import format_inspect, format_tradeoff, wrap_lines

    if args.json:
        return json.dumps(report, indent=2) + "\n"
    if args.compare:
        return wrap_lines(format_tradeoff(report))
    simulated = {p["label"].split()[0]: (p["simulated"]["time_s"], (p["simulated"]["range_s"]["fast"], p["simulated"]["range_s"]["slow"]))
                 for p in timeline["programs"]} if timeline else None
    return wrap_lines(f"tilegen inspect  {describe(spec)}\n") + format_inspect(
        report, candidates=args.candidates, show_nest=not args.no_nest, verbose=args.verbose, simulated=simulated
    )


def cmd_spec(args: argparse.Namespace) -> int:
    from tilegen.core.fileio import write_atomic

    if args.fields:
        given = [flag for flag, v in (("SPEC_FILE", args.spec_file), ("--spec", args.spec), ("--from-hf", args.from_hf), ("-o", args.output)) if v]
        if given:
            raise SpecError("--fields", args.fields, f"the field reference alone, without {given[0]}")
        import json

        from tilegen.core.spec import field_reference, format_field_reference

        if args.fields == "json":
            print(json.dumps([f.as_dict() for f in field_reference()], indent=2))
        else:
            print(format_field_reference(markdown=args.fields == "markdown"), end="")
        return 0
    if args.from_hf:
        if args.spec_file or args.spec:
            raise SpecError("--from-hf", args.from_hf, "either --from-hf or a spec, not both")
        from tilegen.hf import spec_from_hf_config

        spec = spec_from_hf_config(
            args.from_hf, seq=args.seq, batch=args.batch or 1, name=args.name, layer=args.layer, dtype=args.dtype
        )
        if args.heads is not None:
            spec = resolve_spec(argparse.Namespace(spec_file=None, spec=None, batch=None, seq=None, heads=args.heads), base=spec)
    else:
        spec = resolve_spec(args)
    text = spec.to_toml()
    if args.output:
        write_atomic(args.output, text, "-o")
        print(f"wrote {args.output}: {describe(spec)}")
    else:
        print(text, end="")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from tilegen.backends.output import launch_label, write
    from tilegen.core.cache import cached
    from tilegen.core.progress import step
    from tilegen.core.targets import target_key

    spec = resolve_spec(args)
    target = args.target
    with step(f"generate for {target}: the passes, the tile search, the templates"):
        generated = _backend_guard(
            spec, args, f"--target = {target!r}",
            lambda: cached(
                ("generate", spec, target_key(target), args.dq_strategy, args.tiles, args.dkv_strategy),
                lambda: _generate(spec, target, args.dq_strategy, args.tiles, args.dkv_strategy),
            ),
        )
    _warn_memory(spec, target)
    names = write(generated, args.output)
    sched = generated.manifest["schedule"]
    if args.json:
        import json

        print(json.dumps({"spec": spec.to_dict(), "target": target, "output": str(args.output), "schedule": sched, "files": names}, indent=2))
        return 0
    print(f"tilegen generate  {describe(spec)}  target {target}")
    for label in ("forward", "backward"):
        s = sched[label]
        launches = s.get("launches") or {k: [k] for k in s["kernels"]}
        phase = dict(zip(s["kernels"], s.get("phases", s["kernels"])))  # a Triton module: one kernel a launch
        groups = "; ".join(launch_label(name, [phase[k] for k in ks]) for name, ks in launches.items())
        print(f"  {label}: Br={s['Br']}, Bc={s['Bc']}, {len(launches)} launch{'es' if len(launches) > 1 else ''}: {groups}")
    print(f"wrote {len(names)} files to {args.output}: {', '.join(names)}")
    return 0


def _backend_guard(spec: AttentionSpec, args: argparse.Namespace, what: str, fn):
    """``fn()``; a backend that meets a construct of the spec's mods it has no lowering for, without
    refusing it by name (a TilegenError) yet, becomes one line naming the mods (--debug: the traceback)."""
    try:
        return fn()
    except (TilegenError, BrokenPipeError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if not spec.has_mods or args.debug:
            raise
        from tilegen.core.errors import TargetError

        raise TargetError(
            f"{what}: its backend cannot emit this spec's mods ({_mods_constructs(spec)}): {type(exc).__name__}: {exc}".replace("\n", " ")
        ) from None


def _mods_constructs(spec: AttentionSpec) -> str:
    parts = [f"score_mod {spec.score_mod}"] if spec.score_mod else []
    if spec.mask_mod:
        parts.append(f"mask_mod {spec.mask_mod}")
    return "; ".join(parts)


def _dq_strategy(args: argparse.Namespace, spec: AttentionSpec, target) -> str:
    """``--dq-strategy``, or the target's choice when it is not given (:func:`tilegen.backends.dq_strategy_for`)."""
    if args.dq_strategy is not None:
        return args.dq_strategy
    from tilegen.backends import dq_strategy_for

    return dq_strategy_for(spec, target, None, args.tiles)


def _generate(spec: AttentionSpec, target: str, dq_strategy: str, tile_sizes=None, dkv_strategy: str | None = None):
    from tilegen.backends import generate

    return generate(spec, target, dq_strategy, tile_sizes, dkv_strategy)


def build_parser() -> argparse.ArgumentParser:
    from tilegen import __version__
    from tilegen.core.strategies import DKV_AUTO, DKV_STRATEGIES, DQ_STRATEGIES
    from tilegen.core.targets import target_names

    parser = _Parser(prog="tilegen", description="Tiling code generator for FlashAttention kernels.")
    parser.add_argument("--version", action="version", version=f"tilegen {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="run a spec in the interpreter and check it against the float64 reference")
    _add_spec_args(run)
    _add_override_args(run)
    run.add_argument("--seed", type=_nonnegative, default=0, help="seed of the random inputs (default 0)")
    run.add_argument(
        "--target", metavar="T",
        help=f"run the schedule this target gets, as inspect shows and generate emits ({', '.join(target_names())} or a "
        ".toml file); an Ascend one is also the --twin target",
    )
    run.add_argument("--tiles", type=_tiles, metavar="BRxBC", help="force the tile sizes, e.g. 64x128 (with --target: checked against it)")
    run.add_argument("--unfused", action="store_true", help="check only the unfused (store P) backward")
    run.add_argument("--json", action="store_true", help="print the result (comparisons, tile sizes, traffic) as JSON")
    run.add_argument("--data", metavar="NPZ", help="inputs Q, K, V, dO (logical BNSD), and sinks [Hq] for a spec with sinks, from an .npz file instead of random ones")
    run.add_argument("--data-index", type=int, default=0, metavar="I", help="which entry of a leading axis in --data (default 0)")
    run.add_argument("--twin", action="store_true", help="also run the generated Ascend C kernels on the CPU twin (needs g++)")
    run.add_argument("--twin-target", metavar="T", help=f"the Ascend target for --twin (default {DEFAULT_TWIN_TARGET}; only with --twin)")
    run.add_argument(
        "--asc-devkit", metavar="DIR",
        help="run --twin on Huawei's Ascend C headers: DIR is an asc-devkit snapshot (include/, impl/); tilegen supplies "
        "only the CCE intrinsics (needs clang++-16; kernel_tiling.h from $ASC_GEN or made from DIR). Implies --twin",
    )
    run.add_argument(
        "--dq-strategy", choices=sorted(DQ_STRATEGIES), default=None,
        help="how the fused backward reduces dQ (default: the target's choice: on a GPU target its [[triton.schedule]] rows, otherwise atomic)"
    )
    run.set_defaults(func=cmd_run)
    inspect = sub.add_parser(
        "inspect", help="the schedule on a target: tile sizes and why, footprints, traffic, FLOPs, time, loop nest"
    )
    _add_spec_args(inspect)
    _add_override_args(inspect)
    inspect.add_argument("--target", metavar="T", help=f"a target ({', '.join(target_names())}) or a .toml file")
    inspect.add_argument("--tiles", type=_tiles, metavar="BRxBC", help="force the tile sizes, e.g. 64x128")
    inspect.add_argument("--program", choices=["fwd", "bwd", "all"], default="all", help="which programs (default all)")
    inspect.add_argument(
        "--dq-strategy", choices=sorted(DQ_STRATEGIES), default=None,
        help="how the fused backward reduces dQ (default: the target's choice: on a GPU target its [[triton.schedule]] rows, otherwise atomic)"
    )
    inspect.add_argument(
        "--dkv-strategy", choices=[DKV_AUTO, *sorted(DKV_STRATEGIES)], default=DKV_AUTO,
        help="how the fused backward reduces dK, dV: on-chip accumulators or atomic adds into fp32 workspaces "
        "(default auto: on the Ascend 910B the one the cost model predicts faster, atomic for long sequences; on-chip elsewhere)",
    )
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument("--compare", action="store_true", help="the store-P-versus-recompute report (needs --target)")
    inspect.add_argument("--layers", type=_positive, default=32, help="layers of the model for --compare (default 32)")
    inspect.add_argument("--candidates", type=_positive, default=8, help="candidates listed per program (default 8)")
    inspect.add_argument(
        "-v", "--verbose", action="store_true",
        help="after the summary, the details: tile candidates, the buffers behind each footprint, the prediction per kernel, "
        "traffic by tensor, the loop nest",
    )
    inspect.add_argument("--no-nest", action="store_true", help="leave out the loop nest (with --verbose)")
    inspect.add_argument("--passes", action="store_true", help="list the passes the target's backend runs on each program, with what each decides, and stop")
    inspect.add_argument("--print-after-all", action="store_true", help="print the program after every pass that changed it, and stop")
    inspect.add_argument(
        "--cp", type=_positive, metavar="N",
        help="ring (context-parallel) attention of the spec over 2..N devices: per step, bytes and transfer time "
        "against the kernel time, predicted (needs --target)",
    )
    inspect.add_argument(
        "--plot", metavar="FILE", help="also draw the schedule to FILE (.png or .svg): tile pairs, footprints, traffic (needs matplotlib)"
    )
    inspect.add_argument(
        "--tiles-map", metavar="FILE", help="draw the block classes (empty / partial / full tile pairs) of one (b, h) to FILE (.png or .svg)"
    )
    inspect.add_argument("--tiles-at", type=_pair, default=(0, 0), metavar="B,H", help="the batch and query head --tiles-map draws (default 0,0)")
    inspect.add_argument(
        "--simulate", action="store_true",
        help="also the timeline of the emitted code (Ascend targets with a [timeline] table): roofline, model and simulated time, "
        "busy fraction per pipe, critical path (runs the kernels on the hand twin; needs g++)",
    )
    inspect.add_argument(
        "--compile", action="store_true",
        help="also compile the emitted Triton kernels for the GPU target's architecture on this machine (needs Triton, "
        "no GPU): registers, spilled bytes and shared bytes per kernel as the compiler allocated them, and the model's "
        "prediction with them",
    )
    inspect.add_argument(
        "--timeline", metavar="FILE", help="draw one AI Core's pipes of the simulated timeline to FILE (.png or .svg; implies --simulate)"
    )
    inspect.set_defaults(func=cmd_inspect)
    gen = sub.add_parser("generate", help="write the kernels, host code, build files and a manifest for a target")
    _add_spec_args(gen)
    _add_override_args(gen)
    gen.add_argument("--tiles", type=_tiles, metavar="BRxBC", help="force the tile sizes of both programs, e.g. 64x128")
    gen.add_argument("--json", action="store_true", help="print the schedule and the files written as JSON")
    gen.add_argument("--target", metavar="T", default="ascend910b2", help="ascend910b1..b4 (Ascend C) or h100, h200 (Triton); default ascend910b2")
    gen.add_argument("-o", "--output", metavar="DIR", required=True, help="the folder to write (created if needed)")
    gen.add_argument(
        "--dq-strategy", choices=sorted(DQ_STRATEGIES), default=None,
        help="how the fused backward reduces dQ (default: the target's choice: on a GPU target its [[triton.schedule]] rows, otherwise atomic)"
    )
    gen.add_argument(
        "--dkv-strategy", choices=[DKV_AUTO, *sorted(DKV_STRATEGIES)], default=DKV_AUTO,
        help="how the fused backward reduces dK, dV: on-chip accumulators or atomic adds into fp32 workspaces "
        "(default auto: on the Ascend 910B the one the cost model predicts faster, atomic for long sequences; on-chip elsewhere)",
    )
    gen.set_defaults(func=cmd_generate)
    spec = sub.add_parser("spec", help="print or write a spec as TOML (from a built-in, a file, or a HuggingFace config)")
    _add_spec_args(spec)
    spec.add_argument("--from-hf", metavar="CONFIG", help="a HuggingFace config.json (or the model folder holding it)")
    spec.add_argument("--name", help="the spec's name (with --from-hf)")
    spec.add_argument("--layer", type=int, help="which layer, when the model's layers differ (with --from-hf)")
    spec.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], help="override the config's dtype (with --from-hf)")
    spec.add_argument("-o", "--output", metavar="FILE", help="write the TOML here (atomically) instead of printing it")
    spec.add_argument(
        "--fields", nargs="?", const="text", choices=["text", "markdown", "json"], metavar="FORMAT",
        help="print the reference of every spec-file field (type, accepted values, default, example) and stop; "
        "FORMAT text (default), markdown or json",
    )
    spec.set_defaults(func=cmd_spec)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``tilegen`` command: 0 done, 1 a failed check, 2 an error (one line per error on stderr),
    130 interrupted (Ctrl-C at any point, start-up included: one line, no traceback), 141 a closed
    pipe."""
    args = None
    try:
        args = build_parser().parse_args(argv)  # imports the specs, targets and strategies: Ctrl-C lands here too
        from tilegen.core import progress

        with progress.shown(force=getattr(args, "progress", None)):  # bars of the long steps, on a terminal
            rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        # the reader went away (``tilegen run ... | head -1``): stop quietly, as ``yes | head`` does.
        # stdout is pointed at /dev/null so that Python's final flush does not complain again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 128 + 13  # the shell's status for a process ended by SIGPIPE
    except TilegenError as exc:
        if getattr(args, "debug", False):
            raise
        for line in str(exc).splitlines() or [""]:  # several errors of one spec: one line each
            print(f"tilegen: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tilegen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
