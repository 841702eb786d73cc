"""A small offline corpus and a BM25 retriever for the QA workflows (UnityMAS-O's ``retrieve`` tool).

The bundled corpus (``qa/corpus.jsonl``: ``{"id", "title", "text"}`` per line, 32 short passages written for
metaagent) holds the facts of the bundled QA set (``qa/qa.jsonl``, source ``bundled_qa``). Real NQ / HotpotQA
training needs a Wikipedia index behind the same tool (e.g. the authors' dense retriever server): a
GPU-machine job, not bundled.

BM25 (k1 = 1.5, b = 0.75) over lower-cased alphanumeric tokens without a few stop words.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError

QA_DIR = Path(__file__).with_name("qa")
CORPUS_FILE = QA_DIR / "corpus.jsonl"
QA_FILE = QA_DIR / "qa.jsonl"
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of in on at to is was which what who whose how and or for by with into from does did".split())


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


class BM25:
    """BM25 over a list of passages; :meth:`search` returns the top ``k`` by score (ties by corpus order)."""

    def __init__(self, passages: list[Passage], *, k1: float = 1.5, b: float = 0.75) -> None:
        if not passages:
            raise DataError("a retriever needs at least one passage")
        self.passages = passages
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(f"{p.title} {p.text}")) for p in passages]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lengths) / len(self.lengths)
        df = Counter(t for d in self.docs for t in d)
        n = len(passages)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        q = tokenize(query)
        out = []
        for doc, length in zip(self.docs, self.lengths):
            s = 0.0
            for t in q:
                tf = doc.get(t, 0)
                if tf:
                    s += self.idf[t] * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length / self.avg))
            out.append(s)
        return out

    def search(self, query: str, k: int = 2) -> list[Passage]:
        scored = [(s, i) for i, s in enumerate(self.scores(query)) if s > 0]
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [self.passages[i] for _, i in scored[:k]]


def load_passages(path: str | Path = CORPUS_FILE) -> list[Passage]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"corpus file {path} is missing")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [Passage(str(r["id"]), str(r.get("title", "")), str(r["text"])) for r in rows]


@functools.lru_cache(maxsize=4)
def corpus_retriever(path: str = str(CORPUS_FILE)) -> BM25:
    """The (cached) BM25 retriever over a corpus file; the bundled corpus by default."""
    return BM25(load_passages(path))
