"""Data shipped inside the package (a wheel carries them; no checkout needed), found through
``importlib.resources``:

- ``metaagent/configs/*.yaml``: the training configs, addressable by name (``--config tiny``);
- ``metaagent/workflow/template_bank/*.py``: the workflow template bank (``$METAAGENT_TEMPLATES`` overrides);
- ``metaagent/policy/cold_start_adapter/``: the committed cold-start LoRA adapter (``embedded-sft``;
  ``$METAAGENT_COLD_START`` overrides); ``policy/suite_cold_start_adapter/``: the suite cold start
  (``embedded-sft-suite``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from metaagent.errors import MetaAgentError


def package_path(*parts: str) -> Path:
    """A file or folder shipped in the package, as a filesystem path."""
    return Path(str(resources.files("metaagent").joinpath(*parts)))


def config_names() -> list[str]:
    return sorted(p.stem for p in package_path("configs").glob("*.yaml"))


def config_path(name_or_path: str | Path) -> Path:
    """A config file: an existing path as given, else a packaged config by name (``tiny``, ``default``,
    ``tiny.yaml`` or the checkout-relative ``configs/tiny.yaml``)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    packaged = package_path("configs", f"{name}.yaml")
    if packaged.is_file() and (len(path.parts) == 1 or path.parent.name == "configs"):
        return packaged
    raise MetaAgentError(
        f"config {str(name_or_path)!r} is neither a file nor a packaged config; packaged: {', '.join(config_names())}"
    )


def template_dir() -> Path:
    return package_path("workflow", "template_bank")


def cold_start_adapter_dir() -> Path:
    return package_path("policy", "cold_start_adapter")


def suite_cold_start_adapter_dir() -> Path:
    """The suite cold start (``embedded-sft-suite``, issue #42)."""
    return package_path("policy", "suite_cold_start_adapter")
