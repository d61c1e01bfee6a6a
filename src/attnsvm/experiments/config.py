"""Building experiment configs from defaults, the quick preset, a YAML file and --set."""

from __future__ import annotations

import os

import yaml
from pydantic import ValidationError as PydanticValidationError

from attnsvm.errors import ValidationError


def parse_assignments(items) -> dict:
    """Parse ``["key=value", ...]``; values are read as YAML scalars/lists (``3``, ``0.1``, ``[2, 4]``)."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise ValidationError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ValidationError(f"--set expects key=value, got {item!r}")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            out[key] = raw
    return out


def read_config_file(path) -> dict:
    """Read a YAML mapping of config overrides."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValidationError(f"no such config file: {path!r}")
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"config file {path!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                              f"{exc.start}): expected a YAML mapping of key: value") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"config file {path!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(f"config file {path!r} must hold a mapping of key: value, got {type(data).__name__}")
    return data


def build_config(experiment, *, quick: bool = False, file_overrides: dict | None = None, overrides: dict | None = None):
    """Defaults, then the quick preset, then the YAML file, then ``--set`` overrides."""
    values = dict(experiment.quick) if quick else {}
    values.update(file_overrides or {})
    values.update(overrides or {})
    fields = experiment.Config.model_fields
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValidationError(
            f"unknown config key(s) for {experiment.name}: {', '.join(unknown)}; known keys: {', '.join(fields)}"
        )
    try:
        return experiment.Config(**values)
    except PydanticValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            problems.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        raise ValidationError(f"invalid config for {experiment.name}: " + "; ".join(problems)) from None


def config_to_yaml(config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
