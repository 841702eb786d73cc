"""The message protocol between agents (paper App. B): deliverables travel inside ``<delivery>`` tags.

Shared by the sandbox (what an agent call returns to the script) and the format reward (whether a turn
followed the protocol), so both read a response the same way.
"""

from __future__ import annotations

DELIVERY_OPEN = "<delivery>"
DELIVERY_CLOSE = "</delivery>"

#: appended to every agent's system prompt; the executor stops generating at DELIVERY_CLOSE
AGENT_PROTOCOL = (
    "You are one agent in a team working on a task. Think step by step. End your reply with the message "
    f"for your team inside {DELIVERY_OPEN}...{DELIVERY_CLOSE}: your result, short and self-contained."
)


def extract_delivery(text: str) -> str | None:
    """Content of the last complete ``<delivery>...</delivery>`` block, stripped; None when there is none.

    Blocks are read left to right, each from an opening tag to the next closing tag (so a stray opening tag
    inside a block is content). An opened but unclosed block (e.g. generation cut at max_tokens) does not
    count. Linear in the length of ``text``.
    """
    last, pos = None, 0
    while (start := text.find(DELIVERY_OPEN, pos)) >= 0:
        end = text.find(DELIVERY_CLOSE, start + len(DELIVERY_OPEN))
        if end < 0:
            break
        last, pos = text[start + len(DELIVERY_OPEN) : end], end + len(DELIVERY_CLOSE)
    return None if last is None else last.strip()


def agent_system_prompt(role_prompt: str) -> str:
    """The system message an agent is called with: its role prompt, then the team protocol."""
    role_prompt = role_prompt.strip()
    return f"{role_prompt}\n\n{AGENT_PROTOCOL}" if role_prompt else AGENT_PROTOCOL
