r"""Math answers: extract the final answer from agent text and decide whether it equals the gold answer.

Paper App. B: "The final parsed answer is evaluated against the ground-truth solution ... we utilize a
symbolic math engine (e.g., SymPy) to robustly verify the correctness."

* :func:`extract_answer` takes the last ``\boxed{...}`` / ``\fbox{...}`` (nested braces allowed), else the
  last match of the configurable fallback patterns ("Final answer: ...", "The answer is ...", a bare
  one-line answer). It reads at most the last :data:`MAX_TEXT_CHARS` characters, in linear time.
* :func:`check_math` returns a :class:`MathCheck` with a status: ``correct``, ``incorrect``, ``no_answer``
  (nothing to compare: a computed 0), ``timeout`` or ``error`` (the verifier itself failed: not a 0), and the
  shortcut class the answer tried, if any (:mod:`metaagent.rewards.shortcuts`).

How equivalence is decided, in order:

1. An answer that re-states the question's expression (``\boxed{16 + 19}`` for "What is 16 + 19?") is
   incorrect (:func:`~metaagent.rewards.shortcuts.copies_question`).
2. The reference is a plain number (integer, decimal, ``a/b``, ``\frac{a}{b}``, scientific notation, with
   percentages, thousands separators, degrees, units, currency and LaTeX spacing normalised away): under
   ``final_form="strict"`` the answer must be a number too (an expression such as ``\sqrt{1225}`` or an
   unreduced ``70/2`` is incorrect). That rule is an explicit option for *rewards* (the math domain's scorer
   passes ``reward.domains.math.final_form``, default strict: an unevaluated literal copied from the task must not
   pay); the library functions :func:`check_math` and :func:`math_equal` default to ``"lenient"``, so a
   library user keeps math-verify's symbolic equivalence (``\pi`` = ``3.14159265358979``, ``\binom{5}{2}`` =
   ``10``, ``5!`` = ``120``, ``\log_2 8`` = ``3``). Numbers are compared exactly when the reference is an integer or
   a fraction, within ``rel_tol`` (default 1e-6, relative to the reference) when it is a decimal with a
   fractional part. Non-finite and astronomically large answers equal no finite reference. Done in the
   calling thread; bounded work on short strings.
3. Identical normalised strings are equal.
4. Otherwise math-verify (``parse`` + ``verify``, which use sympy: radicals, pi, intervals, sets, tuples,
   equations such as ``x=3`` vs ``3``, units) runs in a helper process with its own signal-based timeouts
   disabled; the deadline ``timeout_s`` (CPU seconds of the helper; the wall clock allows 3x, so a busy
   machine does not fail a check) is enforced by killing the helper. A prediction that makes it miss the
   deadline (or exhaust memory or recursion) is ``incorrect``; only when the reference alone cannot be
   verified is the status ``timeout`` / ``error``. If math-verify says no, closed-form finite numbers are
   compared numerically with ``rel_tol`` relative to the reference.

Thread- and process-safe: the calling side uses no signals and no global state except the per-process
helper pool (:func:`metaagent.execution.worker_pool.shared_pool`) and a cache of verifiable references.
"""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from metaagent.execution.worker_pool import WorkerPool, helper_count, shared_pool

from . import shortcuts
from .numbers import Number, brace_pairs, clean_answer, final_number, normalize_answer, numbers_equal
from .errors import CheckTimeout, ExecutionError, RewardError

DEFAULT_REL_TOL = 1e-6
DEFAULT_TIMEOUT_S = 5.0

#: Fallback patterns tried (in order) when there is no ``\boxed{}``; the last match of the first pattern
#: that matches wins. Each has a named group ``answer``; matching is case-insensitive.
DEFAULT_FALLBACKS: tuple[str, ...] = (
    r"final answer(?:\s+is)?\s*[:：]?\s*(?P<answer>[^\n]+)",
    r"the answer is\s*[:：]?\s*(?P<answer>[^\n]+)",
    # the whole (stripped) text is one short line without prose words (4+ letters not after "\\"), e.g. "12",
    # "x = 3"; anchored at both ends with no leading \s*, so it runs in linear time
    r"\A(?!.*(?<![\\a-zA-Z])[a-zA-Z]{4,})(?P<answer>[^\n]{1,64})\Z",
)

MATH_STATUSES = ("correct", "incorrect", "no_answer", "timeout", "error")

MATH_WORKERS = helper_count("METAAGENT_MATH_WORKERS")
_WORKER_SCRIPT = str(Path(__file__).with_name("_math_worker.py"))


# ---- extraction -------------------------------------------------------------------------------------------

#: answers are read from the last MAX_TEXT_CHARS characters of a reply (the final answer ends it), so the
#: cost of extraction is bounded whatever a policy writes
MAX_TEXT_CHARS = 16_000

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])\s*")
_BARE_TOKEN_RE = re.compile(r"[^\s$]+")
_CUT_RE = re.compile(r"\.\s|\s(?:because|since|which|so|as)\b", re.IGNORECASE)


def find_boxed(text: str) -> str | None:
    r"""Content of the last complete ``\boxed{...}`` / ``\fbox{...}`` (or ``\boxed 5``), None if there is none.

    Linear in the length of ``text`` (one pass pairs every brace), and reads at most the last
    :data:`MAX_TEXT_CHARS` characters.
    """
    text = text[-MAX_TEXT_CHARS:]
    pairs: dict[int, int] | None = None
    for match in reversed(list(_BOX_RE.finditer(text))):
        end = match.end()
        if end < len(text) and text[end] == "{":
            pairs = brace_pairs(text) if pairs is None else pairs
            close = pairs.get(end)
            content = None if close is None else text[end + 1 : close]
        else:
            token = _BARE_TOKEN_RE.match(text, end)
            content = token.group(0) if token and match.group(0).endswith(" ") else None
        if content is not None and content.strip():
            return content.strip()
    return None


def extract_answer(text: str | None, *, fallbacks: tuple[str, ...] = DEFAULT_FALLBACKS) -> str | None:
    r"""The final answer in ``text``: the last ``\boxed{}``, else the last match of the first matching fallback.

    Only the last :data:`MAX_TEXT_CHARS` characters are read (stripped), so extraction is bounded; the
    default patterns run in linear time (user patterns are the user's responsibility).
    """
    if not text:
        return None
    text = text[-MAX_TEXT_CHARS:].strip()
    boxed = find_boxed(text)
    if boxed is not None:
        return clean_answer(boxed)
    for pattern in fallbacks:
        matches = list(re.finditer(pattern, text, re.IGNORECASE))
        if not matches:
            continue
        answer = matches[-1].group("answer")
        cut = _CUT_RE.search(answer)
        answer = clean_answer(answer[: cut.start()] if cut else answer)
        if answer:
            boxed = find_boxed(answer)
            return clean_answer(boxed) if boxed else answer
    return None


def _alternatives(answer: str) -> list[str]:
    """Spellings that count as this answer: a percentage ``p%`` may be read as ``p`` or as ``p/100``."""
    text, is_percent = normalize_answer(answer)
    if not text:
        return []
    return [text, f"\\frac{{{text}}}{{100}}"] if is_percent else [text]


# ---- numbers and the final-form rule -------------------------------------------------------------------------

#: how an answer to a plain-number reference must be written: ``strict`` (a number: integer, decimal, fraction in
#: lowest terms, percent; units, currency, spacing and ``x =`` normalised away) or ``lenient`` (any expression
#: symbolically equal to the reference). A copy of the question's expression is incorrect in both.
FINAL_FORMS = ("strict", "lenient")


def _number_shortcut(golds: list[Number], preds: list[Number], rel_tol: float) -> str:
    """Which shortcut a wrong number tried: astronomically large (``unbounded``), or equal to an integer or
    fraction reference only within a tolerance (``inexact_number``); "" for an honest mistake."""
    top = max(abs(g.value) for g in golds)
    if any(abs(p.value) > 10**shortcuts.UNBOUNDED_ORDERS * max(1, top) for p in preds):
        return "unbounded"
    tol = Fraction(rel_tol)
    if any(abs(p.value - g.value) <= tol * max(abs(p.value), abs(g.value)) for g in golds for p in preds):
        return "inexact_number"
    return ""


# ---- the check --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MathCheck:
    """Outcome of comparing a predicted answer with the gold answer."""

    status: str  # one of MATH_STATUSES
    pred: str | None
    gold: str
    method: str = ""  # numeric | final_form | question_copy | string | math_verify | unparsed | ""
    detail: str = ""
    elapsed_s: float = 0.0
    shortcut: str = ""  # a class of metaagent.rewards.shortcuts.SHORTCUT_CLASSES the answer tried, or ""

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


_GOLD_VERIFIES: dict[tuple[str, ...], bool] = {}
_GOLD_LOCK = threading.Lock()
_GOLD_CACHE_SIZE = 4096


def _verify(gold: list[str], pred: list[str], rel_tol: float, timeout_s: float) -> dict:
    """One math-verify request; ``{"timeout": True}`` when it missed its deadline."""
    payload = {"gold": gold, "pred": pred, "float_rounding": max(0, round(-math.log10(rel_tol))), "rel_tol": rel_tol}
    try:
        return _math_pool().call(payload, timeout_s)
    except CheckTimeout:
        return {"ok": False, "timeout": True, "error": f"math check did not finish within {timeout_s:g}s"}
    except (RewardError, ExecutionError) as e:  # the helper could not start or died: the verifier failed
        return {"ok": False, "error": str(e)}


def _gold_verifies(gold: list[str], rel_tol: float, timeout_s: float) -> bool:
    """Whether the verifier decides the reference against itself in time (cached per reference): when it does,
    a deadline or resource failure on a prediction was caused by the prediction."""
    key = tuple(gold)
    with _GOLD_LOCK:
        if key in _GOLD_VERIFIES:
            return _GOLD_VERIFIES[key]
    answer = _verify(gold, gold, rel_tol, timeout_s)
    verdict = bool(answer.get("ok") and answer.get("equal"))
    with _GOLD_LOCK:
        if len(_GOLD_VERIFIES) >= _GOLD_CACHE_SIZE:
            _GOLD_VERIFIES.clear()
        _GOLD_VERIFIES[key] = verdict
    return verdict


def _symbolic(gold: list[str], pred: list[str], rel_tol: float, timeout_s: float) -> tuple[str, str, str, str]:
    """``(status, method, detail, shortcut)`` of math-verify on the alternatives. A prediction that makes the
    verifier miss its deadline (or run out of memory or recursion) is ``incorrect`` with the shortcut
    ``verifier_timeout``, provided the reference alone verifies; otherwise the verifier failed: ``timeout`` or
    ``error``, not a verdict."""
    answer = _verify(gold, pred, rel_tol, timeout_s)
    if not answer.get("ok"):
        detail = str(answer.get("error", "unknown error in the math helper"))
        if answer.get("timeout") or answer.get("resource"):
            if _gold_verifies(gold, rel_tol, timeout_s):
                return "incorrect", "math_verify", f"the prediction stalled the verifier: {detail}", "verifier_timeout"
            return ("timeout" if answer.get("timeout") else "error"), "", detail, ""
        return "error", "", detail, ""
    detail = f"gold={answer.get('gold_parsed', '')} pred={answer.get('pred_parsed', '')}"
    shortcut = "unbounded" if answer.get("pred_non_finite") and not answer["equal"] else ""
    return ("correct" if answer["equal"] else "incorrect"), str(answer.get("method", "")), detail, shortcut


def check_math(
    pred: str | None,
    gold: str | None,
    *,
    rel_tol: float = DEFAULT_REL_TOL,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    final_form: str = "lenient",
    question: str | None = None,
) -> MathCheck:
    """Compare an extracted answer ``pred`` with ``gold`` (see the module doc for the rules).

    ``pred`` is an answer string (use :func:`extract_answer` on agent text first); None or blank gives
    ``no_answer``. A missing ``gold`` gives ``error``. ``question`` (the task's text) lets the check refuse an
    answer that copies the question's expression. ``final_form``: ``"lenient"`` (default: any expression
    math-verify finds equal) or ``"strict"`` (a plain-number reference needs a number; what rewards use, see the
    module doc). Never raises for bad input; see :func:`math_equal`.
    """
    if final_form not in FINAL_FORMS:
        raise ValueError(f"final_form must be one of {FINAL_FORMS}, got {final_form!r}")
    start = time.monotonic()
    gold_text = "" if gold is None else str(gold)

    def result(status: str, method: str = "", detail: str = "", shortcut: str = "") -> MathCheck:
        return MathCheck(status, pred, gold_text, method, detail, time.monotonic() - start, shortcut)

    gold_alts = _alternatives(gold_text) if gold_text.strip() else []
    if not gold_alts:
        return result("error", detail="the task has no gold answer")
    pred_alts = _alternatives(pred) if pred is not None and pred.strip() else []
    if not pred_alts:
        return result("no_answer")
    assert pred is not None
    if shortcuts.copies_question(pred, question):
        return result("incorrect", "question_copy", "the answer re-states the question's expression", "question_copy")

    gold_numbers = final_number(gold_text, strict=False)
    if gold_numbers is not None:
        pred_numbers = final_number(pred, strict=final_form == "strict")
        if pred_numbers is not None:
            if any(numbers_equal(g, p, rel_tol) for g in gold_numbers for p in pred_numbers):
                return result("correct", "numeric")
            return result("incorrect", "numeric", shortcut=_number_shortcut(gold_numbers, pred_numbers, rel_tol))
        if shortcuts.names_non_finite(pred):
            return result("incorrect", "numeric", "not a finite number", "unbounded")
        if final_form == "strict":
            # the verdict is made; the lenient re-check only tells the counters what the answer tried
            lenient = _symbolic(gold_alts, pred_alts, rel_tol, timeout_s)
            would_pay = {"correct": "non_final_form"}.get(lenient[0], "")
            return result(
                "incorrect",
                "final_form",
                "the reference is a number and the answer is not one (reward.domains.math.final_form=strict)",
                lenient[3] or would_pay,
            )
    if {_squash(a) for a in gold_alts} & {_squash(a) for a in pred_alts}:
        return result("correct", "string")
    return result(*_symbolic(gold_alts, pred_alts, rel_tol, timeout_s))


def math_equal(pred: str | None, gold: str, **kwargs: Any) -> bool:
    r"""True iff ``pred`` equals ``gold``; a missing prediction is False.

    Symbolic equivalence by default (``final_form="lenient"``: ``\sqrt{3}`` equals ``1.7320508075688772``,
    ``5!`` equals ``120``); pass ``final_form="strict"`` (and ``question=``) for the reward's final-form and
    question-copy rules. Safe in any thread: math-verify's signal timeouts are disabled and the helper
    process is killed at the deadline instead.

    Raises :class:`RewardError` when no verdict could be reached (the verifier itself failed), so a failed
    check is never mistaken for a wrong answer.
    """
    check = check_math(pred, gold, **kwargs)
    if not check.computed:
        raise RewardError(f"math check {check.status}: {check.detail}")
    return check.correct
