"""Every field of every command's config, nested sections included, has a help text: it is the field's line in
``--help`` and in the generated configuration reference (docs/hooks/generated_pages.py)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from metaagent.cli.flags import field_help
from metaagent.lazy import import_file

HOOK = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "generated_pages.py"


def _commands() -> list[type]:
    module = import_file(HOOK, "generated_pages")
    return [module._load(config) for _command, _cli, config, _purpose in module.COMMANDS]


def _config_classes(tp: typing.Any) -> list[type]:
    """The config dataclasses a field type holds (``X``, ``X | None``, ``dict[str, X]``, ...)."""
    found = [tp] if dataclasses.is_dataclass(tp) else []
    for arg in typing.get_args(tp):
        found += _config_classes(arg)
    return found


def undescribed(classes: list[type]) -> list[str]:
    """``module.Class.field`` of every init field without a help text, over ``classes`` and their sections."""
    seen: set[type] = set()
    missing: list[str] = []
    todo = list(classes)
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        helps = field_help(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if not helps.get(f.name, "").strip():
                missing.append(f"{cls.__module__}.{cls.__name__}.{f.name}")
            todo += _config_classes(hints[f.name])
    return sorted(missing)


def test_every_config_field_has_a_description():
    classes = _commands()
    assert len(classes) == 5
    missing = undescribed(classes)
    assert not missing, f"{len(missing)} config field(s) without a description (a trailing # comment): {missing}"


@dataclasses.dataclass
class _Section:
    described: int = 1  # what it means
    bare: int = 2


@dataclasses.dataclass
class _Top:
    section: _Section = dataclasses.field(default_factory=_Section)  # a nested section


def test_the_check_finds_a_field_without_a_description():
    assert undescribed([_Top]) == [f"{__name__}._Section.bare"]
