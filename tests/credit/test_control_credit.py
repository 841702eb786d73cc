"""Budget-matched control credit (``designer_baseline="control"``, metaagent/credit/control.py): the budget k_i,
the control's reward C(k) by majority vote or public tests, one control run shared by every budget, the designer
reward D_i = Rbar_i - C(k_i) in Eq. 5, executor advantages unchanged, metrics, and the worked example of
docs/concepts/credit.md to 1e-6."""

from __future__ import annotations

import math

import pytest
from builders import ERR, make_control, make_tree

from metaagent.credit import (
    CreditError,
    assign_credit,
    call_matrix,
    control_baselines,
    control_budget,
    control_size,
    control_value,
    hierarchical_credit,
    reward_matrix,
)
from metaagent.records import RolloutTree
from metaagent.rewards.selection import SELECT_MAJORITY, SELECT_PUBLIC_TESTS

EPS = 1e-6


def worked_example() -> RolloutTree:
    """docs/concepts/credit.md's worked example: one agent (calls 1, 1; rewards 1, 0), a 3-agent team (calls 3, 2;
    rewards 1, 1), an invalid design; the control answers 41, 42, 42 (rewards 0, 1, 1)."""
    tree = make_tree([[1.0, 0.0], [1.0, 1.0], []], "q42", calls=[[1, 1], [3, 2], []], roles=("Solver",))
    tree.control = make_control(["41", "42", "42"], [0.0, 1.0, 1.0])
    return tree


def test_the_worked_example_of_the_docs_to_1e_6():
    tree = worked_example()
    assert [k for k, _ in control_baselines(tree)] == [1, 3, 1]  # ceil(1), ceil(2.5), invalid -> 1
    assert [c for _, c in control_baselines(tree)] == [0.0, 1.0, 0.0]
    result = assign_credit([tree], "hierarchical", designer_baseline="control")
    mu, sigma = 1 / 6, math.sqrt(1 / 12)
    assert sigma == pytest.approx(0.288675, abs=1e-6)
    expected = [(0.5 - mu) / (sigma + EPS), (0.0 - mu) / (sigma + EPS), (0.0 - mu) / (sigma + EPS)]
    got = [d.advantage for d in tree.designs]
    assert got == pytest.approx(expected, abs=1e-6)
    assert got == pytest.approx([1.154697, -0.577348, -0.577348], abs=1e-6)  # the table's numbers
    assert [d.reward for d in tree.designs] == [0.5, 1.0, 0.0]  # Design.reward stays Eq. 4
    assert result.metrics["credit/control_reward"] == pytest.approx(1 / 3, abs=1e-12)
    assert result.metrics["credit/design_minus_control"] == pytest.approx(1 / 6, abs=1e-12)
    assert result.metrics["credit/control_errors"] == 0
    # the group baseline of the same tree: the 3-call team on top (the table's last column)
    group = worked_example()
    assign_credit([group], "hierarchical")
    assert [d.advantage for d in group.designs] == pytest.approx([0.0, 0.999998, -0.999998], abs=1e-6)


def test_executor_advantages_are_the_same_under_either_baseline():
    a, b = worked_example(), worked_example()
    assign_credit([a], "hierarchical", designer_baseline="control")
    assign_credit([b], "hierarchical")
    ex = lambda t: [[e.advantage for e in d.executions] for d in t.designs]  # noqa: E731
    assert ex(a) == ex(b) and any(x is not None for row in ex(a) for x in row)


@pytest.mark.parametrize(
    ("calls", "k"),
    [([], 1), ([0, 0], 1), ([1, 1], 1), ([3, 2], 3), ([2, 2], 2), ([1, 2, 2], 2), ([4], 4), ([0, 1], 1)],
)
def test_the_budget_is_the_mean_calls_rounded_up_and_at_least_one(calls, k):
    assert control_budget(calls) == k


def test_a_bad_calls_row_is_a_one_line_error():
    with pytest.raises(CreditError, match="integers >= 0"):
        control_budget([1, -1])


def test_majority_vote_over_a_prefix_of_one_control_run():
    marks, rewards = ["7", "8", "8", None, "7"], [0.0, 1.0, 1.0, 0.0, 0.0]
    got = [control_value(SELECT_MAJORITY, marks, rewards, k)[0] for k in range(1, 6)]
    # k=1: "7"; k=2: tie 7/8 -> first seen "7"; k=3: "8" (first at 1); k=4: "8"; k=5: tie 2/2 -> "7" (seen first)
    assert got == [0.0, 0.0, 1.0, 1.0, 0.0]


def test_a_smaller_control_reuses_the_first_executions_of_a_larger_one():
    """The control at k of one K-execution run equals a control that ran only those k executions."""
    marks, rewards = ["1", "2", "2", "3", "3", "3"], [0.2, 1.0, 1.0, 0.0, 0.0, 0.0]
    for k in range(1, len(marks) + 1):
        assert control_value(SELECT_MAJORITY, marks, rewards, k) == control_value(
            SELECT_MAJORITY, marks[:k], rewards[:k], k
        )
    # two designs of one question with the same k get the same control reward from the one run
    tree = make_tree([[1.0], [0.0], [1.0]], "q", calls=[[2], [2], [5]], roles=("S",))
    tree.control = make_control(marks[:5], rewards[:5])
    (k0, c0), (k1, c1), (k2, c2) = control_baselines(tree)
    assert (k0, k1, k2) == (2, 2, 5) and c0 == c1 == 0.2  # k=2: "1"/"2" tie -> "1", seen first
    assert c2 == 1.0  # k=5: "2" and "3" twice each -> "2", seen first
    assert control_size(tree.designs) == 5


def test_public_tests_keep_the_first_passing_program_and_a_failed_run_is_an_error():
    rewards = [0.1, 1.0, 0.3]
    assert [control_value(SELECT_PUBLIC_TESTS, [False, True, True], rewards, k)[0] for k in (1, 2, 3)] == [0.1, 1.0, 1.0]
    assert control_value(SELECT_PUBLIC_TESTS, [False, False, False], rewards, 3) == (0.1, None)  # none: first
    value, error = control_value(SELECT_PUBLIC_TESTS, [False, None, True], rewards, 3)
    assert value is None and "could not be run" in error
    assert control_value(SELECT_PUBLIC_TESTS, [True, None], rewards[:2], 2) == (0.1, None)  # passed before it


def test_an_uncomputable_control_leaves_the_design_out_and_is_counted():
    tree = make_tree([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], "q", calls=[[1, 1], [2, 2], [1, 1]], roles=("S",))
    # C(1): no vote among [None] -> the first execution (1.0); C(2): "b" = execution 1, whose reward is not computable
    tree.control = make_control([None, "b"], [1.0, ERR])
    result = assign_credit([tree], "hierarchical", designer_baseline="control")
    assert tree.designs[1].advantage is None and result.metrics["credit/control_errors"] == 1
    assert tree.designs[0].advantage is not None and tree.designs[2].advantage is not None
    # the two designs left: D = (1 - 1, 0 - 1), mean -0.5, unbiased std sqrt(0.5)
    assert tree.designs[0].advantage == pytest.approx(0.5 / (math.sqrt(0.5) + EPS), abs=1e-9)


def test_the_array_function_with_controls():
    rows, controls = [[1.0, 0.0], [1.0, 1.0], []], [0.0, 1.0, 0.0]
    res = hierarchical_credit(rows, controls=controls)
    base = hierarchical_credit(rows)
    assert res.design_rewards == base.design_rewards == [0.5, 1.0, 0.0]
    assert res.executor == base.executor
    assert res.designer == pytest.approx(hierarchical_credit([[0.5], [0.0], [0.0]]).designer)
    with pytest.raises(CreditError, match="one control reward per design"):
        hierarchical_credit(rows, controls=[0.0])


def test_ties_through_float_noise_stay_ties():
    """D_i that differ only by float rounding (0.3 - 0.1 vs 0.4 - 0.2) form a zero-variance group."""
    res = hierarchical_credit([[0.3], [0.4]], controls=[0.1, 0.2], filter_zero_var=True)
    assert res.designer == [None, None] and res.counts["filtered_designs"] == 2


def test_a_tree_without_control_is_refused_in_one_line():
    tree = make_tree([[1.0]], "q")
    with pytest.raises(CreditError, match="has no control.*RolloutEngine\\(controls=True\\)"):
        assign_credit([tree], "hierarchical", designer_baseline="control")
    with pytest.raises(CreditError, match="designer_baseline must be one of"):
        assign_credit([tree], "hierarchical", designer_baseline="sa")


def test_a_control_too_short_for_a_design_is_refused():
    tree = make_tree([[1.0]], "q", calls=[[3]])
    tree.control = make_control(["a"], [1.0])
    with pytest.raises(CreditError, match="k=3 needs k executions, the control has 1"):
        assign_credit([tree], "hierarchical", designer_baseline="control")


def test_the_default_baseline_is_todays_credit_and_ignores_a_control():
    a, b = worked_example(), worked_example()
    b.control = None
    ra, rb = assign_credit([a]), assign_credit([b])
    assert [d.advantage for d in a.designs] == [d.advantage for d in b.designs]
    assert "credit/control_reward" not in ra.metrics and ra.metrics == rb.metrics
    assert reward_matrix(a) == reward_matrix(b) and call_matrix(a) == [[1, 1], [3, 2], []]


def test_controls_survive_the_record_round_trip():
    tree = worked_example()
    back = RolloutTree.from_json(tree.to_json())
    assert back == tree and back.control.marks == ["41", "42", "42"]
    assert all(t.synthetic for e in back.control.executions for t in e.turns)
    assert control_baselines(back) == control_baselines(tree)


def test_dynamic_sampling_judges_the_designer_group_on_d():
    """Equal design rewards at different budgets: zero variance for Eq. 5, informative against the control."""
    from metaagent.train.dynamic_sampling import informative_groups

    tree = make_tree([[1.0, 1.0], [1.0, 1.0]], "q", calls=[[1, 1], [3, 3]], roles=("S",))
    assert informative_groups(tree)["designer"] == 0
    tree.control = make_control(["1", "2", "2"], [0.0, 1.0, 1.0])  # C(1) = 0, C(3) = 1: D = (1, 0)
    assert informative_groups(tree)["designer"] == 1
