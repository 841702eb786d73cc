"""``metaagent-eval`` stopped by Ctrl-C, against a served model (a local OpenAI-compatible stub) whose later
requests hang until the test lets them go: the first SIGINT says at once which tasks are finishing and starts
no more; the second stops the process now (exit 130) with the records finished so far kept; rerunning the
command resumes, asking the model only for the tasks not recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from builders import StubServer, chat_completion

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
FAST = 2  # requests answered at once; later ones hang until `released` is set
TASKS = 5


class Served:
    def __init__(self) -> None:
        self.posts = 0
        self.lock = threading.Lock()
        self.released = threading.Event()

    def route(self, method, path, body):
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": "served", "object": "model"}]}, {}
        with self.lock:
            self.posts += 1
            n = self.posts
        if n > FAST:
            self.released.wait(300)
        return 200, chat_completion(body["model"], "<delivery>\\boxed{1}</delivery>", prompt_tokens=10), {}


def _command(base_url: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "metaagent.cli.eval", "--backend", "openai", "--base-url", base_url,
            "--model", "served", "--methods", "sa", "--benchmarks", "bundled:test/math",
            "--limit", str(TASKS), "--n", "1", "--concurrency", "2", "--no-html",
            "--out", str(out)]  # fmt: skip


def _records(out: Path) -> list[str]:
    files = sorted((out / "rollouts").rglob("*.jsonl"))
    return [line for f in files for line in f.read_text().splitlines() if line]


def _wait(cond, proc, what, timeout=300.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.05)


def test_first_ctrl_c_says_what_finishes_the_second_stops_and_a_rerun_resumes(tmp_path):
    served, out = Served(), tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with StubServer(served.route) as server:
        proc = subprocess.Popen(_command(server.base_url, out), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        try:
            recorded = lambda: (out / "rollouts").is_dir() and len(_records(out)) == FAST
            _wait(recorded, proc, "the fast tasks recorded")
            _wait(lambda: served.posts == FAST + 2, proc, "two tasks hanging in flight")
            proc.send_signal(signal.SIGINT)
            _wait(lambda: any("finishing the 2 tasks" in line for line in err), proc, "the first message")
            assert proc.poll() is None  # it waits for the two hanging tasks
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=120)
        finally:
            served.released.set()
            if proc.poll() is None:
                proc.kill()
        reader.join(10)
        text = "".join(err)
        assert code == 130 and "Traceback" not in text, text[-3000:]
        first = next(line for line in err if "finishing the" in line)
        assert "SIGINT" in first and "bundled:test/math" in first and str(out) in first, first
        assert "stopped now; the 2 tasks finished in this run are recorded" in text, text[-3000:]
        assert served.posts == FAST + 2  # no task started after the first Ctrl-C
        assert len(_records(out)) == FAST

        before = served.posts
        cmd = _command(server.base_url, out)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
    assert len(_records(out)) == TASKS and served.posts - before == TASKS - FAST  # only the missing tasks ran
