"""Errors that tilegen raises on bad input.

Every error a user can trigger names the offending field, the value it got and what is accepted, so that
the CLI can print it as one line (``tilegen: error: ...``) and the Python API can raise it as a
``ValueError``.
"""

from __future__ import annotations


class TilegenError(Exception):
    """Base class of every error tilegen reports to a user."""


class SpecError(TilegenError, ValueError):
    """A field of an attention spec, an API argument or a CLI option is invalid.

    Attributes:
        field: the name of the field or argument (``"heads_kv"``, ``"q"``, ``"--seq"``).
        value: the value that was given.
        accepted: what would have been accepted, in words.
    """

    def __init__(self, field: str, value: object, accepted: str, where: str | None = None):
        self.field = field
        self.value = value
        self.accepted = accepted
        self.where = where
        place = f"{where}: " if where else ""
        super().__init__(f"{place}{field} = {value!r} is invalid; accepted: {accepted}")


class MissingFieldError(SpecError):
    """A required field of a spec is absent: ``batch is missing; accepted: ...``."""

    def __init__(self, field: str, accepted: str, where: str | None = None):
        super().__init__(field, None, accepted, where)
        place = f"{where}: " if where else ""
        self.args = (f"{place}{field} is missing; accepted: {accepted} (the field is required)",)


class SpecErrors(SpecError):
    """Several invalid fields of one spec, reported together; ``errors`` lists them (at least one), and
    ``field``, ``value`` and ``accepted`` are those of the first. ``str()`` gives one line per error."""

    def __init__(self, errors: list[SpecError]):
        first = errors[0]
        super().__init__(first.field, first.value, first.accepted, first.where)
        self.errors = list(errors)
        self.args = ("\n".join(str(e) for e in self.errors),)


class ScheduleError(TilegenError):
    """No schedule satisfies the target's limits (names the limiting level), or a pass precondition fails."""


class NoTileFits(ScheduleError):
    """No tile-size candidate fits the target's on-chip levels.

    Attributes:
        candidates: every candidate tried (:class:`tilegen.passes.tiles.Candidate`, each with the levels
            it overflows and by how many bytes).
        capacities: (level, usable bytes) of the target.
    """

    def __init__(self, message: str, candidates: tuple = (), capacities: tuple = ()):
        super().__init__(message)
        self.candidates = tuple(candidates)
        self.capacities = tuple(capacities)


class VerifyError(TilegenError):
    """The verifier found a broken invariant in a program (names the pass, the kernel and the buffer)."""


class FusionError(TilegenError):
    """A fusion was refused because a dependence forbids it; the message says which one."""


class TargetError(TilegenError, ValueError):
    """An unknown target name or an invalid target file."""


class UnsupportedArgument(TilegenError, NotImplementedError):
    """An argument tilegen's kernels do not implement (dropout, an explicit mask, returned
    probabilities, ...): the message names it, its value and what is accepted, in one line.

    Attributes:
        name: the argument; value: what was given; accepted: what would have been accepted, in words.
    """

    def __init__(self, name: str, value: object, accepted: str):
        self.name, self.value, self.accepted = name, value, accepted
        super().__init__(f"{name} = {value!r} is not supported; accepted: {accepted}")
