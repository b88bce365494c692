"""Annotations: typed, immutable facts a pass attaches to the IR node they govern (DESIGN §1).

A target's schedule decisions (a copy waited for at its first reader, a matmul computed in column
chunks, a kernel run in the previous kernel's launch, ...) are not fields of the core nodes: each is an
:class:`Annotation` subclass, defined beside the pass that sets it (``tilegen/passes/ascend/<knob>.py``,
``tilegen/passes/gpu/<pass>.py``), and held in the ``ann`` tuple of the node it governs (a statement,
a ``Loop``, a ``Kernel``, a ``Tensor`` or a ``Buffer``). A node holds at most one annotation of a
class, in the canonical order of their keys, so that equal programs compare equal and print the same
(:class:`Annotated`).

Every annotation class registers under a short key; the printer writes an annotation as
``@key`` (no fields) or ``@key(field=value, ...)`` with every field in declaration order (values:
``True``/``False``, integers, floats, quoted strings, tuples, sympy expressions), so that a parser can
read it back with :func:`annotation_class`. Field values are scalars, tuples of scalars or sympy
expressions.

The analyses below the knob modules (the verifier, the footprints, the cost model, the interpreter, the
IR's own traversal helpers) know no knob by name: they ask every annotation of a node through the hooks
of the base class, whose defaults say "this annotation changes nothing here":

======================  ====================================================================================
``note(node)``          words for the printer, after the ``@key(...)`` form ("" for none)
``check(node, at)``     the legality check the verifier runs after every pass: "" when legal, else why not
                        (``at`` is the node's :class:`Site`)
``scratch()``           on-chip buffers the annotated statement also writes (its fields named in
                        ``BUFFERS``, renamed with the statement's buffers)
``exprs()``             the sympy expressions among the fields (substituted with the statement's indices;
                        the verifier checks that enclosing loops bind their symbols)
``held(stmt)``          buffers the annotated statement keeps live over every loop around it (footprints)
``streams()``           a kernel whose programs a core runs as one stream through its pipelined loop
                        (footprints: what lives over that loop lives over the whole body)
``joins_launch()``      a kernel that runs in the previous kernel's launch, after an all-core barrier
                        (cost model: a barrier instead of a launch)
``zeros_unless()``      a load's value rule: an integer expression of the grid; where it is <= 0 the load
                        gives zeros (the interpreter)
``first_writes()``      an accumulating store's value rule: a program instance's first execution of it
                        writes the tile, the later ones add (the interpreter)
``chunk_columns()``     a matmul computed in chunks of that many columns, each in one half of the result
                        level in turn (footprints: the level is then the chunks' whole)
``pipelined_loads()``   a kernel whose loops a compiler software-pipelines: every copy of a tile loaded with
                        several stages lives over its whole loop (footprints)
``unheld()``            a matmul whose result is never held: emitted fused into its one reader (the GPU cost
                        model: its result takes no registers)
======================  ====================================================================================

The GPU target's annotations (each beside its pass in ``tilegen/passes/gpu/``) only say how the Triton
lowering renders a node: apart from ``pipelined_loads`` and ``unheld``, their hooks keep the defaults,
so the interpreter, the counts and the verifier read a program with them as one without.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, TypeVar

import sympy

_REGISTRY: dict[str, type["Annotation"]] = {}

A = TypeVar("A", bound="Annotation")


@dataclass(frozen=True)
class Site:
    """Where a node sits, for :meth:`Annotation.check`.

    Attributes:
        program: the whole program.
        kernel: the kernel that holds the node (the kernel itself for a kernel; None for a tensor).
        loops: the loops around the node, outermost first.
        body: the statements that hold the node (a statement's), else ().
        index: the node's position in ``body`` (a statement), in ``program.kernels`` (a kernel), in
            ``program.tensors`` (a tensor) or in ``kernel.buffers`` (a buffer).
    """

    program: Any
    kernel: Any = None
    loops: tuple = ()
    body: tuple = ()
    index: int = 0

    @property
    def next(self):
        """The statement after the node in its body, or None."""
        return self.body[self.index + 1] if self.index + 1 < len(self.body) else None

    @property
    def loop(self):
        """The loop whose body holds the node directly, or None (a kernel's top level, or not a statement)."""
        if self.loops and self.body is self.loops[-1].body:
            return self.loops[-1]
        return None


@dataclass(frozen=True)
class Annotation:
    """Base of every annotation (see the module docstring). A subclass is a frozen dataclass declared
    with class keywords ``key`` (its printed name, unique) and ``on`` (the names of the node classes it
    may annotate: ``Load``, ``Store``, ``MatMul``, ``Loop``, ``Kernel``, ``Tensor``, ...); ``BUFFERS``
    names the fields that hold on-chip buffer names."""

    KEY: ClassVar[str] = ""
    ON: ClassVar[tuple[str, ...]] = ()
    BUFFERS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, key: str = "", on: tuple[str, ...] = (), **kwargs):
        super().__init_subclass__(**kwargs)
        if not key:
            raise TypeError(f"annotation class {cls.__name__} needs a key")
        known = _REGISTRY.get(key)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"annotation key {key!r} is taken by {known.__module__}.{known.__qualname__}")
        cls.KEY, cls.ON = key, tuple(on)
        _REGISTRY[key] = cls

    # --- what the printer and a parser use --------------------------------------------------------------

    def values(self) -> tuple[tuple[str, Any], ...]:
        """(field, value) of every field, in declaration order."""
        return tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))

    def note(self, node) -> str:
        """Words the printer adds after the annotation on ``node`` ("": none)."""
        return ""

    # --- hooks (defaults: the annotation changes nothing there) ------------------------------------------

    def check(self, node, at: Site) -> str:
        """Why the annotation is illegal on ``node`` at ``at``; "" when it is legal."""
        return ""

    def scratch(self) -> tuple[str, ...]:
        """On-chip buffers the annotated statement also writes (the fields named in ``BUFFERS``)."""
        return tuple(getattr(self, name) for name in self.BUFFERS if getattr(self, name))

    def exprs(self) -> tuple[sympy.Expr, ...]:
        """The sympy expressions among the fields, in declaration order."""
        return tuple(v for _, v in self.values() if isinstance(v, sympy.Basic))

    def map_exprs(self: A, fn) -> A:
        """The annotation with ``fn`` applied to each sympy-valued field."""
        changes = {k: fn(v) for k, v in self.values() if isinstance(v, sympy.Basic)}
        return dataclasses.replace(self, **changes) if changes else self

    def rename(self: A, names: Mapping[str, str]) -> A:
        """The annotation with its buffer fields (``BUFFERS``) renamed per ``names``."""
        changes = {n: names.get(getattr(self, n), getattr(self, n)) for n in self.BUFFERS}
        return dataclasses.replace(self, **changes) if changes else self

    def held(self, stmt) -> tuple[str, ...]:
        """Buffers ``stmt`` (the annotated statement) keeps live over every loop around it."""
        return ()

    def streams(self) -> bool:
        """Whether a core runs the annotated kernel's programs as one stream through its pipelined loop."""
        return False

    def joins_launch(self) -> bool:
        """Whether the annotated kernel runs in the previous kernel's launch, after an all-core barrier."""
        return False

    def zeros_unless(self) -> sympy.Expr | None:
        """For a load: an integer expression of the grid; where it is <= 0 the load gives zeros."""
        return None

    def first_writes(self) -> bool:
        """For an accumulating store: a program instance's first execution writes, the later ones add."""
        return False

    def chunk_columns(self) -> int:
        """For a matmul: computed in chunks of this many columns, each in one half of the result level in
        turn (the level is then the chunks' whole); 0: computed whole."""
        return 0

    def pipelined_loads(self) -> bool:
        """For a kernel: a compiler software-pipelines its loops (it issues the loads of the next
        ``num_stages − 1`` iterations while this one computes), so every copy of a tile loaded with
        several stages lives over its whole loop."""
        return False

    def unheld(self) -> bool:
        """For a matmul: its result is never held (the backend emits the product fused into its one
        reader), so it takes no registers."""
        return False


def annotation_class(key: str) -> type[Annotation]:
    """The annotation class registered under ``key`` (the printed ``@key``).

    Raises:
        KeyError: no class has that key (the message lists the keys known once the modules that define
            them are imported).
    """
    try:
        return _REGISTRY[key]
    except KeyError:
        raise KeyError(f"no annotation @{key}; known: {', '.join(sorted(_REGISTRY))}") from None


def annotation_keys() -> tuple[str, ...]:
    """The keys registered so far, sorted."""
    return tuple(sorted(_REGISTRY))


class Annotated:
    """What every annotatable node (a frozen dataclass with a field ``ann``) offers: read, add or replace,
    remove. ``ann`` holds at most one annotation of a class, sorted by key."""

    __slots__ = ()

    def get(self, cls: type[A]) -> A | None:
        """The node's annotation of class ``cls``, or None."""
        for a in self.ann:  # type: ignore[attr-defined]
            if type(a) is cls:
                return a
        return None

    def has(self, cls: type[Annotation]) -> bool:
        """Whether the node carries an annotation of class ``cls``."""
        return self.get(cls) is not None

    def annotate(self, *anns: Annotation):
        """The node with ``anns`` added (one of a class already there is replaced).

        Raises:
            TypeError: an annotation does not apply to this node's class (its ``ON``).
        """
        kind = type(self).__name__
        for a in anns:
            if kind not in a.ON:
                raise TypeError(f"@{a.KEY} annotates {', '.join(a.ON)}, not {kind}")
        kept = {type(a): a for a in self.ann}  # type: ignore[attr-defined]
        kept.update({type(a): a for a in anns})
        return dataclasses.replace(self, ann=canonical(kept.values()))

    def unannotate(self, *classes: type[Annotation]):
        """The node without its annotations of ``classes``."""
        kept = tuple(a for a in self.ann if type(a) not in classes)  # type: ignore[attr-defined]
        return self if len(kept) == len(self.ann) else dataclasses.replace(self, ann=kept)  # type: ignore[attr-defined]


def canonical(anns) -> tuple[Annotation, ...]:
    """``anns`` in the canonical order (by key)."""
    return tuple(sorted(anns, key=lambda a: a.KEY))
