"""Run-directory checkpoints of the verl backend, in the local backend's layout and listing rules.

One checkpoint (``RUN/checkpoints/step_00000030/``)::

    meta.json          format, "backend": "verl", step, model keys and their folders (written last)
    state.json         schedule, sampler position, config hash, run id, RNG states (JSON, nothing pickled)
    verl/<key>/        verl's FSDP checkpoint of physical model <key>: sharded model + optimizer + extra
                       state (model_world_size_W_rank_R.pt, ...), fsdp_config.json, huggingface/ (config,
                       tokenizer; full weights too with verl.save_hf_model)
    critics/<key>/     with a critic (GAE): verl's FSDP checkpoint of model <key>'s critic (value model,
                       optimizer, extra state), as the local backend keeps its critics under critics/<key>/

Like the local backend, a checkpoint is written into a hidden temporary folder next to its final place and
renamed, so a crash never leaves a half-written ``step_*`` folder; ``latest_checkpoint`` (shared with the
local backend) only sees folders with ``meta.json``. The FSDP shards become a Hugging Face model with
``python -m metaagent.train.verl_backend.convert RUN/checkpoints/step_00000030 OUT``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from metaagent.learn.checkpoint import (
    CheckpointError,
    read_meta,
    read_state,
    write_checkpoint,
)

BACKEND = "verl"
MODELS_DIR = "verl"
CRITICS_DIR = "critics"


class SavesCheckpoints(Protocol):
    def save(self, path: Path, step: int) -> None: ...
    def load(self, path: Path) -> None: ...


def save_verl_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    *,
    groups: Mapping[str, SavesCheckpoints],
    state: Mapping[str, Any],
    hf_weights: bool = False,
) -> Path:
    """Write checkpoint ``step`` of every physical model atomically and return its folder."""
    if not groups:
        raise CheckpointError("a checkpoint needs at least one model")

    def fill(tmp: Path) -> dict[str, Any]:
        folders = {}
        for key, group in groups.items():
            folder = tmp / MODELS_DIR / key
            folder.mkdir(parents=True)
            group.save(folder, step)
            folders[key] = f"{MODELS_DIR}/{key}"
        critics = {}
        for key, group in groups.items():
            if getattr(group, "use_critic", False):
                folder = tmp / CRITICS_DIR / key
                folder.mkdir(parents=True)
                group.save_critic(folder, step)
                critics[key] = f"{CRITICS_DIR}/{key}"
        meta = {"backend": BACKEND, "models": folders, "optimizers": sorted(groups), "hf_weights": hf_weights}
        return meta | ({"critics": critics} if critics else {})

    return write_checkpoint(run_dir, step, state, fill)


def verl_model_dirs(path: str | os.PathLike[str]) -> dict[str, Path]:
    """Physical model key -> verl FSDP folder of a verl checkpoint; refuses local-backend checkpoints."""
    path = Path(path)
    meta = read_meta(path)
    if meta.get("backend") != BACKEND:
        raise CheckpointError(
            f"{path} was written by the {meta.get('backend', 'local')} backend; its models/<key>/ folders are already "
            "Hugging Face models (no conversion needed), and resuming it needs trainer.backend=local"
        )
    return {key: path / rel for key, rel in meta["models"].items()}


def load_verl_checkpoint(
    path: str | os.PathLike[str], *, groups: Mapping[str, SavesCheckpoints], restore_rng: bool = True
) -> dict[str, Any]:
    """Load every model's FSDP state into its group and return the saved JSON state (with ``"step"``)."""
    path = Path(path)
    folders = verl_model_dirs(path)
    missing = sorted(set(groups) - set(folders))
    if missing:
        raise CheckpointError(f"checkpoint {path} has no model(s) {missing}; it has {sorted(folders)}")
    critics = {k: path / rel for k, rel in read_meta(path).get("critics", {}).items()}
    lacking = sorted(k for k, g in groups.items() if getattr(g, "use_critic", False) and k not in critics)
    if lacking:
        raise CheckpointError(
            f"checkpoint {path} has no critic for model(s) {lacking} (it was saved without GAE); resume it with the "
            "estimator it was trained with"
        )
    for key, group in groups.items():
        group.load(folders[key])
        if getattr(group, "use_critic", False):
            group.load_critic(critics[key])
    return read_state(path, restore_rng=restore_rng)
