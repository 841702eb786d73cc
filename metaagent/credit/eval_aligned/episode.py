"""One episode's evaluation-aligned credit from its records (seed 002 §3.3-3.4): the evaluator's score, the
players, the coalition values stored in ``Execution.counterfactuals``, Shapley values, agent rewards and the
helpfulness split over each agent's turns. Pure: reads records, writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from metaagent.records import Execution, RewardRecord
from metaagent.seeding import derive_seed

from ..groups import CreditError
from .shapley import ShapleyPlan, contribution_rewards, helpfulness_weights, shapley_plan, shapley_values

SCORES = ("total", "correct")
#: the baselines a coalition run may use (records' ``Counterfactual.baseline``); other baselines
#: (``forced:<t>``, ``resample:<t>``, ``correction:<t>``) are prefix-judge and correction runs, never coalition values
COALITION_BASELINES = ("noop", "mask", "reference")
HELPFUL = "helpful"  # AgentTurn.labels key of Eq. 5's q_{i,t}
HELPFUL_ERROR = "helpful_error"  # set to 1.0 when the helpfulness judge could not label the turn


def evaluator_score(reward: RewardRecord | None, *, score: str = "total", success_threshold: float = 1.0) -> float | None:
    """``score(E(x, y))``: ``success(r)`` iff ``correct >= success_threshold``, then ``r`` = the record's
    ``total`` (or ``correct``); ``fail`` scores 0. None when the reward could not be computed."""
    if score not in SCORES:
        raise CreditError(f"score must be one of {SCORES}, got {score!r}")
    if reward is None or reward.total is None or reward.correct is None:
        return None
    value = float(reward.total if score == "total" else reward.correct)
    if not math.isfinite(value):
        raise CreditError(f"a reward must be finite, got {value!r}")
    return value if reward.correct >= success_threshold else 0.0


def players(execution: Execution) -> list[str]:
    """The agents of Eq. 2: distinct role names of the recorded (non-synthetic) turns, sorted."""
    return sorted({t.role for t in execution.turns if not t.synthetic})


def call_order(execution: Execution) -> list[int]:
    """Positions in ``execution.turns`` in call order: turn t (1-based, the papers' index) is ``turns[order[t-1]]``."""
    return sorted(range(len(execution.turns)), key=lambda k: execution.turns[k].call_index)


def plan_for(execution: Execution, *, exact_max_agents: int, permutations: int) -> ShapleyPlan:
    """The episode's Shapley plan; sampled orderings are seeded by the execution's seed."""
    seed = derive_seed(execution.seed, "eval_aligned/shapley")
    return shapley_plan(players(execution), exact_max_agents=exact_max_agents, permutations=permutations, seed=seed)


@dataclass
class EpisodeCredit:
    """``status``: ``ok``; ``failure`` (R_sys = 0: the preference route); ``no_agents`` (a success without
    agent turns); ``not_computable`` (the
    episode's own reward, or a needed coalition's, could not be computed); ``missing_coalitions`` (the
    post-rollout stage did not run them, e.g. budget). ``turn_rewards`` maps a turn position to r_{i,t};
    turns of agents whose helpfulness labels failed are absent (``unlabelled_agents``)."""

    status: str
    r_sys: float | None = None
    plan: ShapleyPlan | None = None
    values: dict[frozenset[str], float] = field(default_factory=dict)
    phi: dict[str, float] = field(default_factory=dict)
    alpha: dict[str, float] = field(default_factory=dict)
    agent_rewards: dict[str, float] = field(default_factory=dict)
    turn_rewards: dict[int, float] = field(default_factory=dict)
    weights: dict[int, float] = field(default_factory=dict)
    degenerate: bool = False
    unlabelled_agents: list[str] = field(default_factory=list)
    missing: list[list[str]] = field(default_factory=list)


def episode_credit(
    execution: Execution,
    *,
    score: str = "total",
    success_threshold: float = 1.0,
    exact_max_agents: int = 5,
    permutations: int = 8,
    clip_negative: bool = False,
) -> EpisodeCredit:
    """Eq. 1-7 for one execution, from its reward, counterfactual runs and turn labels."""
    r_sys = evaluator_score(execution.reward, score=score, success_threshold=success_threshold)
    if r_sys is None:
        return EpisodeCredit("not_computable")
    if r_sys <= 0:
        return EpisodeCredit("failure", r_sys)  # success(0) goes the failure route too
    if not players(execution):
        return EpisodeCredit("no_agents", r_sys)  # the script succeeded without an agent: nobody to credit
    plan = plan_for(execution, exact_max_agents=exact_max_agents, permutations=permutations)
    values: dict[frozenset[str], float] = {frozenset(plan.players): r_sys}  # v(A): the recorded run
    stored = {}
    for cf in execution.counterfactuals:
        if cf.baseline in COALITION_BASELINES:
            stored[frozenset(cf.members)] = cf
    out = EpisodeCredit("ok", r_sys, plan, values)
    for s in plan.coalitions:
        cf = stored.get(s)
        if cf is None:
            out.missing.append(sorted(s))
            continue
        v = evaluator_score(cf.reward, score=score, success_threshold=success_threshold)
        if v is None:
            out.status = "not_computable"
            return out
        values[s] = v
    if out.missing:
        out.status = "missing_coalitions"
        return out
    out.phi = shapley_values(plan, values)
    out.alpha, out.agent_rewards, out.degenerate = contribution_rewards(out.phi, r_sys, clip_negative=clip_negative)
    for agent in plan.players:
        ks = [k for k in call_order(execution) if execution.turns[k].role == agent and not execution.turns[k].synthetic]
        if any(execution.turns[k].labels.get(HELPFUL_ERROR) for k in ks):
            out.unlabelled_agents.append(agent)
            continue
        q = [float(execution.turns[k].labels.get(HELPFUL, 0.0)) for k in ks]
        for k, w in zip(ks, helpfulness_weights(q)):
            out.weights[k] = w
            out.turn_rewards[k] = w * out.agent_rewards[agent]
    return out
