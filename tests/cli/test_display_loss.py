"""The step line: ``k/N`` with an ETA, and each trained model's loss (3 significant digits, so a GRPO
surrogate near 0 is not shown as ``+0.0000``), ``-`` when no update ran, the reason when a loss was computed
but no step taken."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from metaagent.cli.display import TrainDisplay, _duration, _progress_text
from metaagent.train.config import ScheduleConfig


def _config(train: list, steps: int = 4) -> SimpleNamespace:
    return SimpleNamespace(
        policy=SimpleNamespace(model="tiny", weights="shared", backend="local", device="cpu"),
        rollout=SimpleNamespace(m_designs=2, n_executions=2),
        data=SimpleNamespace(batch_size=2, mix={}, train=train),
        schedule=ScheduleConfig(mode="stagewise", stage_len=1),
        trainer=SimpleNamespace(steps=steps),
    )


def _line(metrics: dict, display: TrainDisplay | None = None, step: int = 0) -> str:
    out = io.StringIO()
    display = display or TrainDisplay(show_samples=False)
    display.console = Console(file=out, width=400)
    display.step_done(step, metrics, [])
    return out.getvalue()


def test_the_step_line_never_shows_a_loss_no_update_computed():
    assert "loss +0.125 |g| 0.5 |" in _line({"train/loss": 0.125, "train/grad_norm": 0.5})
    assert "loss -1.23e-05 |" in _line({"train/loss": -1.234e-5})
    both = _line({"train/designer/loss": -0.5, "train/executor/loss": 0.25, "train/designer/lr": 1e-5})
    assert "loss designer -0.5, executor +0.25 |" in both
    assert "loss - |" in _line({"schedule/active": "none", "train/designer/skipped_step": 1.0})
    assert "loss - |" in _line({"train/lr": 1e-6, "train/skipped_step": 1.0})


def test_a_loss_without_an_optimizer_step_says_why():
    zero = {"train/loss": 0.0, "train/skipped_step": 1.0, "train/zero_advantage_step": 1.0}
    assert "loss no update (every advantage 0) |" in _line(zero)
    mixed = {
        "train/designer/loss": 0.0, "train/designer/zero_advantage_step": 1.0,
        "train/designer/skipped_step": 1.0,
        "train/executor/loss": 0.031, "train/executor/grad_norm": 1.25, "train/executor/skipped_step": 0.0,
        "train/critic/skipped_step": 0.0,
    }  # fmt: skip
    assert "loss designer no update (every advantage 0), executor +0.031 |g| 1.25 |" in _line(mixed)
    assert "skipped (non-finite grad)" in _line({"train/loss": 0.2, "train/nonfinite_grad": 1.0})


def test_the_step_line_counts_steps_and_estimates_the_time_left():
    display = TrainDisplay(show_samples=False)
    config = SimpleNamespace(
        policy=SimpleNamespace(model="tiny", weights="shared", backend="local", device="cpu"),
        rollout=SimpleNamespace(m_designs=2, n_executions=2),
        data=SimpleNamespace(batch_size=2, mix={}, train=[{"source": "bundled"}]),
        schedule=ScheduleConfig(mode="stagewise", stage_len=1),
        trainer=SimpleNamespace(steps=4),
    )
    display.console = Console(file=io.StringIO(), width=400)
    display.header(config, 0, "runs/x")
    assert "step 1/4 ETA 30s " in _line({"time/step_s": 10.0}, display, step=0)
    assert "step 2/4 ETA 40s " in _line({"time/step_s": 30.0}, display, step=1)  # mean 20 s x 2 left
    assert "step 4/4 " in _line({"time/step_s": 20.0}, display, step=3)


def test_progress_text_and_durations():
    assert _progress_text(7, None, []).strip() == "7"
    assert _progress_text(0, 100, [65.0]) == "1/100 ETA 1h47m"
    assert _duration(185) == "3m05s" and _duration(42.4) == "42s"


def test_piped_output_keeps_long_lines_and_code_unwrapped(monkeypatch, capsys):
    from metaagent.cli.display import default_console

    monkeypatch.delenv("COLUMNS", raising=False)
    console = default_console()  # pytest's captured stdout is not a terminal
    assert not console.is_terminal and console.soft_wrap
    line = "    total = sum(int(x) for x in sys.stdin.read().split())  # " + "a long comment " * 8
    console.print(line, markup=False, highlight=False)
    assert capsys.readouterr().out.rstrip("\n") == line


def test_a_frozen_designer_shows_no_valid_script_rate_and_plan_data_no_math_share():
    frozen = _line({"rollout/reward/designer": 0.5, "rollout/correct": 0.5})  # no design was sampled
    assert "| designer frozen |" in frozen and "valid scripts" not in frozen
    assert "| valid scripts 75% |" in _line({"rollout/valid_script_rate": 0.75})
    out = io.StringIO()
    display = TrainDisplay(Console(file=out, width=400), show_samples=False)
    display.header(_config([{"source": "planpath"}]), 0, "runs/x", slots={"plan": 2})
    assert "batch 2 tasks (2 plan)" in out.getvalue() and "math" not in out.getvalue()
    display.header(_config([{"source": "bundled"}]), 0, "runs/x", slots={"math": 1, "code": 1})
    assert "batch 2 tasks (1 code, 1 math)" in out.getvalue()
    display.header(_config([{"source": "bundled", "domain": "code"}]), 0, "runs/x")
    assert "batch 2 tasks (mix alike)" in out.getvalue()
