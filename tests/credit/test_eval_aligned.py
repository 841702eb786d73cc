"""Evaluation-aligned credit (seed 002), the pure parts: Shapley values, contribution rewards and the
helpfulness split against hand-computed coalition tables; first-error bisection with scripted judges
(judge calls counted exactly); the ``eval_aligned`` estimator over synthetic records; DPO by hand."""

from __future__ import annotations

import math

import pytest

from metaagent.credit import CreditError, assign_credit
from metaagent.credit.eval_aligned import (
    ERR,
    OK,
    contribution_rewards,
    exact_shapley,
    first_error,
    helpfulness_weights,
    max_queries,
    permutation_shapley,
    plan_for,
    protocol_metrics,
    shapley_plan,
)
from metaagent.records import (
    AgentTurn,
    CheckReport,
    Counterfactual,
    Design,
    Execution,
    FirstError,
    PreferencePair,
    RewardRecord,
    RolloutTree,
)

F = frozenset


# ---- Shapley against hand-computed tables -------------------------------------------------------------------

THREE = {  # v(S) for agents a, b, c (c is a free rider)
    F(): 0.0, F("a"): 0.2, F("b"): 0.4, F("c"): 0.0,
    F("ab"): 0.8, F("ac"): 0.2, F("bc"): 0.6, F("abc"): 1.0,
}  # fmt: skip


def test_exact_shapley_of_a_three_agent_table_by_hand():
    # phi_a = 0.2/3 + 0.4/6 + 0.2/6 + 0.4/3 = 0.3; phi_b = 0.4/3 + 0.6/6 + 0.6/6 + 0.8/3 = 0.6;
    # phi_c = 0/3 + 0/6 + 0.2/6 + 0.2/3 = 0.1
    phi = exact_shapley("abc", THREE)
    assert phi == pytest.approx({"a": 0.3, "b": 0.6, "c": 0.1})
    assert sum(phi.values()) == pytest.approx(THREE[F("abc")] - THREE[F()])  # efficiency
    alpha, r, degenerate = contribution_rewards(phi, 1.0)
    assert alpha == pytest.approx({"a": 0.3, "b": 0.6, "c": 0.1}) and not degenerate
    assert sum(r.values()) == pytest.approx(1.0)


def test_a_harmful_agent_gets_a_negative_value_and_the_signed_rewards_still_sum_to_r_sys():
    # solver s alone succeeds (1.0); the harmful h drags the team down to 0.6
    table = {F(): 0.0, F("s"): 1.0, F("h"): 0.0, F("hs"): 0.6}
    phi = exact_shapley("hs", table)
    assert phi == pytest.approx({"s": 0.5 * 1.0 + 0.5 * 0.6, "h": 0.5 * 0.0 + 0.5 * (0.6 - 1.0)})  # 0.8, -0.2
    alpha, r, degenerate = contribution_rewards(phi, 0.6)
    assert alpha == pytest.approx({"s": 0.8 / 0.6, "h": -0.2 / 0.6}) and not degenerate
    assert r == pytest.approx({"s": 0.8, "h": -0.2}) and sum(r.values()) == pytest.approx(0.6)
    _, clipped, _ = contribution_rewards(phi, 0.6, clip_negative=True)
    assert clipped == pytest.approx({"s": 0.6, "h": 0.0})


def test_one_agent_gets_v_a_minus_v_empty_and_all_of_r_sys():
    # a reference baseline can make v(∅) > 0: phi = 1.4 - 0.4 = 1.0, but the agent's reward is all of R_sys
    phi = exact_shapley(["solo"], {F(): 0.4, F(["solo"]): 1.4})
    assert phi == pytest.approx({"solo": 1.0})
    alpha, r, degenerate = contribution_rewards(phi, 1.4)
    assert alpha == {"solo": 1.0} and r == pytest.approx({"solo": 1.4}) and not degenerate


def test_a_zero_sum_is_degenerate_and_splits_uniformly():
    # v(A) = v(∅): phi_a = (2-1)/2 + (1-0)/2 = 1, phi_b = (0-1)/2 + (1-2)/2 = -1, sum 0
    phi = exact_shapley("ab", {F(): 1.0, F("a"): 2.0, F("b"): 0.0, F("ab"): 1.0})
    assert phi == pytest.approx({"a": 1.0, "b": -1.0})
    alpha, r, degenerate = contribution_rewards(phi, 1.0)
    assert degenerate and alpha == {"a": 0.5, "b": 0.5} and r == {"a": 0.5, "b": 0.5}


def test_a_missing_coalition_value_is_an_error_not_a_zero():
    with pytest.raises(CreditError, match=r"no coalition value for \['b'\]"):
        exact_shapley("ab", {F(): 0.0, F("a"): 1.0, F("ab"): 1.0})


def test_helpfulness_weights_by_hand():
    assert helpfulness_weights([1.0, 0.0, 1.0]) == [0.5, 0.0, 0.5]
    assert helpfulness_weights([0.0, 0.0, 0.0, 0.0]) == [0.25] * 4  # nobody helpful: uniform 1/k
    assert helpfulness_weights([0.2, 0.6]) == pytest.approx([0.25, 0.75])  # soft labels
    with pytest.raises(CreditError, match=r"in \[0, 1\]"):
        helpfulness_weights([1.5])


def test_plans_exact_up_to_the_limit_then_sampled_with_a_coalition_cache():
    exact = shapley_plan("abc", exact_max_agents=5, permutations=8, seed=0)
    assert exact.method == "exact" and len(exact.coalitions) == 2**3 - 1 and F("abc") not in exact.coalitions
    players = list("abcdef")
    sampled = shapley_plan(players, exact_max_agents=5, permutations=4, seed=7)
    assert sampled.method == "sampled" and len(sampled.permutations) == 4
    assert len(set(sampled.coalitions)) == len(sampled.coalitions) <= 4 * 6  # each ordering adds at most n
    assert sampled == shapley_plan(players, exact_max_agents=5, permutations=4, seed=7)  # reproducible
    # additive game: every ordering gives phi_i = w_i; efficiency holds for a non-additive one too
    w = dict(zip(players, [0.5, -0.1, 0.2, 0.0, 0.3, 0.1]))
    values = {s: sum(w[p] for p in s) for s in [*sampled.coalitions, F(players)]}
    assert permutation_shapley(sampled.permutations, values) == pytest.approx(w)
    odd = {s: float(len(s) ** 2) for s in [*sampled.coalitions, F(players)]}
    assert sum(permutation_shapley(sampled.permutations, odd).values()) == pytest.approx(36.0)


# ---- bisection with scripted judges ---------------------------------------------------------------------------


class Scripted:
    """A prefix judge answering ERR for the prefixes listed; counts its calls."""

    def __init__(self, err: set[int]) -> None:
        self.err, self.calls = err, []

    def __call__(self, t: int) -> str:
        self.calls.append(t)
        return ERR if t in self.err else OK


def test_t1_needs_no_query():
    judge = Scripted(set())
    b = first_error(1, judge)
    assert b.turn == 1 and b.queries == [] and judge.calls == []


@pytest.mark.parametrize(
    "t_star, calls, verdicts",
    [
        (1, [2, 1], [ERR, ERR]),
        (2, [2, 1], [ERR, OK]),
        (3, [2, 3], [OK, ERR]),
        (4, [2, 3, 4], [OK, OK, ERR]),
        (5, [2, 3, 4], [OK, OK, OK]),
    ],
)
def test_t5_monotone_judge_finds_every_first_error_with_the_exact_queries(t_star, calls, verdicts):
    judge = Scripted(set(range(t_star, 6)))
    b = first_error(5, judge)
    assert b.turn == t_star and judge.calls == calls
    assert b.queries == [{"turn": t, "verdict": v} for t, v in zip(calls, verdicts)]
    assert len(calls) <= max_queries(5) == 3


def test_query_count_stays_between_floor_and_ceil_log2():
    for T in range(2, 34):
        for t_star in range(1, T + 1):
            judge = Scripted(set(range(t_star, T + 1)))
            assert first_error(T, judge).turn == t_star
            assert math.floor(math.log2(T)) <= len(judge.calls) <= math.ceil(math.log2(T))


def test_a_non_monotone_judge_returns_the_boundary_its_path_finds():
    judge = Scripted({1})  # H_1 is judged wrong but H_2..H_4 are judged fine again
    b = first_error(5, judge)
    assert b.turn == 5 and judge.calls == [2, 3, 4]  # the ERR at 1 is never asked about
    judge = Scripted({2, 4})  # ERR, OK, ERR: the search lands on the last OK->ERR step it sees
    assert first_error(5, judge).turn == 2 and judge.calls == [2, 1]


def test_a_judge_without_a_verdict_stops_the_search():
    b = first_error(5, lambda t: None)
    assert b.turn is None and b.failed and b.queries == []


# ---- the estimator over synthetic records --------------------------------------------------------------------


def turn(k: int, role: str, helpful: float | None = None) -> AgentTurn:
    labels = {} if helpful is None else {"helpful": helpful}
    return AgentTurn(k, role, "sys", [{"role": "user", "content": f"q{k}"}], f"r{k}", None, [1], [2, 3], [-1.0, -1.0],
                     "stop", "m", labels=labels)  # fmt: skip


def reward(correct: float, total: float | None = None) -> RewardRecord:
    return RewardRecord(correct if total is None else total, correct, 0.0)


def coalitions(table: dict, baseline: str = "noop") -> list[Counterfactual]:
    return [Counterfactual(sorted(s), baseline, 1, "ok", reward(v)) for s, v in table.items()]


def tree_of(*executions: Execution) -> RolloutTree:
    d = Design(0, "frozen:test", None, "print(1)", CheckReport(True), executions=list(executions))
    return RolloutTree("run", {"id": "t", "domain": "math"}, 0, {}, {}, designs=[d])


def success_episode() -> Execution:
    # Solver (2 turns: helpful, not) and Critic (1 turn); table: v(∅)=0, v(S)=0, v(C)=0, v(A)=1
    turns = [turn(0, "Solver", 1.0), turn(1, "Critic", 0.0), turn(2, "Solver", 0.0)]
    table = {F(): 0.0, F(["Solver"]): 0.0, F(["Critic"]): 0.0}
    return Execution(0, "ok", turns=turns, reward=reward(1.0), seed=5, counterfactuals=coalitions(table))


def test_a_success_episode_turn_rewards_sum_to_r_sys_and_advantages_subtract_the_batch_mean():
    e = success_episode()  # phi_S = phi_C = 0.5 (complements); Solver's 0.5 all on its helpful turn
    result = assign_credit([tree_of(e)], "eval_aligned", pg_baseline="none")
    assert [t.advantage for t in e.turns] == pytest.approx([0.5, 0.5, 0.0])
    assert sum(t.advantage for t in e.turns) == pytest.approx(1.0)  # r_{i,t} sum to R_sys
    assert result.metrics["credit/eval_aligned/success_episodes"] == 1
    assign_credit([tree_of(e)], "eval_aligned")  # batch mean of (0.5, 0.5, 0) = 1/3
    assert [t.advantage for t in e.turns] == pytest.approx([0.5 - 1 / 3, 0.5 - 1 / 3, -1 / 3])
    assign_credit([tree_of(e)], "eval_aligned", pg_baseline="episode_agent")  # rbar_S = 0.25, rbar_C = 0.5
    assert [t.advantage for t in e.turns] == pytest.approx([0.25, 0.0, -0.25])
    assert e.advantage is None


def test_failure_missing_and_uncomputable_episodes_get_no_policy_gradient_and_are_counted():
    failed = Execution(1, "ok", turns=[turn(0, "Solver"), turn(1, "Critic")], reward=reward(0.0, 0.4), seed=6)
    failed.first_error = FirstError(1, "Solver", [{"turn": 1, "verdict": "ERR"}], "rule")
    failed.preferences = [PreferencePair(0, [], [1], [9], [2, 3], "resample")]
    no_pair = Execution(2, "ok", turns=[turn(0, "Solver")], reward=reward(0.0), seed=7)
    no_pair.first_error = FirstError(1, "Solver", [], "rule")
    missing = success_episode()
    missing.counterfactuals = missing.counterfactuals[:1]  # budget ran out
    broken = success_episode()
    broken.counterfactuals[0].reward = RewardRecord(None, None, None, error="scorer crashed")
    lonely = Execution(3, "ok", turns=[], reward=reward(1.0), seed=8)  # the script answered without agents
    result = assign_credit([tree_of(failed, no_pair, missing, broken, lonely)], "eval_aligned")
    assert all(t.advantage is None for e in (failed, no_pair, missing, broken) for t in e.turns)
    assert result.metrics["credit/eval_aligned/no_agents"] == 1
    m = result.metrics
    assert (m["credit/eval_aligned/failure_episodes"], m["credit/eval_aligned/pairs"], m["credit/eval_aligned/no_pair"]) == (2, 1, 1)
    assert m["credit/eval_aligned/missing_coalitions"] == 1 and m["credit/eval_aligned/not_computable"] == 1
    assert m["credit/eval_aligned/first_errors"] == 2 and m["credit/eval_aligned/success_episodes"] == 0


def test_harmful_agent_and_failed_labels_in_records():
    turns = [turn(0, "Solver", 1.0), turn(1, "Saboteur", 0.0)]
    table = {F(): 0.0, F(["Solver"]): 1.0, F(["Saboteur"]): 0.0}
    e = Execution(0, "ok", turns=turns, reward=reward(0.6), seed=1, counterfactuals=coalitions(table))
    e.reward = RewardRecord(0.6, 1.0, 0.0)  # success (correct 1) worth 0.6 (as in the table above)
    result = assign_credit([tree_of(e)], "eval_aligned", pg_baseline="none")
    assert [t.advantage for t in e.turns] == pytest.approx([0.8, -0.2])
    assert result.metrics["credit/eval_aligned/negative_shapley"] == 1
    e.turns[1].labels = {"helpful_error": 1.0}  # the judge could not label the saboteur's turn
    result = assign_credit([tree_of(e)], "eval_aligned", pg_baseline="none")
    assert [t.advantage for t in e.turns] == pytest.approx([0.8, None]) and e.turns[1].advantage is None
    assert result.metrics["credit/eval_aligned/unlabelled_agents"] == 1


def test_protocol_metrics_read_the_records():
    e = success_episode()
    m = protocol_metrics([tree_of(e)])
    assert m["credit/eval_aligned/alpha/Solver"] == pytest.approx(0.5)
    # LOO: v(A) - v(A\{i}) = 1 - 0 for both agents vs phi = 0.5: gap 0.5
    assert m["credit/eval_aligned/loo_gap"] == pytest.approx(0.5) and m["credit/eval_aligned/loo_checks"] == 2
    assert m["credit/eval_aligned/helpful_fraction"] == pytest.approx(1 / 3)
    assert plan_for(e, exact_max_agents=5, permutations=8).method == "exact"


# ---- DPO on an evaluation-aligned pair, by hand ----------------------------------------------------------------


def test_dpo_loss_of_weighted_pairs_by_hand():
    import torch

    from metaagent.learn.losses import dpo_loss

    # pair 1: policy prefers y+ by 1 nat more than the reference; pair 2: by -2 nats; weights 2 and 1
    chosen, rejected = torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -4.0])
    ref_c, ref_r = torch.tensor([-3.0, -4.0]), torch.tensor([-3.0, -5.0])
    beta = 0.1
    m1, m2 = beta * ((-3 + 3) - (-4 + 3)), beta * ((-5 + 4) - (-4 + 5))  # 0.1, -0.2
    # Eq. 12: -E_pairs[w log sigmoid(margin)], the expectation a mean over the P = 2 pairs
    by_hand = -(2 * math.log(1 / (1 + math.exp(-m1))) + 1 * math.log(1 / (1 + math.exp(-m2)))) / 2
    loss, metrics = dpo_loss(chosen, rejected, ref_c, ref_r, beta=beta, weights=torch.tensor([2.0, 1.0]))
    assert float(loss) == pytest.approx(by_hand, rel=1e-6)
    assert metrics["train/dpo_accuracy"] == 0.5


def test_one_pairs_weight_scales_its_loss_and_gradient():
    """The weight w (judge confidence) multiplies the pair's term as in Eq. 12; normalising by sum(w) would
    cancel it for a single pair (and shrink every pair's gradient when confident pairs join a batch)."""
    import torch

    from metaagent.learn.losses import dpo_loss

    def run(w):
        chosen = torch.tensor([-3.0], requires_grad=True)
        loss, _ = dpo_loss(chosen, torch.tensor([-4.0]), torch.tensor([-3.5]), torch.tensor([-3.5]), beta=0.1,
                           weights=None if w is None else torch.tensor([w]))  # fmt: skip
        loss.backward()
        return loss.item(), chosen.grad.item()

    (plain, g1), (half, g_half) = run(None), run(0.5)
    assert half == pytest.approx(0.5 * plain, rel=1e-6) and g_half == pytest.approx(0.5 * g1, rel=1e-6)
    assert run(0.0) == (0.0, 0.0)  # a pair of weight 0 teaches nothing


def test_six_agents_use_the_sampled_plan_the_stage_would_run():
    roles = [f"A{i}" for i in range(6)]
    w = dict(zip(roles, [0.3, 0.25, 0.05, 0.2, 0.1, 0.1]))  # additive game: v(A) = 1.0, phi_i = w_i exactly
    e = Execution(0, "ok", turns=[turn(k, r, 1.0) for k, r in enumerate(roles)], reward=reward(1.0), seed=11)
    plan = plan_for(e, exact_max_agents=5, permutations=3)
    assert plan.method == "sampled" and len(plan.coalitions) < 2**6 - 1
    e.counterfactuals = [  # a success worth v(S) (correct 1, total v) for every non-empty coalition
        Counterfactual(sorted(s), "noop", 1, "ok", RewardRecord(sum(w[p] for p in s), float(bool(s)), 0.0))
        for s in plan.coalitions
    ]
    assign_credit([tree_of(e)], "eval_aligned", permutations=3, pg_baseline="none")
    assert [t.advantage for t in e.turns] == pytest.approx([w[r] for r in roles])
    # the estimator asking for more orderings than were run finds coalitions missing: counted, no credit
    assert assign_credit([tree_of(e)], "eval_aligned", permutations=40).metrics["credit/eval_aligned/missing_coalitions"] == 1
