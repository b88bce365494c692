"""A disk cache of compiled programs, so that repeated `tilegen inspect` / `generate` calls skip the
passes.

The key is the SHA-256 of the request (spec, target, options) and of tilegen's own code and data (every
``.py`` file of the package, every target file, every template) and the versions of Python and of the
libraries that shape the output (numpy, sympy, networkx, jinja2, ml_dtypes): any change to the compiler
or its libraries makes new keys. Entries are pickles written atomically under ``$TILEGEN_CACHE_DIR`` (default
``~/.cache/tilegen``); ``TILEGEN_CACHE=0`` turns the cache off. A cache that cannot be read or written
is skipped silently: it only ever saves time.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .resources import data_dir

_PACKAGE = Path(__file__).resolve().parent


def enabled() -> bool:
    return os.environ.get("TILEGEN_CACHE", "1") not in ("0", "false", "no")


_LIBRARIES = ("numpy", "sympy", "networkx", "jinja2", "ml_dtypes")


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """A hash of tilegen's code, targets and templates, and of the Python and library versions."""
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256(sys.version.encode())
    for lib in _LIBRARIES:
        try:
            digest.update(f"{lib}={version(lib)}".encode())
        except PackageNotFoundError:
            digest.update(f"{lib}=?".encode())
    files = sorted(_PACKAGE.rglob("*.py"))
    for folder in ("targets", "templates"):
        try:
            files += sorted(data_dir(folder).rglob("*"))
        except FileNotFoundError:
            pass
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(path.parents[1])).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def folder() -> Path:
    """The cache folder: ``$TILEGEN_CACHE_DIR`` or ``~/.cache/tilegen``."""
    return Path(os.environ.get("TILEGEN_CACHE_DIR") or Path.home() / ".cache" / "tilegen")


def cached(request: Any, build: Callable[[], Any]) -> Any:
    """``build()``'s result for ``request`` (anything with a stable ``repr``), from the cache when there."""
    if not enabled():
        return build()
    key = hashlib.sha256((code_stamp() + "\0" + repr(request)).encode()).hexdigest()
    path = folder() / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # missing, truncated or corrupt entries are rebuilt: the cache only saves time
        pass
    value = build()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return value
