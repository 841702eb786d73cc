"""Per-execution limits of a sandboxed workflow script."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import Field

from metaagent.config import check_fields
from metaagent.errors import MetaAgentError

Seconds = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, gt=0)]


class LimitsError(MetaAgentError, ValueError):
    """A limit is malformed; the message names the field and what to set."""


@dataclass(frozen=True)
class Limits:
    """What one execution may use. Exceeding a limit ends the execution with status ``limit``
    (``timeout`` for the clocks), never the host.

    Attributes:
        timeout_s: wall-clock seconds the script itself may run. Time spent waiting for agent replies and
            tools is not counted here (the model's speed is not the script's fault; tools have their own
            budget); the host kills the worker when the script's own time runs out.
        total_timeout_s: wall-clock cap on the whole execution, agent and tool calls included (a tool call
            in progress is cut at it); None: no cap (every shipped config sets one).
        tool_time_s: wall-clock seconds all tool calls of one execution may take together, a budget of their
            own; a program a tool runs is stopped when it runs out, and the next tool call ends the execution
            (``limit``, ToolTimeLimit). None (the default): tool calls have no budget of their own and count
            against ``timeout_s`` like the script's own time, so ``run_script(..., {"timeout_s": T})`` returns
            within T (plus a small grace) whatever its tools do; the shipped configs set 60 s explicitly.
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

    timeout_s: Seconds = 30.0
    total_timeout_s: Seconds | None = None
    tool_time_s: Seconds | None = None
    memory_mb: Annotated[int, Field(strict=True, gt=63)] = 512
    cpu_s: Seconds | None = None
    max_agent_calls: Count = 32
    max_total_tokens: Count = 65_536
    max_tool_calls: Annotated[int, Field(strict=True, ge=0)] = 16
    max_output_chars: Count = 20_000
    max_message_chars: Count = 200_000
    max_answer_chars: Count = 200_000

    field_label: ClassVar[Callable[[str], str]] = staticmethod(lambda name: f"limits.{name}")

    def __post_init__(self) -> None:
        check_fields(self, LimitsError)

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
