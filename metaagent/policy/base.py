"""The one interface through which every designer and executor call reaches a model.

A backend turns a batch of chat requests into completions::

    completions = policy.generate([ChatRequest(messages, SamplingParams(max_tokens=256, seed=0))])

Contract every backend keeps (the trainer relies on it):

- ``Completion.response_ids`` are exactly the sampled tokens, ending with the stop token when the
  model stopped on one, and ``Completion.text`` is their decoding without special tokens. A stop *string*
  ends generation at the token that completes it; that token is kept, so ``text`` contains the stop string.
- ``Completion.logprobs[t]`` is ``log pi_T(response_ids[t] | prompt, response_ids[:t])`` under the
  distribution actually sampled from: ``softmax(logits / temperature)``. For greedy decoding
  (``temperature == 0``) the log-probs are those of ``softmax(logits)``. These are the trainer's pi_old.
  ``top_p``/``top_k`` < full vocabulary change the sampling distribution: backends report log-probs of
  the temperature-scaled, untruncated distribution (as vLLM and verl do), so train with ``top_p=1``.
- ``Completion.prompt_ids`` are the token ids the model saw, after the chat template.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from metaagent.errors import MetaAgentError
from metaagent.records import EXECUTOR

VALID_CHAT_ROLES = ("system", "user", "assistant")
FINISH_REASONS = ("stop", "length")


class PolicyError(MetaAgentError, RuntimeError):
    """A generation request could not be served. The message names the problem and how to fix it."""


class RequestError(PolicyError, ValueError):
    """The request itself is malformed (bad messages, bad sampling parameters)."""


class CapabilityError(PolicyError):
    """The backend cannot provide something the caller needs (e.g. token log-probs for training)."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters of one request. ``temperature == 0`` means greedy decoding."""

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = whole vocabulary
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens <= 0:
            raise RequestError(f"max_tokens must be a positive integer, got {self.max_tokens!r}; set e.g. max_tokens=256")
        if not (self.temperature >= 0):
            raise RequestError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise RequestError(f"top_k must be an integer >= 0 (0 = whole vocabulary), got {self.top_k!r}")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise RequestError(f"stop strings must be non-empty strings, got {s!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise RequestError(f"seed must be an integer or None, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes: Any) -> SamplingParams:
        return SamplingParams(**{**asdict(self), **changes})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> SamplingParams:
        data = dict(data or {})
        unknown = set(data) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise RequestError(
                f"unknown sampling parameter(s) {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**data)


def validate_messages(messages: Any) -> list[dict[str, str]]:
    """Check chat messages and return them as plain ``{"role", "content"}`` dicts.

    Raises :class:`RequestError` naming the first bad message.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise RequestError(
            "messages must be a non-empty list of {'role': ..., 'content': ...} dicts, "
            f"got {type(messages).__name__}"
        )
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise RequestError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in VALID_CHAT_ROLES:
            raise RequestError(f"messages[{i}]['role'] must be one of {VALID_CHAT_ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
        if role == "system" and i != 0:
            raise RequestError(f"messages[{i}] is a system message; only messages[0] may have role 'system'")
        out.append({"role": role, "content": content})
    if out[-1]["role"] == "assistant":
        raise RequestError("the last message must not be from the assistant: the model answers after it")
    return out


@dataclass
class ChatRequest:
    """One chat generation request.

    ``role`` is the logical role (designer, executor) for accounting; ``agent`` is the agent's role name in
    the workflow script (e.g. "MathCritic"), which partial weight sharing routes on (``executor:<agent>``).
    ``affinity`` groups requests whose prompts share a prefix (set by the rollout engine from the step,
    task, design and agent, see :func:`team_affinity`): a backend with several servers sends equal keys to
    the same server, whose prefix cache then holds their shared prompt. Empty: no affinity.
    """

    messages: list[dict[str, str]]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    role: str = EXECUTOR
    agent: str = ""
    affinity: str = ""

    @property
    def route_name(self) -> str:
        """``designer`` or ``executor:<agent>``: the name policy-registry patterns are matched against."""
        return f"{self.role}:{self.agent}" if self.agent else self.role

    def __post_init__(self) -> None:
        self.messages = validate_messages(self.messages)
        if isinstance(self.sampling, Mapping):
            self.sampling = SamplingParams.from_mapping(self.sampling)
        if not isinstance(self.sampling, SamplingParams):
            raise RequestError(f"sampling must be SamplingParams or a dict, got {type(self.sampling).__name__}")


def team_affinity(step: int | None, task: int, design: int | None = None, agent: str = "") -> str:
    """The affinity key of a rollout request: ``s<step>/t<task>`` for the designer prompts of a task, plus
    ``/d<design>/<agent>`` for an agent's calls in the executions of one design.

    The execution index is deliberately not part of the key: the N executions of a design call the same
    agents with the same system prompt and task, so their first calls share the whole prompt and later
    turns extend it; all of them on one server is what makes its prefix cache hit.
    """
    key = f"s{step if step is not None else '-'}/t{task}"
    if design is not None:
        key += f"/d{design}/{agent or '-'}"
    return key


@dataclass
class Completion:
    """The result of one request; see the module docstring for the token/log-prob contract."""

    text: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    model: str
    synthetic: bool = False  # not sampled from a trainable policy (a forced or baseline reply): never trained on

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.response_ids)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Usage:
    """Thread-safe token accounting per logical role."""

    requests: dict[str, int] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, role: str, completion: Completion) -> None:
        with self._lock:
            self.requests[role] = self.requests.get(role, 0) + 1
            self.prompt_tokens[role] = self.prompt_tokens.get(role, 0) + completion.prompt_tokens
            self.completion_tokens[role] = self.completion_tokens.get(role, 0) + completion.completion_tokens

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "prompt_tokens": dict(self.prompt_tokens),
                "completion_tokens": dict(self.completion_tokens),
            }


class Policy(abc.ABC):
    """A generation backend. Thread-safe: ``generate`` may be called from many threads."""

    #: model identifier recorded in every trajectory (path, hub id or endpoint model name)
    model_id: str = "unknown"
    #: whether completions carry prompt/response token ids and log-probs (required for RL training)
    provides_logprobs: bool = True
    #: whether concurrent ``generate`` calls decode in one running batch, each returning when its own rows finish
    #: (``HFPolicy(continuous=True)``): the rollout engine then sends designer requests one by one and starts a
    #: design's executions as soon as it is generated. Otherwise one call's requests form one batch, and the
    #: engine sends the designer requests together (a batch composition that does not depend on timing)
    continuous: bool = False

    def __init__(self) -> None:
        self.usage = Usage()

    @abc.abstractmethod
    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        """Backend-specific batched generation; ``requests`` are already validated."""

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Generate one completion per request, in order."""
        requests = list(requests)
        for i, r in enumerate(requests):
            if not isinstance(r, ChatRequest):
                raise RequestError(f"requests[{i}] must be a ChatRequest, got {type(r).__name__}")
        if not requests:
            return []
        completions = self._generate(requests)
        if len(completions) != len(requests):
            raise PolicyError(
                f"{type(self).__name__} returned {len(completions)} completions for {len(requests)} requests"
            )
        for r, c in zip(requests, completions):
            self.usage.add(r.role, c)
        return completions

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        sampling: SamplingParams | Mapping[str, Any] | None = None,
        *,
        role: str = EXECUTOR,
    ) -> Completion:
        """Convenience: one request, one completion."""
        return self.generate([ChatRequest(list(messages), sampling or SamplingParams(), role=role)])[0]

    def require_logprobs(self, purpose: str = "RL training") -> None:
        if not self.provides_logprobs:
            raise CapabilityError(
                f"{type(self).__name__} ({self.model_id}) does not return token ids and log-probs, which "
                f"{purpose} needs; use the 'hf' or 'vllm' backend, or an OpenAI-compatible server that returns "
                "logprobs and token ids (e.g. `vllm serve` or `metaagent-serve`)"
            )

    def weights_changed(self) -> None:
        """The weights this policy samples from were updated: drop anything computed with the old ones
        (e.g. the ``hf`` backend's prefix cache). Wrappers pass it on; no-op by default."""

    def close(self) -> None:
        """Release resources (threads, connections). Idempotent."""

    def free_memory(self) -> None:
        """Drop what the policy can rebuild on its next call (caches, copies of weights), e.g. while its model is
        being trained. Default: nothing to drop."""

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
