r"""Math answers: extract the final answer from agent text and decide whether it equals the gold answer.

Paper App. B: "The final parsed answer is evaluated against the ground-truth solution ... we utilize a
symbolic math engine (e.g., SymPy) to robustly verify the correctness."

* :func:`extract_answer` takes the last ``\boxed{...}`` / ``\fbox{...}`` (nested braces allowed), else the
  last match of the configurable fallback patterns ("Final answer: ...", "The answer is ...", a bare
  one-line answer).
* :func:`check_math` returns a :class:`MathCheck` with a status: ``correct``, ``incorrect``, ``no_answer``
  (nothing to compare: a computed 0), ``timeout`` or ``error`` (the check could not be made: not a 0).

How equivalence is decided, in order:

1. Both sides are plain numbers (integers, decimals, ``a/b``, ``\frac{a}{b}``, scientific notation, with
   percentages, thousands separators, degrees and LaTeX spacing normalised away): compared exactly when
   both are integers or fractions, else with relative tolerance ``rel_tol`` (default 1e-6). Done in the
   calling thread; bounded work on short strings.
2. Identical normalised strings are equal.
3. Otherwise math-verify (``parse`` + ``verify``, which use sympy: radicals, pi, intervals, sets, tuples,
   equations such as ``x=3`` vs ``3``, units) runs in a helper process with its own signal-based timeouts
   disabled; the deadline ``timeout_s`` is enforced by killing the helper, and a miss is reported as status
   ``timeout``. If math-verify says no, closed-form numbers are compared numerically with ``rel_tol``.

Thread- and process-safe: the calling side uses no signals and no global state except the per-process
helper pool (:func:`metaagent.execution.worker_pool.shared_pool`).
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from metaagent.execution.worker_pool import WorkerPool, shared_pool

from .errors import CheckTimeout, ExecutionError, RewardError

DEFAULT_REL_TOL = 1e-6
DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 2000

#: Fallback patterns tried (in order) when there is no ``\boxed{}``; the last match of the first pattern
#: that matches wins. Each has a named group ``answer``; matching is case-insensitive.
DEFAULT_FALLBACKS: tuple[str, ...] = (
    r"final answer(?:\s+is)?\s*[:：]?\s*(?P<answer>[^\n]+)",
    r"the answer is\s*[:：]?\s*(?P<answer>[^\n]+)",
    # the whole text is one short line without prose words (4+ letters not after "\\"), e.g. "12", "x = 3"
    r"\A\s*(?!.*(?<![\\a-zA-Z])[a-zA-Z]{4,})(?P<answer>[^\n]{1,64}?)\s*\Z",
)

MATH_STATUSES = ("correct", "incorrect", "no_answer", "timeout", "error")

MATH_WORKERS = max(1, min(4, int(os.environ.get("METAAGENT_MATH_WORKERS", os.cpu_count() or 1))))
_WORKER_SCRIPT = str(Path(__file__).with_name("_math_worker.py"))


# ---- extraction -------------------------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])\s*")
_CUT_RE = re.compile(r"\.\s|\s(?:because|since|which|so|as)\b", re.IGNORECASE)


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at ``text[start] == '{'`` (nested braces), None if unclosed."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "\\":
            continue
        if c == "{" and text[i - 1 : i] != "\\":
            depth += 1
        elif c == "}" and text[i - 1 : i] != "\\":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def find_boxed(text: str) -> str | None:
    r"""Content of the last complete ``\boxed{...}`` / ``\fbox{...}`` (or ``\boxed 5``), None if there is none."""
    for match in reversed(list(_BOX_RE.finditer(text))):
        end = match.end()
        if end < len(text) and text[end] == "{":
            content = _braced(text, end)
        else:
            token = re.match(r"[^\s$]+", text[end:])
            content = token.group(0) if token and match.group(0).endswith(" ") else None
        if content is not None and content.strip():
            return content.strip()
    return None


def _clean(answer: str) -> str | None:
    """Strip markdown bold, math delimiters around the whole answer and trailing punctuation."""
    answer = answer.strip().strip("*").strip().rstrip(".,;").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if answer.startswith(left) and answer.endswith(right) and len(answer) >= len(left) + len(right) + 1:
            answer = answer[len(left) : len(answer) - len(right)].strip().rstrip(".,;").strip()
    return answer[:MAX_ANSWER_CHARS] or None


def extract_answer(text: str | None, *, fallbacks: tuple[str, ...] = DEFAULT_FALLBACKS) -> str | None:
    r"""The final answer in ``text``: the last ``\boxed{}``, else the last match of the first matching fallback."""
    if not text:
        return None
    boxed = find_boxed(text)
    if boxed is not None:
        return _clean(boxed)
    for pattern in fallbacks:
        matches = list(re.finditer(pattern, text, re.IGNORECASE))
        if not matches:
            continue
        answer = matches[-1].group("answer")
        cut = _CUT_RE.search(answer)
        answer = _clean(answer[: cut.start()] if cut else answer)
        if answer:
            boxed = find_boxed(answer)
            return _clean(boxed) if boxed else answer
    return None


# ---- normalisation ----------------------------------------------------------------------------------------

_UNICODE = {"−": "-", "–": "-", "×": "\\times ", "÷": "\\div ", "π": "\\pi ", "∞": "\\infty ", "·": "\\cdot "}
_SPACING_RE = re.compile(r"\\[,!;: ]|~")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)(?![a-zA-Z])\s*\.?")
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![a-zA-Z])")
_PERCENT_RE = re.compile(r"\s*\\?%\s*$")
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def normalize_answer(answer: str) -> tuple[str, bool]:
    r"""LaTeX-variant normalisation; returns ``(text, is_percent)``.

    Unicode symbols to LaTeX, ``\dfrac``/``\tfrac`` to ``\frac``, ``\left``/``\right`` and spacing commands
    (``\,`` ``\!`` ``\;`` ``~``) removed, degree marks removed, a trailing ``%`` removed and reported,
    thousands separators in a lone number removed.
    """
    text = _clean(answer) or ""
    for old, new in _UNICODE.items():
        text = text.replace(old, new)
    text = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", text)
    text = _LEFT_RIGHT_RE.sub("", text)
    text = _SPACING_RE.sub("", text)
    text = _DEGREE_RE.sub("", text)
    is_percent = bool(_PERCENT_RE.search(text))
    text = _PERCENT_RE.sub("", text).strip()
    if _THOUSANDS_RE.fullmatch(text):
        text = text.replace(",", "")
    return text, is_percent


def _alternatives(answer: str) -> list[str]:
    """Spellings that count as this answer: a percentage ``p%`` may be read as ``p`` or as ``p/100``."""
    text, is_percent = normalize_answer(answer)
    if not text:
        return []
    return [text, f"\\frac{{{text}}}{{100}}"] if is_percent else [text]


# ---- plain-number fast path -------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?\d{1,60}")
_DECIMAL_RE = re.compile(r"[+-]?(?:\d{1,60}\.\d{0,60}|\.\d{1,60}|\d{1,60})(?:[eE][+-]?\d{1,3})?")
_SLASH_RE = re.compile(r"([+-]?\d{1,30})\s*/\s*(\d{1,30})")
_FRAC_RE = re.compile(r"([+-]?)\\frac\{\s*(\d{1,30})\s*\}\{\s*(\d{1,30})\s*\}")


def _plain_number(text: str) -> tuple[Fraction, bool] | None:
    """``(value, exact)`` for a plain number; ``exact`` is False for decimals (compared with tolerance)."""
    text = text.replace(" ", "")
    if _INT_RE.fullmatch(text):
        return Fraction(int(text)), True
    if _DECIMAL_RE.fullmatch(text):
        return Fraction(text), False
    m = _SLASH_RE.fullmatch(text)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2))), True
    m = _FRAC_RE.fullmatch(text)
    if m and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return (-value if m.group(1) == "-" else value), True
    return None


def _plain_alternatives(alternatives: list[str]) -> list[tuple[Fraction, bool]] | None:
    values = []
    for alt in alternatives:
        if alt.startswith("\\frac{") and alt.endswith("}{100}"):  # percentage alternative p/100
            inner = _plain_number(alt[len("\\frac{") : -len("}{100}")])
            if inner is None:
                return None
            values.append((inner[0] / 100, inner[1]))
            continue
        value = _plain_number(alt)
        if value is None:
            return None
        values.append(value)
    return values


def _numbers_equal(a: tuple[Fraction, bool], b: tuple[Fraction, bool], rel_tol: float) -> bool:
    (x, x_exact), (y, y_exact) = a, b
    if x == y:
        return True
    if x_exact and y_exact:
        return False
    return abs(x - y) <= Fraction(rel_tol) * max(abs(x), abs(y))


# ---- the check --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MathCheck:
    """Outcome of comparing a predicted answer with the gold answer."""

    status: str  # one of MATH_STATUSES
    pred: str | None
    gold: str
    method: str = ""  # numeric | string | math_verify | unparsed | ""
    detail: str = ""
    elapsed_s: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def computed(self) -> bool:
        """True when the check reached a verdict (correct, incorrect, no_answer); False for timeout/error."""
        return self.status in ("correct", "incorrect", "no_answer")


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _math_pool() -> WorkerPool:
    return shared_pool("math-verify", [sys.executable, "-I", _WORKER_SCRIPT], MATH_WORKERS)


def check_math(
    pred: str | None,
    gold: str | None,
    *,
    rel_tol: float = DEFAULT_REL_TOL,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> MathCheck:
    """Compare an extracted answer ``pred`` with ``gold`` (see the module doc for the rules).

    ``pred`` is an answer string (use :func:`extract_answer` on agent text first); None or blank gives
    ``no_answer``. A missing ``gold`` gives ``error``. Never raises for bad input; see :func:`math_equal`.
    """
    start = time.monotonic()
    gold_text = "" if gold is None else str(gold)

    def result(status: str, method: str = "", detail: str = "") -> MathCheck:
        return MathCheck(status, pred, gold_text, method, detail, time.monotonic() - start)

    gold_alts = _alternatives(gold_text) if gold_text.strip() else []
    if not gold_alts:
        return result("error", detail="the task has no gold answer")
    pred_alts = _alternatives(pred) if pred is not None and pred.strip() else []
    if not pred_alts:
        return result("no_answer")

    gold_numbers, pred_numbers = _plain_alternatives(gold_alts), _plain_alternatives(pred_alts)
    if gold_numbers is not None and pred_numbers is not None:
        equal = any(_numbers_equal(g, p, rel_tol) for g in gold_numbers for p in pred_numbers)
        return result("correct" if equal else "incorrect", "numeric")
    if {_squash(a) for a in gold_alts} & {_squash(a) for a in pred_alts}:
        return result("correct", "string")

    payload = {
        "gold": gold_alts,
        "pred": pred_alts,
        "float_rounding": max(0, round(-math.log10(rel_tol))),
        "rel_tol": rel_tol,
    }
    try:
        answer = _math_pool().call(payload, timeout_s)
    except CheckTimeout:
        return result("timeout", detail=f"math check did not finish within {timeout_s:g}s")
    except (RewardError, ExecutionError) as e:
        return result("error", detail=str(e))
    if not answer.get("ok"):
        return result("error", detail=str(answer.get("error", "unknown error in the math helper")))
    detail = f"gold={answer.get('gold_parsed', '')} pred={answer.get('pred_parsed', '')}"
    return result("correct" if answer["equal"] else "incorrect", str(answer.get("method", "")), detail)


def math_equal(pred: str | None, gold: str, **kwargs: float) -> bool:
    """True iff ``pred`` equals ``gold``; a missing prediction is False.

    Raises :class:`RewardError` when no verdict could be reached (timeout or error), so a failed check is
    never mistaken for a wrong answer.
    """
    check = check_math(pred, gold, **kwargs)
    if not check.computed:
        raise RewardError(f"math check {check.status}: {check.detail}")
    return check.correct
