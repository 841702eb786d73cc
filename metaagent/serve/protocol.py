"""Wire format of ``metaagent-serve`` (pydantic models; FastAPI renders them as the OpenAPI schema at /docs).

``POST /v1/teams`` — a task in, a designed team out::

    {"task": "What is 2 + 3?", "domain": "math", "n_designs": 1, "execute": true,
     "select": "first", "sampling": {"executor": {"temperature": 0.2}}, "seed": 7, "return_trace": false}

``task`` may also be an object ``{"question", "answer"?, "tests"?, "metadata"?}``: with a reference the
executions are scored and each carries a ``reward``; without one (the usual case) ``reward`` is null: a
served task has no reward, which is not an error.

``POST /v1/chat/completions`` — OpenAI-compatible. The reply's content is the team's final answer; the team
travels in the extension field ``metaagent`` of the response (the same object ``/v1/teams`` returns). The
request may carry the extension ``metaagent: {"domain", "n_designs", "n_executions", "select",
"return_trace"}`` (the ``openai`` client sends it with ``extra_body={"metaagent": {...}}``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from metaagent.domain import served_domains


def _served(name: str) -> str:
    if name not in served_domains():
        raise ValueError(f"unknown domain {name!r}; this server accepts {list(served_domains())}")
    return name


#: a domain the server accepts (``Domain.served`` in metaagent.domain: math, code)
Domain = Annotated[str, AfterValidator(_served)]
Select = Literal["first", "majority", "judge"]
TeamStatus = Literal["answered", "no_answer", "designed"]


class _Strict(BaseModel):
    """Unknown fields are an error naming them (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid")


# ---- /v1/teams request -------------------------------------------------------------------------------------


class SamplingSpec(_Strict):
    """Sampling of one logical role; unset fields keep the server's defaults."""

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)


class RoleSampling(_Strict):
    designer: SamplingSpec | None = None
    executor: SamplingSpec | None = None


class TaskSpec(_Strict):
    """A task with an optional reference: ``answer`` (math) or ``tests`` (code, the loaders' format)."""

    question: str
    answer: str | None = None
    tests: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class TeamOptions(_Strict):
    """What the team should do; shared by ``/v1/teams`` and the chat extension field."""

    domain: Domain | None = Field(
        None, description="a domain the server accepts (math, code); guessed from the text when omitted"
    )
    n_designs: int = Field(1, ge=1, description="designs sampled (capped by the server's --max-designs)")
    n_executions: int = Field(1, ge=1, description="executions per valid design (capped by --max-executions)")
    select: Select = Field("first", description="how the answer is picked among executions")
    return_trace: bool = Field(False, description="also return the full RolloutTree record as `trace`")


class TeamRequest(TeamOptions):
    task: str | TaskSpec
    execute: bool = Field(True, description="false: design only, run nothing")
    sampling: RoleSampling | None = None
    seed: int | None = Field(None, ge=0, lt=2**31, description="makes the team reproducible")


# ---- /v1/teams response ------------------------------------------------------------------------------------


class DiagnosticOut(BaseModel):
    line: int
    col: int
    code: str
    message: str


class CheckOut(BaseModel):
    ok: bool
    errors: list[DiagnosticOut] = Field(default_factory=list)
    warnings: list[DiagnosticOut] = Field(default_factory=list)


class RoleOut(BaseModel):
    name: str
    system_prompt: str


class DesignerOut(BaseModel):
    text: str
    finish_reason: str
    templates: list[str]
    prompt_tokens: int
    completion_tokens: int


class TurnOut(BaseModel):
    index: int
    role: str
    system_prompt: str
    message: str = Field(description="the last message the agent received")
    response: str
    delivery: str | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    parents: list[int]
    elapsed_s: float


class ToolCallOut(BaseModel):
    index: int
    name: str
    args: dict[str, Any]
    result: str
    ok: bool
    after_turn: int


class ErrorOut(BaseModel):
    type: str
    message: str
    line: int | None = None


class RewardOut(BaseModel):
    total: float | None
    correct: float | None
    format: float | None
    error: str | None = None


class ExecutionOut(BaseModel):
    index: int
    status: str
    answer: str | None
    submitted: bool
    error: ErrorOut | None
    elapsed_s: float
    reward: RewardOut | None = Field(description="null when the task has no reference")
    turns: list[TurnOut]
    tool_calls: list[ToolCallOut]


class DesignOut(BaseModel):
    index: int
    source: str
    valid: bool
    script: str | None
    structure: dict[str, Any] | None
    roles: list[RoleOut]
    check: CheckOut
    designer: DesignerOut | None
    executions: list[ExecutionOut]


class JudgeOut(BaseModel):
    response: str
    choice: int | None
    prompt_tokens: int
    completion_tokens: int


class SelectionOut(BaseModel):
    method: Select
    design: int | None
    execution: int | None
    candidates: int
    votes: dict[str, int] = Field(default_factory=dict)
    judge: JudgeOut | None = None
    note: str | None = None


class RoleUsage(BaseModel):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class UsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    by_role: dict[str, RoleUsage] = Field(description="designer, executor, judge")
    by_agent: dict[str, RoleUsage] = Field(description="per agent role name of the team")


class TaskOut(BaseModel):
    id: str
    domain: Domain
    question: str
    has_reference: bool


class TeamResponse(BaseModel):
    id: str
    object: Literal["team"] = "team"
    created: int
    model: str
    status: TeamStatus
    detail: str | None = Field(None, description="why there is no answer, when there is none")
    answer: str | None
    task: TaskOut
    designs: list[DesignOut]
    selection: SelectionOut | None
    usage: UsageOut
    timings: dict[str, float]
    seed: int
    trace: dict[str, Any] | None = None


# ---- OpenAI-compatible chat --------------------------------------------------------------------------------


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI chat request. Sampling fields apply to the executor's agents (``max_tokens`` per agent turn).

    Fields without meaning for a team are accepted and ignored when they are at their neutral value
    (``frequency_penalty``, ``presence_penalty``, ``logit_bias``, ``user``, ...); ones that would change the
    answer and cannot be honoured (``n > 1``, ``tools``, ``logprobs``, non-text ``response_format``,
    ``stop``) are refused with 400.
    """

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = Field(None, ge=0, lt=2**31)
    stop: str | list[str] | None = None
    metaagent: TeamOptions | None = None


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    finish_reason: Literal["stop", "length"]


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
    metaagent: TeamResponse


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "metaagent"
    metaagent: dict[str, Any] = Field(default_factory=dict)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
