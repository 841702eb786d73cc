"""Tree sampling inside a running workflow (AT-GRPO, seed 003, Alg. 1 lines 7-10), rollout side.

``rollout.branching.k = K > 1``: every call of an agent whose role name matches one of
``rollout.branching.roles`` (fnmatch patterns, default ``["*"]``) samples K candidates in one batch, each
is scored at call time with the turn reward ``rollout.branching.turn_reward`` (a name in
:mod:`metaagent.rewards.turn`'s registry), the script continues with the best (ties: lowest index) and all K
are recorded in the execution's candidate group keyed ``(task instance, agent, turn)``. Only training
rollouts branch: evaluation / validation (``mode != "train"``) runs greedy-or-sampled single calls.

Turn-reward presets that need the execution's host-side environment (``fn.needs_env = True``) receive it
as ``env=``: the first tool of the execution that carries an ``env`` attribute (see :mod:`metaagent.envs`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metaagent.config import ConfigError
from metaagent.records import AgentTurn, TurnReward
from metaagent.rewards.turn import get_turn_reward


@dataclass
class BranchingConfig:
    """Tree sampling (AT-GRPO). ``k = 1`` (default) is today's engine exactly: one sample per call.

    Attributes:
        k: candidates per agent call of a branched role (paper: 4).
        roles: fnmatch patterns of the agent role names that branch (paper: every agent, ``["*"]``).
        turn_reward: the call-time turn-reward preset (``metaagent.rewards.turn``); required when k > 1.
    """

    k: int = 1
    roles: list[str] = field(default_factory=lambda: ["*"])
    turn_reward: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ConfigError(f"rollout.branching.k must be an integer >= 1, got {self.k!r}")
        if not isinstance(self.roles, list) or not self.roles or not all(isinstance(r, str) and r for r in self.roles):
            raise ConfigError(f"rollout.branching.roles must be a non-empty list of role patterns, got {self.roles!r}")
        if self.k > 1 and not self.turn_reward:
            raise ConfigError("rollout.branching.k > 1 needs rollout.branching.turn_reward (a turn-reward preset name)")

    @property
    def active(self) -> bool:
        return self.k > 1


def env_of(tools: Mapping[str, Callable[..., str]]) -> Any:
    """The execution's host-side environment: the ``env`` of the first tool carrying one (None if none)."""
    for name in sorted(tools):
        env = getattr(tools[name], "env", None)
        if env is not None:
            return env
    return None


@dataclass
class RolloutBrancher:
    """One execution's :class:`~metaagent.workflow.branching.Brancher`."""

    config: BranchingConfig
    task: Mapping[str, Any]
    prefix: str  # the execution's position: "<tree>:<task id>/d<design>/e<execution>"
    fn: Callable[..., TurnReward]
    env: Any = None

    def branches(self, role: str) -> int:
        return self.config.k if any(fnmatch.fnmatchcase(role, p) for p in self.config.roles) else 1

    def score(self, turns_so_far: Sequence[AgentTurn], candidate: AgentTurn) -> TurnReward:
        if getattr(self.fn, "needs_env", False):
            if self.env is None:
                return TurnReward(None, "env", error="this turn reward needs an environment and the execution has none")
            return self.fn(self.task, turns_so_far, candidate, env=self.env)
        return self.fn(self.task, turns_so_far, candidate)

    def key(self, role: str, role_turn: int) -> str:
        return f"{self.prefix}|{role}|{role_turn}"


def make_brancher(
    config: BranchingConfig, task: Mapping[str, Any], prefix: str, tools: Mapping[str, Callable[..., str]]
) -> RolloutBrancher | None:
    """The brancher of one training execution, or None when tree sampling is off (k = 1)."""
    if not config.active:
        return None

    return RolloutBrancher(config, task, prefix, get_turn_reward(config.turn_reward or ""), env_of(tools))
