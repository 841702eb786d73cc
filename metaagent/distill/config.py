"""Configuration of a distillation run: the teacher (or template-only mode), the tasks, the rollout, filters.

Two modes share everything after the designer:

- **teacher** (default): an OpenAI-compatible endpoint writes the workflow script from the same designer
  prompt the RL designer sees and is the executor of every agent call. Defaults are DeepSeek's API
  (``https://api.deepseek.com``, model ``deepseek-chat``, key in ``$DEEPSEEK_API_KEY``), as in the paper.
- **template-only** (``template_only=True``): no teacher. The designer's reply is a template from the bank,
  instantiated for the task (:mod:`metaagent.distill.variation`); a local model (``executor_model``,
  default the embedded SmolLM2) executes it through the rollout engine's fixed-design path.

The rollout settings are a :class:`metaagent.rollout.config.RolloutConfig`; the defaults per mode are the
plain data below, and a train config's ``rollout:`` section can replace them (``--rollout-config``).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import Checked, ConfigError, from_dict, to_dict
from metaagent.data import DatasetSpec
from metaagent.domain import domain_names
from metaagent.rollout.config import RolloutConfig
from metaagent.workflow.protocol import DELIVERY_CLOSE

DEEPSEEK_BASE_URL = "https://api.deepseek.com"
DEEPSEEK_MODEL = "deepseek-chat"
DEEPSEEK_KEY_ENV = "DEEPSEEK_API_KEY"

#: rollout of a teacher run: a strong model needs room to reason and may call many agents
TEACHER_ROLLOUT: dict[str, Any] = {
    "m_designs": 2,
    "n_executions": 2,
    "k_templates": 1,
    "designer": {"temperature": 1.0, "max_tokens": 1024},
    "executor": {"temperature": 1.0, "max_tokens": 1024, "stop": [DELIVERY_CLOSE]},
    "limits": {"timeout_s": 120, "tool_time_s": 60, "total_timeout_s": 600, "max_agent_calls": 16,
               "max_total_tokens": 16384},
    "sandbox_workers": 8,
    "max_inflight": 32,
}

#: rollout of a template-only run: the budgets of configs/default.yaml (the demo the sample is made for),
#: with a lower executor temperature so the small local executor produces more correct runs to keep
TEMPLATE_ROLLOUT: dict[str, Any] = {
    "m_designs": 4,
    "n_executions": 2,
    "k_templates": 1,
    "designer": {"temperature": 1.0, "max_tokens": 256},
    "executor": {"temperature": 0.3, "max_tokens": 160, "stop": [DELIVERY_CLOSE]},
    "limits": {"timeout_s": 30, "tool_time_s": 60, "max_agent_calls": 6, "max_total_tokens": 1500},
    "sandbox_workers": 8,
    "max_inflight": 32,
}

#: tokens kept free in the designer budget after a template script: the closing fence and end of turn
SCRIPT_BUDGET_MARGIN = 8


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class TeacherConfig(Checked):
    """An OpenAI-compatible teacher endpoint. The key is read from ``$api_key_env``, never stored."""

    base_url: str = DEEPSEEK_BASE_URL  # the endpoint's API root (http or https)
    model: str = DEEPSEEK_MODEL  # the served model name
    api_key_env: str = DEEPSEEK_KEY_ENV  # environment variable holding the API key
    max_concurrency: PositiveInt = 16  # teacher requests in flight at once
    timeout_s: PositiveFloat = 120.0  # seconds one teacher request may take
    max_retries: NonNegativeInt = 5  # retries of a failed request, with exponential backoff

    field_label: ClassVar[Any] = staticmethod(lambda name: "--teacher." + name.replace("_", "-"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"teacher base_url must be an http(s) URL, e.g. {DEEPSEEK_BASE_URL}; got {self.base_url!r}"
            )
        if not self.model:
            raise ConfigError("teacher model must be the served model name, e.g. --model deepseek-chat")


def default_rollout(template_only: bool) -> dict[str, Any]:
    return copy.deepcopy(TEMPLATE_ROLLOUT if template_only else TEACHER_ROLLOUT)


@dataclass
class DistillConfig(Checked):
    """One distillation run.

    Attributes:
        out: output directory (designer.jsonl, executor.jsonl, done.jsonl, manifest.json, trees.jsonl).
        template_only: no teacher; templates are the designer, ``executor_model`` the executor.
        teacher: the teacher endpoint (teacher mode).
        executor_model: local executor in template-only mode: "embedded", "tiny" or an HF directory.
        device: device of the local executor.
        data: dataset specs (``metaagent.data.DatasetSpec`` strings such as "bundled:train" or dicts).
        levels / domain / limit: filters applied to every spec (bundled levels, one domain, first N).
        rollout: M designs, N executions, k in-context templates, sampling, sandbox limits.
        max_tasks: process at most this many not-yet-done tasks in this invocation (None: all).
        tasks_in_flight: tasks rolled out at once.
        keep_all: keep the examples of incorrect executions too, labelled ``correct: false``.
        vary: template-only: meaning-preserving variation of role names and prompts.
        max_script_tokens: template-only: longest designer reply (fenced script); default: the designer's
            ``max_tokens`` minus :data:`SCRIPT_BUDGET_MARGIN`, so the student can write it within its budget.
        seed: every random choice derives from it (templates shown, template chosen, sampling seeds).
        save_trees: also append each task's full RolloutTree to trees.jsonl (for metaagent-replay).
        command: the command line that started the run (recorded in the manifest).
    """

    out: str
    template_only: bool = False
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    executor_model: str = "embedded"
    device: str = "cpu"
    data: list[Any] = field(default_factory=lambda: ["bundled:train"])
    levels: list[int] | None = None
    domain: str | None = None
    limit: PositiveInt | None = None
    rollout: RolloutConfig | dict[str, Any] | None = None
    max_tasks: PositiveInt | None = None
    tasks_in_flight: PositiveInt = 4
    keep_all: bool = False
    vary: bool = True
    max_script_tokens: Annotated[int, Field(ge=16)] | None = None
    seed: int = 0
    save_trees: bool = True
    command: str = ""

    field_label: ClassVar[Any] = staticmethod(_flag)  # errors name the flag: --max-tasks

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.out:
            raise ConfigError("--out must name the output directory, e.g. --out sft_data/run1")
        if self.domain is not None and self.domain not in domain_names():
            raise ConfigError(f"--domain {self.domain!r} is not a registered domain; use one of {list(domain_names())}")
        if self.rollout is None:
            self.rollout = default_rollout(self.template_only)
        if isinstance(self.rollout, dict):
            self.rollout = from_dict(RolloutConfig, self.rollout, where="rollout")
        if self.rollout.frozen_designer:
            raise ConfigError(
                "rollout.frozen_designer is set; distillation chooses designs itself (teacher or "
                "--template-only): remove it from the rollout config"
            )
        if not self.data:
            raise ConfigError("--data needs at least one dataset spec, e.g. bundled:train")
        if self.template_only and not self.executor_model:
            raise ConfigError(
                "--template-only needs --executor-model (e.g. embedded or a local HF directory)"
            )

    @property
    def script_token_budget(self) -> int:
        if self.max_script_tokens is not None:
            return self.max_script_tokens
        return self.rollout.designer.max_tokens - SCRIPT_BUDGET_MARGIN  # type: ignore[union-attr]

    def dataset_specs(self) -> list[Any]:
        """The data specs with the run-wide filters applied."""
        specs = []
        for raw in self.data:
            spec = DatasetSpec.parse(raw)
            changes = {
                k: v
                for k, v in (("levels", self.levels), ("domain", self.domain), ("limit", self.limit))
                if v is not None
            }
            if changes:
                spec = dataclasses.replace(spec, **changes)
            specs.append(spec)
        return specs

    def describe(self) -> dict[str, Any]:
        """JSON summary for the manifest (no secrets: only the *name* of the key's variable)."""
        out: dict[str, Any] = {
            "mode": "template-only" if self.template_only else "teacher",
            "data": [str(d) if not isinstance(d, dict) else d for d in self.data],
            "levels": self.levels,
            "domain": self.domain,
            "limit": self.limit,
            "rollout": to_dict(self.rollout),
            "keep_all": self.keep_all,
            "seed": self.seed,
        }
        if self.template_only:
            out.update(
                executor_model=self.executor_model, vary=self.vary, max_script_tokens=self.script_token_budget
            )
        else:
            out["teacher"] = to_dict(self.teacher)
        return out
