"""AT-GRPO's math turn rewards (seed 003, App. A.1.2) for the reasoner + Python tool template ``at_math_tool``.

Per candidate, at call time (no environment: the gold answer is the checker):

- Reasoner (any role without "tool" in its name): ``loc = 0.2 s_fmt + 0.8 s_step``, ``s_fmt`` = a ``\\boxed{}``
  answer is present, ``s_step`` = it equals the gold answer (math-verify with sympy fallback, the execution
  reward's own checker :func:`metaagent.rewards.math.check_math`);
- Tool: ``loc = 0.1 s_fmt + 0.1 s_tool + 0.8 s_step``, ``s_fmt`` = a ```python block is present, ``s_tool`` =
  it ran without error or timeout, ``s_step`` = its printed value equals the gold answer;
- ``team`` = correctness of the team's current answer including the candidate (a Reasoner candidate's own
  answer; for a Tool candidate, the latest Reasoner answer of the execution so far). The paper's team reward is
  sparse (only at k = T); at call time we use the team's current answer: our choice, stated.

Presets: ``at_math`` (Eq. 4: ``team + loc``) and ``at_math_lambda`` (appendix: ``0.7 team + 0.3 m loc``).
A checker that could not decide (timeout, parse error) makes the candidate's reward not computable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metaagent.envs import mix_reward
from metaagent.envs.base import role_kind
from metaagent.execution.code import extract_program
from metaagent.records import AgentTurn, TurnReward

from .math import check_math, extract_answer, find_boxed
from .plan import run_tool_program, script_text
from .turn import register_turn_reward


def _correct(text: str | None, gold: str, question: str | None = None) -> float | None:
    check = check_math(extract_answer(text) if text else None, gold, question=question, final_form="strict")
    if check.status in ("correct", "incorrect", "no_answer"):  # decided; timeout / error are not
        return float(check.correct)
    return None


def math_components(task: Mapping[str, Any], turns_so_far: Sequence[AgentTurn], candidate: AgentTurn) -> dict[str, float] | str:
    """The candidate's terms, or an error text when a check could not be decided."""
    gold, question = str(task.get("answer") or ""), task.get("question")
    if not gold:
        return "the task has no gold answer"
    text = candidate.delivery if candidate.delivery is not None else candidate.response
    if role_kind(candidate.role) == "tool":
        s_fmt = float(extract_program(script_text(candidate)) is not None)
        ran, shown = run_tool_program(script_text(candidate))
        step = _correct(f"\\boxed{{{shown.strip()}}}", gold, question) if ran and shown.strip() else 0.0
        reasoner = [t for t in turns_so_far if role_kind(t.role) != "tool"]
        team = _correct(reasoner[-1].delivery or reasoner[-1].response, gold, question) if reasoner else 0.0
        if step is None or team is None:
            return "math check undecided"
        return {"team": team, "loc": 0.1 * s_fmt + 0.1 * float(ran) + 0.8 * step, "s_fmt": s_fmt, "s_tool": float(ran), "s_step": step}
    s_fmt = float(find_boxed(text or "") is not None)
    step = _correct(text, gold, question)
    if step is None:
        return "math check undecided"
    return {"team": step, "loc": 0.2 * s_fmt + 0.8 * step, "s_fmt": s_fmt, "s_step": step}


def _preset(preset: str):
    def fn(task: Mapping[str, Any], turns_so_far: Sequence[AgentTurn], candidate: AgentTurn) -> TurnReward:
        comps = math_components(task, turns_so_far, candidate)
        if isinstance(comps, str):
            return TurnReward(None, "rule", error=comps)
        return TurnReward(mix_reward(comps, preset, "math"), "rule", components=comps, details={"preset": preset})

    fn.__doc__ = f"AT-GRPO math turn reward, mixing preset {preset!r}."
    return fn


at_math = register_turn_reward("at_math")(_preset("alpha"))
at_math_lambda = register_turn_reward("at_math_lambda")(_preset("lambda"))
