"""Per-execution limits of a sandboxed workflow script."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metaagent.errors import MetaAgentError


class LimitsError(MetaAgentError, ValueError):
    """A limit is malformed; the message names the field and what to set."""


@dataclass(frozen=True)
class Limits:
    """What one execution may use. Exceeding a limit ends the execution with status ``limit``
    (``timeout`` for the clocks), never the host.

    Attributes:
        timeout_s: wall-clock seconds the script itself may run. Time spent waiting for agent replies and
            tools is not counted (the model's speed is not the script's fault); the host kills the worker
            when the script's own time runs out.
        total_timeout_s: optional wall-clock cap on the whole execution, agent calls included.
        memory_mb: address-space limit of the worker process while the script runs (RLIMIT_AS).
        cpu_s: CPU-seconds limit of the script (RLIMIT_CPU, a backstop behind ``timeout_s``);
            default ``ceil(timeout_s) + 1``.
        max_agent_calls: agent calls per execution (each request of a ``parallel`` counts).
        max_total_tokens: tokens all agents may generate together; each request's ``max_tokens`` is cut to
            what is left, and a call is refused once nothing is left.
        max_tool_calls: tool calls per execution.
        max_output_chars: characters the script may print.
        max_message_chars: characters of one agent request (system prompt, memory and message together).
        max_answer_chars: characters of the submitted answer.
    """

    timeout_s: float = 30.0
    total_timeout_s: float | None = None
    memory_mb: int = 512
    cpu_s: float | None = None
    max_agent_calls: int = 32
    max_total_tokens: int = 65_536
    max_tool_calls: int = 16
    max_output_chars: int = 20_000
    max_message_chars: int = 200_000
    max_answer_chars: int = 200_000

    def __post_init__(self) -> None:
        def positive(name: str, integer: bool, minimum: float = 0.0) -> None:
            value = getattr(self, name)
            ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
            if isinstance(value, bool) or not ok_type or not value > minimum or not math.isfinite(value):
                kind = "an integer" if integer else "a number"
                raise LimitsError(f"limits.{name} must be {kind} > {minimum:g}, got {value!r}")

        positive("timeout_s", False)
        if self.total_timeout_s is not None:
            positive("total_timeout_s", False)
        positive("memory_mb", True, 63)
        if self.cpu_s is not None:
            positive("cpu_s", False)
        for name in (
            "max_agent_calls",
            "max_total_tokens",
            "max_output_chars",
            "max_message_chars",
            "max_answer_chars",
        ):
            positive(name, True)
        if (
            isinstance(self.max_tool_calls, bool)
            or not isinstance(self.max_tool_calls, int)
            or self.max_tool_calls < 0
        ):
            raise LimitsError(f"limits.max_tool_calls must be an integer >= 0, got {self.max_tool_calls!r}")

    @property
    def cpu_seconds(self) -> int:
        """The RLIMIT_CPU budget in whole seconds."""
        return max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s + 1))

    def replace(self, **changes: Any) -> Limits:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def coerce(cls, value: Limits | Mapping[str, Any] | None, base: Limits | None = None) -> Limits:
        """A Limits from None (the ``base`` or defaults), a Limits, or a mapping of some fields."""
        if value is None:
            return base or cls()
        if isinstance(value, Limits):
            return value
        if not isinstance(value, Mapping):
            raise LimitsError(f"limits must be a Limits or a dict of its fields, got {type(value).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise LimitsError(f"unknown limit(s) {unknown}; known limits: {sorted(names)}")
        return dataclasses.replace(base or cls(), **dict(value))
