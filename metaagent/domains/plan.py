"""Plan (AT-GRPO): a host-side planning environment (:mod:`metaagent.envs`) named in ``metadata["env"]``; the
submitted answer (after a line starting with #####: a move list, or a grid / step list) is applied to it once
(:func:`metaagent.rewards.plan.plan_success`); scripts get ``env_observe`` / ``env_step`` on a fresh env."""

from __future__ import annotations

from collections.abc import Mapping

from metaagent.data.tasks import Task
from metaagent.domain import Domain, Verdict, register_domain
from metaagent.envs.base import parse_actions, parse_final, parse_json
from metaagent.records import Execution
from metaagent.rewards.plan import plan_success
from metaagent.rewards.provenance import actions_not_from_agents, answer_from_agents
from metaagent.rewards.score import RewardConfig
from metaagent.workflow.tools import plan_tools


def score(task: Task, execution: Execution, cfg: RewardConfig) -> Verdict:
    steps = [c for c in execution.tool_calls if c.name == "env_step" and c.ok]
    refused = actions_not_from_agents(execution, task.question)
    if refused or (not steps and not answer_from_agents("plan", execution.answer, execution, task.question)):
        details = {"plan": {"status": "not_from_agents", "env_steps_refused": refused}}
        return Verdict(0.0, details, ("answer_not_from_agents",))
    try:
        correct, details = plan_success(task, execution)
    except Exception as e:  # noqa: BLE001 - an env failure is a counted error, never a 0
        return Verdict(None, {}, (), "plan_env", f"plan environment failed: {type(e).__name__}: {e}")
    return Verdict(correct, {"plan": details})


def solution_format(answer: str, fences: tuple[str, ...]) -> float:
    """A move list or a grid / step list after the final-answer mark."""
    final = parse_final(answer)
    return float(parse_actions(final) is not None or isinstance(parse_json(final), list))


PLAN = register_domain(
    Domain(
        name="plan",
        reference="environment (metadata['env'])",
        needs="metadata['env'] (name, seed, size)",
        has_reference=lambda task: isinstance(task.metadata.get("env"), Mapping),
        score=score,
        solution_format=solution_format,
        tools=plan_tools,
        tool_names=("env_observe", "env_step"),
        row_fields=(("env", "metadata.env"),),
        solo_script='solver = Agent("Assistant", "Give the final answer on a line starting with ##### '
        '(move list or grid).")\nsubmit(solver(task))\n',
    )
)
