"""The template bank (paper App. A): complete workflow scripts with metadata.

Templates are in-context examples for the designer, prompts for distillation, and frozen designs for
fixed multi-agent baselines. Each is one ``.py`` file in the bank directory whose first lines are a
metadata header, followed by the script itself::

    # name: reflection
    # structure: reflection          (coarse class, metaagent.workflow.analysis.STRUCTURES)
    # pattern: reflection            (finer label, metaagent.workflow.analysis.PATTERNS)
    # domains: math, code
    # description: A solver drafts, a critic names the first error, the solver revises.
    solver = Agent(...)

The bank directory is ``path`` when given, else ``$METAAGENT_TEMPLATES``, else the repository's top-level
``templates/`` (:func:`metaagent.resources.template_dir`; the wheel ships it as ``metaagent/templates/``; its
subfolder ``fixed/`` holds the fixed workflows, which are not part of the bank). Without ``path``, the
templates of every registered bank join it (:data:`TEMPLATE_BANKS`, a :class:`metaagent.registry.Registry`
of functions returning a folder): a package ships its own templates as an entry point of the group
``metaagent.templates``, e.g. ``my_bank = "my_package.workflows:template_dir"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from metaagent.domain import domain_names
from metaagent.errors import MetaAgentError
from metaagent.registry import Registry
from metaagent.resources import template_dir

ENV_VAR = "METAAGENT_TEMPLATES"
REQUIRED_KEYS = ("name", "structure", "pattern", "domains", "description")
#: kept in step with metaagent.workflow.analysis (not imported here: loading templates must not need libcst)
STRUCTURES = ("single", "reflection", "ensemble", "solver-tester", "debate", "other")


class TemplateError(MetaAgentError, ValueError):
    """A template file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Template:
    """One workflow template. ``source`` is the script without its metadata header."""

    name: str
    structure: str
    domains: tuple[str, ...]
    description: str
    source: str
    pattern: str = ""
    path: str = ""


def default_template_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return template_dir()


#: template bank name -> a function returning the folder of its ``*.py`` templates; plugins: entry points of the
#: group ``metaagent.templates``. ``builtin`` is the package's bank, or ``$METAAGENT_TEMPLATES``'s folder
TEMPLATE_BANKS: Registry[Callable[[], str | os.PathLike[str]]] = Registry(
    "template bank", TemplateError, group="metaagent.templates"
)
BUILTIN_BANK = "builtin"
TEMPLATE_BANKS.register(BUILTIN_BANK)(default_template_dir)
register_template_bank = TEMPLATE_BANKS.register


def parse_template(text: str, path: str = "<template>") -> Template:
    """Split a template file into its metadata header and its script."""
    lines = text.replace("\r\n", "\n").split("\n")
    meta: dict[str, str] = {}
    body_start = 0
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("#"):
            body_start = i
            break
        key, sep, value = stripped.lstrip("#").strip().partition(":")
        if sep and key.strip() in REQUIRED_KEYS:
            meta[key.strip()] = value.strip()
    else:
        body_start = len(lines)
    missing = [k for k in REQUIRED_KEYS if not meta.get(k)]
    if missing:
        raise TemplateError(
            f"{path}: header is missing {missing}; start the file with lines like '# name: ...'"
        )
    if meta["structure"] not in STRUCTURES:
        raise TemplateError(f"{path}: structure must be one of {STRUCTURES}, got {meta['structure']!r}")
    domains = tuple(d.strip() for d in meta["domains"].split(",") if d.strip())
    known = domain_names()
    bad = [d for d in domains if d not in known]
    if not domains or bad:
        raise TemplateError(
            f"{path}: domains must be a comma-separated subset of {known}, got {meta['domains']!r}"
        )
    source = "\n".join(lines[body_start:]).strip("\n") + "\n"
    if not source.strip():
        raise TemplateError(f"{path}: the template has a header but no script")
    return Template(
        name=meta["name"],
        structure=meta["structure"],
        domains=domains,
        description=meta["description"],
        source=source,
        pattern=meta["pattern"],
        path=path,
    )


def load_templates(path: str | os.PathLike[str] | None = None) -> list[Template]:
    """All templates of the bank directory ``path``, or (None) of every registered bank, sorted by name."""
    if path is not None:
        templates = _bank_templates(Path(path).expanduser())
    else:
        templates = _bank_templates(Path(TEMPLATE_BANKS.get(BUILTIN_BANK)()).expanduser())
        for name in TEMPLATE_BANKS.names():
            if name != BUILTIN_BANK:
                templates += _bank_templates(Path(TEMPLATE_BANKS.get(name)()).expanduser(), bank=name)
    seen: dict[str, str] = {}
    for t in templates:
        if t.name in seen:
            raise TemplateError(f"template name {t.name!r} is used by both {seen[t.name]} and {t.path}")
        seen[t.name] = t.path
    return sorted(templates, key=lambda t: t.name)


def _bank_templates(root: Path, bank: str | None = None) -> list[Template]:
    """The templates of one bank folder, in file order."""
    where = f"template bank {bank!r}: " if bank else ""
    if not root.is_dir():
        raise TemplateError(
            f"{where}template directory {root} does not exist; pass load_templates(path=...) or set ${ENV_VAR}"
        )
    templates = [parse_template(p.read_text(encoding="utf-8"), str(p)) for p in sorted(root.glob("*.py"))]
    if not templates:
        raise TemplateError(f"{where}template directory {root} holds no *.py templates")
    return templates
