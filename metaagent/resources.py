"""Data shipped with the package (a wheel carries them; no checkout needed).

The checkout keeps two of them as top-level folders, the single source of truth, which the wheel ships inside
the package (``pyproject.toml``'s ``package-dir`` maps ``metaagent.configs`` to ``configs/`` and
``metaagent.templates`` to ``templates/``); :func:`data_dir` finds each in the installed package, else in the
checkout beside the package:

- ``configs/*.yaml``: the training configs, addressable by name (``--config tiny``);
- ``templates/*.py``: the workflow template bank (``$METAAGENT_TEMPLATES`` overrides), and
  ``templates/fixed/``: the seed systems' fixed workflows, never shown to the designer.

The rest sit inside the package, found through ``importlib.resources``: the committed cold-start LoRA adapter
``metaagent/policy/cold_start_adapter/`` (``embedded-sft``; ``$METAAGENT_COLD_START`` overrides), and
``policy/suite_cold_start_adapter/``, the suite cold start (``embedded-sft-suite``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from metaagent.errors import MetaAgentError

#: the top-level folders of the checkout that the wheel ships inside the package, under the same names
DATA_DIRS = ("configs", "templates")


def package_path(*parts: str) -> Path:
    """A file or folder shipped in the package, as a filesystem path."""
    return Path(str(resources.files("metaagent").joinpath(*parts)))


def data_dir(name: str, package: Path | None = None) -> Path:
    """One of :data:`DATA_DIRS`: ``metaagent/<name>/`` of an installed wheel, else ``<name>/`` beside the
    package (a checkout, on ``PYTHONPATH`` or installed editable). ``package``: the package folder (default:
    metaagent's)."""
    if name not in DATA_DIRS:
        raise MetaAgentError(f"unknown data folder {name!r}; one of: {', '.join(DATA_DIRS)}")
    package = Path(str(resources.files("metaagent"))) if package is None else package
    for where in (package / name, package.parent / name):
        if where.is_dir():
            return where
    raise MetaAgentError(
        f"metaagent's {name}/ folder is neither in {package} (a wheel) nor in {package.parent} (a checkout); "
        "reinstall metaagent"
    )


def config_names() -> list[str]:
    return sorted(p.stem for p in data_dir("configs").glob("*.yaml"))


def config_path(name_or_path: str | Path) -> Path:
    """A config file: an existing path as given, else a shipped config by name (``tiny``, ``default``,
    ``tiny.yaml``, or ``configs/tiny.yaml`` from outside the checkout)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    shipped = data_dir("configs") / f"{name}.yaml"
    if shipped.is_file() and (len(path.parts) == 1 or path.parent.name == "configs"):
        return shipped
    raise MetaAgentError(
        f"config {str(name_or_path)!r} is neither a file nor a config name; "
        f"pass a path to a YAML file or one of: {', '.join(config_names())}"
    )


def template_dir() -> Path:
    """The workflow template bank (``templates/``)."""
    return data_dir("templates")


def fixed_workflow_dir() -> Path:
    """The seed systems' fixed workflows (``templates/fixed/``), never shown to the designer."""
    return data_dir("templates") / "fixed"


def cold_start_adapter_dir() -> Path:
    return package_path("policy", "cold_start_adapter")


def suite_cold_start_adapter_dir() -> Path:
    """The suite cold start (``embedded-sft-suite``)."""
    return package_path("policy", "suite_cold_start_adapter")
