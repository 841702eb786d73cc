"""Loading nested config dataclasses from YAML and ``dotted.key=value`` overrides.

Config classes are plain dataclasses that validate in ``__post_init__``; this module only moves data in
and out of them, with errors that name the offending key and the allowed ones.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from metaagent.errors import MetaAgentError

T = TypeVar("T")


class ConfigError(MetaAgentError, ValueError):
    """A config file or override is wrong; the message names the key and how to fix it."""


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert YAML/CLI data to the annotated type, recursing into nested dataclasses."""
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional or tp is Any:
            return None
        raise ConfigError(f"{where} must not be null")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping of {tp.__name__} fields, got {value!r}")
        return from_dict(tp, value, where=where)
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return value
    if origin in (list, Sequence, tuple):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        args = typing.get_args(tp)
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        args = typing.get_args(tp)
        val_tp = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where} must be one of {typing.get_args(tp)}, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{where} must be an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} must be a number, got {value!r}") from None
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return str(value)
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping; unknown keys are an error listing the known ones."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__} must be a mapping, got {type(data).__name__}")
    hints = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join((where + '.' if where else '') + k for k in unknown)}; "
            f"known keys{' of ' + where if where else ''}: {', '.join(sorted(fields))}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}" if where else str(e)) from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``rollout.m_designs=4`` -> (["rollout", "m_designs"], 4); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.subkey=value (e.g. rollout.m_designs=4)")
    key, raw = text.split("=", 1)
    key = key.strip().lstrip("-").replace("-", "_")
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {text!r}: {part} is not a section")
            node = nxt
        node[path[-1]] = value
    return data


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML config: a file path, or a packaged config by name (:func:`metaagent.resources.config_path`)."""
    from metaagent.resources import config_path

    try:
        path = config_path(path)
    except MetaAgentError as e:
        raise ConfigError(str(e)) from None
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must contain a mapping at the top level")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    data = load_yaml(path) if path else {}
    return from_dict(cls, apply_overrides(data, overrides))
