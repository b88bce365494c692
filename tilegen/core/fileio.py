"""Writing files safely: atomically (a temporary file in the same folder, then a rename).

A reader never sees a half-written file, and an interrupted or failed write leaves the previous
version in place (``os.replace`` is atomic on POSIX and Windows within one file system; the temporary
sits beside the target, so on the target's file system even when the target's folder is a mount
point). Every failure is a one-line :class:`SpecError` naming the option, the path and what is wrong,
and leaves nothing behind (no temporary, no folder made for the file).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tilegen.core.errors import SpecError


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _anchor(path: Path, field: str, make_folders: bool) -> tuple[Path, list[Path]]:
    """(the nearest existing folder of ``path``, the folders to make below it, deepest first), after
    the checks that need no write: ``path`` is not a folder, its folder exists (or, with
    ``make_folders``, its nearest existing ancestor is a folder)."""
    if path.is_dir():
        raise SpecError(field, str(path), "a file name (it is a folder)")
    folder = path.parent if str(path.parent) else Path(".")
    missing: list[Path] = []
    if make_folders:
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise SpecError(field, str(path), f"a path in an existing folder ({folder} {why})")
    return folder, missing


def _probe(folder: Path, path: Path, field: str) -> None:
    """Create and remove a temporary in ``folder``: permissions, a read-only file system or an immutable
    folder show, for root too, where ``os.access`` would not."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise SpecError(field, str(path), f"a file in a writable folder ({folder}: {_why(exc)})") from None
    os.close(fd)
    os.unlink(tmp)


def check_output_file(path: str | Path, field: str = "output", *, make_folders: bool = False) -> Path:
    """Check, before any work, that a file can be written at ``path``: it is not a folder, its folder
    exists (with ``make_folders``: its nearest existing ancestor is a folder, the rest to be made) and a
    file can be created there.

    Raises:
        SpecError: naming ``field``, the path and what is wrong.
    """
    path = Path(path)
    folder, _ = _anchor(path, field, make_folders)
    _probe(folder, path, field)
    return path


def write_atomic(path: str | Path, data: str | bytes, field: str = "output", *, make_folders: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (text as UTF-8, newlines as given), making its missing
    folders first when ``make_folders``; a failure or an interrupt leaves nothing behind: no temporary,
    and the folders made here removed again.

    Raises:
        SpecError: the folder does not exist (without ``make_folders``), is not a folder or is not
            writable, ``path`` is a folder, or the write fails (a full disk...): names ``field`` and the
            path.
    """
    path = Path(path)
    _, missing = _anchor(path, field, make_folders)
    folder = path.parent if str(path.parent) else Path(".")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    made: list[Path] = []
    tmp = None
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        for leftover in ([tmp] if tmp else []) + [str(d) for d in reversed(made)]:
            try:
                (os.rmdir if os.path.isdir(leftover) else os.unlink)(leftover)
            except OSError:
                pass
        if isinstance(exc, OSError):
            what = "a file in a writable folder" if tmp is None else "a writable file"
            raise SpecError(field, str(path), f"{what} ({folder if tmp is None else path}: {_why(exc)})") from None
        raise
