"""Evaluation under batching (issue 63): many tasks x samples x methods in flight give the records that one
task at a time gives (each task's samples are seeded by derive_seed(seed, method, task id) alone), and a
batched run that stops keeps its finished records byte for byte when resumed. The scripted agent's answer
depends on the seed of its call, so a sample seeded from another task, method or position would change the
records."""

from __future__ import annotations

import threading
import time

import pytest

from metaagent.data import load_bundled
from metaagent.eval import Evaluation, make_config
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import read_trees
from metaagent.workflow import SandboxPool

TASKS = [t for t in load_bundled("test") if t.domain == "math"][:3]
DESIGN = 'solver = Agent("MathSolver", "Solve it. Put the answer in \\\\boxed{}.")\nsubmit(solver(task))\n'
CONCURRENT_WAIT_S = 10.0  # how long a batched run's first call waits for a second one in flight


class SeededAgent:
    """Designer: a one-agent script (a second agent on odd seeds). Agents: the task's answer when the call's
    seed is 0 mod 3, else a wrong one that names the residue (some samples right, some wrong).
    ``wait_for_company``: the first call waits until another is in flight, so
    a run whose calls never overlap is seen (``most_in_flight``) instead of passing unbatched."""

    def __init__(self, wait_for_company: bool = False) -> None:
        self.wait = wait_for_company
        self.lock = threading.Lock()
        self.company = threading.Event()
        self.in_flight = self.most_in_flight = 0

    def __call__(self, request: ChatRequest) -> str:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if self.in_flight > 1:
                self.company.set()
        try:
            if self.wait:
                self.company.wait(CONCURRENT_WAIT_S)
            time.sleep(0.002)
            seed = int(request.sampling.seed or 0)
            if request.role == "designer":
                extra = 'checker = Agent("Checker", "Check it.")\n' if seed % 2 else ""
                return f"```python\n{extra}{DESIGN}```"
            text = "\n".join(m["content"] for m in request.messages)
            right = next((t.answer for t in TASKS if t.question in text), "0")
            return f"<delivery>\\boxed{{{right if seed % 3 == 0 else f'{seed % 3}.5'}}}</delivery>"
        finally:
            with self.lock:
                self.in_flight -= 1


def _run(out, pool, agent, **kw):
    values = {
        "models": ["scripted"], "methods": ["sa", "auto", "fixed:self_consistency"],
        "benchmarks": ["bundled:test/math"], "limit": 3, "n": 3, "k": [1, 3], "out": str(out),
        "bootstrap": 100, "html": False,
    }  # fmt: skip
    values.update(kw)
    policy = ScriptedPolicy(agent, model_id="scripted")
    return Evaluation(make_config(**values), policies={"scripted": policy}, pool=pool).run(), policy


def _records(out) -> dict[tuple[str, str], list]:
    """Every sample of every record file: script, execution seed, status, agent replies, correctness."""
    found = {}
    for path in sorted((out / "rollouts").rglob("*.jsonl")):
        trees, bad = read_trees(path)
        assert not bad
        for t in trees:
            found[(str(path.relative_to(out)), t.task_id)] = [
                (d.script, [(e.seed, e.status, [turn.response for turn in e.turns],
                             e.reward.correct if e.reward else None) for e in d.executions])  # fmt: skip
                for d in t.designs
            ]
    return found


@pytest.fixture(scope="module")
def pools():
    with SandboxPool(workers=1) as one, SandboxPool(workers=6) as six:
        yield one, six


def test_batched_records_equal_one_task_at_a_time(tmp_path, pools):
    one, six = pools
    serial_agent, batched_agent = SeededAgent(), SeededAgent(wait_for_company=True)
    _run(tmp_path / "serial", one, serial_agent, concurrency=1, sandbox_workers=1, continuous=False)
    _run(tmp_path / "batched", six, batched_agent)  # auto: every task and method in flight at once
    serial, batched = _records(tmp_path / "serial"), _records(tmp_path / "batched")
    assert serial == batched and len(serial) == 9  # 3 methods x 3 tasks
    assert serial_agent.most_in_flight == 1 and batched_agent.most_in_flight > 1
    answers = {r for samples in serial.values() for _, runs in samples for *_, said, _ in runs for r in said}
    assert len(answers) > 1  # the seeds reached the samples: not every reply is the same
    rewards = [reward for samples in serial.values() for _, runs in samples for *_, reward in runs]
    assert 0 < sum(r == 1.0 for r in rewards) < len(rewards)


def test_a_stopped_batched_run_keeps_its_records_when_resumed(tmp_path, pools):
    _, six = pools
    out = tmp_path / "res"
    _run(out, six, SeededAgent(), limit=1)  # the run stopped after the first task of every method
    first = {p: p.read_bytes() for p in (out / "rollouts").rglob("*.jsonl")}
    _, policy = _run(out, six, SeededAgent())  # resumed, batched: only tasks 2 and 3 run
    asked = "\n".join(m["content"] for r in policy.calls for m in r.messages)
    assert TASKS[0].question not in asked and TASKS[1].question in asked
    for path, data in first.items():
        assert path.read_bytes().startswith(data)  # finished records kept byte for byte, new ones appended
        assert len(read_trees(path)[0]) == 3
    _run(tmp_path / "fresh", six, SeededAgent())
    assert _records(out) == _records(tmp_path / "fresh")  # resuming changed no sample
