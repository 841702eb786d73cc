"""A thin per-request front for a shared policy: per-request token usage, the request's time budget and
cancellation, and a hook that sees every completion as it arrives (what streaming sends).

The sandbox and the rollout engine call it like any policy; nothing of theirs changes. A model call that
starts after the request was cancelled (client gone) or ran out of time raises :class:`PolicyError`, which
the engine records as a failed execution, so an abandoned request stops using the model at its next call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from metaagent.policy.base import ChatRequest, Completion, Policy, PolicyError

Listener = Callable[[ChatRequest, Completion], None]
log = logging.getLogger("metaagent.serve")


class RequestBudget:
    """The deadline and cancellation flag of one HTTP request (shared by its designer and executor fronts)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.cancelled = threading.Event()
        self.reason = ""

    def cancel(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.reason = reason
            self.cancelled.set()

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def check(self) -> None:
        """Raise :class:`PolicyError` if no more model calls may start."""
        if self.cancelled.is_set():
            raise PolicyError(f"request cancelled: {self.reason}")
        if self.expired:
            raise PolicyError(
                f"the request's time budget of {self.timeout_s:g} s ran out; ask for less work "
                "(fewer designs/executions, smaller max_tokens) or start the server with a larger --timeout"
            )


class RequestPolicy(Policy):
    """Forward to ``inner`` (a shared batcher); count this request's usage; report each completion."""

    def __init__(self, inner: Policy, budget: RequestBudget, listener: Listener | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.listener = listener
        self.model_id = inner.model_id

    @property
    def provides_logprobs(self) -> bool:  # type: ignore[override]
        return self.inner.provides_logprobs

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.budget.check()
        completions = self.inner.generate(requests)
        if self.listener is not None:
            for request, completion in zip(requests, completions):
                try:
                    self.listener(request, completion)
                except Exception:
                    log.exception("a completion listener failed; the team continues")
        return completions

    def close(self) -> None:
        """The shared policy outlives the request: nothing to release here."""
