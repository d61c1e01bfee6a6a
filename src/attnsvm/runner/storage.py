"""What the runner reads and writes on disk: the shard format and its checksum, durable writes, and the seal of
an experiment folder's results.

A shard is a parquet file whose key-value metadata carries its provenance (:data:`PROVENANCE_KEY`, JSON) and a
SHA-256 checksum of the whole file (:data:`CHECKSUM_KEY`; :func:`shard_bytes`, :func:`verify_shard_bytes`);
:func:`read_shard` verifies both before a table is used. ``results.parquet`` is written in the same format and
seals the ``checks.json`` and ``meta.json`` written with it (:func:`results_seal`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import pandas as pd

from attnsvm._files import atomic_write, loads_json, not_regular, oserror_text, read_regular
from attnsvm.errors import AttnSVMError, ValidationError

PROVENANCE_KEY = b"attnsvm.provenance"
CHECKSUM_KEY = b"attnsvm.checksum"
RESULTS_FILE = "results.parquet"
CHECKS_FILE = "checks.json"
#: provenance key of results.parquet: the digest of the checks.json written with it
CHECKS_DIGEST_KEY = "checks_sha256"
#: provenance key of results.parquet: the digest of the meta.json written with it (seals since issue 43)
META_DIGEST_KEY = "meta_sha256"
#: the largest checks.json or meta.json whose digest is verified (bytes)
MAX_SEALED_BYTES = 64 << 20
#: the checksum's value in the parquet footer: this tag, then 64 lowercase hex digits
_CHECKSUM_TAG = b"attnsvm-sha256:"
_CHECKSUM_RE = re.compile(re.escape(_CHECKSUM_TAG) + rb"([0-9a-f]{64})")
_PLACEHOLDER = b"0" * 64
#: provenance fields that must equal this run's for a stored shard to be reused
VERIFIED_FIELDS = ("experiment", "task", "config_hash", "config", "attnsvm", "source", "inputs")


class StorageError(AttnSVMError, OSError):
    """The results folder cannot be created or written (disk full, read-only, a path through a file)."""


class ShardError(StorageError):
    """A stored shard fails its checksum or its provenance (``reason`` says which and how)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"the stored shard {path} cannot be used: {reason}")
        self.path, self.reason = path, reason


class TableError(ValidationError):
    """A task's table cannot be stored as it is (a column pyarrow cannot convert, or of lists, dicts or objects)."""


def short(value, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (ending in ``...`` when cut), for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------------ durable writes
def _write_all(fh, data: bytes) -> None:
    """Write ``data`` to the open file (one place, so tests can inject a full disk)."""
    fh.write(data)


def durable_write(path: str, data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` (temp file, fsync, rename, fsync the folder);
    :class:`StorageError` naming ``path`` on failure, with no temporary file left."""
    try:
        atomic_write(path, lambda fh: _write_all(fh, data), sync_dir=True)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {oserror_text(exc, path)}") from None


def atomic_text(text: str, path: str) -> None:
    """:func:`durable_write` of ``text`` encoded as UTF-8."""
    durable_write(path, text.encode("utf-8"))


def atomic_parquet(table: pd.DataFrame, path: str, provenance: dict | None = None) -> None:
    """:func:`durable_write` of ``table`` as a shard (:func:`shard_bytes`) carrying ``provenance``."""
    durable_write(path, shard_bytes(table, provenance))


def sha256_text(text: str) -> str:
    """``sha256:<hex>`` of ``text`` encoded as UTF-8."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------ the shard format
def _checksum_at(raw: bytes) -> int | None:
    """Offset of the checksum's 64 hex digits in the parquet bytes ``raw``: the last checksum in the file's footer
    (None: the file is not parquet, or no attnsvm checksum is there)."""
    if len(raw) < 12 or raw[:4] != b"PAR1" or raw[-4:] != b"PAR1":
        return None
    footer = int.from_bytes(raw[-8:-4], "little")
    begin = len(raw) - 8 - footer
    if footer <= 0 or begin < 4:
        return None
    found = None
    for found in _CHECKSUM_RE.finditer(raw, begin, len(raw) - 8):
        pass
    return None if found is None else found.start(1)


def shard_bytes(table: pd.DataFrame, provenance: dict | None = None) -> bytes:
    """Parquet bytes of ``table`` (columns as they are, no index) carrying ``provenance`` (JSON, key
    ``attnsvm.provenance``) and a checksum (key ``attnsvm.checksum``): the SHA-256 of the whole file with the
    checksum's own 64 hex digits read as zeros. Any change to the file, in the data, the metadata or the
    checksum itself, makes :func:`verify_shard_bytes` fail. :class:`TableError` when a column cannot be stored as
    it is: one pyarrow cannot convert, or of lists, dicts or objects (nested arrow types)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        at = pa.Table.from_pandas(table, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise TableError(f"cannot store the table: {type(exc).__name__}: {text}"[:400]) from None
    nested = next((f for f in at.schema if pa.types.is_nested(f.type)), None)
    if nested is not None:
        raise TableError(f"cannot store the table: column {short(nested.name, 40)} holds lists, dicts or objects "
                         f"(arrow type {short(str(nested.type), 60)}), not numbers, strings or booleans (store such "
                         "values as text, e.g. JSON)")
    meta = dict(at.schema.metadata or {})
    if provenance is not None:
        text = json.dumps(provenance, default=str, sort_keys=True)
        # a config string that spells the tag must not look like a checksum (valid JSON: only inside strings)
        meta[PROVENANCE_KEY] = text.replace(_CHECKSUM_TAG.decode(), "attnsvm-sha256\\u003a").encode("utf-8")
    meta[CHECKSUM_KEY] = _CHECKSUM_TAG + _PLACEHOLDER  # last: the footer's last checksum is this one
    sink = pa.BufferOutputStream()
    pq.write_table(at.replace_schema_metadata(meta), sink)
    raw = sink.getvalue().to_pybytes()
    at_ = _checksum_at(raw)
    if at_ is None or raw[at_:at_ + 64] != _PLACEHOLDER:
        raise StorageError("cannot place the checksum in the parquet footer (a column name or value spells "
                           f"{_CHECKSUM_TAG.decode()!r} followed by 64 hex digits)")
    return raw[:at_] + hashlib.sha256(raw).hexdigest().encode("ascii") + raw[at_ + 64:]


def verify_shard_bytes(raw: bytes) -> str | None:
    """Why the bytes of a stored parquet file fail their checksum (None: they pass). See :func:`shard_bytes`."""
    if len(raw) == 0:
        return "empty file"
    if len(raw) < 12 or raw[:4] != b"PAR1" or raw[-4:] != b"PAR1":
        return "not a parquet file (truncated or overwritten)"
    at = _checksum_at(raw)
    if at is None:
        return ("no attnsvm checksum: not written by attnsvm as it is (e.g. rewritten by pandas without attnsvm's "
                "metadata, or by an older attnsvm), or its footer is damaged")
    stored = raw[at:at + 64]
    actual = hashlib.sha256(raw[:at] + _PLACEHOLDER + raw[at + 64:]).hexdigest().encode("ascii")
    if actual != stored:
        return (f"checksum mismatch (stored {stored[:12].decode()}..., content {actual[:12].decode()}...): the file "
                "changed after it was written")
    return None


def read_shard(path: str, expected: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """``(table, provenance)`` of a stored shard, verified.

    Raises :class:`ShardError` (its ``reason`` says why) when the file is not a regular file, cannot be
    read, fails its checksum, has no provenance or, when ``expected`` (a provenance dict) is given, a
    provenance whose :data:`VERIFIED_FIELDS` differ from it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind = not_regular(path)
    if kind is not None:
        raise ShardError(path, f"it is {kind}, not a regular file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ShardError(path, f"cannot read it: {oserror_text(exc, path)}") from None
    problem = verify_shard_bytes(raw)
    if problem is None:
        try:
            at = pq.read_table(pa.BufferReader(raw))
            text = (at.schema.metadata or {}).get(PROVENANCE_KEY)
            prov = json.loads(text.decode("utf-8")) if text else None
            table = at.to_pandas()
        except Exception as exc:  # noqa: BLE001 - checksummed yet unreadable: say so, never use it
            problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        else:
            if not isinstance(prov, dict):
                problem = "no provenance in its metadata"
            elif expected is not None:
                problem = provenance_mismatch(prov, expected)
    if problem is not None:
        raise ShardError(path, problem)
    return table, prov


def provenance_mismatch(stored: dict, expected: dict) -> str | None:
    """Why a shard's provenance ``stored`` does not belong to this run's ``expected`` (None: it does)."""
    if stored.get("experiment") != expected.get("experiment"):
        return f"a shard of experiment {short(stored.get('experiment'))}, not {short(expected.get('experiment'))}"
    if stored.get("task") != expected.get("task"):
        return (f"a shard of task {short(stored.get('task'))}, not {short(expected.get('task'))} (copied or moved "
                "from another task)")
    if stored.get("config_hash") != expected.get("config_hash") or stored.get("config") != expected.get("config"):
        return f"written for config {short(stored.get('config_hash'))}, not {short(expected.get('config_hash'))}"
    if stored.get("attnsvm") != expected.get("attnsvm") or stored.get("source") != expected.get("source"):
        return (f"written by other code (attnsvm {short(stored.get('attnsvm'))}, source {short(stored.get('source'), 30)}"
                f"; this is {short(expected.get('attnsvm'))}, source {short(expected.get('source'), 30)})")
    if stored.get("inputs") != expected.get("inputs"):
        old, new = stored.get("inputs"), expected.get("inputs") or {}
        old = old if isinstance(old, dict) else {}
        changed = sorted((k for k in set(old) | set(new) if old.get(k) != new.get(k)), key=str)
        return "its inputs changed since it was written (" + "; ".join(
            f"{short(k, 40)}: {short(old.get(k), 30)}, now {short(new.get(k), 30)}" for k in changed) + ")"
    return None


def shard_is_stored(path: str) -> bool:
    """Whether ``path`` holds a shard that passes its checksum (a Dask task resubmitted after its shard was
    stored; the provenance is verified again when the results are collected)."""
    try:
        read_shard(path)
        return True
    except ShardError:
        return False


def shard_problem(path: str, expected: dict) -> str | None:
    """Why the shard at ``path`` cannot be used for the task of ``expected`` (None: it can)."""
    try:
        read_shard(path, expected)
    except ShardError as exc:
        return exc.reason
    return None


def stored_count(shard: dict) -> int:
    """How many of the tasks' shards (``shard``: task key -> path) exist."""
    return sum(os.path.exists(p) for p in shard.values())


# ------------------------------------------------------------------ the seal of a results folder
def results_problem(expdir: str) -> str | None:
    """Why the stored checks and meta of the experiment folder ``expdir`` cannot be trusted (None: they can,
    or the folder predates the seal: see :func:`results_seal`)."""
    return results_seal(expdir)[0]


def _file_digest(expdir: str, name: str) -> tuple[str | None, str | None]:
    """``(digest, problem)`` of the file ``expdir/name``: its ``sha256:<hex>``, or why it cannot be read."""
    path = os.path.join(expdir, name)
    try:
        return "sha256:" + hashlib.sha256(read_regular(path, MAX_SEALED_BYTES)).hexdigest(), None
    except OSError as exc:
        return None, f"cannot read {name}: {exc.strerror or exc}; re-run the experiment"


def _sealed_provenance(expdir: str) -> tuple[dict | None, str | None]:
    """``(provenance, problem)`` of ``expdir/results.parquet``: its provenance once the file passes its checksum
    (None when it has none), or why it cannot be read or fails."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(expdir, RESULTS_FILE)
    if not os.path.lexists(path):
        return None, (f"{RESULTS_FILE} is missing, so nothing verifies this folder's {CHECKS_FILE} and meta.json: its "
                      "checks are not shown as the run's verdict; re-run the experiment")
    try:
        raw = read_regular(path)
    except OSError as exc:
        return None, f"cannot read {RESULTS_FILE}: {exc.strerror or exc}; re-run the experiment"
    problem = verify_shard_bytes(raw)
    if problem is not None:
        return None, f"{RESULTS_FILE}: {problem}; re-run the experiment"
    try:
        text = (pq.read_schema(pa.BufferReader(raw)).metadata or {}).get(PROVENANCE_KEY)
        return (loads_json(text) if text else None), None
    except Exception as exc:  # noqa: BLE001 - checksummed yet unreadable: say so
        return None, f"{RESULTS_FILE} is unreadable ({type(exc).__name__}); re-run the experiment"


def results_seal(expdir: str) -> tuple[str | None, str | None]:
    """``(problem, warning)`` of the experiment folder ``expdir``'s seal: why its checks and meta cannot be
    shown as the run's (None: they can), and what of it predates the seal and is shown unverified (None: all
    is verified).

    The run seals the folder's meaning in ``expdir/results.parquet``, which must pass its checksum
    (:func:`verify_shard_bytes`); its provenance names the experiment (which must be the folder's name) and
    the config hash (which must be meta.json's) and holds the digests of the ``checks.json`` (key
    ``checks_sha256``) and ``meta.json`` (key ``meta_sha256``) written after it. So a flipped bit, a checks.json
    or meta.json edited by hand (its preset, its run count), another experiment's results and checks copied in,
    checks left over from an earlier run whose new run stopped before its checks, or checks whose
    results.parquet was removed are problems, never shown as a run's verdict. Folders sealed before meta.json
    was (only ``checks_sha256``) or written without provenance get a warning saying what is unverified.
    """
    name = os.path.basename(os.path.normpath(expdir))
    prov, problem = _sealed_provenance(expdir)
    if problem is not None:
        return problem, None
    if not isinstance(prov, dict) or CHECKS_DIGEST_KEY not in prov:
        return None, (f"{RESULTS_FILE} predates the seal (written by an earlier attnsvm): its {CHECKS_FILE} and "
                      "meta.json are shown as they are, unverified")
    if prov.get("experiment") != name:
        return (f"{RESULTS_FILE} and its {CHECKS_FILE} are sealed for experiment {short(prov.get('experiment'))}, "
                f"not {name!r} (copied from another experiment's folder); re-run the experiment"), None
    for key, file in ((CHECKS_DIGEST_KEY, CHECKS_FILE), (META_DIGEST_KEY, "meta.json")):
        if key not in prov:
            continue
        digest = prov[key]
        if digest is None:
            return (f"{file} was not written for these results (the run stopped after storing them, before its "
                    "checks); re-run the experiment"), None
        actual, problem = _file_digest(expdir, file)
        if problem is not None:
            return problem, None
        if actual != digest:
            return (f"{file} changed after the run (its digest {actual[7:19]}... is not the {str(digest)[7:19]}... "
                    f"that {RESULTS_FILE} holds); re-run the experiment"), None
    try:
        meta = loads_json(read_regular(os.path.join(expdir, "meta.json"), MAX_SEALED_BYTES))
    except (OSError, ValueError):
        meta = None     # the report names why meta.json cannot be read
    if isinstance(meta, dict) and meta.get("config_hash") != prov.get("config_hash"):
        return (f"{RESULTS_FILE} and its {CHECKS_FILE} are sealed for config {short(prov.get('config_hash'))}, not "
                f"the {short(meta.get('config_hash'))} of meta.json (copied from another run); re-run the "
                "experiment"), None
    if META_DIGEST_KEY not in prov:
        return None, (f"sealed by an earlier attnsvm, before meta.json was: {RESULTS_FILE} and {CHECKS_FILE} are "
                      "verified, meta.json (preset, run count, notes, config) is shown unverified")
    return None, None
