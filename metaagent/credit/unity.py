"""UnityMAS-O's per-model advantages (seed 001, Eq. 13-21; the authors' ``star_ppo/ray_trainer.py``).

Each role invocation (an :class:`~metaagent.records.AgentTurn`) is one sample; its scalar reward ``r``
(``AgentTurn.reward``, written by a reward allocator of :mod:`metaagent.rewards.allocators`) sits on its
**last response token** (:func:`last_token_rewards`). Advantages are then computed per trainable model
``M_l`` (Eq. 16-19: each model's buffer holds only the invocations routed to it):

- ``gae`` (what the paper ran): Eq. 20-21 with a critic, ``gamma = lam = 1``: per token
  ``A_t = r - V_t`` (:func:`gae_advantages`), then whitened over the model's batch (:func:`masked_whiten`).
  Needs a value model: **not built on the local backend** (no value head yet) and not yet wired into the
  verl backend's worker groups; the estimator refuses ``mode="gae"`` with that reason.
- ``whiten`` (critic-free, a labelled deviation for CPU runs): ``V = 0``, so ``A_t = r`` on every token of
  the invocation, whitened over the model's batch. Token-weighted by default, exactly what verl's
  ``masked_whiten`` over the response tokens gives; ``weighting="turn"`` counts each invocation once.
- ``grpo``: GRPO over the invocations of one (task, design, role, role_turn) across the N executions
  (:func:`metaagent.credit.groups.group_advantages`; only meaningful where the prompts coincide, e.g. round 0).

Executions an allocator dropped (any turn reward with ``total=None``) are removed with all their turns and
counted (``credit/unity_dropped_executions``); turns without a reward assignment are not trained
(``credit/unity_unassigned_turns``). Designer samples (designs with a designer generation) keep the
hierarchical estimator's Eq. 4-5 advantage.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from metaagent.records import EXECUTOR, AgentTurn, RolloutTree

from .groups import DEFAULT_EPS, CreditError, group_advantages
from .registry import register_estimator

MODES = ("whiten", "grpo", "gae")
WEIGHTINGS = ("token", "turn")
WHITEN_EPS = 1e-8  # verl masked_whiten: (x - mean) * rsqrt(var_unbiased + 1e-8)


def last_token_rewards(reward: float, length: int) -> list[float]:
    """Token rewards of one invocation of ``length`` response tokens: ``reward`` on the last token, 0 elsewhere."""
    if length < 1:
        raise CreditError(f"an invocation needs at least one response token to carry its reward, got {length}")
    return [0.0] * (length - 1) + [float(reward)]


def gae_advantages(
    token_rewards: Sequence[float], values: Sequence[float], *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[list[float], list[float]]:
    """Eq. 20-21 over one sequence of T response tokens (shapes ``[T]``), as verl's
    ``compute_gae_advantage_return`` for one row: ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V_T = 0``: an
    invocation is its own episode), ``A_t = sum_l (gamma * lam)^l delta_{t+l}``; returns ``(A, A + V)``
    before whitening. With ``gamma = lam = 1`` and the reward on the last token: ``A_t = r - V_t``."""
    if len(token_rewards) != len(values):
        raise CreditError(f"gae: {len(token_rewards)} rewards but {len(values)} values; one value per token")
    adv = [0.0] * len(values)
    last = 0.0
    for t in reversed(range(len(values))):
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        delta = token_rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, [a + v for a, v in zip(adv, values)]


def masked_whiten(values: Sequence[float], weights: Sequence[float] | None = None, *, eps: float = WHITEN_EPS) -> list[float]:
    """verl's ``masked_whiten`` over a batch: ``(x - mean) / sqrt(var_unbiased + eps)``. ``weights`` are
    frequency weights (a turn of ``n`` tokens with one advantage counts ``n`` times, which is verl's
    whitening over the response tokens); shapes ``[B]``. Fewer than two (weighted) entries: all 0."""
    x = np.asarray(values, dtype=np.float64)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    if x.shape != w.shape or (w <= 0).any():
        raise CreditError("masked_whiten: one positive weight per value")
    n = float(w.sum())
    if n < 2:
        return [0.0] * len(x)
    mean = float((w * x).sum() / n)
    var = float((w * (x - mean) ** 2).sum() / (n - 1))
    return [float(v) for v in (x - mean) / math.sqrt(var + eps)]


def _model_key(turn: AgentTurn, role_models: Mapping[str, str] | None) -> str:
    """The model that trains ``turn``: its ``policy.role_models`` pattern when one matches, else the model
    that sampled it (``AgentTurn.model``; the trainer routes by the same patterns)."""
    if role_models:
        from metaagent.policy.registry import resolve_role

        pattern = resolve_role(f"{EXECUTOR}:{turn.role}", role_models)
        if pattern is not None:
            return role_models[pattern]
    return turn.model


@register_estimator("unity")
def unity_estimator(
    trees: Sequence[RolloutTree],
    *,
    mode: str = "whiten",
    weighting: str = "token",
    eps: float = DEFAULT_EPS,
    role_models: dict[str, str] | None = None,
) -> list:
    """Per-turn advantages from ``AgentTurn.reward``, normalised per model (module docstring)."""
    from .assign import TreeCredit, hierarchical_estimator

    if mode not in MODES:
        raise CreditError(f"unity: mode must be one of {MODES}, got {mode!r}")
    if mode == "gae":
        raise CreditError(
            "unity: mode 'gae' needs a critic (value model) per trained model; the local backend has no value "
            "head yet and the verl backend's critic worker group is not wired for it; use mode 'whiten' "
            "(critic-free, V = 0) or 'grpo'"
        )
    if weighting not in WEIGHTINGS:
        raise CreditError(f"unity: weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    designer = hierarchical_estimator(trees, eps=eps)
    credits = [
        TreeCredit(
            design_rewards=d.design_rewards,
            designer=d.designer,
            counts=Counter({k: v for k, v in d.counts.items() if "design" in k}),  # the designer's counters
        )
        for d in designer
    ]
    # (tree, design, execution, turn) of every trainable, rewarded invocation, grouped
    groups: dict[tuple, list[tuple[tuple[int, int, int, int], float, int]]] = defaultdict(list)
    for t, tree in enumerate(trees):
        c = credits[t]
        for i, d in enumerate(tree.designs):
            for j, e in enumerate(d.executions):
                c.executor[(i, j)] = None  # per-turn credit only: no execution-wide advantage
                rewards = [turn.reward for turn in e.turns if not turn.synthetic]
                if any(r is not None and r.total is None for r in rewards):
                    c.counts["unity_dropped_executions"] += 1
                    continue
                for k, turn in enumerate(e.turns):
                    if turn.synthetic:
                        continue
                    if turn.reward is None:
                        c.counts["unity_unassigned_turns"] += 1
                        continue
                    r = turn.reward.total
                    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
                        raise CreditError(f"task {tree.task_id}: turn ({i}, {j}, {k}) has reward {r!r}; a finite number or None")
                    weight = max(1, len(turn.response_ids)) if weighting == "token" else 1
                    key = (
                        (_model_key(turn, role_models),)
                        if mode == "whiten"
                        else (t, i, turn.role, turn.role_turn)
                    )
                    groups[key].append(((t, i, j, k), float(r), weight))
    for key, members in groups.items():
        rewards = [r for _, r, _ in members]
        if mode == "whiten":
            adv = masked_whiten(rewards, [w for _, _, w in members])
        else:
            res = group_advantages(rewards, eps=eps)
            adv = list(res.advantages)
            credits[members[0][0][0]].counts["executor_groups"] += 1
            credits[members[0][0][0]].counts["executor_zero_var_groups"] += int(res.zero_var)
            credits[members[0][0][0]].counts["executor_singleton_groups"] += int(res.singleton)
        for ((t, i, j, k), _, _), a in zip(members, adv):
            credits[t].turns[(i, j, k)] = a
    if credits and mode == "whiten":
        credits[0].counts["unity_models"] = len(groups)
    return credits
