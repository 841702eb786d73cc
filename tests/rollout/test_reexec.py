"""Re-execution from a recorded prefix and with agents replaced (records v2, S5), on the tiny model."""

from __future__ import annotations

import pytest

from metaagent.data.tasks import Task
from metaagent.policy.hf import HFPolicy
from metaagent.records import Counterfactual
from metaagent.rewards import score_execution
from metaagent.rollout.reexec import CoalitionPolicy, ForcedPrefixPolicy, PrefixDivergence
from metaagent.workflow import SandboxPool, load_templates

pytestmark = pytest.mark.slow  # a real (tiny) model and sandbox workers

TASK = Task(id="t", domain="math", question="What is 2 + 3?", answer="5", source="test")
SEED = 1234


@pytest.fixture(scope="module")
def setup():
    policy = HFPolicy("tiny")
    pool = SandboxPool(workers=1)
    script = next(t for t in load_templates() if t.name == "reflection").source
    recorded = pool.run(script, TASK, policy, sampling={"max_tokens": 12}, seed=SEED)
    assert len(recorded.turns) >= 2, recorded
    yield policy, pool, script, recorded
    pool.close()


def _texts(execution):
    return [(t.role, t.response, t.response_ids) for t in execution.turns]


def test_forced_prefix_reproduces_the_recorded_execution(setup):
    policy, pool, script, recorded = setup
    again = pool.run(
        script, TASK, ForcedPrefixPolicy(recorded.turns, 1, policy), sampling={"max_tokens": 12}, seed=SEED
    )
    assert _texts(again) == _texts(recorded)
    assert again.answer == recorded.answer
    assert [t.synthetic for t in again.turns] == [True] + [False] * (len(recorded.turns) - 1)


def test_a_changed_prompt_raises_the_divergence_error(setup):
    policy, pool, script, recorded = setup
    other = Task(id="t", domain="math", question="What is 2 + 4?", answer="6", source="test")
    with pytest.raises(PrefixDivergence, match="different messages"):
        pool.run(script, other, ForcedPrefixPolicy(recorded.turns, 1, policy), sampling={"max_tokens": 12}, seed=SEED)


def test_a_coalition_run_with_one_role_replaced_by_the_empty_reply_is_recorded(setup):
    policy, pool, script, recorded = setup
    roles = sorted({t.role for t in recorded.turns})
    keep = roles[:1]
    run = pool.run(script, TASK, CoalitionPolicy(keep, "noop", policy), sampling={"max_tokens": 12}, seed=SEED)
    replaced = [t for t in run.turns if t.role not in keep]
    assert replaced and all(t.synthetic and t.response == "" for t in replaced)
    assert all(not t.synthetic for t in run.turns if t.role in keep)
    recorded.counterfactuals.append(
        Counterfactual(keep, "noop", SEED, run.status, score_execution(TASK, run), len(run.turns), run.turns)
    )
    back = type(recorded).from_dict(recorded.to_dict())
    assert back.counterfactuals[0].members == keep and back.counterfactuals[0].turns[-1].synthetic is not None
