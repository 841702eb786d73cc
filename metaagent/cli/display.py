"""Rich progress display for training: step, active role, rollout progress, rewards per role, samples."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from metaagent.records import Design, Execution, RolloutTree
from metaagent.rollout.engine import RolloutObserver
from metaagent.train.schedule import StageSchedule

ROLE_STYLE = {"executor": "green", "designer": "magenta", "both": "yellow", "none": "dim"}


class TrainDisplay(RolloutObserver):
    """Shows rollout progress while a step runs and one summary row per finished step."""

    def __init__(self, console: Console | None = None, *, show_samples: bool = True, sample_chars: int = 600):
        self.console = console or Console()
        self.show_samples = show_samples
        self.sample_chars = sample_chars
        self._progress: Progress | None = None
        self._lock = threading.RLock()  # executions_started -> designs_started (frozen designs) re-enters
        self._designs = self._execs = None
        self._failed = 0
        self._tokens = 0
        self._t0 = time.perf_counter()

    # ---- run-level ----------------------------------------------------------------------------------------

    def header(self, config: Any, start_step: int, run_dir: str, slots: dict[str, int] | None = None) -> None:
        """The run's settings; ``slots``: tasks per domain in a batch (``MixtureSampler.slots``)."""
        c = config
        shares = sorted((slots or {}).items())
        mix = ", ".join(f"{n} {d}" for d, n in shares) or f"mix {c.data.mix or 'alike'}"
        table = Table(title="train-metaagent", show_header=False, box=None)
        table.add_row("run dir", run_dir)
        table.add_row("model", f"{c.policy.model} ({c.policy.weights} weights, {c.policy.backend} on {c.policy.device})")
        table.add_row("rollout", f"M={c.rollout.m_designs} designs x N={c.rollout.n_executions} executions, "
                      f"batch {c.data.batch_size} tasks ({mix})")
        table.add_row("schedule", StageSchedule(c.schedule.mode, c.schedule.stage_len).describe(c.trainer.steps))
        table.add_row("steps", f"{start_step} -> {c.trainer.steps}" + (" (resumed)" if start_step else ""))
        self.console.print(table)

    # ---- RolloutObserver ----------------------------------------------------------------------------------

    def designs_started(self, n: int) -> None:
        with self._lock:
            self._progress = Progress(
                TextColumn("  {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[extra]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._designs = self._progress.add_task("designs", total=n, extra="")
            self._execs = None
            self._failed = self._tokens = 0
            self._t0 = time.perf_counter()

    def designs_done(self, designs: Sequence[Design]) -> None:
        with self._lock:
            if self._progress is not None and self._designs is not None:
                valid = sum(d.valid for d in designs)
                self._progress.update(self._designs, completed=len(designs), extra=f"{valid} valid")

    def executions_started(self, n: int) -> None:
        with self._lock:
            if self._progress is None:
                self.designs_started(0)
            if self._execs is not None:  # a later wave of the adaptive budget: the same bar grows
                total = next(t.total for t in self._progress.tasks if t.id == self._execs) or 0  # type: ignore[union-attr]
                self._progress.update(self._execs, total=total + n)  # type: ignore[union-attr]
                return
            self._execs = self._progress.add_task("executions", total=n, extra="")  # type: ignore[union-attr]
            self._t0 = time.perf_counter()

    def execution_done(self, execution: Execution) -> None:
        with self._lock:
            if self._progress is None or self._execs is None:
                return
            self._failed += execution.status != "ok"
            self._tokens += sum(len(t.response_ids) for t in execution.turns)
            rate = self._tokens / max(1e-6, time.perf_counter() - self._t0)
            self._progress.update(self._execs, advance=1, extra=f"{self._failed} failed, {rate:.0f} tok/s")

    def _stop_progress(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None

    # ---- step-level ---------------------------------------------------------------------------------------

    def step_done(self, step: int, metrics: dict[str, Any], trees: Sequence[RolloutTree]) -> None:
        self._stop_progress()
        m = metrics
        role = m.get("schedule/active", "?")
        style = ROLE_STYLE.get(role, "white")
        status = {s: int(m.get(f"rollout/exec_status/{s}", 0)) for s in ("ok", "error", "timeout", "limit")}
        line = (
            f"step {step:>4} [{style}]{role:>8}[/] stage {m.get('schedule/stage', 0)} | "
            f"R designer {m.get('rollout/reward/designer', 0):.3f} executor {m.get('rollout/reward/executor', 0):.3f} "
            f"correct {m.get('rollout/correct', 0):.2f} | valid scripts {m.get('rollout/valid_script_rate', 0):.0%} | "
            f"exec ok {status['ok']} err {status['error']} timeout {status['timeout']} limit {status['limit']} | "
            f"samples D {int(m.get('train/samples/designer', 0))} E {int(m.get('train/samples/executor', 0))} "
            f"loss {_loss_text(m)} | {m.get('time/step_s', 0):.0f}s "
            f"(rollout {m.get('time/rollout_s', 0):.0f}s, update {m.get('time/update_s', 0):.0f}s)"
        )
        self.console.print(line, highlight=False)
        if any(k.startswith("val/") for k in m):
            self.console.print(
                f"           [cyan]val[/] R executor {m.get('val/reward/executor', 0):.3f} "
                f"correct {m.get('val/correct', 0):.2f} valid scripts {m.get('val/valid_script_rate', 0):.0%}",
                highlight=False,
            )
        if self.show_samples:
            self.samples(trees)

    def samples(self, trees: Sequence[RolloutTree]) -> None:
        """Print one designer output and one agent reply of the step: real model text, shortened."""
        design = next((d for t in trees for d in t.designs if d.sample is not None), None)
        if design is not None:
            verdict = "valid" if design.valid else f"invalid: {design.check.errors[0].code if design.check.errors else '?'}"
            self.console.print(f"  [magenta]designer[/] ({verdict}):", highlight=False)
            self.console.print(_indent(_clip(design.sample.text, self.sample_chars)), markup=False, highlight=False)
        turn = next((turn for t in trees for _, e in t.executions() for turn in e.turns), None)
        if turn is not None:
            self.console.print(f"  [green]agent {turn.role}[/]:", highlight=False)
            self.console.print(_indent(_clip(turn.response, self.sample_chars)), markup=False, highlight=False)


def _clip(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else text[:n] + f" ... [{len(text) - n} more chars]"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _loss_text(m: dict[str, Any]) -> str:
    """The step's loss: one model's ``train/loss``, each model's (``train/<key>/loss``, separate weights), or ``-``
    when no update ran (no sample of an active role, or the frozen mode): never a 0 that no update computed."""
    if "train/loss" in m:
        return f"{m['train/loss']:+.4f}"
    per_model = {k.split("/")[1]: v for k, v in m.items() if re.fullmatch(r"train/[^/]+/loss", k)}
    return " ".join(f"{key} {v:+.4f}" for key, v in sorted(per_model.items())) or "-"
