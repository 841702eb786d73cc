"""The host side of an execution against a fake worker: what the host sends back, and bad workers."""

from __future__ import annotations

from metaagent.policy import ScriptedPolicy
from metaagent.seeding import call_seed
from metaagent.workflow.channel import ChannelClosed, ProtocolError
from metaagent.workflow.limits import Limits
from metaagent.workflow.session import Session, executor_sampling, find_parents


class FakeChannel:
    def __init__(self, incoming):
        self.incoming = list(incoming)
        self.sent = []

    def send(self, message, timeout=None):
        self.sent.append(message)

    def recv(self, timeout=None):
        item = self.incoming.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class FakeWorker:
    def __init__(self, incoming, exit_code=None):
        self.channel = FakeChannel(incoming)
        self.killed = False
        self.exit_code = exit_code

    def kill(self):
        self.killed = True
        return -9

    def wait_exit(self, timeout=2.0):
        return self.exit_code


def session(policy=None, **limits):
    return Session(
        "script", "the task", policy or ScriptedPolicy(lambda r: "<delivery>ok</delivery>"), Limits(**limits),
        executor_sampling(None), {}, seed=3,
    )  # fmt: skip


CALL = {"op": "agents", "calls": [{"role": "A", "system": "p", "history": [], "message": "hi"}]}
DONE = {"op": "done", "status": "ok", "submitted": True, "answer": "42", "healthy": True, "error": None}


def test_the_worker_gets_text_only():
    s = session()
    worker = FakeWorker([CALL, DONE])
    assert s.drive(worker) is True
    reply = worker.channel.sent[1]
    assert reply == {"op": "result", "replies": [{"text": "ok", "response": "<delivery>ok</delivery>"}]}
    ex = s.execution(0.1)
    assert ex.status == "ok" and ex.answer == "42" and ex.turns[0].response_ids  # ids stay on the host


def test_a_worker_talking_nonsense_is_killed():
    for bad in (
        {"op": "agents", "calls": "nope"},
        {
            "op": "agents",
            "calls": [
                {
                    "role": "A",
                    "system": "p",
                    "history": [{"role": "assistant", "content": "x"}],
                    "message": "m",
                }
            ],
        },
        {"op": "agents", "calls": [{"role": 5, "system": "p", "history": [], "message": "m"}]},
        {"op": "tool", "name": "rm_rf", "args": [], "kwargs": {}},
        {"op": "launch_missiles"},
        {"op": "done", "status": "great"},
    ):
        s, worker = session(), FakeWorker([bad])
        assert s.drive(worker) is False and worker.killed
        ex = s.execution(0.0)
        assert ex.status == "error" and ex.error.type == "ProtocolError"
    s, worker = session(), FakeWorker([ProtocolError("frame too large")])
    assert s.drive(worker) is False and worker.killed and s.execution(0).error.type == "ProtocolError"


def test_a_worker_that_disappears_is_a_crash():
    s = session()
    assert s.drive(FakeWorker([CALL, ChannelClosed("eof")], exit_code=-9)) is False
    ex = s.execution(0.0)
    assert ex.status == "error" and ex.error.type == "WorkerCrash" and "SIGKILL" in ex.error.message
    assert len(ex.turns) == 1 and ex.answer == "ok"  # the fallback answer survives
    s = session()
    s.drive(FakeWorker([ChannelClosed("eof")], exit_code=-24))
    assert s.execution(0).status == "limit" and s.execution(0).error.type == "CpuLimit"


def test_lone_surrogates_from_the_worker_are_made_valid_text():
    call = {
        "op": "agents",
        "calls": [{"role": "A", "system": "p", "history": [], "message": "bad \ud800 text"}],
    }
    s = session()
    s.drive(FakeWorker([call, DONE]))
    assert s.turns[0].messages[-1]["content"] == "bad ? text"


def test_helpers():
    assert call_seed(None, 0) is None
    assert call_seed(1, 0) == call_seed(1, 0) != call_seed(1, 1)
    assert 0 <= call_seed(123, 4) < 2**31
    assert executor_sampling({"max_tokens": 5, "stop": ["END"]}).stop == ("END", "</delivery>")
    assert find_parents([], [{"role": "user", "content": "x"}], "t") == []


def test_tool_calls_share_a_time_budget_and_run_inside_it():
    import time

    from metaagent.execution import code

    seen = []

    def tool(x):
        seen.append(code._DEADLINE.get() - time.monotonic())  # what a program started here may use
        time.sleep(0.3)
        return "done"

    s = Session("script", "t", ScriptedPolicy(lambda r: "x"), Limits(tool_time_s=0.5, total_timeout_s=30.0),
                executor_sampling(None), {"tool": tool}, seed=3)  # fmt: skip
    call = {"op": "tool", "name": "tool", "args": [1], "kwargs": {}}
    worker = FakeWorker([call, call, call, {**DONE, "status": "stopped", "submitted": False}])
    s.drive(worker)
    assert [m.get("op") for m in worker.channel.sent[1:]] == ["result", "result", "stop"]
    assert 0.4 < seen[0] <= 0.5 and seen[1] <= 0.2  # the second call gets what the first left
    ex = s.execution(0.0)
    assert ex.status == "limit" and ex.error.type == "ToolTimeLimit" and len(ex.tool_calls) == 2


def test_every_shipped_config_caps_the_whole_execution():
    import math
    from pathlib import Path

    import yaml

    from metaagent.rollout.config import RolloutConfig

    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
    assert len(configs) >= 10
    for path in configs:
        limits = Limits.coerce((yaml.safe_load(path.read_text()).get("rollout") or {}).get("limits"))
        assert limits.total_timeout_s is not None and math.isfinite(limits.total_timeout_s), path.name
    assert Limits.coerce(RolloutConfig().limits).total_timeout_s is not None
