"""Re-execution policies: run a recorded script again with some replies forced or some agents replaced.

Workflow scripts are deterministic given their agents' replies (no randomness in the sandbox's builtins,
``PYTHONHASHSEED=0`` in the workers) and every agent call's sampling seed is ``call_seed(execution seed,
call index)``. So a re-execution with the recorded seed is an exact counterfactual, not an approximation:

- :class:`ForcedPrefixPolicy` answers the first ``upto`` calls with the recorded replies (checking that the
  script asks exactly the recorded prompts, :class:`PrefixDivergence` otherwise) and samples the rest —
  first-error bisection, prefix judges, "what if turn k had said this";
- :class:`CoalitionPolicy` lets the agents in ``members`` answer as usual and gives every other agent a
  baseline reply — ``noop`` (empty), ``mask`` (echo of its own message) or ``reference`` (a frozen
  reference policy) — Shapley coalition values.

Forced and baseline replies are marked ``synthetic``: they are recorded, never trained on. Both wrappers
run through the ordinary :meth:`metaagent.workflow.SandboxPool.run`; one wrapper serves one execution.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from metaagent.errors import MetaAgentError
from metaagent.policy.base import ChatRequest, Completion, Policy
from metaagent.records import AgentTurn

BASELINES = ("noop", "mask", "reference")


class PrefixDivergence(MetaAgentError):
    """The re-run script asked something other than the recorded prompt at a forced call."""


class ForcedPrefixPolicy(Policy):
    """Calls ``0 .. upto-1`` get the recorded replies; later calls go to ``then``.

    Args:
        recorded: the execution's recorded turns, in call order.
        upto: how many calls to force (``len(recorded)`` re-plays everything).
        then: the policy for the calls after the prefix.
        replace: optional ``{call_index: text}`` to force a different reply at a call (its token ids are
            then unknown: the turn is recorded with empty ids and never trained on).
    """

    def __init__(
        self, recorded: Sequence[AgentTurn], upto: int, then: Policy, *, replace: dict[int, str] | None = None
    ) -> None:
        super().__init__()
        if not 0 <= upto <= len(recorded):
            raise ValueError(f"upto must be in [0, {len(recorded)}] (the recorded calls), got {upto}")
        self.recorded = sorted(recorded, key=lambda t: t.call_index)
        self.upto = upto
        self.then = then
        self.replace = dict(replace or {})
        self.model_id = then.model_id
        self._next = 0
        self._lock = threading.Lock()

    def _forced(self, position: int, request: ChatRequest) -> Completion:
        turn = self.recorded[position]
        if request.messages != turn.messages:
            got = next((i for i, (a, b) in enumerate(zip(request.messages, turn.messages)) if a != b), None)
            raise PrefixDivergence(
                f"call {position} ({turn.role}): the re-run script sent different messages than the record "
                f"(first difference at message {got if got is not None else min(len(request.messages), len(turn.messages))}); "
                "a tool with a wall-clock limit or a changed script makes a run non-replayable"
            )
        if position in self.replace:
            return Completion(self.replace[position], list(turn.prompt_ids), [], None, "stop", "forced", synthetic=True)
        return Completion(
            turn.response, list(turn.prompt_ids), list(turn.response_ids), turn.logprobs, turn.finish_reason,
            turn.model, synthetic=True,
        )  # fmt: skip

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        with self._lock:
            start = self._next
            self._next += len(requests)
        out: list[Completion | None] = [None] * len(requests)
        live = []
        for i, request in enumerate(requests):
            if start + i < self.upto:
                out[i] = self._forced(start + i, request)
            else:
                live.append(i)
        if live:
            for i, c in zip(live, self.then.generate([requests[i] for i in live])):
                out[i] = c
        return out  # type: ignore[return-value]


class CoalitionPolicy(Policy):
    """Agents named in ``members`` answer through ``then``; the others get the ``baseline`` reply."""

    def __init__(
        self, members: Iterable[str], baseline: str, then: Policy, *, reference: Policy | None = None
    ) -> None:
        super().__init__()
        if baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
        if baseline == "reference" and reference is None:
            raise ValueError("baseline='reference' needs reference=<a frozen reference policy>")
        self.members = frozenset(members)
        self.baseline = baseline
        self.then = then
        self.reference = reference
        self.model_id = then.model_id

    def _baseline(self, requests: list[ChatRequest]) -> list[Completion]:
        if self.baseline == "reference":
            return [
                Completion(c.text, c.prompt_ids, c.response_ids, c.logprobs, c.finish_reason, c.model, synthetic=True)
                for c in self.reference.generate(requests)  # type: ignore[union-attr]
            ]
        texts = ["" if self.baseline == "noop" else r.messages[-1]["content"] for r in requests]
        return [Completion(t, [], [], None, "stop", f"baseline:{self.baseline}", synthetic=True) for t in texts]

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        keep = [i for i, r in enumerate(requests) if r.agent in self.members]
        drop = [i for i in range(len(requests)) if i not in keep]
        for group, fn in ((keep, self.then.generate), (drop, self._baseline)):
            if group:
                for i, c in zip(group, fn([requests[i] for i in group])):
                    out[i] = c
        return out  # type: ignore[return-value]
