"""A policy that replies from a list or a function: for tests of orchestration only.

Token ids are the UTF-8 bytes of the text and every log-prob is 0.0, so records built from it have the
right shapes but carry no model information.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable

from .base import ChatRequest, Completion, Policy, PolicyError

Reply = str | Callable[[ChatRequest], str]


def _byte_ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class ScriptedPolicy(Policy):
    """Reply with the given strings in order (thread-safe), or with ``fn(request)``.

    Args:
        replies: a list of replies consumed in call order, or a callable ``request -> str``.
        cycle: when replies is a list, start again at the first reply instead of failing when exhausted.
        model_id: recorded as the model of every completion.
    """

    def __init__(
        self,
        replies: Iterable[str] | Callable[[ChatRequest], str],
        *,
        cycle: bool = False,
        model_id: str = "scripted",
    ) -> None:
        super().__init__()
        self.model_id = model_id
        self._fn: Callable[[ChatRequest], str] | None = None
        self._replies = None
        if callable(replies):
            self._fn = replies
        else:
            items = list(replies)
            if not items:
                raise ValueError("ScriptedPolicy needs at least one reply")
            for i, r in enumerate(items):
                if not isinstance(r, str):
                    raise TypeError(f"ScriptedPolicy replies[{i}] must be a string, got {type(r).__name__}")
            self._n = len(items)
            self._replies = itertools.cycle(items) if cycle else iter(items)
        self._lock = threading.Lock()
        self.calls: list[ChatRequest] = []
        self.batch_sizes: list[int] = []

    def _next_reply(self, request: ChatRequest) -> str:
        if self._fn is not None:
            reply = self._fn(request)
            if not isinstance(reply, str):
                raise PolicyError(f"ScriptedPolicy function returned {type(reply).__name__}, expected str")
            return reply
        with self._lock:
            try:
                return next(self._replies)
            except StopIteration:
                raise PolicyError(
                    f"ScriptedPolicy ran out of replies after {self._n} calls; pass more replies or cycle=True"
                ) from None

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        with self._lock:
            self.calls.extend(requests)
            self.batch_sizes.append(len(requests))
        out = []
        for r in requests:
            text = self._next_reply(r)
            for s in r.sampling.stop:
                cut = text.find(s)
                if cut >= 0:
                    text = text[: cut + len(s)]
                    finish = "stop"
                    break
            else:
                finish = "stop"
            ids = _byte_ids(text)
            if len(ids) > r.sampling.max_tokens:
                ids = ids[: r.sampling.max_tokens]
                text = bytes(ids).decode("utf-8", errors="ignore")
                finish = "length"
            prompt = "".join(f"<{m['role']}>{m['content']}" for m in r.messages)
            out.append(
                Completion(
                    text=text,
                    prompt_ids=_byte_ids(prompt),
                    response_ids=ids,
                    logprobs=[0.0] * len(ids),
                    finish_reason=finish,
                    model=self.model_id,
                )
            )
        return out
