"""UnityMAS-O's per-model advantages (seed 001, Eq. 13-21; the authors' ``star_ppo/ray_trainer.py``).

Each role invocation (an :class:`~metaagent.records.AgentTurn`) is one sample; its scalar reward ``r``
(``AgentTurn.reward``, written by a reward allocator of :mod:`metaagent.rewards.allocators`) sits on its
**last response token** (:func:`last_token_rewards`). Advantages are then computed per trainable model
``M_l`` (Eq. 16-19: each model's buffer holds only the invocations routed to it):

- ``gae`` (what the paper ran): Eq. 20-21 with a critic per trained model, ``gamma = lam = 1`` by default
  (the authors' runs): per token ``A_t = r - V_t`` (:func:`gae_advantages`), then whitened over the model's
  batch of response tokens (:func:`whiten_tokens`). The critic's values only exist in the trainer, so this
  mode finishes in the registered token stage :func:`gae_token_stage`: the record-level estimator passes each
  invocation's raw reward on (``AgentTurn.advantage`` holds ``r``, as MAPPA's does), the local backend's
  critic (:mod:`metaagent.train.local.critic`) gives ``V_t`` of every response token, the stage gives the
  whitened advantages and the value targets ``A + V`` the critic is trained towards.
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

from metaagent.policy.registry import resolve_role
from metaagent.records import EXECUTOR, AgentTurn, RolloutTree

from .groups import DEFAULT_EPS, CreditError, group_advantages
from .registry import TokenCredit, register_estimator, register_token_stage

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
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation (paper Eq. 20-21; verl ``compute_gae_advantage_return`` for one row)
    over one invocation of ``T`` response tokens::

        delta_t = r_t + gamma * V_{t+1} - V_t          (V_T = 0: an invocation is its own episode)
        A_t     = sum_{l >= 0} (gamma * lam)^l * delta_{t+l}  =  delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t                             (the critic's value target, "returns")

    Shapes: ``token_rewards`` (T,), ``values`` (T,) -> ``(A, R)``, each (T,) float64, before whitening. With
    ``gamma = lam = 1`` and the reward ``r`` on the last token only: ``A_t = r - V_t`` and ``R_t = r``.
    """
    r = np.asarray(token_rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if r.shape != v.shape or r.ndim != 1:
        raise CreditError(f"gae: {r.shape} rewards but {v.shape} values; one value per response token")
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise CreditError(f"gae: gamma and lam must be in [0, 1], got gamma={gamma}, lam={lam}")
    adv = np.zeros_like(v)
    last = 0.0
    for t in range(len(v) - 1, -1, -1):
        next_value = v[t + 1] if t + 1 < len(v) else 0.0
        last = r[t] + gamma * next_value - v[t] + gamma * lam * last
        adv[t] = last
    return adv, adv + v


def whiten_tokens(advantages: Sequence[np.ndarray], *, eps: float = WHITEN_EPS) -> list[np.ndarray]:
    """verl's ``masked_whiten`` over every response token of a model's batch: :func:`masked_whiten` of all
    tokens of the (L_a,) arrays together, returned in the same shapes (fewer than two tokens: zeros)."""
    arrays = [np.asarray(a, dtype=np.float64) for a in advantages]
    flat = np.asarray(masked_whiten(np.concatenate(arrays).tolist(), eps=eps)) if arrays else np.zeros(0)
    return np.split(flat, np.cumsum([len(a) for a in arrays])[:-1]) if arrays else []


def gae_token_stage(
    actions: Sequence, *, gamma: float = 1.0, lam: float = 1.0, **_: object
) -> TokenCredit:
    """Token stage of ``unity`` in ``mode: gae`` (registered for the estimator ``unity``): per action (one role
    invocation; its reward ``r`` in ``Action.reward``, the critic's (L,) values in ``Action.values``)

        r_t = r * 1{t = L-1}                          (:func:`last_token_rewards`)
        A, R = gae_advantages(r_t, V, gamma, lam)     (Eq. 20-21)
        Ahat = whiten_tokens(A over Action.group)     (per model: all response tokens of its batch)

    Returns a :class:`~metaagent.credit.registry.TokenCredit`: the (L,) ``Ahat`` and the (L,) returns ``R``
    (the critic's targets, not whitened). The estimator's other options are accepted and ignored."""
    advs: list[np.ndarray] = []
    returns: list[np.ndarray] = []
    for n, a in enumerate(actions):
        if a.values is None:
            raise CreditError(f"unity gae: action {n} has no critic values; the trainer's critic pre-pass gives them")
        adv, ret = gae_advantages(last_token_rewards(a.reward, len(a.old_logprobs)), a.values, gamma=gamma, lam=lam)
        advs.append(adv)
        returns.append(ret)
    groups: dict[object, list[int]] = defaultdict(list)
    for n, a in enumerate(actions):
        groups[a.group].append(n)
    out: list[np.ndarray] = [np.zeros(0)] * len(actions)
    for members in groups.values():
        for n, w in zip(members, whiten_tokens([advs[n] for n in members])):
            out[n] = w
    return TokenCredit(out, returns)


register_token_stage(
    "unity",
    gae_token_stage,
    active=lambda options: options.get("mode", "whiten") == "gae",
    needs_values=lambda options: True,
    drop_truncated=False,  # verl keeps a truncated response; its reward sits on its last kept token
)


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
    gamma: float = 1.0,
    lam: float = 1.0,
) -> list:
    """Per-turn advantages from ``AgentTurn.reward``, normalised per model (module docstring). ``gamma`` and
    ``lam`` are GAE's (``mode: gae``; they reach the token stage through the same options)."""
    from .assign import TreeCredit, hierarchical_estimator

    if mode not in MODES:
        raise CreditError(f"unity: mode must be one of {MODES}, got {mode!r}")
    if weighting not in WEIGHTINGS:
        raise CreditError(f"unity: weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if mode == "gae" and weighting != "token":
        raise CreditError("unity: mode 'gae' whitens over response tokens (verl); weighting='turn' is for mode 'whiten'")
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise CreditError(f"unity: gamma and lam must be in [0, 1], got gamma={gamma}, lam={lam}")
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
                        if mode in ("whiten", "gae")
                        else (t, i, turn.role, turn.role_turn)
                    )
                    groups[key].append(((t, i, j, k), float(r), weight))
    for key, members in groups.items():
        rewards = [r for _, r, _ in members]
        if mode == "gae":
            adv = rewards  # raw rewards: the token stage gives GAE advantages with the critic's values
        elif mode == "whiten":
            adv = masked_whiten(rewards, [w for _, _, w in members])
        else:
            res = group_advantages(rewards, eps=eps)
            adv = list(res.advantages)
            credits[members[0][0][0]].counts["executor_groups"] += 1
            credits[members[0][0][0]].counts["executor_zero_var_groups"] += int(res.zero_var)
            credits[members[0][0][0]].counts["executor_singleton_groups"] += int(res.singleton)
        for ((t, i, j, k), _, _), a in zip(members, adv):
            credits[t].turns[(i, j, k)] = a
    if credits and mode in ("whiten", "gae"):
        credits[0].counts["unity_models"] = len(groups)
    return credits
