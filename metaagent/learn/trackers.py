"""Experiment trackers beside ``metrics.jsonl``: TensorBoard, Weights & Biases and MLflow (``trainer.loggers``).

Each tracker is optional and imported only when a run names it; a missing package is a one-line
:class:`TrackerError` naming the extra to install (``pip install 'metaagent[wandb]'``). Every tracker receives
the same per-step metrics as ``metrics.jsonl`` (its numeric values; strings such as ``schedule/active`` stay
in the JSONL only), the run id and the resolved config once at the start of a fresh run, and, where it
supports them, a per-step sample table (one designer script and one agent reply)::

    jsonl        RUN/metrics.jsonl                       always on (resume and metaagent-replay read it)
    tensorboard  RUN/tensorboard/                        add_scalar per metric, add_text per sample
    wandb        project trainer.tracker_project         wandb.log(step=...), wandb.Table "rollout/sample_table"
    mlflow       experiment trainer.tracker_project      log_batch, log_dict("config.json"), log_dict("samples/...")

Where the runs go is each tool's own setting: ``WANDB_MODE`` / ``WANDB_DIR`` / ``WANDB_ENTITY``,
``MLFLOW_TRACKING_URI`` (default ``./mlruns``). A resumed run continues the same tracker run (wandb id and
the MLflow tag ``metaagent.run_id`` are the run id).
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metaagent.errors import MetaAgentError

#: the names ``trainer.loggers`` accepts; ``jsonl`` is required
LOGGERS = ("jsonl", "tensorboard", "wandb", "mlflow")
#: the pip extra that installs each optional tracker
EXTRAS = {"wandb": "wandb", "mlflow": "mlflow"}


class TrackerError(MetaAgentError, RuntimeError):
    """A configured experiment tracker cannot be used (usually: its package is not installed)."""


def _require(module: str, logger: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrackerError(
            f"trainer.loggers lists {logger!r} but the {module!r} package is not installed: "
            f"pip install 'metaagent[{EXTRAS[logger]}]' (or drop {logger} from trainer.loggers)"
        ) from None


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric, finite metrics of a step (what trackers plot)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[k] = float(v)
    return out


class Tracker:
    """One destination of step metrics."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        raise NotImplementedError

    def log_samples(self, step: int, samples: Mapping[str, str]) -> None:
        """One designer script and one agent reply of the step (default: not kept)."""

    def close(self) -> None:
        pass


class TensorBoardTracker(Tracker):
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._w = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in metrics.items():
            self._w.add_scalar(k, v, step)
        self._w.flush()

    def log_samples(self, step: int, samples: Mapping[str, str]) -> None:
        for k, text in samples.items():
            self._w.add_text(f"samples/{k}", text, step)

    def close(self) -> None:
        self._w.close()


class WandbTracker(Tracker):
    def __init__(self, run_dir: Path, *, run_id: str, project: str, config: Mapping[str, Any] | None, resume: bool):
        self._wandb = _require("wandb", "wandb")
        self._run = self._wandb.init(
            project=project,
            id=_wandb_id(run_id),
            name=run_id,
            config=dict(config) if config is not None else None,
            resume="allow" if resume else None,
            dir=str(run_dir),
            reinit="create_new",
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def log_samples(self, step: int, samples: Mapping[str, str]) -> None:
        # one small table per step under one key (the W&B UI steps through them), not a growing table
        # re-logged every step, which would store O(steps^2) rows
        row = [step, samples.get("designer", ""), samples.get("agent", "")]
        table = self._wandb.Table(columns=["step", "designer", "agent"], data=[row])
        self._run.log({"rollout/sample_table": table}, step=step)

    def close(self) -> None:
        self._run.finish()


class MlflowTracker(Tracker):
    def __init__(self, *, run_id: str, project: str, config: Mapping[str, Any] | None, resume: bool):
        _require("mlflow", "mlflow")
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        self._Metric = Metric
        self._parents: set[str] = set()  # key prefixes seen so far (see mlflow_key)
        try:
            self._client = c = MlflowClient()
            exp = c.get_experiment_by_name(project)
            exp_id = exp.experiment_id if exp is not None else c.create_experiment(project)
            found = c.search_runs([exp_id], filter_string=f"tags.`metaagent.run_id` = '{run_id}'") if resume else []
            if found:
                self._id = found[0].info.run_id
            else:
                self._id = c.create_run(exp_id, run_name=run_id, tags={"metaagent.run_id": run_id}).info.run_id
            if config is not None:
                c.log_dict(self._id, dict(config), "config.json")
        except Exception as e:  # the tracking server or store refused: one line, not a traceback
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TrackerError(f"mlflow (MLFLOW_TRACKING_URI): {first}") from None

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        self._parents |= {k.rsplit("/", i)[0] for k in metrics for i in range(1, k.count("/") + 1)}
        batch = [self._Metric(mlflow_key(k, self._parents), v, now, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):  # MLflow's log_batch limit
            self._client.log_batch(self._id, metrics=batch[i : i + 1000])

    def log_samples(self, step: int, samples: Mapping[str, str]) -> None:
        self._client.log_dict(self._id, {"step": step, **samples}, f"samples/step_{step:06d}.json")

    def close(self) -> None:
        self._client.set_terminated(self._id)


def mlflow_key(key: str, parents: set[str] | frozenset[str] = frozenset()) -> str:
    r"""The MLflow name of a metric: the same key, except that characters MLflow refuses (it allows
    ``[/\w.\- :]``; ``@`` of ``pass@k``) become ``_``, and a key that is also the prefix of other keys
    (``train/samples`` beside ``train/samples/designer``) gets ``/all``, because MLflow's file store keeps
    each metric as a file under folders named by the ``/`` parts."""
    key = re.sub(r"[^/\w.\- :]", "_", key)
    return f"{key}/all" if key in parents else key


def _wandb_id(run_id: str) -> str:
    return re.sub(r"[^\w-]", "-", run_id)


def check_available(names: list[str] | tuple[str, ...]) -> None:
    """Import the packages of the named trackers now, before a run writes anything (TrackerError if missing)."""
    for name in names:
        if name in EXTRAS:
            _require(name, name)


def open_trackers(
    names: list[str] | tuple[str, ...],
    run_dir: Path,
    *,
    run_id: str | None,
    project: str,
    config: Mapping[str, Any] | None,
    resume: bool,
) -> list[Tracker]:
    """The trackers of ``names`` other than jsonl, in order. ``config`` is logged once (None on resume)."""
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise TrackerError(f"trainer.loggers: unknown {unknown}; choose from {LOGGERS}")
    rid = run_id or run_dir.name
    out: list[Tracker] = []
    try:
        for name in names:
            if name == "tensorboard":
                out.append(TensorBoardTracker(run_dir))
            elif name == "wandb":
                out.append(WandbTracker(run_dir, run_id=rid, project=project, config=config, resume=resume))
            elif name == "mlflow":
                out.append(MlflowTracker(run_id=rid, project=project, config=config, resume=resume))
    except BaseException:
        for t in out:
            t.close()
        raise
    return out


def step_samples(trees: Any) -> dict[str, str]:
    """One designer output and one agent reply of a step's trees (the texts the console shows)."""
    out: dict[str, str] = {}
    design = next((d for t in trees for d in t.designs if d.sample is not None), None)
    if design is not None:
        out["designer"] = design.sample.text
    turn = next((turn for t in trees for _, e in t.executions() for turn in e.turns), None)
    if turn is not None:
        out["agent"] = f"[{turn.role}] {turn.response}"
    return out
