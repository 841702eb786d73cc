"""Rollout records -> the response models of :mod:`metaagent.serve.protocol`.

A served team is a :class:`~metaagent.records.RolloutTree` (mode ``"serve"``); the response shows
its designs and executions without token ids and log-probs (``return_trace`` adds the whole tree).
"""

from __future__ import annotations

from collections.abc import Mapping

from metaagent.records import AgentTurn, Design, Execution, RewardRecord, ToolCall

from .protocol import (
    CheckOut,
    DesignerOut,
    DesignOut,
    DiagnosticOut,
    ErrorOut,
    ExecutionOut,
    RewardOut,
    RoleOut,
    RoleUsage,
    ToolCallOut,
    TurnOut,
    UsageOut,
)

#: RewardRecord.details["error_kind"] of a task that has no reference: not an error when serving
NO_REFERENCE = "no_reference"


def is_no_reference(reward: RewardRecord | None) -> bool:
    return reward is not None and reward.details.get("error_kind") == NO_REFERENCE


def roles_of(design: Design) -> list[RoleOut]:
    """The team's agents (role name and system prompt) as the static analysis read them from the script."""
    s = design.structure or {}
    return [RoleOut(name=n, system_prompt=p) for n, p in zip(s.get("roles", []), s.get("system_prompts", []))]


def turn_out(turn: AgentTurn) -> TurnOut:
    message = turn.messages[-1]["content"] if turn.messages else ""
    return TurnOut(
        index=turn.index,
        role=turn.role,
        system_prompt=turn.system_prompt,
        message=message,
        response=turn.response,
        delivery=turn.delivery,
        finish_reason=turn.finish_reason,
        prompt_tokens=len(turn.prompt_ids),
        completion_tokens=len(turn.response_ids),
        parents=list(turn.parents),
        elapsed_s=turn.elapsed_s,
    )


def tool_call_out(call: ToolCall) -> ToolCallOut:
    return ToolCallOut(
        index=call.index, name=call.name, args=call.args, result=call.result, ok=call.ok, after_turn=call.after_turn
    )


def reward_out(reward: RewardRecord | None) -> RewardOut | None:
    if reward is None or is_no_reference(reward):
        return None
    return RewardOut(total=reward.total, correct=reward.correct, format=reward.format, error=reward.error)


def execution_out(execution: Execution, *, turns: bool = True) -> ExecutionOut:
    err = execution.error
    return ExecutionOut(
        index=execution.index,
        status=execution.status,
        answer=execution.answer,
        submitted=execution.submitted,
        error=ErrorOut(type=err.type, message=err.message, line=err.line) if err else None,
        elapsed_s=execution.elapsed_s,
        reward=reward_out(execution.reward),
        turns=[turn_out(t) for t in execution.turns] if turns else [],
        tool_calls=[tool_call_out(c) for c in execution.tool_calls] if turns else [],
    )


def design_out(design: Design, *, executions: bool = True) -> DesignOut:
    s = design.sample
    return DesignOut(
        index=design.index,
        source=design.source,
        valid=design.valid,
        script=design.script,
        structure=design.structure,
        roles=roles_of(design),
        check=CheckOut(
            ok=design.check.ok,
            errors=[DiagnosticOut(**d.to_dict()) for d in design.check.errors],
            warnings=[DiagnosticOut(**d.to_dict()) for d in design.check.warnings],
        ),
        designer=DesignerOut(
            text=s.text,
            finish_reason=s.finish_reason,
            templates=list(s.templates),
            prompt_tokens=len(s.prompt_ids),
            completion_tokens=len(s.response_ids),
        )
        if s is not None
        else None,
        executions=[execution_out(e) for e in design.executions] if executions else [],
    )


def usage_out(by_role: Mapping[str, Mapping[str, int]], designs: list[Design]) -> UsageOut:
    """Totals and per-role usage from the request's policy fronts; per-agent usage from the turns.

    ``by_role`` is ``{"requests": {role: n}, "prompt_tokens": {...}, "completion_tokens": {...}}`` merged
    over the request's fronts (``Usage.snapshot()``).
    """
    roles: dict[str, RoleUsage] = {}
    for role in by_role.get("requests", {}):
        roles[role] = RoleUsage(
            requests=by_role["requests"].get(role, 0),
            prompt_tokens=by_role.get("prompt_tokens", {}).get(role, 0),
            completion_tokens=by_role.get("completion_tokens", {}).get(role, 0),
        )
    agents: dict[str, RoleUsage] = {}
    for d in designs:
        for e in d.executions:
            for t in e.turns:
                u = agents.setdefault(t.role, RoleUsage())
                u.requests += 1
                u.prompt_tokens += len(t.prompt_ids)
                u.completion_tokens += len(t.response_ids)
    prompt = sum(u.prompt_tokens for u in roles.values())
    completion = sum(u.completion_tokens for u in roles.values())
    return UsageOut(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        by_role=roles,
        by_agent=agents,
    )


def merge_usage(*snapshots: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {"requests": {}, "prompt_tokens": {}, "completion_tokens": {}}
    for snap in snapshots:
        for kind, per_role in snap.items():
            for role, n in per_role.items():
                out[kind][role] = out[kind].get(role, 0) + n
    return out
