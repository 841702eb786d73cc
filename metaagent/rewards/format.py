r"""The format reward R_format (paper App. B), a regulariser with two components in [0, 1]:

1. **Solution formatting** - the final answer is reliably parseable for its domain: a ``\boxed{}`` answer
   for math, a fenced program for code.
2. **Delivery formatting** - inter-agent messages are enclosed in ``<delivery>...</delivery>``: the
   fraction of the execution's agent turns whose response contains a complete delivery block
   (read with :func:`metaagent.workflow.protocol.extract_delivery`, the same reader the sandbox uses).
   An execution with no agent turns delivered nothing and scores 0; an empty block delivers nothing.

``R_format`` is the mean of the two, and 0 for an execution that never submitted an answer (and, in
:func:`metaagent.rewards.score.score_execution`, for one in which no agent call ran).
"""

from __future__ import annotations

from collections.abc import Sequence

from metaagent.execution.code import DEFAULT_FENCE_LANGUAGES, extract_program
from metaagent.records import AgentTurn, Execution

from ..workflow.protocol import extract_delivery
from .math import find_boxed


def solution_format(
    domain: str, answer: str | None, *, fence_languages: tuple[str, ...] = DEFAULT_FENCE_LANGUAGES
) -> float:
    r"""1.0 when ``answer`` holds a ``\boxed{}`` answer (math) or a fenced program (code), else 0.0."""
    if not answer:
        return 0.0
    if domain == "math":
        return float(find_boxed(answer) is not None)
    if domain == "code":
        return float(extract_program(answer, languages=fence_languages) is not None)
    if domain == "plan":  # a move list or a grid / step list after the final-answer mark
        from metaagent.envs.base import parse_actions, parse_final, parse_json

        final = parse_final(answer)
        return float(parse_actions(final) is not None or isinstance(parse_json(final), list))
    if domain == "qa":
        return float(bool(answer.strip()))
    raise ValueError(f"unknown domain {domain!r}; expected 'math', 'code', 'plan' or 'qa'")


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
