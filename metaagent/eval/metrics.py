"""Evaluation metrics over per-task samples: avg@k, unbiased pass@k, maj@k and bootstrap intervals.

Every function is pure: the inputs are per-task numbers, the outputs floats. Shapes are given per task
(``n`` samples of one task) or per benchmark (``T`` tasks); the benchmark score is the mean over tasks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from statistics import fmean

from metaagent.rewards.selection import majority_index

from .errors import EvalError

#: metric name -> what its number is (the one list of metrics the harness reports)
METRICS = {
    "avg": "avg@k: mean correctness of the k samples of a task (paper: AIME averaged over 3 runs)",
    "pass": "pass@k: probability that at least one of k samples is correct (unbiased estimator, n >= k)",
    "maj": "maj@k: correctness of the most frequent answer among k samples (domains that vote, e.g. math)",
}
DEFAULT_BOOTSTRAP = 1000
DEFAULT_ALPHA = 0.05


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task (Chen et al. 2021, Eq. 1): ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: samples drawn for the task (n >= k).
        c: correct samples among them (0 <= c <= n).
        k: the budget.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (numerically stable, no large binomials).
    """
    if k < 1:
        raise EvalError(f"pass@k needs k >= 1, got k={k}")
    if n < k:
        raise EvalError(f"pass@k needs n >= k samples per task, got n={n} < k={k}; draw more samples or lower k")
    if not 0 <= c <= n:
        raise EvalError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def avg_at_k(correct: Sequence[float]) -> float:
    """avg@k of one task: the mean of its samples' correctness (each in [0, 1]); shape (n,) -> scalar."""
    if not correct:
        raise EvalError("avg@k of a task with no scored sample is undefined")
    return fmean(correct)


def maj_at_k(answers: Sequence[str | None], correct: Sequence[float], k: int | None = None) -> float:
    """maj@k of one task: the correctness of the most frequent answer among the first ``k`` samples.

    Args:
        answers: the normalised answer of each sample (None: no answer; never a vote), shape (n,).
        correct: each sample's correctness in {0, 1}, shape (n,).
        k: votes counted (default: all n).

    Ties go to the answer seen first. No answer at all -> 0. Samples with the same answer share its
    correctness (the first one's is used).
    """
    if len(answers) != len(correct):
        raise EvalError(f"maj@k: {len(answers)} answers but {len(correct)} correctness values")
    k = len(answers) if k is None else k
    if k < 1 or k > len(answers):
        raise EvalError(f"maj@k needs 1 <= k <= n, got k={k}, n={len(answers)}")
    best = majority_index(answers[:k])
    return 0.0 if best is None else float(correct[best])


def bootstrap_ci(
    values: Sequence[float],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    stat: Callable[[Sequence[float]], float] = fmean,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over tasks: resample the T per-task values with
    replacement ``n_boot`` times; shape (T,) -> (low, high). A single task (or identical values) gives a
    zero-width interval; no tasks is an error."""
    if not values:
        raise EvalError("a confidence interval over zero tasks is undefined")
    if not 0 < alpha < 1:
        raise EvalError(f"alpha must be in (0, 1), got {alpha}")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(n_boot))
    return _percentile(stats, alpha / 2), _percentile(stats, 1 - alpha / 2)


def paired_bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean difference ``b - a`` over the same T tasks and its paired bootstrap interval (tasks resampled
    together, so per-task difficulty cancels); shapes (T,), (T,) -> (diff, low, high)."""
    if len(a) != len(b):
        raise EvalError(f"a paired comparison needs the same tasks on both sides, got {len(a)} and {len(b)}")
    diffs = [y - x for x, y in zip(a, b)]
    low, high = bootstrap_ci(diffs, n_boot=n_boot, alpha=alpha, seed=seed)
    return fmean(diffs), low, high


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of sorted values."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def slope_ci(points: Sequence[tuple[float, float]], *, alpha: float = DEFAULT_ALPHA) -> tuple[float, float, float]:
    """Least-squares slope of a learning curve and its t interval; shape (S,) of (step, value) -> (slope, low,
    high). ``slope = Σ(x-x̄)(y-ȳ) / Σ(x-x̄)²``, ``se = sqrt(Σ residual² / (S-2) / Σ(x-x̄)²)``, interval
    ``slope ± t_{1-α/2, S-2} · se``. Fewer than 3 points, or one step only, is an error."""
    if len(points) < 3:
        raise EvalError(f"a slope interval needs at least 3 points, got {len(points)}")
    if not 0 < alpha < 1:
        raise EvalError(f"alpha must be in (0, 1), got {alpha}")
    xs, ys = [float(p[0]) for p in points], [float(p[1]) for p in points]
    xm, ym = fmean(xs), fmean(ys)
    sxx = sum((x - xm) ** 2 for x in xs)
    if sxx == 0:
        raise EvalError("a slope needs points at two steps at least")
    slope = sum((x - xm) * (y - ym) for x, y in zip(xs, ys)) / sxx
    residual = sum((y - ym - slope * (x - xm)) ** 2 for x, y in zip(xs, ys))
    half = t_quantile(1 - alpha / 2, len(points) - 2) * math.sqrt(residual / (len(points) - 2) / sxx)
    return slope, slope - half, slope + half


def t_quantile(q: float, df: int) -> float:
    """Quantile ``q`` in (0.5, 1) of Student's t with ``df`` degrees of freedom: bisection on the CDF, which is
    Simpson's rule over the density from 0 (accurate to ~1e-7 for df >= 1 and q <= 0.9995)."""
    if not 0.5 < q < 1 or df < 1:
        raise EvalError(f"t_quantile needs 0.5 < q < 1 and df >= 1, got q={q}, df={df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def mass(t: float, steps: int = 2000) -> float:  # ∫_0^t density, even number of Simpson steps
        h = t / steps
        f = [math.exp(log_c - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(steps + 1)]
        return h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    lo, hi = 0.0, 1.0
    while mass(hi) < q - 0.5:
        hi *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mass(mid) < q - 0.5 else (lo, mid)
    return (lo + hi) / 2


def seed_interval(values: Sequence[float], *, alpha: float = DEFAULT_ALPHA) -> tuple[float, float, float]:
    """Mean over S training seeds and its t interval: ``x̄ ± t_{1-α/2, S-1} · s / sqrt(S)`` with ``s`` the
    sample standard deviation (``S - 1`` in the denominator); shape (S,) -> (mean, low, high). The seeds are
    the sampling unit (each seed's value is one run's gain), so the interval is about a new training seed, not
    about the tasks (that is each seed's paired task bootstrap). Fewer than 2 seeds is an error."""
    if len(values) < 2:
        raise EvalError(
            f"an across-seed interval needs at least 2 seeds, got {len(values)}; train more seeds"
        )
    if not 0 < alpha < 1:
        raise EvalError(f"alpha must be in (0, 1), got {alpha}")
    xs = [float(v) for v in values]
    mean = fmean(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    half = t_quantile(1 - alpha / 2, len(xs) - 1) * sd / math.sqrt(len(xs))
    return mean, mean - half, mean + half
