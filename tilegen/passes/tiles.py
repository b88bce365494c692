"""Block-size selection: the (Br, Bc) that fits every on-chip level and the cost model likes best.

Candidates are the target's ``[tiles]`` lists (multiples of its hardware granule); a candidate larger
than needed to cover a sequence (when a smaller candidate already covers it) is skipped. For each
candidate the program is bound and, where the caller passes the passes that follow (``then``: on
every target, the rest of its list), taken through them, so that each candidate is judged by the
program that would be emitted for it; its footprints (:mod:`tilegen.models.footprint`) are evaluated per
level and kernel, and it is rejected with the level and the bytes by which it overflows when any
level's peak exceeds the level's usable capacity; the feasible ones are scored with the cost model
(:func:`tilegen.models.cost.predict`; on a GPU target with a ``[gpu_model]`` table, :func:`tilegen.models.cost.predict_gpu`
at the target's default ``num_warps``, which is what a kernel without a measured ``[[triton.schedule]]``
row launches with: the roofline ties every Br there, this model does not). The fastest wins; ties go to
the larger tile area, then the larger Br, so the choice is deterministic.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass

import sympy

from tilegen.models.cost import Prediction, predict, predict_gpu, uses_gpu_model
from tilegen.core.errors import NoTileFits, ScheduleError
from tilegen.core.ir import Bc, Br, Program
from tilegen.core.targets import Target
from tilegen.models.footprint import Footprint, footprint_view, footprints


@dataclass(frozen=True)
class Candidate:
    """One (Br, Bc): its peak bytes per level (largest over kernels), overflow and predicted time."""

    Br: int
    Bc: int
    peaks: tuple[tuple[str, int], ...]
    overflow: tuple[tuple[str, int], ...]  # (level, bytes over its usable capacity)
    time_s: float | None

    @property
    def feasible(self) -> bool:
        return not self.overflow


@dataclass(frozen=True)
class Schedule:
    """The outcome of block-size selection, for reports."""

    target: str
    chosen: tuple[int, int]
    forced: bool
    candidates: tuple[Candidate, ...]
    footprints: tuple[Footprint, ...]
    capacities: tuple[tuple[str, int], ...]
    prediction: Prediction | None = None

    def chosen_candidate(self) -> Candidate:
        return next(c for c in self.candidates if (c.Br, c.Bc) == self.chosen)


def _useful(values: tuple[int, ...], length: int) -> list[int]:
    covering = [v for v in values if v >= length]
    keep = [v for v in values if v < length]
    if covering:
        keep.append(min(covering))
    return keep


def evaluate_candidate(program: Program, target: Target, fps: list[Footprint], br: int, bc: int, score: bool, then=None) -> Candidate:
    """One (Br, Bc): its peak bytes per level and overflows from ``fps``, and, when ``score`` and it
    fits, the model's time. With ``then`` (see :func:`choose_tiles`) the time, peaks and overflows are
    those of the program after ``then`` where it changed the program."""
    env = {str(k): v for k, v in program.env}
    env.update({"Br": br, "Bc": bc})

    def peaks_of(footprints_) -> tuple[dict[str, int], tuple]:
        peaks: dict[str, int] = {}
        for fp in footprints_:
            peaks[fp.level.name] = max(peaks.get(fp.level.name, 0), int(fp.value(env)))
        over = tuple((lvl.name, peaks.get(lvl.name, 0) - lvl.usable) for lvl in target.levels if peaks.get(lvl.name, 0) > lvl.usable)
        return peaks, over

    peaks, overflow = peaks_of(fps)
    time_s = None
    if score and not overflow:
        bound = program.bind({Br: br, Bc: bc})
        after = then(bound) if then is not None else bound
        if after is not bound and footprint_view(after) != footprint_view(bound):  # not annotations alone: its own footprints
            peaks, overflow = peaks_of(footprints(after, target))
        time_s = predict_gpu(after, target).time_s if uses_gpu_model(target) else predict(after, target).time_s
    return Candidate(br, bc, tuple(sorted(peaks.items())), overflow, time_s)


def choose_tiles(program: Program, target: Target, forced: tuple[int, int] | None = None, then=None) -> tuple[Program, Schedule]:
    """Bind Br, Bc of a placed program for ``target``.

    Args:
        forced: (Br, Bc) to use instead of searching; it must still fit.
        then: the passes that follow on the bound program (Program -> Program), which a candidate is
            scored after (their effect depends on the tiles); the returned program has not been through
            them.

    Raises:
        NoTileFits (a ScheduleError): no candidate fits (the message names the limiting level and the
            smallest overflow; ``candidates`` holds every rejected one).
        ScheduleError: the forced sizes overflow a level.
    """
    fps = footprints(program, target)
    sq = program.evaluate(sympy.Symbol("Sq", integer=True, positive=True))
    sk = program.evaluate(sympy.Symbol("Sk", integer=True, positive=True))
    capacities = tuple((lvl.name, lvl.usable) for lvl in target.levels)
    if forced is not None:
        cand = evaluate_candidate(program, target, fps, forced[0], forced[1], score=True, then=then)
        if not cand.feasible:
            level, over = max(cand.overflow, key=lambda x: x[1])
            raise ScheduleError(
                f"tile sizes Br={forced[0]}, Bc={forced[1]} do not fit target {target.name}: "
                f"level {level} needs {over} bytes more than its {dict(capacities)[level]} usable bytes"
            )
        schedule = Schedule(target.name, forced, True, (cand,), tuple(fps), capacities)
    else:
        cands = [
            evaluate_candidate(program, target, fps, br, bc, score=True, then=then)
            for br in _useful(target.tiles["Br"], sq)
            for bc in _useful(target.tiles["Bc"], sk)
        ]
        feasible = [c for c in cands if c.feasible]
        if not feasible:
            smallest = min(cands, key=lambda c: (c.Br * c.Bc, c.Br))
            level, over = max(smallest.overflow, key=lambda x: x[1])
            raise NoTileFits(
                f"no tile sizes fit target {target.name}: even the smallest candidate Br={smallest.Br}, Bc={smallest.Bc} "
                f"overflows level {level} by {over} bytes (usable {dict(capacities)[level]}); the head dims are too large "
                "for this target",
                cands,
                capacities,
            )
        best = min(feasible, key=lambda c: (c.time_s, -c.Br * c.Bc, -c.Br))
        schedule = Schedule(target.name, (best.Br, best.Bc), False, tuple(cands), tuple(fps), capacities)
    bound = program.bind({Br: schedule.chosen[0], Bc: schedule.chosen[1]})
    prediction = predict(bound, target)
    schedule = Schedule(schedule.target, schedule.chosen, schedule.forced, schedule.candidates, schedule.footprints, capacities, prediction)
    return bound, schedule


def rescheduled(schedule: Schedule, program: Program, target: Target) -> Schedule:
    """``schedule`` with the footprints and the roofline prediction of ``program``, the bound program
    after the passes that followed the choice (reports then describe the kernels that are emitted)."""
    return dataclasses.replace(schedule, footprints=tuple(footprints(program, target)), prediction=predict(program, target))
