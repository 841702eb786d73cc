"""Loading nested config dataclasses from YAML and ``dotted.key=value`` overrides.

Config classes are plain dataclasses whose field annotations carry their allowed values declaratively:
``Annotated[float, Field(gt=0)]``, ``PositiveInt``, ``Literal["keep", "reset"]`` (pydantic constraints).
Field types and ranges are validated and converted by pydantic (lax mode, so command-line strings become
numbers and booleans), both when a config is loaded (:func:`from_dict`) and when a class deriving from
:class:`Checked` is constructed directly; only cross-field rules stay in a class's ``__post_init__``. Every
error is one :class:`ConfigError` line naming the key, the value and what is allowed; an unknown key gets
a did-you-mean.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

from metaagent.errors import MetaAgentError

T = TypeVar("T")


class ConfigError(MetaAgentError, ValueError):
    """A config file or override is wrong; the message names the key and how to fix it."""


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)  # keep Annotated constraints


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


@functools.cache
def _adapter(tp: Any) -> pydantic.TypeAdapter:
    # lax mode: "4" -> 4 and "true" -> True (command-line values), numbers -> str (a model named 7)
    return pydantic.TypeAdapter(tp, config=pydantic.ConfigDict(coerce_numbers_to_str=True))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Validate and convert YAML/CLI data to the annotated type with pydantic; nested config dataclasses
    go through :func:`from_dict` so their unknown keys are reported by name too."""
    inner, optional = _unwrap_optional(tp)
    if value is None and not optional and inner is not Any:
        raise ConfigError(f"{where} must not be null")
    if dataclasses.is_dataclass(inner) and isinstance(value, Mapping):
        return from_dict(inner, value, where=where)
    try:
        out = _adapter(tp).validate_python(value)
    except pydantic.ValidationError as e:
        loc, msg = _error_text(e)
        raise ConfigError(f"{where}{loc} = {_shown(where, value)}: {msg}") from None
    except TypeError as e:  # a type pydantic cannot validate: keep the value, the class validates it
        raise ConfigError(f"{where}: {e}") from None
    return out


def _error_text(e: pydantic.ValidationError) -> tuple[str, str]:
    err = e.errors()[0]
    loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"] if x not in ("function-after",))
    return f"{loc}", str(err["msg"]).removeprefix("Value error, ")


def _shown(where: str, value: Any) -> str:
    """The value as an error message shows it; secrets (``*api_key``) are not echoed."""
    return "'***'" if where.endswith("api_key") and isinstance(value, str) else repr(value)


def check_fields(obj: Any, error: type[Exception] | None = None) -> None:
    """Validate (and convert, lax mode) every field of dataclass ``obj`` against its annotation, constraints
    included; the first bad field raises one line ``field = value: what is allowed``."""
    hints = _field_types(type(obj))
    label = getattr(type(obj), "field_label", None) or (lambda name: name)  # e.g. the CLI flag of the field
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        tp = hints[f.name]
        inner, _ = _unwrap_optional(tp)
        value = getattr(obj, f.name)
        if inner is Any or dataclasses.is_dataclass(inner) or dataclasses.is_dataclass(value):
            continue
        try:
            out = _adapter(tp).validate_python(value)
        except pydantic.ValidationError as e:
            loc, msg = _error_text(e)
            raise (error or ConfigError)(f"{label(f.name)}{loc} = {_shown(f.name, value)}: {msg}") from None
        except TypeError:  # a type pydantic cannot validate: the class validates it
            continue
        if type(out) is not type(value) or out != value:  # converted, e.g. a list to a tuple
            object.__setattr__(obj, f.name, out)


@dataclasses.dataclass(frozen=True)
class NameOf:
    """``Annotated`` metadata of a field that holds a registered name (:func:`registered_name`): ``names()``
    lists the allowed ones when a value is checked (plugins installed since count) and for ``--help``."""

    names: typing.Callable[[], Sequence[str]]
    kind: str

    def __call__(self, value: str) -> str:
        known = list(self.names())
        if value not in known:
            raise ValueError(f"unknown {self.kind} {value!r}; known: {', '.join(known)}")
        return value


def registered_name(names: typing.Callable[[], Sequence[str]], kind: str) -> Any:
    """The type of a config field naming an entry of a registry (:class:`metaagent.registry.Registry`), e.g.
    ``Annotated[str, ...]`` whose value must be in ``names()``: a built-in or an installed plugin's name."""
    check = NameOf(names, kind)
    return typing.Annotated[str, pydantic.AfterValidator(check), check]


class Checked:
    """Base of config dataclasses: fields are validated against their annotations on construction
    (:func:`check_fields`). A subclass with cross-field rules calls ``super().__post_init__()`` first; one
    whose users know its fields as command-line flags sets ``field_label`` (field name -> the text errors
    name it by); one whose keys moved sets ``moved_keys`` (old key -> its new dotted place), so a config with
    an old key gets one line naming the new place."""

    field_label: typing.ClassVar[Any] = None
    moved_keys: typing.ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        check_fields(self)


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping; unknown keys are an error listing the known ones."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__} must be a mapping, got {type(data).__name__}")
    hints = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    moved = [k for k in unknown if k in getattr(cls, "moved_keys", {})]
    if moved:  # a key the class gave a new place (e.g. a domain's own settings)
        prefix = where + "." if where else ""
        raise ConfigError(f"{prefix}{moved[0]} is now {cls.moved_keys[moved[0]]}; rename it there")
    if unknown:
        close = {k: difflib.get_close_matches(str(k), list(fields), n=1) for k in unknown}
        hints_text = "".join(f" (did you mean {(where + '.' if where else '') + c[0]}?)" for c in close.values() if c)
        raise ConfigError(
            f"unknown key(s) {', '.join((where + '.' if where else '') + str(k) for k in unknown)}{hints_text}; "
            f"known keys{' of ' + where if where else ''}: {', '.join(sorted(fields))}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:  # a message that names a key of this section already needs no prefix
        raise ConfigError(f"{where}: {e}" if where and f"{where}." not in str(e) else str(e)) from None
    except MetaAgentError:  # a domain error of the class (e.g. EvalError): already one clear line
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def parse_sections(obj: Any) -> None:
    """Sections of dataclass ``obj`` given as mappings (``TrainConfig(reward={"lam": 0.2})``) become their
    config classes through :func:`from_dict`, so a wrong key or value gets the same error as in YAML."""
    hints = _field_types(type(obj))
    for f in dataclasses.fields(obj):
        inner, _ = _unwrap_optional(hints[f.name])
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(inner) and isinstance(value, Mapping):
            setattr(obj, f.name, from_dict(inner, value, where=f.name))


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
