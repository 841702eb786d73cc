"""Code tests use the task's own limits (issue #15 item 5): a CodeContests task's time and memory limits
reach the code runner (scaled by ``reward.domains.code.time_limit_multiplier``, raised to the floors), and the time limit is
CPU time, so a program is judged by the CPU it used, not by how busy the machine was."""

from __future__ import annotations

import json

import pytest

from metaagent.data.loaders import DatasetSpec, load_tasks
from metaagent.data.tasks import Task
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import RewardConfig, score_execution
from metaagent.domains import code as score_module  # the code domain runs the tests
from metaagent.domains.code import CodeSettings, code_limits

ROW = {
    "name": "1_A. Sum",
    "description": "Read a and b, print a + b.",
    "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
    "private_tests": {"input": ["10 20\n"], "output": ["30\n"]},
    "time_limit": {"seconds": 2, "nanos": 0},
    "memory_limit_bytes": 512 << 20,
}
#: burns ~1 s of CPU, then answers
BURN = "import time\nwhile time.process_time() < 1.0:\n    pass\na, b = map(int, input().split())\nprint(a + b)\n"


@pytest.fixture
def task(tmp_path) -> Task:
    path = tmp_path / "cc.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    (task,) = load_tasks(DatasetSpec("code_contests", path=str(path)))
    return task


def answer(program: str) -> Execution:
    reply = f"```python\n{program}```"
    coder = AgentTurn(
        index=0, role="Coder", system_prompt="", messages=[], response=reply, delivery=reply, prompt_ids=[],
        response_ids=[], logprobs=None, finish_reason="stop", model="m",
    )  # fmt: skip
    return Execution(index=0, status="ok", answer=reply, submitted=True, turns=[coder])


def test_a_code_contests_task_with_a_2s_limit_gets_2s(task, monkeypatch):
    assert task.metadata["time_limit_s"] == 2.0 and task.metadata["memory_limit_bytes"] == 512 << 20
    assert code_limits(task, CodeSettings()) == (2.0, 512)
    assert code_limits(task, CodeSettings(time_limit_multiplier=1.5)) == (3.0, 512)
    assert code_limits(task, CodeSettings(time_limit_floor_s=5.0, memory_floor_mb=1024)) == (5.0, 1024)
    untimed = Task(id="t", domain="code", question="q", tests=task.tests)
    assert code_limits(untimed, CodeSettings(time_limit_s=4.0, memory_mb=768)) == (4.0, 768)

    seen = {}
    real = score_module.run_code_tests

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(score_module, "run_code_tests", spy)
    record = score_execution(task, answer("a, b = map(int, input().split())\nprint(a + b)\n"), RewardConfig())
    assert record.correct == 1.0
    assert (seen["time_limit_s"], seen["memory_mb"]) == (2.0, 512)
    assert record.details["code_limits"] == {"time_limit_s": 2.0, "memory_mb": 512}


def test_the_limit_is_cpu_time_of_the_task(task):
    # 1 s of CPU fits the task's limit (2 s, x4 here: the wall clock, 3x the limit, then allows 24 s, so a
    # machine loaded to a tenth of a core for this program does not fail it) ...
    scaled = RewardConfig(domains={"code": {"time_limit_s": 0.5, "time_limit_multiplier": 4.0}})
    assert score_execution(task, answer(BURN), scaled).correct == 1.0
    # ... and not a flat 0.5 s limit (a task without its own limit): CPU or, on a busy machine, wall clock
    untimed = Task(id="t", domain="code", question="q", tests=task.tests)
    flat = RewardConfig(domains={"code": {"time_limit_s": 0.5, "time_limit_floor_s": 0.5}})
    record = score_execution(untimed, answer(BURN), flat)
    assert record.correct == 0.0 and record.details["code"]["first_failure"]["status"] == "timeout"


def test_limit_options_are_validated():
    with pytest.raises(ValueError, match=r"reward\.domains\.code\.time_limit_multiplier"):
        RewardConfig(domains={"code": {"time_limit_multiplier": 0}})
    with pytest.raises(ValueError, match="memory_floor_mb"):
        CodeSettings(memory_floor_mb=10)


def test_time_spent_waiting_is_not_counted_against_the_limit():
    """1.5 s of wall clock (waiting, as a program does on a busy machine) under a 1 s limit passes: the limit
    is CPU time; the wall clock (3x) only stops programs that never finish."""
    from metaagent.execution.code import run_code_tests

    result = run_code_tests("import time\ntime.sleep(1.5)\nprint(5)\n", {"inputs": [""], "outputs": ["5"]},
                            time_limit_s=1.0)  # fmt: skip
    assert result.all_passed, result.summary()
    outcome = result.tests[0]
    assert outcome.elapsed_s >= 1.5 and outcome.cpu_s < 1.0


def test_a_tasks_own_limits_are_capped_where_the_config_sets_a_cap(task):
    # serve's config caps what a client's task may ask for at the server's flat limits (issue 64)
    greedy = Task(id="g", domain="code", question="q", tests=task.tests,
                  metadata={"time_limit_s": 40.0, "memory_limit_bytes": 8 << 30})  # fmt: skip
    assert code_limits(greedy, CodeSettings()) == (40.0, 8192)  # training data is trusted: no cap
    capped = CodeSettings(max_time_limit_s=4.0, max_memory_mb=1024)
    assert code_limits(greedy, capped) == (4.0, 1024)
    assert code_limits(task, capped) == (2.0, 512)  # limits below the caps stay the task's
    assert code_limits(greedy, CodeSettings(time_limit_multiplier=3.0, max_time_limit_s=4.0))[0] == 4.0
    from metaagent.serve import ServeConfig

    served = ServeConfig(model="scripted").reward_config().domain_settings("code")
    assert (served.max_time_limit_s, served.max_memory_mb) == (served.time_limit_s, served.memory_mb)
