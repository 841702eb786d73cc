"""The chat-example format of SFT data (what TRL and verl read): one ``{"messages": [...], ...}`` object per
line, the last message the assistant turn to train on. Written by :mod:`metaagent.distill`, read by
:mod:`metaagent.sft`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from metaagent.errors import MetaAgentError

CHAT_ROLES = ("system", "user", "assistant")


class ExampleError(MetaAgentError, ValueError):
    """An SFT example is malformed; the message names the field and the fix."""


def example_id(messages: list[dict[str, str]]) -> str:
    """Content hash of a conversation (the dedupe key): same messages, same id."""
    blob = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def validate_example(example: Any, where: str = "example") -> list[dict[str, str]]:
    """Check the chat format; return the messages. The last message must be the assistant's target."""
    if not isinstance(example, Mapping) or "messages" not in example:
        raise ExampleError(f"{where}: expected an object with a 'messages' list, got {str(example)[:80]!r}")
    messages = example["messages"]
    if not isinstance(messages, list) or len(messages) < 2:
        raise ExampleError(f"{where}: 'messages' must list at least a prompt message and the assistant reply")
    for i, m in enumerate(messages):
        if (
            not isinstance(m, Mapping)
            or m.get("role") not in CHAT_ROLES
            or not isinstance(m.get("content"), str)
        ):
            raise ExampleError(
                f"{where}: messages[{i}] must be {{'role': one of {CHAT_ROLES}, 'content': str}}, got {str(m)[:80]!r}"
            )
        if m["role"] == "system" and i != 0:
            raise ExampleError(f"{where}: messages[{i}] is a system message; only the first may be")
    if messages[-1]["role"] != "assistant":
        raise ExampleError(f"{where}: the last message must be the assistant reply to train on")
    if messages[-2]["role"] == "assistant":
        raise ExampleError(f"{where}: the assistant reply must follow a user (or system) message")
    return [{"role": m["role"], "content": m["content"]} for m in messages]
