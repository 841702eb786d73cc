"""A served client cannot set its own test limits, nor hold a request past its deadline while it is scored
(issue 64, hole 2). A real uvicorn on a local port over scripted policies; the code tests run for real.
"""

from __future__ import annotations

import pytest

CODE_SCRIPT = '```python\ncoder = Agent("CodeSolver", "You write a program.")\nsubmit(coder(task))\n```'
ECHO = "x = input()\nprint(x)\n"
#: passes only with more than ~1.1 GB of address space (the server's cap is 1024 MB)
BIG = "block = bytearray(1100 << 20)\nprint(input())\n"
#: blocks in a sleep: only the wall clock (or the request's deadline) stops it
SLEEPER = "import time\ntime.sleep(60)\nprint(input())\n"
#: an assert test whose program and judge (the client's test code) each hold ~180 MB: one test's memory
HOLDER = 'KEEP = []\n\ndef f():\n    KEEP.append(b"\\x01" * (180 << 20))\n    return 1\n'
HOLDING_CHECK = (
    "def check(candidate):\n    held = candidate()\n"
    '    mine = b"\\x02" * (180 << 20)\n    assert held == 1 and mine\n'
)


def _server(make_server, program: str, **config):
    def designer(request) -> str:
        return CODE_SCRIPT

    def executor(request) -> str:
        return f"```python\n{program}```"

    return make_server(designer, executor, **config)


def _scored(client, tests, metadata=None) -> dict:
    task = {"question": "Write a program that prints its input.", "tests": tests, "metadata": metadata or {}}
    r = client.post("/v1/teams", json={"task": task, "domain": "code", "return_trace": True, "seed": 1})
    assert r.status_code == 200, r.text
    team = r.json()
    assert team["status"] == "answered", team["detail"]
    return team["trace"]["designs"][0]["executions"][0]["reward"]


STDIO = {"inputs": ["7\n"], "outputs": ["7\n"]}
GREEDY = {"time_limit_s": 40.0, "memory_limit_bytes": 8 << 30}


def test_a_clients_task_limits_are_capped_at_the_servers_reward_config(make_server, client_for):
    from metaagent.rewards import RewardConfig

    base = RewardConfig().domain_settings("code")  # the code domain's own limits (reward.domains.code)
    client = client_for(_server(make_server, ECHO))
    reward = _scored(client, STDIO, GREEDY)
    assert reward["correct"] == 1.0
    server_limits = {"time_limit_s": base.time_limit_s, "memory_mb": base.memory_mb}
    assert reward["details"]["code_limits"] == server_limits
    # limits below the server's stay the client's (raised to the floors as for any task)
    reward = _scored(client, STDIO, {"time_limit_s": 2.0, "memory_limit_bytes": 512 << 20})
    assert reward["details"]["code_limits"] == {"time_limit_s": 2.0, "memory_mb": 512}


def test_a_program_needing_more_memory_than_the_server_allows_fails(make_server, client_for):
    client = client_for(_server(make_server, BIG))
    reward = _scored(client, STDIO, GREEDY)
    assert reward["correct"] == 0.0 and reward["error"] is None
    assert reward["details"]["code"]["first_failure"]["status"] == "memory"


def test_the_judge_of_an_assert_test_runs_inside_the_tests_memory_cgroup(make_server, client_for):
    from metaagent.execution.isolation import cgroup_slots

    if cgroup_slots() is None:
        pytest.skip("no memory cgroups can be made here (the judge's cgroup cannot be observed)")
    client = client_for(_server(make_server, HOLDER))
    tests = {"assert": HOLDING_CHECK, "entry_point": "f"}
    # 256 MB per process (each holds ~190 MB: fits), one cgroup of 256 MB + scratch for both: it does not
    reward = _scored(client, tests, {"memory_limit_bytes": 256 << 20})
    code = reward["details"]["code"]
    assert reward["correct"] == 0.0, code
    assert code["first_failure"]["status"] == "memory" and code["sandbox"]["sandbox/oom_kill"] >= 1
    # the same test with room for both passes: the judge itself works inside the cgroup
    roomy = _scored(client, tests, {"memory_limit_bytes": 1024 << 20})
    assert roomy["correct"] == 1.0, roomy["details"]["code"]


def test_scoring_runs_under_the_request_deadline(make_server, client_for):
    client = client_for(_server(make_server, SLEEPER, request_timeout_s=4.0))
    reward = _scored(client, STDIO)
    # the test was cut by the request's budget, not by its own limits: an error counted, never a 0
    assert reward["correct"] is None and reward["total"] is None
    assert reward["details"]["error_kind"] == "request_deadline" and "time budget" in reward["error"]
