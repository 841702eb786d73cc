"""``train-metaagent`` stopped by a signal: SIGINT (Ctrl-C) after a step ends the run with a checkpoint of
the steps done, one line on stderr (no traceback) and exit code 130; ``--resume`` goes on from that
checkpoint, and SIGTERM stops it the same way with 143. The bit-for-bit resume after a signal at any
point of a step is tested in tests/train/test_trainer_run.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _start(out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "metaagent.cli.train", "--config", "tiny", "--steps", "50",
           "--out", str(out), "--quiet", "trainer.save_every=0", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _steps_logged(out: Path) -> int:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] >= 0)


def _stop_after(proc: subprocess.Popen, out: Path, steps: int, sig: int) -> tuple[int, str]:
    """Send ``sig`` once ``steps`` steps are logged; the exit code and stderr."""
    deadline = time.monotonic() + 600
    while _steps_logged(out) < steps:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no step logged in 600 s"
        time.sleep(0.2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _last_line(err: str) -> str:
    return [line for line in err.splitlines() if line.strip()][-1]


def test_sigint_checkpoints_the_steps_done_and_sigterm_stops_the_resumed_run(tmp_path):
    out = tmp_path / "run"
    code, err = _stop_after(_start(out), out, 1, signal.SIGINT)
    done = _steps_logged(out)
    assert code == 130 and "Traceback" not in err, err[-3000:]
    expected = f"train-metaagent: interrupted after step {done}; continue with --resume"
    assert _last_line(err) == expected, err[-3000:]
    assert "SIGINT: finishing step" in err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step_{done:08d}"]

    code, err = _stop_after(_start(out, "--resume"), out, done + 1, signal.SIGTERM)
    again = _steps_logged(out)
    assert code == 143 and "Traceback" not in err, err[-3000:]
    assert _last_line(err) == f"train-metaagent: interrupted after step {again}; continue with --resume"
    assert again > done and (out / "checkpoints" / f"step_{again:08d}" / "meta.json").is_file()
