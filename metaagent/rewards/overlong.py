"""DAPO's overlong reward shaping (Yu et al. 2025, §3.4): the soft overlong punishment of Eq. 13.

A response of ``L`` tokens generated under a limit ``L_max`` with a buffer of ``L_cache`` tokens gets::

    R_length(L) = 0                                      if L <= L_max - L_cache
                = ((L_max - L_cache) - L) / L_cache      if L_max - L_cache < L <= L_max
                = -1                                     if L > L_max

times ``penalty_factor`` (verl's ``reward.overlong_buffer.penalty_factor``, 1 in DAPO), added to the
response's reward before the group advantage. A generation stopped by the limit has ``L = L_max``, so it
gets ``-penalty_factor``.

Here the reward is per execution (every agent turn of it shares it, Eq. 7), so
:func:`apply_overlong_penalty` adds the sum of the execution's sampled turns' penalties to its reward
(``RewardRecord.total``, the amount kept in ``components["overlong"]``). An execution whose reward could
not be computed stays uncomputed. The designer's reward is Eq. 4's mean of its executions, so the penalty is
not applied to designs: truncated designer generations are handled by the overlong filter
(``algo.overlong.filter``, :func:`metaagent.learn.samples.mask_overlong`).

The other half of DAPO's overlong handling, *overlong filtering* (truncated samples masked out of the loss),
is :func:`metaagent.learn.samples.mask_overlong`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metaagent.records import RolloutTree

from .errors import RewardError


def overlong_penalty(length: int, max_len: int, buffer: int, penalty_factor: float = 1.0) -> float:
    """``penalty_factor * R_length(length)`` of DAPO Eq. 13 (module docstring); 0 when ``buffer`` is 0."""
    if max_len < 1 or buffer < 0 or buffer > max_len or length < 0:
        raise RewardError(
            f"overlong penalty needs 0 <= buffer <= max_len, max_len >= 1 and length >= 0; got length={length}, "
            f"max_len={max_len}, buffer={buffer}"
        )
    if buffer == 0:
        return 0.0
    expected = max_len - buffer
    if length <= expected:
        return 0.0
    if length > max_len:
        return -float(penalty_factor)
    return float(penalty_factor) * (expected - length) / buffer


def apply_overlong_penalty(
    trees: Sequence[RolloutTree], *, max_len: int, buffer: int, penalty_factor: float = 1.0
) -> dict[str, Any]:
    """Add each execution's overlong penalty (the sum over its sampled agent turns of :func:`overlong_penalty`
    of the turn's response length) to its reward, in place. Returns ``rollout/overlong_penalty_mean`` (over
    executions with a computable reward) and ``rollout/overlong_penalised`` (executions with a penalty < 0)."""
    total, n, penalised = 0.0, 0, 0
    for tree in trees:
        for d in tree.designs:
            for e in d.executions:
                if e.reward is None or e.reward.total is None:
                    continue
                p = sum(
                    overlong_penalty(len(t.response_ids), max_len, buffer, penalty_factor)
                    for t in e.turns
                    if not t.synthetic
                )
                e.reward.total = float(e.reward.total) + p
                e.reward.components["overlong"] = p
                total += p
                n += 1
                penalised += int(p < 0)
    return {
        "rollout/overlong_penalty_mean": total / n if n else 0.0,
        "rollout/overlong_penalised": float(penalised),
    }
