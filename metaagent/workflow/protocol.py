"""The message protocol between agents (paper App. B): deliverables travel inside ``<delivery>`` tags.

Shared by the sandbox (what an agent call returns to the script) and the format reward (whether a turn
followed the protocol), so both read a response the same way.
"""

from __future__ import annotations

import re

DELIVERY_OPEN = "<delivery>"
DELIVERY_CLOSE = "</delivery>"

#: appended to every agent's system prompt; the executor stops generating at DELIVERY_CLOSE
AGENT_PROTOCOL = (
    "You are one agent in a team working on a task. Think step by step. End your reply with the message "
    f"for your team inside {DELIVERY_OPEN}...{DELIVERY_CLOSE}: your result, short and self-contained."
)

_DELIVERY_RE = re.compile(re.escape(DELIVERY_OPEN) + r"(.*?)" + re.escape(DELIVERY_CLOSE), re.DOTALL)


def extract_delivery(text: str) -> str | None:
    """Content of the last complete ``<delivery>...</delivery>`` block, stripped; None when there is none.

    An opened but unclosed block (e.g. generation cut at max_tokens) does not count.
    """
    blocks = _DELIVERY_RE.findall(text)
    if not blocks:
        return None
    return blocks[-1].strip()


def agent_system_prompt(role_prompt: str) -> str:
    """The system message an agent is called with: its role prompt, then the team protocol."""
    role_prompt = role_prompt.strip()
    return f"{role_prompt}\n\n{AGENT_PROTOCOL}" if role_prompt else AGENT_PROTOCOL
