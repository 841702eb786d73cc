"""Unit tests of the server's pure parts: config, metrics text, selection, domain, chat task text, fronts."""

from __future__ import annotations

import re

import pytest

from metaagent.config import ConfigError
from metaagent.domain import guess_domain
from metaagent.policy import ChatRequest, PolicyError, SamplingParams, ScriptedPolicy
from metaagent.records import CheckReport, Design, Execution
from metaagent.serve import selection
from metaagent.serve.config import ServeConfig, is_loopback
from metaagent.serve.errors import ServeError, error_body
from metaagent.serve.metrics import Metrics
from metaagent.serve.openai_compat import event_text, task_text
from metaagent.serve.protocol import ChatCompletionRequest
from metaagent.serve.request_policy import RequestBudget, RequestPolicy

# ---- config -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.5"])
def test_loopback_hosts_need_no_key(host):
    assert is_loopback(host)
    ServeConfig(host=host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_other_hosts_need_a_key(host):
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="without an API key"):
        ServeConfig(host=host)
    ServeConfig(host=host, api_key="a-long-enough-key")


def test_config_errors_name_the_flag():
    with pytest.raises(ConfigError, match="at least 8") as e:
        ServeConfig(api_key="short")
    assert "short" not in str(e.value)  # the key is not echoed
    with pytest.raises(ConfigError, match="--base-url"):
        ServeConfig(backend="openai", model="m")
    with pytest.raises(ConfigError, match="--workers = 0: Input should be greater than 0"):
        ServeConfig(sandbox_workers=0)
    with pytest.raises(ConfigError, match="--timeout = 0: Input should be greater than 0"):
        ServeConfig(request_timeout_s=0)
    with pytest.raises(ConfigError, match="--backend"):
        ServeConfig(backend="tgi")
    with pytest.raises(ConfigError, match="--continuous only applies"):
        ServeConfig(backend="openai", base_url="http://127.0.0.1:1/v1", continuous=True)
    config = ServeConfig(frozen_designer="single_math")
    assert config.designer_name is None and config.executor_name == "embedded"
    assert "</delivery>" in config.executor_sampling.stop
    assert ServeConfig(api_key="a-long-enough-key").public()["api_key"] == "***"


# ---- metrics ------------------------------------------------------------------------------------------------

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+Inf-]+$')


def test_metrics_text_format():
    m = Metrics()
    m.requests.labels(route="/v1/teams", status="200").inc()
    m.requests.labels(route="/v1/teams", status="200").inc(2)
    m.latency.labels(route="/v1/teams").observe(0.3)
    m.latency.labels(route="/v1/teams").observe(7.0)
    m.tokens.labels(role='we"ird\nrole', kind="prompt").inc(12)
    text = m.render()
    assert text.endswith("\n")
    for line in text.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ")) or SAMPLE.match(line), line
    assert 'metaagent_serve_requests_total{route="/v1/teams",status="200"} 3.0' in text
    assert 'metaagent_serve_request_duration_seconds_bucket{le="0.25",route="/v1/teams"} 0.0' in text
    assert 'metaagent_serve_request_duration_seconds_bucket{le="0.5",route="/v1/teams"} 1.0' in text
    assert 'metaagent_serve_request_duration_seconds_bucket{le="+Inf",route="/v1/teams"} 2.0' in text
    assert 'metaagent_serve_request_duration_seconds_count{route="/v1/teams"} 2.0' in text
    assert 'metaagent_serve_request_duration_seconds_sum{route="/v1/teams"} 7.3' in text
    assert 'role="we\\"ird\\nrole"' in text
    assert "# TYPE metaagent_serve_request_duration_seconds histogram" in text


def test_metric_misuse_is_an_error():
    m = Metrics()
    with pytest.raises(ValueError):
        m.requests.labels(route="/x").inc()  # a label missing
    with pytest.raises(ValueError):
        m.requests.labels(route="/x", status="200").inc(-1)  # counters only increase


def test_callback_metrics_are_read_at_scrape_time_and_replaced_by_name():
    from metaagent.serve.metrics import CallbackMetric

    m = Metrics()
    state = {"v": 1.0}
    m.add_callback(CallbackMetric("metaagent_serve_ready", "ready", (), lambda: {(): state["v"]}))
    assert "metaagent_serve_ready 1.0" in m.render()
    state["v"] = 0.0
    assert "metaagent_serve_ready 0.0" in m.render()
    m.add_callback(CallbackMetric("metaagent_serve_ready", "ready", (), lambda: {(): 5.0}))
    assert m.render().count("# TYPE metaagent_serve_ready gauge") == 1 and "metaagent_serve_ready 5.0" in m.render()


# ---- selection ----------------------------------------------------------------------------------------------


def _design(index: int, answers: list[str | None], status: str = "ok") -> Design:
    d = Design(index=index, source="designer", sample=None, script="x", check=CheckReport(ok=True))
    d.executions = [Execution(index=i, status=status, answer=a) for i, a in enumerate(answers)]
    return d


def test_math_answers_vote_on_the_normalised_final_answer():
    assert selection.answer_key("so \\boxed{\\dfrac{1}{2}}", "math") == selection.answer_key("\\boxed{\\frac{1} {2}}", "math")
    assert selection.answer_key("The answer is 42.", "math") == "42"
    long = "x" * 500
    assert len(selection.answer_key(long, "math")) <= selection.MAX_KEY_CHARS
    assert selection.answer_key(long, "math") != selection.answer_key(long + "y", "math")


def test_code_answers_vote_on_the_program():
    a = "Here:\n```python\nprint(1)\n\n\nprint(2)   \n```"
    b = "```python\nprint(1)\nprint(2)\n```\nDone."
    assert selection.answer_key(a, "code") == selection.answer_key(b, "code")
    assert selection.answer_key(a, "code") != selection.answer_key("```python\nprint(3)\n```", "code")


def test_majority_ties_go_to_the_first_group_and_failures_are_not_candidates():
    designs = [_design(0, ["\\boxed{3}", None]), _design(1, ["\\boxed{4}", "\\boxed{4}"]), _design(2, ["\\boxed{3}"])]
    designs.append(_design(3, ["\\boxed{9}", "\\boxed{9}", "\\boxed{9}"], status="timeout"))
    cands = selection.collect(designs, "math")
    assert [(c.design, c.execution) for c in cands] == [(0, 0), (1, 0), (1, 1), (2, 0)]
    assert selection.tally(cands) == {"3": 2, "4": 2}
    chosen = selection.majority(cands)
    assert (chosen.design, chosen.execution, chosen.key) == (0, 0, "3")
    assert [c.key for c in selection.distinct(cands)] == ["3", "4"]


def test_judge_prompt_and_choice():
    cands = [selection.Candidate(0, 0, "A" * 5000, "a"), selection.Candidate(1, 0, "B", "b")]
    messages = selection.judge_messages("What?", cands)
    assert messages[0]["role"] == "system" and "<delivery>" in messages[0]["content"]
    assert "Candidate 1:" in messages[1]["content"] and "Candidate 2:\nB" in messages[1]["content"]
    assert "...[cut]" in messages[1]["content"]
    assert selection.parse_choice("I think so. <delivery>Candidate 2</delivery>", 2) == 2
    assert selection.parse_choice("<delivery>7</delivery>", 2) is None  # out of range
    assert selection.parse_choice("<delivery>2</delivery>\nor 1", 2) == 2  # the delivery wins over the last line
    assert selection.parse_choice("Long reasoning about 3 things\nFinal: 1", 2) == 1
    assert selection.parse_choice("no idea", 2) is None


# ---- domain and chat text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, domain",
    [
        ("What is 2 + 3?", "math"),
        ("Find all real x with x^2 = 4.", "math"),
        ("Write a function that reverses a list.", "code"),
        ("Read n from standard input and print n squared.", "code"),
        ("Fix this:\n```\nprint(x\n```", "code"),
        ("Implement quicksort in Python.", "code"),
    ],
)
def test_guess_domain(text, domain):
    assert guess_domain(text) == domain


def _chat(messages):
    return ChatCompletionRequest(model="metaagent", messages=messages)


def test_chat_task_text():
    assert task_text(_chat([{"role": "user", "content": "What is 2 + 3?"}])) == ("What is 2 + 3?", "What is 2 + 3?")
    text, question = task_text(_chat([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2 + 3?"}]},
    ]))  # fmt: skip
    assert question == "What is 2 + 3?"
    assert text == "Context:\nInstructions: Be brief.\nUser: Hi\nAssistant: Hello\n\nTask:\nWhat is 2 + 3?"
    with pytest.raises(ServeError, match="only text"):
        task_text(_chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]))
    with pytest.raises(ServeError, match="tool message"):
        task_text(_chat([{"role": "tool", "content": "x"}, {"role": "user", "content": "y"}]))


def test_event_text_is_readable():
    design = {"index": 0, "valid": False, "check": {"errors": [{"line": 2, "code": "E-SYNTAX", "message": "bad"}]}}
    assert event_text({"event": "design", "design": design}) == "Design 0 is invalid: line 2: [E-SYNTAX] bad\n\n"
    assert event_text({"event": "turn", "turn": {"role": "Solver", "response": " 5 \n"}}) == "[Solver] 5\n\n"


def test_error_body_shape():
    body = error_body(429, "slow down", code="too_many_requests")
    assert body == {"error": {"message": "slow down", "type": "rate_limit_error", "param": None,
                              "code": "too_many_requests"}}  # fmt: skip


# ---- the per-request policy front --------------------------------------------------------------------------


def _request(role: str = "executor") -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8), role=role)


def test_request_policy_counts_reports_and_stops():
    inner = ScriptedPolicy(["one", "two", "three"])
    budget = RequestBudget(60)
    seen = []
    front = RequestPolicy(inner, budget, lambda req, c: seen.append((req.role, c.text)))
    front.generate([_request(), _request("judge")])
    assert seen == [("executor", "one"), ("judge", "two")]
    assert front.usage.snapshot()["requests"] == {"executor": 1, "judge": 1}
    budget.cancel("the client disconnected")
    with pytest.raises(PolicyError, match="client disconnected"):
        front.generate([_request()])
    assert len(inner.calls) == 2  # the refused call never reached the model


def test_request_policy_time_budget_and_broken_listener():
    inner = ScriptedPolicy(["a", "b"])

    def broken(request, completion):
        raise RuntimeError("stream closed")

    front = RequestPolicy(inner, RequestBudget(60), broken)
    assert front.generate([_request()])[0].text == "a"  # a broken stream does not fail the team
    expired = RequestPolicy(inner, RequestBudget(1e-9))
    with pytest.raises(PolicyError, match="time budget"):
        expired.generate([_request()])


def test_api_key_check_is_constant_time(monkeypatch):
    import asyncio

    from metaagent.serve import middleware

    calls = []
    real = middleware.hmac.compare_digest
    monkeypatch.setattr(middleware.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    guard = middleware.SecurityMiddleware(None, api_key="secret-key-123", max_body_bytes=100)  # type: ignore[arg-type]
    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/v1/teams", "headers": [(b"authorization", b"Bearer guess-key-0000")]}
    asyncio.run(guard(scope, None, send))  # type: ignore[arg-type]
    assert sent[0]["status"] == 401 and calls == [(b"guess-key-0000", b"secret-key-123")]
