"""Ascend pass ``stream-programs`` and its knob ``@stream`` (a kernel; DESIGN §2, streamed programs): a kernel
whose program body :func:`tilegen.models.stages.stream_split` accepts (opening statements, one pipelined loop,
closing statements) gets :class:`Stream`, with ``lookahead + 1`` copies of each buffer both streams access per
program, where the levels still fit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Program, lookahead_of
from tilegen.models.stages import stream_split
from tilegen.passes.ascend.common import env_of, fits
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class Stream(Annotation, key="stream", on=("Kernel",)):
    """The programs a core runs form one stream of tile pairs, and the software-pipelined loop of the
    program body (:class:`~tilegen.core.ir.Pipelined`) runs across program boundaries: a unit's earlier
    stage (and each program's opening statements that it needs) of the pair ``lookahead`` pairs ahead is
    issued before its later stage (and, after a program's last pair, the program's closing statements) of
    this one, even when the two pairs belong to different programs. The buffers both streams use per
    program get ``lookahead + 1`` copies (:func:`tilegen.models.stages.stream_split`); the footprints keep
    what lives over the loop live over the body (:meth:`streams`). The values are unchanged."""

    def streams(self) -> bool:
        return True

    def check(self, node, at: Site) -> str:
        return "" if stream_split(node) is not None else "the program body is not one pipelined loop between plain statements"

    def note(self, node) -> str:
        return "programs streamed: the pipelined loop runs across them"


def stream_programs(program: Program, target) -> Program:
    """Put :class:`Stream` on every kernel of an Ascend target whose program
    body :func:`stream_split` accepts, with ``lookahead + 1`` copies (``Buffer.stages``) of each buffer
    both streams access per program, where the levels still fit with those buffers, and every buffer
    that lives over the whole pipelined loop, live over the whole body (the opening and closing
    statements run between other programs' pairs; :func:`tilegen.models.footprint.live_intervals`); other
    kernels are unchanged."""
    if target.placement.get("handoff") != "GM":
        return program
    env = env_of(program)
    kernels = []
    for k in program.kernels:
        split = stream_split(k)
        if split is None:
            kernels.append(k)
            continue
        copies = lookahead_of(split.loop) + 1
        cross = split.cross["cube"] | split.cross["vector"]
        if any(b.stages > 1 for b in k.buffers if b.name in cross):
            kernels.append(k)  # a per-program buffer that already rotates (not produced by the lowering)
            continue
        new = dataclasses.replace(
            k, buffers=tuple(dataclasses.replace(b, stages=copies) if b.name in cross else b for b in k.buffers)
        ).annotate(Stream())
        kernels.append(new if fits(new, target, env) else k)
    return dataclasses.replace(program, kernels=tuple(kernels))


PASS = Pass("stream-programs", lambda p, c: stream_programs(p, c.target), "a core's programs as one stream of tile pairs (@stream)")
