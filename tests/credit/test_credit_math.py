"""Advantages of M x N reward matrices against hand-computed values and against verl's GRPO."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metaagent.credit import (
    CreditError,
    flat_advantages,
    flat_credit,
    group_advantages,
    hierarchical_advantages,
    hierarchical_credit,
)

EPS = 1e-6


def approx(values, expected, tol=1e-9):
    assert len(values) == len(expected)
    for v, e in zip(values, expected):
        if e is None:
            assert v is None
        else:
            assert v == pytest.approx(e, abs=tol)


# ---- one group ---------------------------------------------------------------------------------------------


def test_group_uses_unbiased_std_and_eps():
    res = group_advantages([1.0, 0.0, 0.0, 0.0])
    # mean 0.25, unbiased std = sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5
    assert res.mean == 0.25 and res.std == pytest.approx(0.5)
    approx(
        res.advantages, [0.75 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS)]
    )
    assert not res.degenerate


def test_degenerate_groups_are_explicit_zeros():
    zero_var = group_advantages([0.3, 0.3, 0.3])
    assert zero_var.advantages == (0.0, 0.0, 0.0) and zero_var.zero_var and not zero_var.singleton
    single = group_advantages([1.0])
    assert single.advantages == (0.0,) and single.singleton and not single.zero_var


def test_group_without_std_normalisation():
    approx(group_advantages([1.0, 0.0], norm_by_std=False).advantages, [0.5, -0.5])


@pytest.mark.parametrize("bad", [[], [float("nan")], [1.0, float("inf")], [True, 0.0], ["1"]])
def test_group_refuses_bad_rewards(bad):
    with pytest.raises(CreditError):
        group_advantages(bad)


# ---- hierarchical: hand-computed matrices -------------------------------------------------------------------


def test_hierarchical_3x2():
    d, e = hierarchical_advantages([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    # design rewards (0.5, 0, 1): mean 0.5, unbiased std 0.5
    approx(d, [0.0, -0.5 / (0.5 + EPS), 0.5 / (0.5 + EPS)])
    # executions (1, 0, 0, 0, 1, 1): mean 0.5, unbiased std sqrt(1.5 / 5)
    s = math.sqrt(0.3) + EPS
    approx(e[0], [0.5 / s, -0.5 / s])
    approx(e[1], [-0.5 / s, -0.5 / s])
    approx(e[2], [0.5 / s, 0.5 / s])


def test_all_equal_rows_give_zero_and_are_counted():
    res = hierarchical_credit([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    assert res.designer == [0.0, 0.0, 0.0]
    assert res.executor == [[0.0, 0.0]] * 3
    assert res.counts["designer_zero_var_groups"] == 1 and res.counts["executor_zero_var_groups"] == 1


def test_equal_within_rows_but_not_across():
    rewards = [[1.0, 1.0], [0.0, 0.0]]
    res = hierarchical_credit(rewards)
    approx(res.designer, [0.5 / (math.sqrt(0.5) + EPS), -0.5 / (math.sqrt(0.5) + EPS)])
    s = math.sqrt(1 / 3) + EPS  # executions (1, 1, 0, 0)
    approx(res.executor[0] + res.executor[1], [0.5 / s, 0.5 / s, -0.5 / s, -0.5 / s])
    # grouped per design: both groups have zero variance -> zero executor advantage, counted
    per_design = hierarchical_credit(rewards, executor_group="design")
    assert per_design.executor == [[0.0, 0.0], [0.0, 0.0]]
    assert per_design.counts["executor_zero_var_groups"] == 2 and per_design.counts["executor_groups"] == 2
    assert per_design.designer == res.designer


def test_invalid_design_counts_as_reward_zero_for_the_designer_only():
    res = hierarchical_credit([[1.0, 0.0], [], [1.0, 1.0]])
    assert res.design_rewards == [0.5, 0.0, 1.0]
    approx(res.designer, [0.0, -0.5 / (0.5 + EPS), 0.5 / (0.5 + EPS)])
    # executor group: only real executions (1, 0, 1, 1): mean 0.75, std 0.5
    a = 1 / (0.5 + EPS)
    approx(res.executor[0] + res.executor[2], [0.25 * a, -0.75 * a, 0.25 * a, 0.25 * a])
    assert res.executor[1] == []
    assert res.counts["invalid_designs"] == 1 and res.counts["executions"] == 4


def test_n_equals_1():
    rewards = [[1.0], [0.0], [0.0], [1.0]]
    d, e = hierarchical_advantages(rewards)
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    approx(d, [a, -a, -a, a])
    approx([row[0] for row in e], [a, -a, -a, a])  # one execution per design: both roles see the same signal
    per_design = hierarchical_credit(rewards, executor_group="design")
    assert per_design.executor == [[0.0]] * 4  # singleton groups: explicit zero, not verl's raw score
    assert per_design.counts["executor_singleton_groups"] == 4


def test_uncomputable_rewards_are_excluded_not_zero():
    res = hierarchical_credit([[1.0, None], [0.0, 0.0], [None, None], None])
    assert res.design_rewards == [1.0, 0.0, None, None]
    approx(res.designer, [0.5 / (math.sqrt(0.5) + EPS), -0.5 / (math.sqrt(0.5) + EPS), None, None])
    s = math.sqrt(1 / 3) + EPS  # executions (1, 0, 0): mean 1/3
    approx(res.executor[0], [(2 / 3) / s, None])
    approx(res.executor[1], [(-1 / 3) / s, (-1 / 3) / s])
    assert res.executor[2] == [None, None] and res.executor[3] is None
    assert res.counts["reward_errors"] == 3 and res.counts["designs_without_reward"] == 2
    # treating the errors as 0 would give a different answer
    assert res.designer[0] != hierarchical_advantages([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])[0][0]


def test_without_std_normalisation():
    d, e = hierarchical_advantages([[1.0, 0.0], [0.0, 0.0]], norm_by_std=False)
    approx(d, [0.25, -0.25])
    approx(e[0] + e[1], [0.75, -0.25, -0.25, -0.25])


def test_filter_zero_var_drops_degenerate_groups():
    res = hierarchical_credit([[1.0, 1.0], [1.0, 1.0]], filter_zero_var=True)
    assert res.designer == [None, None] and res.executor == [[None, None], [None, None]]
    assert res.counts["filtered_designs"] == 2 and res.counts["filtered_executions"] == 4
    kept = hierarchical_credit([[1.0, 0.0], [0.0, 0.0]], executor_group="design", filter_zero_var=True)
    assert kept.executor[1] == [None, None] and None not in kept.executor[0] and None not in kept.designer


@pytest.mark.parametrize(
    "rewards, options, match",
    [
        ("abc", {}, "list of M rows"),
        ([[1.0], "x"], {}, r"rewards\[1\]"),
        ([[1.0, float("nan")]], {}, r"rewards\[0\]\[1\].*finite"),
        ([[1.0]], {"executor_group": "turn"}, "executor_group"),
        ([[1.0]], {"eps": -1.0}, "eps"),
    ],
)
def test_bad_input_is_named(rewards, options, match):
    with pytest.raises(CreditError, match=match):
        hierarchical_credit(rewards, **options)


# ---- flat -----------------------------------------------------------------------------------------------------


def test_flat_8x1_equals_hierarchical_when_all_valid():
    rewards = [[1.0], [0.0], [0.2], [1.2], [0.0], [0.0], [1.0], [0.4]]
    assert flat_advantages(rewards) == hierarchical_advantages(rewards)


def test_flat_counts_an_invalid_design_as_one_zero_rollout():
    res = flat_credit([[1.0], [0.0], []])
    a = (1 - 1 / 3) / (math.sqrt(1 / 3) + EPS)
    b = (0 - 1 / 3) / (math.sqrt(1 / 3) + EPS)
    approx(res.designer, [a, b, b])
    approx(res.executor[0] + res.executor[1], [a, b])
    assert res.executor[2] == []


def test_flat_refuses_per_call_statistics_instead_of_ignoring_them():
    """The flat ablation groups whole rollouts (one trajectory each): there is no per-call unit to weight, so
    ``calls=`` is refused with the fix, not silently dropped (it used to return the plain rollout advantages)."""
    rewards = [[1.0, 0.0], [0.0, 0.0]]
    with pytest.raises(CreditError, match=r"flat_advantages has no per-call.*hierarchical_advantages\(calls="):
        flat_advantages(rewards, calls=[[1, 3], [2, 2]])
    assert flat_advantages(rewards, calls=None) == flat_advantages(rewards)


def test_flat_designer_is_mean_of_its_rollouts():
    res = flat_credit([[1.0, 0.0], [0.0, 0.0]])
    flat_e = res.executor[0] + res.executor[1]
    approx(res.designer, [(flat_e[0] + flat_e[1]) / 2, (flat_e[2] + flat_e[3]) / 2])


# ---- equality with verl where the definitions coincide ------------------------------------------------------


def verl_grpo(scores, index, norm_by_std=True):
    torch = pytest.importorskip("torch")
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    n = len(scores)
    token_rewards = torch.zeros(n, 3)
    token_rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    adv, _ = compute_grpo_outcome_advantage(
        token_rewards,
        torch.ones(n, 3),
        np.array(index, dtype=object),
        epsilon=EPS,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    return adv[:, 0].tolist()


def random_matrices(seed, m, n, count=5):
    rng = np.random.default_rng(seed)
    # rewards as the reward module gives them: correctness in {0, 1} plus a format bonus in {0, 0.2}
    return [
        (rng.integers(0, 2, size=(m, n)) + 0.2 * rng.integers(0, 2, size=(m, n))).tolist()
        for _ in range(count)
    ]


def _non_degenerate(values):
    return len(set(np.ravel(values).tolist())) > 1


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_executor_question_group_equals_verl_grpo_one_index_per_question(norm_by_std):
    matrices = [m for m in random_matrices(0, 4, 4, 8) if _non_degenerate(m)]
    scores = [r for m in matrices for row in m for r in row]
    index = [f"q{q}" for q, m in enumerate(matrices) for row in m for _ in row]
    ours = [
        a for m in matrices for row in hierarchical_advantages(m, norm_by_std=norm_by_std)[1] for a in row
    ]
    np.testing.assert_allclose(ours, verl_grpo(scores, index, norm_by_std), atol=1e-5)


def test_executor_design_group_equals_verl_grpo_one_index_per_design():
    matrices = [m for m in random_matrices(1, 4, 4, 8) if all(_non_degenerate(row) for row in m)]
    assert matrices
    scores = [r for m in matrices for row in m for r in row]
    index = [f"q{q}d{i}" for q, m in enumerate(matrices) for i, row in enumerate(m) for _ in row]
    ours = [
        a for m in matrices for row in hierarchical_advantages(m, executor_group="design")[1] for a in row
    ]
    np.testing.assert_allclose(ours, verl_grpo(scores, index), atol=1e-5)


def test_designer_equals_verl_grpo_over_design_means():
    matrices = [m for m in random_matrices(2, 4, 4, 8) if _non_degenerate([sum(r) for r in m])]
    means = [sum(row) / len(row) for m in matrices for row in m]
    index = [f"q{q}" for q, m in enumerate(matrices) for _ in m]
    ours = [a for m in matrices for a in hierarchical_advantages(m)[0]]
    np.testing.assert_allclose(ours, verl_grpo(means, index), atol=1e-5)


def test_flat_8x1_equals_verl_grpo():
    matrices = [m for m in random_matrices(3, 8, 1, 6) if _non_degenerate(m)]
    scores = [row[0] for m in matrices for row in m]
    index = [f"q{q}" for q, m in enumerate(matrices) for _ in m]
    ours = [a for m in matrices for a in flat_advantages(m)[0]]
    np.testing.assert_allclose(ours, verl_grpo(scores, index), atol=1e-5)


def test_singleton_groups_differ_from_verl_on_purpose():
    # verl gives a lone sample (score - 0) / (1 + eps): its raw reward. We give 0 and count it.
    assert verl_grpo([1.0], ["q"])[0] == pytest.approx(1.0, abs=1e-5)
    assert hierarchical_advantages([[1.0]], executor_group="design")[1] == [[0.0]]


def test_docstring_example_is_right():
    import doctest

    from metaagent.credit import matrix

    assert doctest.testmod(matrix).failed == 0


def test_weighted_group_equals_repeating_each_reward():
    from metaagent.credit import group_advantages

    weighted = group_advantages([1.0, 0.0, 0.5], weights=[3, 1, 2])
    expanded = group_advantages([1.0] * 3 + [0.0] + [0.5] * 2)
    assert weighted.mean == pytest.approx(expanded.mean) and weighted.std == pytest.approx(expanded.std)
    assert list(weighted.advantages) == pytest.approx([expanded.advantages[0], expanded.advantages[3], expanded.advantages[4]])
    assert group_advantages([0.3], weights=[1]).singleton
    assert not group_advantages([0.3, 0.3], weights=[1, 1]).singleton


def test_hierarchical_calls_keep_the_signature_and_shape():
    from metaagent.credit import hierarchical_advantages

    rewards = [[1.0, 0.0], [0.0, None], []]
    d0, e0 = hierarchical_advantages(rewards)
    d1, e1 = hierarchical_advantages(rewards, calls=[[1, 1], [1, 1], []])
    assert d0 == d1 and e0 == e1  # one call per execution: identical to per-execution statistics
    _, e2 = hierarchical_advantages(rewards, calls=[[3, 1], [0, 2], []])
    assert e2[1][0] is None and e2[1][1] is None  # no calls / no reward: no member
    with pytest.raises(Exception, match="calls"):
        hierarchical_advantages(rewards, calls=[[1], [1, 1], []])
