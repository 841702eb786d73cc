"""Dynamic sampling (DAPO) judged per role, on real rollouts of scripted policies.

Three kinds of task, by the first number of "What is a + b?":

- a = 1: both designs write the good script, the agent is right: zero variance for both roles;
- a = 2: one design writes the good script, the other no script (invalid, reward 0): the designer group is
  informative, the executor group (two right executions) is not;
- a = 3: one design writes the good script, the other a script whose agent answers wrong: both informative.

The first batch holds only a = 1 tasks, so every group is zero-variance at first.
"""

from __future__ import annotations

import re
import threading
from collections import Counter

import pytest

from metaagent.data import Task
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import DESIGNER, EXECUTOR
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.train.config import TrainConfig
from metaagent.train.dynamic_sampling import group_targets, informative_groups, sample_informative
from metaagent.workflow import SandboxPool

GOOD = 'a = Agent("Solver", "You solve it. GOOD")\nsubmit(a(task))'
BAD = 'a = Agent("Solver", "You solve it. BAD")\nsubmit(a(task))'


def fenced(script: str) -> str:
    return f"Here is the workflow.\n```python\n{script}\n```"


def task(i: int, kind: int) -> Task:
    return Task(id=f"t{i}", domain="math", question=f"What is {kind} + {i}?", answer=str(kind + i), source="test")


class Designer:
    """Design replies by task kind; the two designs of a question get one reply each, whatever the order."""

    def __init__(self):
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> str:
        text = "\n".join(m["content"] for m in request.messages)
        a, b = re.search(r"What is (\d+) \+ (\d+)\?", text).groups()
        with self.lock:
            first = self.seen[a + b] % 2 == 0
            self.seen[a + b] += 1
        if a == "1" or first:
            return fenced(GOOD)
        return "I would just answer it." if a == "2" else fenced(BAD)


def agent(request: ChatRequest) -> str:
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", request.messages[-1]["content"]).groups())
    value = a + b + (1 if "BAD" in request.messages[0]["content"] else 0)
    return f"{a} + {b} = {value}. <delivery>\\boxed{{{value}}}</delivery>"


@pytest.fixture(scope="module")
def engine():
    cfg = RolloutConfig(
        m_designs=2,
        n_executions=2,
        k_templates=1,
        designer=SamplingConfig(temperature=1.0, max_tokens=512),
        executor=SamplingConfig(temperature=1.0, max_tokens=256),
    )
    with SandboxPool(workers=2) as pool:
        yield RolloutEngine(ScriptedPolicy(Designer()), ScriptedPolicy(agent), cfg, pool=pool, run_id="ds")


def _run(engine, roles, cap, later_kinds=(2, 1, 3, 3, 1, 3)):
    first = engine.rollout([task(0, 1), task(1, 1)], step=0, seed=0)
    pending = [task(10 + i, k) for i, k in enumerate(later_kinds)]
    sizes: list[int] = []

    def draw(round_: int, n: int):
        sizes.append(n)
        tasks, pending[:] = pending[:n], pending[n:]
        return engine.rollout(tasks, step=0, seed=round_)

    kept, m = sample_informative(
        first, draw, roles=roles, targets=group_targets(2, 2, "question"), max_extra_tasks=cap, batch_size=2
    )
    return first, kept, m, sizes


def kinds(trees) -> list[int]:
    return [int(t.task["question"].split()[2]) for t in trees]


def test_the_scripted_kinds_have_the_intended_groups(engine):
    trees = engine.rollout([task(0, 1), task(1, 2), task(2, 3)], step=0, seed=0)
    got = [informative_groups(t) for t in trees]
    assert got == [{DESIGNER: 0, EXECUTOR: 0}, {DESIGNER: 1, EXECUTOR: 0}, {DESIGNER: 1, EXECUTOR: 1}]


def test_executor_stage_replaces_zero_variance_groups_until_the_batch_is_full(engine):
    first, kept, m, sizes = _run(engine, {EXECUTOR}, cap=16)
    assert [informative_groups(t)[EXECUTOR] for t in first] == [0, 0]  # all zero-variance at first
    # round 1 draws (2, 1): the a=2 task is informative for the designer only, so it is dropped here
    assert sizes == [2, 2] and kinds(kept) == [3, 3]
    assert m["rollout/dynamic_sampling/extra_tasks"] == 4 and m["rollout/dynamic_sampling/rounds"] == 2
    assert m["rollout/dynamic_sampling/dropped_tasks"] == 4 and m["rollout/dynamic_sampling/kept_tasks"] == 2
    assert m["rollout/dynamic_sampling/informative_groups/executor"] == 2 == m["rollout/dynamic_sampling/target_groups/executor"]
    assert m["rollout/dynamic_sampling/filled"] == 1.0 and "rollout/dynamic_sampling/informative_groups/designer" not in m


def test_designer_stage_judges_designer_groups(engine):
    _, kept, m, sizes = _run(engine, {DESIGNER}, cap=16)
    assert sizes == [2, 2] and kinds(kept) == [2, 3]  # the a=2 task counts for the designer
    assert m["rollout/dynamic_sampling/informative_groups/designer"] == 2 and m["rollout/dynamic_sampling/filled"] == 1


def test_both_roles_fill_each_role_separately(engine):
    _, kept, m, _ = _run(engine, {DESIGNER, EXECUTOR}, cap=16)
    # the second a=3 task is kept though the designer is full: the executor still needs a group
    assert kinds(kept) == [2, 3, 3]
    assert m["rollout/dynamic_sampling/informative_groups/designer"] == 3
    assert m["rollout/dynamic_sampling/informative_groups/executor"] == 2


def test_the_cap_on_extra_tasks_is_respected(engine):
    _, kept, m, sizes = _run(engine, {EXECUTOR}, cap=3)
    assert sizes == [2, 1] and sum(sizes) == 3  # the last draw is cut to the cap's remainder
    assert kinds(kept) == [3] and m["rollout/dynamic_sampling/extra_tasks"] == 3
    assert m["rollout/dynamic_sampling/filled"] == 0.0 and m["rollout/dynamic_sampling/informative_groups/executor"] == 1
    _, kept0, m0, sizes0 = _run(engine, {EXECUTOR}, cap=0)
    assert sizes0 == [] and kept0 == [] and m0["rollout/dynamic_sampling/dropped_tasks"] == 2


def test_config_key_and_default_mask_only():
    assert TrainConfig().algo.dynamic_sampling.enabled is False
    cfg = TrainConfig.load(None, ["algo.dynamic_sampling.enabled=true", "algo.dynamic_sampling.max_extra_tasks=4"])
    assert cfg.algo.dynamic_sampling.enabled and cfg.algo.dynamic_sampling.max_extra_tasks == 4
    from metaagent.config import ConfigError

    with pytest.raises(ConfigError, match="max_extra_tasks"):
        TrainConfig.load(None, ["algo.dynamic_sampling.max_extra_tasks=-1"])


@pytest.mark.slow
def test_the_trainer_draws_extra_tasks_and_records_only_the_kept_trees(tmp_path):
    """The tiny random model writes no runnable script, so no group is informative: step 0 draws up to the
    cap, keeps nothing, records no tree, and still completes its (empty) update."""
    from pathlib import Path

    from metaagent.learn.metrics import read_metrics
    from metaagent.records import read_trees
    from metaagent.train.loop import TrainLoop

    tiny = Path(__file__).parents[2] / "configs" / "tiny.yaml"
    cfg = TrainConfig.load(
        str(tiny),
        [f"trainer.out={tmp_path / 'run'}", "trainer.steps=1", "trainer.save_every=0",
         "algo.dynamic_sampling.enabled=true", "algo.dynamic_sampling.max_extra_tasks=3"],
    )  # fmt: skip
    with TrainLoop(cfg) as trainer:
        trainer.train()
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    kept = int(row["rollout/dynamic_sampling/kept_tasks"])
    assert row["rollout/dynamic_sampling/extra_tasks"] == 3 and row["rollout/dynamic_sampling/rounds"] == 2
    assert row["rollout/dynamic_sampling/drawn_tasks"] == 5 == kept + row["rollout/dynamic_sampling/dropped_tasks"]
    assert row["rollout/dynamic_sampling/filled"] == 0.0
    trees, bad = read_trees(tmp_path / "run" / "rollouts" / "step_000000.jsonl")
    assert not bad and len(trees) == kept == 0 and row["rollout/tasks"] == 0
