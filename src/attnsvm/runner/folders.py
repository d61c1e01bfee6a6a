"""The folders a run writes into: the run's ``--out`` checked, an experiment's shard folder created one folder at
a time and never through a symbolic link, stale temporary files removed, and one run at a time per experiment
folder (a file lock ``OUT/NAME/.lock``, opened without following links).

A run of several experiments takes their locks in one order (sorted folder paths), so two runs never wait for
each other; a run that waits longer than ``lock_timeout`` seconds for another gets a :class:`LockError` naming
the pid that holds the lock.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

from attnsvm._files import is_temp_name, open_lock, oserror_text
from attnsvm.errors import ValidationError
from attnsvm.runner.storage import StorageError, short

LOCK_FILE = ".lock"


class LockError(StorageError, TimeoutError):
    """An experiment folder's lock is held by another run for longer than the lock timeout, or already by this
    process (the same experiment twice in one run); the message names the process that holds it."""


# ------------------------------------------------------------------ the run's folders
def check_outdir(outdir) -> str:
    if not isinstance(outdir, (str, os.PathLike)):
        raise ValidationError(f"outdir (--out) must be a folder path, got {type(outdir).__name__}")
    out = os.fspath(outdir)
    if isinstance(out, bytes):
        out = os.fsdecode(out)
    if not out.strip():
        raise ValidationError("outdir (--out) must name a folder, got an empty path ''")
    if "\0" in out:
        raise ValidationError(f"outdir (--out) must be a folder path without NUL characters, got {out!r}")
    return out


def _makedirs(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the results folder {path}: {oserror_text(exc, path)}") from None


def _below(root: str, path: str) -> list:
    """The folder names leading from ``root`` to ``path`` (``path`` must lie below ``root``)."""
    rel = os.path.relpath(path, root)
    parts = [] if rel == os.curdir else rel.split(os.sep)
    if any(part in ("", os.curdir, os.pardir) for part in parts):
        raise StorageError(f"the results folder {path} is not below the run's folder {root}")
    return parts


def check_folders(root: str, path: str) -> None:
    """Raise :class:`StorageError` unless every folder from ``root`` (excluded: it may be a link) down to ``path``
    is a real folder, not a symbolic link, and ``path`` resolves to where those names lead: nothing a run writes
    below its ``--out`` is written through a link into another folder."""
    import stat

    parts = _below(root, path)
    cur = root
    for part in parts:
        cur = os.path.join(cur, part)
        try:
            st = os.lstat(cur)
        except OSError as exc:
            raise StorageError(f"cannot use the results folder {cur}: {oserror_text(exc, cur)}") from None
        if stat.S_ISLNK(st.st_mode):
            raise StorageError(f"{cur} is a symbolic link (to {short(os.readlink(cur), 60)}); refused: attnsvm does "
                               f"not follow links below the results folder {root} (remove the link, or give --out the "
                               "folder itself)")
        if not stat.S_ISDIR(st.st_mode):
            raise StorageError(f"cannot create the results folder {path}: {cur!r} is a file, not a folder")
    if os.path.realpath(path) != os.path.join(os.path.realpath(root), *parts):
        raise StorageError(f"{path} resolves to {os.path.realpath(path)}, not below {os.path.realpath(root)}; "
                           "refused: attnsvm does not follow links below the results folder")


def make_run_folders(root: str, sharddir: str) -> None:
    """Create the experiment's shard folder ``sharddir`` below the run's ``--out`` ``root`` (which may itself be a
    link), one folder at a time, never through a symbolic link (:func:`check_folders`)."""
    _makedirs(root)
    cur = root
    for part in _below(root, sharddir):
        cur = os.path.join(cur, part)
        try:
            os.mkdir(cur)
        except FileExistsError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot create the results folder {cur}: {oserror_text(exc, cur)}") from None
        check_folders(root, cur)


# ------------------------------------------------------------------ stale temporary files
def clean_temp_files(expdir: str) -> int:
    """Remove temporary files left by a writer that died (the folder lock is held: none is live): in ``expdir``
    and its shard folders, the names of :func:`attnsvm._files.temp_name`'s form only (a user's
    ``analysis.tmp-notes.txt`` stays); shard folders that are symbolic links are not entered."""
    removed = 0
    shards = os.path.join(expdir, "shards")
    folders = [expdir] + [os.path.join(shards, d) for d in _entries(shards)]
    for folder in folders:
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        for name in _entries(folder):
            if is_temp_name(name):
                try:
                    os.unlink(os.path.join(folder, name))
                    removed += 1
                except OSError:
                    pass
    return removed


def _entries(folder: str) -> list:
    """The names in ``folder`` (none when it cannot be listed)."""
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


# ------------------------------------------------------------------ locks
#: seconds a run waits for another run's lock on an experiment folder before a :class:`LockError` (``--lock-timeout``)
LOCK_TIMEOUT = 3600.0
#: ``(st_dev, st_ino)`` of the lock files this process holds: a second lock of one folder fails at once
_HELD_LOCKS: set = set()
def _lock_holder(fh) -> str:
    """The pid the holder of the lock file ``fh`` wrote there ("?" when none is readable)."""
    try:
        fh.seek(0)
        holder = fh.read(32).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return holder if holder.isdigit() else "?"


def _acquire(fh, expdir: str, timeout: float) -> None:
    """Take the exclusive flock of the open lock file ``fh`` of ``expdir``, waiting (saying so once) at most
    ``timeout`` seconds while another process holds it; :class:`LockError` naming that process after that."""
    import fcntl

    deadline = time.monotonic() + timeout
    waiting = False
    while True:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        holder = _lock_holder(fh)
        if not waiting:
            waiting = True
            print(f"attnsvm: {expdir} is in use by another run (pid {holder}); waiting for it to finish, then its "
                  f"stored tasks are reused (waiting at most --lock-timeout {timeout:g} s)", file=sys.stderr, flush=True)
        left = deadline - time.monotonic()
        if left <= 0:
            raise LockError(f"{expdir} is in use by another run (pid {holder}), still after waiting --lock-timeout "
                            f"{timeout:g} s: let that run finish (or stop it), then run the same command again")
        time.sleep(min(0.1, left))


@contextmanager
def folder_lock(expdir: str, timeout: float = LOCK_TIMEOUT):
    """Hold an exclusive lock on ``expdir`` (flock on ``expdir/.lock``); wait, saying so, at most ``timeout``
    seconds while another run holds it (:class:`LockError` after that, or at once when this process holds it)."""
    path = os.path.join(expdir, LOCK_FILE)
    try:
        fh = open_lock(path)
    except OSError as exc:
        raise StorageError(f"cannot use the lock file {path}: {oserror_text(exc, path)}") from None
    key = None
    try:
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) in _HELD_LOCKS:
            raise LockError(f"{expdir} is already locked by this process (pid {os.getpid()}): one experiment folder "
                            "is used twice in one run")
        try:
            import fcntl  # noqa: F401
        except ImportError:  # pragma: no cover - not POSIX: no lock
            pass
        else:
            try:
                _acquire(fh, expdir, timeout)
            except LockError:
                raise
            except OSError as exc:  # file system without locks (some network mounts)
                print(f"attnsvm: warning: cannot lock {path} ({exc.strerror}); do not run two sweeps on this folder "
                      "at once", file=sys.stderr, flush=True)
        key = (st.st_dev, st.st_ino)
        _HELD_LOCKS.add(key)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()).encode("ascii"))
            fh.flush()
        except OSError:
            pass
        yield
    finally:
        if key is not None:
            _HELD_LOCKS.discard(key)
        fh.close()


@contextmanager
def folder_locks(expdirs, timeout: float = LOCK_TIMEOUT):
    """Hold the locks of every folder of ``expdirs``, taken in one canonical order (sorted resolved paths), so
    that two runs locking the same folders in any order never wait for each other."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        for expdir in sorted(set(expdirs), key=lambda d: (os.path.realpath(d), d)):
            stack.enter_context(folder_lock(expdir, timeout))
        yield
