"""OpenAIPolicy against a real local HTTP server: ids/log-probs, retries, timeouts, limits, errors."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from builders import HANG_MARGIN_S

from metaagent.policy import CapabilityError, ChatRequest, PolicyError, RequestError, SamplingParams
from metaagent.policy.openai_backend import OpenAIPolicy

FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}


def _req(text: str, role: str = "executor", **sampling) -> ChatRequest:
    return ChatRequest(
        [{"role": "user", "content": text}], SamplingParams(**{"max_tokens": 64, **sampling}), role=role
    )


def test_completion_with_token_ids_and_logprobs(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "echo", **FAST) as policy:
        c = policy.generate(
            [_req("hello", role="designer", temperature=0.5, seed=7, stop=("###",), top_k=5)]
        )[0]
        assert c.text == "echo:hello" and c.finish_reason == "stop" and c.model == "echo"
        assert c.response_ids == list(b"echo:hello")
        assert c.prompt_ids == list(b"hello")
        assert c.logprobs == pytest.approx([-0.25 * (k + 1) for k in range(len(c.response_ids))])
        assert policy.provides_logprobs
        policy.require_logprobs()
        body = openai_stub.state.bodies[-1]
        assert body["logprobs"] is True and body["return_token_ids"] is True
        assert body["return_tokens_as_token_ids"] is True and body["include_stop_str_in_output"] is True
        assert (body["temperature"], body["seed"], body["stop"], body["top_k"]) == (0.5, 7, ["###"], 5)
        # usage: the policy's own token counts and the endpoint's reported ones (7 extra template tokens)
        assert policy.usage.snapshot()["completion_tokens"] == {"designer": 10}
        reported = policy.endpoint_usage.snapshot()
        assert reported["prompt_tokens"] == {"designer": 5 + 7} and reported["completion_tokens"] == {
            "designer": 10
        }


def test_length_finish_reason(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "echo", **FAST) as policy:
        c = policy.chat([{"role": "user", "content": "a long message"}], SamplingParams(max_tokens=4))
        assert c.finish_reason == "length" and len(c.response_ids) == 4


def test_endpoint_without_logprobs_cannot_train(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "plain", **FAST) as policy:
        c = policy.chat([{"role": "user", "content": "hi"}])
        assert c.text == "echo:hi" and c.logprobs is None and c.response_ids == []
        assert not policy.provides_logprobs
        with pytest.raises(CapabilityError, match="does not return token ids and log-probs"):
            policy.require_logprobs()


def test_require_logprobs_probes_the_endpoint_once(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "echo", **FAST) as policy:
        assert not policy.provides_logprobs  # nothing seen yet
        n = len(openai_stub.state.bodies)
        policy.require_logprobs()
        assert len(openai_stub.state.bodies) == n + 1 and policy.provides_logprobs
    with OpenAIPolicy(openai_stub.base_url, "echo", vllm_extras=False, **FAST) as policy:
        with pytest.raises(CapabilityError, match="vllm_extras=False"):
            policy.require_logprobs()


def test_retries_429_then_500_then_succeeds(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "flaky", max_retries=3, **FAST) as policy:
        c = policy.chat([{"role": "user", "content": "flaky-1"}])
        assert c.text == "echo:flaky-1"
        assert openai_stub.state.attempts["flaky-1"] == 3
        assert policy.endpoint_usage.snapshot()["retries"] == 2


def test_gives_up_after_max_retries_with_clear_error(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "down", max_retries=2, **FAST) as policy:
        with pytest.raises(PolicyError, match=r"kept failing \(last: HTTP 503: overloaded\) after 3 attempt"):
            policy.chat([{"role": "user", "content": "x"}])


def test_backoff_grows_exponentially_with_jitter():
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", "m", backoff_base_s=1.0, backoff_max_s=6.0)
    for retry, full in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 6.0)]:
        waits = [policy._backoff(retry, None) for _ in range(50)]
        assert all(full / 2 <= w <= full for w in waits) and len(set(waits)) > 1
    policy.close()


def test_slow_response_times_out(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "slow", timeout_s=0.2, max_retries=1, **FAST) as policy:
        t0 = time.monotonic()
        with pytest.raises(PolicyError, match=r"did not answer within timeout_s=0.2 in 2 attempt"):
            policy.chat([{"role": "user", "content": "x"}])
        assert time.monotonic() - t0 < 2 * 0.2 + HANG_MARGIN_S


def test_unreachable_endpoint_names_url():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with OpenAIPolicy(url, "m", max_retries=2, **FAST) as policy, pytest.raises(PolicyError) as err:
        policy.chat([{"role": "user", "content": "x"}])
    msg = str(err.value)
    assert url in msg and "3 attempt" in msg and "server is running" in msg


def test_rejected_request_is_not_retried(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "reject", max_retries=5, **FAST) as policy:
        n = len(openai_stub.state.bodies)
        with pytest.raises(RequestError, match="HTTP 400: unknown field return_token_ids.*vllm_extras=False"):
            policy.chat([{"role": "user", "content": "x"}])
        assert len(openai_stub.state.bodies) == n + 1


def test_auth_error_names_the_key_variable(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "auth", api_key_env="MY_KEY", **FAST) as policy:
        with pytest.raises(PolicyError, match=r"\$MY_KEY"):
            policy.chat([{"role": "user", "content": "x"}])


def test_concurrency_is_capped_across_threads(openai_stub):
    openai_stub.state.peak = 0
    with OpenAIPolicy(openai_stub.base_url, "sleepy", max_concurrency=3, **FAST) as policy:
        results = {}

        def call(i):
            results[i] = policy.generate([_req(f"t{i}-a"), _req(f"t{i}-b")])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert openai_stub.state.peak == 3
    assert [c.text for c in results[4]] == ["echo:t4-a", "echo:t4-b"]


def test_top_k_needs_vllm_extras(openai_stub):
    with OpenAIPolicy(openai_stub.base_url, "echo", vllm_extras=False, **FAST) as policy:
        with pytest.raises(RequestError, match="top_k"):
            policy.generate([_req("x", top_k=3)])
        c = policy.generate([_req("x")])[0]
        assert c.text == "echo:x" and "return_token_ids" not in openai_stub.state.bodies[-1]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"base_url": "localhost:8000"}, "http"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_configuration(kwargs, match):
    args = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError, match=match):
        OpenAIPolicy(**args)
