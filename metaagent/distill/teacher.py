"""The policies of a distillation run: an OpenAI-compatible teacher, or a local executor model.

The teacher is :class:`metaagent.policy.OpenAIPolicy` (concurrency limit, retries with exponential backoff
and jitter, usage accounting) asked for text only: hosted APIs such as DeepSeek's give no token ids, and
SFT needs none. One difference to vLLM servers matters: the OpenAI API drops the stop string from the
reply, so an agent's reply stopped at ``</delivery>`` would arrive with an unclosed delivery block.
:class:`RestoreStopTags` puts a closing tag back when the reply opened its block and stopped, which is what
vLLM (``include_stop_str_in_output``) and the local backend return.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlparse

from metaagent.errors import MetaAgentError
from metaagent.policy.base import ChatRequest, Completion, Policy
from metaagent.policy.factory import build_policy

from .config import DistillConfig, TeacherConfig

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
_CLOSE_TAG = re.compile(r"</([A-Za-z][\w-]*)>")


class TeacherError(MetaAgentError, RuntimeError):
    """The teacher cannot be used as configured; the message says what to set."""


def restore_stop_tag(text: str, stop: tuple[str, ...], finish_reason: str) -> str:
    """Append a stop string of the form ``</tag>`` when ``text`` opened ``<tag>`` and never closed it.

    Only for replies that stopped (``finish_reason == "stop"``); a reply cut at ``max_tokens`` stays as is.
    """
    if finish_reason != "stop":
        return text
    for s in stop:
        m = _CLOSE_TAG.fullmatch(s)
        if m is None:
            continue
        opened, closed = text.rfind(f"<{m.group(1)}>"), text.rfind(s)
        if opened >= 0 and closed < opened:
            return text + s
    return text


class RestoreStopTags(Policy):
    """Wraps a text-only backend so replies stopped at ``</tag>`` keep the tag (see the module docstring)."""

    provides_logprobs = False

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner = inner
        self.model_id = inner.model_id

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        out = []
        for r, c in zip(requests, self.inner.generate(requests)):
            text = restore_stop_tag(c.text, r.sampling.stop, c.finish_reason)
            if text != c.text:
                c = Completion(text, c.prompt_ids, c.response_ids, c.logprobs, c.finish_reason, c.model)
            out.append(c)
        return out

    def token_usage(self) -> dict[str, int]:
        return policy_tokens(self.inner)

    def close(self) -> None:
        self.inner.close()


def _is_local(base_url: str) -> bool:
    return (urlparse(base_url).hostname or "") in LOCAL_HOSTS


def build_teacher(cfg: TeacherConfig) -> Policy:
    """The teacher policy. A remote endpoint without its API key is refused before any request."""
    if not os.environ.get(cfg.api_key_env) and not _is_local(cfg.base_url):
        raise TeacherError(
            f"the teacher at {cfg.base_url} needs an API key in ${cfg.api_key_env}: export {cfg.api_key_env}=... "
            "(or pass --api-key-env NAME for another variable)"
        )
    inner = build_policy(
        "openai", cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env, max_concurrency=cfg.max_concurrency,
        timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, vllm_extras=False, logprobs=False,
    )  # fmt: skip
    return RestoreStopTags(inner)


def build_local_executor(cfg: DistillConfig) -> Policy:
    """The template-only executor: a local HF model, continuous batching across concurrent scripts."""
    return build_policy("hf", cfg.executor_model, device=cfg.device, max_batch_size=32, continuous=True)


def policy_tokens(policy: Any) -> dict[str, int]:
    """Prompt and completion tokens a policy has spent so far (as the endpoint reports them, if it does)."""
    inner = getattr(policy, "inner", None)
    if inner is not None and hasattr(policy, "token_usage"):
        return policy.token_usage()
    usage = policy.endpoint_usage.snapshot() if hasattr(policy, "endpoint_usage") else policy.usage.snapshot()
    prompt = sum(usage["prompt_tokens"].values())
    completion = sum(usage["completion_tokens"].values())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
