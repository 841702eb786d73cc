"""MkDocs hook: pages and files that are generated at build time, so ``mkdocs build`` alone makes the site.

- ``reference/configuration.md``: every config field of every command, from the same source as each command's
  ``--help`` (the command's own argparse parser, built by ``metaagent.cli.<command>.build_parser``, and the
  field walk of :mod:`metaagent.cli.flags` that generates those flags), and each built-in domain's own
  settings (``reward.domains.<domain>``, from its ``Domain.settings`` class);
- ``results/**.png``: the committed benchmark curves under ``benchmarks/results/``, served from where they are
  committed (nothing is copied into ``docs/``);
- ``layout.md``'s rooms: each row marked ``{{ docstring }}`` gets the first paragraph of the docstring of each
  package or module its folder cell names; the build fails when a package of ``metaagent`` has no docstring or
  a room of the package has no row (:func:`layout_markdown`).

Docstrings are written with Sphinx-style roles (``:class:`Policy```); on API pages the role prefix is dropped,
so the name reads as code.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
import types
import typing
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PAGE = "reference/configuration.md"
#: (command, CLI module, config class path, what the config is for)
COMMANDS = (
    ("train-metaagent", "metaagent.cli.train", "metaagent.train.config:TrainConfig", "training (`--config FILE`)"),
    ("metaagent-eval", "metaagent.cli.eval", "metaagent.eval.config:EvalConfig", "evaluation"),
    ("metaagent-sft", "metaagent.cli.sft", "metaagent.sft.trainer:SFTConfig", "the supervised cold start"),
    ("metaagent-serve", "metaagent.cli.serve", "metaagent.serve.config:ServeConfig", "the team server"),
    ("metaagent-distill", "metaagent.cli.distill", "metaagent.distill.config:DistillConfig", "distillation"),
)
LAYOUT_PAGE = "layout.md"
DOC_MARK = "{{ docstring }}"  # a layout row's concept cell filled from its folder's docstring(s)
_RST_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)\.?([^`]+)`")
_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(?=<code>)")
_RANGE = re.compile(r"\s*\[([^\[\]]*[<>]=?[^\[\]]*)\]\s*$")


def _flat(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _cell(text: str) -> str:
    return _flat(text).replace("[", "\\[").replace("]", "\\]")  # brackets in help texts are not links


def _code(text: str) -> str:
    if "<" in str(text):  # e.g. a regex default "(?<!...)" Markdown would read as raw HTML: an HTML code span
        chars = " ".join(str(text).split())
        return "<code>" + "".join(c if c.isalnum() or c == " " else f"&#{ord(c)};" for c in chars) + "</code>"
    text = _flat(text)
    return f"`{text}`" if "`" not in text else _cell(text)


def _load(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def config_tables() -> str:
    """The configuration reference as Markdown: per command, one section per config section (the first part of
    the dotted name), and in it one definition block per field: its name, then its flag, type, allowed values,
    default and meaning."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from metaagent.cli.flags import DEST_PREFIX, _type_name, _walk

    out = [
        "# Configuration reference",
        "",
        "Generated when the site is built, from the config classes and the flags each command generates from",
        "them: the same text as `--help`. Every field can be set in a YAML file given to `--config`, as a",
        "`section.field=value` override (training), or with the flag shown. Values outside the range are refused",
        "with one line naming the key.",
        "",
    ]
    for command, module, spec, purpose in COMMANDS:
        cls = _load(spec)
        parser = importlib.import_module(module).build_parser()
        actions = {a.dest: a for a in parser._actions}
        out += [f"## `{command}`", "", f"`{cls.__module__}.{cls.__name__}`: {purpose}.", ""]
        sections: dict[str, list[str]] = {"top level": []}  # top-level fields first, then each section once
        for name, _field, tp, help_text, default in _walk(cls):
            head = name.split(".")[0] if "." in name else "top level"
            block = _field_block(name, actions.get(DEST_PREFIX + name), _type_name(tp), help_text, default)
            sections.setdefault(head, []).extend(block)
        for head, blocks in sections.items():
            if blocks:
                title = f"`{head}`" if head != "top level" else head
                out += [f"### {command} · {title}", "", *blocks]
        out.append("")
    out += domain_settings_tables()
    return "\n".join(out) + "\n"


def domain_settings_tables() -> list[str]:
    """The section ``reward.domains.<domain>`` of each built-in domain with settings (``Domain.settings``), one
    definition block per field, as above."""
    from metaagent.cli.flags import _type_name, _walk
    from metaagent.domain import domains

    out = [
        "## Domain settings",
        "",
        "Each domain's own settings are its section `reward.domains.<domain>` of the reward config (training's",
        "`reward` section; `--reward.domains '{math: {final_form: lenient}}'` or",
        "`reward.domains.math.final_form=lenient`), from the domain's `Domain.settings` class. A plugin domain",
        "(`METAAGENT_DOMAINS`) adds its own the same way.",
        "",
    ]
    for name, domain in sorted(domains().items()):
        if domain.settings is None:
            continue
        cls = domain.settings
        out += [f"### `reward.domains.{name}`", "", f"`{cls.__module__}.{cls.__name__}`.", ""]
        for field, _f, tp, help_text, default in _walk(cls):
            choices = typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None
            action = types.SimpleNamespace(choices=choices, option_strings=[])
            out += _field_block(f"reward.domains.{name}.{field}", action, _type_name(tp), help_text, default)
    return out


def _field_block(name: str, action, type_name: str, help_text: str, default) -> list[str]:
    """One field as a definition block: ``name`` as the term; flag, type, allowed values and default on the
    first line of the definition, the meaning below it (no action: set by override or YAML only)."""
    allowed = ""
    match = _RANGE.search(help_text)
    if match:
        allowed, help_text = match.group(1), help_text[: match.start()]
    if action is not None and action.choices:
        allowed = ", ".join(f"`{c}`" for c in action.choices)
    elif allowed:
        allowed = _code(allowed)
    flags = ", ".join(f"`{f}`" for f in action.option_strings) if action and action.option_strings else "override only"
    facts = [f"flag {flags}", f"type {_code(type_name.replace('LITERAL', 'CHOICE'))}"]
    facts += [f"allowed {allowed}"] if allowed else []
    facts.append(f"default {_code(default)}")
    lines = [f"`{name}`", f":   {' · '.join(facts)}", "", f"    {_cell(help_text) or '—'}", ""]
    return [line.replace("\\|", "|") for line in lines]  # the table escape of "|" is not needed here


def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


def packages_without_docstring(package: Path = ROOT / "metaagent") -> list[str]:
    """The packages (folders with ``__init__.py``) under ``package``, itself included, whose ``__init__.py`` has
    no docstring, as paths relative to the checkout."""
    found = sorted(package.rglob("__init__.py"))
    return [p.parent.relative_to(package.parent).as_posix() for p in found if not (_docstring(p) or "").strip()]


def _summary(doc: str) -> str:
    """A docstring's first paragraph as one Markdown line: RST roles and literals as code, no trailing ``::``."""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    first = _RST_ROLE.sub(lambda m: f"``{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}``", first)
    first = re.sub(r"``([^`]+)``", r"`\1`", first).removesuffix("::").removesuffix(":")
    return first.replace("|", "\\|")


def _room_paths(cell: str, package: Path) -> list[Path]:
    """The files a layout row's folder cell names: ``metaagent/x/`` (its ``__init__.py``), ``metaagent/y.py``,
    and names relative to ``metaagent/`` after the first (``config.py``, ``distill/``)."""
    out = []
    for name in re.findall(r"`([^`]+)`", cell):
        rel = Path(name.removeprefix("metaagent/"))
        path = package / rel
        out.append(path / "__init__.py" if name.endswith("/") else path)
    return out


def layout_markdown(markdown: str, package: Path = ROOT / "metaagent") -> str:
    """``layout.md`` with every ``{{ docstring }}`` cell filled from the docstrings of the packages and modules of
    its row's folder cell (``name: summary`` each when the row names several). A package without a docstring, a
    marked row naming no file, or a room of the package (a top-level subpackage) without a row fails the build."""
    missing = packages_without_docstring(package)
    if missing:
        raise PluginError(f"package(s) without a docstring: {', '.join(missing)}; docs/layout.md's rows are made of them")
    out, named = [], set()
    for line in markdown.splitlines():
        cells = line.split(" | ")
        if line.startswith("|") and len(cells) >= 3:
            named.update(p.parent.name if p.name == "__init__.py" else p.stem for p in _room_paths(cells[1], package))
        if DOC_MARK in line:
            paths = _room_paths(cells[1], package)
            absent = [p for p in paths if not p.is_file()]
            if not paths or absent:
                raise PluginError(f"{LAYOUT_PAGE}: the row {cells[1]!r} names no file or a missing one {absent}")
            docs = [(p, _summary(_docstring(p) or "")) for p in paths]
            text = docs[0][1] if len(docs) == 1 else "; ".join(
                f"`{p.parent.name + '/' if p.name == '__init__.py' else p.name}`: {d.removesuffix('.')}" for p, d in docs
            )
            line = line.replace(DOC_MARK, text)
        out.append(line)
    rooms = sorted(p.parent.name for p in package.glob("*/__init__.py"))
    ground = sorted(p.stem for p in package.glob("*.py") if p.name != "__init__.py")
    unlisted = [r for r in (*rooms, *ground) if r not in named]
    if unlisted:
        raise PluginError(f"{LAYOUT_PAGE}: no row names the package(s) or module(s) {unlisted}; add them")
    return "\n".join(out) + "\n"


def on_page_markdown(markdown, page, config, files):
    return layout_markdown(markdown) if page.file.src_uri == LAYOUT_PAGE else markdown


def on_files(files, config):
    files.append(File.generated(config, CONFIG_PAGE, content=config_tables()))
    results = ROOT / "benchmarks"
    for png in sorted((results / "results").rglob("*.png")):
        files.append(
            File(
                png.relative_to(results).as_posix(),
                src_dir=str(results),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


def on_page_content(html, page, config, files):
    return _ROLE.sub("", html) if page.file.src_uri.startswith("api/") else html
