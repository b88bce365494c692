"""One protocol every target implements, and the one driver that compiles for any of them.

A :class:`Backend` says which passes it runs (data: :meth:`Backend.passes`, printed by ``tilegen inspect
--passes``), how the request's options default on it (:meth:`Backend.resolve`), and, where it emits
code, how a compiled program becomes its own typed form (``lower``) and files (``render``). :func:`compile`
builds the program of a spec and runs a backend's list over it with the pass driver
(:func:`tilegen.passes.driver.run_passes`: the verifier after every pass), through the on-disk compile
cache (:mod:`tilegen.core.cache`). Nothing outside a backend and its pass list asks which target it is.
"""

from __future__ import annotations

import dataclasses

from tilegen.core.cache import cached
from tilegen.core.errors import SpecError
from tilegen.core.ir import Program
from tilegen.core.strategies import DKV_AUTO, DKV_STRATEGIES
from tilegen.core.targets import target_key
from tilegen.passes.driver import Context, Options, Pass, PassLog, run_passes
from tilegen.passes.tiles import rescheduled


class Backend:
    """A target's compiler: its pass list and the defaults of a request on it.

    Attributes:
        name: ``interp``, ``ascendc`` or ``triton``.
        dkv_default: what ``dkv_strategy`` None or ``"auto"`` means on it (``"auto"``: the backend's
            list chooses, by the cost model).
    """

    name = ""
    dkv_default = "on-chip"

    def passes(self, ctx: Context) -> tuple[Pass, ...]:
        """The passes that compile ``ctx``'s program for this target, in order."""
        raise NotImplementedError

    def lower(self, program: Program, target, spec, label: str):
        """``program`` (``"fwd"`` or ``"bwd"`` by ``label``, compiled by :func:`compile_program` for the
        loaded ``target``) in this backend's own typed form (for Ascend C, a
        :class:`tilegen.backends.ascendc.ProgramPlan` of typed ops, :mod:`tilegen.backends.ascendc.ops`).

        Raises:
            NotImplementedError: the backend emits no code through a typed form (the interpreter)."""
        raise NotImplementedError(f"the {self.name} backend has no typed lowering")

    def render(self, plan):
        """The files of a kernel set (a :class:`tilegen.backends.output.Generated`: name -> text, and its
        manifest) from what :meth:`lower` produced; the backend says what ``plan`` bundles (for Ascend C a
        :class:`tilegen.backends.ascendc.KernelSet`: both programs' plans, the spec and the target).

        Raises:
            NotImplementedError: as :meth:`lower`."""
        raise NotImplementedError(f"the {self.name} backend renders no files from a typed plan")

    def resolve(self, options: Options) -> Options:
        """``options`` with ``dkv_strategy`` resolved for this target (:attr:`dkv_default` for None or
        ``"auto"``).

        Raises:
            SpecError: an unknown ``dkv_strategy``."""
        dkv = options.dkv_strategy
        if dkv not in (None, DKV_AUTO) and dkv not in DKV_STRATEGIES:
            raise SpecError("dkv_strategy", dkv, "one of " + ", ".join([DKV_AUTO, *DKV_STRATEGIES]))
        return options.replace(dkv_strategy=self.dkv_default if dkv in (None, DKV_AUTO) else dkv)


def stages_key(num_stages) -> tuple | None:
    """``num_stages`` ({kernel phase: copies}) as a sorted tuple (hashable, a stable cache key), or None."""
    return None if not num_stages else tuple(sorted((str(k), int(v)) for k, v in dict(num_stages).items()))


def compile_program(spec, which: str, backend: Backend, target=None, options: Options = Options(), log: PassLog | None = None) -> Program:
    """The ``which`` (``"fwd"`` or ``"bwd"``) program of ``spec`` compiled for ``target`` by ``backend``:
    built, through the backend's passes, tile sizes bound and verified. ``log`` receives the program
    after every pass and the tile search's table (``schedule``). Results are cached on disk: a cached
    result fills ``log`` with what the passes recorded when it was built.

    Raises:
        SpecError: an option that does not apply; ScheduleError: no tile sizes fit, or forced ones
            overflow a level; VerifyError: a pass broke the program (a bug)."""
    from tilegen.core.targets import load_target

    log = log if log is not None else PassLog()
    options = backend.resolve(dataclasses.replace(options, num_stages=stages_key(options.num_stages)))
    tgt = load_target(target) if target is not None else None
    ctx = Context(spec, tgt, which, options)

    def build():
        inner = PassLog()
        program = run_passes(None, backend.passes(ctx), ctx, inner)
        if inner.schedule is not None:  # the tile table's footprints and prediction: the program emitted
            inner.schedule = rescheduled(inner.schedule, program, tgt)
        return program, inner.schedule, inner.steps

    program, schedule, steps = cached(("compile", which, spec, backend.name, target_key(target), options), build)
    log.schedule = schedule
    log.steps.extend(steps)
    return program
