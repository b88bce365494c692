"""Backends: the NumPy interpreter, Ascend C (with its CPU twin) and Triton.

Code generators return a :class:`~tilegen.backends.output.Generated` (file name -> text, and the
manifest facts) that :func:`~tilegen.backends.output.write` puts on disk.
"""

from __future__ import annotations

from tilegen.backends.output import Generated, write  # noqa: F401  (the public names of generate's result)
from tilegen.core.errors import SpecError


def check_gpu_dkv(dkv_strategy: str | None, target) -> None:
    """A GPU target's Triton backward keeps dK, dV on chip: ``dkv_strategy`` must resolve to on-chip.

    Raises:
        SpecError: ``"atomic"`` (or an unknown strategy)."""
    from tilegen.passes.pipeline import resolve_dkv_strategy

    if resolve_dkv_strategy(dkv_strategy, target) != "on-chip":
        raise SpecError("dkv_strategy", dkv_strategy, "on-chip or auto for a GPU target (its Triton backward keeps dK, dV on chip)")


def dq_strategy_for(spec, target, dq_strategy: str | None = None, tile_sizes=None) -> str:
    """The backward's dQ strategy for ``spec`` on ``target``: ``dq_strategy`` when given; on a GPU target
    the one its schedule takes (:func:`tilegen.backends.triton.schedule`: the first backward
    ``[[triton.schedule]]`` row that applies, else ``triton.dq_strategy``); otherwise (an Ascend
    target, or none) ``"atomic"``. What ``generate``, ``inspect`` and ``run`` use when no strategy is
    named, so that the three agree with ``tilegen.torch``.

    Raises:
        TargetError: an unknown target; ScheduleError: ``tile_sizes`` that do not fit it."""
    if dq_strategy is not None or target is None:
        return dq_strategy or "atomic"
    from tilegen.core.targets import load_target

    tgt = load_target(target)
    if tgt.kind != "gpu":
        return "atomic"
    from tilegen.backends import triton as backend

    return backend.schedule(spec, tgt, None, tile_sizes)[1].program.attr("dq_strategy")


def generate(spec, target, dq_strategy: str | None = None, tile_sizes=None, dkv_strategy: str | None = None) -> Generated:
    """The file set of ``spec`` for ``target``: Triton for a GPU target, Ascend C for an Ascend one
    (see :func:`tilegen.backends.triton.generate` and :func:`tilegen.backends.ascendc.generate`).
    ``dq_strategy`` None: the target's choice (:func:`dq_strategy_for`).
    ``dkv_strategy`` (Ascend C only; the Triton backward keeps dK, dV on chip): as
    :func:`tilegen.passes.pipeline.resolve_dkv_strategy`.

    Raises:
        SpecError: ``dkv_strategy="atomic"`` for a GPU target, or an unknown strategy.
    """
    from tilegen.core.targets import load_target

    if load_target(target).kind == "gpu":
        from tilegen.backends import triton as backend

        check_gpu_dkv(dkv_strategy, target)
        return backend.generate(spec, target, dq_strategy=dq_strategy, tile_sizes=tile_sizes)
    from tilegen.backends import ascendc as backend

    return backend.generate(spec, target, dq_strategy=dq_strategy or "atomic", tile_sizes=tile_sizes, dkv_strategy=dkv_strategy)


