"""Backends: the NumPy interpreter, Ascend C (with its CPU twin) and Triton, behind one protocol
(:class:`~tilegen.backends.compiler.Backend`) and one driver (:func:`~tilegen.backends.compiler.compile_program`).

:func:`backend_for` is the one place a target's kind picks its backend; :func:`compile_forward` and
:func:`compile_backward` compile a spec for any target (or none: the interpreter's defaults). Code
generators return a :class:`~tilegen.backends.output.Generated` (file name -> text, and the manifest
facts) that :func:`~tilegen.backends.output.write` puts on disk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilegen.backends.output import Generated, write  # noqa: F401  (the public names of generate's result)

if TYPE_CHECKING:  # the compiler is imported where it is used: generate served from the cache imports none of it
    from tilegen.backends.compiler import Backend
    from tilegen.core.ir import Program
    from tilegen.passes.driver import PassLog


def backend_for(target) -> Backend:
    """The backend that compiles for ``target``: the interpreter's without one, else by the target's kind.

    Raises:
        TargetError: an unknown target."""
    from tilegen.backends import ascendc, interp, triton

    if target is None:
        return interp.BACKEND
    from tilegen.core.targets import load_target

    return {"ascend": ascendc.BACKEND, "gpu": triton.BACKEND}[load_target(target).kind]


def compile_forward(spec, target=None, tile_sizes=None, log: PassLog | None = None, num_stages=None, heavy_first: bool = False) -> Program:
    """The forward program of ``spec`` for ``target`` (None: bound to ``tile_sizes`` or the defaults),
    through its backend's passes. ``num_stages`` ({kernel phase: copies}, ``"*"`` for the rest): the
    copies of a tile loaded in a serial loop the placement counts (default 2). ``heavy_first``: the
    ``fwd`` kernel's Q-tile grid axis outermost (:func:`tilegen.passes.group.heavy_first_forward`).
    Cached on disk; raises as :func:`tilegen.backends.compiler.compile_program`."""
    from tilegen.backends.compiler import compile_program
    from tilegen.passes.driver import Options

    options = Options(tile_sizes=tile_sizes, num_stages=num_stages, heavy_first=bool(heavy_first))
    return compile_program(spec, "fwd", backend_for(target), target, options, log)


def compile_backward(
    spec, *, fused: bool = True, dq_strategy: str = "atomic", target=None, tile_sizes=None, log: PassLog | None = None, num_stages=None,
    group_split: int = 1, heavy_first: bool = False, dkv_strategy: str | None = None, dq_tiles: str = "same",
) -> Program:
    """The backward program of ``spec``: built, fused (unless ``fused=False``), tile sizes bound, through
    the target's passes; ``num_stages`` as :func:`compile_forward`; ``dkv_strategy`` as
    :meth:`~tilegen.backends.compiler.Backend.resolve` (the program's attribute ``dkv_strategy`` names the one built).
    ``group_split`` (programs sharing the query heads of one KV head, a divisor of G) and
    ``heavy_first`` (K/V-tile grid axis outermost) are the fused ``main`` kernel's schedule knobs
    (:func:`tilegen.passes.group.split_group`); ``dq_tiles`` (``same`` or ``transposed``) the separate
    strategy's ``dq`` kernel's (:func:`tilegen.passes.gpu.transpose_dq_tiles.transpose_dq_tiles`).

    Raises:
        SpecError: an unknown ``dq_strategy`` or ``dkv_strategy``, or ``group_split`` not a divisor
            of G, or knobs on an unfused program, or ``dq_tiles`` unknown or ``transposed`` where the
            program has no separate ``dq`` kernel it applies to; otherwise as
            :func:`tilegen.backends.compiler.compile_program`."""
    from tilegen.backends.compiler import compile_program
    from tilegen.passes.driver import Options

    options = Options(
        dq_strategy=dq_strategy, dkv_strategy=dkv_strategy, fused=fused, tile_sizes=tile_sizes, num_stages=num_stages,
        group_split=group_split, heavy_first=bool(heavy_first), dq_tiles=dq_tiles,
    )
    return compile_program(spec, "bwd", backend_for(target), target, options, log)


def pass_lists(spec, target=None, dq_strategy: str | None = None, dkv_strategy: str | None = None, tile_sizes=None) -> dict[str, tuple]:
    """The passes ``target``'s backend runs on the programs of ``spec`` it emits (``fwd``, ``bwd``;
    :meth:`~tilegen.backends.compiler.Backend.emitted_options`), as the driver walks them (a search's
    trials run the passes after it). Where a list begins with a search whose trials run the list of the
    options each candidate fixes (the GPU's select-row, the Ascend dK/dV choice), the list of one
    candidate follows it (:attr:`~tilegen.passes.driver.Pass.example`). What ``tilegen inspect
    --passes`` prints.

    Raises:
        SpecError: an option that does not apply; TargetError: an unknown target."""
    from tilegen.core.targets import load_target
    from tilegen.passes.driver import Context

    backend = backend_for(target)
    tgt = load_target(target) if target is not None else None
    out = {}
    for which in ("fwd", "bwd"):
        options = backend.resolve(backend.emitted_options(which, dq_strategy, tile_sizes, dkv_strategy))
        ctx = Context(spec, tgt, which, options)
        listed = backend.passes(ctx)
        tail = listed
        while tail and tail[0].example is not None:  # the list of one candidate of the search
            ctx = tail[0].example(ctx)
            tail = backend.passes(ctx)
            listed = listed + tail
        out[which] = listed
    return out


def dq_strategy_for(spec, target, dq_strategy: str | None = None, tile_sizes=None) -> str:
    """The backward's dQ strategy for ``spec`` on ``target``: ``dq_strategy`` when given, else the
    backend's (:meth:`~tilegen.backends.compiler.Backend.dq_strategy`: on a GPU target the one its
    schedule takes, the first backward ``[[triton.schedule]]`` row that applies, else
    ``triton.dq_strategy``; otherwise ``"atomic"``). What ``generate``, ``inspect`` and ``run`` use when
    no strategy is named, so that the three agree with ``tilegen.torch``.

    Raises:
        TargetError: an unknown target; ScheduleError: ``tile_sizes`` that do not fit it."""
    if dq_strategy is not None or target is None:
        return dq_strategy or "atomic"
    return backend_for(target).dq_strategy(spec, target, tile_sizes)


def generate(spec, target, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None) -> Generated:
    """The file set of ``spec`` for ``target`` from its backend (Triton for a GPU target, Ascend C for an
    Ascend one: :func:`tilegen.backends.triton.generate`, :func:`tilegen.backends.ascendc.generate`).
    ``dq_strategy`` None: the target's choice (:func:`dq_strategy_for`). ``dkv_strategy`` as
    :meth:`~tilegen.backends.compiler.Backend.resolve` (the Triton backward keeps dK, dV on chip).

    Raises:
        SpecError: ``dkv_strategy="atomic"`` for a GPU target, or an unknown strategy.
    """
    from tilegen.core.targets import load_target

    return backend_for(load_target(target)).generate(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)
