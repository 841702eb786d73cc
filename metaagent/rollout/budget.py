"""The budget tag: one designer serves two budgets, ``LOW`` and ``HIGH``.

The tag is a line of the designer prompt (:func:`budget_line`, shown by
:func:`metaagent.rollout.prompts.designer_messages`) and a cap on the executions of every design of the
question: under ``LOW`` an execution may make at most ``low_max_calls`` agent calls (each request of a
``parallel`` counts). The cap is the workflow sandbox's own agent-call limit (``Limits.max_agent_calls``), so a
script whose next call would pass it is cut there: the execution ends with status ``limit`` (``AgentCallLimit``)
and is scored as it stands, which for a script that has not submitted is ``R_correct = 0``
(:func:`metaagent.rewards.score.score_execution`). The cap is part of the reward: a design that overspends a
``LOW`` budget earns what it had submitted before the cap, nothing more. ``HIGH`` keeps the run's own limits.

During training the tag is drawn per question from ``rollout.budget.tags`` (``probs``: each tag's probability)
with a seed derived from the rollout's seed, i.e. from the run seed (:func:`sample_tag`); ``metaagent-eval
--budget`` and ``metaagent-serve --budget`` fix one tag for every task. The tree records its tag
(``RolloutTree.budget``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt

from metaagent.config import Checked, ConfigError
from metaagent.seeding import derive_seed
from metaagent.workflow.limits import Limits

LOW, HIGH = "LOW", "HIGH"
#: the budget tags, in one place (configs, prompts, CLI choices)
BUDGET_TAGS = (LOW, HIGH)
#: the default cap of a LOW execution's agent calls: the largest whole number of calls per execution that keeps
#: every LOW task at or below a goal of 1.5 executor calls per task whatever the designer writes
DEFAULT_LOW_MAX_CALLS = 1

#: the designer prompt's line per tag
BUDGET_LINES = {
    LOW: "Budget: LOW. Agent calls are capped: a run that needs more calls than the cap is stopped there and "
    "scores what it had submitted.",
    HIGH: "Budget: HIGH. Use the agent calls the task needs.",
}


@dataclass
class BudgetConfig(Checked):
    """The budget tag of the designer prompt (``rollout.budget``): sampled per training question, off by
    default; ``LOW`` caps every execution's agent calls (metaagent.rollout.budget)."""

    # the tags drawn per training question, e.g. [LOW, HIGH]; [] = off (no tag in the prompt, no cap)
    tags: list[Literal[BUDGET_TAGS]] = field(default_factory=list)
    # each tag's probability, in the order of tags (they must sum to 1); [] = every tag alike
    probs: list[Annotated[float, Field(ge=0, le=1)]] = field(default_factory=list)
    # most agent calls of one execution under LOW (default 1: every LOW task stays within 1.5 calls a task)
    low_max_calls: PositiveInt = DEFAULT_LOW_MAX_CALLS

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(set(self.tags)) != len(self.tags):
            raise ConfigError(f"rollout.budget.tags lists a tag twice: {self.tags}; name each of {BUDGET_TAGS} once")
        if self.probs and len(self.probs) != len(self.tags):
            raise ConfigError(
                f"rollout.budget.probs has {len(self.probs)} entries for {len(self.tags)} tags; give one per tag "
                "(in the order of rollout.budget.tags) or [] for every tag alike"
            )
        if self.probs and abs(sum(self.probs) - 1.0) > 1e-9:
            raise ConfigError(f"rollout.budget.probs must sum to 1, got {self.probs} (sum {sum(self.probs)})")

    @property
    def enabled(self) -> bool:
        return bool(self.tags)


def check_tag(tag: str | None) -> str | None:
    """``tag`` when it is None or one of :data:`BUDGET_TAGS`; else a one-line error naming them."""
    if tag is not None and tag not in BUDGET_TAGS:
        raise ConfigError(f"budget tag must be one of {', '.join(BUDGET_TAGS)}, got {tag!r}")
    return tag


def budget_line(tag: str) -> str:
    """The designer prompt's line for budget ``tag``."""
    return BUDGET_LINES[check_tag(tag)]  # type: ignore[index]


def sample_tag(config: BudgetConfig, seed: int, step: int | None, task_id: str, position: int) -> str | None:
    """The budget tag of one training question: drawn from ``config.tags`` with ``config.probs`` by a generator
    seeded with ``derive_seed(seed, step, task_id, position, "budget")`` (the rollout's seed is the run seed's
    derivation, so the draw replays with the run); None when the tag is off."""
    if not config.tags:
        return None
    rng = random.Random(derive_seed(seed, step, task_id, position, "budget"))
    return rng.choices(list(config.tags), weights=list(config.probs) or None)[0]


def capped_limits(limits: Mapping[str, Any], tag: str | None, low_max_calls: int) -> dict[str, Any]:
    """The sandbox limits of an execution under budget ``tag``: ``LOW`` lowers ``max_agent_calls`` to
    ``low_max_calls`` (never raises it); ``HIGH`` and no tag keep ``limits``."""
    out = dict(limits)
    if check_tag(tag) == LOW:
        current = out.get("max_agent_calls", Limits().max_agent_calls)
        out["max_agent_calls"] = min(int(current), int(low_max_calls))
    return out
