"""Progress of long steps on a terminal: tqdm bars on stderr, shown only while a command has turned
the display on (:func:`shown`, which the CLI enters) and its stream is a terminal, or when forced
(``TILEGEN_PROGRESS=1``, or the CLI's ``--progress``).

Library code marks its long steps with :func:`step` (a step of unknown length: a g++ build, a twin
run, the tile search; its bar shows the elapsed seconds, refreshed once a second) and :func:`steps`
(an iteration of known length: the programs of ``--simulate``, the instances of a trace). Both do
nothing when no display is on, so the Python API, captured output and the tests see no change; a bar
appears only after ``DELAY`` seconds (a quick step never flashes one) and is erased when its step ends.
Nested steps stack their bars, the outer one on top (tqdm's positions).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
DELAY = 0.5  # seconds before a bar appears
ENV = "TILEGEN_PROGRESS"  # "1": bars on a stream that is no terminal too; "0": none

_display: _Display | None = None  # the display of the running command, or None


class _Display:
    """The bars of one command on ``stream`` (tqdm places each below the ones still open)."""

    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()

    def bar(self, desc: str, total: int | None, unit: str):
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=self.stream, leave=False, dynamic_ncols=True,
                    mininterval=0.2, bar_format=None if total is not None else "{desc}: {elapsed}")


def wanted(stream, force: bool | None = None) -> bool:
    """Whether bars go to ``stream``: ``force`` when given, else ``$TILEGEN_PROGRESS`` when it is "1"
    or "0", else whether the stream is a terminal."""
    if force is not None:
        return force
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def shown(stream=None, force: bool | None = None) -> Iterator[bool]:
    """Turn the display on for the block when :func:`wanted` says so (``stream``: stderr by default);
    yields whether it is on. Inner :func:`shown` blocks keep the outer display."""
    global _display
    stream = sys.stderr if stream is None else stream
    if _display is not None or not wanted(stream, force):
        yield _display is not None
        return
    _display = _Display(stream)
    try:
        yield True
    finally:
        _display = None


def active() -> bool:
    """Whether a display is on (a caller may skip work that only feeds a bar)."""
    return _display is not None


class _Task:
    """One bar: made by a timer thread ``DELAY`` seconds after the task starts (if it still runs), then
    refreshed every second (so the elapsed time moves while a step waits on a subprocess)."""

    def __init__(self, display: _Display, desc: str, total: int | None, unit: str):
        self.display, self.desc, self.total, self.unit = display, desc, total, unit
        self.n = 0
        self.bar = None
        self.done = threading.Event()
        if DELAY <= 0:  # no delay: the bar at once (not left to the timer, which may start after a short task)
            self.bar = display.bar(desc, total, unit)
        self.timer = threading.Thread(target=self._tick, name="tilegen-progress", daemon=True)
        self.timer.start()

    def _tick(self) -> None:
        if self.bar is None:
            if self.done.wait(DELAY):
                return
            with self.display.lock:
                self.bar = self.display.bar(self.desc, self.total, self.unit)
                if self.n:
                    self.bar.update(self.n)
        while not self.done.wait(1.0):
            with self.display.lock:
                self.bar.refresh()

    def advance(self) -> None:
        with self.display.lock:
            self.n += 1
            if self.bar is not None:
                self.bar.update(1)

    def close(self) -> None:
        self.done.set()
        self.timer.join()
        with self.display.lock:
            if self.bar is not None:
                self.bar.close()


@contextmanager
def step(desc: str) -> Iterator[None]:
    """A step of unknown length: after ``DELAY`` seconds a line ``desc: elapsed``, refreshed every
    second until the step ends. Nothing without a display."""
    if _display is None:
        yield
        return
    task = _Task(_display, desc, None, "s")
    try:
        yield
    finally:
        task.close()


def steps(items: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items``, one at a time, advancing a bar ``desc`` (``total``: len(items) when not given) that
    appears ``DELAY`` seconds after the first item was asked for. Just ``items`` without a display."""
    if _display is None:
        yield from items
        return
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    task = _Task(_display, desc, total, unit)
    try:
        for item in items:
            yield item
            task.advance()
    finally:
        task.close()
