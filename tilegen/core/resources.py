"""Where tilegen's data files live, installed or in a source checkout, and how a runtime file is cut.

``templates/``, ``runtime/`` and ``targets/`` are top-level folders of the repository; a wheel carries
them as ``tilegen/_data/<name>`` (see ``pyproject.toml``). Built-in specs ship inside the package as
``tilegen/specs/*.toml``.

``runtime/`` holds the code that generated output carries verbatim (``runtime/README.md``): real C++
and Python files, compiled and imported as they are. A file marks its sections with comment lines
``<comment> tilegen:section NAME (why)`` and ``<comment> tilegen:end NAME``; :func:`drop_sections` and
:func:`section` cut a file along them, nothing else changes a byte.
"""

from __future__ import annotations

import re
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # tilegen/


def data_dir(name: str) -> Path:
    """Return the folder ``name`` (``"templates"``, ``"runtime"`` or ``"targets"``).

    Raises:
        FileNotFoundError: neither the installed copy nor the source checkout's folder exists.
    """
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tilegen data folder {name!r} not found next to {_PACKAGE}")


def specs_dir() -> Path:
    """The folder of built-in spec files (``tilegen/specs``)."""
    return _PACKAGE / "specs"


def builtin_spec_files() -> dict[str, Path]:
    """The built-in specs' names and files (``tilegen/specs/*.toml``), in the order of their paths;
    the standard library alone, so that the CLI lists them without importing the spec module."""
    return {p.stem: p for p in sorted(specs_dir().glob("*.toml"))}


def package_dir() -> Path:
    """The ``tilegen`` package folder (its C++ data: ``twin/``; its sources, which the compile cache hashes)."""
    return _PACKAGE


def runtime_text(*path: str) -> str:
    """The text of the runtime file ``runtime/<path...>`` (e.g. ``("ascendc", "tilegen_runtime.h")``).

    Raises:
        FileNotFoundError: no such file.
    """
    return data_dir("runtime").joinpath(*path).read_text(encoding="utf-8")


def _sections(text: str, comment: str) -> list[tuple[str | None, list[str]]]:
    """``text`` as runs of lines: (section name or None outside every section, the lines), marker lines
    left out. Raises ValueError on a marker out of place (nested, unopened, unclosed)."""
    marker = re.compile(rf"{re.escape(comment)} tilegen:(section|end) (\w+)\b.*")
    runs: list[tuple[str | None, list[str]]] = [(None, [])]
    for n, line in enumerate(text.split("\n"), 1):
        m = marker.fullmatch(line)
        if m is None:
            runs[-1][1].append(line)
            continue
        kind, name = m.groups()
        current = runs[-1][0]
        if (kind == "section") != (current is None) or (kind == "end" and name != current):
            raise ValueError(f"line {n}: {line!r} out of place (inside section {current!r})")
        runs.append((name if kind == "section" else None, []))
    if runs[-1][0] is not None:
        raise ValueError(f"section {runs[-1][0]!r} is not closed")
    return runs


def drop_sections(text: str, keep, comment: str = "//") -> str:
    """``text`` without its marker lines and without the lines of every section whose name is not in
    ``keep``; every other line as it is.

    Raises:
        ValueError: a marker out of place (sections do not nest).
    """
    return "\n".join(line for name, lines in _sections(text, comment) if name is None or name in keep for line in lines)


def section(text: str, name: str, comment: str = "#") -> str:
    """The lines of section ``name`` of ``text`` (every run of it, in order), without the markers.

    Raises:
        ValueError: no section ``name``, or a marker out of place.
    """
    runs = [lines for n, lines in _sections(text, comment) if n == name]
    if not runs:
        raise ValueError(f"no section {name!r}")
    return "\n".join(line for lines in runs for line in lines)
