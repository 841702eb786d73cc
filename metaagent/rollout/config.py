"""Configuration of the hierarchical rollout (paper §3.2): M designs per task, N executions per design."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metaagent.config import ConfigError
from metaagent.policy.base import SamplingParams
from metaagent.workflow.protocol import DELIVERY_CLOSE

TEMPLATE_SELECTIONS = ("domain", "uniform")


@dataclass
class SamplingConfig:
    """Sampling of one role. ``temperature: 0`` is greedy (evaluation); training samples at 1.0."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params()  # validates

    def params(self, seed: int | None = None) -> SamplingParams:
        try:
            return SamplingParams(
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                stop=tuple(self.stop),
                seed=seed,
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _default_executor_sampling() -> SamplingConfig:
    return SamplingConfig(temperature=1.0, max_tokens=384, stop=[DELIVERY_CLOSE])


def _default_designer_sampling() -> SamplingConfig:
    return SamplingConfig(temperature=1.0, max_tokens=768)


@dataclass
class RolloutConfig:
    """M x N hierarchical rollout.

    Attributes:
        m_designs: designs sampled per task (paper: 4).
        n_executions: executions per valid design (paper: 4).
        k_templates: in-context templates shown to the designer per design (``full`` prompt only).
        designer_prompt: "full" (API reference + k templates), "compact" (short API summary, no examples)
            or "auto": the style the designer model was trained on (``metaagent_prompt.json`` in its
            folder, e.g. ``embedded-sft``), else "full". See ``metaagent.rollout.prompts``.
        template_selection: "domain" picks templates whose domains include the task's, "uniform" any.
        frozen_designer: a template name or a script path; when set, every design is this frozen script
            (fixed multi-agent system) and no designer sample is produced.
        limits: sandbox limits per execution (``metaagent.workflow`` Limits fields, e.g. timeout_s).
        sandbox_workers: sandbox worker processes (each runs one execution at a time).
        max_inflight: executions in flight at once (threads waiting on agent calls).
        ray_address: run sandbox workers as Ray actors at this address ("local" starts a local Ray).
    """

    m_designs: int = 4
    n_executions: int = 4
    k_templates: int = 2
    template_selection: str = "domain"
    designer_prompt: str = "auto"
    designer: SamplingConfig = field(default_factory=_default_designer_sampling)
    executor: SamplingConfig = field(default_factory=_default_executor_sampling)
    frozen_designer: str | None = None
    limits: dict[str, Any] = field(default_factory=lambda: {"timeout_s": 120.0})
    sandbox_workers: int = 8
    max_inflight: int = 64
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.m_designs < 1:
            raise ConfigError(f"rollout.m_designs must be >= 1, got {self.m_designs}")
        if self.n_executions < 1:
            raise ConfigError(f"rollout.n_executions must be >= 1, got {self.n_executions}")
        if self.k_templates < 0:
            raise ConfigError(f"rollout.k_templates must be >= 0, got {self.k_templates}")
        if self.template_selection not in TEMPLATE_SELECTIONS:
            raise ConfigError(
                f"rollout.template_selection must be one of {TEMPLATE_SELECTIONS}, got {self.template_selection!r}"
            )
        from metaagent.rollout.prompts import DESIGNER_PROMPT_CHOICES

        if self.designer_prompt not in DESIGNER_PROMPT_CHOICES:
            raise ConfigError(
                f"rollout.designer_prompt must be one of {DESIGNER_PROMPT_CHOICES}, got {self.designer_prompt!r}"
            )
        if self.sandbox_workers < 1:
            raise ConfigError(f"rollout.sandbox_workers must be >= 1, got {self.sandbox_workers}")
        if self.max_inflight < 1:
            raise ConfigError(f"rollout.max_inflight must be >= 1, got {self.max_inflight}")
