"""Writing files safely: atomically (a temporary file in the same folder, then a rename).

A reader never sees a half-written file, and an interrupted or failed write leaves the previous
version in place (``os.replace`` is atomic on POSIX and Windows within one file system).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tilegen.core.errors import SpecError


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` atomically (text as UTF-8, newlines as given).

    Raises:
        SpecError: the folder does not exist or is not writable (names the path).
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise SpecError("output", str(path), f"a path in an existing folder ({folder} {why})")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise SpecError("output", str(path), f"a writable folder ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
