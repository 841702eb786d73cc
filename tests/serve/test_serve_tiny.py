"""The server with the real (tiny, random) model behind it: the openai client, streaming, httpx, batching.

The tiny model writes garbage, so valid teams come from the fixed-designer mode (``frozen_designer``); the
real tiny designer shows how an invalid design is reported.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from serve_helpers import API_KEY, ServerThread, free_port

from metaagent.rollout.config import SamplingConfig


def _start(**overrides):
    from metaagent.serve import ServeConfig, TeamService, create_app

    options = {
        "model": "tiny", "api_key": API_KEY, "port": free_port(), "sandbox_workers": 2, "max_wait_ms": 100.0,
        "executor_sampling": SamplingConfig(temperature=1.0, max_tokens=16),
        "designer_sampling": SamplingConfig(temperature=1.0, max_tokens=24),
    }  # fmt: skip
    options.update(overrides)
    service = TeamService(ServeConfig(**options))
    server = ServerThread(create_app(service), options["port"]).__enter__()
    assert service.wait_ready(120), service.error
    return server


@pytest.fixture(scope="module")
def frozen_server():
    server = _start(frozen_designer="single_math")
    yield server
    server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def designer_server():
    server = _start()
    yield server
    server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def oai(frozen_server):
    client = openai.OpenAI(base_url=f"{frozen_server.url}/v1", api_key=API_KEY, max_retries=0)
    yield client
    client.close()


def test_openai_client_plain(oai):
    reply = oai.chat.completions.create(model="metaagent", messages=[{"role": "user", "content": "What is 6 * 7?"}])
    team = reply.model_extra["metaagent"]
    (design,) = team["designs"]
    assert design["source"] == "frozen:template:single_math" and design["designer"] is None
    (execution,) = design["executions"]
    assert execution["status"] == "ok" and execution["turns"][0]["role"] == "MathSolver"
    assert execution["turns"][0]["completion_tokens"] <= 16
    assert reply.choices[0].message.content == team["answer"] == execution["answer"]
    assert team["answer"]  # the tiny model always says something
    assert reply.usage.prompt_tokens == execution["turns"][0]["prompt_tokens"] > 20
    assert set(team["usage"]["by_role"]) == {"executor"}  # no designer model in fixed-designer mode


def test_openai_client_streaming(oai):
    stream = oai.chat.completions.create(
        model="metaagent", messages=[{"role": "user", "content": "What is 6 * 7?"}], stream=True
    )
    events, content = [], ""
    for chunk in stream:
        if "metaagent" in (chunk.model_extra or {}):
            events.append(chunk.model_extra["metaagent"])
        for choice in chunk.choices:
            content += choice.delta.content or ""
    assert [e["event"] for e in events] == ["design", "turn", "execution", "team"]
    assert events[1]["turn"]["role"] == "MathSolver"
    assert events[2]["execution"]["status"] == "ok"
    assert content == events[-1]["team"]["answer"] == events[2]["execution"]["answer"]


def test_teams_with_httpx_are_reproducible_by_seed(frozen_server):
    with httpx.Client(base_url=frozen_server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as c:
        body = {"task": "What is 6 * 7?", "seed": 11, "n_executions": 2, "select": "majority"}
        a, b = c.post("/v1/teams", json=body).json(), c.post("/v1/teams", json=body).json()
        assert a["status"] == "answered" and a["selection"]["candidates"] == 2
        answers = lambda t: [e["answer"] for e in t["designs"][0]["executions"]]
        assert answers(a) == answers(b) and a["answer"] == b["answer"]
        assert answers(a)[0] != answers(a)[1]  # the two executions were sampled with different seeds
        r = c.post("/v1/teams", json={"task": "What is 6 * 7?", "n_designs": 2})
        assert r.status_code == 400 and "--frozen-designer" in r.json()["error"]["message"]


def test_concurrent_requests_share_batches(frozen_server):
    with httpx.Client(base_url=frozen_server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as c:
        before = _batcher(c.get("/metrics").text)
        with ThreadPoolExecutor(6) as ex:
            replies = list(ex.map(lambda i: c.post("/v1/teams", json={"task": f"What is {i} + {i}?"}), range(6)))
        assert all(r.status_code == 200 and r.json()["status"] == "answered" for r in replies)
        after = _batcher(c.get("/metrics").text)
    calls, requests = after[0] - before[0], after[1] - before[1]
    assert requests == 6 and calls < 6, f"{requests} agent calls went out in {calls} backend calls"


def _batcher(metrics: str) -> tuple[float, float]:
    calls = re.search(r'metaagent_serve_batcher_calls_total\{model="tiny"\} (\S+)', metrics)
    requests = re.search(r'metaagent_serve_batcher_requests_total\{model="tiny"\} (\S+)', metrics)
    assert calls and requests, metrics
    return float(calls.group(1)), float(requests.group(1))


def test_real_tiny_designer_invalid_design_is_reported(designer_server):
    with httpx.Client(base_url=designer_server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as c:
        r = c.post("/v1/teams", json={"task": "What is 6 * 7?", "n_designs": 2, "seed": 3})
        assert r.status_code == 200, r.text
        team = r.json()
        assert team["status"] == "no_answer" and team["answer"] is None
        assert len(team["designs"]) == 2
        for d in team["designs"]:
            assert not d["valid"] and d["executions"] == [] and d["check"]["errors"]
            assert d["designer"]["text"] and 0 < d["designer"]["completion_tokens"] <= 24
            assert d["designer"]["templates"]  # the in-context templates the designer was shown
        assert team["detail"].startswith("no valid design: design 0: line")
        assert team["usage"]["by_role"]["designer"]["requests"] == 2

        chat = c.post("/v1/chat/completions", json={"model": "metaagent",
                                                    "messages": [{"role": "user", "content": "What is 6 * 7?"}]})  # fmt: skip
        assert chat.status_code == 200
        body = chat.json()
        assert body["choices"][0]["message"]["content"] == "" and body["metaagent"]["status"] == "no_answer"
        metrics = c.get("/metrics").text
        assert 'metaagent_serve_designs_total{valid="false"} 3' in metrics
