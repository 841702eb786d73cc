"""UnityMAS-O's reward allocators (seed 001, Eq. 9-12 and the workflow rules of its §6 / the authors'
``star_ppo/reward_allocators``): each executed turn gets a reward from node-, turn- and trajectory-level
information, after the execution ran. Registered in :mod:`metaagent.rewards.turn`'s allocator registry.

Every allocator computes, per turn, three terms and composes them with Eq. 12 (:func:`compose`, the one
place of that formula)::

    r_t = lambda_node * r_node + lambda_turn * r_turn + lambda_traj * r_traj

- ``r_node`` = the node format term ``f_v`` (:func:`node_format`): 0 when the invocation's output has its
  role's format, -1 when not (the authors' 0/-1 penalty, ``format_weight`` 1.0 in their configs);
- ``r_turn`` = the rule's turn-level term (a pass-rate or F1 delta of the turn's round);
- ``r_traj`` = the execution's outcome (``full``: every node gets it; ``split``: divided by the nodes).

The paper's rules are presets of these weights:

===================  ==================================================  ==========================
allocator            terms                                               weights (node, turn, traj)
===================  ==================================================  ==========================
``shared_outcome``   traj = outcome o (full) or o / #nodes (split)        (format_weight, 0, 1)
``iterative_delta``  turn = F1(a_t) for the answer node; the other         (format_weight, 1, 0)
                     nodes of turn t: F1(a_t) - F1(a_{t-1})
``code_delta``       turn = R_i - R_{i-1} for planner/coder of round i,    (format_weight, 1, 0)
                     R_{i+1} - R_i for the reflector of round i
``linear``           any rule's turn term + outcome, user weights (Eq. 12)  (lambda_node, lambda_turn,
                                                                            lambda_traj)
===================  ==================================================  ==========================

Dropped executions: a failed tool call of the verifier/retriever (``ToolCall.ok`` false), or an outcome /
pass rate that could not be computed, drops the execution with all its turns: every turn gets
``TurnReward(total=None, error="dropped: ...", details={"dropped": True})`` (counted; the ``unity``
estimator trains none of them), never a silent 0. Turns a rule gives no assignment (M-ASK's turn after
``<end>``) get no reward and are not trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metaagent.execution.code import extract_program, run_code_tests
from metaagent.records import AgentTurn, Execution, TurnReward

from ..data.tasks import Task
from .errors import ExecutionError, RewardError, TestsFormatError
from .qa import answer_f1, extract_qa_answer
from .turn import register_allocator

FORMAT_VALID = 0.0
FORMAT_INVALID = -1.0
SHARE_MODES = ("full", "split")
OUTCOMES = ("correct", "total")
TURN_RULES = ("none", "code_delta", "iterative_delta")
#: format kinds besides a tag name: the <delivery> block, a fenced program, or no check
FORMAT_KINDS = ("delivery", "code", "none")

Terms = tuple[float, float, float]  # (r_node, r_turn, r_traj)


def compose(node: float, turn: float, traj: float, *, lambda_node: float, lambda_turn: float, lambda_traj: float) -> float:
    """Eq. 12: ``lambda_node * node + lambda_turn * turn + lambda_traj * traj`` (scalars)."""
    return lambda_node * node + lambda_turn * turn + lambda_traj * traj


def node_format(turn: AgentTurn, kind: str = "delivery") -> float:
    """``f_v``: 0 if ``turn``'s output has the format ``kind``, else -1. ``kind``: ``delivery`` (a complete
    ``<delivery>`` block), ``code`` (a fenced program in the delivered text), ``none`` (always 0), or a tag
    name ``X`` (``<X>...</X>`` in the response, as the authors' ``tag`` parsers)."""
    if kind == "none":
        return FORMAT_VALID
    if kind == "delivery":
        ok = turn.delivery is not None
    elif kind == "code":
        ok = extract_program(turn.delivery if turn.delivery is not None else turn.response) is not None
    else:
        ok = f"<{kind}>" in turn.response and f"</{kind}>" in turn.response
    return FORMAT_VALID if ok else FORMAT_INVALID


def _format_of(turn: AgentTurn, formats: Mapping[str, str] | None) -> float:
    return node_format(turn, (formats or {}).get(turn.role, (formats or {}).get("*", "delivery")))


def delivered(turn: AgentTurn) -> str:
    """What the script received from the call: the delivery block when there is one, else the reply."""
    return turn.delivery if turn.delivery is not None else turn.response


class Dropped(Exception):
    """Internal: the execution is dropped with all its records (the message says why)."""


def _check_tools(execution: Execution, tools: Sequence[str]) -> None:
    for call in execution.tool_calls:
        if call.name in tools and not call.ok:
            raise Dropped(f"tool {call.name} failed (call {call.index}): {call.result[:200]}")


def _outcome(execution: Execution, outcome: str) -> float:
    if outcome not in OUTCOMES:
        raise RewardError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    r = execution.reward
    value = None if r is None else getattr(r, outcome)
    if value is None:
        why = f": {r.error}" if r is not None and r.error else ""
        raise Dropped(f"the execution's reward could not be computed{why}")
    return float(value)


def _dropped(execution: Execution, reason: str) -> dict[int, TurnReward]:
    return {
        k: TurnReward(None, "allocator", error=f"dropped: {reason}", details={"dropped": True})
        for k in range(len(execution.turns))
    }


# ---- turn-level rules -------------------------------------------------------------------------------------


def code_rounds(
    task: Mapping[str, Any],
    execution: Execution,
    *,
    coder: str,
    time_limit_s: float,
    memory_mb: int,
) -> list[float]:
    """``R_i`` for every round that ran: the pass rate of coder turn ``i`` (by ``role_turn``) on the task's
    tests; a round whose coder wrote no program has ``R_i = 0``. A runner failure drops the execution."""
    t = Task.coerce(task)
    coders = sorted((turn for turn in execution.turns if turn.role == coder), key=lambda x: x.role_turn)
    cache: dict[str, float] = {}
    rates: list[float] = []
    for turn in coders:
        program = extract_program(delivered(turn))
        if program is None:
            rates.append(0.0)
            continue
        if program not in cache:
            try:
                result = run_code_tests(
                    program, t.tests, fn_name=t.metadata.get("fn_name"), time_limit_s=time_limit_s,
                    memory_mb=memory_mb, workers=1, stop_on_failure=False,
                )  # fmt: skip
            except (TestsFormatError, ExecutionError, RewardError) as e:
                raise Dropped(f"the tests of round {turn.role_turn} could not be run: {e}") from None
            cache[program] = result.pass_rate
        rates.append(cache[program])
    return rates


def _code_delta_terms(
    task: Mapping[str, Any], execution: Execution, *, planner: str, coder: str, reflector: str,
    time_limit_s: float, memory_mb: int,
) -> dict[int, tuple[float, dict[str, Any]]]:  # fmt: skip
    """``r(planner_i) = r(coder_i) = R_i - R_{i-1}`` (``R_{-1} = 0``); ``r(reflector_i) = R_{i+1} - R_i``, 0 when
    round ``i+1`` never ran. Other roles get no assignment."""
    rates = code_rounds(task, execution, coder=coder, time_limit_s=time_limit_s, memory_mb=memory_mb)
    out: dict[int, tuple[float, dict[str, Any]]] = {}
    for k, turn in enumerate(execution.turns):
        i = turn.role_turn
        if turn.role in (planner, coder):
            if i >= len(rates):  # a planner whose coder never answered: its round has no pass rate
                out[k] = (0.0, {"round": i, "ran": False})
                continue
            prev = rates[i - 1] if i > 0 else 0.0
            out[k] = (rates[i] - prev, {"round": i, "R": rates[i], "R_prev": prev})
        elif turn.role == reflector:
            if i + 1 < len(rates):
                out[k] = (rates[i + 1] - rates[i], {"round": i, "R": rates[i], "R_next": rates[i + 1]})
            else:
                out[k] = (0.0, {"round": i, "R": rates[i] if i < len(rates) else None, "next_round_ran": False})
    return out


def _iterative_terms(
    task: Mapping[str, Any], execution: Execution, *, answer_role: str, plan_role: str | None,
    stop_role: str | None, stop_token: str,
) -> dict[int, tuple[float, dict[str, Any]]]:  # fmt: skip
    """M-ASK's rule. Turn ``t`` of a node = the number of answer-node calls before it. The answer node of
    turn ``t`` gets ``F1(a_t)``; the plan node ``F1`` of its own initial answer; every other node of turn
    ``t`` gets ``F1(a_t) - F1(a_{t-1})`` (``F1(a_t)`` when there is no earlier answer, 0 when ``a_t`` never
    came). A ``stop_role`` node whose reply holds ``stop_token`` gets 0 and the rest of its turn nothing."""
    golds = gold_answers(task)
    answers = [turn for turn in execution.turns if turn.role == answer_role]
    f1 = [answer_f1(extract_qa_answer(delivered(a)), golds) for a in sorted(answers, key=lambda x: x.role_turn)]
    out: dict[int, tuple[float, dict[str, Any]]] = {}
    stopped: set[int] = set()
    seen_answers = 0
    for k, turn in enumerate(execution.turns):
        t = seen_answers
        if turn.role == answer_role:
            out[k] = (f1[turn.role_turn], {"turn": turn.role_turn, "f1": f1[turn.role_turn]})
            seen_answers += 1
            continue
        if t in stopped:
            continue  # no assignment after <end> in this turn
        if plan_role is not None and turn.role == plan_role:
            value = answer_f1(extract_qa_answer(delivered(turn)), golds)
            out[k] = (value, {"turn": t, "f1": value})
        elif stop_role is not None and turn.role == stop_role and stop_token in turn.response:
            out[k] = (0.0, {"turn": t, "stop": True})
            stopped.add(t)
        elif t >= len(f1):
            out[k] = (0.0, {"turn": t, "answer_ran": False})
        else:
            prev = f1[t - 1] if t > 0 else None
            value = f1[t] - prev if prev is not None else f1[t]
            out[k] = (value, {"turn": t, "f1": f1[t], "f1_prev": prev})
    return out


def gold_answers(task: Mapping[str, Any]) -> list[str]:
    """A QA task's gold answers: ``metadata["answers"]`` when given, else ``[answer]``."""
    t = Task.coerce(task)
    golds = t.metadata.get("answers") or ([t.answer] if t.answer else [])
    if not golds:
        raise Dropped(f"task {t.id!r} has no gold answer")
    return [str(g) for g in golds]


def _turn_terms(rule: str, task: Mapping[str, Any], execution: Execution, opts: Mapping[str, Any]):
    if rule == "none":
        return {}
    if rule == "code_delta":
        return _code_delta_terms(task, execution, **opts)
    if rule == "iterative_delta":
        return _iterative_terms(task, execution, **opts)
    raise RewardError(f"turn rule must be one of {TURN_RULES}, got {rule!r}")


# ---- composition -------------------------------------------------------------------------------------------


def _allocate(
    task: Mapping[str, Any],
    execution: Execution,
    *,
    rule: str,
    rule_options: Mapping[str, Any],
    weights: tuple[float, float, float],
    share: str | None,
    outcome: str,
    formats: Mapping[str, str] | None,
    drop_tools: Sequence[str],
    assign_all: bool,
) -> dict[int, TurnReward]:
    """The one body of every allocator: drop check, turn terms, outcome, format, Eq. 12."""
    if share is not None and share not in SHARE_MODES:
        raise RewardError(f"share mode must be one of {SHARE_MODES}, got {share!r}")
    lam_node, lam_turn, lam_traj = weights
    try:
        _check_tools(execution, drop_tools)
        turn_terms = _turn_terms(rule, task, execution, rule_options)
        traj = _outcome(execution, outcome) if lam_traj != 0 else 0.0
    except Dropped as e:
        return _dropped(execution, str(e))
    nodes = [k for k, turn in enumerate(execution.turns) if not turn.synthetic]
    if share == "split" and nodes:
        traj /= len(nodes)
    out: dict[int, TurnReward] = {}
    for k in nodes:
        turn = execution.turns[k]
        if k not in turn_terms and not assign_all:
            continue
        r_turn, details = turn_terms.get(k, (0.0, {}))
        r_node = _format_of(turn, formats)
        total = compose(r_node, r_turn, traj, lambda_node=lam_node, lambda_turn=lam_turn, lambda_traj=lam_traj)
        details = {**details, "weights": {"node": lam_node, "turn": lam_turn, "traj": lam_traj}}
        out[k] = TurnReward(total, "allocator", components={"node": r_node, "turn": r_turn, "traj": traj}, details=details)
    return out


@register_allocator("shared_outcome")
def shared_outcome(
    task: Mapping[str, Any],
    execution: Execution,
    *,
    mode: str = "full",
    outcome: str = "total",
    format_weight: float = 0.0,
    formats: dict[str, str] | None = None,
    drop_tools: tuple[str, ...] = (),
) -> dict[int, TurnReward]:
    """Every trainable node gets the outcome ``o`` (``full``) or ``o / #nodes`` (``split``), plus
    ``format_weight * f_v`` (UnityMAS-O workflows A and B: ``r_v = o + w_v f_v``; the math workflow too)."""
    return _allocate(
        task, execution, rule="none", rule_options={}, weights=(format_weight, 0.0, 1.0), share=mode,
        outcome=outcome, formats=formats, drop_tools=drop_tools, assign_all=True,
    )  # fmt: skip


@register_allocator("iterative_delta")
def iterative_delta(
    task: Mapping[str, Any],
    execution: Execution,
    *,
    answer_role: str = "Answerer",
    plan_role: str | None = None,
    stop_role: str | None = None,
    stop_token: str = "<end>",
    format_weight: float = 1.0,
    formats: dict[str, str] | None = None,
    drop_tools: tuple[str, ...] = ("retrieve",),
) -> dict[int, TurnReward]:
    """The iterative-loop delta rule (workflow C, M-ASK): answer nodes ``F1(a_t)``, the other nodes of turn
    ``t`` the F1 gain ``F1(a_t) - F1(a_{t-1})``, plus ``format_weight * f_v``."""
    opts = {"answer_role": answer_role, "plan_role": plan_role, "stop_role": stop_role, "stop_token": stop_token}
    return _allocate(
        task, execution, rule="iterative_delta", rule_options=opts, weights=(format_weight, 1.0, 0.0), share=None,
        outcome="correct", formats=formats, drop_tools=drop_tools, assign_all=False,
    )  # fmt: skip


@register_allocator("code_delta")
def code_delta(
    task: Mapping[str, Any],
    execution: Execution,
    *,
    planner: str = "Planner",
    coder: str = "Coder",
    reflector: str = "Reflector",
    format_weight: float = 1.0,
    formats: dict[str, str] | None = None,
    drop_tools: tuple[str, ...] = ("run_tests",),
    time_limit_s: float = 4.0,
    memory_mb: int = 1024,
) -> dict[int, TurnReward]:
    """The reflective code loop (workflow D): planner and coder of round ``i`` get ``R_i - R_{i-1}``, the
    reflector of round ``i`` gets ``R_{i+1} - R_i`` (0 if round ``i+1`` never ran), each plus
    ``format_weight * f_v``; ``R_i`` = pass rate of round ``i``'s program on the task's tests. The coder's
    turn terms telescope: their sum is the last round's pass rate."""
    opts = {"planner": planner, "coder": coder, "reflector": reflector, "time_limit_s": time_limit_s, "memory_mb": memory_mb}
    fmts = formats if formats is not None else {planner: "delivery", coder: "code", reflector: "delivery"}
    return _allocate(
        task, execution, rule="code_delta", rule_options=opts, weights=(format_weight, 1.0, 0.0), share=None,
        outcome="correct", formats=fmts, drop_tools=drop_tools, assign_all=False,
    )  # fmt: skip


@register_allocator("linear")
def linear(
    task: Mapping[str, Any],
    execution: Execution,
    *,
    lambda_node: float = 0.0,
    lambda_turn: float = 0.0,
    lambda_traj: float = 1.0,
    turn_rule: str = "none",
    turn_options: dict[str, Any] | None = None,
    mode: str = "full",
    outcome: str = "correct",
    formats: dict[str, str] | None = None,
    drop_tools: tuple[str, ...] = (),
) -> dict[int, TurnReward]:
    """Eq. 12 with user weights: ``lambda_node * f_v + lambda_turn * r_turn + lambda_traj * o``, where
    ``r_turn`` comes from ``turn_rule`` (``code_delta`` / ``iterative_delta`` with ``turn_options``; ``none``:
    0) and ``o`` is the outcome shared ``full`` or ``split``. Every trainable node is assigned."""
    defaults: dict[str, dict[str, Any]] = {
        "code_delta": {"planner": "Planner", "coder": "Coder", "reflector": "Reflector", "time_limit_s": 4.0, "memory_mb": 1024},
        "iterative_delta": {"answer_role": "Answerer", "plan_role": None, "stop_role": None, "stop_token": "<end>"},
        "none": {},
    }  # fmt: skip
    if turn_rule not in defaults:
        raise RewardError(f"linear: turn_rule must be one of {TURN_RULES}, got {turn_rule!r}")
    unknown = sorted(set(turn_options or {}) - set(defaults[turn_rule]))
    if unknown:
        raise RewardError(f"linear: turn_options {unknown} are not options of {turn_rule!r}: {sorted(defaults[turn_rule])}")
    opts = {**defaults[turn_rule], **(turn_options or {})}
    return _allocate(
        task, execution, rule=turn_rule, rule_options=opts, weights=(lambda_node, lambda_turn, lambda_traj),
        share=mode, outcome=outcome, formats=formats, drop_tools=drop_tools, assign_all=True,
    )  # fmt: skip
