"""A disk cache of compiled programs, so that repeated `tilegen inspect` / `generate` calls skip the
passes.

An entry is found by the SHA-256 of the request and verified by the request itself: each entry holds
the full canonical request text (the request's ``repr``: spec, target contents as parsed with the SHA-256
of the target file, options; then the versions of Python and of the libraries that shape the output
(numpy, sympy, networkx, jinja2, ml_dtypes), and the hash of tilegen's own code and data), and a hit
counts only when that text equals the new request's. A colliding, corrupt, truncated or foreign entry
is a miss: the value is rebuilt and the entry replaced. The code hash covers every ``.py`` file of the
package (hashed once per process, as imported) and every target file, template and runtime file (hashed
on every call, so an edit in a long-lived process makes new keys). Entries are pickles written atomically under
``$TILEGEN_CACHE_DIR`` (default ``~/.cache/tilegen``); ``TILEGEN_CACHE=0`` turns the cache off. A cache
that cannot be read or written is skipped silently: it only ever saves time.
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

from tilegen.core.resources import data_dir, package_dir

_PACKAGE = package_dir()


def enabled() -> bool:
    return os.environ.get("TILEGEN_CACHE", "1") not in ("0", "false", "no")


_LIBRARIES = ("numpy", "sympy", "networkx", "jinja2", "ml_dtypes")


@lru_cache(maxsize=1)
def versions() -> str:
    """Python's version and those of the libraries that shape the output, as ``lib=version`` lines (once
    per process: the libraries that run are the ones imported)."""
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"python={sys.version}"]
    for lib in _LIBRARIES:
        try:
            lines.append(f"{lib}={version(lib)}")
        except PackageNotFoundError:
            lines.append(f"{lib}=?")
    return "\n".join(lines)


def _digest(files) -> str:
    """SHA-256 over the files' names (relative to their grandparent folder) and bytes, in order."""
    digest = hashlib.sha256()
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(path.parents[1])).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def _code_digest() -> str:
    """The hash of the package's ``.py`` files, once per process (the code that runs is the code imported)."""
    return _digest(sorted(_PACKAGE.rglob("*.py")))


def code_stamp() -> str:
    """A hash of tilegen's code, targets, templates and runtime files (read now), and of the Python and
    library versions."""
    files = []
    for name in ("targets", "templates", "runtime"):
        try:
            files += sorted(data_dir(name).rglob("*"))
        except FileNotFoundError:
            pass
    return hashlib.sha256((versions() + "\0" + _code_digest() + "\0" + _digest(files)).encode()).hexdigest()


def folder() -> Path:
    """The cache folder: ``$TILEGEN_CACHE_DIR`` or ``~/.cache/tilegen``."""
    return Path(os.environ.get("TILEGEN_CACHE_DIR") or Path.home() / ".cache" / "tilegen")


def request_text(request: Any) -> str:
    """The canonical text of ``request`` that an entry stores and a hit must match: the request's
    ``repr``, the library versions and the code hash."""
    return f"{request!r}\0{versions()}\0{code_stamp()}"


def cached(request: Any, build: Callable[[], Any]) -> Any:
    """``build()``'s result for ``request`` (anything with a stable ``repr``), from the cache when an
    entry for exactly this request is there; otherwise built and stored."""
    if not enabled():
        return build()
    text = request_text(request)
    path = folder() / f"{hashlib.sha256(text.encode()).hexdigest()}.pkl"
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == text:
            return entry[1]
    except Exception:  # missing, truncated or corrupt entries are rebuilt: the cache only saves time
        pass
    value = build()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((text, value), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return value
