"""The session's side of tree sampling (AT-GRPO Alg. 1 lines 7-10): what a branching session needs to know.

A :class:`Brancher` is built by the rollout layer for one execution (it knows the task, the execution's
position and the turn-reward preset, e.g. one that simulates a candidate's action on a copy of the
execution's host-side environment). The session asks it, for every agent call:

- :meth:`Brancher.branches` — how many candidates to sample for this role (1: an ordinary call);
- :meth:`Brancher.score` — the candidate's turn reward at call time (``TurnReward.total`` None = not
  computable: the candidate is excluded from its group and can not be selected);
- :meth:`Brancher.key` — the candidate group's key, (task instance, agent, turn) as text.

Selection (:func:`select_best`) is greedy: the highest computable reward, ties to the lowest index (numpy
``argmax``). The session continues the script with the selected candidate only; all K are recorded in the
execution's ``groups`` and only the selected one in ``turns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from metaagent.records import AgentTurn, TurnReward


class Brancher(Protocol):
    def branches(self, role: str) -> int: ...

    def score(self, turns_so_far: Sequence[AgentTurn], candidate: AgentTurn) -> TurnReward: ...

    def key(self, role: str, role_turn: int) -> str: ...


def select_best(rewards: Sequence[float | None]) -> int | None:
    """Index of the best computable reward (ties: lowest index); None when no reward is computable."""
    best: int | None = None
    for c, r in enumerate(rewards):
        if r is not None and (best is None or r > rewards[best]):  # type: ignore[operator]
            best = c
    return best
