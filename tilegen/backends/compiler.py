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
from tilegen.passes.driver import Context, Options, Pass, PassLog, run_passes, stages_key  # noqa: F401  (stages_key re-exported)
from tilegen.passes.tiles import rescheduled


class Backend:
    """A target's compiler: its pass list, the defaults of a request on it, and what it offers besides
    (the questions the CLI and the reports would otherwise answer by the target's kind).

    Attributes:
        name: ``interp``, ``ascendc`` or ``triton``.
        dkv_default: what ``dkv_strategy`` None or ``"auto"`` means on it (``"auto"``: the backend's
            list chooses, by the cost model).
        dkv_strategies: the dK/dV strategies its backward takes.
        twin: its emitted code runs on a CPU twin of the target's API (``tilegen run --twin``).
        simulates: ``tilegen inspect --simulate`` times its emitted code instruction by instruction
            (with the target's ``[timeline]`` table).
        compiles: ``tilegen inspect --compile`` compiles its kernels for the target's architecture on
            this machine.
        torch_module: ``tilegen.torch`` loads and runs the module it generates.
        gm_handoff: its cube and vector hand tiles to each other through GM (per-core hand-off tiles).
        words: how reports name the target's parts: ``units`` (the roofline's compute units),
            ``footprint_per`` (what a footprint is per), ``traffic`` (the traffic line's head).
    """

    name = ""
    dkv_default = "on-chip"
    dkv_strategies: tuple[str, ...] = tuple(DKV_STRATEGIES)
    twin = False
    simulates = False
    compiles = False
    torch_module = False
    gm_handoff = False
    words = {
        "units": "cube, vector",
        "footprint_per": "per AI core",
        "traffic": "GM traffic by tensor (ws_* are per-core hand-off tiles, L2-resident): ",
    }

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

    def check_dkv(self, dkv_strategy: str | None) -> None:
        """Refuse a ``dkv_strategy`` this backend's backward does not take (:attr:`dkv_strategies`).

        Raises:
            SpecError: an unknown strategy, or one it does not take."""
        resolved = self.resolve(Options(dkv_strategy=dkv_strategy)).dkv_strategy
        if resolved != DKV_AUTO and resolved not in self.dkv_strategies:
            raise SpecError("dkv_strategy", dkv_strategy, f"{' or '.join(self.dkv_strategies)} or auto for the {self.name} backend")

    def emitted_options(self, which: str, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None) -> Options:
        """The options of the ``which`` program this backend emits for a request: ``dq_strategy`` None is
        atomic, ``tile_sizes`` forced or None."""
        if which == "fwd":
            return Options(tile_sizes=tile_sizes)
        return Options(dq_strategy=dq_strategy or "atomic", tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)

    def emitted(self, spec, which: str, target, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None,
                log: PassLog | None = None) -> Program:
        """The ``which`` (``fwd`` or ``bwd``) program of ``spec`` as this backend emits it for ``target``
        (:meth:`emitted_options`); raises as :func:`compile_program`."""
        self.check_dkv(dkv_strategy)
        return compile_program(spec, which, self, target, self.emitted_options(which, dq_strategy, tile_sizes, dkv_strategy), log)

    def dq_strategy(self, spec, target, tile_sizes=None) -> str:
        """The backward's dQ strategy when the request names none: ``atomic``."""
        return "atomic"

    def generate(self, spec, target, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None):
        """The file set of ``spec`` for ``target`` (a :class:`~tilegen.backends.output.Generated`).

        Raises:
            SpecError: this backend generates no files."""
        raise SpecError("target", target, "a target whose backend generates code (give --target)")


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
