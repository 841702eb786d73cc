"""The two judges of evaluation-aligned credit, built on :class:`metaagent.rewards.judge.Judge`:

- helpfulness ``J(H_{t-1}, m_{i,t})`` (Eq. 5): does this reply, given what the agent saw, move the team toward
  a correct output? Score in [0, 1];
- prefix ``J_Omega(H_t)`` (Eq. 8): is the trajectory so far still on track? Score >= 0.5 is OK, else ERR.

Backends: ``rule:<name>`` (a deterministic rule of :data:`RULES` over the judge prompt, for tests and CPU
runs) or ``policy`` (any policy, e.g. the executor model, as an LLM judge). The rule ``gold`` is math-only:
a reply whose ``\\boxed{}`` answer differs from the reference is unhelpful (a prefix with one is ERR); a reply
with no boxed answer, or the right one, is helpful.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metaagent.policy.base import Policy, SamplingParams
from metaagent.records import AgentTurn
from metaagent.registry import Registry
from metaagent.rewards.errors import RewardError
from metaagent.rewards.judge import Judge, JudgeTemplate, rule_judge
from metaagent.rewards.math import find_boxed, math_equal

_OUTPUT_RE = re.compile(r"<output>(.*?)</output>", re.S)
_REFERENCE_RE = re.compile(r"<reference>(.*?)</reference>", re.S)

HELPFUL = JudgeTemplate(
    name="helpful",
    system=(
        "You judge one message of one agent in a team of AI agents. Given only what the agent saw, does its "
        "message move the team toward a correct final answer? End with 'SCORE: 1' (helpful) or 'SCORE: 0'."
    ),
    user="Task:\n{task}\n<reference>{reference}</reference>\n\nAgent {role} saw:\n{input}\n\nIt replied:\n<output>{output}</output>",
    low=0.0,
    high=1.0,
)

PREFIX = JudgeTemplate(
    name="prefix",
    system=(
        "You judge the beginning of a team of AI agents' work on a task. Is everything so far free of errors, "
        "so that the team can still reach a correct answer? End with 'SCORE: 1' (on track) or 'SCORE: 0' (an error)."
    ),
    user="Task:\n{task}\n<reference>{reference}</reference>\n\nThe messages so far:\n{transcript}",
    low=0.0,
    high=1.0,
)


def _wrong_boxed(output: str, reference: str) -> bool:
    answer = find_boxed(output)
    return answer is not None and not math_equal(answer, reference)


def gold_rule(prompt: str) -> float:
    """1 unless some ``<output>`` block of the prompt boxes an answer that differs from ``<reference>``."""
    ref = _REFERENCE_RE.search(prompt)
    reference = ref.group(1).strip() if ref else ""
    if not reference:
        return 1.0

    try:
        return 0.0 if any(_wrong_boxed(o, reference) for o in _OUTPUT_RE.findall(prompt)) else 1.0
    except RewardError:
        return -1.0  # out of the score range: the judge counts a parse error, never a silent verdict


#: deterministic rule judges by name (``rule:<name>``); plugins: entry points of the group ``metaagent.judge_rules``
RULES: Registry[Callable[[str], float]] = Registry("judge rule", ValueError, group="metaagent.judge_rules")
RULES.register("gold")(gold_rule)


def make_judge(spec: str, template: JudgeTemplate, policy: Policy, max_tokens: int) -> Judge | None:
    """A judge for ``spec`` (``rule:<name>`` | ``policy``), None for ``none`` / ``mc``."""
    if spec in ("none", "mc"):
        return None
    if spec.startswith("rule:"):
        name = spec.split(":", 1)[1]
        backend = rule_judge(RULES.get(name), name=spec)
    else:
        backend = policy
    return Judge(template, backend, sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0))


def helpful_item(task: Mapping[str, Any], turn: AgentTurn) -> dict[str, str]:
    user = next((m["content"] for m in reversed(turn.messages) if m["role"] == "user"), "")
    return {"task": task.get("question", ""), "reference": task.get("answer") or "", "role": turn.role,
            "input": user, "output": turn.response}  # fmt: skip


def prefix_item(task: Mapping[str, Any], turns: Sequence[AgentTurn]) -> dict[str, str]:
    transcript = "\n".join(f"[{t.role}]\n<output>{t.response}</output>" for t in turns)
    return {"task": task.get("question", ""), "reference": task.get("answer") or "", "transcript": transcript}
