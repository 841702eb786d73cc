r"""The format reward R_format (paper App. B), a regulariser with two components in [0, 1]:

1. **Solution formatting** - the final answer is reliably parseable for its domain: a ``\boxed{}`` answer
   for math, a fenced program for code (each domain's rule: :mod:`metaagent.domains`).
2. **Delivery formatting** - inter-agent messages are enclosed in ``<delivery>...</delivery>``: the
   fraction of the execution's agent turns whose response contains a complete delivery block
   (read with :func:`metaagent.workflow.protocol.extract_delivery`, the same reader the sandbox uses).
   An execution with no agent turns delivered nothing and scores 0; an empty block delivers nothing.

``R_format`` is the mean of the two, and 0 for an execution that never submitted an answer (and, in
:func:`metaagent.rewards.score.score_execution`, for one in which no agent call ran).
"""

from __future__ import annotations

from collections.abc import Sequence

from metaagent.domain import get_domain
from metaagent.execution.code import DEFAULT_FENCE_LANGUAGES
from metaagent.records import AgentTurn, Execution

from ..workflow.protocol import extract_delivery


def solution_format(
    domain: str, answer: str | None, *, fence_languages: tuple[str, ...] = DEFAULT_FENCE_LANGUAGES
) -> float:
    r"""1.0 when ``answer`` is parseable for its domain (the domain's ``solution_format``: a ``\boxed{}`` answer
    for math, a fenced program for code, ...), else 0.0. An unknown domain is a :class:`~metaagent.domain.DomainError` (a ValueError)."""
    if not answer:
        return 0.0
    return get_domain(domain).solution_format(answer, fence_languages)


def _delivered(turn: AgentTurn) -> bool | None:
    """True: a complete, non-empty delivery block; False: an empty one; None: none."""
    block = extract_delivery(turn.response)
    return None if block is None else bool(block)


def delivery_format(turns: Sequence[AgentTurn]) -> float:
    """Fraction of ``turns`` whose response contains a complete, non-empty ``<delivery>`` block; 0.0 without
    turns (an empty block delivers nothing and earns nothing)."""
    if not turns:
        return 0.0
    delivered = sum(_delivered(t) is True for t in turns)
    return delivered / len(turns)


def empty_deliveries(turns: Sequence[AgentTurn]) -> int:
    """How many of ``turns`` closed an empty delivery block (counted as the ``empty_delivery`` shortcut)."""
    return sum(_delivered(t) is False for t in turns)


def format_components(
    domain: str, execution: Execution, *, fence_languages: tuple[str, ...] = DEFAULT_FENCE_LANGUAGES
) -> dict[str, float]:
    """``{"solution_format", "delivery_format", "format"}`` for one execution (``format`` = R_format)."""
    solution = solution_format(domain, execution.answer, fence_languages=fence_languages)
    delivery = delivery_format(execution.turns)
    total = (solution + delivery) / 2 if execution.submitted else 0.0
    return {"solution_format": solution, "delivery_format": delivery, "format": total}
