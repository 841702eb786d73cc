"""Recipe 9: serve a model with ``metaagent-serve`` and call it as an OpenAI-compatible endpoint.

The server designs a team per request (and runs it); ``POST /v1/chat/completions`` answers with the team's
answer and carries the whole team in the ``metaagent`` extension field, ``POST /v1/teams`` returns the team
itself. This script starts the server, waits until the model is loaded, sends one request of each kind with
the official ``openai`` client and ``httpx``, writes both replies to ``--out`` and stops the server.

    python examples/09_serve_client.py                        # embedded-sft designs and runs the team
    python examples/09_serve_client.py --model runs/examples/cold_start_rl/sft/model   # recipe 1's cold start
    python examples/09_serve_client.py --frozen-designer reflection --task "What is 12 * 12?"

Against a server that is already running, only the client part is needed::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="...")
    question = [{"role": "user", "content": "What is 17 * 23?"}]
    client.chat.completions.create(model="metaagent", messages=question)
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(server: subprocess.Popen, url: str, timeout_s: float = 600) -> None:
    """``/healthz`` answers 503 while the model loads and 200 once it serves."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"09_serve_client: metaagent-serve exited with {server.returncode} (output above)")
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    sys.exit(f"09_serve_client: the server was not ready after {timeout_s:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded-sft", help="embedded, embedded-sft, tiny or a model folder")
    p.add_argument("--frozen-designer", default=None, help="serve a fixed team (a template name) instead")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per agent reply (a size knob)")
    p.add_argument("--designer-max-tokens", type=int, default=320, help="tokens per designed script")
    p.add_argument("--task", default="What is 17 * 23?")
    p.add_argument("--out", default="runs/examples/serve_client", help="where the two replies are written")
    args = p.parse_args()

    command = shutil.which("metaagent-serve")
    if command is None:
        sys.exit("09_serve_client: metaagent-serve is not on PATH; activate the environment (.venv/bin)")
    port, api_key = free_port(), secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}"
    serve = [command, "--model", args.model, "--port", str(port), "--api-key", api_key,
             "--max-tokens", str(args.max_tokens), "--designer-max-tokens", str(args.designer_max_tokens),
             "--log-level", "warning"]  # fmt: skip
    if args.frozen_designer:
        serve += ["--frozen-designer", args.frozen_designer]
    server = subprocess.Popen(serve)
    try:
        wait_ready(server, url)

        # 1. an OpenAI chat request: the answer is the team's, the team rides along in the "metaagent" field
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=600)
        question = [{"role": "user", "content": args.task}]
        chat = client.chat.completions.create(model="metaagent", messages=question)
        team = chat.model_extra["metaagent"]
        print(f"chat answer: {chat.choices[0].message.content!r} (status {team['status']})")

        # 2. the team itself: the designer's script, its checker report and every agent turn
        reply = httpx.post(f"{url}/v1/teams", json={"task": args.task, "seed": 0},
                           headers={"Authorization": f"Bearer {api_key}"}, timeout=600)  # fmt: skip
        reply.raise_for_status()
        body = reply.json()
        (design,) = body["designs"]
        turns = sum(len(e["turns"]) for e in design["executions"])
        print(f"team: {body['status']}, design {design['source']}, valid {design['valid']}, {turns} turns")
        print((design["script"] or "")[:800])

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "chat.json").write_text(json.dumps(chat.model_dump(), indent=1))
        (out / "team.json").write_text(json.dumps(body, indent=1))
        print(f"replies in {out}/chat.json and {out}/team.json")
    finally:
        server.send_signal(signal.SIGTERM)  # a graceful stop: requests in flight finish first
        server.wait(120)


if __name__ == "__main__":
    main()
