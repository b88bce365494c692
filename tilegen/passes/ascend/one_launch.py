"""Ascend pass ``one-launch`` and its knob ``@sync_all`` (last): every kernel of a program after the first gets
:class:`SyncAll`: the program runs as one launch whose kernels are separated by the all-core barrier
``SyncAll<false>()`` (the backward's pre, pre_kv, main, post, post_kv: one launch and four barriers instead of
five launches, as ops-transformer's FlashAttentionScoreGrad does its zeroing, main loop, scale and cast).
Legal because every kernel is MIX_AIC_1_2 and launched on at most the chip's AI Cores (the barrier needs every
block resident: asc-devkit SyncAll.md, 约束说明), and the hand-off flag ids stay in 0-10 (SyncAll takes 11-14).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen.core.annotations import Annotation, Site
from tilegen.core.ir import Program
from tilegen.passes.driver import Pass


@dataclass(frozen=True)
class SyncAll(Annotation, key="sync_all", on=("Kernel",)):
    """The kernel runs in the previous kernel's launch, after a barrier of every core of that launch
    (Ascend ``SyncAll<false>()``: every store of the earlier kernels has landed before any core goes on),
    in place of a launch of its own (:meth:`joins_launch`). The program's values are unchanged: the
    barrier orders the kernels as the launch boundary did."""

    def joins_launch(self) -> bool:
        return True

    def check(self, node, at: Site) -> str:
        if at.index == 0:
            return "sync_all on the first kernel: there is no earlier kernel whose launch it could join"
        return ""

    def note(self, node) -> str:
        return "in the previous kernel's launch, after SyncAll"


def one_launch(program: Program, target) -> Program:
    """Put :class:`SyncAll` on every kernel after the first (see the module docstring) on a target
    whose cube and vector units hand tiles through GM (their kernels are MIX, launched on every AI Core);
    elsewhere, or for a program of one kernel, the program is returned as it is."""
    if target.placement.get("handoff") != "GM" or len(program.kernels) < 2:
        return program
    kernels = program.kernels[:1] + tuple(k.annotate(SyncAll()) for k in program.kernels[1:])
    return dataclasses.replace(program, kernels=kernels)


PASS = Pass("one-launch", lambda p, c: one_launch(p, c.target), "the program's kernels in one launch, SyncAll between two of them (@sync_all)")
