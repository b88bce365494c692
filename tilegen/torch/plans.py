"""The plan table: the per-call fast path of :mod:`tilegen.torch`.

A call is checked, its :class:`~tilegen.torch.call.Call` and spec built and validated and its module
loaded once per *key*: everything the checks and the kernels depend on, that is each tensor's type,
dtype, device, shape and strides and every scalar argument with its type (True == 1 in Python, and a
bool is refused where an int is taken). A later call with the same key (a hit) skips all of that, as
well as the re-reading of the target file (its size and modification time are compared instead: an
edited file misses) and, in eager mode, the dispatcher of the custom ops: the kernels run through
:class:`tilegen.torch.ops.FastAttention`, an autograd function over the same module calls. Keys of
four kinds share one table: the entry points' own arguments (``("sdpa", ...)``, ``("flash", ...)``,
:func:`fast_key`), so that even their argument checks are skipped on a hit; the custom ops' arguments
(``("op", ...)``, :func:`op_plan`), for calls under ``torch.compile``; the calls with sinks,
softcap or ALiBi and packed batches (``("extras", ...)``, :mod:`tilegen.torch.extras`); and
``flex_attention``'s (``("flex", ...)``, :mod:`tilegen.torch.flex`: its mods by object). The
``mask_mod=``/``score_mod=`` calls of the other entry points never take it. The table is bounded: a
full one drops its least recently used key. Nothing on it reads a tensor's values on the host (no
device synchronisation), so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from tilegen.torch.call import Call

PLANS: dict[tuple, Any] = {}  # key -> Plan or extras.ExtrasPlan, least recently used first
PLAN_LIMIT = 256  # keys kept; a full table drops its least recently used key (LRU)
PLAN_STATS = {"hits": 0, "misses": 0}  # counters of the table, for tests and benchmarks
FAST_DEVICES = ("cuda",)  # devices whose calls take the fast path (tests add "cpu": the Triton interpreter)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


@dataclass(frozen=True)
class Plan:
    """What a hit needs: the loaded Triton module (its ``forward``/``backward`` take the tensors), the
    (path, mtime_ns, size) of the target file it was generated from and the call it was built for."""

    module: Any
    stamp: tuple
    call: Call | None = None


def stamp(target: str) -> tuple:
    """(path, mtime_ns, size) of the target file ``target`` names."""
    from tilegen.core.targets import load_target

    path = load_target(target).path
    st = os.stat(path)
    return (path, st.st_mtime_ns, st.st_size)


def fresh(plan) -> bool:
    """The target file the plan was made from still has its size and modification time."""
    try:
        st = os.stat(plan.stamp[0])
    except OSError:
        return False
    return (st.st_mtime_ns, st.st_size) == plan.stamp[1:]


def meta(x: torch.Tensor) -> tuple:
    """The part of a key a tensor gives: dtype, device, shape, strides."""
    return (x.dtype, x.device, x.shape, x.stride())


def lookup(key):
    """The plan of ``key`` if its target file is unchanged (it becomes the most recently used)."""
    plan = PLANS.pop(key, None) if key is not None else None
    if plan is not None and fresh(plan):
        PLAN_STATS["hits"] += 1
        PLANS[key] = plan  # a dict keeps insertion order: the end is the most recently used
        return plan
    return None


def store(key, plan) -> None:
    """Keep ``plan`` under ``key``; a full table drops its least recently used key."""
    PLAN_STATS["misses"] += 1
    PLANS.pop(key, None)
    while len(PLANS) >= PLAN_LIMIT:
        del PLANS[next(iter(PLANS))]
    PLANS[key] = plan


def op_plan(q, k, v, args: tuple, call: Call | None = None) -> Plan:
    """The plan of a custom-op call without mods, keyed by the ops' scalar ``args``
    (:meth:`Call.op_args` order): on a miss the call is checked (``call``, when the entry point built
    it; else :meth:`Call.from_op`), the target checked, the spec built and validated (errors name the
    argument) and the module loaded.

    Raises:
        SpecError (ValueError): as :func:`tilegen.torch.attention_fwd`.
    """
    key = ("op", meta(q), meta(k), meta(v), *((type(a), a) for a in args[:-3]))
    plan = lookup(key)
    if plan is not None:
        return plan
    from tilegen.backends import triton as triton_backend
    from tilegen.torch import device

    if call is None:
        call = Call.from_op(q, k, v, *args)
    else:
        device.check_gpu_target(call.target)
    plan = Plan(triton_backend.load(call.spec(()), call.target, call.dq_strategy), stamp(call.target), call)
    store(key, plan)
    return plan


def eager_plain(*xs) -> bool:
    """Plain tensors (no subclass, fake tensors among them; None allowed) in an eager call: not under
    ``torch.compile``, a dispatch mode or a torch.func transform, where calls must be seen as they are."""
    if any(x is not None and type(x) not in _PLAIN for x in xs):
        return False
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0 or torch._C._are_functorch_transforms_active())


def fast_key(kind: str, q, k, v, *scalars):
    """The entry-point key of an eager call that may take the fast path, or None: under
    ``torch.compile``, a dispatch mode or a torch.func transform (the custom ops must be seen there),
    for tensor subclasses (fake tensors among them), for devices outside :data:`FAST_DEVICES` and for an
    unhashable argument."""
    if q.device.type not in FAST_DEVICES or not eager_plain(q, k, v):
        return None
    return hashable((kind, meta(q), meta(k), meta(v), *((type(x), x) for x in scalars)))


def hashable(key):
    """``key``, or None when an argument in it is unhashable (the slow path's checks then name it)."""
    try:
        hash(key)
    except TypeError:
        return None
    return key
