"""Rewards of the ``plan`` domain (AT-GRPO planning environments, :mod:`metaagent.envs`).

- :func:`plan_success`: the execution's ``R_correct`` = the environment's success after the execution's
  own ``env_step`` calls, replayed from the record on a fresh env (the env is seeded by the task, so this
  is exactly the state the script reached); without any ``env_step`` call the submitted answer is applied
  once.
- turn-reward presets for tree sampling (``rollout.branching.turn_reward``), one per mixing preset of
  :mod:`metaagent.envs.mixing`: ``at_plan`` (Eq. 4, alpha = 1), ``at_plan_lambda`` (appendix),
  ``at_plan_pettingllms`` (reference code's shaped rewards). A candidate is scored on a copy of the
  execution's live environment: a Planner candidate by its final answer (after ``#####``), a Tool
  candidate (role name containing "tool") by what its program prints, run on the host like
  ``run_program`` (``s_exec`` = it ran without error or timeout).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metaagent.data.tasks import Task
from metaagent.envs import PlanEnv, make_env, mix_reward
from metaagent.envs.base import role_kind
from metaagent.execution.code import extract_program, run_code_tests
from metaagent.records import AgentTurn, Execution, TurnReward

from .turn import register_turn_reward

TOOL_TIME_LIMIT_S = 2.0


def plan_success(task: Task, execution: Execution) -> tuple[float, dict[str, Any]]:
    env = make_env(task.metadata["env"])
    steps = [c for c in execution.tool_calls if c.name == "env_step" and c.ok]
    for call in steps:
        env.step(str(call.args.get("answer", "")))
    if not steps and execution.answer:
        env.step(execution.answer)
    return float(env.success), {"env_steps": len(steps), "turns_applied": env.turn, "final": env.observe()}


def run_tool_program(text: str) -> tuple[bool, str]:
    """Run the program in a Tool agent's reply (no input); (ran without error, what it printed)."""
    code = extract_program(text) or text
    result = run_code_tests(code, {"inputs": [""], "outputs": [""]}, time_limit_s=TOOL_TIME_LIMIT_S, memory_mb=512, workers=1)
    outcome = result.tests[0]
    return outcome.status in ("passed", "wrong_answer"), outcome.actual or ""


def script_text(candidate: AgentTurn) -> str:
    """What the workflow script receives from the call: the delivery block's content, else the reply."""
    return candidate.delivery if candidate.delivery is not None else candidate.response


def _score(preset: str, task: Mapping[str, Any], candidate: AgentTurn, env: PlanEnv) -> TurnReward:
    kind = role_kind(candidate.role)
    if kind == "tool":  # the program the script would hand to run_program
        executed, printed = run_tool_program(script_text(candidate))
        comps = env.components(printed, kind, executed=executed)
    else:
        comps = env.components(script_text(candidate), kind)
    total = mix_reward(comps, preset, env.name)
    return TurnReward(total, "env", components=dict(comps), details={"preset": preset, "kind": kind, "env_turn": env.turn})


def _preset(preset: str):
    def fn(task: Mapping[str, Any], turns_so_far: Sequence[AgentTurn], candidate: AgentTurn, *, env: PlanEnv) -> TurnReward:
        return _score(preset, task, candidate, env)

    fn.needs_env = True  # type: ignore[attr-defined]
    fn.__doc__ = f"AT-GRPO planning turn reward, mixing preset {preset!r} (metaagent.envs.mixing)."
    return fn


at_plan = register_turn_reward("at_plan")(_preset("alpha"))
at_plan_lambda = register_turn_reward("at_plan_lambda")(_preset("lambda"))
at_plan_pettingllms = register_turn_reward("at_plan_pettingllms")(_preset("pettingllms"))
