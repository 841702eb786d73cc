"""Configuration of ``metaagent-serve``: models, network, limits and defaults, validated in one place."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from metaagent.config import ConfigError
from metaagent.rollout.config import SamplingConfig
from metaagent.workflow.protocol import DELIVERY_CLOSE

BACKENDS = ("hf", "vllm", "openai")
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
#: environment variable read for the API key when ``--api-key`` is not given (keeps it out of `ps`)
API_KEY_ENV = "METAAGENT_SERVE_API_KEY"
#: the model name clients send (``GET /v1/models`` lists it)
DEFAULT_SERVED_NAME = "metaagent"
#: config fields whose CLI flag is not the field name with dashes
CLI_FLAGS = {
    "sandbox_workers": "--workers",
    "request_timeout_s": "--timeout",
    "script_timeout_s": "--script-timeout",
    "graceful_timeout_s": "--graceful-timeout",
}


def flag(name: str) -> str:
    """The CLI flag that sets config field ``name`` (for error messages)."""
    return CLI_FLAGS.get(name, "--" + name.replace("_", "-"))


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _default_designer_sampling() -> SamplingConfig:
    return SamplingConfig(temperature=0.7, max_tokens=768)


def _default_executor_sampling() -> SamplingConfig:
    return SamplingConfig(temperature=0.7, max_tokens=512, stop=[DELIVERY_CLOSE])


@dataclass
class ServeConfig:
    """Everything ``metaagent-serve`` needs; the CLI flags map one to one onto these fields.

    Models:
        model: alias (``embedded``, ``tiny``), local HF directory, or the upstream model name (openai).
        backend: ``hf`` (local transformers), ``vllm`` (GPU) or ``openai`` (an OpenAI-compatible upstream).
        base_url: the upstream's API root for the ``openai`` backend.
        designer_model / executor_model: separate weights per role; each defaults to ``model``. Roles with
            the same name share one physical model (one batcher).
        frozen_designer: a template name or a script path: every team is this fixed script (the engine's
            fixed-MAS mode) and no designer model is loaded.
        device / dtype: for the ``hf`` backend.
        max_batch_size / max_wait_ms: the batcher in front of each physical model.
        backend_in_flight: backend calls in flight per model (1 for a local model; more for a remote one).
        continuous: ``hf`` only: continuous batching (new requests join the running batch between decode
            steps); useful with ``backend_in_flight > 1``.

    Network and security:
        host / port: where to listen; anything but loopback requires ``api_key``.
        api_key: clients send ``Authorization: Bearer <key>``; compared in constant time.
        served_model_name: the ``model`` clients ask for.
        max_request_bytes: bodies above this get 413. max_task_chars: tasks above this get 413.
        max_concurrent_requests: requests in flight at once; more get 429.

    Teams:
        sandbox_workers: sandbox worker processes shared by all requests (executions in flight at once).
        script_timeout_s: own run time of one script (agent calls not counted), as in ``Limits.timeout_s``.
        request_timeout_s: wall-clock budget of one request; no model call starts after it.
        max_designs / max_executions: caps on ``n_designs`` / ``n_executions`` per request.
        max_tokens_cap: cap on any ``max_tokens`` a request asks for.
        k_templates: in-context templates shown to the designer.
        designer_prompt: "full", "compact" or "auto" (the style the designer model was trained on; see
            ``metaagent.rollout.prompts``).
        designer_sampling / executor_sampling: defaults a request may override.
        judge_max_tokens: length of the judge's reply when ``select="judge"``.
        record: append every team as a RolloutTree (mode "serve") to this JSONL file.
        graceful_timeout_s: how long shutdown waits for requests in flight.
    """

    model: str = "embedded"
    backend: str = "hf"
    base_url: str | None = None
    designer_model: str | None = None
    executor_model: str | None = None
    frozen_designer: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    max_batch_size: int = 32
    max_wait_ms: float = 5.0
    backend_in_flight: int = 1
    continuous: bool = False

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    served_model_name: str = DEFAULT_SERVED_NAME
    max_request_bytes: int = 1_000_000
    max_task_chars: int = 20_000
    max_concurrent_requests: int = 16

    sandbox_workers: int = 4
    script_timeout_s: float = 10.0
    request_timeout_s: float = 300.0
    max_designs: int = 4
    max_executions: int = 4
    max_tokens_cap: int = 4096
    k_templates: int = 2
    designer_prompt: str = "auto"
    designer_sampling: SamplingConfig = field(default_factory=_default_designer_sampling)
    executor_sampling: SamplingConfig = field(default_factory=_default_executor_sampling)
    judge_max_tokens: int = 256
    record: str | None = None
    graceful_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("--backend openai needs --base-url (the upstream's API root, e.g. http://host:8001/v1)")
        if self.continuous and self.backend != "hf":
            raise ConfigError(f"--continuous only applies to --backend hf (backend is {self.backend!r})")
        if self.base_url and self.backend != "openai":
            raise ConfigError(f"--base-url only applies to --backend openai (backend is {self.backend!r})")
        if not self.model and not (self.executor_model and (self.designer_model or self.frozen_designer)):
            raise ConfigError("--model is required (or both --designer-model and --executor-model)")
        if not (0 < self.port < 65536):
            raise ConfigError(f"--port must be in 1..65535, got {self.port}")
        if self.api_key is not None and len(self.api_key) < 8:
            raise ConfigError("--api-key must be at least 8 characters; use a long random string")
        if not is_loopback(self.host) and not self.api_key:
            raise ConfigError(
                f"refusing to listen on {self.host!r} without an API key: anyone who can reach it could run "
                f"teams on this machine. Pass --api-key (or set ${API_KEY_ENV}), or bind to 127.0.0.1"
            )
        if not self.served_model_name or any(c.isspace() for c in self.served_model_name):
            raise ConfigError(f"--served-model-name must be a non-empty name without spaces, got {self.served_model_name!r}")
        positive_ints = (
            "max_batch_size", "backend_in_flight", "max_request_bytes", "max_task_chars",
            "max_concurrent_requests", "sandbox_workers", "max_designs", "max_executions",
            "max_tokens_cap", "judge_max_tokens",
        )  # fmt: skip
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{flag(name)} must be a positive integer, got {value!r}")
        for name in ("script_timeout_s", "request_timeout_s", "graceful_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{flag(name)} must be > 0 seconds, got {getattr(self, name)!r}")
        if not self.max_wait_ms >= 0:
            raise ConfigError(f"--max-wait-ms must be >= 0, got {self.max_wait_ms!r}")
        if self.k_templates < 0:
            raise ConfigError(f"--k-templates must be >= 0, got {self.k_templates}")
        for role in ("designer", "executor"):
            sampling = getattr(self, f"{role}_sampling")
            if sampling.max_tokens > self.max_tokens_cap:
                raise ConfigError(
                    f"{role} max_tokens {sampling.max_tokens} exceeds --max-tokens-cap {self.max_tokens_cap}"
                )
        if DELIVERY_CLOSE not in self.executor_sampling.stop:
            self.executor_sampling.stop.append(DELIVERY_CLOSE)

    # ---- derived ------------------------------------------------------------------------------------------
    @property
    def designer_name(self) -> str | None:
        """The designer's model, or None in fixed-designer mode (no designer model is loaded)."""
        return None if self.frozen_designer else (self.designer_model or self.model)

    @property
    def executor_name(self) -> str:
        return self.executor_model or self.model

    def limits(self) -> dict[str, Any]:
        """Sandbox limits of every execution (``metaagent.workflow.Limits`` fields)."""
        return {"timeout_s": self.script_timeout_s, "total_timeout_s": self.request_timeout_s}

    def public(self) -> dict[str, Any]:
        """The config without secrets, for records and logs."""
        from dataclasses import asdict

        data = asdict(self)
        data["api_key"] = "***" if self.api_key else None
        return data
