"""Durable writes and path diagnostics shared by every writer of the package.

Each caller turns the ``OSError`` of :func:`atomic_write` into its own error type
(``ProblemFileError``, ``StorageError``, ...) with :func:`oserror_text` as the reason.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Callable

__all__ = ["atomic_write", "file_in_path", "fsync_dir", "oserror_text"]


def file_in_path(path: str) -> str | None:
    """The first existing ancestor folder of ``path`` when it is a regular file (a path through a file), else None."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and parent != os.path.dirname(parent) and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return parent if os.path.isfile(parent) else None


def oserror_text(exc: OSError, path: str) -> str:
    """``exc.strerror``, or which part of ``path`` is a regular file when that is the cause."""
    if isinstance(exc, (NotADirectoryError, FileExistsError, FileNotFoundError)):
        part = os.path.abspath(path)
        while part and part != os.path.dirname(part):
            if os.path.isfile(part):
                return f"{part!r} is a file, not a folder"
            part = os.path.dirname(part)
    return exc.strerror or str(exc)


def fsync_dir(path: str) -> None:
    """Flush a folder's entries (after a rename); silently skipped where the file system cannot."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[BinaryIO], None], *, sync_dir: bool = False) -> None:
    """Replace ``path`` by what ``write(fh)`` writes: temporary file, flush, fsync, rename.

    A full disk, a crash or Ctrl-C never leaves a truncated ``path``; on any failure the
    temporary file is removed and the exception propagates (``OSError`` for the caller to
    name). ``sync_dir`` also flushes the folder entry of the rename.
    """
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync_dir:
        fsync_dir(os.path.dirname(path) or ".")
