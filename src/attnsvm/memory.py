"""The package's one memory limit: ``max_memory`` (bytes) and a check before large allocations.

Every place that could allocate more than a machine holds (a sweep task, a dense
solver, loading a model in the probe) estimates its need first and calls
:func:`require_memory`, which raises :class:`~attnsvm.errors.ResourceLimitError`
with a clear message instead of letting the process swap or die.

The limit is, in order of precedence: an explicit ``limit`` argument, the
``ATTNSVM_MAX_MEMORY`` environment variable (bytes, or with a unit: ``512M``,
``8G``, ``0.5T``), else 80 % of the memory available when first asked.
"""

from __future__ import annotations

import os
import re

from attnsvm.errors import ResourceLimitError, ValidationError

__all__ = ["max_memory", "require_memory", "parse_size", "format_size", "available_memory", "ENV_VAR"]

ENV_VAR = "ATTNSVM_MAX_MEMORY"
DEFAULT_FRACTION = 0.8
_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}


def parse_size(text, name: str = ENV_VAR) -> int:
    """Bytes from ``"123"``, ``"512M"``, ``"8G"``, ``"1.5GiB"`` (binary units); positive and finite."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).upper() not in _UNITS:
            raise ValidationError(f"{name} must be a size such as 4096, 512M or 8G, got {text!r}")
        value, unit = float(m.group(1)), m.group(2).upper()
    size = value * _UNITS[unit]
    if not (size > 0 and size < float("inf")):
        raise ValidationError(f"{name} must be a positive size, got {text!r}")
    return int(size)


def format_size(nbytes: float) -> str:
    """``1.5 GiB``-style text for a byte count."""
    nbytes = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(nbytes) < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} PiB"  # pragma: no cover


def available_memory() -> int:
    """Memory available to this process now (bytes): MemAvailable, capped by a cgroup limit if any."""
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
            avail = 8 * 2**30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                raw = fh.read().strip()
            if raw and raw != "max" and int(raw) < avail:
                avail = int(raw)
        except (OSError, ValueError):
            continue
    return int(avail)


def max_memory(limit=None) -> int:
    """The memory limit in bytes: ``limit`` if given (a positive int is taken as a byte count, as the solver
    settings hold a checked ``max_memory``; anything else is parsed, :func:`parse_size`), else
    ``$ATTNSVM_MAX_MEMORY``, else 80 % of available."""
    if limit is not None:
        if type(limit) is int and limit > 0:
            return limit
        return parse_size(limit, "max_memory")
    env = os.environ.get(ENV_VAR)
    if env:
        return parse_size(env, ENV_VAR)
    return int(DEFAULT_FRACTION * available_memory())


def require_memory(nbytes: float, what: str, limit=None, hint: str = "") -> None:
    """Raise :class:`ResourceLimitError` if ``what`` needs more than the memory limit.

    Parameters
    ----------
    nbytes : float
        Estimated peak bytes of the work about to start.
    what : str
        What it is, for the message (e.g. ``"dense Frobenius solve of 1000000 constraints"``).
    limit : int or str, optional
        Overrides the package limit for this call.
    hint : str
        How to make it fit (smaller chunk, the working-set solver, ...).
    """
    cap = max_memory(limit)
    if nbytes > cap:
        src = "max_memory" if limit is not None else (ENV_VAR if os.environ.get(ENV_VAR) else
                                                      f"{int(DEFAULT_FRACTION * 100)}% of available memory")
        msg = f"{what} needs about {format_size(nbytes)}, more than the memory limit {format_size(cap)} ({src})"
        if hint:
            msg += f"; {hint}"
        raise ResourceLimitError(msg)
