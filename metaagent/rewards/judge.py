"""Judges: a model (or a rule) that scores agent turns from a prompt template — MAPPA's coach, the
helpfulness and prefix judges of evaluation-aligned credit.

A judge is three parts:

- a :class:`JudgeTemplate`: system prompt and user template, filled from an item's fields with
  ``str.format`` (``{role}``, ``{input}``, ``{output}``, ``{reference}``... whatever the caller provides);
- a backend: any :class:`~metaagent.policy.base.Policy` — :class:`~metaagent.policy.openai_backend.OpenAIPolicy`
  for an API or a local vLLM server, the local ``HFPolicy``, or :func:`rule_judge` (deterministic, for tests
  and CPU demos);
- a parser from the reply to a number (:func:`parse_score`: the last ``SCORE: x`` line, in a range).

A reply that cannot be parsed, or a backend that fails, is an error: the item's reward is
``TurnReward(total=None, error=...)`` and ``judge/errors`` counts it. There is no silent default score
(MAPPA's code falls back to 5.0; here that would have to be an explicit caller choice).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metaagent.policy.base import ChatRequest, Policy, PolicyError, SamplingParams
from metaagent.policy.scripted import ScriptedPolicy
from metaagent.records import TurnReward

from .errors import RewardError

_SCORE_RE = re.compile(r"SCORE\s*[:=]\s*([-+]?\d+(?:\.\d+)?)", re.IGNORECASE)


class JudgeError(RewardError):
    """A judge is misconfigured (template fields, score range); the message names the fix."""


@dataclass(frozen=True)
class JudgeTemplate:
    """The judge's prompt. ``user`` is formatted with the item's fields; the reply must end with a
    ``SCORE: <number>`` line in ``[low, high]``."""

    name: str
    system: str
    user: str
    low: float = 0.0
    high: float = 10.0

    def messages(self, item: Mapping[str, Any]) -> list[dict[str, str]]:
        try:
            user = self.user.format(**item)
        except KeyError as e:
            raise JudgeError(f"judge {self.name!r}: the item has no field {e} its template needs") from None
        system = [{"role": "system", "content": self.system}] if self.system else []  # "": one user prompt
        return [*system, {"role": "user", "content": user}]


#: MAPPA's coach (per-action process score 0-10); only the final action is shown the reference
COACH = JudgeTemplate(
    name="coach",
    system=(
        "You are a coach for a team of AI agents. Score one action of one agent for how much it helps the team "
        "solve the task, from 0 (harmful or useless) to 10 (exactly right). Explain briefly, then end with a "
        "line 'SCORE: <number>'."
    ),
    user="Task:\n{task}\n\nAgent role: {role}\n\nThe agent's input:\n{input}\n\nThe agent's output:\n{output}\n{reference}",
)


def parse_score(text: str, low: float, high: float) -> float:
    """The last ``SCORE: x`` in ``text``; raises ``ValueError`` when there is none or it is out of range."""
    found = _SCORE_RE.findall(text or "")
    if not found:
        raise ValueError(f"no 'SCORE: <number>' line in the judge's reply {text[:80]!r}")
    score = float(found[-1])
    if not low <= score <= high:
        raise ValueError(f"judge score {score} is outside [{low}, {high}]")
    return score


def rule_judge(rule: Callable[[str], float], name: str = "rule") -> Policy:
    """A deterministic judge backend for tests and CPU runs: ``rule(user_prompt) -> score``."""
    return ScriptedPolicy(lambda req: f"SCORE: {rule(req.messages[-1]['content'])}", model_id=name)


class Judge:
    """Scores items with ``template`` through ``backend``; thread-safe. ``counts`` holds ``judge/calls``,
    ``judge/errors`` (parse or backend failures), ``judge/parse_errors`` and ``judge/backend_errors``."""

    def __init__(
        self,
        template: JudgeTemplate,
        backend: Policy,
        *,
        sampling: SamplingParams | None = None,
        parser: Callable[[str, float, float], float] = parse_score,
        normalise: bool = True,
        format_retries: int = 0,
        reminder: str = "",
        fallback: float | None = None,
    ) -> None:
        if not template.high > template.low:
            raise JudgeError(f"judge {template.name!r}: high ({template.high}) must exceed low ({template.low})")
        self.template = template
        self.backend = backend
        self.sampling = sampling or SamplingParams(max_tokens=256, temperature=0.0)
        self.parser = parser
        self.normalise = normalise
        if format_retries < 0:
            raise JudgeError(f"judge {template.name!r}: format_retries must be >= 0, got {format_retries}")
        if fallback is not None and not template.low <= fallback <= template.high:
            raise JudgeError(f"judge {template.name!r}: fallback {fallback} is outside [{template.low}, {template.high}]")
        self.format_retries = format_retries
        self.reminder = reminder or "Your reply could not be read. End it with the score line exactly as asked."
        self.fallback = fallback
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, key: str, n: int = 1) -> None:
        if not n:
            return
        with self._lock:
            self.counts[key] += n

    def score(self, items: Sequence[Mapping[str, Any]]) -> list[TurnReward]:
        """One :class:`TurnReward` per item (source ``judge``): the score, scaled to [0, 1] when
        ``normalise``, with the raw score and reply in ``details``; ``total=None`` and ``error`` on failure.

        A reply the parser cannot read is asked again up to ``format_retries`` times, with the reply and
        ``reminder`` appended to the conversation (``judge/format_retries``). A judgment that still fails is
        counted in ``judge/errors``; with ``fallback`` set it then scores ``fallback`` instead
        (``judge/fallbacks``, ``components["fallback"] = 1``: MAPPA's code does this with 5.0).
        """
        if not items:
            return []
        t = self.template
        conversations = [t.messages(item) for item in items]
        self._count("judge/calls", len(items))
        out: list[TurnReward | None] = [None] * len(items)
        errors: dict[int, tuple[str, str, str]] = {}  # item -> (error, last reply, kind)
        pending = list(range(len(items)))
        for attempt in range(self.format_retries + 1):
            if attempt:
                self._count("judge/format_retries", len(pending))
            try:
                completions = self.backend.generate([ChatRequest(conversations[n], self.sampling) for n in pending])
            except PolicyError as e:
                self._count("judge/backend_errors", len(pending))
                for n in pending:
                    errors[n] = (f"judge {t.name!r} backend failed: {e}", "", "backend")
                break
            retry = []
            for n, c in zip(pending, completions):
                reply = c.text
                try:
                    raw = self.parser(reply, t.low, t.high)
                except ValueError as e:
                    errors[n] = (f"judge {t.name!r}: {e}", reply, "parse")
                    conversations[n] = [*conversations[n], {"role": "assistant", "content": reply}, {"role": "user", "content": self.reminder}]
                    retry.append(n)
                    continue
                errors.pop(n, None)
                value = (raw - t.low) / (t.high - t.low) if self.normalise else raw
                details = {"judge": t.name, "reply": reply[:500], "attempts": attempt + 1}
                out[n] = TurnReward(value, "judge", components={"score": raw}, details=details)
            pending = retry
            if not pending:
                break
        self._count("judge/errors", len(errors))
        self._count("judge/parse_errors", sum(kind == "parse" for _, _, kind in errors.values()))
        for n, (error, reply, _) in errors.items():
            if self.fallback is None:
                out[n] = TurnReward(None, "judge", error=error, details={"reply": reply[:500]})
            else:
                self._count("judge/fallbacks")
                value = (self.fallback - t.low) / (t.high - t.low) if self.normalise else self.fallback
                out[n] = TurnReward(value, "judge", components={"score": self.fallback, "fallback": 1.0},
                                    details={"judge": t.name, "reply": reply[:500], "fallback_for": error})  # fmt: skip
        return [r for r in out if r is not None]

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {k: float(v) for k, v in sorted(self.counts.items())}
