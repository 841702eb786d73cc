"""A second normalisation of a step's advantages, after the estimator's (``algo.normalize``, issue 62).

The estimator normalises each advantage within its group (Eq. 5, 7: a question's M designs, a question's agent
calls). Across groups and roles the advantages then keep whatever scale their groups gave them, and the two roles'
gradients can differ by that scale. ``algo.normalize`` rescales the step's trained samples::

    none:   A_k                                   (the estimator's advantages; the default)
    batch:  A_k / (sigma_B + eps)                 sigma_B over every trained sample of the step (both roles)
    role:   A_k / (sigma_r(k) + eps)              sigma_r over the samples of k's own role r (Dr. MAS)

with sigma the unbiased standard deviation of one advantage per sample (as :mod:`metaagent.credit.groups`).
``role`` is the agent-wise normalisation of Dr. MAS (Feng et al. 2026, "Dr. MAS: Stable Reinforcement Learning for
Multi-Agent LLM Systems", arXiv 2602.08847, Eq. 5: each agent's advantages normalised by that agent's own reward
statistics, so that a role with a small spread is not drowned by the other's). The baseline stays the estimator's
group mean: only the scale is the role's, so a sample's sign and a zero advantage (a zero-variance group) are kept.
``batch`` is one global scale, the baseline Dr. MAS compares against. A role with fewer than two samples, or all
its advantages equal, is left as it is (``credit/normalize_skipped/<role>`` = 1): there is no spread to divide by.

Per-token advantages (estimators with a token stage) are refused: one value per sample is what sigma is taken over.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from metaagent.records import ROLES

from .groups import DEFAULT_EPS, CreditError

#: the settings of ``algo.normalize``
NORMALIZE_MODES = ("none", "batch", "role")


def unbiased_std(values: Sequence[float]) -> float:
    """``sqrt(sum (x - mean)^2 / (n - 1))``; 0.0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))


def normalize_advantages(samples: Sequence[Any], mode: str, *, eps: float = DEFAULT_EPS) -> dict[str, float]:
    """Rescale ``samples``' advantages in place by ``mode`` (module docstring); returns ``credit/normalize_*``
    metrics: per role the sigma divided by (``credit/normalize_std/<role>``) and the factor applied
    (``credit/normalize_scale/<role>``, 1.0 where skipped).

    Args:
        samples: the step's trained samples (``metaagent.learn.samples.Sample``: ``role``, ``advantage``,
            ``token_advantages`` None).
        mode: one of :data:`NORMALIZE_MODES`.
        eps: added to sigma (``algo.eps``, as in Eq. 5).
    """
    if mode not in NORMALIZE_MODES:
        raise CreditError(f"algo.normalize must be one of {NORMALIZE_MODES}, got {mode!r}")
    if mode == "none":
        return {}
    if any(s.token_advantages is not None for s in samples):
        raise CreditError(
            f"algo.normalize={mode} scales one advantage per sample, but this estimator gives per-token "
            "advantages (a token stage); use algo.normalize=none with it"
        )
    scope = {r: [s for s in samples if s.role == r] for r in ROLES}
    if mode == "batch":
        sigma = unbiased_std([s.advantage for s in samples])
        sigmas = {r: sigma for r in ROLES}
        spread = {r: _has_spread(samples) for r in ROLES}
    else:
        sigmas = {r: unbiased_std([s.advantage for s in group]) for r, group in scope.items()}
        spread = {r: _has_spread(group) for r, group in scope.items()}
    metrics: dict[str, float] = {}
    for role, group in scope.items():
        scale = 1.0 / (sigmas[role] + eps) if spread[role] else 1.0
        for s in group:
            s.advantage = s.advantage * scale
        metrics[f"credit/normalize_std/{role}"] = sigmas[role]
        metrics[f"credit/normalize_scale/{role}"] = scale
        metrics[f"credit/normalize_skipped/{role}"] = 0.0 if spread[role] else 1.0
    return metrics


def _has_spread(samples: Sequence[Any]) -> bool:
    """At least two samples and not all advantages equal."""
    return len({s.advantage for s in samples}) > 1
