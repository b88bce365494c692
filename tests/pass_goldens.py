"""The Before/Expected goldens of every pass (tests/golden/passes/<pass>.txt), shared by
tests/test_pass_goldens.py and tests/golden/regen.py.

A golden file holds a case line (the spec, target, program and options the pass runs with), then the
program before the pass and the program it should make of it, both in the printer's text
(:func:`tilegen.core.printer.format_program`)::

    # pass: <name>
    # case: {'spec': 'tiny', 'target': 'ascend910b2', 'program': 'bwd', 'options': {...}}
    # ---- before
    <program text; empty for the pass that builds the program from the spec>
    # ---- expected
    <program text>

The test parses the Before text (:func:`tilegen.core.parser.parse_program`), runs the one pass on it as
the driver runs it (a search pass gets the passes after it in its list as ``rest``; the verifier after
it) and compares the printed result with the Expected text. The passes are those of the front, Ascend
and GPU lists under the :data:`CASES` below; the regeneration picks, for each, the first case whose
compile the pass changes, so that every golden shows the pass acting.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from tilegen.backends import backend_for
from tilegen.core.parser import parse_program
from tilegen.core.printer import format_program
from tilegen.core.spec import builtin_spec
from tilegen.core.targets import load_target
from tilegen.passes.driver import Context, Options, PassLog, run_passes
from tilegen.passes.verify import verify

GOLDEN_PASSES = Path(__file__).resolve().parent / "golden" / "passes"
BEFORE, EXPECTED = "# ---- before", "# ---- expected"

_A = {"dq_strategy": "atomic"}
_S = {"dq_strategy": "separate"}
# Small cases in order of preference: the regeneration takes the first whose compile a pass changes.
CASES: tuple[dict, ...] = tuple(
    {"spec": spec, "target": target, "program": which, "options": options}
    for spec, target, which, options in (
        ("tiny", None, "fwd", {}),
        ("tiny", None, "bwd", _A),
        ("tiny", None, "bwd", _S),
        ("tiny", None, "fwd", {"heavy_first": True}),
        ("tiny-gqa", None, "bwd", {**_A, "group_split": 2}),
        ("tiny-gqa", None, "bwd", {**_A, "group_split": 2, "heavy_first": True}),
        ("tiny-gqa", None, "bwd", {**_A, "heavy_first": True}),
        ("tiny", None, "bwd", {**_S, "dq_tiles": "transposed"}),
        ("tiny", "h200", "fwd", {}),
        ("tiny", "h200", "bwd", _A),
        ("tiny", "ascend910b2", "fwd", {}),
        ("tiny", "ascend910b2", "bwd", {**_A, "dkv_strategy": "atomic"}),
        ("tiny", "ascend910b2", "bwd", {**_A, "dkv_strategy": "on-chip"}),
        ("tiny", "ascend910b2", "bwd", {**_A, "dkv_strategy": "auto"}),
        ("demo", "ascend910b2", "fwd", {}),
        ("demo", "ascend910b2", "bwd", {**_A, "dkv_strategy": "atomic"}),
        ("llama3-8b", "ascend910b2", "fwd", {}),
        ("llama3-8b", "ascend910b2", "bwd", {**_A, "dkv_strategy": "atomic"}),
    )
)


def slug(name: str) -> str:
    """A pass name as a file name: ``fuse dv+ds+dqdk`` -> ``fuse-dv+ds+dqdk``."""
    return re.sub(r"[^A-Za-z0-9+_]+", "-", name).strip("-").lower()


def context(case: dict) -> Context:
    """The driver's context of ``case`` (options resolved by the target's backend, as a compile does)."""
    target = case["target"]
    backend = backend_for(target)
    options = backend.resolve(Options(**case["options"]))
    return Context(builtin_spec(case["spec"]), load_target(target) if target else None, case["program"], options)


def pass_list(case: dict) -> tuple:
    return backend_for(case["target"]).passes(context(case))


def all_pass_names() -> list[str]:
    """Every pass name of the lists of :data:`CASES` (front, interpreter, Ascend, GPU), in order, once."""
    names: list[str] = []
    for case in CASES:
        for p in pass_list(case):
            if p.name not in names:
                names.append(p.name)
    return names


def run_one(case: dict, name: str, program):
    """``program`` after the pass ``name`` of ``case``'s list, as :func:`~tilegen.passes.driver.run_passes`
    runs it (verified; a search gets the passes after it as ``rest``). A search that decides ahead of
    the build (the dK/dV strategy) gives the program of its choice after the whole list."""
    ctx = context(case)
    passes = pass_list(case)
    n = [p.name for p in passes].index(name)
    p = passes[n]
    ctx = dataclasses.replace(ctx, log=PassLog())
    if not p.search:
        out = p.run(program, ctx)
    else:
        rest = passes[n + 1:]

        def trial(prog, c):
            log = PassLog(verified=False)
            return run_passes(prog, rest, c, log), log

        out, _, done = p.run(program, ctx, trial)
        if out is None:
            return done[0]
    target = ctx.target
    from tilegen.passes.place import placed

    verify(out, name, target if target is not None and placed(out) else None)
    return out


def compiled_steps(case: dict) -> list[tuple[str, str, str]]:
    """(pass name, text before, text after) for each pass of ``case``'s compile, in order."""
    ctx = context(case)
    passes = pass_list(case)
    log = PassLog()
    final = run_passes(None, passes, ctx, log)
    if len(passes) == 1 and passes[0].search:  # a search ahead of the build: the whole list is its effect
        return [(passes[0].name, "", format_program(final))]
    out, before = [], ""
    for step, program in log.steps:
        text = format_program(program)
        out.append((step, before, text))
        before = text
    return out


def golden_text(name: str, case: dict, before: str, expected: str) -> str:
    return f"# pass: {name}\n# case: {case!r}\n{BEFORE}\n{before}{EXPECTED}\n{expected}"


def read_golden(path: Path) -> tuple[str, dict, str, str]:
    """(pass name, case, before text, expected text) of a golden file."""
    text = path.read_text()
    head, _, rest = text.partition(BEFORE + "\n")
    before, _, expected = rest.partition(EXPECTED + "\n")
    lines = head.splitlines()
    name = lines[0].removeprefix("# pass: ")
    case = ast.literal_eval(lines[1].removeprefix("# case: "))
    return name, case, before, expected


def regenerate() -> list[str]:
    """Write the golden of every pass (the first case that the pass changes); the names of passes no
    case changes (none should be left: add a case)."""
    GOLDEN_PASSES.mkdir(parents=True, exist_ok=True)
    wanted = all_pass_names()
    found: dict[str, tuple] = {}
    for case in CASES:
        if all(n in found for n in wanted):
            break
        for step, before, after in compiled_steps(case):
            if step in wanted and step not in found and before != after:
                found[step] = (case, before, after)
    for path in GOLDEN_PASSES.glob("*.txt"):
        path.unlink()
    for name, (case, before, after) in found.items():
        (GOLDEN_PASSES / f"{slug(name)}.txt").write_text(golden_text(name, case, before, after))
    return [n for n in wanted if n not in found]


def parse_before(before: str):
    return parse_program(before) if before.strip() else None
