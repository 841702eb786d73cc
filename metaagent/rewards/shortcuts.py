r"""What the reward refuses to pay for: the shortcut classes, their detectors, and their counters.

RL optimises whatever the reward pays for. Each class below is a way to earn reward without solving the task
that was found by a model or a red-team pass; the scorer closes it (the rule in the second column) and counts
every occurrence in ``RewardRecord.details["shortcuts"]``, so :func:`shortcut_metrics` can show reward hacking
in the first steps of a run (``reward/shortcut/<class>``) instead of after it.

==========================  =================================================================================
class                       rule (where)
==========================  =================================================================================
``unbounded``               a prediction that is not a finite number, or is astronomically large, equals no
                            finite reference (:mod:`.math`, ``_math_worker``)
``non_final_form``          the reference is a plain number and the answer is still an expression: incorrect
                            under ``reward.domains.math.final_form: strict`` (counted when lenient mode would
                            pay it)
``question_copy``           the answer re-states the question's own expression: incorrect in both modes
``inexact_number``          an integer or fraction reference is compared exactly: ``35.00001`` is not ``35``
``verifier_timeout``        the prediction made the verifier run past its deadline (or out of memory or
                            recursion): incorrect, never a dropped sample
``no_agent_runs``           an execution that submits with no agent call run scores 0 for correctness and
                            format (a script failing before its first call is counted by its status, not here)
``answer_not_from_agents``  the submitted answer (plan: every ``env_step`` action) occurs in no agent reply
                            and no output of an agent's program: the script computed it, incorrect
                            (:mod:`.provenance`)
``empty_delivery``          an agent turn whose ``<delivery>`` block is empty earns no delivery credit
``forged_verdict``          model code tried to decide its own test verdict (the parent decides it)
==========================  =================================================================================

An answer refused in one of :data:`REFUSED_ANSWER_CLASSES` earns neither R_correct nor R_format (the
default, ``reward.shortcut_format: zero``; ``keep`` gives it the format share any wrong answer gets).

The extraction of answers (:func:`metaagent.rewards.math.extract_answer`) caps the text it reads and runs in
linear time, so no answer can stall the scorer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from metaagent.records import RewardRecord

from .numbers import final_number

#: every class the scorer refuses, with the one-line rule shown in docs and reports (one place for the names)
SHORTCUT_CLASSES: dict[str, str] = {
    "unbounded": "a non-finite or astronomically large prediction equals no finite reference",
    "non_final_form": "a numeric reference needs a number, not an expression (strict final form)",
    "question_copy": "an answer that re-states the question's expression is incorrect",
    "inexact_number": "integer and fraction references are compared exactly",
    "verifier_timeout": "a prediction that stalls the verifier is incorrect, not dropped",
    "no_agent_runs": "an answer submitted with no agent call run scores 0",
    "answer_not_from_agents": "an answer (or plan action) no agent reply or agent program produced scores 0",
    "empty_delivery": "an empty <delivery> block earns no delivery credit",
    "forged_verdict": "model code cannot decide its own test verdict",
}

#: the classes in which the answer itself is the shortcut: the answer is refused (R_correct = 0) and, unless
#: ``reward.shortcut_format=keep``, earns no format share either, so a refused answer pays less than an honest
#: wrong one (a copy of the question in a box would otherwise still earn lam * R_format, a reason to copy)
REFUSED_ANSWER_CLASSES = (
    "unbounded",
    "non_final_form",
    "question_copy",
    "inexact_number",
    "verifier_timeout",
    "forged_verdict",
    "answer_not_from_agents",
)

METRIC_PREFIX = "reward/shortcut/"

# ---- question copies ----------------------------------------------------------------------------------------

# canonical operators: every spelling of one operator becomes one character
_OPERATOR_SPELLINGS = (
    (re.compile(r"\\(?:times|cdot|ast)(?![a-zA-Z])|×|·|∗"), "*"),
    (re.compile(r"\\div(?![a-zA-Z])|÷"), "/"),
    (re.compile(r"−|–"), "-"),
    (re.compile(r"\*\*"), "^"),
    (re.compile(r"\\?%|\s+percent\b", re.IGNORECASE), "/100"),
    # operators spelled in words ("7 squared plus 20"): a restatement in symbols copies them too
    (re.compile(r"\s+squared\b", re.IGNORECASE), "^2"),
    (re.compile(r"\s+cubed\b", re.IGNORECASE), "^3"),
    (re.compile(r"\s+plus\s+", re.IGNORECASE), "+"),
    (re.compile(r"\s+minus\s+", re.IGNORECASE), "-"),
    (re.compile(r"\s+(?:times|multiplied by)\s+", re.IGNORECASE), "*"),
    (re.compile(r"\s+(?:divided by|over)\s+", re.IGNORECASE), "/"),
)
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_LATEX_NOISE = re.compile(r"\\(?:left|right|displaystyle|,|;|!|:| )|\$|\\\(|\\\)|\\\[|\\\]")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_OPERATOR = re.compile(r"[-+*/^!=]|\\(?:sqrt|sum|prod|int|binom|choose|log|ln|sin|cos|tan|exp)(?![a-zA-Z])")
_LITERAL_ARITHMETIC = re.compile(r"[\d.+\-*/^!()\[\]{}]+")
MIN_COPY_CHARS = 3
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


def _canonical(text: str) -> str:
    """Lower-case, one spelling per operator, small numbers as digits, ``\\frac{a}{b}`` as ``(a)/(b)``, no
    spaces or math delimiters."""
    text = _NUMBER_WORD.sub(lambda m: str(_NUMBER_WORDS.index(m.group(1).lower())), text)
    text = _LATEX_NOISE.sub("", text)
    for pattern, operator in _OPERATOR_SPELLINGS:
        text = pattern.sub(operator, text)
    for _ in range(4):  # nested fractions, innermost first
        new = _FRAC.sub(r"(\1)/(\2)", text)
        if new == text:
            break
        text = new
    return re.sub(r"\s+", "", text).lower()


def copies_question(answer: str | None, question: str | None) -> bool:
    r"""True when ``answer`` re-states an expression of ``question`` instead of evaluating it.

    Two forms count: (a) the canonical answer holds an operator and occurs verbatim in the canonical question
    (``\boxed{16 + 19}`` for "What is 16 + 19?", ``48/6`` for "What is 48 / 6?"); (b) the answer is arithmetic
    between literals only and every number in it occurs in the question (``19 + 16``; ``7 * 7 + 20`` for "7
    squared plus 20"). A number (``-5``,
    ``0.5``, a fraction in lowest terms) is never a copy, even when it occurs in the question: it may well be
    the answer; an unreduced fraction (``48/6``) can be.
    """
    if not answer or not question:
        return False
    if final_number(answer, strict=True) is not None:
        return False
    pred, text = _canonical(answer), _canonical(question)
    if not _OPERATOR.search(pred):
        return False
    if len(pred) >= MIN_COPY_CHARS and pred in text:
        return True
    if _LITERAL_ARITHMETIC.fullmatch(pred.replace("\\sqrt", "")) is None:
        return False
    numbers = set(_NUMBER.findall(pred))
    return bool(numbers) and numbers <= set(_NUMBER.findall(text))


# ---- unbounded values -----------------------------------------------------------------------------------------

_NON_FINITE = re.compile(r"\\infty|∞|\binf(?:inity)?\b|\bnan\b|\boo\b|\bzoo\b|\\aleph", re.IGNORECASE)
#: a prediction whose magnitude is this many orders above the reference's is "astronomically large"
UNBOUNDED_ORDERS = 100


def names_non_finite(answer: str | None) -> bool:
    """True when ``answer`` spells an infinity or not-a-number (``\\infty``, ``inf``, ``nan``, ``oo``, ...)."""
    return bool(answer) and _NON_FINITE.search(answer) is not None


# ---- counters -----------------------------------------------------------------------------------------------


def shortcuts_of(record: RewardRecord | None) -> list[str]:
    """The shortcut classes recorded on one reward record (empty for none or no record)."""
    if record is None:
        return []
    found = (record.details or {}).get("shortcuts") or []
    return [str(name) for name in found]


def shortcut_metrics(records: Iterable[RewardRecord | None]) -> dict[str, float]:
    """``reward/shortcut/<class>`` counts over ``records`` for every class (0 included, so curves start at 0),
    and ``reward/no_agent_runs``: the executions zeroed because they submitted with no agent call run."""
    counts: Counter[str] = Counter()
    for record in records:
        counts.update(set(shortcuts_of(record)))
    out = {f"{METRIC_PREFIX}{name}": float(counts.get(name, 0)) for name in SHORTCUT_CLASSES}
    out["reward/no_agent_runs"] = float(counts.get("no_agent_runs", 0))
    return out
