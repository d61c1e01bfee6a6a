"""Reading and writing ``.npz`` / ``.npy`` files safely: atomic writes, no pickle, sizes checked first.

Every reader checks the path (:func:`input_file`), tells the format by the file's first bytes
(:func:`file_kind`), reads the declared shapes from the headers before any data
(:func:`npz_headers`) and refuses a file whose arrays would not fit the package's memory limit
(:func:`require_file_memory`). Errors are :class:`attnsvm.errors.ProblemFileError` /
``ValidationError`` naming the file and what is wrong.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from attnsvm._files import atomic_write, file_in_path, not_regular, oserror_text
from attnsvm.errors import ProblemFileError


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


def _prefix(label: str) -> str:
    return f"{label}: " if label else ""


def write_npz(path, arrays: dict, what: str) -> None:
    """Write ``arrays`` to the ``.npz`` file ``path`` atomically (temporary file, fsync, rename).

    A full disk or a crash never leaves a truncated file; an error is a
    :class:`ProblemFileError` naming the file (``what``, e.g. "problem file") and the cause.
    """
    path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise ProblemFileError(f"cannot write {what} {path!r}: expected a file path")
    try:
        atomic_write(path, lambda fh: np.savez(fh, **arrays))
    except OSError as exc:
        raise ProblemFileError(f"cannot write {what} {path!r}: {oserror_text(exc, path)}") from None


def _path_text(path, pre: str) -> str:
    """``path`` as a non-empty ``str`` without NUL characters (bytes decoded); ProblemFileError otherwise."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise ProblemFileError(f"{pre}expected a file path, got {type(path).__name__}")
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not path.strip():
        raise ProblemFileError(f"{pre}expected a file path, got an empty path ''")
    if "\0" in path:
        raise ProblemFileError(f"{pre}expected a file path without NUL characters, got {path!r}")
    return path


def input_file(path, label: str = "", what: str = "file") -> str:
    """Check that ``path`` names an existing regular file; :class:`ProblemFileError` saying what is wrong otherwise.

    ``label`` (e.g. ``"--select"``) starts the message, ``what`` names the file in it. Catches an empty path, a NUL
    character, a folder, a missing file and a path that runs through a regular file.
    """
    pre = _prefix(label)
    path = _path_text(path, pre)
    if os.path.isdir(path):
        raise ProblemFileError(f"{pre}{path!r} is a directory, expected a file")
    if not os.path.exists(path):
        blocker = file_in_path(path)
        if blocker:
            raise ProblemFileError(f"{pre}no such {what}: {path!r} ({blocker!r} is a file, not a folder)")
        raise ProblemFileError(f"{pre}no such {what}: {path!r}")
    if not os.path.isfile(path):
        raise ProblemFileError(f"{pre}{path!r} is not a regular file")
    return path


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def output_file(path, label: str = "", what: str = "output file", inputs=()) -> str:
    """Check, before any work, that ``path`` can receive a written file; :class:`ProblemFileError` otherwise.

    Refuses an empty path, a NUL character, a path that exists and is not a regular file (a
    folder, a device such as ``/dev/full``, a fifo, a socket; also through a symbolic link), a
    missing folder or a path through a regular file, and a path that is one of ``inputs`` (the
    files the command reads: writing there would replace them). ``label`` (e.g. ``"--output"``)
    starts the message, ``what`` names the file. Returns the path as a ``str``.
    """
    pre = _prefix(label)
    path = _path_text(path, pre)
    kind = not_regular(path)
    if kind is not None:
        raise ProblemFileError(f"{pre}{path!r} is {kind}, not a regular file: attnsvm writes the {what} only to a "
                               "regular file (it would replace what is there)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        blocker = file_in_path(path)
        raise ProblemFileError(f"{pre}cannot write the {what} {path!r}: " + (f"{blocker!r} is a file, not a folder"
                               if blocker else f"the folder {folder!r} does not exist"))
    for source in inputs:
        if source is not None and os.path.exists(path) and _same_file(path, os.fspath(source)):
            raise ProblemFileError(f"{pre}{path!r} is the input file {os.fspath(source)!r}: writing the {what} there "
                                   "would replace it; choose another path")
    return path


def _npy_header(fh, where: str, pre: str) -> tuple[tuple, np.dtype, int, int]:
    """``(shape, dtype, data bytes, header bytes)`` of the ``.npy`` stream ``fh``, read without its data.

    Refuses object dtypes (they would need unpickling) and sizes that do not fit in
    memory arithmetic, with :class:`ProblemFileError` naming ``where``.
    """
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(fh)
        else:
            from numpy.lib import _format_impl

            shape, _, dtype = _format_impl._read_array_header(fh, version)
    except (ValueError, EOFError, OSError, SyntaxError, TypeError, AttributeError) as exc:
        raise ProblemFileError(f"{pre}{where} is corrupt, truncated or not a NumPy array: {exc}") from None
    if dtype.hasobject:
        raise ProblemFileError(f"{pre}{where} holds Python objects: reading it would need unpickling, which attnsvm "
                               "refuses (expected an .npz archive of plain arrays)")
    if any(int(k) < 0 for k in shape):
        raise ProblemFileError(f"{pre}{where} declares a negative dimension in its shape {shape}")
    count = 1
    for k in shape:
        count *= int(k)  # Python integers: a shape whose product overflows int64 is caught below
    nbytes = count * dtype.itemsize
    if count >= 2**63 or nbytes >= 2**63:
        raise ProblemFileError(f"{pre}{where} declares the shape {shape}, whose size overflows 64-bit integers")
    return tuple(int(k) for k in shape), dtype, nbytes, fh.tell()


def require_file_memory(nbytes: float, path: str, pre: str, detail: str) -> None:
    from attnsvm.memory import require_memory

    require_memory(nbytes, f"{pre}reading {path!r} ({detail})",
                   hint="the file declares more data than fits; check that it is the right file, or raise "
                        "--max-memory / ATTNSVM_MAX_MEMORY")


def _zip_errors():
    import zlib

    return (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, KeyError, ValueError,
            NotImplementedError, RuntimeError)


def npz_headers(path: str, label: str = "") -> dict:
    """Shapes and sizes declared by the members of an ``.npz`` archive, read without their data.

    Returns ``{name: (shape, dtype, nbytes)}`` (``name`` without ``.npy``). Raises
    :class:`ProblemFileError` if the archive is corrupt, holds something else than ``.npy``
    members, pickled objects, or a member whose declared data exceeds what it holds.
    """
    pre = _prefix(label)
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(".npy"):
                    raise ProblemFileError(f"{pre}{path!r} holds {info.filename!r}, which is not a .npy array member")
                name = info.filename[:-4]
                if name in out:
                    raise ProblemFileError(f"{pre}{path!r} holds the member {info.filename!r} twice")
                where = f"{path!r} member {info.filename!r}"
                with zf.open(info) as fh:
                    shape, dtype, nbytes, header = _npy_header(fh, where, pre)
                if info.file_size < header + nbytes:
                    raise ProblemFileError(f"{pre}{where} is truncated or corrupt: it declares the shape {shape} "
                                           f"({header + nbytes} bytes) but holds {info.file_size} bytes")
                out[name] = (shape, dtype, nbytes)
    except ProblemFileError:
        raise
    except _zip_errors() as exc:
        raise ProblemFileError(f"{pre}{path!r} is corrupt, truncated or not an .npz archive: {exc}") from None
    return out


def read_npz_arrays(path: str, names, label: str = "") -> dict:
    """Read the members ``names`` of an ``.npz`` archive (headers already checked by :func:`npz_headers`)."""
    pre = _prefix(label)
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for name in names:
                with zf.open(name + ".npy") as fh:
                    out[name] = np.lib.format.read_array(fh, allow_pickle=False)
    except _zip_errors() as exc:
        raise ProblemFileError(f"{pre}{path!r} is corrupt or truncated: {exc}") from None
    return out


def read_npy(path: str, label: str = "", factor: float = 1.0) -> np.ndarray:
    """Read a bare ``.npy`` file safely (no pickle; declared size checked against the memory limit first)."""
    pre = _prefix(label)
    with open(path, "rb") as fh:
        shape, dtype, nbytes, header = _npy_header(fh, repr(path), pre)
        size = os.fstat(fh.fileno()).st_size
        if size < header + nbytes:
            raise ProblemFileError(f"{pre}{path!r} is truncated or corrupt: it declares the shape {shape} "
                                   f"({header + nbytes} bytes) but holds {size} bytes")
        require_file_memory(factor * nbytes, path, pre, f"an array of shape {shape}")
        fh.seek(0)
        try:
            return np.lib.format.read_array(fh, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:
            raise ProblemFileError(f"{pre}{path!r} is corrupt or truncated: {exc}") from None


def file_kind(path: str) -> str:
    """``"npz"``, ``"npy"`` or ``"other"`` from the file's first bytes (never from its name)."""
    with open(path, "rb") as fh:
        head = fh.read(6)
    if head[:4] in _ZIP_MAGICS:
        return "npz"
    if head == _NPY_MAGIC:
        return "npy"
    return "other"


def file_description(path: str) -> str:
    """What a file that is not a NumPy archive looks like, in words for an error message, from its first
    4 KiB: "an empty file", "a CSV table", "a JSON file", "an HTML or XML file", "a text file", or
    "not an .npz archive (corrupt, truncated or another binary format)"."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        head = b""
    if not head:
        return "an empty file"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the 4 KiB boundary
            return "not an .npz archive (corrupt, truncated or another binary format)"
        text = head[:exc.start].decode("utf-8")
    body = text.lstrip("\ufeff \t\r\n")
    first_line = body.split("\n", 1)[0]
    if body[:1] in "{[" and body:
        return "a JSON file"
    if body[:1] == "<":
        return "an HTML or XML file"
    if str(path).lower().endswith(".csv") or first_line.count(",") >= 2:
        return "a CSV table"
    return "a text file"


def read_npz(path, label: str = "", factor: float = 1.0, first=(), check_first=None) -> dict:
    """Every array of an ``.npz`` file, read safely, mapping every failure to :class:`ProblemFileError`.

    Never unpickles; checks the declared sizes (times ``factor``: copies the caller will
    make) against the package's memory limit before decompressing anything, so a zip bomb
    or a header declaring 1e12 elements is refused with a clear error. The members ``first``
    are read before the others and passed to ``check_first`` (e.g. to check a format tag
    before decompressing large arrays).
    """
    path = input_file(path, label)
    pre = _prefix(label)
    try:
        kind = file_kind(path)
    except OSError as exc:
        raise ProblemFileError(f"{pre}cannot read {path!r}: {exc.strerror or exc}") from None
    if kind == "npy":
        raise ProblemFileError(f"{pre}{path!r} is a bare .npy array, expected an .npz archive")
    if kind != "npz":
        what = file_description(path)
        what = what if what.startswith("not ") else f"{what}, not an .npz archive"
        raise ProblemFileError(f"{pre}{path!r} is {what} (it does not start with the zip signature)")
    headers = npz_headers(path, label)
    early = [k for k in first if k in headers and headers[k][2] <= 1 << 20]
    data = read_npz_arrays(path, early, label)
    if check_first is not None:
        check_first(data)
    total = sum(h[2] for h in headers.values())
    require_file_memory(factor * total, path, pre, f"arrays declared: {', '.join(f'{k} {h[0]}' for k, h in headers.items())}")
    data.update(read_npz_arrays(path, [k for k in headers if k not in data], label))
    return data
