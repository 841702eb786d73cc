r"""Math: a gold ``answer``; the final answer (``\boxed{}`` or a fallback phrase) is checked against it
(:mod:`metaagent.rewards.math`) under the domain's settings (``reward.domains.math``: :class:`MathSettings`);
serve votes on the normalised final answer; eval reports maj@k."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat

from metaagent.config import Checked, ConfigError
from metaagent.data.tasks import Task
from metaagent.domain import Domain, Verdict, register_domain, short_key
from metaagent.domains.code import TEMPLATE_TWINS as CODE_TWINS
from metaagent.records import Execution
from metaagent.rewards.math import (
    DEFAULT_FALLBACKS,
    DEFAULT_REL_TOL,
    DEFAULT_TIMEOUT_S,
    FINAL_FORMS,
    check_math,
    extract_answer,
    find_boxed,
    normalize_answer,
)
from metaagent.rewards.provenance import answer_from_agents
from metaagent.rewards.score import RewardConfig


@dataclass(frozen=True)
class MathSettings(Checked):
    """The math domain's settings, ``reward.domains.math`` (e.g. ``reward.domains.math.final_form=lenient``)."""

    rel_tol: Annotated[float, Field(gt=0, lt=1)] = DEFAULT_REL_TOL  # relative tolerance of numeric answers
    timeout_s: PositiveFloat = DEFAULT_TIMEOUT_S  # CPU seconds one math check (symbolic equality) may take
    # an answer to a plain-number reference must be a number ("strict") or may be any symbolically equal
    # expression ("lenient"); a copy of the question's expression is incorrect in both (rewards/shortcuts.py)
    final_form: Literal[FINAL_FORMS] = "strict"
    answer_fallbacks: tuple[str, ...] = DEFAULT_FALLBACKS  # regexes with a named group (?P<answer>...)

    def __post_init__(self) -> None:
        super().__post_init__()
        for pattern in self.answer_fallbacks:
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"answer_fallbacks: {pattern!r} is not a valid regex: {e}") from None
            if "answer" not in compiled.groupindex:
                raise ConfigError(f"answer_fallbacks: {pattern!r} needs a named group (?P<answer>...) for the answer")


def score(task: Task, execution: Execution, cfg: RewardConfig) -> Verdict:
    settings: MathSettings = cfg.domain_settings("math")
    pred = extract_answer(execution.answer, fallbacks=settings.answer_fallbacks) if execution.answer else None
    if pred is not None and not answer_from_agents("math", pred, execution, task.question):
        said = "no agent reply and no output of an agent's program states this answer"
        details = {"math": {"status": "incorrect", "pred": pred, "gold": task.answer, "method": "provenance",
                            "detail": said}}  # fmt: skip
        return Verdict(0.0, details, ("answer_not_from_agents",))
    check = check_math(
        pred,
        task.answer,
        rel_tol=settings.rel_tol,
        timeout_s=settings.timeout_s,
        final_form=settings.final_form,
        question=task.question,
    )
    details = {
        "math": {
            "status": check.status,
            "pred": pred,
            "gold": task.answer,
            "method": check.method,
            "detail": check.detail,
            "elapsed_s": check.elapsed_s,
        }
    }
    shortcuts = (check.shortcut,) if check.shortcut else ()
    if not check.computed:
        return Verdict(None, details, shortcuts, f"math_{check.status}", f"math check {check.status}: {check.detail}")
    return Verdict(float(check.correct), details, shortcuts)


def answer_key(answer: str) -> str:
    """The extracted final answer, LaTeX variants normalised, spaces removed (else the whole text)."""
    final = extract_answer(answer)
    text = normalize_answer(final)[0] if final else answer.strip()
    return short_key(re.sub(r"\s+", "", text) or answer.strip())


MATH = register_domain(
    Domain(
        name="math",
        reference="gold answer",
        needs="a gold 'answer' (or split='adhoc' for none)",
        has_reference=lambda task: task.answer is not None,
        valid=lambda task: task.answer is not None and bool(str(task.answer).strip()),
        score=score,
        solution_format=lambda answer, fences: float(find_boxed(answer) is not None),
        answer_key=answer_key,
        votes=True,
        answer_hint="The final answer must be submitted in \\boxed{}.",
        solo_script='solver = Agent("Assistant", "Answer the question. Put the final answer in \\\\boxed{}.")\n'
        "submit(solver(task))\n",
        template_twins=tuple((code, math) for math, code in CODE_TWINS),
        boxed_answer=True,
        settings=MathSettings,
        served=True,
        guess_default=True,
    )
)
