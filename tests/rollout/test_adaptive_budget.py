"""Adaptive M x N budget (``rollout.adaptive_budget``) on real rollouts of scripted policies.

Each design's system prompt says how its agent answers: ``ALWAYS`` right, ``MIXED`` right on even execution
indices only (so its first two executions disagree). The policies read the design / execution position from
the request's seed, which the engine derives from (seed, step, task, design, execution): the outcome of an
execution never depends on timing.
"""

from __future__ import annotations

import re

import pytest

from metaagent.config import ConfigError
from metaagent.credit import assign_credit
from metaagent.data import Task
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.rollout.adaptive import adaptive_metrics, allot
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.seeding import call_seed, derive_seed
from metaagent.workflow import SandboxPool

SEED, STEP = 5, 3
# per task: the two designs' kinds; NONE writes no script (an invalid design: no executions, no budget)
PLAN = {"a": ("ALWAYS", "ALWAYS"), "b": ("ALWAYS", "MIXED"), "c": ("MIXED", "NONE")}
TASKS = [Task(id=k, domain="math", question=f"What is {i + 1} + 2?", answer=str(i + 3), source="test") for i, k in enumerate(PLAN)]


def _designer_reply(request: ChatRequest) -> str:
    for b, task in enumerate(TASKS):
        for i, kind in enumerate(PLAN[task.id]):
            if request.sampling.seed == derive_seed(SEED, STEP, task.id, b, i, "design"):
                if kind == "NONE":
                    return "I would just answer it."
                return f'```python\na = Agent("Solver", "You solve it. {kind}")\nsubmit(a(task))\n```'
    raise AssertionError("unexpected designer request")


EXEC_INDEX = {
    call_seed(derive_seed(SEED, STEP, task.id, b, i, j, "execute"), 0): j
    for b, task in enumerate(TASKS)
    for i in range(2)
    for j in range(16)
}


def _agent_reply(request: ChatRequest) -> str:
    j = EXEC_INDEX[request.sampling.seed]
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", request.messages[-1]["content"]).groups())
    right = "ALWAYS" in request.messages[0]["content"] or j % 2 == 0
    value = a + b + (0 if right else 1)
    return f"{a} + {b} = {value}. <delivery>\\boxed{{{value}}}</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _engine(pool, **adaptive) -> RolloutEngine:
    cfg = RolloutConfig(
        m_designs=2,
        n_executions=4,
        designer=SamplingConfig(max_tokens=256),
        executor=SamplingConfig(max_tokens=64),
        adaptive_budget={"enabled": True, "first_n": 2, **adaptive},
    )
    return RolloutEngine(ScriptedPolicy(_designer_reply), ScriptedPolicy(_agent_reply), cfg, pool=pool, run_id="ab")


def _counts(trees):
    return [[len(d.executions) for d in t.designs] for t in trees]


def _rewards(trees):
    return [[[e.reward.total for e in d.executions] for d in t.designs] for t in trees]


def test_allot_is_round_robin_within_budget_and_cap():
    assert allot([2, 2, 2], [True, False, True], 3, 8) == [2, 0, 1]
    assert allot([2, 2], [True, True], 100, 5) == [3, 3]  # the cap stops it, budget left over
    assert allot([2, 2], [False, False], 10, 8) == [0, 0]
    assert allot([7, 2], [True, True], 4, 8) == [1, 3]
    import random

    rng = random.Random(0)
    for _ in range(300):  # never above the budget or the cap, nothing to a closed design, all of it when it fits
        counts = [rng.randint(2, 6) for _ in range(rng.randint(1, 6))]
        open_ = [rng.random() < 0.5 for _ in counts]
        budget, cap = rng.randint(0, 12), rng.randint(2, 9)
        extra = allot(counts, open_, budget, cap)
        room = sum(max(0, cap - c) for c, o in zip(counts, open_) if o)
        assert sum(extra) == min(budget, room)
        assert all(e == 0 or (o and c + e <= cap) for c, o, e in zip(counts, open_, extra))


def test_agreeing_designs_stop_and_their_budget_goes_to_disagreeing_ones(pool):
    trees = _engine(pool).rollout(TASKS, step=STEP, seed=SEED)
    # budget = N x valid designs = 4 x 5 = 20; wave 1 runs 2 of each (10); the 10 left go round-robin to the
    # two open (MIXED) designs, capped at 2N = 8 each
    assert _counts(trees) == [[2, 2], [2, 7], [7, 0]]
    assert sum(map(sum, _counts(trees))) == 20
    # executions keep fixed M x N's positions and seeds: index j, seed derived from j
    for b, t in enumerate(trees):
        for d in t.designs:
            assert [e.index for e in d.executions] == list(range(len(d.executions)))
            assert [e.seed for e in d.executions] == [
                derive_seed(SEED, STEP, t.task_id, b, d.index, j, "execute") for j in range(len(d.executions))
            ]
    assert _rewards(trees)[1][1][:3] == [1.4, 0.4, 1.4]  # MIXED: right, wrong, right (reward lam 0.4 + correct)
    m = adaptive_metrics(trees, n=4, first_n=2)
    assert m == {
        "rollout/adaptive/budget": 20.0,
        "rollout/adaptive/executions": 20.0,
        "rollout/adaptive/budget_used": 1.0,
        "rollout/adaptive/moved": 6.0,  # 3 beyond N on each MIXED design
        "rollout/adaptive/designs_stopped": 3.0,
        "rollout/adaptive/questions_stopped": 1.0,  # task a: both designs agreed
    }
    credit = assign_credit(trees, "hierarchical")
    assert credit.metrics["credit/executions"] == 20 and credit.metrics["credit/reward_errors"] == 0


def test_the_cap_leaves_budget_unspent_and_never_exceeds_it(pool):
    trees = _engine(pool, max_n=5).rollout(TASKS, step=STEP, seed=SEED)
    assert _counts(trees) == [[2, 2], [2, 5], [5, 0]]
    m = adaptive_metrics(trees, n=4, first_n=2)
    assert m["rollout/adaptive/executions"] == 16 <= m["rollout/adaptive/budget"] == 20
    assert m["rollout/adaptive/budget_used"] == 0.8


def test_adaptive_rollouts_are_deterministic_and_start_like_fixed(pool):
    a = _engine(pool).rollout(TASKS, step=STEP, seed=SEED)
    b = _engine(pool).rollout(TASKS, step=STEP, seed=SEED)
    assert _counts(a) == _counts(b) and _rewards(a) == _rewards(b)
    assert [[[e.seed for e in d.executions] for d in t.designs] for t in a] == [
        [[e.seed for e in d.executions] for d in t.designs] for t in b
    ]
    off = _engine(pool)
    off.config.adaptive_budget.enabled = False
    fixed = off.rollout(TASKS, step=STEP, seed=SEED)
    assert _counts(fixed) == [[4, 4], [4, 4], [4, 0]]
    for fa, fx in zip(_rewards(a), _rewards(fixed)):
        for ra, rx in zip(fa, fx):
            assert ra[:2] == rx[:2]  # the first wave is fixed M x N's first executions
    # evaluation rollouts keep fixed N even with the option on
    assert _counts(_engine(pool).rollout(TASKS, step=STEP, seed=SEED, mode="eval")) == [[4, 4], [4, 4], [4, 0]]


def test_config_is_validated():
    assert RolloutConfig().adaptive_budget.enabled is False
    with pytest.raises(ConfigError, match="first_n = 2 must be below rollout.n_executions = 2"):
        RolloutConfig(n_executions=2, adaptive_budget={"enabled": True})
    with pytest.raises(ConfigError, match="max_n = 3 is below"):
        RolloutConfig(n_executions=4, adaptive_budget={"enabled": True, "max_n": 3})
    from metaagent.train.config import TrainConfig

    with pytest.raises(ConfigError, match="first_n"):
        TrainConfig.load(None, ["rollout.adaptive_budget.first_n=1"])
    cfg = TrainConfig.load("default", ["rollout.n_executions=4", "rollout.adaptive_budget.enabled=true"])
    assert cfg.rollout.adaptive_budget.cap(cfg.rollout.n_executions) == 8
