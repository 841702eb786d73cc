"""The configuration of one evaluation (``metaagent-eval``): methods x benchmarks x model cells."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import Checked, from_dict
from metaagent.policy.factory import MODEL_BACKENDS
from metaagent.rollout.budget import BUDGET_TAGS, DEFAULT_LOW_MAX_CALLS
from metaagent.rollout.config import auto_sandbox_workers
from metaagent.rollout.prompts import DomainHint

from .errors import EvalError


#: fields that change the numbers of a task's samples: a results directory is only resumed with the same
IDENTITY_FIELDS = (
    "seed",
    "n",
    "backend",
    "temperature",
    "top_p",
    "designer_max_tokens",
    "executor_max_tokens",
    "k_templates",
    "template_selection",
    "domain_hint",
    "timeout_s",
    "dtype",
    "role_models",
    "swap_roles",
    "rewards",  # each domain's own reward function (--rewards) scores the samples
    "budget",  # the designer prompt's budget tag and LOW's cap on agent calls
    "low_max_calls",
)


def auto_concurrency(max_batch_size: int, n: int) -> int:
    """Tasks in flight that keep ``max_batch_size`` rows decoding: C = ceil(2 B / n).

    A task in flight holds n executions (``sa``/``fixed:``: one design run n times; ``auto``: n designs, then
    one execution each), so C tasks offer C n >= 2 B executions for B sandbox workers and B decode rows: the
    second B queue for a worker, so a worker that ends an execution (or a task in its designer stage or being
    scored) never leaves a row empty. Seeds are per task (:func:`~metaagent.eval.methods.task_seed`), so C
    changes only the speed, never the samples.
    """
    if max_batch_size < 1 or n < 1:
        raise EvalError(f"auto concurrency needs max_batch_size and n >= 1, got {max_batch_size} and {n}")
    return -(-2 * max_batch_size // n)


@dataclass
class EvalConfig(Checked):
    """Everything one ``metaagent-eval`` run needs; stored in ``results.json`` and checked on resume.
    ``metaagent-eval``'s flags are generated from these fields (:mod:`metaagent.cli.flags`)."""

    # methods side by side: sa, auto, fixed:<template> (e.g. fixed:reflection, fixed:pot), sa@<k> (one
    # agent, k executions a sample: majority vote / first passing the public tests), sa@auto (k = auto's
    # executor calls per sample), sa@=<method>, best-per-domain (the best candidate per domain on
    # --selection-split)
    methods: list[str] = field(default_factory=lambda: ["sa", "auto"])
    # benchmarks: NAME[:split][@local file or dir] or file:PATH (your own tasks), e.g. bundled:test,
    # humaneval, aime24@aime.jsonl, file:tasks.jsonl
    benchmarks: list[str] = field(default_factory=lambda: ["bundled:test"])
    # domain -> "module:function": a plain Python reward(task, answer) -> float in [0, 1] as that domain's
    # R_correct instead of its scorer (as training's data.rewards; docs/guide/own-tasks.md)
    rewards: dict[str, str] = field(default_factory=dict)
    # models, each evaluated as designer and executor: alias (embedded, embedded-sft, tiny), local HF
    # directory, or served model name (openai backend)
    models: list[str] = field(default_factory=lambda: ["embedded"])
    designer_model: str | None = None  # designer of a single mixed cell (with --executor-model)
    executor_model: str | None = None  # executor of a single mixed cell (with --designer-model)
    grid_designers: list[str] = field(default_factory=list)  # co-evolution grid: designer checkpoints (crossed with grid_executors)
    grid_executors: list[str] = field(default_factory=list)  # co-evolution grid: executor checkpoints (crossed with grid_designers)
    # per-role executor models in every cell (AT-GRPO's per-role policies, L3): agent role-name pattern (fnmatch,
    # "executor:" optional) -> model; agents matching none use the cell's executor. AT-GRPO Table 3 "training in
    # SA, eval in MAS": --role-models '{"ToolAgent": <SA tool ckpt>, "PlanAgent": <SA plan ckpt>}' --methods fixed:at_plan
    role_models: dict[str, str] = field(default_factory=dict)
    # AT-GRPO Table 3 "w/ swapped policies": two role_models keys whose models are exchanged (default: no swap)
    swap_roles: list[str] = field(default_factory=list)
    backend: Literal[MODEL_BACKENDS] = "hf"  # policy backend for every model
    base_url: str | None = None  # openai backend: the endpoint root, e.g. http://127.0.0.1:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # openai backend: environment variable with the API key
    device: str = "cpu"  # hf/vllm: device (cpu, cuda, cuda:1)
    dtype: str = "float32"  # hf: float32, bfloat16 or float16
    max_batch_size: PositiveInt = 32  # hf: rows decoded together
    # hf: continuous batching (every agent call and designer reply of every task in flight joins the running
    # batch between decode steps, and returns when its own row is done): the same requests and seeds, only
    # the batch composition differs (as it does with --concurrency); --no-continuous: static batches
    continuous: bool = True
    n: PositiveInt = 3  # samples per task (designs x executions: auto n x 1, sa/fixed 1 x n)
    k: list[PositiveInt] = field(default_factory=list)  # budgets of avg@k / pass@k / maj@k (each <= n; default: 1 and n)
    limit: PositiveInt | None = None  # first N tasks of each benchmark
    split: str | None = None  # split of the benchmarks that do not name one
    tasks: list[str] = field(default_factory=list)  # only these task ids
    # best-per-domain: its candidate methods (default: sa and the fixed:<template> methods of --methods),
    # chosen per domain (suite family, else task domain) on --selection-split, never on the scored split
    best_of: list[str] = field(default_factory=list)
    # the split best-per-domain chooses on (never the benchmark's own split); <split>~<N>: N tasks of that
    # split in a seeded order (derive_seed(seed, "selection", task id)), for a benchmark without a val split
    selection_split: str = "val"
    seed: int = 0  # seed of every sample (a task's samples depend on seed, method and task id)
    temperature: Annotated[float, Field(ge=0)] = 0.7  # sampling temperature of both roles (0: greedy)
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0  # nucleus sampling of both roles
    designer_max_tokens: PositiveInt = 768  # max new tokens of a designer reply
    executor_max_tokens: PositiveInt = 384  # max new tokens of an agent reply
    k_templates: NonNegativeInt = 2  # in-context templates shown to the designer
    template_selection: Literal["domain", "uniform"] = "domain"  # which templates the designer sees
    # designer prompt style; auto: the one the designer model was trained on, else full
    designer_prompt: Literal["auto", "full", "compact"] = "auto"
    # the designer prompt's "Task domain: <domain>." sentence (training's rollout.domain_hint): on, off, or
    # auto (what the designer checkpoint was trained with, metaagent_prompt.json in its folder; else on)
    domain_hint: DomainHint = "auto"
    timeout_s: PositiveFloat = 120.0  # wall-clock limit of one execution
    # the designer prompt's budget tag of every task (LOW or HIGH); LOW also caps every execution's
    # agent calls at --low-max-calls, for every method (metaagent.rollout.budget); null: no tag, no cap
    budget: Literal[BUDGET_TAGS] | None = None
    low_max_calls: PositiveInt = DEFAULT_LOW_MAX_CALLS  # --budget LOW: most agent calls of one execution
    # tasks in flight at once (their model calls are batched); auto: enough to keep max_batch_size rows
    # decoding (auto_concurrency: 2 x max_batch_size / n, rounded up)
    concurrency: PositiveInt | Literal["auto"] = "auto"
    # sandbox worker processes (executions at once); auto: max_batch_size (an execution waits on one call)
    sandbox_workers: PositiveInt | Literal["auto"] = "auto"
    bootstrap: Annotated[int, Field(ge=100)] = 1000  # bootstrap resamples of each 95% CI
    out: str = "eval_results"  # results directory (resumed when it holds the same config)
    fresh: bool = False  # discard the records in --out instead of resuming
    report_only: bool = False  # only rewrite results.json, table.md and report.html from the records
    html: bool = True  # write report.html
    html_tasks: NonNegativeInt = 20  # task replays in the HTML report
    # kernel isolation of model-written code (auto: the strongest available; none warns)
    isolation: Literal["auto", "landlock", "namespaces", "none"] = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.methods:
            raise EvalError("no method given; use e.g. --methods sa auto fixed:reflection")
        if not self.benchmarks:
            raise EvalError("no benchmark given; use e.g. --benchmarks bundled:test humaneval")
        if bool(self.designer_model) != bool(self.executor_model):
            raise EvalError("--designer-model and --executor-model go together (one mixed cell); give both")
        if bool(self.grid_designers) != bool(self.grid_executors):
            raise EvalError("--grid-designers and --grid-executors go together (their cross product); give both")
        if self.backend == "openai" and not self.base_url:
            raise EvalError("--backend openai needs --base-url (the endpoint root, e.g. http://127.0.0.1:8000/v1)")
        if self.swap_roles and (len(set(self.swap_roles)) != 2 or not set(self.swap_roles) <= set(self.role_models)):
            raise EvalError(
                f"--swap-roles takes two different keys of --role-models {sorted(self.role_models)}, got {self.swap_roles}"
            )
        if self.sandbox_workers == "auto":
            self.sandbox_workers = auto_sandbox_workers(self.max_batch_size)
        if self.concurrency == "auto":
            self.concurrency = auto_concurrency(self.max_batch_size, self.n)
        bad = [k for k in self.k if not 1 <= k <= self.n]
        if bad:
            raise EvalError(
                f"k={bad[0]} > n={self.n} samples per task (or < 1): pass@k needs k <= n; raise --n or lower --k"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def budgets(self) -> list[int]:
        return sorted(set(self.k)) if self.k else sorted({1, self.n})

    def cells(self) -> list[tuple[str, str]]:
        """(designer, executor) model pairs evaluated, in order."""
        if self.grid_designers:
            return [(d, e) for d in self.grid_designers for e in self.grid_executors]
        if self.designer_model:
            return [(self.designer_model, str(self.executor_model))]
        return [(m, m) for m in self.models]

    def effective_role_models(self) -> dict[str, str]:
        """``role_models`` with the two ``swap_roles`` entries' models exchanged (Table 3's swapped policies)."""
        out = dict(self.role_models)
        if self.swap_roles:
            a, b = self.swap_roles
            out[a], out[b] = self.role_models[b], self.role_models[a]
        return out

    def identity(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in IDENTITY_FIELDS}


def make_config(**values: Any) -> EvalConfig:
    """Build an :class:`EvalConfig` from field values (types converted, unknown keys refused): a bad value
    is one :class:`~metaagent.config.ConfigError` line naming it, a bad combination an :class:`EvalError`."""
    return from_dict(EvalConfig, values)
