"""Configuration of ``metaagent-serve``: models, network, limits and defaults, validated in one place."""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import Checked, ConfigError
from metaagent.policy.factory import MODEL_BACKENDS
from metaagent.rewards import RewardConfig
from metaagent.rollout.budget import BUDGET_TAGS, DEFAULT_LOW_MAX_CALLS
from metaagent.rollout.config import SamplingConfig
from metaagent.rollout.prompts import DomainHint
from metaagent.workflow.protocol import DELIVERY_CLOSE

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
class ServeConfig(Checked):
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
        tool_timeout_s: wall-clock seconds all tool calls of one execution may take together, as in
            ``Limits.tool_time_s`` (a budget of their own, beside ``script_timeout_s``).
        request_timeout_s: wall-clock budget of one request; no model call starts after it.
        max_designs / max_executions: caps on ``n_designs`` / ``n_executions`` per request.
        max_tokens_cap: cap on any ``max_tokens`` a request asks for.
        k_templates: in-context templates shown to the designer.
        designer_prompt: "full", "compact" or "auto" (the style the designer model was trained on; see
            ``metaagent.rollout.prompts``).
        domain_hint: the designer prompt's "Task domain: <domain>." sentence: "on", "off" or "auto" (what the
            designer model was trained with, ``metaagent_prompt.json`` in its folder; else on).
        designer_sampling / executor_sampling: defaults a request may override.
        judge_max_tokens: length of the judge's reply when ``select="judge"``.
        budget: the budget tag (LOW / HIGH) of every team's designer prompt; LOW also caps agent calls.
        low_max_calls: ``--budget LOW``: most agent calls of one execution (``metaagent.rollout.budget``).
        record: append every team as a RolloutTree (mode "serve") to this JSONL file.
        graceful_timeout_s: how long shutdown waits for requests in flight.
    """

    field_label: ClassVar[Any] = staticmethod(flag)  # errors name the flag: --workers for sandbox_workers

    model: str = "embedded"
    backend: Literal[MODEL_BACKENDS] = "hf"
    base_url: str | None = None
    designer_model: str | None = None
    executor_model: str | None = None
    frozen_designer: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    max_batch_size: PositiveInt = 32
    max_wait_ms: NonNegativeFloat = 5.0
    backend_in_flight: PositiveInt = 1
    continuous: bool = False

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    api_key: Annotated[str, Field(min_length=8)] | None = None
    served_model_name: Annotated[str, Field(min_length=1, pattern=r"^\S+$")] = DEFAULT_SERVED_NAME
    max_request_bytes: PositiveInt = 1_000_000
    max_task_chars: PositiveInt = 20_000  # tasks longer than this many characters get 413
    max_concurrent_requests: PositiveInt = 16

    sandbox_workers: PositiveInt = 4
    script_timeout_s: PositiveFloat = 10.0
    tool_timeout_s: PositiveFloat = 60.0
    request_timeout_s: PositiveFloat = 300.0
    max_designs: PositiveInt = 4
    max_executions: PositiveInt = 4
    max_tokens_cap: PositiveInt = 4096
    k_templates: NonNegativeInt = 2
    designer_prompt: Literal["auto", "full", "compact"] = "auto"  # auto: the style the designer model records
    domain_hint: DomainHint = "auto"  # the "Task domain: <domain>." sentence; auto: what the designer model records
    designer_sampling: SamplingConfig = field(default_factory=_default_designer_sampling)
    executor_sampling: SamplingConfig = field(default_factory=_default_executor_sampling)
    judge_max_tokens: PositiveInt = 256
    budget: Literal[BUDGET_TAGS] | None = None
    low_max_calls: PositiveInt = DEFAULT_LOW_MAX_CALLS
    record: str | None = None
    graceful_timeout_s: PositiveFloat = 30.0
    # kernel isolation of model-written code (auto: the strongest available; none warns)
    isolation: Literal["auto", "landlock", "namespaces", "none"] = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("--backend openai needs --base-url (the upstream's API root, e.g. http://host:8001/v1)")
        if self.continuous and self.backend != "hf":
            raise ConfigError(f"--continuous only applies to --backend hf (backend is {self.backend!r})")
        if self.base_url and self.backend != "openai":
            raise ConfigError(f"--base-url only applies to --backend openai (backend is {self.backend!r})")
        if not self.model and not (self.executor_model and (self.designer_model or self.frozen_designer)):
            raise ConfigError("--model is required (or both --designer-model and --executor-model)")
        if not is_loopback(self.host) and not self.api_key:
            raise ConfigError(
                f"refusing to listen on {self.host!r} without an API key: anyone who can reach it could run "
                f"teams on this machine. Pass --api-key (or set ${API_KEY_ENV}), or bind to 127.0.0.1"
            )
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
        return {
            "timeout_s": self.script_timeout_s,
            "tool_time_s": self.tool_timeout_s,
            "total_timeout_s": self.request_timeout_s,
        }

    def reward_config(self) -> Any:
        """The scorer's config (``metaagent.rewards.RewardConfig``): the defaults, with every limit a client's
        task may set (``metadata.time_limit_s`` / ``memory_limit_bytes`` of a code task) capped at the
        server's own per-test limits, so a client cannot make its tests run longer or larger than the
        server's defaults allow."""
        code = RewardConfig().domain_settings("code")  # the code domain's own settings (reward.domains.code)
        caps = {"max_time_limit_s": code.time_limit_s, "max_memory_mb": code.memory_mb}
        return RewardConfig(domains={"code": caps})

    def public(self) -> dict[str, Any]:
        """The config without secrets, for records and logs."""
        data = asdict(self)
        data["api_key"] = "***" if self.api_key else None
        return data
