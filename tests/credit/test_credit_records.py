"""assign_credit over rollout records: advantages written in place, errors counted, estimators by name."""

from __future__ import annotations

import pytest

from metaagent.credit import (
    CreditError,
    TreeCredit,
    assign_credit,
    call_matrix,
    flat_advantages,
    get_estimator,
    hierarchical_advantages,
    list_estimators,
    register_estimator,
    reward_matrix,
)
from metaagent.records import RolloutTree

from builders import ERR, MISSING  # markers of an uncomputable reward / a missing reward record


def advantages_of(tree):
    return [d.advantage for d in tree.designs], [[e.advantage for e in d.executions] for d in tree.designs]


def test_hierarchical_fills_records_like_the_array_function(make_tree):
    matrices = [[[1.0, 0.0], [0.0, 0.0], [1.2, 1.0]], [[0.2, 1.0], [], [0.0, 1.2]]]
    trees = [make_tree(m, f"t{i}") for i, m in enumerate(matrices)]
    result = assign_credit(trees)
    for tree, m in zip(trees, matrices):
        d, e = hierarchical_advantages(m, calls=call_matrix(tree))  # default executor_unit="call"
        assert advantages_of(tree) == (d, e)
    assert [d.reward for d in trees[1].designs] == [0.6, 0.0, 0.6]
    assert result.metrics["credit/invalid_designs"] == 1
    assert result.metrics["credit/designs"] == 6 and result.metrics["credit/executions"] == 10
    assert result.metrics["credit/groups"] == 4  # one designer and one executor group per question
    assert result.metrics["credit/executor_adv_count"] == 10
    assert result.metrics["credit/designer_adv_mean"] == pytest.approx(0.0, abs=1e-9)
    assert result.turn_advantages == {}


def test_reward_errors_are_excluded_and_counted_never_zero(make_tree):
    tree = make_tree([[1.0, ERR], [0.0, MISSING], [1.0, 0.0]])
    result = assign_credit([tree])
    assert result.metrics["credit/reward_errors"] == 2
    d, e = advantages_of(tree)
    assert e[0][1] is None and e[1][1] is None
    expected_d, expected_e = hierarchical_advantages([[1.0, None], [0.0, None], [1.0, 0.0]], calls=call_matrix(tree))
    assert d == expected_d and e == expected_e
    as_zero = hierarchical_advantages([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    assert d != as_zero[0]


def test_valid_design_never_run_gets_no_advantage(make_tree):
    tree = make_tree([[1.0, 0.0], None, [0.0, 0.0]])
    assert reward_matrix(tree) == [[1.0, 0.0], None, [0.0, 0.0]]
    result = assign_credit([tree])
    assert tree.designs[1].advantage is None and tree.designs[1].reward is None
    assert result.metrics["credit/designs_without_reward"] == 1


def test_old_advantages_are_reset(make_tree):
    tree = make_tree([[1.0, 1.0], [1.0, 1.0]])
    for d in tree.designs:
        d.advantage = 5.0
        for e in d.executions:
            e.advantage = 5.0
    result = assign_credit([tree], filter_zero_var=True)
    assert advantages_of(tree) == ([None, None], [[None, None], [None, None]])
    assert result.metrics["credit/zero_var_groups"] == 2
    assert (
        result.metrics["credit/filtered_executions"] == 4 and result.metrics["credit/filtered_designs"] == 2
    )
    assert "credit/designer_adv_mean" not in result.metrics  # no values: no made-up statistic


def test_zero_variance_without_filter_is_zero_and_counted(make_tree):
    tree = make_tree([[1.0, 1.0], [1.0, 1.0]])
    result = assign_credit([tree])
    assert advantages_of(tree) == ([0.0, 0.0], [[0.0, 0.0], [0.0, 0.0]])
    assert result.metrics["credit/zero_var_groups"] == 2
    assert result.metrics["credit/designer_zero_var_groups"] == 1


def test_flat_estimator(make_tree):
    m = [[1.0], [0.0], [1.2], [], [0.2], [0.0], [1.0], [0.0]]
    tree = make_tree(m)
    assign_credit([tree], "flat")
    assert advantages_of(tree) == flat_advantages(m)


def test_options_reach_the_estimator(make_tree):
    m = [[1.0, 0.0], [1.0, 1.0]]
    tree = make_tree(m)
    assign_credit([tree], executor_group="design", norm_by_std=False)
    assert advantages_of(tree) == hierarchical_advantages(m, executor_group="design", norm_by_std=False)


def test_errors_name_the_problem(make_tree):
    with pytest.raises(CreditError, match="unknown credit estimator 'gae'.*hierarchical"):
        assign_credit([make_tree([[1.0]])], "gae")
    with pytest.raises(CreditError, match="no option.*executor_groups.*allowed"):
        assign_credit([make_tree([[1.0]])], executor_groups="design")
    with pytest.raises(CreditError, match="no option"):
        assign_credit([make_tree([[1.0]])], "flat", executor_group="design")
    bad = make_tree([[1.0], []])
    bad.designs[1].executions = list(bad.designs[0].executions)
    with pytest.raises(CreditError, match=r"designs\[1\] is invalid.*has 1 execution"):
        assign_credit([bad])
    nan = make_tree([[1.0, 0.0]])
    nan.designs[0].executions[1].reward.total = float("nan")
    with pytest.raises(CreditError, match=r"task t: designs\[0\].executions\[1\].reward.total is nan"):
        assign_credit([nan])
    with pytest.raises(CreditError, match="list of RolloutTree"):
        assign_credit([{"designs": []}])


def test_registry_leaves_room_for_per_turn_credit(make_tree):
    """A later estimator (AT-GRPO, judge rewards, Shapley) may give each turn its own advantage."""

    @register_estimator("test_per_turn")
    def per_turn(trees: list[RolloutTree], *, scale: float = 1.0) -> list[TreeCredit]:
        out = []
        for tree in trees:
            c = TreeCredit()
            for i, d in enumerate(tree.designs):
                c.designer[i] = 0.0
                for j, e in enumerate(d.executions):
                    c.executor[(i, j)] = 0.0
                    for k, _ in enumerate(e.turns):
                        c.turns[(i, j, k)] = scale * (k + 1)
            c.counts["judge_calls"] = 7
            out.append(c)
        return out

    assert "test_per_turn" in list_estimators() and get_estimator("test_per_turn") is per_turn
    register_estimator("test_per_turn")(per_turn)  # same function again: fine
    with pytest.raises(CreditError, match="already registered"):
        register_estimator("test_per_turn")(lambda trees: [])
    trees = [make_tree([[1.0, 0.0]]), make_tree([[0.0]])]
    result = assign_credit(trees, "test_per_turn", scale=2.0)
    assert result.turn_advantages[(0, 0, 1, 1)] == 4.0 and result.turn_advantages[(1, 0, 0, 0)] == 2.0
    assert len(result.turn_advantages) == 6
    assert result.metrics["credit/judge_calls"] == 14 and result.metrics["credit/turn_advantages"] == 6

    @register_estimator("test_out_of_range")
    def out_of_range(trees, **_):
        return [TreeCredit(turns={(0, 0, 9): 1.0}) for _ in trees]

    with pytest.raises(CreditError, match=r"turn position \(0, 0, 9\) does not exist"):
        assign_credit([make_tree([[1.0]])], "test_out_of_range")


def test_executor_unit_execution_counts_each_execution_once(make_tree):
    m = [[1.0, 0.0], [0.0, 0.0], [1.2, 1.0]]
    tree = make_tree(m)
    assign_credit([tree], executor_unit="execution")
    assert advantages_of(tree) == hierarchical_advantages(m)


def test_a_three_agent_execution_weighs_three_calls_in_the_executor_group(make_tree):
    """Eq. 6-7: the executor group holds trajectories (agent calls). Execution A (reward 1, three calls of an
    ensemble) and execution B (reward 0, one call): mean = 3/4, unbiased std over the 4 calls = 0.5."""
    tree = make_tree([[1.0, 0.0]])
    a, b = tree.designs[0].executions
    a.turns = [a.turns[0]] * 3
    b.turns = [b.turns[0]]
    assign_credit([tree], eps=0.0)
    assert a.advantage == pytest.approx((1.0 - 0.75) / 0.5)
    assert b.advantage == pytest.approx((0.0 - 0.75) / 0.5)
    # counted once each, the two executions would get +-0.7071
    assign_credit([tree], eps=0.0, executor_unit="execution")
    assert a.advantage == pytest.approx(0.5 / (2**0.5 / 2))


def test_an_execution_without_agent_calls_is_no_member(make_tree):
    tree = make_tree([[1.0, 0.0, 0.5]])
    silent = tree.designs[0].executions[2]
    silent.turns = []
    result = assign_credit([tree], eps=0.0)
    assert silent.advantage is None
    assert result.metrics["credit/executions_without_calls"] == 1
    a, b, _ = tree.designs[0].executions  # the group is {1, 1, 0, 0} (two calls each): mean 0.5
    assert a.advantage == pytest.approx(-b.advantage) and a.advantage > 0
    assert tree.designs[0].reward == pytest.approx(0.5)  # Eq. 4 still averages all N executions


def test_unknown_executor_unit_is_refused(make_tree):
    with pytest.raises(CreditError, match="executor_unit"):
        assign_credit([make_tree([[1.0, 0.0]])], executor_unit="turn")
