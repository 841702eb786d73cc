"""The configuration of one evaluation (``metaagent-eval``): methods x benchmarks x model cells."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import EvalError

BACKENDS = ("hf", "vllm", "openai")

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
    "timeout_s",
    "dtype",
)


class EvalConfig(BaseModel):
    """Everything one ``metaagent-eval`` run needs; stored in ``results.json`` and checked on resume."""

    model_config = ConfigDict(extra="forbid")

    methods: list[str] = Field(
        default_factory=lambda: ["sa", "auto"],
        description="methods side by side: sa, auto, fixed:<template> (e.g. fixed:reflection)",
    )
    benchmarks: list[str] = Field(
        default_factory=lambda: ["bundled:test"],
        description="benchmarks: NAME[:split][@local file or dir], e.g. bundled:test, humaneval, aime24@aime.jsonl",
    )
    models: list[str] = Field(
        default_factory=lambda: ["embedded"],
        description="models, each evaluated as designer and executor: alias (embedded, embedded-sft, tiny), "
        "local HF directory, or served model name (openai backend)",
    )
    designer_model: str | None = Field(None, description="designer of a single mixed cell (with --executor-model)")
    executor_model: str | None = Field(None, description="executor of a single mixed cell (with --designer-model)")
    grid_designers: list[str] = Field(
        default_factory=list, description="co-evolution grid: designer checkpoints (crossed with grid_executors)"
    )
    grid_executors: list[str] = Field(
        default_factory=list, description="co-evolution grid: executor checkpoints (crossed with grid_designers)"
    )
    backend: Literal["hf", "vllm", "openai"] = Field("hf", description="policy backend for every model")
    base_url: str | None = Field(None, description="openai backend: the endpoint root, e.g. http://127.0.0.1:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai backend: environment variable with the API key")
    device: str = Field("cpu", description="hf/vllm: device (cpu, cuda, cuda:1)")
    dtype: str = Field("float32", description="hf: float32, bfloat16 or float16")
    max_batch_size: int = Field(32, ge=1, description="hf: rows decoded together")
    n: int = Field(3, ge=1, description="samples per task (designs x executions: auto n x 1, sa/fixed 1 x n)")
    k: list[int] = Field(default_factory=list, description="budgets of avg@k / pass@k / maj@k (each <= n; default: 1 and n)")
    limit: int | None = Field(None, ge=1, description="first N tasks of each benchmark")
    split: str | None = Field(None, description="split of the benchmarks that do not name one")
    tasks: list[str] = Field(default_factory=list, description="only these task ids")
    seed: int = Field(0, description="seed of every sample (a task's samples depend on seed, method and task id)")
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of both roles (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling of both roles")
    designer_max_tokens: int = Field(768, ge=1, description="max new tokens of a designer reply")
    executor_max_tokens: int = Field(384, ge=1, description="max new tokens of an agent reply")
    k_templates: int = Field(2, ge=0, description="in-context templates shown to the designer")
    template_selection: Literal["domain", "uniform"] = Field("domain", description="which templates the designer sees")
    designer_prompt: Literal["auto", "full", "compact"] = Field(
        "auto", description="designer prompt style; auto: the one the designer model was trained on, else full"
    )
    timeout_s: float = Field(120.0, gt=0, description="wall-clock limit of one execution")
    concurrency: int = Field(4, ge=1, description="tasks in flight at once (their agent calls are batched)")
    sandbox_workers: int = Field(4, ge=1, description="sandbox worker processes")
    bootstrap: int = Field(1000, ge=100, description="bootstrap resamples of each 95% CI")
    out: str = Field("eval_results", description="results directory (resumed when it holds the same config)")
    fresh: bool = Field(False, description="discard the records in --out instead of resuming")
    report_only: bool = Field(False, description="only rewrite results.json, table.md and report.html from the records")
    html: bool = Field(True, description="write report.html")
    html_tasks: int = Field(20, ge=0, description="task replays in the HTML report")

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
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
        bad = [k for k in self.k if not 1 <= k <= self.n]
        if bad:
            raise EvalError(
                f"k={bad[0]} > n={self.n} samples per task (or < 1): pass@k needs k <= n; raise --n or lower --k"
            )
        return self

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

    def identity(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in IDENTITY_FIELDS}


def make_config(**values: Any) -> EvalConfig:
    """Build an :class:`EvalConfig`; a bad value is an :class:`EvalError` with one line per problem."""
    from pydantic import ValidationError

    try:
        return EvalConfig(**values)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "config"
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            problems.append(msg if not err.get("loc") else f"{where}: {msg}")
        raise EvalError("; ".join(problems)) from None
