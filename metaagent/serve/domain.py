"""Guess a task's domain when the client does not say: ``code`` if the text asks for a program, else ``math``.

The rule (documented in the API): the text is ``code`` when it contains a fenced code block, or any of
:data:`CODE_CUES` (case-insensitive, on word boundaries); everything else is ``math``. Clients that know
the domain should send it (``domain`` in ``/v1/teams``, ``metaagent.domain`` in chat requests).
"""

from __future__ import annotations

import re

CODE_CUES = (
    "write a function",
    "write a program",
    "write code",
    "implement",
    "python",
    "program that",
    "function that",
    "def ",
    "stdin",
    "standard input",
    "input format",
    "output format",
    "class solution",
)
_CUE_RE = re.compile("|".join(rf"\b{re.escape(c.strip())}\b" for c in CODE_CUES), re.IGNORECASE)


def guess_domain(text: str) -> str:
    """``"code"`` or ``"math"`` for ``text`` (see the module docstring)."""
    if "```" in text or _CUE_RE.search(text):
        return "code"
    return "math"
