"""AT-GRPO's coder + tester turn rewards (seed 003, §4.1 Eq. 4 and its coder-tester example) for the template
``at_code_tester``.

Per candidate, at call time (the golden tests and a reference solution are the checkers):

- Coder (role name without "test"): ``team`` = pass rate of its program on the task's golden tests (the
  candidate's program is the team's program once selected), ``loc`` = the same pass rate ("the coder is
  rewarded for its own code's pass rate"), so ``r = 2 p`` with alpha = 1 (the reference code's coder reward);
- Tester: ``loc`` = fraction of its generated tests that the golden reference solution passes (one test per
  reply: 0 or 1; a reply without a ``Test Output:`` part is a computed 0, ``s_valid = 0``), ``team`` = the
  golden pass rate of the latest Coder program of the execution so far (0 before any): constant within a
  tester group, so it changes no advantage (Eq. 1 is shift invariant) and only shows in the reward level.

The reference solution is ``task.metadata["reference_solution"]`` when the loader kept one, else the bundled
reference table (:func:`metaagent.data.bundled.code_references`; never shown to the agents). A tester
candidate of a task without a reference, or a run that failed in the runner itself, is not computable
(reward None: excluded from its group and counted), never a 0; so is a tester candidate of a function-call
task (``fn_name``: a stdin test does not apply to it). The appendix's variants (build / smoke /
non-regression coder terms, mutation-score tester term) need a mutation engine and are not implemented.

Preset: ``at_code`` (Eq. 4, alpha = 1; the paper gives no lambda for code).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from metaagent.data.bundled import code_references
from metaagent.envs import mix_reward
from metaagent.execution.code import extract_program, run_code_tests
from metaagent.records import AgentTurn, TurnReward

from .turn import register_turn_reward

TIME_LIMIT_S = 4.0
MEMORY_MB = 1024
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def is_tester(role: str) -> bool:
    return "test" in role.lower()


def parse_test(text: str) -> tuple[str, str] | None:
    """(input, expected output) of a ``Test Input: ... Test Output: ...`` reply (markdown bold and code fences
    around either part are dropped); None when there is no ``Test Output:`` part."""
    body = (text or "").replace("**", "")
    if "Test Output:" not in body:
        return None
    head, _, expected = body.rpartition("Test Output:")
    given = head.rpartition("Test Input:")[2]
    clean = lambda s: _FENCE.sub("", s.strip()).strip()  # noqa: E731
    return clean(given), clean(expected)


def golden_pass_rate(program_text: str, task: Mapping[str, Any]) -> float | str:
    """Pass rate of the program in ``program_text`` on the task's golden tests (0 without a program), or an
    error text when the runner itself failed."""
    program = extract_program(program_text or "")
    if program is None:
        return 0.0
    try:
        result = run_code_tests(
            program, task["tests"], fn_name=(task.get("metadata") or {}).get("fn_name"),
            time_limit_s=TIME_LIMIT_S, memory_mb=MEMORY_MB, workers=1,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - malformed task tests or a runner failure: not computable
        return f"golden tests could not run: {type(e).__name__}: {e}"
    return result.pass_rate


def reference_solution(task: Mapping[str, Any]) -> str | None:
    ref = (task.get("metadata") or {}).get("reference_solution")
    if ref:
        return str(ref)

    return code_references().get(str(task.get("id")))


def code_components(task: Mapping[str, Any], turns_so_far: Sequence[AgentTurn], candidate: AgentTurn) -> dict[str, float] | str:
    """The candidate's terms (``team``, ``loc`` and sub-scores), or an error text when not computable."""
    if not task.get("tests"):
        return "the task has no golden tests"
    text = candidate.delivery if candidate.delivery is not None else candidate.response
    if not is_tester(candidate.role):
        p = golden_pass_rate(text, task)
        if isinstance(p, str):
            return p
        return {"team": p, "loc": p, "s_pass": p}
    coders = [t for t in turns_so_far if not is_tester(t.role)]
    team = golden_pass_rate(coders[-1].delivery or coders[-1].response, task) if coders else 0.0
    if isinstance(team, str):
        return team
    test = parse_test(text)
    if test is None:
        return {"team": team, "loc": 0.0, "s_valid": 0.0, "s_ref": 0.0}
    if (task.get("metadata") or {}).get("fn_name"):
        return "the tester's stdin test can not be checked on a function-call task"
    reference = reference_solution(task)
    if reference is None:
        return f"task {task.get('id')!r} has no reference solution to check the tester's test"
    try:
        result = run_code_tests(reference, {"inputs": [test[0]], "outputs": [test[1]]}, time_limit_s=TIME_LIMIT_S, memory_mb=MEMORY_MB, workers=1)
    except Exception as e:  # noqa: BLE001
        return f"reference solution could not run: {type(e).__name__}: {e}"
    return {"team": team, "loc": result.pass_rate, "s_valid": 1.0, "s_ref": result.pass_rate}


def _preset(preset: str):
    def fn(task: Mapping[str, Any], turns_so_far: Sequence[AgentTurn], candidate: AgentTurn) -> TurnReward:
        comps = code_components(task, turns_so_far, candidate)
        if isinstance(comps, str):
            return TurnReward(None, "rule", error=comps)
        return TurnReward(mix_reward(comps, preset, "code"), "rule", components=comps, details={"preset": preset})

    fn.__doc__ = f"AT-GRPO coder-tester turn reward, mixing preset {preset!r}."
    return fn


at_code = register_turn_reward("at_code")(_preset("alpha"))
