"""MAPPA (seed 000): per-action coach rewards trained with REINFORCE++ (paper §2.3, App. E, Eq. 1-5).

Two parts, like every estimator with token-level credit:

- the record-level estimator ``mappa`` (registered in :mod:`.registry`): which agent turns are trained and
  each action's reward ``r_a`` (the coach's process score ``s`` divided by 10, in ``AgentTurn.reward``);
  the designer (MAPPA has none) keeps the hierarchical Eq. 4-5 advantage on the outcome rewards;
- the token stage (:func:`reinforce_pp_advantages`, registered with :func:`.registry.register_token_stage`):
  the per-token advantages, which need ``log pi_ref`` of every action token, so the trainer runs it after a
  reference-model pre-pass over the whole batch.

The math, per action ``a`` with response tokens ``y_1..y_L``, action mask ``m_t`` (0 on tool-observation
tokens inside a multi-round action) and ``t_last`` its last action token::

    Eq. 1/2  rtilde_t = -beta * KL_t * m_t + 1{t = t_last} * r_a,    KL_t = log pi_old(y_t) - log pi_ref(y_t)  (k1)
    Eq. 3    A_t = G_t = sum_{s >= t} gamma^(s-t) * rtilde_s * m_s                      (return-to-go)
    Eq. 4    mu = sum m A / sum m,  var = sum m (A - mu)^2 / sum m,  Ahat = (A - mu) / sqrt(max(var, 1e-8))
    Eq. 5    PPO-clip (0.2) on Ahat, token-mean, no critic, no KL loss term (the KL is in the reward)

Where the paper and the authors' code (``ltjed/multiagent-coaching``) disagree, the option and its default:

==================  =======================================  ==========================================  =========
choice              paper                                    authors' code                               default
==================  =======================================  ==========================================  =========
score scale         "0-10 scale"                             ``r_a = s / 10`` (``mathchat_processor``)   ``/ 10``
return scope        "downstream rewards to earlier actions   one action's tokens                         ``action``
                    within each agent's trajectory"          (``get_cumulative_returns``)
normalisation       "across all agents and experiences"      per agent model (each agent its trainer)    ``batch``
coach failure       (not said)                               silent 5.0 after retries                    error
==================  =======================================  ==========================================  =========

``return_scope="agent_episode"`` runs the return-to-go over the concatenation of one agent's actions in one
execution (in call order), so an action's return also holds the later actions' rewards and KL penalties.
``norm_scope="model"`` normalises each physical model's action tokens on their own. The coach fallback is
``coach.on_failure: fallback`` (:mod:`metaagent.rewards.coach`).

Masked tokens (``m_t = 0``) get advantage 0. This project's records never put tool observations inside a
response (an observation is the next call's prompt), so the trainer passes all-ones masks; the mask is kept
for records that do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from metaagent.records import RolloutTree

from .assign import TreeCredit, call_matrix, reward_matrix
from .groups import DEFAULT_EPS, CreditError
from .matrix import EXECUTOR_UNITS, hierarchical_credit
from .registry import register_estimator, register_token_stage

#: paper / code constants
DEFAULT_BETA = 0.01  # init_kl_coef, fixed (kl_target: null)
DEFAULT_GAMMA = 1.0
NORM_FLOOR = 1e-8  # var.clamp(min=1e-8).rsqrt()
RETURN_SCOPES = ("action", "agent_episode")
NORM_SCOPES = ("batch", "model")
DESIGNER_ADVANTAGES = ("hierarchical", "none")


@dataclass(frozen=True)
class Action:
    """One action for the token stage.

    Attributes:
        reward: r_a, the action's reward (coach score / 10).
        old_logprobs: (L,) log pi_old of the response tokens (the rollout's).
        ref_logprobs: (L,) log pi_ref of the same tokens; None only when beta = 0.
        mask: (L,) 1 = action token, 0 = tool-observation token; None = all ones.
        episode: actions with the same episode key are one agent's trajectory (``agent_episode`` scope).
        order: position of the action in its episode (call order).
        group: normalisation group (the model key for ``norm_scope="model"``).
        values: (L,) the critic's values ``V_t`` of the response tokens, for stages with a critic (UnityMAS-O
            GAE); None when the stage needs none.
    """

    reward: float
    old_logprobs: Sequence[float]
    ref_logprobs: Sequence[float] | None = None
    mask: Sequence[float] | None = None
    episode: Hashable = None
    order: int = 0
    group: Hashable = "batch"
    values: Sequence[float] | None = None


def _check_options(beta: float, gamma: float, return_scope: str, norm_scope: str) -> None:
    if not beta >= 0:
        raise CreditError(f"mappa: beta (KL-in-reward coefficient) must be >= 0, got {beta} (paper: 0.01)")
    if not 0 < gamma <= 1:
        raise CreditError(f"mappa: gamma must be in (0, 1], got {gamma} (paper: 1)")
    if return_scope not in RETURN_SCOPES:
        raise CreditError(f"mappa: return_scope must be one of {RETURN_SCOPES}, got {return_scope!r}")
    if norm_scope not in NORM_SCOPES:
        raise CreditError(f"mappa: norm_scope must be one of {NORM_SCOPES}, got {norm_scope!r}")


def _mask(a: Action, n: int) -> np.ndarray:
    m = np.ones(n) if a.mask is None else np.asarray(a.mask, dtype=np.float64)
    if m.shape != (n,):
        raise CreditError(f"mappa: an action has {n} tokens but a mask of shape {m.shape}")
    return m


def kl_penalised_rewards(
    reward: float, old_logprobs: np.ndarray, ref_logprobs: np.ndarray | None, mask: np.ndarray, beta: float
) -> np.ndarray:
    """Eq. 1/2: ``rtilde_t = -beta * (old_t - ref_t) * m_t + 1{t = t_last} * r_a``; shapes (L,) -> (L,).

    ``t_last`` is the last token with ``m_t = 1``; an action with no action token gets no reward at all.
    """
    old = np.asarray(old_logprobs, dtype=np.float64)
    if beta > 0:
        if ref_logprobs is None:
            raise CreditError("mappa: beta > 0 needs the reference log-probs of every action token")
        ref = np.asarray(ref_logprobs, dtype=np.float64)
        if ref.shape != old.shape:
            raise CreditError(f"mappa: {old.shape[0]} old log-probs but {ref.shape[0]} reference log-probs")
        r = -beta * (old - ref) * mask
    else:
        r = np.zeros_like(old)
    last = np.flatnonzero(mask)
    if last.size:
        r[last[-1]] += reward
    return r


def returns_to_go(rewards: np.ndarray, mask: np.ndarray, gamma: float) -> np.ndarray:
    """Eq. 3: ``G_t = sum_{s >= t} gamma^(s-t) * r_s * m_s``; (L,) -> (L,) (as ``get_cumulative_returns``)."""
    out = np.zeros_like(rewards, dtype=np.float64)
    acc = 0.0
    r = rewards * mask
    for t in range(len(r) - 1, -1, -1):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out


def normalise(values: Sequence[np.ndarray], masks: Sequence[np.ndarray], floor: float = NORM_FLOOR) -> list[np.ndarray]:
    """Eq. 4 over all given actions together: token-weighted mean and population variance of the masked
    tokens, ``(A - mu) / sqrt(max(var, floor))``; masked tokens become 0."""
    n = sum(float(m.sum()) for m in masks)
    if n == 0:
        return [np.zeros_like(v) for v in values]
    mu = sum(float((v * m).sum()) for v, m in zip(values, masks)) / n
    var = sum(float((((v - mu) ** 2) * m).sum()) for v, m in zip(values, masks)) / n
    rstd = 1.0 / np.sqrt(max(var, floor))
    return [(v - mu) * rstd * m for v, m in zip(values, masks)]


def reinforce_pp_advantages(
    actions: Sequence[Action],
    *,
    beta: float = DEFAULT_BETA,
    gamma: float = DEFAULT_GAMMA,
    return_scope: str = "action",
    norm_scope: str = "batch",
    **_: object,
) -> list[np.ndarray]:
    """REINFORCE++ advantages (Eq. 1-4) of a batch of actions: one (L_a,) float64 array per action, in order.

    ``norm_scope="batch"`` normalises over every action of the call; ``"model"`` within each ``Action.group``.
    Other keyword options (the record-level estimator's) are accepted and ignored, so one option dict
    configures both stages.
    """
    _check_options(beta, gamma, return_scope, norm_scope)
    masks = [_mask(a, len(a.old_logprobs)) for a in actions]
    rewards = [
        kl_penalised_rewards(a.reward, np.asarray(a.old_logprobs, dtype=np.float64), a.ref_logprobs, m, beta)
        for a, m in zip(actions, masks)
    ]
    returns: list[np.ndarray] = [np.empty(0)] * len(actions)
    if return_scope == "action":
        returns = [returns_to_go(r, m, gamma) for r, m in zip(rewards, masks)]
    else:  # one return-to-go over each agent's actions of an execution, concatenated in call order
        episodes: dict[Hashable, list[int]] = {}
        for idx, a in enumerate(actions):
            episodes.setdefault(a.episode, []).append(idx)
        for members in episodes.values():
            members.sort(key=lambda k: actions[k].order)
            g = returns_to_go(np.concatenate([rewards[k] for k in members]), np.concatenate([masks[k] for k in members]), gamma)
            start = 0
            for k in members:
                returns[k] = g[start : start + len(rewards[k])]
                start += len(rewards[k])
    groups: dict[Hashable, list[int]] = {}
    for idx, a in enumerate(actions):
        groups.setdefault(a.group if norm_scope == "model" else "batch", []).append(idx)
    out: list[np.ndarray] = [np.empty(0)] * len(actions)
    for members in groups.values():
        for k, adv in zip(members, normalise([returns[k] for k in members], [masks[k] for k in members])):
            out[k] = adv
    return out


def needs_ref_logprobs(options: dict) -> bool:
    """Whether the token stage needs a reference-model pass (the KL term is on: beta > 0)."""
    return float(options.get("beta", DEFAULT_BETA)) > 0


register_token_stage("mappa", reinforce_pp_advantages, needs_ref=needs_ref_logprobs)


@register_estimator("mappa")
def mappa_estimator(
    trees: Sequence[RolloutTree],
    *,
    beta: float = DEFAULT_BETA,
    gamma: float = DEFAULT_GAMMA,
    return_scope: str = "action",
    norm_scope: str = "batch",
    mask_truncated: bool = True,
    designer_advantage: str = "hierarchical",
    eps: float = DEFAULT_EPS,
    executor_unit: str = "call",
) -> list[TreeCredit]:
    """Record-level part of MAPPA: every executed turn with a computed coach reward gets ``r_a`` as its turn
    value (``AgentTurn.advantage``); the trainer's token stage turns it into per-token advantages.

    Excluded (no sample, counted in ``credit/mappa_*``): turns whose coach reward could not be computed
    (``mappa_unscored``), turns without any coach reward (``mappa_no_reward``), truncated completions
    (``finish_reason == "length"``, ``mappa_truncated``, when ``mask_truncated``), synthetic turns.
    Executions get no advantage of their own, so nothing else trains the executor.

    The designer: ``designer_advantage="hierarchical"`` keeps Eq. 4-5 on the outcome rewards (MAPPA has no
    designer; with a frozen design there are no designer samples anyway); ``"none"`` trains no designer.
    """
    _check_options(beta, gamma, return_scope, norm_scope)
    if designer_advantage not in DESIGNER_ADVANTAGES:
        raise CreditError(f"mappa: designer_advantage must be one of {DESIGNER_ADVANTAGES}, got {designer_advantage!r}")
    if executor_unit not in EXECUTOR_UNITS:
        raise CreditError(f"executor_unit must be one of {EXECUTOR_UNITS}, got {executor_unit!r}")
    out = []
    for tree in trees:
        mc = hierarchical_credit(
            reward_matrix(tree), eps=eps, calls=call_matrix(tree) if executor_unit == "call" else None
        )
        credit = TreeCredit(
            design_rewards=dict(enumerate(mc.design_rewards)),
            designer=dict(enumerate(mc.designer)) if designer_advantage == "hierarchical" else {},
            counts=Counter({k: v for k, v in mc.counts.items() if k.startswith("designer")}),
        )
        for i, d in enumerate(tree.designs):
            for j, e in enumerate(d.executions):
                for k, turn in enumerate(e.turns):
                    if turn.synthetic:
                        continue
                    r = turn.reward
                    if r is None:
                        credit.counts["mappa_no_reward"] += 1
                    elif r.total is None:
                        credit.counts["mappa_unscored"] += 1
                    elif mask_truncated and turn.finish_reason == "length":
                        credit.counts["mappa_truncated"] += 1
                    else:
                        credit.turns[(i, j, k)] = float(r.total)
                        credit.counts["mappa_actions"] += 1
        out.append(credit)
    return out
