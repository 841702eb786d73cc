"""Running scripts: records, memory, parallel batching, seeds, submit, tools, limits, threads."""

from __future__ import annotations

import threading

import pytest
from wf_helpers import fake_tools, role_reply

from metaagent.policy import PolicyError, RequestError, ScriptedPolicy
from metaagent.workflow import Limits, LimitsError, run_script, sandbox
from metaagent.workflow.protocol import AGENT_PROTOCOL, DELIVERY_CLOSE

BRIEF = """\
solver = Agent("AlgebraSolver", "You solve competition algebra step by step. Put the final answer in \\\\boxed{}.")
critic = Agent("MathCritic", "You check a proposed solution line by line and name the first error, or say CORRECT.")
draft = solver(task)
for _ in range(2):
    review = critic(f"Problem:\\n{task}\\n\\nProposed solution:\\n{draft}")
    if "CORRECT" in review:
        break
    draft = solver(f"Revise your solution using this review:\\n{review}")
submit(draft)
"""


def test_brief_example_runs_and_records_every_turn(pool):
    replies = iter(
        [
            "x = 4.\n<delivery>draft \\boxed{4}</delivery>",
            "Line 1 is wrong.<delivery>ERROR: 2 + 3 is 5</delivery>",
            "Fixed.<delivery>\\boxed{5}</delivery>",
            "<delivery>CORRECT</delivery>",
        ]
    )
    policy = ScriptedPolicy(lambda r: next(replies))
    ex = pool.run(BRIEF, "What is 2 + 3?", policy, seed=7)
    assert ex.status == "ok" and ex.error is None
    assert ex.submitted and ex.answer == "\\boxed{5}"
    assert [t.role for t in ex.turns] == ["AlgebraSolver", "MathCritic", "AlgebraSolver", "MathCritic"]
    t0, t1, t2, t3 = ex.turns
    assert t0.system_prompt.startswith("You solve competition algebra")
    assert t0.messages[0] == {"role": "system", "content": t0.system_prompt + "\n\n" + AGENT_PROTOCOL}
    assert t0.messages[1] == {"role": "user", "content": "What is 2 + 3?"}
    assert t1.delivery == "ERROR: 2 + 3 is 5" and t1.response.startswith("Line 1 is wrong.")
    # the solver's second call carries its own first exchange (memory), then the revision request
    assert [m["role"] for m in t2.messages] == ["system", "user", "assistant", "user"]
    assert t2.messages[2]["content"] == t0.response
    # token ids and log-probs come from the Completion (ScriptedPolicy: the UTF-8 bytes, log-prob 0)
    assert t0.response_ids == list(t0.response.encode()) and t0.logprobs == [0.0] * len(t0.response_ids)
    assert t0.prompt_ids and t0.finish_reason == "stop" and t0.model == "scripted"
    # parents: a dependency graph, not a list (the critic's second prompt holds its memory of turn 0's draft)
    assert (t0.parents, t1.parents, t2.parents, t3.parents) == ([], [0], [0, 1], [0, 1, 2])
    assert [t.index for t in ex.turns] == [0, 1, 2, 3]
    assert ex.seed == 7 and ex.elapsed_s > 0


def test_parallel_is_one_generate_call(pool, scripted):
    src = (
        'team = [Agent("A", "p"), Agent("B", "p"), Agent("C", "p")]\nr = parallel(team, task)\nsubmit(r[0])\n'
    )
    ex = pool.run(src, "q", scripted)
    assert ex.status == "ok" and len(ex.turns) == 3
    assert scripted.batch_sizes == [3]
    assert [t.role for t in ex.turns] == ["A", "B", "C"]


def test_executor_sampling_defaults_and_stop_string(pool, scripted):
    pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", scripted)
    sampling = scripted.calls[0].sampling
    assert sampling.temperature == 1.0 and DELIVERY_CLOSE in sampling.stop
    pool.run(
        'a = Agent("A", "p")\nsubmit(a(task))\n',
        "q",
        scripted,
        sampling={"temperature": 0.5, "max_tokens": 9},
    )
    assert scripted.calls[1].sampling.temperature == 0.5 and DELIVERY_CLOSE in scripted.calls[1].sampling.stop


def test_seed_makes_executions_reproducible(pool):
    policy = ScriptedPolicy(lambda r: f"<delivery>{r.sampling.seed}</delivery>")
    src = 'a = Agent("A", "p")\nb = Agent("B", "p")\nx = parallel([a, b], task)\nsubmit(a(x[1]))\n'
    one, two = (pool.run(src, "q", policy, seed=11) for _ in range(2))
    other = pool.run(src, "q", policy, seed=12)
    seeds = [t.delivery for t in one.turns]
    assert len(set(seeds)) == 3 and "None" not in seeds
    assert [t.to_dict() | {"elapsed_s": 0} for t in one.turns] == [
        t.to_dict() | {"elapsed_s": 0} for t in two.turns
    ]
    assert one.answer == two.answer != other.answer
    unseeded = pool.run(src, "q", policy)
    assert unseeded.turns[0].delivery == "None"


def test_no_submit_falls_back_to_the_last_agent_output(pool):
    policy = ScriptedPolicy(["<delivery>first</delivery>", "no tags at all  "])
    ex = pool.run('a = Agent("A", "p")\nx = a(task)\ny = a(x)\n', "q", policy)
    assert ex.status == "ok" and not ex.submitted and ex.answer == "no tags at all"
    assert ex.turns[1].delivery is None


def test_submit_is_final_even_when_the_script_swallows_it(pool, scripted):
    src = (
        'a = Agent("A", "p")\n'
        "try:\n    submit('first')\nexcept:\n    pass\n"
        "try:\n    submit('second')\nexcept:\n    pass\n"
        "try:\n    a(task)\nexcept:\n    pass\n"
        "x = 1 / 0\n"
    )
    ex = pool.run(src, "q", scripted)
    assert ex.status == "ok" and ex.submitted and ex.answer == "first"
    assert ex.turns == []  # the agent call after submit() was refused inside the worker


def test_script_errors_carry_type_message_and_line(pool, scripted):
    ex = pool.run('a = Agent("A", "p")\nx = a(task)\ny = {}\nz = y["missing"]\nsubmit(x)\n', "q", scripted)
    assert ex.status == "error"
    assert (ex.error.type, ex.error.line) == ("KeyError", 4)
    assert ex.answer is not None and not ex.submitted and len(ex.turns) == 1
    ex = pool.run('a = Agent("A", "p")\na(["not", "text"])\n', "q", scripted)
    assert (
        ex.status == "error"
        and ex.error.type == "TypeError"
        and "text" in ex.error.message
        and ex.error.line == 2
    )


def test_invalid_scripts_do_not_run(pool, scripted):
    ex = pool.run("import os\n", "q", scripted)
    assert ex.status == "invalid" and ex.error.type == "CheckError" and "E-IMPORT" in ex.error.message
    assert ex.turns == [] and scripted.calls == []
    ex = pool.run('a = Agent("A", "p")\nx = a.__class__\n', "q", scripted, check=False)
    assert ex.status == "invalid" and ex.error.type == "CompileError" and ex.error.line == 2


def test_task_object_and_text(pool, scripted, math_task):
    ex = pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', math_task, scripted)
    assert ex.turns[0].messages[-1]["content"] == math_task.question
    with pytest.raises(ValueError):
        pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "   ", scripted)


def test_limits_validate_and_coerce():
    assert Limits.coerce({"timeout_s": 3}).timeout_s == 3
    assert Limits.coerce(None, Limits(max_agent_calls=4)).max_agent_calls == 4
    with pytest.raises(LimitsError, match="known limits"):
        Limits.coerce({"timeout": 3})
    with pytest.raises(LimitsError, match="timeout_s"):
        Limits(timeout_s=0)
    with pytest.raises(LimitsError, match="memory_mb"):
        Limits(memory_mb=10)
    assert Limits(timeout_s=2.5).cpu_seconds == 4


def test_agent_call_limit(pool, scripted):
    ex = pool.run(
        'a = Agent("A", "p")\nfor i in range(10):\n    a(task)\n', "q", scripted, {"max_agent_calls": 3}
    )
    assert ex.status == "limit" and ex.error.type == "AgentCallLimit" and len(ex.turns) == 3


def test_parallel_counts_every_request_against_the_call_limit(pool, scripted):
    ex = pool.run('a = Agent("A", "p")\nparallel(a, [task] * 5)\n', "q", scripted, {"max_agent_calls": 4})
    assert ex.status == "limit" and ex.turns == []


def test_token_budget_cuts_max_tokens_then_refuses(pool):
    policy = ScriptedPolicy(lambda r: "x" * 50)
    ex = pool.run(
        'a = Agent("A", "p", memory=False)\nfor i in range(5):\n    a(task)\n',
        "q",
        policy,
        {"max_total_tokens": 70},
    )
    assert ex.status == "limit" and ex.error.type == "TokenLimit"
    assert [len(t.response_ids) for t in ex.turns] == [50, 20]
    assert policy.calls[1].sampling.max_tokens == 20


def test_message_size_limit(pool, scripted):
    ex = pool.run(
        'a = Agent("A", "p")\nsubmit(a(task * 1000))\n', "q" * 100, scripted, {"max_message_chars": 5000}
    )
    assert ex.status == "limit" and ex.error.type == "MessageTooLarge" and "memory=False" in ex.error.message


def test_answer_size_limit(pool, scripted):
    ex = pool.run(
        'a = Agent("A", "p")\na(task)\nsubmit(task * 1000)\n', "q" * 10, scripted, {"max_answer_chars": 100}
    )
    assert ex.status == "limit" and ex.error.type == "AnswerTooLarge" and "answer" in ex.error.message
    assert not ex.submitted


def test_tools_run_on_the_host_and_are_recorded(pool, scripted):
    log = []
    src = (
        'c = Agent("CodeSolver", "Put the program in one ```python block.")\n'
        "p = c(task)\nr = run_tests(p)\nout = run_program(p, input='3')\nsubmit(p + r + out)\n"
    )
    ex = pool.run(src, "q", scripted, tools=fake_tools(log))
    assert ex.status == "ok"
    assert [c.name for c in ex.tool_calls] == ["run_tests", "run_program"]
    assert ex.tool_calls[1].args == {"program": "```python\nprint(5)\n```", "input": "3"}
    assert ex.tool_calls[0].after_turn == 1 and ex.tool_calls[0].ok
    assert log[0] == ("run_tests", "```python\nprint(5)\n```")
    assert ex.answer.endswith("PASS: 2/2 tests passed (passed)5")


def test_tool_misuse_and_failures(pool, scripted):
    def broken(program: str) -> str:
        raise RuntimeError("runner down")

    src = 'a = Agent("A", "p")\nx = a(task)\nr = check(x)\nsubmit(r)\n'
    ex = pool.run(src, "q", scripted, tools={"check": broken})
    assert ex.status == "ok" and ex.answer.startswith("error: check failed (RuntimeError")
    assert not ex.tool_calls[0].ok
    ex = pool.run(
        'a = Agent("A", "p")\na(task)\nr = check(1, 2, 3)\n', "q", scripted, tools={"check": broken}
    )
    assert ex.status == "error" and ex.error.type == "TypeError" and ex.error.line == 3
    ex = pool.run('a = Agent("A", "p")\na(task)\nr = check(a)\n', "q", scripted, tools={"check": broken})
    assert ex.status == "error" and ex.error.type == "TypeError"
    ex = pool.run('a = Agent("A", "p")\na(task)\nfor i in range(5):\n    check(task)\n', "q", scripted,
                  {"max_tool_calls": 2}, tools={"check": lambda program: "ok"})  # fmt: skip
    assert ex.status == "limit" and ex.error.type == "ToolCallLimit" and len(ex.tool_calls) == 2
    with pytest.raises(ValueError, match="tool name"):
        pool.run('a = Agent("A", "p")\n', "q", scripted, tools={"submit": broken})


def test_request_errors_end_the_execution_other_policy_errors_raise(pool):
    def too_long(request):
        raise RequestError("prompt longer than the context")

    ex = pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", ScriptedPolicy(too_long))
    assert ex.status == "error" and ex.error.type == "RequestError"

    def down(request):
        raise PolicyError("server unreachable")

    with pytest.raises(PolicyError, match="unreachable"):
        pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", ScriptedPolicy(down))
    ex = pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", ScriptedPolicy(role_reply))
    assert ex.status == "ok"  # the pool carries on


def test_many_threads_share_the_pool(pool):
    policy = ScriptedPolicy(role_reply)
    results, errors = [], []

    def work(i):
        try:
            src = f'a = Agent("A{i}", "p")\nb = Agent("B", "p")\nsubmit(b(a(task)))\n'
            results.append(pool.run(src, f"task {i}", policy, seed=i))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 12
    assert all(r.status == "ok" and len(r.turns) == 2 for r in results)
    assert sorted(r.turns[0].messages[-1]["content"] for r in results) == sorted(
        f"task {i}" for i in range(12)
    )
    assert len(pool.worker_info()) <= pool.workers


def test_workers_are_reused_and_report_their_hardening(pool, scripted):
    before = pool.counters["started"]
    for _ in range(5):
        assert pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", scripted).status == "ok"
    assert pool.counters["started"] == before
    for mem in pool.worker_memory_kb():
        assert 0 < mem["VmRSS"] < 100_000


def test_run_script_uses_a_default_pool(scripted):
    try:
        ex = run_script('a = Agent("A", "p")\nsubmit(a(task))\n', "q", scripted, {"timeout_s": 5})
        assert ex.status == "ok" and ex.answer == "The answer is \\boxed{5}."
    finally:
        sandbox.default_pool().close()


def test_closed_pool_refuses(scripted):
    p = sandbox.SandboxPool(1)
    p.close()
    with pytest.raises(sandbox.SandboxError, match="closed"):
        p.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", scripted)


def test_set_order_is_the_same_in_every_worker(pool, scripted):
    """Workers run with a fixed hash seed: iterating a set of strings gives one order everywhere."""
    src = 'a = Agent("A", "p")\na(task)\nsubmit(",".join(set(["pear", "fig", "kiwi", "plum", "lime", "date"])))\n'
    answers = {pool.run(src, "q", scripted).answer for _ in range(6)}
    with sandbox.SandboxPool(1) as other:
        answers.add(other.run(src, "q", scripted).answer)
    assert len(answers) == 1


def test_a_huge_parallel_is_a_limit_not_a_crash(pool, scripted):
    ex = pool.run('a = Agent("A", "p")\nparallel(a, [task] * 500)\n', "q", scripted, {"max_agent_calls": 8})
    assert ex.status == "limit" and ex.error.type == "AgentCallLimit"


def test_a_message_too_large_for_the_channel_is_a_limit(pool, scripted):
    ex = pool.run('a = Agent("A", "p")\na(task * 9_000_000)\n', "q", scripted, {"max_message_chars": 10**8})
    assert ex.status == "limit" and ex.error.type == "MessageTooLarge" and ex.error.line == 2
    assert pool.run('a = Agent("A", "p")\nsubmit(a(task))\n', "q", scripted).status == "ok"


# ---- a caller's timeout bounds the call, tools included (issue 64) ---------------------------------------

SLOW_TOOL_SCRIPT = 'a = Agent("A", "p")\nx = a(task)\nsubmit(slow(x))\n'
SLOW_TOOL_S = 5.0


def _slow(text: str) -> str:
    import time

    time.sleep(SLOW_TOOL_S)  # a fake tool that runs no program: nothing inside it stops at a deadline
    return text


def test_run_script_timeout_bounds_tool_calls_without_a_tool_budget(scripted):
    import time

    from builders import HANG_MARGIN_S

    start = time.monotonic()
    ex = run_script(SLOW_TOOL_SCRIPT, "q", scripted, {"timeout_s": 1.0}, tools={"slow": _slow})
    elapsed = time.monotonic() - start
    # the tool was abandoned at the caller's timeout: the execution did not wait for it to return
    assert ex.status == "timeout" and ex.error.type == "Timeout" and not ex.submitted, ex.error
    assert "tool calls included" in ex.error.message
    assert ex.tool_calls[0].ok is False and "time budget" in ex.tool_calls[0].result
    from metaagent.workflow.session import TOOL_GRACE_S

    assert elapsed < 1.0 + TOOL_GRACE_S + HANG_MARGIN_S


def test_an_explicit_tool_budget_is_kept_beside_the_scripts_own_time(pool, scripted):
    # tools with a budget of their own: a 5 s tool fits 30 s though the script's own time is 1 s ...
    tools = {"slow": _slow}
    ex = pool.run(SLOW_TOOL_SCRIPT, "q", scripted, {"timeout_s": 1.0, "tool_time_s": 30.0}, tools=tools)
    assert ex.status == "ok" and ex.submitted, ex.error
    # ... and a budget too small for it ends the execution at the budget, as a tool-time limit
    ex = pool.run(SLOW_TOOL_SCRIPT, "q", scripted, {"timeout_s": 1.0, "tool_time_s": 1.5}, tools=tools)
    assert ex.status == "limit" and ex.error.type == "ToolTimeLimit", ex.error


def test_every_shipped_config_keeps_an_explicit_tool_budget():
    from pathlib import Path

    import yaml

    from metaagent.rollout.config import RolloutConfig
    from metaagent.serve import ServeConfig

    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
    for path in configs:
        limits = (yaml.safe_load(path.read_text()).get("rollout") or {}).get("limits")
        if limits is not None:
            assert Limits.coerce(limits).tool_time_s == 60.0, path.name
    assert Limits.coerce(RolloutConfig().limits).tool_time_s == 60.0
    assert Limits.coerce(ServeConfig(model="scripted").limits()).tool_time_s == 60.0
