"""A writer killed with SIGKILL in the middle of a checkpoint never leaves one that loads wrong.

A child process writes checkpoints through :func:`metaagent.learn.checkpoint.write_checkpoint` (the path both
backends use) whose files hold a pattern fixed by their step; the parent kills it mid-write, then checks that
the newest checkpoint :func:`latest_checkpoint` finds is complete and holds its own step's bytes, and that the
next write removes what the killed one left. A checkpoint damaged after the fact (a truncated file) is skipped
by ``latest_checkpoint`` and refused by the loader in one line.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metaagent.learn.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    read_state,
    verify_checkpoint,
    write_checkpoint,
)

ROOT = Path(__file__).resolve().parents[2]
FILES, CHUNKS, CHUNK = 3, 16, 64 * 1024  # 3 files of 1 MiB per checkpoint

WRITER = r"""
import sys, time
from pathlib import Path
from metaagent.learn.checkpoint import write_checkpoint

run, mid, hang = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "hang"
FILES, CHUNKS, CHUNK = {files}, {chunks}, {chunk}

def fill_for(step):
    def fill(tmp):
        (tmp / "models").mkdir()
        for i in range(FILES):
            with open(tmp / "models" / f"part{{i}}.bin", "wb") as f:
                for c in range(CHUNKS):
                    f.write(bytes([(step * 7 + i) % 251]) * CHUNK)
                    f.flush()
                    if step > 1 and i == 1 and c == CHUNKS // 2:
                        mid.write_text(str(step))  # half way through this checkpoint's files
                        if hang:
                            time.sleep(3600)
                    time.sleep(0.001)
        return {{"models": {{"policy": "models"}}, "optimizers": []}}
    return fill

for step in range(1, 1000):
    write_checkpoint(run, step, {{"step_of_state": step}}, fill_for(step))
"""


def _writer(tmp_path: Path, hang: bool) -> tuple[subprocess.Popen, Path, Path]:
    run, mid = tmp_path / "run", tmp_path / "mid"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(files=FILES, chunks=CHUNKS, chunk=CHUNK))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, str(script), str(run), str(mid), "hang" if hang else "go"]
    proc = subprocess.Popen(args, env=env)
    return proc, run, mid


def _wait_for(cond, proc: subprocess.Popen, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the writer exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.01)


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _check_good(path: Path) -> None:
    """Every file of checkpoint ``path`` is there, whole, and holds its own step's pattern."""
    meta = verify_checkpoint(path)
    step = meta["step"]
    assert read_state(path, restore_rng=False)["step_of_state"] == step
    for i in range(FILES):
        data = (path / "models" / f"part{i}.bin").read_bytes()
        assert data == bytes([(step * 7 + i) % 251]) * (CHUNKS * CHUNK), (path, i)


def test_killed_half_way_through_a_checkpoint_the_previous_one_is_found(tmp_path):
    proc, run, mid = _writer(tmp_path, hang=True)
    try:
        _wait_for(mid.exists, proc, "a second checkpoint half written")
    finally:
        _kill(proc)
    root = run / "checkpoints"
    assert any(p.name.startswith(".tmp-step_00000002") for p in root.iterdir())  # the killed write's folder
    assert [p.name for p in list_checkpoints(run)] == ["step_00000001"]
    latest = latest_checkpoint(run)
    assert latest is not None and latest.name == "step_00000001"
    _check_good(latest)
    # the next write (a resumed run) removes the dead writer's folder
    write_checkpoint(run, 2, {"step_of_state": 2}, lambda tmp: {"models": {}, "optimizers": []})
    assert sorted(p.name for p in root.iterdir()) == ["step_00000001", "step_00000002"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_killed_at_a_random_moment_every_visible_checkpoint_is_whole(tmp_path, seed):
    proc, run, mid = _writer(tmp_path, hang=False)
    try:
        _wait_for(mid.exists, proc, "a second checkpoint under way")
        time.sleep(random.Random(seed).uniform(0.0, 0.4))  # a checkpoint takes ~0.1 s: any point of one
    finally:
        _kill(proc)
    found = list_checkpoints(run)
    assert found and latest_checkpoint(run) == found[-1]
    for path in found:  # not only the newest: none of them is half written
        _check_good(path)


def test_a_damaged_checkpoint_is_skipped_and_refused_in_one_line(tmp_path, caplog):
    for step in (1, 2):
        write_checkpoint(tmp_path, step, {"step_of_state": step}, _fill_one_file)
    damaged = tmp_path / "checkpoints" / "step_00000002"
    with open(damaged / "weights.bin", "r+b") as f:
        f.truncate(10)  # e.g. a copy cut short by a full disk
    with caplog.at_level("WARNING"):
        assert latest_checkpoint(tmp_path).name == "step_00000001"
    assert "skipping checkpoint step_00000002" in caplog.text and "weights.bin has 10 bytes" in caplog.text
    with pytest.raises(CheckpointError) as e:
        read_state(damaged, restore_rng=False)
    assert "\n" not in str(e.value) and "weights.bin" in str(e.value) and "earlier checkpoint" in str(e.value)
    (damaged / "weights.bin").unlink()
    with pytest.raises(CheckpointError, match="weights.bin is missing"):
        verify_checkpoint(damaged)


def _fill_one_file(tmp: Path) -> dict:
    (tmp / "weights.bin").write_bytes(b"w" * 1000)
    return {"models": {}, "optimizers": []}
