"""Durable, exclusive writes and path diagnostics shared by every writer of the package.

Each caller turns the ``OSError`` of :func:`atomic_write` into its own error type
(``ProblemFileError``, ``StorageError``, ...) with :func:`oserror_text` as the reason.

Nothing here follows a symbolic link planted in a results folder: temporary files are
created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``) under a fresh random name of a form only
attnsvm writes (:func:`temp_name`, recognised by :func:`is_temp_name`: a clean-up of stale
temporary files removes those names and nothing else), the final
rename replaces a link instead of writing through it, a target that exists and is not a
regular file (a device, a fifo, a folder) is refused, and lock files are opened without
following links and must be regular files with one name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import stat
import unicodedata
from typing import BinaryIO, Callable

__all__ = ["atomic_write", "decode_utf8", "file_in_path", "folder_digest", "fsync_dir", "is_temp_name", "loads_json",
           "nesting_depth", "not_regular", "open_lock", "oserror_text", "printable", "read_regular", "temp_name"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a fifo (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


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


def not_regular(path: str, follow: bool = True) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("a directory", "a character device", ...),
    else None (a regular file, or nothing there). ``follow=False`` looks at a symbolic link itself."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(st.st_mode):
        return None
    return next((what for test, what in _KINDS if test(st.st_mode)), "not a regular file")


def read_regular(path: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (a link to one is followed), read without ever blocking on what is
    not one: ``OSError`` saying what it is (a fifo, a device such as ``/dev/zero``, a folder) before anything is
    read, or that it holds more than ``limit`` bytes (None: no limit)."""
    kind = not_regular(path)
    if kind is not None:
        raise OSError(errno.EINVAL, f"it is {kind}, not a regular file", path)
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)     # what was opened, in case it was swapped after the check above
        if not stat.S_ISREG(st.st_mode):
            kind = next((what for test, what in _KINDS if test(st.st_mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"it is {kind}, not a regular file", path)
        if limit is not None and st.st_size > limit:
            raise OSError(errno.EFBIG, f"it holds {st.st_size} bytes, more than the {limit} read", path)
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise OSError(errno.EFBIG, f"it holds more than the {limit} bytes read (it grew while read)", path)
    return data


def decode_utf8(raw: bytes, who: str, expected: str, error: type[Exception] = ValueError) -> str:
    """``raw`` decoded as UTF-8, or ``error`` (the caller's type) saying ``"<who> is not UTF-8 text (byte 0x.. at
    offset N)<expected>"``: the first undecodable byte and where it stands."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{who} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}){expected}") from None


def nesting_depth(obj, limit: int) -> int:
    """Nesting depth of a JSON value (a scalar: 1), counted without recursion (a hostile value cannot exhaust
    the stack) and only up to the first level beyond ``limit``: a result above ``limit`` means too deep."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > limit:
            break
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            stack += [(v, depth + 1) for v in value]
    return deepest


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _replace_surrogates(value):
    """``value`` (nesting already bounded) with every lone surrogate of its texts replaced by U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if any(
            "\ud800" <= c <= "\udfff" for c in value) else value
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    return value


def loads_json(raw: bytes, max_depth: int = 64, max_digits: int = 100):
    """The JSON value of the UTF-8 bytes ``raw``, read defensively: ``ValueError`` with a one-line reason when
    they are not UTF-8 JSON, nest arrays and objects more than ``max_depth`` levels deep, or spell an integer
    with more than ``max_digits`` digits (Python would refuse past 4300 digits with a traceback); a lone
    surrogate escape (``"\\ud800"``, which no file can encode) becomes U+FFFD."""
    def parse_int(text: str) -> int:
        if len(text.lstrip("-")) > max_digits:
            raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {max_digits} are read)")
        return int(text)

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"UnicodeDecodeError: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
    try:
        value = json.loads(text, parse_int=parse_int)
    except RecursionError:
        raise ValueError(f"its values nest more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"JSONDecodeError: {exc}") from None
    if nesting_depth(value, max_depth) > max_depth:
        raise ValueError(f"its values nest more than {max_depth} levels deep")
    return _replace_surrogates(value) if _SURROGATE_ESCAPE.search(raw) else value


def printable(text, keep: str = "") -> str:
    """``text`` with every control, format or unassigned character escaped (``\\x1b``, ``\\u202e``, ...) except those
    in ``keep``: names read from files (a problem's stored name, a model's type) printed on a terminal can then
    neither run escape sequences nor reorder what is shown."""
    text = str(text)
    if text.isprintable() and not any(unicodedata.category(c) == "Cf" for c in text):
        return text
    out = []
    for c in text:
        if c in keep or (c.isprintable() and unicodedata.category(c) != "Cf"):
            out.append(c)
        else:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


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


def _exclusive(path: str, flags: int, mode: int = 0o666) -> int:
    """``os.open`` that creates ``path`` itself: fails (FileExistsError) if anything, a link included, is there."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)


#: what every temporary file name of attnsvm carries after the name of the file it replaces
TEMP_MARK = ".tmp-attnsvm-"
_TEMP_RE = re.compile(r".+" + re.escape(TEMP_MARK) + r"[0-9]{1,10}-[0-9a-f]{32}")


def temp_name(path: str) -> str:
    """A fresh temporary name beside ``path``: ``PATH.tmp-attnsvm-<pid>-<32 random hex digits>``."""
    return f"{path}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(16)}"


def is_temp_name(name: str) -> bool:
    """Whether the file name ``name`` (no folder) has the form of :func:`temp_name`: only such names are removed
    as stale temporary files (a user's ``analysis.tmp-notes.txt`` never is)."""
    return _TEMP_RE.fullmatch(name) is not None


def _open_temp(path: str) -> tuple[BinaryIO, str]:
    """A new temporary file beside ``path`` (:func:`temp_name`), created exclusively, never through a link."""
    for _ in range(100):
        tmp = temp_name(path)
        try:
            return open(tmp, "xb", opener=lambda p, flags: _exclusive(p, flags)), tmp
        except FileExistsError:  # a name taken (or planted): draw another, never touch what is there
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name beside the file (100 names taken)", path)


def atomic_write(path: str, write: Callable[[BinaryIO], None], *, sync_dir: bool = False) -> None:
    """Replace ``path`` by what ``write(fh)`` writes: exclusive temporary file, flush, fsync, rename.

    A full disk, a crash or Ctrl-C never leaves a truncated ``path``; on any failure the
    temporary file is removed and the exception propagates (``OSError`` for the caller to
    name). ``sync_dir`` also flushes the folder entry of the rename. A ``path`` that exists and
    is not a regular file (a device such as ``/dev/full``, a fifo, a folder) is refused with an
    ``OSError`` saying what it is, before anything is written; a symbolic link at ``path`` is
    replaced, never written through.
    """
    kind = not_regular(path, follow=False)
    if kind is not None and kind != "a symbolic link":
        raise OSError(errno.EINVAL, f"it is {kind}, not a regular file (refused: attnsvm only replaces regular files)",
                      path)
    fh, tmp = _open_temp(path)
    try:
        with fh:
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


def open_lock(path: str) -> BinaryIO:
    """Open (creating it if needed) the lock file ``path`` for reading and writing, never through a symbolic link.

    Raises ``OSError`` when ``path`` is a link, is not a regular file, or has other names (a hard
    link to another file): writing the holder's pid there would change that file.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC | _NONBLOCK, 0o666)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((what for test, what in _KINDS if test(st.st_mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"the lock file is {kind}, not a regular file")
        if st.st_nlink != 1:
            raise OSError(errno.EINVAL, f"the lock file has {st.st_nlink} names (a hard link to another file); remove it")
        if _NONBLOCK:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
        return os.fdopen(fd, "r+b")
    except BaseException:
        os.close(fd)
        raise


def folder_digest(path: str) -> str:
    """``sha256:<hex>`` of the regular files directly in the folder ``path`` (names, sizes and contents, in name
    order; a link to a file counts as that file, subfolders are left out): a model directory's weights, config
    and tokenizer files. Raises ``OSError`` when the folder or a file cannot be read."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        with open(full, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            raw = os.fsencode(name)
            h.update(b"%d:%s:%d:" % (len(raw), raw, size))
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()
