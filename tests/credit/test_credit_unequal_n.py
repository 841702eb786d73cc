"""Credit with unequal N per design (``rollout.adaptive_budget`` gives each design its own number of executions):
every statistic uses each design's own count, never a padded M x N_max matrix. Expected values are written out
by hand from the formulas (Eq. 4-7) with the statistics module, not with the code under test."""

from __future__ import annotations

import math
from statistics import fmean, stdev

import pytest

from metaagent.credit import assign_credit, hierarchical_credit
from metaagent.credit.groups import DEFAULT_EPS as EPS

# M = 3 designs with N_i = 4, 2, 3 executions
RAGGED = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0], [0.0, 1.0, 0.0]]


def approx(got, want):
    assert got == pytest.approx(want, abs=1e-9)


def test_design_reward_is_the_mean_over_its_own_executions():
    res = hierarchical_credit(RAGGED)
    approx(res.design_rewards, [3 / 4, 2 / 2, 1 / 3])  # zero-padding to N = 4 would give 1/2 and 1/4 for designs 1, 2
    means = [3 / 4, 1.0, 1 / 3]
    mu, sd = fmean(means), stdev(means)
    approx(res.designer, [(x - mu) / (sd + EPS) for x in means])
    assert res.counts["executions"] == 9 and res.counts["designer_groups"] == 1


def test_executor_question_group_pools_every_execution_once():
    res = hierarchical_credit(RAGGED)
    pooled = [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]  # 9 executions, mean 2/3
    mu, sd = fmean(pooled), stdev(pooled)
    assert mu == pytest.approx(2 / 3)
    want = [[(x - mu) / (sd + EPS) for x in row] for row in RAGGED]
    for got, w in zip(res.executor, want):
        approx(got, w)
    assert [len(row) for row in res.executor] == [4, 2, 3]


def test_executor_question_group_weighs_calls_per_execution():
    calls = [[1, 2, 1, 1], [1, 1], [3, 1, 1]]
    res = hierarchical_credit(RAGGED, calls=calls)
    members = [r for row, cs in zip(RAGGED, calls) for r, c in zip(row, cs) for _ in range(c)]  # one per call
    assert len(members) == 12
    mu, sd = fmean(members), stdev(members)
    for got, row in zip(res.executor, RAGGED):
        approx(got, [(x - mu) / (sd + EPS) for x in row])


def test_executor_design_groups_of_different_sizes():
    res = hierarchical_credit(RAGGED, executor_group="design")
    for got, row in zip(res.executor, RAGGED):
        if max(row) == min(row):
            assert got == [0.0] * len(row)
        else:
            mu, sd = fmean(row), stdev(row)
            approx(got, [(x - mu) / (sd + EPS) for x in row])
    assert res.counts["executor_groups"] == 3 and res.counts["executor_zero_var_groups"] == 1


def test_a_design_with_one_computable_reward_is_a_counted_singleton():
    rows = [[1.0, 0.0], [1.0], [0.0, None]]  # design 1 ran once; design 2's second reward could not be computed
    res = hierarchical_credit(rows, executor_group="design")
    assert res.executor[1] == [0.0] and res.executor[2] == [0.0, None]
    assert res.counts["executor_singleton_groups"] == 2 and res.counts["reward_errors"] == 1
    approx(res.design_rewards, [0.5, 1.0, 0.0])  # design 2: mean of its one computable reward, not of 2
    masked = hierarchical_credit(rows, executor_group="design", filter_zero_var=True)
    assert masked.executor[1] == [None] and masked.executor[2] == [None, None]
    assert masked.counts["filtered_executions"] == 2  # the two singleton members: counted, not silently 0


def test_records_with_unequal_executions_get_the_matrix_advantages(make_tree):
    tree = make_tree(RAGGED)
    result = assign_credit([tree], "hierarchical", executor_unit="execution")
    want = hierarchical_credit(RAGGED)
    assert [d.reward for d in tree.designs] == pytest.approx(want.design_rewards)
    assert [d.advantage for d in tree.designs] == pytest.approx(want.designer)
    assert [[e.advantage for e in d.executions] for d in tree.designs] == [pytest.approx(r) for r in want.executor]
    assert result.metrics["credit/executions"] == 9


def test_flat_estimator_with_unequal_executions(make_tree):
    tree = make_tree(RAGGED)
    assign_credit([tree], "flat")
    pooled = [x for row in RAGGED for x in row]
    mu, sd = fmean(pooled), stdev(pooled)
    adv = [[(x - mu) / (sd + EPS) for x in row] for row in RAGGED]
    for d, row in zip(tree.designs, adv):
        assert d.advantage == pytest.approx(fmean(row))  # mean of its own rollouts' advantages
        assert [e.advantage for e in d.executions] == pytest.approx(row)
    assert not math.isnan(tree.designs[0].advantage)


# ---- executor_balance="design": every design of a question weighs alike in its executor group -----------------


def test_design_balanced_question_group_by_hand():
    res = hierarchical_credit(RAGGED, executor_balance="design")
    # weights 1/N_i per execution (1/4, 1/2, 1/3), rescaled to sum to the 9 members: 0.75, 1.5, 1.0
    w = [0.75] * 4 + [1.5] * 2 + [1.0] * 3
    r = [x for row in RAGGED for x in row]
    mu = sum(a * b for a, b in zip(w, r)) / 9
    assert mu == pytest.approx(fmean([3 / 4, 1.0, 1 / 3]))  # the mean of the design means, as fixed M x N estimates
    sd = math.sqrt(sum(a * (b - mu) ** 2 for a, b in zip(w, r)) / (9 - 1))
    for got, row in zip(res.executor, RAGGED):
        approx(got, [(x - mu) / (sd + EPS) for x in row])
    assert res.designer == hierarchical_credit(RAGGED).designer  # the designer group is per design already


def test_design_balance_with_calls_by_hand():
    rows, calls = [[1.0, 0.0, 1.0, 1.0], [0.0, 0.0]], [[1, 2, 1, 1], [3, 1]]
    res = hierarchical_credit(rows, calls=calls, executor_balance="design")
    # per call c_ij / N_i: design 0: 1/4, 2/4, 1/4, 1/4; design 1: 3/2, 1/2; sum 3.25 -> scaled to the 9 calls
    raw = [0.25, 0.5, 0.25, 0.25, 1.5, 0.5]
    w = [x * 9 / 3.25 for x in raw]
    r = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    mu = sum(a * b for a, b in zip(w, r)) / 9
    sd = math.sqrt(sum(a * (b - mu) ** 2 for a, b in zip(w, r)) / 8)
    approx(res.executor[0] + res.executor[1], [(x - mu) / (sd + EPS) for x in r])


def test_design_balance_is_member_balance_when_n_is_equal():
    rows, calls = [[1.0, 0.0], [0.0, 0.0], [1.0, 0.5]], [[1, 2], [3, 1], [1, 1]]
    for c in (None, calls):
        a = hierarchical_credit(rows, calls=c, executor_balance="design")
        b = hierarchical_credit(rows, calls=c)
        for x, y in zip(a.executor, b.executor):
            approx(x, y)


def test_fractional_weights_and_bad_balance():
    from metaagent.credit import CreditError, group_advantages

    assert group_advantages([1.0, 0.0], weights=[0.5, 1.5]).mean == pytest.approx(0.25)
    assert group_advantages([1.0, 0.0], weights=[0.25, 0.5]).singleton  # weights sum to <= 1: no std
    with pytest.raises(CreditError, match="positive numbers"):
        group_advantages([1.0, 0.0], weights=[0.0, 1.0])
    with pytest.raises(CreditError, match="executor_balance"):
        hierarchical_credit(RAGGED, executor_balance="task")


def test_estimator_option_and_the_auto_config(make_tree):
    from metaagent.train.config import TrainConfig

    tree = make_tree(RAGGED)
    assign_credit([tree], "hierarchical", executor_unit="execution", executor_balance="design")
    want = hierarchical_credit(RAGGED, executor_balance="design")
    assert [[e.advantage for e in d.executions] for d in tree.designs] == [pytest.approx(r) for r in want.executor]
    assert TrainConfig().executor_balance() == "member"
    on = TrainConfig.load(None, ["rollout.adaptive_budget.enabled=true"])
    assert on.executor_balance() == "design"
    assert TrainConfig.load(None, ["rollout.adaptive_budget.enabled=true", "algo.executor_balance=member"]).executor_balance() == "member"
