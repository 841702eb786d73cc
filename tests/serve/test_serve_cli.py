"""The real command: ``metaagent-serve --model tiny ...`` as a subprocess, health-checked, called, stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from serve_helpers import API_KEY, free_port

from metaagent.cli.serve import main
from metaagent.records import read_trees

COMMAND = str(Path(sys.executable).parent / "metaagent-serve")


def test_refuses_to_bind_beyond_loopback_without_a_key(capsys, monkeypatch):
    monkeypatch.delenv("METAAGENT_SERVE_API_KEY", raising=False)
    assert main(["--model", "tiny", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on '0.0.0.0' without an API key" in err and "--api-key" in err


def test_bad_arguments_exit_2_with_a_message(capsys):
    assert main(["--model", "tiny", "--frozen-designer", "no_such_template"]) == 2
    assert "neither a script file nor a template" in capsys.readouterr().err
    assert main(["--backend", "openai", "--model", "m"]) == 2
    assert "--base-url" in capsys.readouterr().err


def test_the_api_key_flag_and_the_environment_variable_set_the_key(monkeypatch):
    from metaagent.cli.serve import build_parser, config_from_args

    monkeypatch.delenv("METAAGENT_SERVE_API_KEY", raising=False)
    flag = config_from_args(build_parser().parse_args(["--model", "tiny", "--api-key", API_KEY]))
    assert flag.api_key == API_KEY
    assert config_from_args(build_parser().parse_args(["--model", "tiny"])).api_key is None
    monkeypatch.setenv("METAAGENT_SERVE_API_KEY", "from-the-environment")
    assert config_from_args(build_parser().parse_args(["--model", "tiny"])).api_key == "from-the-environment"
    assert config_from_args(build_parser().parse_args(["--model", "tiny", "--api-key", API_KEY])).api_key == API_KEY


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, key_from", [(signal.SIGTERM, "env"), (signal.SIGINT, "flag")], ids=["SIGTERM-key-in-env", "SIGINT-key-flag"]
)
def test_command_serves_and_shuts_down_cleanly(tmp_path, sig, key_from):
    with open(tmp_path / "server.log", "w+") as log:
        _serve_and_stop(tmp_path, sig, log, key_from)


def _serve_and_stop(tmp_path: Path, sig: int, log, key_from: str) -> None:
    port, record = free_port(), tmp_path / "served.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "METAAGENT_SERVE_API_KEY"}
    key_args = ["--api-key", API_KEY] if key_from == "flag" else []
    if key_from == "env":
        env["METAAGENT_SERVE_API_KEY"] = API_KEY
    proc = subprocess.Popen(
        [COMMAND, "--model", "tiny", "--frozen-designer", "single_math", "--port", str(port), "--workers", "2",
         "--max-tokens", "16", "--record", str(record), "--log-level", "warning", *key_args],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    try:
        statuses = _wait_healthy(proc, url, log)
        assert 503 in statuses, "the server should answer 503 while the model loads"
        assert httpx.post(f"{url}/v1/teams", json={"task": "1+1"}).status_code == 401

        team = httpx.post(f"{url}/v1/teams", json={"task": "What is 6 * 7?"}, headers=auth, timeout=60).json()
        assert team["status"] == "answered"
        # the official client: a wrong key is refused (401), the right one answered
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="wrong-key-0123456", max_retries=0).chat.completions.create(
                model="metaagent", messages=[{"role": "user", "content": "2+2?"}]
            )
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0)
        reply = client.chat.completions.create(model="metaagent", messages=[{"role": "user", "content": "2+2?"}])
        assert reply.choices[0].message.content == reply.model_extra["metaagent"]["answer"]

        workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(workers) >= 2  # the sandbox workers

        # a request in flight when the signal arrives still gets its answer; new ones are refused
        slow: dict[str, httpx.Response] = {}
        body = {"task": "What is 6 * 7?", "n_executions": 4}
        t = threading.Thread(target=lambda: slow.update(r=httpx.post(f"{url}/v1/teams", json=body, headers=auth,
                                                                      timeout=120)))  # fmt: skip
        t.start()
        _wait_in_flight(url)
        proc.send_signal(sig)
        t.join(120)
        assert slow["r"].status_code == 200 and slow["r"].json()["status"] == "answered"
        assert proc.wait(60) == 0, _read(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not [p for p in workers if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    trees, bad = read_trees(record)
    assert not bad and len(trees) == 3 and {t.mode for t in trees} == {"serve"}
    output = _read(log)
    assert "Traceback" not in output, output


def _wait_healthy(proc: subprocess.Popen, url: str, log) -> list[int]:
    statuses: list[int] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited with {proc.returncode}:\n{_read(log)}"
        try:
            statuses.append(httpx.get(f"{url}/healthz", timeout=5).status_code)
            if statuses[-1] == 200:
                return statuses
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not healthy after 180 s:\n{_read(log)}")


def _wait_in_flight(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/healthz", timeout=5).json().get("in_flight", 0) > 0:
            return
        time.sleep(0.01)
    raise AssertionError("the request never started")


def _read(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()
