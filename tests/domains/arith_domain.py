"""An example task domain in one file, with its own data and settings: ``arith``, whose answer is one integer.

This file is everything a new domain needs (metaagent/domain.py), besides its task file ``arith_tasks.jsonl``:

- what a task carries (a gold integer ``answer``), how an answer is scored and formatted, the sentence the
  designer reads, the single-agent baseline (eval's ``sa``);
- its voting key: eval's maj@k and serve's majority vote on the last integer of an answer (``votes=True``);
- its own setting, ``reward.domains.arith.tolerance`` (:class:`ArithSettings`);
- its own data source ``arith`` (``data.train=[{source: arith, split: train}]``, ``--benchmarks arith:test``):
  the task file beside this module, in the format of docs/guide/own-tasks.md.

Load it by naming the module in ``METAAGENT_DOMAINS`` (``METAAGENT_DOMAINS=arith_domain`` with this folder on
``PYTHONPATH``): every command then knows the domain, its source and its setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import NonNegativeInt

from metaagent.config import Checked
from metaagent.data import register_source, task_file_source
from metaagent.domain import Domain, Verdict, register_domain, text_key

_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class ArithSettings(Checked):
    """The arith domain's settings, ``reward.domains.arith``."""

    tolerance: NonNegativeInt = 0  # an answer at most this far from the gold integer is correct (0: exact)


def final_integer(answer: str | None) -> int | None:
    """The last integer written in ``answer`` (None when there is none)."""
    found = _INT.findall(answer or "")
    return int(found[-1]) if found else None


def score(task, execution, cfg) -> Verdict:
    """R_correct: 1 when the answer's last integer is within ``tolerance`` of the gold one, else 0."""
    pred, tolerance = final_integer(execution.answer), cfg.domain_settings("arith").tolerance
    correct = pred is not None and abs(pred - int(task.answer)) <= tolerance
    return Verdict(float(correct), {"arith": {"pred": pred, "gold": task.answer, "tolerance": tolerance}})


def answer_key(answer: str) -> str:
    """The voting key: the answer's last integer ("It is 5" and "5" are one vote), else the text itself."""
    pred = final_integer(answer)
    return str(pred) if pred is not None else text_key(answer)


ARITH = register_domain(
    Domain(
        name="arith",
        reference="gold answer",
        has_reference=lambda task: task.answer is not None and _INT.fullmatch(str(task.answer).strip()) is not None,
        score=score,
        solution_format=lambda answer, fences: float(final_integer(answer) is not None),
        answer_key=answer_key,
        votes=True,
        answer_hint="The final answer is one integer.",
        solo_script='solver = Agent("Solver", "Answer with one integer.")\nsubmit(solver(task))\n',
        settings=ArithSettings,
    )
)
TASKS = register_source(
    task_file_source("arith", Path(__file__).with_name("arith_tasks.jsonl"), domain="arith",
                     note="sums of two small integers (the example domain's own task file)")
)  # fmt: skip
