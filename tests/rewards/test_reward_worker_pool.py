"""The helper-process pool behind the math checker: deadlines, kills, crashes, replacement, concurrency."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from builders import HANG_MARGIN_S

from metaagent.execution.process import WALL_FACTOR
from metaagent.execution.worker_pool import WorkerCrashed, WorkerPool
from metaagent.rewards.errors import CheckTimeout

HELPER = r"""
import json, os, sys, time
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("die"):
        os._exit(3)
    time.sleep(req.get("sleep", 0))
    end = time.process_time() + req.get("spin", 0)
    while time.process_time() < end:
        pass
    print(json.dumps({"echo": req.get("x"), "pid": os.getpid()}), flush=True)
"""


@pytest.fixture
def pool():
    p = WorkerPool([sys.executable, "-c", HELPER], size=2)
    yield p
    p.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_call_reuses_a_worker(pool):
    first = pool.call({"x": 1}, timeout_s=5)
    second = pool.call({"x": 2}, timeout_s=5)
    assert (first["echo"], second["echo"]) == (1, 2)
    assert first["pid"] == second["pid"] and pool.started == 1


def test_timeout_kills_the_worker_and_a_new_one_starts(pool):
    pid = pool.call({"x": 0}, timeout_s=5)["pid"]
    start = time.monotonic()
    with pytest.raises(CheckTimeout):
        pool.call({"spin": 30}, timeout_s=0.5)
    assert time.monotonic() - start < 0.5 * WALL_FACTOR + HANG_MARGIN_S  # killed at its CPU deadline
    assert not _alive(pid) and pool.killed == 1
    assert pool.call({"x": 5}, timeout_s=5)["pid"] != pid


def test_the_deadline_is_cpu_time_and_the_wall_clock_allows_three_times_it(pool):
    # a helper that waits (as one does for the CPU on a busy machine) past the deadline still answers ...
    # (1.5 s of waiting under a 1 s deadline: the 3 s wall clock leaves a loaded machine 1.5 s to answer)
    assert pool.call({"x": 1, "sleep": 1.5}, timeout_s=1.0)["echo"] == 1
    # ... unless it waits past the wall clock
    start = time.monotonic()
    with pytest.raises(CheckTimeout):
        pool.call({"sleep": 30}, timeout_s=0.5)
    assert 0.5 * WALL_FACTOR <= time.monotonic() - start < 0.5 * WALL_FACTOR + HANG_MARGIN_S
    assert pool.killed == 1


def test_crash_is_reported(pool):
    with pytest.raises(WorkerCrashed, match="exited with code 3"):
        pool.call({"die": True}, timeout_s=5)
    assert pool.call({"x": 1}, timeout_s=5)["echo"] == 1


def test_at_most_size_workers_and_deadline_excludes_waiting(pool):
    results = []

    def job(i):
        results.append(pool.call({"x": i, "sleep": 0.4}, timeout_s=1.0))

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["echo"] for r in results) == [
        0,
        1,
        2,
        3,
    ]  # the last two waited ~0.4 s but did not time out
    assert len({r["pid"] for r in results}) == 2


def test_helper_that_never_gets_ready():
    pool = WorkerPool([sys.executable, "-c", "import time; time.sleep(30)"], size=1, startup_timeout_s=0.5)
    with pytest.raises(CheckTimeout):
        pool.call({}, timeout_s=1)
    pool.close()


def test_close_kills_idle_workers(pool):
    pid = pool.call({"x": 1}, timeout_s=5)["pid"]
    pool.close()
    time.sleep(0.1)
    assert not _alive(pid)
