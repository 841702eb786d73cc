"""MAPPA's REINFORCE++ advantages (Eq. 1-4) against hand-computed cases, and the record-level estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metaagent.credit import CreditError, assign_credit, get_token_stage
from metaagent.credit.mappa import Action, reinforce_pp_advantages
from metaagent.records import TurnReward

# action A: 3 tokens, r = 0.8, KL_t = old - ref = [0.5, -1, 0]
A = Action(0.8, [-1.0, -2.0, -0.5], [-1.5, -1.0, -0.5])
# action B: 5 tokens, tokens 2-3 are a tool observation (mask 0); KL = [1, 0, -2, -2, 0.5]
B = Action(0.5, [-1.0, -1.0, -3.0, -3.0, -1.0], [-2.0, -1.0, -1.0, -1.0, -1.5], mask=[1, 1, 0, 0, 1])


def test_kl_penalised_reward_and_return_to_go_of_one_action():
    from metaagent.credit.mappa import kl_penalised_rewards, returns_to_go

    m = np.ones(3)
    r = kl_penalised_rewards(A.reward, np.array(A.old_logprobs), np.array(A.ref_logprobs), m, beta=0.1)
    # -0.1 * [0.5, -1, 0] + [0, 0, 0.8]
    assert r == pytest.approx([-0.05, 0.1, 0.8])
    assert returns_to_go(r, m, 1.0) == pytest.approx([0.85, 0.9, 0.8])
    assert returns_to_go(np.array([0.0, 0.0, 1.0]), m, 0.5) == pytest.approx([0.25, 0.5, 1.0])


def test_observation_tokens_carry_no_kl_and_the_score_sits_on_the_last_action_token():
    from metaagent.credit.mappa import kl_penalised_rewards, returns_to_go

    m = np.array(B.mask, dtype=float)
    r = kl_penalised_rewards(B.reward, np.array(B.old_logprobs), np.array(B.ref_logprobs), m, beta=0.1)
    # masked tokens 2, 3 get no KL penalty (their KL is -2); the score 0.5 is on token 4
    assert r == pytest.approx([-0.1, 0.0, 0.0, 0.0, 0.5 - 0.05])
    assert returns_to_go(r, m, 1.0) == pytest.approx([0.35, 0.45, 0.45, 0.45, 0.45])
    # an action whose last token is an observation: the score goes to its last *action* token
    r = kl_penalised_rewards(1.0, np.zeros(3), np.zeros(3), np.array([1.0, 1.0, 0.0]), beta=0.1)
    assert r == pytest.approx([0.0, 1.0, 0.0])


def test_global_normalisation_is_token_weighted_with_population_variance_and_masks_observations():
    adv_a, adv_b = reinforce_pp_advantages([A, B], beta=0.1)
    # action tokens: A [0.85, 0.9, 0.8], B [0.35, 0.45, -, -, 0.45]; mu = 3.8 / 6 = 19/30
    # var = sum (A - mu)^2 / 6 = 0.29333 / 6 = 11/225 (population, not / 5); std = sqrt(11) / 15
    mu, rstd = 19 / 30, 15 / math.sqrt(11)
    assert adv_a == pytest.approx([(0.85 - mu) * rstd, (0.9 - mu) * rstd, (0.8 - mu) * rstd])
    assert adv_b == pytest.approx([(0.35 - mu) * rstd, (0.45 - mu) * rstd, 0.0, 0.0, (0.45 - mu) * rstd])
    assert adv_a[0] == pytest.approx(0.9799118698777)


def test_beta_zero_needs_no_reference_and_weights_tokens_not_actions():
    long_bad = Action(0.0, [-1.0] * 3)  # no ref log-probs: fine at beta = 0
    short_good = Action(1.0, [-1.0] * 2)
    bad, good = reinforce_pp_advantages([long_bad, short_good], beta=0.0)
    # tokens [0, 0, 0, 1, 1]: mu = 0.4 (per action it would be 0.5), var = 0.24
    assert good == pytest.approx([0.6 / math.sqrt(0.24)] * 2)
    assert bad == pytest.approx([-0.4 / math.sqrt(0.24)] * 3)
    with pytest.raises(CreditError, match="reference log-probs"):
        reinforce_pp_advantages([long_bad], beta=0.01)


def test_a_batch_where_every_score_is_equal_gives_zero_advantages_at_beta_zero():
    actions = [Action(0.7, [-0.3] * n) for n in (1, 4, 2)]
    for adv in reinforce_pp_advantages(actions, beta=0.0):
        assert adv == pytest.approx(np.zeros_like(adv), abs=1e-9)  # var = 0 -> floor 1e-8, but A - mu = 0
    # with the KL term the equal scores still differ by the KL: advantages are not all 0
    with_kl = [Action(0.7, [-0.3, -0.3], [-0.1, -0.5]), Action(0.7, [-0.3], [-0.3])]
    assert any(abs(x) > 0.1 for a in reinforce_pp_advantages(with_kl, beta=0.01) for x in a)


def test_return_scope_agent_episode_adds_the_same_agents_later_actions():
    first = Action(0.2, [0.0, 0.0], episode="e/Coder", order=0)
    later = Action(0.6, [0.0], episode="e/Coder", order=1)
    other = Action(0.0, [0.0], episode="e/Solver", order=0)
    ep = reinforce_pp_advantages([first, later, other], beta=0.0, return_scope="agent_episode")
    # returns [0.8, 0.8], [0.6], [0]: mu = 2.2 / 4 = 0.55, var = (0.0625 * 2 + 0.0025 + 0.3025) / 4 = 0.1075
    s = math.sqrt(0.1075)
    assert [list(x) for x in ep] == [pytest.approx([0.25 / s] * 2), pytest.approx([0.05 / s]), pytest.approx([-0.55 / s])]
    act = reinforce_pp_advantages([first, later, other], beta=0.0, return_scope="action")
    # returns [0.2, 0.2], [0.6], [0]: mu = 0.25, var = (0.0025 * 2 + 0.1225 + 0.0625) / 4 = 0.0475
    s = math.sqrt(0.0475)
    assert [list(x) for x in act] == [pytest.approx([-0.05 / s] * 2), pytest.approx([0.35 / s]), pytest.approx([-0.25 / s])]


def test_norm_scope_model_normalises_each_model_on_its_own():
    a = [Action(1.0, [0.0], group="m1"), Action(0.0, [0.0], group="m1")]
    b = [Action(0.9, [0.0], group="m2"), Action(0.8, [0.0], group="m2")]
    per_model = reinforce_pp_advantages(a + b, beta=0.0, norm_scope="model")
    assert [float(x[0]) for x in per_model] == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-6)
    batch = reinforce_pp_advantages(a + b, beta=0.0, norm_scope="batch")
    assert float(batch[2][0]) > 0 > float(batch[1][0]) and float(batch[2][0]) != pytest.approx(1.0)


def test_bad_options_are_one_line_errors():
    with pytest.raises(CreditError, match="return_scope"):
        reinforce_pp_advantages([A], return_scope="episode")
    with pytest.raises(CreditError, match="norm_scope"):
        reinforce_pp_advantages([A], norm_scope="agent")
    with pytest.raises(CreditError, match="mask of shape"):
        reinforce_pp_advantages([Action(1.0, [0.0, 0.0], mask=[1.0])], beta=0.0)


def test_the_record_estimator_trains_scored_turns_only_and_counts_the_rest(make_tree):
    tree = make_tree([[1.0, 0.0]])  # one design, two executions of two turns
    (e0, e1) = tree.designs[0].executions
    e0.turns[0].reward = TurnReward(0.7, "judge", components={"score": 7.0})
    e0.turns[1].reward = TurnReward(None, "judge", error="coach reply had no PROCESS_SCORE")
    e1.turns[0].reward = TurnReward(0.9, "judge", components={"score": 9.0})
    e1.turns[0].finish_reason = "length"  # truncated: masked out
    e1.turns[1].reward = None  # never scored
    result = assign_credit([tree], "mappa")
    assert e0.turns[0].advantage == 0.7  # r_a, finished per token by the trainer's token stage
    assert [e0.turns[1].advantage, e1.turns[0].advantage, e1.turns[1].advantage] == [None, None, None]
    assert e0.advantage is None and e1.advantage is None  # nothing else trains the executor
    m = result.metrics
    assert (m["credit/mappa_actions"], m["credit/mappa_unscored"], m["credit/mappa_truncated"], m["credit/mappa_no_reward"]) == (1, 1, 1, 1)
    assert tree.designs[0].advantage is not None  # designer: hierarchical on outcomes (singleton design: 0)
    stage = get_token_stage("mappa")
    assert stage.needs_ref({"beta": 0.01}) and not stage.needs_ref({"beta": 0.0})
    assert get_token_stage("hierarchical") is None
