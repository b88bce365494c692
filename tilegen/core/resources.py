"""Where tilegen's data files live, installed or in a source checkout.

``templates/`` and ``targets/`` are top-level folders of the repository; a wheel carries them as
``tilegen/_data/templates`` and ``tilegen/_data/targets`` (see ``pyproject.toml``). Built-in specs ship
inside the package as ``tilegen/specs/*.toml``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # tilegen/


def data_dir(name: str) -> Path:
    """Return the folder ``name`` (``"templates"`` or ``"targets"``).

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


def package_dir() -> Path:
    """The ``tilegen`` package folder (its C++ data: ``twin/``; its sources, which the compile cache hashes)."""
    return _PACKAGE
