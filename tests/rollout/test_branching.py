"""AT-GRPO tree sampling inside a running workflow: greedy continuation, candidate groups, K = 1 identity,
and the record-level count of groups and samples (frozen two-agent template, K = 3, T = 2, two executions)."""

from __future__ import annotations

import pytest

from metaagent.credit import assign_credit
from metaagent.data import Task
from metaagent.learn.samples import build_samples
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import AgentTurn, RolloutTree, TurnReward
from metaagent.rewards.turn import register_turn_reward
from metaagent.rollout.branching import BranchingConfig
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine
from metaagent.seeding import branch_seed, call_seed
from metaagent.workflow import SandboxPool

TWO_AGENTS = """
alpha = Agent("Alpha", "You propose a number.")
beta = Agent("Beta", "You revise the number.")
x = task
for t in range(2):
    x = alpha(f"turn {t}: {x}")
    x = beta(f"revise: {x}")
submit(x)
"""

TASK = Task(id="q1", domain="math", question="Pick a number.", answer="7", source="test")


def value_reply(request: ChatRequest) -> str:
    """A deterministic function of the call's seed: candidates of one call differ, runs reproduce."""
    return f"<delivery>{request.sampling.seed % 10}</delivery>"


@register_turn_reward("test_value_or_none")
def _value_reward(task, turns_so_far, candidate: AgentTurn) -> TurnReward:
    """The delivered digit as the reward; the digit 0 is "not computable" (an excluded candidate)."""
    v = int(candidate.delivery)
    if v == 0:
        return TurnReward(None, "rule", error="checker crashed on 0")
    return TurnReward(float(v), "rule")


@register_turn_reward("test_value")
def _plain_value_reward(task, turns_so_far, candidate: AgentTurn) -> TurnReward:
    return TurnReward(float(candidate.delivery), "rule")


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def _rollout(pool, tmp_path, k: int, roles=("*",), n: int = 2, mode: str = "train", reward="test_value_or_none") -> RolloutTree:
    script = tmp_path / "two_agents.py"
    script.write_text(TWO_AGENTS)
    cfg = RolloutConfig(
        m_designs=1, n_executions=n, frozen_designer=str(script), executor=SamplingConfig(max_tokens=64),
        branching=BranchingConfig(k=k, roles=list(roles), turn_reward=reward if k > 1 else None),
    )  # fmt: skip
    engine = RolloutEngine(None, ScriptedPolicy(value_reply), cfg, pool=pool)
    (tree,) = engine.rollout([TASK], step=0, seed=5, mode=mode)
    return tree


def test_branch_seed_candidate_zero_is_the_call_seed():
    assert [branch_seed(9, c, 0) for c in range(4)] == [call_seed(9, c) for c in range(4)]
    assert len({branch_seed(9, 2, c) for c in range(4)}) == 4
    assert branch_seed(None, 0, 1) is None


def test_k1_reproduces_the_unbranched_engine(pool, tmp_path):
    plain = _rollout(pool, tmp_path, k=1)
    # k > 1 for a role that never calls: nothing branches, so the records are identical too
    other = _rollout(pool, tmp_path, k=3, roles=["Nobody"])
    for tree in (plain, other):
        for _, e in tree.executions():
            assert not e.groups and len(e.turns) == 4
    strip = lambda t: [{k: v for k, v in turn.to_dict().items() if k != "elapsed_s"}  # noqa: E731
                       for _, e in t.executions() for turn in e.turns]
    assert strip(plain) == strip(other)
    seeds = [e.seed for _, e in plain.executions()]
    expected = [f"<delivery>{call_seed(s, c) % 10}</delivery>" for s in seeds for c in range(4)]
    assert [turn.response for _, e in plain.executions() for turn in e.turns] == expected


@pytest.mark.parametrize("reward", ["test_value", "test_value_or_none"])
def test_greedy_continuation_and_record_counts(pool, tmp_path, reward):
    tree = _rollout(pool, tmp_path, k=3, reward=reward)
    executions = [e for _, e in tree.executions()]
    assert len(executions) == 2
    keys = []
    for e in executions:
        assert e.status == "ok", e.error
        # Execution.turns holds only the executed path: T=2 turns x 2 agents
        assert [t.role for t in e.turns] == ["Alpha", "Beta", "Alpha", "Beta"]
        assert len(e.groups) == 4  # one group per (agent, turn)
        for g, turn in zip(e.groups, e.turns):
            assert len(g.candidates) == 3 and g.call_index == turn.call_index and g.role == turn.role
            computable = [r for r in g.rewards if r is not None]
            # the executed turn is the best candidate (ties: lowest index), never an excluded one
            best = max(computable)
            assert g.selected == g.rewards.index(best)
            assert turn.response == g.candidates[g.selected].response
            assert turn.reward is not None and turn.reward.total == best
            # a group's K prompts are identical; candidates carry the seeds branch_seed(seed, call, c)
            assert len({tuple(c.prompt_ids) for c in g.candidates}) == 1
            assert [c.response for c in g.candidates] == [
                f"<delivery>{branch_seed(e.seed, g.call_index, c) % 10}</delivery>" for c in range(3)
            ]
            assert str(e.index) in g.key.split("|")[0] and g.key.endswith(f"|{g.role}|{g.role_turn}")
            keys.append(g.key)
        # the next call saw the selected reply: Beta's message carries Alpha's executed delivery
        assert f"revise: {e.turns[0].delivery}" == e.turns[1].messages[-1]["content"]
    assert len(set(keys)) == len(keys) == 8  # distinct; no group mixes executions (prefix = execution)
    assert {k.split("|")[0] for k in keys} == {"0:q1/d0/e0", "0:q1/d0/e1"}

    credit = assign_credit([tree], "at_grpo")
    m = credit.metrics
    assert m["credit/at_grpo/groups"] == 8 and m["credit/at_grpo/candidates"] == 24
    assert m["credit/at_grpo/selected_is_best"] == 8 - m["credit/at_grpo/empty_groups"]
    excluded = sum(r is None for _, e in tree.executions() for g in e.groups for r in g.rewards)
    assert m["credit/at_grpo/excluded_candidates"] == excluded
    samples = build_samples([tree], active_roles=["executor"], temperatures={"executor": 1.0})
    with_adv = sum(a is not None for _, e in tree.executions() for g in e.groups for a in g.advantages)
    singles = sum(1 for _, e in tree.executions() for g in e.groups if len(g.rewards) - g.rewards.count(None) == 1)
    assert len(samples) == samples.metrics["samples/candidates"] == with_adv == 24 - excluded - singles
    if reward == "test_value":  # nothing excluded: exactly E x N_agents x T x K = 2 x 2 x 2 x 3 samples
        assert excluded == 0 and len(samples) == 24
    # one sample per candidate, keyed (tree, design, execution, turn, candidate); executed turns not doubled
    assert len({s.key for s in samples}) == len(samples)
    assert all(len(s.key) == 5 for s in samples)


def test_validation_never_branches(pool, tmp_path):
    tree = _rollout(pool, tmp_path, k=3, mode="eval")
    for _, e in tree.executions():
        assert not e.groups and len(e.turns) == 4


def test_no_computable_candidate_stops_the_execution(pool, tmp_path):
    @register_turn_reward("test_never")
    def never(task, turns_so_far, candidate):
        return TurnReward(None, "rule", error="no checker")

    script = tmp_path / "two_agents.py"
    script.write_text(TWO_AGENTS)
    cfg = RolloutConfig(m_designs=1, n_executions=1, frozen_designer=str(script),
                        branching=BranchingConfig(k=2, turn_reward="test_never"))  # fmt: skip
    engine = RolloutEngine(None, ScriptedPolicy(value_reply), cfg, pool=pool)
    (tree,) = engine.rollout([TASK], step=0, seed=5)
    e = tree.designs[0].executions[0]
    assert e.status == "error" and e.error.type == "TurnRewardError"
    assert not e.turns and len(e.groups) == 1 and e.groups[0].rewards == [None, None]


def test_config_refuses_branching_without_a_turn_reward():
    from metaagent.config import ConfigError

    with pytest.raises(ConfigError, match="turn_reward"):
        BranchingConfig(k=2)
    with pytest.raises(ConfigError, match="k must be"):
        BranchingConfig(k=0)
