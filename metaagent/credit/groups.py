"""GRPO statistics of one group of scalar rewards: the pure math every estimator is built from.

For a group ``G`` of rewards ``r_1 .. r_n`` (paper Eq. 5 and Eq. 7)::

    A_k = (r_k - mean(G)) / (std(G) + eps)        # norm_by_std=True  (GRPO)
    A_k =  r_k - mean(G)                          # norm_by_std=False (Dr. GRPO)

with the unbiased standard deviation (``ddof=1``) and ``eps = 1e-6``, exactly as verl's
``compute_grpo_outcome_advantage``. Two degenerate cases are explicit instead of silent:

- a **zero-variance** group (n >= 2, all rewards equal) gives advantage exactly 0 to every member;
- a **singleton** group (n == 1) gives advantage 0. verl instead uses mean 0 and std 1, so a lone
  sample gets its raw reward as advantage; here it carries no comparison and therefore no signal.

Both are reported in :class:`GroupResult` so callers count them (``credit/zero_var_groups``,
``credit/singleton_groups``) and may filter them from the batch.

``weights`` (positive integers) make member k count ``w_k`` times, exactly as if its reward were repeated
``w_k`` times in the group (frequency weights): ``mean = sum w r / sum w`` and
``std = sqrt(sum w (r - mean)^2 / (sum w - 1))``. The executor group of Eq. 6-7 uses this: its members are
agent calls (trajectories), and an execution with c calls contributes its reward c times. The same formula
takes fractional frequencies (positive reals; ``sum w`` is then the effective group size of Bessel's
correction and must exceed 1 for a std): the design-balanced executor group of an adaptive budget
(:func:`metaagent.credit.matrix.hierarchical_credit`, ``executor_balance="design"``) uses them. A group whose
weights sum to at most 1 is a singleton.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from metaagent.errors import MetaAgentError

DEFAULT_EPS = 1e-6


class CreditError(MetaAgentError, ValueError):
    """Credit assignment cannot run on this input; the message names the problem and how to fix it."""


@dataclass(frozen=True)
class GroupResult:
    """Advantages of one group, in the order of the rewards given."""

    advantages: tuple[float, ...]
    mean: float
    std: float  # unbiased; 0.0 for singleton groups
    zero_var: bool  # n >= 2 and every reward equal
    singleton: bool  # n == 1

    @property
    def degenerate(self) -> bool:
        """The group carries no learning signal (zero variance or a single member)."""
        return self.zero_var or self.singleton


def check_reward(value: object, where: str) -> float:
    """A reward must be a finite real number; anything else is a caller bug, not a 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise CreditError(f"{where}: reward must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise CreditError(
            f"{where}: reward must be finite, got {value}; mark it as not computable (None) instead"
        )
    return value


def group_advantages(
    rewards: Sequence[float],
    *,
    eps: float = DEFAULT_EPS,
    norm_by_std: bool = True,
    weights: Sequence[int] | None = None,
) -> GroupResult:
    """GRPO advantages of one group (see module docstring).

    Args:
        rewards: n >= 1 finite rewards, shape (n,).
        eps: added to the std in the denominator.
        norm_by_std: divide by ``std + eps`` (GRPO) or only subtract the mean (Dr. GRPO).
        weights: optional multiplicity of each member, shape (n,): integers >= 1 (default all 1), or
            positive reals (fractional frequencies).

    Returns:
        :class:`GroupResult` with ``advantages`` of shape (n,) (one per member, not per copy).
    """
    if eps < 0:
        raise CreditError(f"eps must be >= 0, got {eps}")
    if len(rewards) == 0:
        raise CreditError("a GRPO group needs at least one reward; leave empty groups out")
    r = np.asarray(
        [check_reward(x, f"rewards[{i}]") for i, x in enumerate(rewards)], dtype=np.float64
    )  # (n,)
    n = r.shape[0]
    if weights is None:
        w = np.ones(n, dtype=np.float64)
    else:
        if len(weights) != n or any(
            isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)) or not 0 < x < math.inf
            for x in weights
        ):
            raise CreditError(f"weights must be {n} positive numbers (one per reward), got {list(weights)!r}")
        w = np.asarray(weights, dtype=np.float64)  # (n,)
    total = float(w.sum())
    if total <= 1:
        return GroupResult((0.0,), float(r[0]), 0.0, zero_var=False, singleton=True)
    mean = float((w * r).sum() / total)
    if float(r.max()) == float(r.min()):
        return GroupResult((0.0,) * n, mean, 0.0, zero_var=True, singleton=False)
    std = float(np.sqrt((w * (r - mean) ** 2).sum() / (total - 1)))
    adv = (r - mean) / (std + eps) if norm_by_std else r - mean  # (n,)
    return GroupResult(tuple(float(a) for a in adv), mean, std, zero_var=False, singleton=False)
