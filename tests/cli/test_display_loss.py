"""The step line's loss: the one model's, each model's with separate weights, or ``-`` when no update ran."""

from __future__ import annotations

import io

from rich.console import Console

from metaagent.cli.display import TrainDisplay


def _line(metrics: dict) -> str:
    out = io.StringIO()
    TrainDisplay(Console(file=out, width=400), show_samples=False).step_done(0, metrics, [])
    return out.getvalue()


def test_the_step_line_never_shows_a_loss_no_update_computed():
    assert "loss +0.1250 |" in _line({"train/loss": 0.125})
    both = _line({"train/designer/loss": -0.5, "train/executor/loss": 0.25, "train/designer/lr": 1e-5})
    assert "loss designer -0.5000 executor +0.2500 |" in both
    assert "loss - |" in _line({"schedule/active": "none", "train/designer/skipped_step": 1.0})
