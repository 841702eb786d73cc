"""Configuration of the hierarchical rollout (paper §3.2): M designs per task, N executions per design."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import NonNegativeInt, PositiveInt

from metaagent.config import Checked, ConfigError
from metaagent.policy.base import SamplingParams
from metaagent.workflow.protocol import DELIVERY_CLOSE

from .adaptive import AdaptiveBudgetConfig
from .branching import BranchingConfig
from .budget import BudgetConfig
from .prompts import DomainHint

TEMPLATE_SELECTIONS = ("domain", "uniform")
#: ``rollout.ray_placement``: how the Ray sandbox actors are placed on the cluster's nodes
RAY_PLACEMENTS = ("spread", "default")
#: ``sandbox_workers`` of a RolloutConfig that no TrainConfig resolved (the policy's default max_batch_size)
DEFAULT_DECODE_ROWS = 32


def auto_sandbox_workers(max_batch_size: int) -> int:
    """Sandbox workers that keep ``max_batch_size`` rows decoding: W = max_batch_size.

    Each worker runs one execution, and an execution waits on at most one agent call at a time (a script's
    ``parallel`` sends a few at once, so W rows is the least that W workers keep queued). With W below
    the batch size the decode batch never passes W rows (issue 63: 8 workers under ``max_batch_size`` 32 left
    the decode thread idle ~23% of a rollout). Workers start on first use, so W costs memory only for the
    executions that really run at once (one worker's RSS: ``benchmarks/eval_throughput.py`` measures it).
    """
    if max_batch_size < 1:
        raise ConfigError(f"max_batch_size must be >= 1 to size the sandbox pool, got {max_batch_size}")
    return int(max_batch_size)


@dataclass
class SamplingConfig:
    """Sampling of one role. ``temperature: 0`` is greedy (evaluation); training samples at 1.0."""

    temperature: float = 1.0  # softmax temperature of sampling; 0 = greedy
    top_p: float = 1.0  # nucleus sampling: keep the smallest token set of this probability mass (1 = off)
    top_k: int = 0  # keep only the k most likely tokens (0 = off)
    max_tokens: int = 512  # most tokens generated per call (a reply that reaches it is cut there)
    stop: list[str] = field(default_factory=list)  # generation stops after any of these strings

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
class RolloutConfig(Checked):
    """M x N hierarchical rollout.

    Attributes:
        m_designs: designs sampled per task (paper: 4).
        n_executions: executions per valid design (paper: 4).
        k_templates: in-context templates shown to the designer per design (``full`` prompt only).
        designer_prompt: "full" (API reference + k templates), "compact" (short API summary, no examples)
            or "auto": the style the designer model was trained on (``metaagent_prompt.json`` in its
            folder, e.g. ``embedded-sft``), else "full". See ``metaagent.rollout.prompts``.
        domain_hint: the designer prompt's ``Task domain: <domain>.`` sentence: on, off (issue 62: no free
            domain label to split choices by), or auto (what the designer model records, else on).
        template_selection: "domain" picks templates whose domains include the task's, "uniform" any.
        frozen_designer: a template name or a script path; when set, every design is this frozen script
            (fixed multi-agent system) and no designer sample is produced. ``sa``: each task domain's
            single-agent script (eval's ``sa``; the ``sa+grpo`` recipe, ``configs/sa_grpo_suite.yaml``).
        limits: sandbox limits per execution (``metaagent.workflow`` Limits fields, e.g. timeout_s).
        sandbox_workers: sandbox worker processes (each runs one execution at a time); ``"auto"``:
            :func:`auto_sandbox_workers` of ``policy.max_batch_size`` (resolved when a TrainConfig loads, so
            config.yaml records the number; :meth:`workers` resolves a RolloutConfig used on its own).
        max_inflight: executions in flight at once (threads waiting on agent calls); more than
            ``sandbox_workers`` only queue for a worker.
        ray_address: run sandbox workers as Ray actors at this address ("local" starts a local Ray); then
            ``sandbox_workers`` is the number of actors, each running 4 executions at once (a sandbox pool on
            its node), and every execution record names its node (``Execution.node``).
        ray_placement: "spread" (each actor pinned, round-robin, to one of the cluster's alive nodes when the
            pool starts) or "default" (Ray's default policy, which keeps zero-CPU actors mostly on the
            driver's node).
        ray_resource: a custom resource each sandbox actor asks one unit of: only nodes started with
            ``ray start --resources='{"<name>": k}'`` host actors, k at most on each (e.g. to keep them off
            the GPU nodes). The cluster must advertise at least ``sandbox_workers`` units.
        branching: tree sampling inside executions (AT-GRPO, seed 003); ``k = 1`` is off.
        adaptive_budget: executions in waves; agreeing designs stop, their budget goes to disagreeing ones.
            The batch's M x N budget is kept (``metaagent.rollout.adaptive``); off by default.
        budget: the designer prompt's budget tag (LOW / HIGH) drawn per training question, and LOW's cap on
            each execution's agent calls (``metaagent.rollout.budget``); off by default.
    """

    m_designs: PositiveInt = 4
    n_executions: PositiveInt = 4
    k_templates: NonNegativeInt = 2
    template_selection: Literal[TEMPLATE_SELECTIONS] = "domain"
    # designer prompt: full (API reference + in-context templates, for teachers and untrained models), compact
    # (a short API summary, no examples, for trained designers), auto (the one the designer model records, else full)
    designer_prompt: Literal["auto", "full", "compact"] = "auto"
    # the designer prompt's "Task domain: <domain>." sentence: on, off (issue 62: the designer gets no domain
    # label the task text does not carry, so its choices can differ per task, not per label), auto (what the
    # designer model records in metaagent_prompt.json, else on)
    domain_hint: DomainHint = "auto"
    designer: SamplingConfig = field(default_factory=_default_designer_sampling)  # sampling of designer scripts
    executor: SamplingConfig = field(default_factory=_default_executor_sampling)  # sampling of agent replies
    frozen_designer: str | None = None
    limits: dict[str, Any] = field(
        default_factory=lambda: {"timeout_s": 120.0, "tool_time_s": 60.0, "total_timeout_s": 600.0}
    )
    # sandbox worker processes, each running one execution at a time; auto: policy.max_batch_size (as many
    # executions as rows the decode batch holds, so agent calls keep the batch full)
    sandbox_workers: PositiveInt | Literal["auto"] = "auto"
    max_inflight: PositiveInt = 64
    ray_address: str | None = None
    # Ray sandbox actors: pinned round-robin to the alive nodes (spread) or Ray's default placement; with
    # ray_resource only the nodes that advertise that custom resource host them (one unit per actor)
    ray_placement: Literal[RAY_PLACEMENTS] = "spread"
    ray_resource: str | None = None
    branching: BranchingConfig = field(default_factory=BranchingConfig)
    adaptive_budget: AdaptiveBudgetConfig = field(default_factory=AdaptiveBudgetConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)

    def __post_init__(self) -> None:
        if isinstance(self.budget, dict):
            self.budget = BudgetConfig(**self.budget)
        if isinstance(self.branching, dict):
            self.branching = BranchingConfig(**self.branching)
        if isinstance(self.adaptive_budget, dict):
            self.adaptive_budget = AdaptiveBudgetConfig(**self.adaptive_budget)
        super().__post_init__()
        ab = self.adaptive_budget
        if ab.enabled and ab.first_n >= self.n_executions:
            raise ConfigError(
                f"rollout.adaptive_budget.first_n = {ab.first_n} must be below rollout.n_executions = "
                f"{self.n_executions}, or no execution is freed; raise n_executions (e.g. 4) or turn it off"
            )
        if ab.enabled and ab.cap(self.n_executions) < self.n_executions:
            raise ConfigError(
                f"rollout.adaptive_budget.max_n = {ab.max_n} is below rollout.n_executions = {self.n_executions}: "
                "freed executions could go nowhere; set max_n >= n_executions"
            )
        if self.ray_resource is not None and not self.ray_address:
            raise ConfigError(
                f"rollout.ray_resource={self.ray_resource!r} places Ray sandbox actors, but rollout.ray_address is "
                "not set; set rollout.ray_address (a cluster address, or local) or drop rollout.ray_resource"
            )
        if self.branching.active and self.ray_address:
            raise ConfigError("rollout.branching.k > 1 runs host-side turn rewards; it does not run on Ray actors yet")

    def workers(self, max_batch_size: int | None = None) -> int:
        """``sandbox_workers`` as a number: ``"auto"`` is :func:`auto_sandbox_workers` of ``max_batch_size``
        (default :data:`DEFAULT_DECODE_ROWS`, the policy's default batch)."""
        if self.sandbox_workers == "auto":
            return auto_sandbox_workers(max_batch_size or DEFAULT_DECODE_ROWS)
        return int(self.sandbox_workers)
