"""The server over scripted designer/executor policies: a real uvicorn on a local port, real sandbox workers.

Scripted policies only stand in for the model; routing, validation, admission, the engine, the sandbox,
selection, streaming and recording are the real ones.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_helpers import API_KEY, TEAM_SCRIPT, default_designer, default_executor, scripted_models

from metaagent.records import read_trees


def test_team_is_designed_executed_and_reported(make_server, client_for):
    server = make_server()
    r = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?", "seed": 7})
    assert r.status_code == 200, r.text
    team = r.json()
    assert team["status"] == "answered" and team["detail"] is None
    assert team["answer"] == "The answer is \\boxed{5}."
    assert team["task"]["domain"] == "math" and team["task"]["has_reference"] is False
    (design,) = team["designs"]
    assert design["valid"] and design["source"] == "designer"
    assert design["script"].startswith('solver = Agent("MathSolver"')
    assert [r["name"] for r in design["roles"]] == ["MathSolver", "MathChecker"]
    assert design["roles"][0]["system_prompt"] == "You solve math problems step by step."
    assert design["check"] == {"ok": True, "errors": [], "warnings": []}
    assert design["designer"]["text"] == TEAM_SCRIPT and design["designer"]["completion_tokens"] > 0
    (execution,) = design["executions"]
    assert execution["status"] == "ok" and execution["submitted"]
    assert execution["reward"] is None  # no reference: no reward, and no error either
    turns = execution["turns"]
    assert [t["role"] for t in turns] == ["MathSolver", "MathChecker"]
    assert turns[0]["delivery"] == "5" and turns[0]["message"] == "What is 2 + 3?"
    assert turns[1]["parents"] == [0]  # the checker saw the solver's delivery
    usage = team["usage"]
    assert set(usage["by_role"]) == {"designer", "executor"}
    assert usage["by_role"]["executor"]["requests"] == 2
    assert usage["by_agent"]["MathChecker"]["requests"] == 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert {"design_s", "execute_s", "select_s", "total_s"} <= set(team["timings"])
    assert team["seed"] == 7 and team["selection"]["method"] == "first"
    assert team["trace"] is None


def test_reference_answer_is_scored_and_trace_is_the_record(make_server, client_for):
    server = make_server()
    body = {"task": {"question": "What is 2 + 3?", "answer": "5"}, "domain": "math", "return_trace": True}
    team = client_for(server).post("/v1/teams", json=body).json()
    reward = team["designs"][0]["executions"][0]["reward"]
    assert reward["correct"] == 1.0 and reward["error"] is None
    assert team["task"]["has_reference"] is True
    trace = team["trace"]
    assert trace["mode"] == "serve" and trace["task"]["answer"] == "5"
    assert trace["designs"][0]["sample"]["response_ids"]  # the full record, token ids included


def test_design_only(make_server, client_for):
    server = make_server()
    team = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?", "execute": False, "n_designs": 2}).json()
    assert team["status"] == "designed" and team["answer"] is None and team["selection"] is None
    assert len(team["designs"]) == 2 and all(d["executions"] == [] for d in team["designs"])
    assert team["usage"]["by_role"] == {"designer": {"requests": 2, "prompt_tokens": team["usage"]["prompt_tokens"],
                                                     "completion_tokens": team["usage"]["completion_tokens"]}}


def _designer_by_index(scripts):
    """Designer reply k goes to the k-th design of a request (designs are requested in index order)."""
    lock, calls = threading.Lock(), []

    def designer(request):
        with lock:
            calls.append(request)
            return scripts[(len(calls) - 1) % len(scripts)]

    return designer


def _answer_script(answer: str) -> str:
    return f'```python\na = Agent("Solver{answer}", "You answer {answer}.")\nsubmit(a(task))\n```'


def _answer_executor(request):
    system = request.messages[0]["content"]
    if system.startswith("You are a judge"):
        return "Candidate 2 is correct. <delivery>2</delivery>"
    answer = system.split("You answer ", 1)[1].split(".", 1)[0]
    return f"<delivery>\\boxed{{{answer}}}</delivery>"


def test_majority_and_judge_selection(make_server, client_for):
    server = make_server(_designer_by_index([_answer_script("7"), _answer_script("9"), _answer_script("9")]),
                         _answer_executor)  # fmt: skip
    client = client_for(server)
    team = client.post("/v1/teams", json={"task": "What is 4 + 5?", "n_designs": 3, "select": "majority"}).json()
    sel = team["selection"]
    assert sel["votes"] == {"7": 1, "9": 2} and sel["candidates"] == 3
    assert team["answer"] == "\\boxed{9}" and sel["design"] == 1  # the first design of the largest group

    team = client.post("/v1/teams", json={"task": "What is 4 + 5?", "n_designs": 3, "select": "judge"}).json()
    sel = team["selection"]
    assert sel["judge"]["choice"] == 2  # distinct candidates are 7 (1) and 9 (2)
    assert team["answer"] == "\\boxed{9}"
    assert team["usage"]["by_role"]["judge"]["requests"] == 1


def test_judge_falls_back_to_majority_and_is_skipped_when_all_agree(make_server, client_for):
    def undecided_executor(request):
        if request.messages[0]["content"].startswith("You are a judge"):
            return "They all look fine to me."
        return _answer_executor(request)

    scripts = [_answer_script("7"), _answer_script("9"), _answer_script("9")]
    server = make_server(_designer_by_index(scripts), undecided_executor)
    client = client_for(server)
    team = client.post("/v1/teams", json={"task": "What is 4 + 5?", "n_designs": 3, "select": "judge"}).json()
    sel = team["selection"]
    assert sel["judge"]["choice"] is None and "majority decided" in sel["note"]
    assert team["answer"] == "\\boxed{9}"

    team = client.post("/v1/teams", json={"task": "What is 4 + 5?", "n_executions": 3, "select": "judge"}).json()
    assert team["selection"]["note"] == "all candidates agree: no judge call was needed"
    assert "judge" not in team["usage"]["by_role"]


def test_invalid_design_is_reported_not_an_error(make_server, client_for):
    server = make_server(lambda r: "I would use two agents, a solver and a checker.")
    r = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?"})
    assert r.status_code == 200
    team = r.json()
    assert team["status"] == "no_answer" and team["answer"] is None
    (design,) = team["designs"]
    assert not design["valid"] and design["executions"] == []
    assert design["check"]["errors"][0]["code"] == "E-SYNTAX"  # prose read as a script does not parse
    assert "no valid design" in team["detail"] and "E-SYNTAX" in team["detail"]


def test_hostile_design_does_not_affect_other_requests(make_server, client_for):
    server = make_server(script_timeout_s=5.0, sandbox_workers=2)
    client = client_for(server)

    def post(task):
        t0 = time.monotonic()
        r = client.post("/v1/teams", json={"task": task})
        return r, time.monotonic() - t0, time.monotonic()

    with ThreadPoolExecutor(4) as ex:
        hostile = ex.submit(post, "HOSTILE: count forever")
        time.sleep(0.3)  # the endless loop holds one sandbox worker now
        normal = [ex.submit(post, f"What is {i} + 3?") for i in range(3)]
        results = [f.result() for f in normal]
        h, h_elapsed, h_end = hostile.result()
    for r, elapsed, end in results:
        assert r.status_code == 200 and r.json()["status"] == "answered"
        assert end < h_end, f"a normal request waited {elapsed:.1f} s behind the hostile one"
    assert h.status_code == 200
    execution = h.json()["designs"][0]["executions"][0]
    assert execution["status"] == "timeout" and execution["error"]["type"] == "Timeout"
    assert h.json()["status"] == "no_answer" and "timeout x1" in h.json()["detail"]
    assert h_elapsed >= 5.0
    metrics = client.get("/metrics").text
    assert 'metaagent_serve_executions_total{status="timeout"} 1' in metrics
    assert 'metaagent_serve_executions_total{status="ok"} 3' in metrics
    assert 'metaagent_serve_sandbox_workers_total{event="replaced"} 1' in metrics


def test_api_key_is_required_except_for_health(make_server):
    server = make_server()
    url = f"{server.url}/v1/teams"
    assert httpx.post(url, json={"task": "1+1"}).status_code == 401
    r = httpx.post(url, json={"task": "1+1"}, headers={"Authorization": "Bearer wrong-key-000000000"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    error = r.json()["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
    assert httpx.get(f"{server.url}/v1/models", headers={"Authorization": API_KEY}).status_code == 401
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_size_limits_and_malformed_requests(make_server, client_for):
    server = make_server(max_task_chars=100, max_request_bytes=2000)
    client = client_for(server)
    r = client.post("/v1/teams", json={"task": "x" * 101})
    assert r.status_code == 413 and r.json()["error"]["param"] == "task"
    assert "at most 100" in r.json()["error"]["message"]
    r = client.post("/v1/teams", json={"task": "y" * 5000})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"task": "'
        for _ in range(10):
            yield b"z" * 500
        yield b'"}'

    r = client.post("/v1/teams", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "2000 bytes" in r.json()["error"]["message"]

    r = client.post("/v1/teams", content=b'{"task": "1+1",', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert "not valid JSON" in r.json()["error"]["message"]
    r = client.post("/v1/teams", json={"task": "1+1", "n_designs": "many", "colour": "red"})
    assert r.status_code == 422
    message = r.json()["error"]["message"]
    assert "n_designs" in message and "colour" in message and r.json()["error"]["param"] == "n_designs"
    r = client.post("/v1/teams", json={"task": "1+1", "n_designs": 99})
    assert r.status_code == 400 and "--max-designs" in r.json()["error"]["message"]
    r = client.post("/v1/teams", json={"task": {"question": "sum", "tests": "nonsense"}, "domain": "math"})
    assert r.status_code == 422 and "gold 'answer'" in r.json()["error"]["message"]
    assert client.get("/v1/teams").status_code == 405
    r = client.get("/nope")
    assert r.status_code == 404 and "error" in r.json()


def test_internal_errors_carry_no_stack_trace(make_server, client_for):
    def broken_executor(request):
        raise ZeroDivisionError("secret internal detail")

    server = make_server(default_designer, broken_executor)
    r = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?"})
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "server_error" and "see the server log" in error["message"]
    assert "Traceback" not in r.text and "secret internal detail" not in r.text and "ZeroDivision" not in r.text


def test_in_flight_cap_gives_429(make_server, client_for):
    release = threading.Event()

    def slow_executor(request):
        release.wait(30)
        return default_executor(request)

    server = make_server(default_designer, slow_executor, max_concurrent_requests=1)
    client = client_for(server)
    with ThreadPoolExecutor(1) as ex:
        first = ex.submit(client.post, "/v1/teams", json={"task": "What is 2 + 3?"})
        deadline = time.monotonic() + 10
        while server.service._in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        r = client.post("/v1/teams", json={"task": "What is 1 + 1?"})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error"
        release.set()
        assert first.result().status_code == 200
    assert client.post("/v1/teams", json={"task": "What is 1 + 1?"}).status_code == 200


def test_503_while_loading_and_while_draining(make_server, client_for):
    loaded = threading.Event()
    inner = scripted_models(default_designer, default_executor)

    def slow_loader():
        loaded.wait(30)
        return inner()

    server = make_server(loader=slow_loader, wait=False)
    client = client_for(server)
    health = httpx.get(f"{server.url}/healthz")
    assert health.status_code == 503 and health.json()["status"] == "loading"
    r = client.post("/v1/teams", json={"task": "What is 2 + 3?"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading" and "retry-after" in r.headers
    loaded.set()
    assert server.service.wait_ready(30)
    assert client.post("/v1/teams", json={"task": "What is 2 + 3?"}).status_code == 200
    server.service.begin_drain()
    r = client.post("/v1/teams", json={"task": "What is 2 + 3?"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
    assert httpx.get(f"{server.url}/healthz").json()["status"] == "draining"


def test_failed_load_is_503_with_reason(make_server, client_for):
    def broken_loader():
        raise FileNotFoundError("no model at '/nowhere'")

    server = make_server(loader=broken_loader, wait=False)
    assert not server.service.wait_ready(30)
    r = client_for(server).post("/v1/teams", json={"task": "1+1"})
    assert r.status_code == 503 and "no model at '/nowhere'" in r.json()["error"]["message"]
    assert httpx.get(f"{server.url}/healthz").json()["status"] == "failed"


def test_served_teams_are_recorded_for_replay(make_server, client_for, tmp_path):
    path = tmp_path / "served.jsonl"
    server = make_server(record=str(path))
    client = client_for(server)
    for q in ("What is 2 + 3?", "What is 1 + 1?"):
        assert client.post("/v1/teams", json={"task": q}).status_code == 200
    trees, bad = read_trees(path)
    assert not bad and len(trees) == 2
    assert {t.mode for t in trees} == {"serve"} and trees[0].task["question"] == "What is 2 + 3?"
    assert trees[0].designs[0].executions[0].answer == "The answer is \\boxed{5}."
    assert trees[0].run_id == trees[1].run_id and trees[0].task_id != trees[1].task_id


def test_chat_completions_with_the_openai_client(make_server):
    import openai

    server = make_server()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["metaagent"]
    reply = client.chat.completions.create(
        model="metaagent",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}],
        temperature=0.2,
        max_tokens=200,
        extra_body={"metaagent": {"domain": "math", "n_executions": 2, "select": "majority"}},
    )
    assert reply.choices[0].message.content == "The answer is \\boxed{5}."
    assert reply.choices[0].finish_reason == "stop"
    team = reply.model_extra["metaagent"]
    assert team["status"] == "answered" and len(team["designs"][0]["executions"]) == 2
    assert team["selection"]["votes"] == {"5": 2}
    assert team["task"]["question"].startswith("Context:\nInstructions: Be brief.")
    assert reply.usage.total_tokens == team["usage"]["total_tokens"] > 0

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model="metaagent", messages=[{"role": "user", "content": "hi"}], n=2)
    with pytest.raises(openai.BadRequestError, match="last message must be from the user"):
        client.chat.completions.create(model="metaagent", messages=[{"role": "assistant", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong-key-000", max_retries=0).models.list()


def test_streaming_sends_turns_as_they_happen(make_server):
    import openai

    first_turn_seen = threading.Event()
    second_call_started = threading.Event()

    def gated_executor(request):
        if "check a solution" in request.messages[0]["content"]:
            second_call_started.set()
            assert first_turn_seen.wait(20), "the first turn never reached the client while the team ran"
        return default_executor(request)

    server = make_server(default_designer, gated_executor)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="metaagent",
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    events, content, reasoning, finish, usage = [], "", "", None, None
    for chunk in stream:
        extra = chunk.model_extra or {}
        if "metaagent" in extra:
            events.append(extra["metaagent"])
            if extra["metaagent"]["event"] == "turn" and extra["metaagent"]["turn"]["role"] == "MathSolver":
                first_turn_seen.set()
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            finish = choice.finish_reason or finish
    assert second_call_started.is_set()
    kinds = [e["event"] for e in events]
    assert kinds == ["design", "turn", "turn", "execution", "team"]
    assert [e["turn"]["role"] for e in events if e["event"] == "turn"] == ["MathSolver", "MathChecker"]
    assert events[1]["turn"]["delivery"] == "5"
    assert content == "The answer is \\boxed{5}." and finish == "stop"
    assert "[MathSolver]" in reasoning and "Design 0" in reasoning
    assert events[-1]["team"]["answer"] == content
    assert usage is not None and usage.total_tokens == events[-1]["team"]["usage"]["total_tokens"]


def test_time_budget_gives_504_plain_and_in_band_when_streaming(make_server, client_for, auth):
    def slow_executor(request):
        time.sleep(0.8)
        return default_executor(request)

    server = make_server(default_designer, slow_executor, request_timeout_s=0.5)
    r = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?"})
    assert r.status_code == 504, r.text
    error = r.json()["error"]
    assert error["type"] == "timeout_error" and "time budget" in error["message"]

    body = {"model": "metaagent", "messages": [{"role": "user", "content": "What is 2 + 3?"}], "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", headers=auth, json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2][len("data: "):])["error"]
    assert error["code"] == "timeout" and error["type"] == "timeout_error"
    turns = [json.loads(x[6:]).get("metaagent", {}) for x in lines[1:-2]]
    assert [t["turn"]["role"] for t in turns if t.get("event") == "turn"] == ["MathSolver"]  # then out of time


@pytest.mark.parametrize("stream", [False, True])
def test_client_disconnect_stops_the_teams_model_calls(make_server, auth, stream):
    solver_entered, client_gone = threading.Event(), threading.Event()
    checker_calls = []

    def executor(request):
        if "check a solution" in request.messages[0]["content"]:
            checker_calls.append(request)
        else:
            solver_entered.set()
            client_gone.wait(20)
        return default_executor(request)

    server = make_server(default_designer, executor)
    service = server.service
    body = {"model": "metaagent", "messages": [{"role": "user", "content": "What is 2 + 3?"}], "stream": stream}
    url = f"{server.url}/v1/chat/completions"
    if stream:
        with httpx.stream("POST", url, json=body, headers=auth, timeout=30) as r:
            lines = r.iter_lines()  # kept referenced: a collected iterator would close the connection
            next(lines)  # the stream is open and the team runs
            assert solver_entered.wait(20)
        # leaving the block closed the connection while the solver is still thinking
    else:  # a raw connection, closed once the solver is thinking (a client timeout could fire before it starts)
        host, port = server.url.removeprefix("http://").split(":")
        payload = json.dumps(body).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in {**auth, "Content-Type": "application/json"}.items())
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n{head}Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            assert solver_entered.wait(20)
        # leaving the block closed the connection while the solver is still thinking
    deadline = time.monotonic() + 10
    while not any(b.cancelled.is_set() for b in list(service._budgets)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert any(b.cancelled.is_set() for b in list(service._budgets)), "the disconnect was not noticed"
    client_gone.set()  # the solver's call returns; the checker's call must not start
    while service._in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service._in_flight == 0 and checker_calls == []
    assert 'metaagent_serve_executions_total{status="error"} 1' in service.metrics.render()


@pytest.mark.parametrize("hint", ["on", "off"])
def test_the_designer_prompt_shows_the_domain_as_configured(make_server, client_for, hint):
    """``metaagent-serve --domain-hint`` (issue 62) reaches the designer prompt; auto (the default) follows
    the designer model, which for a scripted model is on."""
    from metaagent.cli.serve import build_parser, config_from_args

    assert config_from_args(build_parser().parse_args(["--model", "tiny", "--domain-hint", hint])).domain_hint == hint
    asked = []

    def designer(request):
        asked.append(request.messages[-1]["content"])
        return TEAM_SCRIPT

    server = make_server(designer, domain_hint=hint)
    r = client_for(server).post("/v1/teams", json={"task": "What is 2 + 3?", "execute": False})
    assert r.status_code == 200, r.text
    assert len(asked) == 1 and ("Task domain: math." in asked[0]) is (hint == "on")
    assert "The final answer must be submitted in \\boxed{}.\n\nTask:\nWhat is 2 + 3?" in asked[0]  # full style
