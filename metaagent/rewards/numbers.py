r"""Numbers as answers are written: normalisation of LaTeX variants, and exact parsing and comparison.

Shared by the math check (:mod:`.math`: a plain-number reference wants a number) and the shortcut detectors
(:mod:`.shortcuts`: a number is never a copy of the question). Pure functions on short strings; no sympy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

MAX_ANSWER_CHARS = 2000
#: a decimal answer to a fraction with no finite decimal expansion (1/3) must be that fraction correctly rounded
#: to the places written, with at least this many significant digits ("0.333333" yes, "0.33" no)
MIN_ROUNDED_DIGITS = 6


def clean_answer(answer: str) -> str | None:
    """Strip markdown bold, math delimiters and a box around the whole answer, and trailing punctuation."""
    answer = answer.strip().strip("*").strip().rstrip(".,;").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if answer.startswith(left) and answer.endswith(right) and len(answer) >= len(left) + len(right) + 1:
            answer = answer[len(left) : len(answer) - len(right)].strip().rstrip(".,;").strip()
    for _ in range(3):  # a box or two around the whole answer; bounded, so nested boxes cost linear time
        if (inner := _unbox(answer)) is None:
            break
        answer = inner
    return answer[:MAX_ANSWER_CHARS] or None


def brace_pairs(text: str) -> dict[int, int]:
    r"""``{open index: close index}`` of every balanced brace group, in one pass (escaped ``\{`` ``\}`` skipped)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # an escaped character (\{, \}, \\) is never a group brace
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def _unbox(answer: str) -> str | None:
    r"""The content of ``\boxed{...}`` / ``\fbox{...}`` when that box is the whole answer, else None."""
    for head in ("\\boxed{", "\\fbox{"):
        if answer.startswith(head) and brace_pairs(answer).get(len(head) - 1) == len(answer) - 1:
            return answer[len(head) : -1].strip()
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
    text = clean_answer(answer) or ""
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


# ---- numbers ---------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?\d{1,1000}")
_DECIMAL_RE = re.compile(r"[+-]?(?:\d{1,1000}\.\d{0,1000}|\.\d{1,1000}|\d{1,1000})(?:[eE][+-]?\d{1,3})?")
_SLASH_RE = re.compile(r"([+-]?)\(?(\d{1,500})\)?/\(?(\d{1,500})\)?")
_FRAC_RE = re.compile(r"([+-]?)\\frac(?:\{(\d{1,500})\}\{(\d{1,500})\}|(\d)(\d))")
_UNIT_WRAP_RE = re.compile(r"\\(?:text|mathrm|textrm|textbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT_WORD_RE = re.compile(r"\s+[a-zA-Z]+(?:\^\{?[23]\}?)?(?:/[a-zA-Z]+(?:\^\{?[23]\}?)?)?\s*$")
_CURRENCY_RE = re.compile(r"^(?:\\\$|\$|€|£|¥)\s*")
_ASSIGN_RE = re.compile(r"^[a-zA-Z](?:_\{?[a-zA-Z0-9]{1,8}\}?)?\s*=\s*")
MAX_UNIT_WORDS = 3


@dataclass(frozen=True)
class Number:
    """A number as written: its exact value and the form it was written in."""

    value: Fraction
    kind: str  # "integer" | "decimal" | "fraction"
    places: int = 0  # decimals: places written after the point (scientific notation included)
    digits: int = 0  # decimals: significant digits written
    reduced: bool = True  # fractions: in lowest terms with a denominator above 1

    def scaled(self, factor: Fraction, places: int) -> Number:
        return Number(self.value * factor, self.kind, self.places + places, self.digits, self.reduced)


def parse_number(text: str) -> Number | None:
    """An integer, a decimal (``3.50``, ``.5``, ``1e-7``), ``a/b`` or ``\\frac{a}{b}``; None for anything else."""
    text = text.replace(" ", "")
    if _INT_RE.fullmatch(text):
        return Number(Fraction(int(text)), "integer")
    if _DECIMAL_RE.fullmatch(text):
        decimal = Decimal(text)
        _, digits, exponent = decimal.as_tuple()
        assert isinstance(exponent, int)  # finite by the pattern
        return Number(Fraction(decimal), "decimal", max(0, -exponent), len(digits))
    m = _SLASH_RE.fullmatch(text)
    sign, num, den = (m.group(1), m.group(2), m.group(3)) if m else ("", "", "")
    if not m and (m := _FRAC_RE.fullmatch(text)):
        sign, num, den = m.group(1), m.group(2) or m.group(4), m.group(3) or m.group(5)
    if not num or int(den) == 0:
        return None
    value = Fraction(int(num), int(den)) * (-1 if sign == "-" else 1)
    return Number(value, "fraction", reduced=int(den) > 1 and math.gcd(int(num), int(den)) == 1)


def _strip_units(text: str) -> str:
    r"""``\text{..}`` unwrapped, a leading currency sign, a leading ``x =`` and up to three trailing unit words
    removed: ``10 \text{ cm}``, ``\$35``, ``x = 3``, ``35 apples`` are numbers; ``5 or 6`` is not."""
    text = _UNIT_WRAP_RE.sub(r" \1 ", text).strip()
    text = _CURRENCY_RE.sub("", _ASSIGN_RE.sub("", text))
    for _ in range(MAX_UNIT_WORDS):
        stripped = _UNIT_WORD_RE.sub("", text)
        if stripped == text:
            break
        text = stripped
    return text.strip()


def final_number(answer: str, *, strict: bool = True) -> list[Number] | None:
    """The alternatives of ``answer`` read as a number (a percentage ``p%`` is ``p`` or ``p/100``), or None when
    it is not one. ``strict`` also refuses a fraction that is not in lowest terms (``48/6``): unevaluated."""
    text, is_percent = normalize_answer(answer)
    number = parse_number(_strip_units(text))
    if number is None or (strict and number.kind == "fraction" and not number.reduced):
        return None
    return [number, number.scaled(Fraction(1, 100), 2)] if is_percent else [number]


def _terminates(value: Fraction) -> bool:
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    return den == 1


def numbers_equal(gold: Number, pred: Number, rel_tol: float) -> bool:
    """Integer and fraction references are compared exactly; a decimal reference with a fractional part (a
    rounded real) within ``rel_tol`` of the reference; a fraction without a finite decimal expansion also
    accepts its correct rounding to the places written (>= MIN_ROUNDED_DIGITS significant digits)."""
    if pred.value == gold.value:
        return True
    if gold.kind == "decimal" and gold.value.denominator != 1:
        return abs(pred.value - gold.value) <= Fraction(rel_tol) * abs(gold.value)
    if gold.kind == "fraction" and pred.kind == "decimal" and not _terminates(gold.value):
        scale = 10**pred.places
        return pred.digits >= MIN_ROUNDED_DIGITS and Fraction(round(gold.value * scale), scale) == pred.value
    return False
