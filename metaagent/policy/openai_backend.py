"""OpenAI-compatible chat endpoint backend (vLLM's ``vllm serve``, ``metaagent-serve``, hosted APIs).

Requests go out concurrently (a semaphore shared by all threads caps them at ``max_concurrency``), with
retries and exponential backoff plus jitter on 408/429/5xx and connection errors or timeouts.

Token ids and log-probs: the backend asks for ``logprobs=True`` and, with ``vllm_extras=True`` (default),
for vLLM's extra fields ``return_token_ids`` (response ``choices[i].token_ids`` and top-level
``prompt_token_ids``), ``return_tokens_as_token_ids`` (log-prob tokens spelled ``"token_id:<id>"``, a
fallback for the response ids) and ``include_stop_str_in_output`` (so text keeps the stop string, as the
contract in :mod:`metaagent.policy.base` says). Servers that reject unknown fields (e.g. api.openai.com)
need ``vllm_extras=False``; they then give no token ids, so :attr:`provides_logprobs` is False and
:meth:`require_logprobs` refuses RL training with them.

Note on log-probs: ``vllm serve`` reports log-probs of the *raw* distribution unless it was started with
``--logprobs-mode processed_logprobs``; only then do they match the contract (temperature-scaled) at
temperature != 1. This cannot be checked from the client side.
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .base import CapabilityError, ChatRequest, Completion, Policy, PolicyError, RequestError, SamplingParams

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)
TOKEN_ID_PREFIX = "token_id:"
PROBE_MESSAGES = [{"role": "user", "content": "Say OK."}]


@dataclass
class EndpointUsage:
    """Token counts as reported by the endpoint's ``usage`` field, per logical role (thread-safe)."""

    requests: dict[str, int] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, role: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.requests[role] = self.requests.get(role, 0) + 1
            self.prompt_tokens[role] = self.prompt_tokens.get(role, 0) + prompt_tokens
            self.completion_tokens[role] = self.completion_tokens.get(role, 0) + completion_tokens

    def add_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "prompt_tokens": dict(self.prompt_tokens),
                "completion_tokens": dict(self.completion_tokens),
                "retries": self.retries,
            }


class OpenAIPolicy(Policy):
    """Chat completions from an OpenAI-compatible server.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name sent with every request.
        api_key_env: environment variable holding the API key (local servers need none: ``"EMPTY"`` is sent).
        api_key: the key itself (overrides ``api_key_env``).
        max_concurrency: requests in flight at once, across all threads.
        timeout_s: per-attempt HTTP timeout.
        max_retries: retries after the first attempt on retryable errors.
        backoff_base_s / backoff_max_s: retry ``k`` waits ``min(max, base * 2**k)``, half of it jittered;
            a ``Retry-After`` header (capped at ``backoff_max_s``) takes precedence.
        vllm_extras: request vLLM's token-id fields (see the module docstring).
        logprobs: request log-probs at all.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 120,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        vllm_extras: bool = True,
        logprobs: bool = True,
    ) -> None:
        super().__init__()
        import openai

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}"
            )
        if not isinstance(model, str) or not model:
            raise ValueError("model must be the served model name (non-empty string)")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.vllm_extras = vllm_extras
        self.logprobs = logprobs
        self.endpoint_usage = EndpointUsage()
        key = api_key or os.environ.get(api_key_env) or "EMPTY"
        # retries are ours (with jitter and per-error handling), so the client's own are off
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=key, timeout=self.timeout_s, max_retries=0
        )
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="metaagent-openai")
        self._observed: bool | None = (
            None  # None until a completion was seen: did every one have ids+logprobs?
        )
        self._observed_lock = threading.Lock()

    # -------------------------------------------------------------------------------------- capability
    @property
    def provides_logprobs(self) -> bool:  # type: ignore[override]
        """Whether every completion so far carried prompt ids, response ids and log-probs."""
        return bool(self._observed)

    def require_logprobs(self, purpose: str = "RL training") -> None:
        if self._observed is None:  # nothing seen yet: ask the endpoint once
            self.generate(
                [ChatRequest(PROBE_MESSAGES, SamplingParams(max_tokens=1, temperature=0), role="probe")]
            )
        if not self.provides_logprobs:
            hint = "" if self.vllm_extras else " (vllm_extras=False: token ids were not requested)"
            raise CapabilityError(
                f"the endpoint {self.base_url} (model {self.model_id}) does not return token ids and log-probs"
                f"{hint}, which {purpose} needs; serve the model with `vllm serve` or `metaagent-serve`, "
                "or use the 'hf' or 'vllm' backend"
            )

    def _observe(self, complete: bool) -> None:
        with self._observed_lock:
            self._observed = complete if self._observed is None else (self._observed and complete)

    # ------------------------------------------------------------------------------------------ generate
    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        for r in requests:
            self.check_request(r)
        if len(requests) == 1:
            return [self._complete(requests[0])]
        futures = [self._pool.submit(self._complete, r) for r in requests]
        return [f.result() for f in futures]  # the first failing request's error is raised

    def check_request(self, request: ChatRequest) -> None:
        """Raise :class:`RequestError` for what this endpoint cannot do."""
        if request.sampling.top_k > 0 and not self.vllm_extras:
            raise RequestError(
                "top_k is not part of the OpenAI API; use top_k=0, or vllm_extras=True for a vLLM server"
            )

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": request.messages,
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        if self.logprobs:
            body["logprobs"] = True
        extra: dict[str, Any] = {}
        if self.vllm_extras:
            extra = {"return_token_ids": True, "include_stop_str_in_output": True}
            if self.logprobs:
                extra["return_tokens_as_token_ids"] = True
            if s.top_k > 0:
                extra["top_k"] = s.top_k
        body["extra_body"] = extra or None
        return body

    def _complete(self, request: ChatRequest) -> Completion:
        data = self._call_with_retries(self._body(request))
        return self._parse(request, data)

    def _call_with_retries(self, body: dict[str, Any]) -> dict[str, Any]:
        import openai

        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.endpoint_usage.add_retry()
                time.sleep(self._backoff(attempt - 1, last))
            try:
                with self._slots:
                    response = self._client.chat.completions.create(**body)
                return response.to_dict()
            except (openai.APIConnectionError, openai.APITimeoutError) as e:
                last = e
            except openai.APIStatusError as e:
                if e.status_code not in RETRY_STATUS:
                    raise self._status_error(e) from e
                last = e
        raise self._gave_up(last) from last

    def _backoff(self, retry: int, error: BaseException | None) -> float:
        retry_after = _retry_after_s(error)
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        delay = min(self.backoff_max_s, self.backoff_base_s * 2**retry)
        return delay / 2 + random.uniform(0, delay / 2)

    # ---------------------------------------------------------------------------------------------- errors
    def _status_error(self, e: Any) -> PolicyError:
        code, msg = e.status_code, _error_message(e)
        where = f"{self.base_url} (model {self.model_id!r})"
        if code in (401, 403):
            return PolicyError(
                f"{where} refused the API key (HTTP {code}: {msg}); set ${self.api_key_env} or pass api_key="
            )
        if code == 404:
            return PolicyError(
                f"{where} answered 404 ({msg}); check that base_url ends with the API root (usually /v1) and "
                "that the model name is one the server serves"
            )
        hint = ""
        if self.vllm_extras and code in (400, 422):
            hint = (
                "; if the server rejects vLLM's extra fields (return_token_ids, ...), pass vllm_extras=False"
            )
        return RequestError(f"{where} rejected the request (HTTP {code}: {msg}){hint}")

    def _gave_up(self, last: BaseException | None) -> PolicyError:
        import openai

        attempts = self.max_retries + 1
        if isinstance(last, openai.APITimeoutError):
            return PolicyError(
                f"{self.base_url} did not answer within timeout_s={self.timeout_s} in {attempts} attempt(s); "
                "check that the server is up and not overloaded, or raise timeout_s"
            )
        if isinstance(last, openai.APIConnectionError):
            return PolicyError(
                f"could not connect to {self.base_url} in {attempts} attempt(s) ({last}); check that the server "
                "is running and reachable from here, and that base_url (host, port, /v1) is right"
            )
        code = getattr(last, "status_code", "?")
        return PolicyError(
            f"{self.base_url} kept failing (last: HTTP {code}: {_error_message(last)}) after {attempts} "
            "attempt(s); the server is overloaded or erroring: lower max_concurrency or check its logs"
        )

    # ----------------------------------------------------------------------------------------------- parse
    def _parse(self, request: ChatRequest, data: dict[str, Any]) -> Completion:
        choices = data.get("choices") or []
        if not choices:
            raise PolicyError(f"{self.base_url} returned no choices: {str(data)[:300]}")
        choice = choices[0]
        text = (choice.get("message") or {}).get("content") or ""
        entries = ((choice.get("logprobs") or {}).get("content")) or []
        logprobs = [float(e["logprob"]) for e in entries] if entries else None
        response_ids = choice.get("token_ids")
        if (
            response_ids is None
            and entries
            and all(str(e.get("token")).startswith(TOKEN_ID_PREFIX) for e in entries)
        ):
            response_ids = [int(e["token"][len(TOKEN_ID_PREFIX) :]) for e in entries]
        prompt_ids = data.get("prompt_token_ids")
        if response_ids is None or (logprobs is not None and len(logprobs) != len(response_ids)):
            logprobs = None  # cannot be aligned with the tokens: useless for training
        complete = logprobs is not None and response_ids is not None and prompt_ids is not None
        self._observe(complete)
        usage = data.get("usage") or {}
        self.endpoint_usage.add(
            request.role, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        )
        return Completion(
            text=text,
            prompt_ids=[int(i) for i in prompt_ids or []],
            response_ids=[int(i) for i in response_ids or []],
            logprobs=logprobs,
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            model=str(data.get("model") or self.model_id),
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()


def _retry_after_s(error: BaseException | None) -> float | None:
    response = getattr(error, "response", None)
    value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _error_message(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        msg = inner.get("message") if isinstance(inner, dict) else body.get("message")
        if msg:
            return str(msg)
    return str(getattr(error, "message", None) or error)
