"""pass@k, maj@k, avg@k and the bootstrap against hand-computed values."""

from __future__ import annotations

import math

import pytest

from metaagent.eval import EvalError, avg_at_k, bootstrap_ci, maj_at_k, paired_bootstrap_ci, pass_at_k
from metaagent.eval.metrics import _percentile


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (3, 0, 1, 0.0),  # none correct
        (3, 3, 1, 1.0),  # all correct
        (3, 3, 3, 1.0),
        (3, 1, 1, 1 / 3),  # k = 1: the fraction correct
        (5, 2, 1, 2 / 5),
        (3, 1, 3, 1.0),  # n = k: 1 if any correct
        (3, 0, 3, 0.0),  # n = k, none correct
        (4, 1, 2, 1 - math.comb(3, 2) / math.comb(4, 2)),  # 1 - 3/6 = 0.5
        (5, 2, 3, 1 - math.comb(3, 3) / math.comb(5, 3)),  # 1 - 1/10 = 0.9
        (10, 3, 5, 1 - math.comb(7, 5) / math.comb(10, 5)),  # 1 - 21/252
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_k_above_n_and_bad_counts():
    with pytest.raises(EvalError, match="n >= k"):
        pass_at_k(2, 1, 3)
    with pytest.raises(EvalError):
        pass_at_k(3, 4, 1)
    with pytest.raises(EvalError):
        pass_at_k(3, 1, 0)


def test_avg_at_k():
    assert avg_at_k([1.0, 0.0, 1.0]) == pytest.approx(2 / 3)
    assert avg_at_k([0.0]) == 0.0
    with pytest.raises(EvalError):
        avg_at_k([])


def test_maj_at_k_hand_values():
    # majority "5" (2 votes) is correct
    assert maj_at_k(["5", "7", "5"], [1, 0, 1]) == 1.0
    # majority "7" is wrong although one sample was right
    assert maj_at_k(["7", "5", "7"], [0, 1, 0]) == 0.0
    # k = 1: the first answer decides
    assert maj_at_k(["5", "7", "7"], [1, 0, 0], k=1) == 1.0
    # tie 1-1 within k = 2: the answer seen first wins
    assert maj_at_k(["7", "5", "5"], [0, 1, 1], k=2) == 0.0
    # all correct / none correct / no answers at all
    assert maj_at_k(["5", "5", "5"], [1, 1, 1]) == 1.0
    assert maj_at_k(["1", "2", "3"], [0, 0, 0]) == 0.0
    assert maj_at_k([None, None], [0, 0]) == 0.0
    # missing answers do not vote
    assert maj_at_k([None, None, "5"], [0, 0, 1]) == 1.0
    with pytest.raises(EvalError):
        maj_at_k(["5"], [1], k=2)


def test_bootstrap_ci_degenerate_cases_and_coverage():
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)  # all correct
    assert bootstrap_ci([0.0, 0.0]) == (0.0, 0.0)  # none correct
    assert bootstrap_ci([0.5]) == (0.5, 0.5)  # one task
    lo, hi = bootstrap_ci([0.0, 1.0] * 50, n_boot=2000, seed=1)
    # mean 0.5, standard error 0.05: the 95% interval is about 0.5 +- 0.098
    assert 0.38 < lo < 0.45 and 0.55 < hi < 0.62
    assert bootstrap_ci([0.0, 1.0] * 50, seed=3) == bootstrap_ci([0.0, 1.0] * 50, seed=3)  # seeded
    with pytest.raises(EvalError):
        bootstrap_ci([])


def test_percentile_interpolates():
    assert _percentile([0.0, 1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert _percentile([0.0, 10.0], 0.25) == 2.5


def test_paired_bootstrap_identical_and_shifted():
    a = [0.0, 1.0, 0.5, 1.0]
    assert paired_bootstrap_ci(a, a) == (0.0, 0.0, 0.0)
    diff, lo, hi = paired_bootstrap_ci(a, [x + 0.25 for x in a])  # the same shift on every task
    assert diff == pytest.approx(0.25) and lo == pytest.approx(0.25) and hi == pytest.approx(0.25)
    with pytest.raises(EvalError):
        paired_bootstrap_ci([1.0], [1.0, 0.0])


def test_t_quantile_matches_the_table():
    from metaagent.eval.metrics import t_quantile

    # two-sided 95% critical values of Student's t (any statistics table)
    for df, value in [(1, 12.7062), (2, 4.3027), (10, 2.2281), (38, 2.0244), (1000, 1.9623)]:
        assert t_quantile(0.975, df) == pytest.approx(value, abs=1e-4)
    with pytest.raises(EvalError, match="0.5 < q < 1"):
        t_quantile(0.4, 3)


def test_slope_ci_by_hand():
    from metaagent.eval.metrics import slope_ci

    # x = 0..3, y = 1, 3, 2, 5: Sxx = 5, Sxy = 5.5 -> slope 1.1; residuals -0.1, 0.8, -1.3, 0.6 (sum of squares
    # 2.7) -> se = sqrt(2.7 / 2 / 5); half width t_{0.975, 2} * se = 4.302653 * 0.519615
    slope, low, high = slope_ci([(0, 1), (1, 3), (2, 2), (3, 5)])
    assert slope == pytest.approx(1.1)
    assert (low, high) == pytest.approx((1.1 - 2.235724, 1.1 + 2.235724), abs=1e-5)
    # a perfect line: zero-width interval
    assert slope_ci([(0, 0.5), (2, 1.5), (4, 2.5)]) == pytest.approx((0.5, 0.5, 0.5))
    with pytest.raises(EvalError, match="at least 3 points"):
        slope_ci([(0, 1), (1, 2)])
    with pytest.raises(EvalError, match="two steps"):
        slope_ci([(3, 1), (3, 2), (3, 0)])


def test_table_gains_never_read_minus_zero():
    """A gain that is zero up to float error prints ``+0.00`` (the committed table once showed ``(-0.00)``)."""
    from metaagent.eval.report import metric_table, signed

    assert signed(-1e-12, 2) == "+0.00" and signed(-0.004, 2) == "+0.00" and signed(-0.006, 2) == "-0.01"
    assert signed(2.86) == "+2.9" and signed(-3.14159, 2) == "-3.14"

    def entry(mean: float) -> dict:
        return {"metrics": {"pass@1": {"mean": mean}}, "complete": True}

    x = 0.1 + 0.2  # 0.30000000000000004: the row's value is 1e-14 % above sa's
    results = {
        "benchmarks": ["b"],
        "methods": ["sa", "fixed:t"],
        "cells": {"m": {"benchmarks": {"b": {"sa": entry(x), "fixed:t": entry(0.3)}}}},
    }
    table = metric_table(results, "pass@1")
    assert "| m | fixed:t | 30.00 (+0.00) | 30.00 (+0.00) |" in table
    assert "-0.00" not in table
