"""Small input checks shared by the public entry points (numpy only)."""

from __future__ import annotations

import math

import numpy as np

from attnsvm.errors import ValidationError


def as_float_array(value, name: str, ndim: int, shape_doc: str) -> np.ndarray:
    """Return ``value`` as a C-contiguous float64 array with ``ndim`` axes.

    Raises :class:`ValidationError` naming ``name`` and ``shape_doc`` when the value
    is not numeric, has the wrong number of axes or holds NaN/inf.
    """
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic objects
        raise ValidationError(f"{name} must be an array of shape {shape_doc}: {exc}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValidationError(f"{name} must be a numeric array of shape {shape_doc}, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise ValidationError(f"{name} must be real, got complex dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValidationError(f"{name} must have shape {shape_doc}, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{name} must be finite (no NaN or inf)")
    return arr


def as_index_array(value, name: str, shape: tuple, upper: int, shape_doc: str) -> np.ndarray:
    """Return ``value`` as an int64 array of exactly ``shape`` with entries in [0, upper).

    Negative entries are accepted python-style (``-1`` is the last token).
    """
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValidationError(f"{name} must hold integer token indices of shape {shape_doc}, got dtype {arr.dtype}")
    if arr.shape != tuple(shape):
        raise ValidationError(f"{name} must have shape {shape_doc}, got shape {arr.shape}")
    if arr.dtype.kind == "u" and np.any(arr >= upper):      # before the cast: 2**64 - 1 is not -1
        bad = arr[arr >= upper].ravel()[0]
        raise ValidationError(f"{name} holds token index {bad}, outside [0, {upper})")
    arr = arr.astype(np.int64)
    if np.any(arr < -upper) or np.any(arr >= upper):
        bad = arr[(arr < -upper) | (arr >= upper)].ravel()[0]
        raise ValidationError(f"{name} holds token index {bad}, outside [0, {upper})")
    return np.where(arr < 0, arr + upper, arr)


def as_mask_array(value, name: str, shape: tuple, shape_doc: str) -> np.ndarray:
    """Return ``value`` as a bool array of exactly ``shape``."""
    arr = np.asarray(value)
    if arr.dtype != bool:
        if np.issubdtype(arr.dtype, np.number) and np.all(np.isin(arr, (0, 1))):
            arr = arr.astype(bool)
        else:
            raise ValidationError(f"{name} must be a boolean mask of shape {shape_doc}, got dtype {arr.dtype}")
    if arr.shape != tuple(shape):
        raise ValidationError(f"{name} must have shape {shape_doc}, got shape {arr.shape}")
    return arr


def check_number(value, name: str, *, low=None, high=None, low_open: bool = False, high_open: bool = False,
                 integer: bool = False, allow_none: bool = False):
    """Return ``value`` as a float (int with ``integer=True``) after checking it is a finite real
    number in the given range; raise :class:`ValidationError` naming ``name`` otherwise.

    ``low``/``high`` are inclusive bounds (exclusive with ``low_open``/``high_open``); ``None``
    is accepted (and returned) only with ``allow_none``. Booleans, strings, NaN and inf are rejected.
    """
    if value is None and allow_none:
        return None
    lo = "" if low is None else (f"> {low:g}" if low_open else f">= {low:g}")
    hi = "" if high is None else (f"< {high:g}" if high_open else f"<= {high:g}")
    rng = " and ".join(s for s in (lo, hi) if s)
    want = ("an integer" if integer else "a finite number") + (f" {rng}" if rng else "")
    if allow_none:
        want += " (or None)"
    ok_type = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, ok_type):
        raise ValidationError(f"{name} must be {want}, got {value!r}")
    x = int(value) if integer else float(value)
    if not np.isfinite(x):
        raise ValidationError(f"{name} must be {want}, got {value!r}")
    if low is not None and (x <= low if low_open else x < low):
        raise ValidationError(f"{name} must be {want}, got {value!r}")
    if high is not None and (x >= high if high_open else x > high):
        raise ValidationError(f"{name} must be {want}, got {value!r}")
    return x


def check_choice(value, name: str, choices) -> str:
    """Return ``value`` if it is one of ``choices`` (strings), else raise :class:`ValidationError`."""
    if not isinstance(value, str) or value not in choices:
        raise ValidationError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def finite_or_none(value) -> float | None:
    """``float(value)`` when it is a finite number (bools excluded), else None: a number read from a stored file
    (meta.json, run.json), where a wrong type means "not recorded"."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if math.isfinite(out) else None
