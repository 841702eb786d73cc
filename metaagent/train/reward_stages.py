"""The reward stages: what is written into the records between the rollout and the (pure) estimator, in order.

Each stage reads and annotates the step's trees in place and returns its metrics; the config turns it on. The
order is the list below, nothing else (a later stage sees what an earlier one wrote):

1. ``eval_aligned``  (``algo.estimator: eval_aligned``) evaluation-aligned credit's coalition re-runs, judges,
                     first-error bisection and preference pairs, then its protocol metrics;
2. ``coach``         (``coach.backend``) the coach scored every action during the rollout; here its metrics;
3. ``turn_reward``   (``turn_reward.allocator``) UnityMAS-O's allocator splits each execution's reward over turns;
4. ``overlong``      (``algo.overlong.buffer > 0``) DAPO's soft overlong penalty (Eq. 13) on execution rewards.

A new stage is one function here and one row of :data:`STAGES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from metaagent.policy.factory import build_policy
from metaagent.records import EXECUTOR, RolloutTree
from metaagent.rewards.coach import coach_metrics
from metaagent.rewards.overlong import apply_overlong_penalty
from metaagent.rewards.turn import allocate_turn_rewards, turn_reward_metrics

if TYPE_CHECKING:
    from metaagent.train.config import TrainConfig


@dataclass
class StageContext:
    """What the stages need of the loop: its config, rollout engine, credit options and coach, and a place for
    a stage's state that lives across steps (eval-aligned credit's re-run stage)."""

    config: TrainConfig
    engine: Any
    credit_options: dict[str, Any]
    coach: Any = None
    state: dict[str, Any] = field(default_factory=dict)


def eval_aligned(ctx: StageContext, trees: list[RolloutTree]) -> dict[str, Any]:
    from metaagent.credit.eval_aligned import protocol_metrics
    from metaagent.rollout.eval_aligned import EvalAlignedStage

    stage = ctx.state.get("eval_aligned")
    if stage is None:
        reference = None
        if ctx.config.eval_aligned.baseline == "reference":
            reference = build_policy(ctx.config.policy.backend, ctx.config.policy.model_for(EXECUTOR))
        stage = ctx.state["eval_aligned"] = EvalAlignedStage(
            ctx.engine, ctx.config.eval_aligned, ctx.credit_options, reference=reference
        )
    return {**stage.annotate(trees), **protocol_metrics(trees, **ctx.credit_options)}


def coach(ctx: StageContext, trees: list[RolloutTree]) -> dict[str, Any]:
    return {**ctx.coach.take_metrics(), **coach_metrics(trees)}


def turn_reward(ctx: StageContext, trees: list[RolloutTree]) -> dict[str, Any]:
    t = ctx.config.turn_reward
    return {**allocate_turn_rewards(trees, t.allocator, **t.options), **turn_reward_metrics(trees)}


def overlong(ctx: StageContext, trees: list[RolloutTree]) -> dict[str, Any]:
    o, max_len = ctx.config.algo.overlong, ctx.config.rollout.executor.max_tokens
    return apply_overlong_penalty(trees, max_len=max_len, buffer=o.buffer, penalty_factor=o.penalty_factor)


@dataclass(frozen=True)
class Stage:
    name: str
    enabled: Callable[[TrainConfig], bool]
    run: Callable[[StageContext, list[RolloutTree]], dict[str, Any]]


STAGES: tuple[Stage, ...] = (
    Stage("eval_aligned", lambda c: c.algo.estimator == "eval_aligned", eval_aligned),
    Stage("coach", lambda c: c.coach.backend is not None, coach),
    Stage("turn_reward", lambda c: c.turn_reward.allocator is not None, turn_reward),
    Stage("overlong", lambda c: c.algo.overlong.buffer > 0, overlong),
)


def active_stages(config: TrainConfig) -> list[Stage]:
    """The stages ``config`` turns on, in pipeline order."""
    return [s for s in STAGES if s.enabled(config)]


def run_stages(ctx: StageContext, trees: list[RolloutTree]) -> dict[str, Any]:
    """Run the config's stages over ``trees`` in order; their metrics merged."""
    metrics: dict[str, Any] = {}
    for stage in active_stages(ctx.config):
        metrics.update(stage.run(ctx, trees))
    return metrics
