"""The run directory of a training run, identical for every backend (replay and the other tools read it)::

    RUN/config.yaml                  the resolved config (written once, by a fresh run)
        run.json                     run id, seed, models, version, backend, isolation (written once)
        metrics.jsonl                one line per step (metaagent.learn.metrics.MetricsLogger)
        rollouts/step_000000.jsonl   the step's rollout records; val_step_*.jsonl: validation's
        checkpoints/step_00000030/   the backend's models and optimizers, the loop's state beside them

A fresh run never appends to an earlier one in the same folder: the earlier run is renamed to
``RUN.<its run id>``, not deleted. ``--resume`` continues the newest complete checkpoint or a given one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from metaagent import __version__
from metaagent.records import RolloutTree, TreeWriter
from metaagent.records import config_hash as record_hash

from .errors import TrainError

log = logging.getLogger(__name__)

RUN_INFO = "run.json"
CONFIG = "config.yaml"


def config_hash(config: Any) -> str:
    """Hash of the settings that decide the schedule and data order (not the length or the folder)."""
    d = config.to_dict()
    # where metrics go does not decide anything either: a resumed run may add or drop a tracker
    unused = ("steps", "out", "loggers", "tracker_project")
    d["trainer"] = {k: v for k, v in d["trainer"].items() if k not in unused}
    return record_hash(d)


def new_run_info(*, seed: int, backend: str, backend_info: dict[str, Any], isolation: str) -> dict[str, Any]:
    """run.json of a fresh run: a new run id, the seed, the backend's models and fields, the isolation."""
    extra = dict(backend_info)
    return {
        "run_id": f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
        "seed": seed,
        "models": extra.pop("models"),
        "metaagent_version": __version__,
        "created_at": time.time(),
        "backend": backend,
        "isolation": isolation,
        **extra,
    }


class RunDirectory:
    """The folder ``path`` of one run (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def prepare(self, resume: str | bool | None) -> None:
        """Create the folder; a fresh run (no ``resume``) in a folder holding a run moves that run aside."""
        if not resume and (self.path / RUN_INFO).is_file():
            self._move_aside()
        self.path.mkdir(parents=True, exist_ok=True)

    def _move_aside(self) -> None:
        try:
            old_id = json.loads((self.path / RUN_INFO).read_text())["run_id"]
        except (OSError, ValueError, KeyError):
            old_id = time.strftime("%Y%m%d-%H%M%S")
        backup = self.path.with_name(f"{self.path.name}.{old_id}")
        os.rename(self.path, backup)
        log.warning(
            "%s held the earlier run %s; moved it to %s (pass --resume to continue a run instead)",
            self.path, old_id, backup,
        )  # fmt: skip

    def find_checkpoint(self, resume: str | bool | None) -> Path | None:
        """The checkpoint ``--resume`` names: True, the newest of this run; a folder, that one; else None. A
        missing one is a :class:`TrainError` naming the fix (before any model loads)."""
        if not resume:
            return None
        if resume is True:
            path = self.newest_checkpoint()
            if path is None:
                raise TrainError(
                    f"--resume: no checkpoint under {self.path}/checkpoints; start without --resume"
                )
            return path
        path = Path(resume)
        if not (path / "meta.json").is_file():
            raise TrainError(f"--resume {path}: not a checkpoint folder (no meta.json)")
        return path

    def newest_checkpoint(self) -> Path | None:
        from metaagent.learn.checkpoint import latest_checkpoint

        return latest_checkpoint(self.path)

    def start(self, run_info: dict[str, Any], config: dict[str, Any]) -> None:
        """Write a fresh run's run.json and config.yaml."""
        (self.path / RUN_INFO).write_text(json.dumps(run_info, indent=2))
        (self.path / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))

    def run_info(self) -> dict[str, Any]:
        """The run.json a resumed run continues under."""
        return json.loads((self.path / RUN_INFO).read_text())

    def rollout_path(self, step: int, prefix: str = "") -> Path:
        """The rollout records of ``step`` (``prefix="val_"``: its validation's)."""
        return self.path / "rollouts" / f"{prefix}step_{step:06d}.jsonl"

    def write_rollouts(self, step: int, trees: Iterable[RolloutTree], prefix: str = "") -> Path:
        """Write ``trees`` as the rollout records of ``step`` (replacing an earlier write); their file."""
        path = self.rollout_path(step, prefix)
        with TreeWriter(path, truncate=True) as w:
            for tree in trees:
                w.write(tree)
        return path
