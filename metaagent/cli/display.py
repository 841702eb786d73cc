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

ROLE_STYLE = {"executor": "green", "designer": "magenta", "both": "yellow", "none": "dim"}


def default_console() -> Console:
    """The terminal's console; piped or redirected (not a terminal), one that never wraps a line
    (``soft_wrap``), so step lines and model-written code keep their lines instead of breaking at Rich's
    80-column default."""
    console = Console()
    if not console.is_terminal:
        console.soft_wrap = True
    return console


class TrainDisplay(RolloutObserver):
    """Shows rollout progress while a step runs and one summary row per finished step."""

    def __init__(self, console: Console | None = None, *, show_samples: bool = True, sample_chars: int = 600):
        self.console = console or default_console()
        self.show_samples = show_samples
        self.sample_chars = sample_chars
        self._progress: Progress | None = None
        self._lock = threading.RLock()  # executions_started -> designs_started (frozen designs) re-enters
        self._designs = self._execs = None
        self._failed = 0
        self._tokens = 0
        self._t0 = time.perf_counter()
        self._total_steps: int | None = None
        self._step_times: list[float] = []

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
        table.add_row("schedule", c.schedule.build().describe(c.trainer.steps))
        table.add_row("steps", f"{start_step} -> {c.trainer.steps}" + (" (resumed)" if start_step else ""))
        self._total_steps = int(c.trainer.steps)
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
        self._step_times.append(float(m.get("time/step_s", 0.0)))
        progress = _progress_text(step, self._total_steps, self._step_times)
        line = (
            f"step {progress} [{style}]{role:>8}[/] stage {m.get('schedule/stage', 0)} | "
            f"R designer {m.get('rollout/reward/designer', 0):.3f} executor {m.get('rollout/reward/executor', 0):.3f} "
            f"correct {m.get('rollout/correct', 0):.2f} | {_valid_text(m, 'rollout/')} | "
            f"exec ok {status['ok']} err {status['error']} timeout {status['timeout']} limit {status['limit']} | "
            f"samples D {int(m.get('train/samples/designer', 0))} E {int(m.get('train/samples/executor', 0))} "
            f"loss {_loss_text(m)} | {m.get('time/step_s', 0):.0f}s "
            f"(rollout {m.get('time/rollout_s', 0):.0f}s, update {m.get('time/update_s', 0):.0f}s)"
        )
        self.console.print(line, highlight=False)
        if any(k.startswith("val/") for k in m):
            self.console.print(
                f"           [cyan]val[/] R executor {m.get('val/reward/executor', 0):.3f} "
                f"correct {m.get('val/correct', 0):.2f} {_valid_text(m, 'val/')}",
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


def _valid_text(m: dict[str, Any], prefix: str) -> str:
    """``valid scripts 75%``, or ``designer frozen`` when no design was sampled (a frozen designer: the rate
    is not measured, not 0)."""
    rate = m.get(prefix + "valid_script_rate")
    return "designer frozen" if rate is None else f"valid scripts {rate:.0%}"


def _progress_text(step: int, total: int | None, step_times: Sequence[float]) -> str:
    """``k/N`` (1-based: step index ``step`` done of ``total``) and the time left,
    ``ETA = mean(step_times) * (total - k)``, the mean over the steps this display has shown (a resumed run's
    earlier steps are not in it). Without a total (no header shown) just the step index."""
    if total is None:
        return f"{step:>4}"
    done = step + 1
    left = max(0, total - done)
    eta = (sum(step_times) / len(step_times)) * left if step_times else 0.0
    return f"{done}/{total} ETA {_duration(eta)}" if left else f"{done}/{total}"


def _duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _model_loss(m: dict[str, Any], prefix: str) -> str | None:
    """One model's loss from its ``<prefix>loss`` / ``<prefix>grad_norm`` / ``<prefix>skipped_step`` metrics:
    the loss with 3 significant digits and the gradient norm before clipping when it stepped, ``no update
    (every advantage 0)`` / ``skipped (non-finite grad)`` when it computed a loss but took no step, ``-`` when
    it had nothing to train on, ``None`` when the model has no metrics at all."""
    if m.get(prefix + "zero_advantage_step"):
        return "no update (every advantage 0)"
    if m.get(prefix + "nonfinite_grad"):
        return "skipped (non-finite grad)"
    if prefix + "loss" in m:
        grad = f" |g| {m[prefix + 'grad_norm']:.3g}" if prefix + "grad_norm" in m else ""
        return f"{m[prefix + 'loss']:+.3g}{grad}"
    return "-" if prefix + "skipped_step" in m else None


def _loss_text(m: dict[str, Any]) -> str:
    """The step's loss: one model's ``train/loss``, each model's (``train/<key>/loss``, separate weights), or ``-``
    when no update ran (no sample of an active role, or the frozen mode): never a 0 that no update computed."""
    single = _model_loss(m, "train/")
    if single is not None:
        return single
    keys = sorted(
        {k.split("/")[1] for k in m if re.fullmatch(r"train/[^/]+/(loss|skipped_step)", k)} - {"critic"}
    )
    texts = [(key, t) for key in keys if (t := _model_loss(m, f"train/{key}/")) is not None]
    if all(t == "-" for _, t in texts):
        return "-"
    return ", ".join(f"{key} {t}" for key, t in texts)
