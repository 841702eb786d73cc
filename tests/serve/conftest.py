"""Fixtures of the server tests: a uvicorn server in a thread on a free local port over scripted teams."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from serve_helpers import (
    API_KEY,
    ServerThread,
    default_designer,
    default_executor,
    free_port,
    scripted_models,
)


@pytest.fixture
def make_server():
    """``make_server(designer_fn, executor_fn, **config)`` -> a started ServerThread over a scripted service."""
    from metaagent.serve import ServeConfig, TeamService, create_app

    started: list[ServerThread] = []

    def make(designer_fn=default_designer, executor_fn=default_executor, *, loader=None, wait=True, **overrides):
        options = {"model": "scripted", "api_key": API_KEY, "sandbox_workers": 2, "script_timeout_s": 3.0,
                   "port": free_port(), "max_concurrent_requests": 8}
        options.update(overrides)
        service = TeamService(ServeConfig(**options), loader=loader or scripted_models(designer_fn, executor_fn))
        server = ServerThread(create_app(service), options["port"]).__enter__()
        started.append(server)
        server.service = service
        if wait:
            assert service.wait_ready(60), service.error
        return server

    yield make
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture
def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def client_for() -> Iterator[Callable[[ServerThread], httpx.Client]]:
    clients: list[httpx.Client] = []

    def make(server: ServerThread) -> httpx.Client:
        c = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
