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


class ScheduleError(TilegenError):
    """No schedule satisfies the target's limits (names the limiting level), or a pass precondition fails."""


class VerifyError(TilegenError):
    """The verifier found a broken invariant in a program (names the pass, the kernel and the buffer)."""


class FusionError(TilegenError):
    """A fusion was refused because a dependence forbids it; the message says which one."""


class TargetError(TilegenError, ValueError):
    """An unknown target name or an invalid target file."""
