"""The pass driver: a backend's pass list (data) walked over a program, the verifier after every pass.

A :class:`Pass` is a name, a function ``(program, ctx) -> program`` and one line saying why it is there
(``tilegen inspect --passes`` prints the lists). :func:`run_passes` runs a list in order; after each pass
the verifier checks the result (with the target once every buffer is placed; after a pass declared to
add annotations only, :func:`~tilegen.passes.verify.verify_annotating`: nothing else changed, and each
annotation passes its check) and the :class:`PassLog` records it, under the pass's name, for
``tilegen inspect --print-after-all``. A *search* pass (the tile
search, the choice of a measured schedule row, of the dK/dV strategy) also gets ``rest``: a function
that runs the passes after it on a candidate program, unrecorded, so that it can judge each candidate
by the program those passes make of it (or by their refusal); the driver then runs the rest on the
search's choice and records it. No pass mutates its input (DESIGN §1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from tilegen.core.ir import Program
from tilegen.passes.place import placed
from tilegen.passes.verify import verify, verify_annotating


@dataclass(frozen=True)
class Options:
    """What a request fixes before the passes run; a pass reads only what concerns it.

    Attributes:
        dq_strategy: ``atomic`` | ``separate`` (the fused backward's dQ reduction), None: the target's.
        dkv_strategy: ``atomic`` | ``on-chip`` | ``auto`` | None (:meth:`tilegen.backends.compiler.Backend.resolve`).
        fused: False keeps the backward's three phases apart.
        tile_sizes: (Br, Bc) forced, or None (the tile search, or the defaults without a target).
        num_stages: ((kernel phase, copies), ...) a serial loop's loaded tiles get, or None (2).
        group_split, heavy_first, dq_tiles: the fused backward's GQA and dq-kernel knobs; heavy_first
            is also the forward's (DESIGN §5). ``dq_tiles`` None: the measured row's, else ``same``.
        schedule_rows: the target's measured schedule rows choose tiles and knobs (a GPU target's
            ``[[triton.schedule]]``: :mod:`tilegen.passes.gpu.rows`); ``tile_sizes`` may then be
            ``{"fwd": pair, "bwd": pair}``.
        launch: the caller's launch knobs, ((kernel phase, num_warps, num_stages), ...) (a GPU target's).
        row: set by a search that fixed the options of one candidate (the row select-row tries), for the
            passes that record it; None at the request.
    """

    dq_strategy: str | None = None
    dkv_strategy: str | None = None
    fused: bool = True
    tile_sizes: Any = None
    num_stages: tuple | None = None
    group_split: int = 1
    heavy_first: bool = False
    dq_tiles: str | None = "same"
    schedule_rows: bool = False
    launch: tuple = ()
    row: Any = None

    def replace(self, **changes) -> "Options":
        return dataclasses.replace(self, **changes)


def stages_key(num_stages) -> tuple | None:
    """``num_stages`` ({kernel phase: copies}) as a sorted tuple (hashable, a stable cache key), or None."""
    return None if not num_stages else tuple(sorted((str(k), int(v)) for k, v in dict(num_stages).items()))


@dataclass(frozen=True)
class Context:
    """What every pass of one compile may read: the spec, the target (None: no target, the
    interpreter's defaults), which program (``fwd`` or ``bwd``), the request's :class:`Options`, and
    the :class:`PassLog` of the run (where the tile search leaves its table of candidates for reports;
    a search's trial runs get a scratch one)."""

    spec: Any
    target: Any
    which: str
    options: Options = Options()
    log: "PassLog | None" = field(default=None, compare=False)

    def with_options(self, **changes) -> "Context":
        return dataclasses.replace(self, options=self.options.replace(**changes))


@dataclass(frozen=True)
class Pass:
    """One entry of a pass list.

    Attributes:
        name: how ``inspect --passes`` and the pass log name it.
        run: ``run(program, ctx) -> program``; a search pass: ``run(program, ctx, rest) -> (program, ctx,
            done)``, where ``rest(program, ctx) -> (program, log)`` runs the passes after it on a
            candidate into a log of its own (it raises what they raise); the search returns its choice
            (before those passes), the context the rest runs with (a measured row may fix options
            the later passes read) and ``done``: ``rest``'s result for the choice when it has it
            (the driver then takes it instead of running the rest again), else None.
        doc: one line: what the pass decides and why it is there.
        search: whether ``run`` takes ``rest``.
        example: for a search that runs, for each candidate, the list of the options the candidate fixes
            (not ``rest``): the context of one candidate, whose list ``tilegen inspect --passes``
            shows after the search; None otherwise.
        annotates: the pass only adds annotations and attrs (how a backend renders the program, never
            what it computes: annotations whose hooks keep their defaults): the driver checks that the
            rest of the program is unchanged and runs the annotations' checks
            (:func:`~tilegen.passes.verify.verify_annotating`) instead of the whole verifier again.
    """

    name: str
    run: Callable[..., Program]
    doc: str
    search: bool = False
    example: Callable[["Context"], "Context"] | None = None
    annotates: bool = False


@dataclass
class PassLog:
    """The program after each pass, in order (name, program), and the schedule when a target chose one."""

    steps: list[tuple[str, Program]] = field(default_factory=list)
    schedule: object = None
    verified: bool = True  # False in a search's trial runs: the driver verifies the choice when it runs it

    def record(self, name: str, program: Program, target=None) -> Program:
        """Verify ``program`` (naming the pass on failure), remember it, return it."""
        if self.verified:
            verify(program, name, target)
        self.steps.append((name, program))
        return program


def run_passes(program: Program | None, passes: tuple[Pass, ...], ctx: Context, log: PassLog | None = None) -> Program:
    """``program`` after each of ``passes`` in order, each verified (with ``ctx.target`` once the
    program is placed) and recorded in ``log`` (None: a scratch log). A pass may return the program
    unchanged; the first pass of a list may build the program from ``ctx`` (``program`` None)."""
    log = log if log is not None else PassLog()
    ctx = dataclasses.replace(ctx, log=log)
    for n, p in enumerate(passes):
        if not p.search:
            before, program = program, p.run(program, ctx)
            if program is None:
                raise TypeError(f"pass {p.name} returned no program")
            if p.annotates:
                verify_annotating(before, program, p.name)
                log.steps.append((p.name, program))
            else:
                log.record(p.name, program, _verify_target(program, ctx))
            continue
        rest = passes[n + 1:]

        def trial(prog: Program, c: Context) -> tuple[Program, PassLog]:
            trial_log = PassLog(verified=False)
            return run_passes(prog, rest, c, trial_log), trial_log

        program, ctx, done = p.run(program, ctx, trial)
        ctx = dataclasses.replace(ctx, log=log)
        if program is not None:  # a search ahead of the build (the dK/dV strategy) chooses options only
            log.record(p.name, program, _verify_target(program, ctx))
        if done is not None:  # the search ran the rest on its choice already
            final, trial_log = done
            log.steps.extend(trial_log.steps)
            log.schedule = trial_log.schedule if trial_log.schedule is not None else log.schedule
            return final
    return program


def _verify_target(program: Program, ctx: Context):
    """The target the verifier checks ``program`` against: ``ctx``'s once every buffer is placed."""
    return ctx.target if ctx.target is not None and placed(program) else None
