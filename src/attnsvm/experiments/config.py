"""Building experiment configs from defaults, the quick preset, a YAML file and --set."""

from __future__ import annotations

import os
import re
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import ValidationError as PydanticValidationError

from attnsvm._files import decode_utf8, nesting_depth, read_regular
from attnsvm.errors import ValidationError

#: the largest ``--config`` file read (bytes); a config is a few lines
MAX_CONFIG_BYTES = 1 << 20
#: the deepest nesting of lists and mappings in a ``--config`` file or a ``--set`` value
MAX_CONFIG_DEPTH = 16


class _AliasError(ValueError):
    pass


class _ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``): a config never needs them, and with them a file of
    under 1 KB expands to billions of values (billion laughs) or to a value that holds itself."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) and self.peek_event().anchor in self.anchors:
            # (an undefined alias stays YAML's own error: a --set value such as *.txt is then kept as text)
            event = self.peek_event()
            raise _AliasError(f"it uses the alias *{event.anchor} (line {event.start_mark.line + 1}): YAML aliases "
                              "(*name) are not accepted in a config; write the value out")
        return super().compose_node(parent, index)


def load_config_yaml(text: str):
    """The value of the YAML ``text`` of a config (a file or a ``--set`` value), read without aliases.

    Raises ``ValueError`` (one line) for an alias or values nested more than :data:`MAX_CONFIG_DEPTH` levels,
    ``yaml.YAMLError`` for text that is not YAML."""
    try:
        value = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader without aliases
    except RecursionError:
        raise ValueError(f"its values nest more than {MAX_CONFIG_DEPTH} levels deep") from None
    if nesting_depth(value, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        raise ValueError(f"its values nest more than {MAX_CONFIG_DEPTH} levels deep")
    return value


def parse_assignments(items) -> dict:
    """Parse ``["key=value", ...]``; values are read as YAML scalars/lists (``3``, ``0.1``, ``[2, 4]``), without
    aliases (:func:`load_config_yaml`); text that is not YAML is kept as the string."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise ValidationError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ValidationError(f"--set expects key=value, got {item!r}")
        try:
            out[key] = load_config_yaml(raw) if raw.strip() else raw
        except yaml.YAMLError:
            out[key] = raw
        except ValueError as exc:
            raise ValidationError(f"--set {key}: {exc}") from None
    return out


def read_config_file(path) -> dict:
    """Read a YAML mapping of config overrides: a regular file of at most :data:`MAX_CONFIG_BYTES`, without
    aliases and nested at most :data:`MAX_CONFIG_DEPTH` levels (:func:`load_config_yaml`)."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        raise ValidationError(f"no such config file: {path!r}")
    try:
        raw = read_regular(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ValidationError(f"config file {path!r} cannot be read: {exc.strerror or exc}") from None
    text = decode_utf8(raw, f"config file {path!r}", ": expected a YAML mapping of key: value", ValidationError)
    try:
        data = load_config_yaml(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"config file {path!r} is not valid YAML: {' '.join(str(exc).split())}") from None
    except ValueError as exc:
        raise ValidationError(f"config file {path!r}: {exc}") from None
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
    for key, value in values.items():
        if _has_bool(value) and not _allows_bool(fields[key].annotation):
            raise ValidationError(f"invalid config for {experiment.name}: {key} expects "
                                  f"{_type_name(fields[key].annotation)}, got {value!r} (true/false are not numbers)")
    try:
        return experiment.Config(**values)
    except PydanticValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            problems.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        raise ValidationError(f"invalid config for {experiment.name}: " + "; ".join(problems)) from None


def _has_bool(value) -> bool:
    """Whether ``value`` is a bool or holds one (lists, tuples, sets, dict values)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_has_bool(v) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_has_bool(v) for v in value)
    return False


def _allows_bool(annotation) -> bool:
    """Whether a config field's type admits a bool anywhere (pydantic's lax mode would read ``true`` as 1)."""
    if annotation is bool or annotation is Any or annotation is object:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(a, bool) for a in get_args(annotation))
    return any(_allows_bool(a) for a in get_args(annotation))


def _type_name(annotation) -> str:
    """``int``, ``list[int]``, ``Literal['torch', 'numpy']``: the type without pydantic's constraints."""
    if get_origin(annotation) is None:
        return getattr(annotation, "__name__", str(annotation))
    text = str(annotation).replace("typing.", "").replace("annotated_types.", "")
    return re.sub(r"Annotated\[(\w+), [^\]]*\]", r"\1", text)


def config_to_yaml(config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
