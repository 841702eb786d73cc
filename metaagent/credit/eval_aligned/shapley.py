"""Shapley credit over agents (evaluation-aligned credit, seed 002 §3.3-3.4, Eq. 1-7): pure math.

A coalition is a ``frozenset`` of agent (role) names; ``values`` maps coalitions to the evaluator's score
of the run in which only those agents spoke (Eq. 1, ``v(S) = score(E_S(x, y_S))``). Nothing here runs a
model: the post-rollout stage (:mod:`metaagent.rollout.eval_aligned`) re-executes the coalitions that
:func:`shapley_plan` asks for, and the estimator reads them back from the records.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..groups import CreditError

#: a coalition value of this magnitude or less counts as a zero sum (the degenerate case of Eq. 3)
ZERO_SUM = 1e-12

Coalition = frozenset


@dataclass(frozen=True)
class ShapleyPlan:
    """Which coalitions an episode needs: ``exact`` (all ``2^n - 1`` proper subsets, ∅ included) or
    ``sampled`` (the prefixes of ``permutations``, Castro et al. 2009). The grand coalition is never listed:
    ``v(A)`` is the recorded run."""

    players: tuple[str, ...]
    method: str  # "exact" | "sampled"
    permutations: tuple[tuple[str, ...], ...]
    coalitions: tuple[frozenset[str], ...]


def sample_permutations(players: Sequence[str], m: int, seed: int) -> list[tuple[str, ...]]:
    """``m`` orderings of ``players`` drawn with ``random.Random(seed)`` (deterministic: the stage and the
    estimator draw the same ones)."""
    rng = random.Random(seed)
    base = sorted(players)
    return [tuple(rng.sample(base, len(base))) for _ in range(m)]


def shapley_plan(players: Sequence[str], *, exact_max_agents: int, permutations: int, seed: int) -> ShapleyPlan:
    """The coalitions to re-execute for one successful episode (grand coalition excluded)."""
    ps = tuple(sorted(set(players)))
    if not ps:
        raise CreditError("a Shapley plan needs at least one agent")
    full = frozenset(ps)
    if len(ps) <= exact_max_agents:
        subsets = [frozenset(c) for r in range(len(ps)) for c in itertools.combinations(ps, r)]
        return ShapleyPlan(ps, "exact", (), tuple(subsets))
    if permutations < 1:
        raise CreditError(f"permutations must be >= 1 for {len(ps)} agents (> exact_max_agents), got {permutations}")
    perms = sample_permutations(ps, permutations, seed)
    seen: dict[frozenset[str], None] = {}
    for perm in perms:
        for k in range(len(perm)):
            seen.setdefault(frozenset(perm[:k]), None)
    return ShapleyPlan(ps, "sampled", tuple(perms), tuple(c for c in seen if c != full))


def exact_shapley(players: Sequence[str], values: Mapping[frozenset[str], float]) -> dict[str, float]:
    """Eq. 2: ``phi_i = sum_{S ⊆ A\\{i}} |S|!(n-|S|-1)!/n! (v(S ∪ {i}) - v(S))``; ``values`` must hold every
    subset of ``players`` (the grand coalition included)."""
    ps = sorted(set(players))
    n = len(ps)
    phi = {}
    for i in ps:
        others = [p for p in ps if p != i]
        total = 0.0
        for r in range(n):
            w = math.factorial(r) * math.factorial(n - r - 1) / math.factorial(n)
            for c in itertools.combinations(others, r):
                s = frozenset(c)
                total += w * (_value(values, s | {i}) - _value(values, s))
        phi[i] = total
    return phi


def permutation_shapley(
    permutations: Sequence[Sequence[str]], values: Mapping[frozenset[str], float]
) -> dict[str, float]:
    """``phi_hat_i = 1/m sum_pi [v(Pre_i^pi ∪ {i}) - v(Pre_i^pi)]`` over the sampled orderings; efficiency
    holds per ordering, so ``sum_i phi_hat_i = v(A) - v(∅)`` exactly."""
    if not permutations:
        raise CreditError("permutation Shapley needs at least one ordering")
    phi: dict[str, float] = {p: 0.0 for p in permutations[0]}
    for perm in permutations:
        pre: frozenset[str] = frozenset()
        for p in perm:
            phi[p] += _value(values, pre | {p}) - _value(values, pre)
            pre = pre | {p}
    return {p: v / len(permutations) for p, v in phi.items()}


def shapley_values(plan: ShapleyPlan, values: Mapping[frozenset[str], float]) -> dict[str, float]:
    """Exact or sampled Shapley values, as the plan says."""
    if plan.method == "exact":
        return exact_shapley(plan.players, values)
    return permutation_shapley(plan.permutations, values)


def contribution_rewards(
    phi: Mapping[str, float], r_sys: float, *, clip_negative: bool = False
) -> tuple[dict[str, float], dict[str, float], bool]:
    """Eq. 3-4: ``alpha_i = phi_i / sum_j phi_j`` and ``r_i = alpha_i * R_sys``; returns ``(alpha, r, degenerate)``.

    Signed values are kept (a harmful agent gets ``r_i < 0``; ``sum_i r_i = R_sys`` always). When the sum is
    zero (``|sum| <= ZERO_SUM``: the recorded run is worth no more than the empty coalition), ``alpha_i = 1/n``
    and ``degenerate`` is True (counted by the caller). ``clip_negative`` sets negative ``phi`` to 0 first
    (then ``r_i >= 0``; if all are clipped the case is degenerate)."""
    if not phi:
        raise CreditError("contribution rewards need at least one agent")
    vals = {k: (max(0.0, v) if clip_negative else float(v)) for k, v in phi.items()}
    total = sum(vals.values())
    degenerate = abs(total) <= ZERO_SUM
    alpha = {k: 1.0 / len(vals) for k in vals} if degenerate else {k: v / total for k, v in vals.items()}
    return alpha, {k: a * r_sys for k, a in alpha.items()}, degenerate


def helpfulness_weights(labels: Sequence[float]) -> list[float]:
    """Eq. 6: ``omega_t = q_t / sum_u q_u`` over one agent's turns, ``1/k`` each when no turn is labelled
    helpful (``sum_u q_u = 0``). Labels are in [0, 1] (binary or soft)."""
    if not labels:
        raise CreditError("an agent with no turns has no helpfulness split")
    bad = [q for q in labels if not 0.0 <= q <= 1.0]
    if bad:
        raise CreditError(f"helpfulness labels must be in [0, 1], got {bad}")
    total = float(sum(labels))
    if total <= 0.0:
        return [1.0 / len(labels)] * len(labels)
    return [q / total for q in labels]


def _value(values: Mapping[frozenset[str], float], s: frozenset[str]) -> float:
    try:
        return float(values[s])
    except KeyError:
        raise CreditError(f"no coalition value for {sorted(s)}; the plan needs it") from None
