"""The committed cold-start adapter: a LoRA trained on sft_data/ with metaagent-sft, merged on demand.

This module knows the adapter folders: where one is read from, its hash (which names the merged model's cache
folder), its base, and its export for shipping. Merging and caching are :mod:`metaagent.policy.models`'
(``resolve_model("embedded-sft")`` merges the shipped one): ``load_cold_start()`` returns a local HF model
folder, the embedded SmolLM2-135M-Instruct with the adapter in ``metaagent/policy/cold_start_adapter/``
(shipped in the wheel) merged in, built once (~10 s) into the metaagent cache
(``metaagent.policy.models.cache_dir()/models/embedded-sft-<hash>``) and reused; the folder name changes
when the adapter or the base model recipe changes. It is a valid ``--model`` for train-metaagent and
metaagent-serve, so ``make demo`` can start RL from the cold start without retraining::

    from metaagent.policy.models import load_cold_start
    path = load_cold_start()          # e.g. ~/.cache/metaagent/models/embedded-sft-3f2a...

The adapter folder is ``$METAAGENT_COLD_START`` when set, else the packaged ``metaagent/policy/cold_start_adapter``
(next to the ``metaagent`` package). It was made by ``scripts/make_cold_start.sh``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from metaagent.errors import MetaAgentError
from metaagent.policy.model_files import BUILD_VERSION, COLD_START, COLD_START_SUITE, PROMPT_FILE
from metaagent.resources import cold_start_adapter_dir, suite_cold_start_adapter_dir

ENV_VAR = "METAAGENT_COLD_START"
BASE = "embedded"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
MARKER = "metaagent_cold_start.json"
CACHE_PREFIX = "embedded-sft"


class ColdStartError(MetaAgentError, FileNotFoundError):
    """The cold-start adapter is missing or unusable; the message says how to get it."""


def cold_start_dir(alias: str = CACHE_PREFIX) -> Path:
    """Where the cold-start adapter of an alias is read from: ``embedded-sft``'s is ``$METAAGENT_COLD_START`` when
    set, else the packaged one; ``embedded-sft-suite``'s is always the packaged suite adapter."""
    if alias == COLD_START_SUITE:
        return suite_cold_start_adapter_dir()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return cold_start_adapter_dir()


def adapter_hash(folder: Path, base: str) -> str:
    h = hashlib.sha256()
    for name in ADAPTER_FILES:
        path = folder / name
        if not path.is_file():
            raise ColdStartError(
                f"the cold-start adapter has no {name} in {folder}; make it with scripts/make_cold_start.sh, "
                f"or point ${ENV_VAR} at an adapter folder (adapter_config.json + adapter_model.safetensors)"
            )
        h.update(name.encode())
        h.update(path.read_bytes())

    if (folder / PROMPT_FILE).is_file():  # the designer prompt style it was trained on
        h.update((folder / PROMPT_FILE).read_bytes())

    h.update(f"base={base}:{BUILD_VERSION}".encode())
    return h.hexdigest()[:12]


def model_revision(name: str | os.PathLike[str]) -> str | None:
    """Which weights a model name stands for, when the name alone does not say: the adapter hash of
    ``embedded-sft`` (the shipped cold start, or ``$METAAGENT_COLD_START``) or of a LoRA adapter folder, the
    same hash that names the merged model's cache folder. None for anything else (an alias built from a
    pinned package, or an HF folder, named by its path). Results made with one revision must not be resumed
    with another (``metaagent-eval`` checks it)."""
    if os.fspath(name) in (COLD_START, COLD_START_SUITE):
        return adapter_hash(cold_start_dir(os.fspath(name)), BASE)
    path = Path(name).expanduser()
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        return adapter_hash(path, adapter_base(path))
    return None


def adapter_base(adapter: str | os.PathLike[str]) -> str:
    """The base model an adapter folder names (``base_model_name_or_path`` of its ``adapter_config.json``)."""
    path = Path(adapter) / "adapter_config.json"
    try:
        base = json.loads(path.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise ColdStartError(f"{path} cannot be read: {e}") from None
    if not base:
        raise ColdStartError(f"{path} names no base_model_name_or_path; merge it with metaagent-export --base MODEL")
    return str(base)


def export_adapter(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], *, dtype: str = "float16", base: str = BASE
) -> Path:
    """Copy a trained adapter (``metaagent-sft --lora-rank ...`` OUT/adapter) to ``dst`` for shipping.

    The weights are stored as ``dtype`` (float16 halves the size; they are upcast to float32 when merged)
    and ``base_model_name_or_path`` is set to ``base`` instead of the machine-specific cache path.
    """
    import torch
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    config = json.loads((src / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = base
    tensors = {
        k: v.to(getattr(torch, dtype)).contiguous()
        for k, v in load_file(str(src / "adapter_model.safetensors")).items()
    }
    dst.mkdir(parents=True, exist_ok=True)

    if (src / PROMPT_FILE).is_file():
        shutil.copyfile(src / PROMPT_FILE, dst / PROMPT_FILE)
    elif (dst / PROMPT_FILE).is_file():
        (dst / PROMPT_FILE).unlink()
    (dst / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(dst / "adapter_model.safetensors"), metadata={"format": "pt"})
    return dst
