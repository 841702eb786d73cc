"""Command-line flags generated from config dataclasses, and the one way every command reports errors.

``add_config_flags(parser, Config)`` adds one flag per field of a config dataclass (``--field-name`` for a
flat config, ``--section.field`` for the sections of a nested one), with the field's type, its default,
its choices (a ``Literal`` or a ``CHOICES`` entry) and its help text: the field's trailing ``# comment`` or
its entry in the class docstring (``Attributes:`` / ``Args:`` style ``name: text`` lines). Declared aliases
keep the short flags users know (``--stage-len`` for ``schedule.stage_len``).

``config_overrides(args, parser)`` turns the flags the user gave into ``section.field=value`` overrides,
so flags, YAML files and positional overrides all go through one loader (:func:`metaagent.config.from_dict`),
and a wrong type or unknown key gets the same one-line error naming the key.

``run_main(prog, main, argv)`` runs a command: any :class:`~metaagent.errors.MetaAgentError` is printed as
``<prog>: <message>`` on one line (exit 2 for config errors, 1 otherwise); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from metaagent.config import ConfigError, NameOf, from_dict, load_yaml
from metaagent.errors import MetaAgentError

_COMMENT_RE = re.compile(r"^\s+(\w+)\s*:[^#]*#\s*(.+?)\s*$")
_DOC_RE = re.compile(r"^\s+(\w+(?:\s*/\s*\w+)*)\s*:\s*(.+?)\s*$")  # "name: text" or "a / b: text"
DEST_PREFIX = "cfg__"


def field_help(cls: type) -> dict[str, str]:
    """Help text per field: trailing comments in the class body, else docstring ``name: text`` lines; a
    field inherited from a base config class keeps the base's text unless the subclass gives its own."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__[1:]):
        if dataclasses.is_dataclass(base):
            out.update(_own_field_help(base))
    out.update(_own_field_help(cls))
    return out


def _own_field_help(cls: type) -> dict[str, str]:
    out: dict[str, str] = {}
    doc = inspect.getdoc(cls) or ""
    names = {f.name for f in dataclasses.fields(cls)}
    for line in doc.splitlines():
        m = _DOC_RE.match("    " + line)
        for name in (n.strip() for n in m.group(1).split("/")) if m else ():
            if name in names and name not in out:
                out[name] = m.group(2)
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return out
    above: list[str] = []  # comment lines right above a field describe it too
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        m = _COMMENT_RE.match(line)
        field_name = re.match(r"^\s+(\w+)\s*:", line)
        if m and m.group(1) in names:
            out[m.group(1)] = m.group(2)
        elif field_name and field_name.group(1) in names and above:
            out[field_name.group(1)] = " ".join(above)
        above = []
    return out


def _unwrap(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _bounds_text(tp: Any) -> str:
    """The allowed range an ``Annotated`` field declares, e.g. ``> 0`` or ``>= 0, < 1``."""
    parts = []
    for arg in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,):
        for meta in getattr(arg, "__metadata__", ()):
            for item in getattr(meta, "metadata", [meta]):
                for attr, sign in _BOUNDS:
                    if getattr(item, attr, None) is not None:
                        parts.append(f"{sign} {getattr(item, attr)}")
    return ", ".join(parts)


def _type_name(tp: Any) -> str:
    tp, optional = _unwrap(tp)
    name = getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
    if typing.get_origin(tp) in (list, tuple):
        name = "LIST"
    elif typing.get_origin(tp) in (dict, Mapping):
        name = "MAPPING"
    return name.upper() + ("|null" if optional else "")


_NO_DEFAULT = object()


def _defaults(cls: type) -> Any:
    try:
        return cls()
    except Exception:  # noqa: BLE001 - a config with required fields: defaults come from the fields
        return _NO_DEFAULT


def _default_text(f: dataclasses.Field, instance: Any) -> str:
    if instance is not _NO_DEFAULT:
        return repr(getattr(instance, f.name))
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return repr(f.default_factory())  # type: ignore[misc]
    return "required"


def _walk(cls: type, prefix: str = "", instance: Any = None) -> list[tuple[str, dataclasses.Field, Any, str, str]]:
    """(dotted name, field, type, help, default text) of every leaf field; sections one level deep."""
    hints = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    helps = field_help(cls)
    instance = _defaults(cls) if instance is None else instance
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = _named(hints[f.name], extras[f.name])
        inner, _ = _unwrap(tp)
        if dataclasses.is_dataclass(inner) and not prefix:
            sub = getattr(instance, f.name) if instance is not _NO_DEFAULT else _defaults(inner)
            out.extend(_walk(inner, f"{f.name}.", sub if sub is not None else _NO_DEFAULT))
        else:
            bounds = _bounds_text(extras[f.name])
            text = helps.get(f.name, "") + (f" [{bounds}]" if bounds else "")
            out.append((prefix + f.name, f, tp, text.strip(), _default_text(f, instance)))
    return out


def _named(tp: Any, annotated: Any) -> Any:
    """A field holding a registered name (:func:`metaagent.config.registered_name`) as the ``Literal`` of the
    names known now, so its flag offers them as choices; any other type as it is."""
    inner, optional = _unwrap(annotated)
    marks = [m for m in getattr(inner, "__metadata__", ()) if isinstance(m, NameOf)]
    if not marks:
        return tp
    literal = typing.Literal[tuple(marks[0].names())]
    return typing.Optional[literal] if optional else literal


def add_config_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    aliases: Mapping[str, str] | None = None,
    exclude: Sequence[str] = (),
    choices: Mapping[str, Sequence[Any]] | None = None,
    title: str | None = None,
) -> list[str]:
    """Add a flag per field of dataclass ``cls`` (see the module docstring); returns the dotted names.

    ``aliases`` maps extra flag spellings to dotted field names (``{"--stage-len": "schedule.stage_len"}``).
    Every flag defaults to None (unset), so only what the user gives becomes an override.
    """
    group = parser.add_argument_group(title or f"{cls.__name__} fields (section.field=value also works)")
    by_name: dict[str, list[str]] = {}
    for alias, name in (aliases or {}).items():
        by_name.setdefault(name, []).append(alias)
    names = []
    for name, f, tp, help_text, default in _walk(cls):
        if name in exclude:
            continue
        names.append(name)
        inner, _ = _unwrap(tp)
        flags = [f"--{name.replace('_', '-')}", *by_name.get(name, [])]
        kwargs: dict[str, Any] = {"dest": DEST_PREFIX + name, "default": None}
        allowed = (choices or {}).get(name)
        if typing.get_origin(inner) is typing.Literal:
            allowed = typing.get_args(inner)
        text = help_text or " "
        text += f" (default {default})"
        if inner is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(inner) in (list, tuple, Sequence) and all(
            a in (str, int, float, Ellipsis) for a in typing.get_args(inner)
        ):
            kwargs.update(nargs="+", metavar="ITEM")
        elif typing.get_origin(inner) is list and typing.get_origin(typing.get_args(inner)[0]) is typing.Literal:
            kwargs.update(nargs="+")
            allowed = typing.get_args(typing.get_args(inner)[0])
        elif typing.get_origin(inner) is list and typing.get_args(inner) in ((Any,), ()):
            kwargs.update(nargs="+", metavar="ITEM", type=_yaml_value)  # each item as YAML
        elif typing.get_origin(inner) in (list, tuple, dict, Mapping) or dataclasses.is_dataclass(inner):
            kwargs.update(metavar="YAML", type=_yaml_value)
        else:
            kwargs["metavar"] = _type_name(tp)
            if inner in (int, float):  # numbers as numbers (errors then show 10, not '10'); the rest as given
                kwargs["type"] = _number(inner)
        if allowed is not None:
            kwargs["choices"] = list(allowed)
            kwargs.pop("metavar", None)
        group.add_argument(*flags, help=text.replace("%", "%%"), **kwargs)
    return names


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``<prog>: <what is wrong> (see --help)``, exit 2; no abbreviated
    flags (a mistyped ``--rollout.m-design`` must not silently mean ``--rollout.m-designs``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}{self._did_you_mean(message)} (see {self.prog} --help)\n")

    def _did_you_mean(self, message: str) -> str:
        """``; did you mean --stage-len?`` (several: ``--a (for --x), --b (for --y)``) for the unrecognized
        flags with a close known one (difflib's ratio >= 0.75 against every option string), else ``""``."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        for arg in message.split(":", 1)[1].split():
            flag = arg.split("=", 1)[0]
            if flag.startswith("--") and (close := difflib.get_close_matches(flag, known, n=1, cutoff=0.75)):
                hints.append((flag, close[0]))
        if len(hints) == 1:
            return f"; did you mean {hints[0][1]}?"
        return f"; did you mean {', '.join(f'{c} (for {f})' for f, c in hints)}?" if hints else ""


def _number(kind: type) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            return text  # the config loader names the field, the value and what is allowed

    convert.__name__ = kind.__name__
    return convert


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(f"not valid YAML: {e}") from None


def config_overrides(args: argparse.Namespace) -> list[str]:
    """``section.field=value`` for every generated flag the user set (values as YAML, like overrides)."""
    import json

    out = []
    for dest, value in vars(args).items():
        if not dest.startswith(DEST_PREFIX) or value is None:
            continue
        name = dest[len(DEST_PREFIX) :]
        out.append(f"{name}={value if isinstance(value, str) else json.dumps(value)}")
    return out


def config_values(args: argparse.Namespace) -> dict[str, Any]:
    """The generated flags the user set, as a nested mapping (for flat configs: ``{field: value}``)."""
    out: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if dest.startswith(DEST_PREFIX) and value is not None:
            node = out
            *path, last = dest[len(DEST_PREFIX) :].split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
    return out


def load_flat_config(cls: type, path: str | None, args: argparse.Namespace, **fixed: Any) -> Any:
    """A flat config dataclass from an optional YAML file, then the flags the user set, then ``fixed``."""
    data = dict(load_yaml(path)) if path else {}
    data.update(config_values(args))
    data.update({k: v for k, v in fixed.items() if v is not None})
    return from_dict(cls, data)


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="on an error, show the full traceback")


def run_main(prog: str, main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> Any:
    """Run ``main(argv)`` and return what it returns; a :class:`MetaAgentError` becomes one line
    ``<prog>: <message>`` on stderr and the return value 2 (configuration) or 1 (anything else), unless
    ``--debug`` asks for the traceback. Console scripts exit with the returned code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        return main(argv)
    except MetaAgentError as e:
        if debug:
            raise
        message = " ".join(str(e).split()) or type(e).__name__
        print(f"{prog}: {message}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
