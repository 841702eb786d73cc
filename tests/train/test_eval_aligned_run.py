"""Evaluation-aligned credit end to end on the tiny model with scripted replies (tests/builders.py::forced_generate)
and the rule judge ``rule:gold``:

a frozen two-agent team (Solver, then Checker, whose reply is submitted) on two tasks, "1 + 2" (a delivered
``\\boxed{3}`` is right: success episodes) and "2 + 2" (never right: failure episodes). An agent delivers
``\\boxed{3}`` on even request seeds and answers untagged on odd ones; the seeds are derived from the run seed, so
the same episodes succeed, fail and find a preferred resample on every machine. One training step must give
every success episode per-turn rewards that sum to R_sys, every failure episode a first error and (where a
resample passes the judge) a preference pair that enters the DPO loss; the records show all of it in
``metaagent-replay``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from builders import forced_generate, seed_of

from metaagent.policy.hf import HFPolicy

pytestmark = pytest.mark.slow

SCRIPT = (
    'solver = Agent("Solver", "Solve it.")\n'
    'checker = Agent("Checker", "Check the answer and give the final one.")\n'
    "draft = solver(task)\n"
    'submit(checker(task + "\\n" + draft))\n'
)
TAGGED = "<delivery>\\boxed{3}</delivery>"
UNTAGGED = "I think it is 3."
TASKS = [
    {"id": "ea-3", "domain": "math", "question": "What is 1 + 2?", "answer": "3", "source": "bundled", "split": "train", "metadata": {}},
    {"id": "ea-4", "domain": "math", "question": "What is 2 + 2?", "answer": "4", "source": "bundled", "split": "train", "metadata": {}},
]  # fmt: skip


def scripted(request) -> str:
    return TAGGED if seed_of(request) % 2 == 0 else UNTAGGED


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainLoop

    root = tmp_path_factory.mktemp("eval_aligned")
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    (root / "team.py").write_text(SCRIPT)
    cfg = TrainConfig.load(
        None,
        [
            "policy.model=tiny",
            f"data.train=[{{source: bundled, path: {root / 'tasks.jsonl'}}}]",
            "data.val=[]",
            "data.batch_size=2",
            "rollout.n_executions=8",
            "rollout.executor.max_tokens=12",
            "rollout.executor.stop=['</delivery>']",
            f"rollout.frozen_designer={root / 'team.py'}",
            "rollout.sandbox_workers=2",
            "schedule.mode=executor_only",
            "algo.estimator=eval_aligned",
            "eval_aligned.prefix_judge=rule:gold",
            "optim.dpo=true",
            "optim.kl_coef=0.001",
            "optim.lr=1e-3",
            "trainer.steps=1",
            "trainer.save_every=0",
            "trainer.tensorboard=false",
            f"trainer.out={root / 'run'}",
        ],
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HFPolicy, "_generate", forced_generate(scripted))
        with TrainLoop(cfg) as trainer:
            (result,) = trainer.train()
    return root / "run", result


def _executions(run_dir: Path):
    from metaagent.records import read_trees

    trees, bad = read_trees(run_dir / "rollouts" / "step_000000.jsonl")
    assert not bad
    return [(tree, e) for tree in trees for _, e in tree.executions()]


def test_success_episodes_get_turn_rewards_that_sum_to_r_sys(run):
    run_dir, result = run
    successes = [(t, e) for t, e in _executions(run_dir) if e.reward.correct == 1.0]
    assert len(successes) >= 2  # scripted: the same episodes succeed on every machine
    for _, e in successes:
        rewards = [t.reward.total for t in e.turns]
        assert math.isclose(sum(rewards), e.reward.total, rel_tol=1e-9, abs_tol=1e-12)
        assert all(t.advantage is not None for t in e.turns)
        members = sorted(tuple(cf.members) for cf in e.counterfactuals)
        assert members == [(), ("Checker",), ("Solver",)]  # exact Shapley, 2 agents: 2^2 - 1 coalitions
        assert all(t.labels.get("helpful") in (0.0, 1.0) for t in e.turns)
    m = result.metrics
    assert m["credit/eval_aligned/success_episodes"] == len(successes)
    assert m["credit/eval_aligned/coalition_runs"] == 3 * len(successes)


def test_failure_episodes_get_a_first_error_and_pairs_enter_the_dpo_loss(run):
    run_dir, result = run
    failures = [e for _, e in _executions(run_dir) if e.reward.correct == 0.0]
    assert failures
    for e in failures:
        assert e.first_error is not None and 1 <= e.first_error.turn <= len(e.turns)
        t_star = e.first_error.turn  # Eq. 9's labels: 1 before t*, 0 at it
        assert [t.labels.get("helpful") for t in e.turns[:t_star]] == [1.0] * (t_star - 1) + [0.0]
        assert len(e.first_error.queries) <= math.ceil(math.log2(len(e.turns)))
        assert all(t.advantage is None for t in e.turns)
        for p in e.preferences:
            assert p.rejected_ids == e.turns[p.turn].response_ids and p.chosen_ids != p.rejected_ids
    pairs = sum(len(e.preferences) for e in failures)
    m = result.metrics
    assert m["credit/eval_aligned/pairs"] == pairs
    assert m["credit/eval_aligned/no_pair"] == sum(1 for e in failures if not e.preferences)
    assert pairs > 0 and m["credit/eval_aligned/no_pair"] > 0  # scripted: both outcomes occur on every machine
    assert m["train/dpo_pairs"] == pairs and math.isfinite(m["train/dpo_loss"])
    assert m["credit/eval_aligned/runs"] == m["credit/eval_aligned/coalition_runs"] + m["credit/eval_aligned/prefix_runs"] + m["credit/eval_aligned/correction_runs"]
    assert m["credit/eval_aligned/judge_calls"] > 0


def test_replay_shows_the_credit(run, capsys):
    from metaagent.cli.replay import main

    run_dir, _ = run
    out = {}
    for task in ("ea-4", "ea-3"):
        with pytest.raises(SystemExit) as stop:
            main([str(run_dir), "--task", task])
        assert stop.value.code in (0, None)
        out[task] = capsys.readouterr().out
    assert "first error: turn" in out["ea-4"] and "preference pair" in out["ea-4"] and "correction:" in out["ea-4"]
    assert "helpful=" in out["ea-3"] and "counterfactual: keep" in out["ea-3"] and "others -> noop" in out["ea-3"]
