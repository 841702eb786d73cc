"""An example task domain in one file: ``arith``, whose answer is one integer, scored by exact match.

This is everything a new domain needs (metaagent/domain.py): what a task carries (a gold ``answer``), how an
answer is scored and formatted, and the sentence the designer reads. Load it with
``METAAGENT_DOMAINS=arith_domain`` (the module on the path) or by importing it.
"""

from __future__ import annotations

import re

from metaagent.domain import Domain, Verdict, register_domain

_INT = re.compile(r"-?\d+")


def final_integer(answer: str | None) -> int | None:
    """The last integer written in ``answer`` (None when there is none)."""
    found = _INT.findall(answer or "")
    return int(found[-1]) if found else None


def score(task, execution, cfg) -> Verdict:
    pred = final_integer(execution.answer)
    return Verdict(float(pred is not None and pred == int(task.answer)), {"arith": {"pred": pred, "gold": task.answer}})


ARITH = register_domain(
    Domain(
        name="arith",
        reference="gold answer",
        has_reference=lambda task: task.answer is not None and _INT.fullmatch(str(task.answer).strip()) is not None,
        score=score,
        solution_format=lambda answer, fences: float(final_integer(answer) is not None),
        answer_hint="The final answer is one integer.",
    )
)
