"""Answer F1 for question answering (UnityMAS-O's QA reward; SQuAD's normalisation and token F1).

``normalize_answer``: lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace.
``token_f1(pred, gold)``: F1 of the token multisets of the normalised texts; both empty -> 1, one empty -> 0.
``answer_f1(pred, golds)``: the best F1 over the gold answers (a missing prediction scores 0).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def answer_f1(pred: str | None, golds: Iterable[str]) -> float:
    """max over ``golds`` of :func:`token_f1`; 0 for a missing prediction. ``golds`` must not be empty."""
    golds = [str(g) for g in golds]
    if not golds:
        raise ValueError("answer_f1 needs at least one gold answer")
    if pred is None:
        return 0.0
    return max(token_f1(pred, g) for g in golds)


def extract_qa_answer(text: str | None) -> str | None:
    """The answer inside the last ``<answer>...</answer>``, else the text itself (stripped); None if empty."""
    if not text:
        return None
    found = _ANSWER_TAG.findall(text)
    answer = (found[-1] if found else text).strip()
    return answer or None
