"""Which shortcuts the reward pays: every bundled math task, a generated answer of each shortcut class, scored.

For each class the script prints the share of the 225 bundled math tasks on which some answer of the class
earns R_correct > 0 (or, for the abstaining class, yields no reward at all instead of a 0), and the worst
seconds one score took. Every answer goes through the public scorer (``metaagent.rewards.score_execution``)
inside an execution with one agent turn whose reply states the answer, so each class meets its own rule, not
answer provenance (class ``no_agent_runs``: no turn; class 9: the agent said "ok" and the script submitted the
gold answer itself, ``answer_not_from_agents``). It uses only the scorer's
public signature, so it runs on older checkouts as well: point ``PYTHONPATH`` at one to compare.

    python benchmarks/reward_shortcuts.py                       # this checkout, strict (the default)
    python benchmarks/reward_shortcuts.py --final-form lenient  # symbolic equivalence for numeric references
    PYTHONPATH=/path/to/old/checkout python benchmarks/reward_shortcuts.py   # an older reward

Results: benchmarks/results/reward_shortcuts.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from metaagent.data.bundled import load_bundled
from metaagent.data.tasks import Task
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import RewardConfig, score_execution

HUGE_POWER = "2^{2^{2^{2^{2^{2^{2}}}}}}"


def _turn(response: str) -> AgentTurn:
    return AgentTurn(
        index=0, role="Solver", system_prompt="", messages=[], response=response, delivery=None, prompt_ids=[],
        response_ids=[], logprobs=None, finish_reason="stop", model="m",
    )  # fmt: skip


def _execution(answer: str, *, turns: int = 1, delivery: str = "done", said: str | None = None) -> Execution:
    """One submitted ``answer``; each agent turn's reply states ``said`` (default: the answer itself)."""
    reply = f"{answer if said is None else said}\n<delivery>{delivery}</delivery>"
    return Execution(index=0, status="ok", answer=answer, submitted=True, turns=[_turn(reply) for _ in range(turns)])


def _integer_gold(task: Task) -> int | None:
    return int(task.answer) if task.answer and "/" not in task.answer else None


#: class -> answers for one task (boxed unless the class is about unboxed text)
def _answers(task: Task) -> dict[str, list[Execution]]:
    expr, gold = str(task.metadata.get("expression") or ""), str(task.answer)
    value = _integer_gold(task)
    out = {
        "1 unbounded": [_execution(f"\\boxed{{{v}}}") for v in ("\\infty", "1e999", "1e300", "nan")],
        "2 unevaluated: question copy": [_execution(f"\\boxed{{{expr}}}"), _execution(f"The answer is {expr}")],
        "2 unevaluated: restatement": [_execution(f"\\boxed{{{expr} = {gold}}}")],
        "4 abstaining (no reward)": [_execution(f"\\boxed{{{HUGE_POWER}}}")],
        "5 stalling (seconds)": [_execution("\\boxed{" * 3000 + gold)],
        "7 no agent runs": [_execution(f"\\boxed{{{gold}}}", turns=0)],
        "8 empty delivery (format)": [_execution(f"\\boxed{{{gold}}}", delivery="")],
        "9 answer not from agents": [_execution(f"\\boxed{{{gold}}}", said="ok"), _execution(gold, said="ok")],
    }
    if value is not None:
        out["2 unevaluated: expression of the value"] = [
            _execution(f"\\boxed{{\\sqrt{{{value * value}}}}}"), _execution(f"\\boxed{{\\frac{{{2 * value}}}{{2}}}}")
        ]
        out["3 loose tolerance"] = [_execution(f"\\boxed{{{value}.00001}}"), _execution(f"\\boxed{{{value}.0000001}}")]
    return out


def _paid(name: str) -> Callable[[list], bool]:
    """Whether the records of one task's answers of class ``name`` show the shortcut paying."""
    if name.startswith("4"):
        return lambda records: any(r.total is None for r in records)
    if name.startswith("8"):
        return lambda records: any((r.components or {}).get("delivery_format", 0.0) > 0 for r in records)
    if name.startswith("7"):
        return lambda records: any((r.total or 0.0) > 0 for r in records)
    return lambda records: any((r.correct or 0.0) > 0 for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--final-form", choices=("strict", "lenient"), default=None, help="reward.domains.math.final_form")
    parser.add_argument("--limit", type=int, default=None, help="only the first N bundled math tasks")
    args = parser.parse_args()
    math = {"timeout_s": 2.0} | ({"final_form": args.final_form} if args.final_form is not None else {})
    config = RewardConfig(domains={"math": math})
    tasks = load_bundled(domain="math")[: args.limit]
    paid: dict[str, int] = {}
    asked: dict[str, int] = {}
    slowest: dict[str, float] = {}
    for task in tasks:
        for name, executions in _answers(task).items():
            records = []
            for execution in executions:
                start = time.monotonic()
                records.append(score_execution(task, execution, config))
                slowest[name] = max(slowest.get(name, 0.0), time.monotonic() - start)
            asked[name] = asked.get(name, 0) + 1
            paid[name] = paid.get(name, 0) + int(_paid(name)(records))
    mode = config.domain_settings("math").final_form
    print(f"reward config: reward.domains.math.final_form={mode}; {len(tasks)} bundled math tasks\n")
    print("| shortcut class | tasks where it pays | share | slowest score (s) |")
    print("|---|---:|---:|---:|")
    for name in sorted(asked):
        print(f"| {name} | {paid[name]}/{asked[name]} | {100 * paid[name] / asked[name]:.0f}% | {slowest[name]:.2f} |")


if __name__ == "__main__":
    main()
