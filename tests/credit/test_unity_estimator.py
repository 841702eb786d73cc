"""Estimator ``unity``: per-model whitening, GRPO per (role, role_turn), GAE with gamma = lam = 1 (hand-computed)."""

from __future__ import annotations

import math

import pytest


from metaagent.credit import CreditError, TokenCredit, assign_credit, get_token_stage
from metaagent.credit.mappa import Action
from metaagent.credit.unity import gae_advantages, gae_token_stage, last_token_rewards, masked_whiten
from metaagent.records import AgentTurn, CheckReport, Design, Execution, RewardRecord, RolloutTree, TurnReward


def _turn(k, role, reward, *, n_tokens=1, model="m", role_turn=0):
    r = None if reward is False else TurnReward(reward, "allocator", error=None if reward is not None else "dropped: x")
    return AgentTurn(k, role, "s", [], "x", "x", [1], [2] * n_tokens, [-1.0] * n_tokens, "stop", model,
                     role_turn=role_turn, reward=r)  # fmt: skip


def _tree(*executions):
    execs = [Execution(j, "ok", turns=turns, reward=RewardRecord(1.0, 1.0, 0.0)) for j, turns in enumerate(executions)]
    return RolloutTree("run", {"id": "t", "domain": "code"}, 0, {}, {},
                       designs=[Design(0, "frozen:x", None, "x", CheckReport(True), executions=execs)])  # fmt: skip


def test_masked_whiten_matches_hand_computation_and_verl_token_weighting():
    # rewards 1, 2, 3: mean 2, unbiased var 1 -> (-1, 0, 1) / sqrt(1 + 1e-8)
    assert masked_whiten([1.0, 2.0, 3.0]) == pytest.approx([-1 / math.sqrt(1 + 1e-8), 0.0, 1 / math.sqrt(1 + 1e-8)], abs=1e-12)
    # weights = token counts: [1, 3] over 1+3 tokens is the token vector [1, 3, 3, 3]: mean 2.5, var 1.0
    a = masked_whiten([1.0, 3.0], [1, 3])
    assert a == pytest.approx([(1 - 2.5) / math.sqrt(1.0 + 1e-8), (3 - 2.5) / math.sqrt(1.0 + 1e-8)], abs=1e-12)
    assert masked_whiten([5.0]) == [0.0]


def test_gae_with_gamma_lambda_one_is_reward_minus_value_per_token():
    rewards = last_token_rewards(2.0, 4)
    assert rewards == [0.0, 0.0, 0.0, 2.0]
    values = [0.5, -1.0, 1.5, 0.25]
    adv, returns = gae_advantages(rewards, values)
    assert adv == pytest.approx([2.0 - v for v in values])
    assert returns == pytest.approx([2.0] * 4)
    # gamma = 0.5, lam = 1: A_3 = 2 - 0.25; A_2 = 0 + 0.5*0.25 - 1.5 + 0.5*A_3 (hand-unrolled)
    adv, _ = gae_advantages(rewards, values, gamma=0.5)
    a3 = 2 - 0.25
    a2 = 0.5 * 0.25 - 1.5 + 0.5 * a3
    assert adv[3] == pytest.approx(a3) and adv[2] == pytest.approx(a2)


def test_whiten_is_per_model_and_drops_dropped_executions_with_all_their_turns():
    tree = _tree(
        [_turn(0, "Planner", 1.0, model="P"), _turn(1, "Coder", 0.0, model="C")],
        [_turn(0, "Planner", 3.0, model="P"), _turn(1, "Coder", 2.0, model="C", n_tokens=3)],
        [_turn(0, "Planner", 9.0, model="P"), _turn(1, "Coder", None, model="C")],  # dropped by the allocator
        [_turn(0, "Planner", False, model="P")],  # no assignment: not trained
    )
    result = assign_credit([tree], "unity", mode="whiten")
    e = tree.designs[0].executions
    s = 1 / math.sqrt(2 + 1e-8)  # planner [1, 3]: mean 2, var 2
    assert [e[0].turns[0].advantage, e[1].turns[0].advantage] == pytest.approx([-s, s])
    # coder [0 (1 token), 2 (3 tokens)] = tokens [0, 2, 2, 2]: mean 1.5, var 1
    assert [e[0].turns[1].advantage, e[1].turns[1].advantage] == pytest.approx([-1.5, 0.5], abs=1e-7)
    assert e[2].turns[0].advantage is None and e[2].turns[1].advantage is None  # the 9.0 never entered the stats
    assert e[3].turns[0].advantage is None and all(x.advantage is None for x in e)
    m = result.metrics
    assert m["credit/unity_dropped_executions"] == 1 and m["credit/unity_unassigned_turns"] == 1
    assert m["credit/unity_models"] == 2 and m["credit/turn_advantages"] == 4


def test_role_models_patterns_pick_the_model_and_turn_weighting():
    tree = _tree([_turn(0, "Planner", 1.0), _turn(1, "Coder", 0.0)], [_turn(0, "Planner", 3.0), _turn(1, "Coder", 2.0, n_tokens=3)])
    # one sampling model id, but the coder is trained by its own model: two groups
    assign_credit([tree], "unity", role_models={"executor:Coder": "coder-model"}, weighting="turn")
    e = tree.designs[0].executions
    s = 1 / math.sqrt(2 + 1e-8)
    assert [e[0].turns[1].advantage, e[1].turns[1].advantage] == pytest.approx([-s, s])
    # without the pattern all four invocations are one model's batch: [1, 0, 3, 2], mean 1.5
    assign_credit([tree], "unity", weighting="turn")
    var = sum((x - 1.5) ** 2 for x in (1, 0, 3, 2)) / 3
    assert e[0].turns[1].advantage == pytest.approx(-1.5 / math.sqrt(var + 1e-8))


def test_grpo_groups_role_and_round_across_executions_and_bad_modes_refuse_plainly():
    tree = _tree(
        [_turn(0, "Coder", 1.0), _turn(1, "Coder", 0.0, role_turn=1)],
        [_turn(0, "Coder", 0.0), _turn(1, "Coder", 0.0, role_turn=1)],
    )
    result = assign_credit([tree], "unity", mode="grpo")
    e = tree.designs[0].executions
    a = 1 / (math.sqrt(0.5) + 1e-6)  # [1, 0]: mean 0.5, std_ddof1 sqrt(0.5)
    assert [e[0].turns[0].advantage, e[1].turns[0].advantage] == pytest.approx([0.5 * a, -0.5 * a])
    assert e[0].turns[1].advantage == 0.0 and result.metrics["credit/executor_zero_var_groups"] == 1
    with pytest.raises(CreditError, match="mode"):
        assign_credit([tree], "unity", mode="ppo")
    with pytest.raises(CreditError, match="weighting"):
        assign_credit([tree], "unity", mode="gae", weighting="turn")


def test_gae_general_gamma_lambda_hand_unrolled():
    # rewards [0, 0, 1], V = [0.2, 0.4, 0.5], gamma 0.9, lam 0.8 (gamma * lam = 0.72):
    # delta_2 = 1 - 0.5 = 0.5                 A_2 = 0.5
    # delta_1 = 0.9 * 0.5 - 0.4 = 0.05        A_1 = 0.05 + 0.72 * 0.5 = 0.41
    # delta_0 = 0.9 * 0.4 - 0.2 = 0.16        A_0 = 0.16 + 0.72 * 0.41 = 0.4552
    adv, returns = gae_advantages([0.0, 0.0, 1.0], [0.2, 0.4, 0.5], gamma=0.9, lam=0.8)
    assert adv == pytest.approx([0.4552, 0.41, 0.5], abs=1e-12)
    assert returns == pytest.approx([0.6552, 0.81, 1.0], abs=1e-12)
    with pytest.raises(CreditError, match="one value per response token"):
        gae_advantages([0.0, 1.0], [0.0])


def _action(reward, values, group):
    return Action(reward=reward, old_logprobs=[-1.0] * len(values), group=group, values=values)


def test_gae_token_stage_is_r_minus_v_then_whitened_per_model_over_tokens():
    acts = [_action(2.0, [0.5, 1.0], "P"), _action(0.0, [0.0, -1.0, 1.0], "P"), _action(1.0, [0.25], "C")]
    out = gae_token_stage(acts, gamma=1.0, lam=1.0, mode="gae", role_models=None)  # other options are ignored
    assert isinstance(out, TokenCredit)
    # before whitening, per token r - V: [1.5, 1.0] and [0, 1, -1]; the returns are r on every token
    assert [list(r) for r in out.returns] == [[2.0, 2.0], [0.0, 0.0, 0.0], [1.0]]
    # model P's tokens [1.5, 1, 0, 1, -1]: mean 0.5, deviations [1, .5, -.5, .5, -1.5], unbiased var 4 / 4 = 1
    s = 1 / math.sqrt(1 + 1e-8)
    assert list(out.advantages[0]) == pytest.approx([1.0 * s, 0.5 * s], abs=1e-12)
    assert list(out.advantages[1]) == pytest.approx([-0.5 * s, 0.5 * s, -1.5 * s], abs=1e-12)
    assert list(out.advantages[2]) == [0.0]  # model C has one token: nothing to whiten against
    with pytest.raises(CreditError, match="critic values"):
        gae_token_stage([Action(reward=1.0, old_logprobs=[-1.0])])


def test_gae_mode_passes_raw_rewards_to_the_token_stage_and_still_drops_executions():
    tree = _tree(
        [_turn(0, "Planner", 1.0), _turn(1, "Coder", -1.0, n_tokens=3)],
        [_turn(0, "Planner", 9.0), _turn(1, "Coder", None)],  # dropped by the allocator: no sample at all
    )
    result = assign_credit([tree], "unity", mode="gae", gamma=1.0, lam=0.95)
    e = tree.designs[0].executions
    assert [t.advantage for t in e[0].turns] == [1.0, -1.0]  # raw r: the trainer's token stage whitens A = r - V
    assert [t.advantage for t in e[1].turns] == [None, None]
    assert result.metrics["credit/unity_dropped_executions"] == 1
    stage = get_token_stage("unity", {"mode": "gae"})
    assert stage is not None and stage.needs_values({"mode": "gae"}) and not stage.drop_truncated
    assert get_token_stage("unity", {"mode": "whiten"}) is None and get_token_stage("unity", {}) is None
