"""Pick one answer among several executions: ``first``, ``majority`` or ``judge``.

Candidates are the executions that ended ``ok`` with a non-empty answer, in (design, execution) order.

- ``first``: the first candidate.
- ``majority``: answers are grouped by a normalised key (the domain's ``answer_key``) — math: the extracted final answer
  (``\\boxed{}`` or "answer is ...", LaTeX variants normalised, spaces removed); code: the extracted program
  with blank lines and trailing spaces removed (shown as ``sha1:<8 hex>``). The largest group wins; ties go
  to the group seen first. Equivalent answers written differently (``1/2`` vs ``0.5``) are separate groups.
- ``judge``: one extra executor call reads the task and the distinct candidates and names the best by its
  number inside ``<delivery>``. If its reply names no valid number, majority decides and ``note`` says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from metaagent.domain import MAX_KEY_CHARS, get_domain  # noqa: F401  (MAX_KEY_CHARS: the longest key in `votes`)
from metaagent.records import Design
from metaagent.workflow.protocol import DELIVERY_CLOSE, DELIVERY_OPEN, agent_system_prompt, extract_delivery

MAX_CANDIDATE_CHARS = 4000  # per candidate, in the judge's prompt
JUDGE_PROMPT = (
    "You are a judge. Several teams answered the same task independently. Read the task and the numbered "
    "candidate answers, decide which one is correct, and give only its number as your result."
)


@dataclass
class Candidate:
    design: int
    execution: int
    answer: str
    key: str


def answer_key(answer: str, domain: str) -> str:
    """The voting key of an answer: its domain's ``answer_key`` (see the module docstring)."""
    return get_domain(domain).answer_key(answer)


def collect(designs: Sequence[Design], domain: str) -> list[Candidate]:
    out = []
    for d in designs:
        for e in d.executions:
            if e.status == "ok" and e.answer and e.answer.strip():
                out.append(Candidate(d.index, e.index, e.answer, answer_key(e.answer, domain)))
    return out


def tally(candidates: Sequence[Candidate]) -> dict[str, int]:
    """Votes per key, in order of first appearance."""
    votes: dict[str, int] = {}
    for c in candidates:
        votes[c.key] = votes.get(c.key, 0) + 1
    return votes


def majority(candidates: Sequence[Candidate]) -> Candidate:
    votes = tally(candidates)
    best = max(votes, key=lambda k: votes[k])  # max keeps the first of equal counts: ties go to the earliest
    return next(c for c in candidates if c.key == best)


def distinct(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One representative (the first) per key."""
    seen: dict[str, Candidate] = {}
    for c in candidates:
        seen.setdefault(c.key, c)
    return list(seen.values())


def judge_messages(task: str, options: Sequence[Candidate]) -> list[dict[str, str]]:
    """The judge's prompt: the task and the numbered distinct candidates (1-based)."""
    blocks = []
    for i, c in enumerate(options, 1):
        text = c.answer if len(c.answer) <= MAX_CANDIDATE_CHARS else c.answer[:MAX_CANDIDATE_CHARS] + "\n...[cut]"
        blocks.append(f"Candidate {i}:\n{text}")
    user = (
        f"Task:\n{task}\n\n" + "\n\n".join(blocks) + f"\n\nWhich candidate is correct? Reply with its number "
        f"(1 to {len(options)}) inside {DELIVERY_OPEN}...{DELIVERY_CLOSE}."
    )
    return [{"role": "system", "content": agent_system_prompt(JUDGE_PROMPT)}, {"role": "user", "content": user}]


def parse_choice(text: str, n: int) -> int | None:
    """The 1-based candidate number the judge named: the first number in its delivery (else in its last
    line) that is in 1..n; None when there is none."""
    delivery = extract_delivery(text)
    lines = text.strip().splitlines()
    for source in (delivery, lines[-1] if lines else None):
        if source is None:
            continue
        for match in re.finditer(r"\d+", source):
            k = int(match.group())
            if 1 <= k <= n:
                return k
    return None
