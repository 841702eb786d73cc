"""MkDocs hook: pages and files that are generated at build time, so ``mkdocs build`` alone makes the site.

- ``reference/configuration.md``: every config field of every command, from the same source as each command's
  ``--help`` (the command's own argparse parser, built by ``metaagent.cli.<command>.build_parser``, and the
  field walk of :mod:`metaagent.cli.flags` that generates those flags);
- ``results/**.png``: the committed benchmark curves under ``benchmarks/results/``, served from where they are
  committed (nothing is copied into ``docs/``).

Docstrings are written with Sphinx-style roles (``:class:`Policy```); on API pages the role prefix is dropped,
so the name reads as code.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

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
    return "\n".join(out) + "\n"


def _field_block(name: str, action, type_name: str, help_text: str, default) -> list[str]:
    """One field as a definition block: ``name`` as the term; flag, type, allowed values and default on the
    first line of the definition, the meaning below it."""
    allowed = ""
    match = _RANGE.search(help_text)
    if match:
        allowed, help_text = match.group(1), help_text[: match.start()]
    if action is not None and action.choices:
        allowed = ", ".join(f"`{c}`" for c in action.choices)
    elif allowed:
        allowed = _code(allowed)
    flags = ", ".join(f"`{f}`" for f in action.option_strings) if action is not None else "override only"
    facts = [f"flag {flags}", f"type {_code(type_name.replace('LITERAL', 'CHOICE'))}"]
    facts += [f"allowed {allowed}"] if allowed else []
    facts.append(f"default {_code(default)}")
    lines = [f"`{name}`", f":   {' · '.join(facts)}", "", f"    {_cell(help_text) or '—'}", ""]
    return [line.replace("\\|", "|") for line in lines]  # the table escape of "|" is not needed here


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
