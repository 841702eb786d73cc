"""One team request, start to end: design (and run) the team, pick its answer, say what happened.

    engine.rollout([task], mode="serve")    designs -> checked -> sandboxed executions -> rewards
    drop_missing_rewards                    a served task without reference has no reward (not an error)
    select_answer                           first | majority | judge (one extra executor call)
    TeamResult                              status answered | no_answer | designed, detail, usage, timings

The designer and executor are per-request fronts (:class:`~metaagent.serve.request_policy.RequestPolicy`)
over the server's shared batchers: they count this request's tokens, refuse model calls once the request
is cancelled or out of time, and report each executor completion to the stream (:class:`TeamObserver`).
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metaagent.credit import fill_design_rewards
from metaagent.data.tasks import Task
from metaagent.execution.code import deadline as code_deadline
from metaagent.policy.base import ChatRequest, PolicyError, RequestError, SamplingParams
from metaagent.records import Design, Execution, RewardRecord, RolloutTree
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import FrozenDesign, RolloutEngine, RolloutObserver
from metaagent.seeding import derive_seed
from metaagent.workflow import SandboxError
from metaagent.workflow.protocol import agent_system_prompt, extract_delivery

from . import selection
from .config import ServeConfig
from .errors import ServeError, bad_request, unavailable
from .models import ServeModels
from .protocol import JudgeOut, SelectionOut, TaskOut, TeamResponse, UsageOut
from .request_policy import RequestBudget, RequestPolicy
from .views import design_out, execution_out, is_no_reference, merge_usage, roles_of, usage_out

log = logging.getLogger("metaagent.serve")

Event = dict[str, Any]
EventSink = Callable[[Event], None]


class ClientGone(Exception):
    """The client disconnected; the team was cancelled and there is nobody to answer."""


@dataclass
class TeamSpec:
    """A validated team request, whichever endpoint it came from."""

    task: Task
    n_designs: int = 1
    n_executions: int = 1
    execute: bool = True
    select: str = "first"
    designer_sampling: SamplingParams | None = None
    executor_sampling: SamplingParams | None = None
    seed: int | None = None
    return_trace: bool = False


@dataclass
class TeamContext:
    """What all teams of a server share (owned by :class:`~metaagent.serve.service.TeamService`)."""

    config: ServeConfig
    models: ServeModels
    pool: Any
    templates: Sequence[Any]
    reward_config: Any
    run_id: str
    record_config: dict[str, Any]
    frozen_design: Design | None = None


@dataclass
class TeamResult:
    """A finished team: its record and what the response shows."""

    tree: RolloutTree
    status: str
    answer: str | None
    detail: str | None
    selection: SelectionOut | None
    usage: UsageOut
    timings: dict[str, float]
    seed: int
    created: int = field(default_factory=lambda: int(time.time()))
    request_id: str = field(default_factory=lambda: f"team-{uuid.uuid4().hex[:16]}")

    def response(self, model: str, *, return_trace: bool = False) -> TeamResponse:
        task = self.tree.task
        return TeamResponse(
            id=self.request_id,
            created=self.created,
            model=model,
            status=self.status,  # type: ignore[arg-type]
            detail=self.detail,
            answer=self.answer,
            task=TaskOut(
                id=task["id"],
                domain=task["domain"],
                question=task["question"],
                has_reference=bool(task.get("answer") is not None or task.get("tests")),
            ),
            designs=[design_out(d) for d in self.tree.designs],
            selection=self.selection,
            usage=self.usage,
            timings=self.timings,
            seed=self.seed,
            trace=self.tree.to_dict() if return_trace else None,
        )


class TeamObserver(RolloutObserver):
    """Turns engine progress and executor completions into stream events. Never raises into the engine.

    A turn's role name is found from its system prompt, using the roles the static analysis read from the
    designs (``"agent"`` when a script builds its prompts at run time).
    """

    def __init__(self, emit: EventSink | None) -> None:
        self.emit = emit
        self.designs: list[Design] = []
        self.prompt_roles: dict[str, str] = {}

    def _send(self, event: Event) -> None:
        if self.emit is None:
            return
        try:
            self.emit(event)
        except Exception:  # a closed stream must not fail the team
            log.debug("dropping a stream event", exc_info=True)

    def designs_done(self, designs: Any) -> None:
        self.designs = list(designs)
        for d in self.designs:
            for role in roles_of(d):
                self.prompt_roles.setdefault(agent_system_prompt(role.system_prompt), role.name)
            self._send({"event": "design", "design": design_out(d, executions=False).model_dump()})

    def execution_done(self, execution: Execution) -> None:
        design = next((d.index for d in self.designs if any(e is execution for e in d.executions)), 0)
        payload = execution_out(execution, turns=False).model_dump(exclude={"turns", "tool_calls"})
        self._send({"event": "execution", "design": design, "execution": payload})

    def completion(self, request: ChatRequest, completion: Any) -> None:
        system = request.messages[0]["content"] if request.messages[0]["role"] == "system" else ""
        role = "judge" if request.role == "judge" else self.prompt_roles.get(system, "agent")
        turn = {
            "role": role,
            "response": completion.text,
            "delivery": extract_delivery(completion.text),
            "finish_reason": completion.finish_reason,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
        }
        self._send({"event": "turn", "turn": turn})


# ---- running one team -------------------------------------------------------------------------------------


def run_team(ctx: TeamContext, spec: TeamSpec, budget: RequestBudget, emit: EventSink | None = None) -> TeamResult:
    """Design (and run) a team for ``spec.task`` and pick its answer. Blocking.

    Raises :class:`ServeError` (400 the model refused the designer request, 503 backend or sandbox down,
    504 out of time) or :class:`ClientGone`; a team that ran but found no answer is a result, not an error.
    """
    t0 = time.perf_counter()
    observer = TeamObserver(emit)
    models = ctx.models
    designer = RequestPolicy(models.designer, budget) if models.designer is not None else None
    executor = RequestPolicy(models.executor, budget, observer.completion if emit else None)
    engine = _engine(ctx, designer, executor, spec, observer, budget)
    seed = spec.seed if spec.seed is not None else secrets.randbelow(2**31)
    try:
        if ctx.frozen_design is not None:
            observer.designs_done([ctx.frozen_design])  # the fixed script is known before anything runs
        tree = engine.rollout(
            [spec.task],
            seed=seed,
            mode="serve",
            m_designs=spec.n_designs,
            n_executions=spec.n_executions,
            designer_sampling=spec.designer_sampling,
            executor_sampling=spec.executor_sampling,
            execute=spec.execute,
        )[0]
    except RequestError as e:
        raise bad_request(f"the model could not serve the designer request: {e}", code="model_rejected") from None
    except PolicyError as e:
        raise policy_failure(e, budget) from None
    except Exception as e:
        if isinstance(e, SandboxError):
            raise unavailable(f"the sandbox is unavailable: {e}", code="sandbox_unavailable") from None
        raise
    drop_missing_rewards(tree, spec.task)

    t_select = time.perf_counter()
    chosen, sel = select_answer(ctx, spec, tree, executor, seed) if spec.execute else (None, None)
    tree.timings["select_s"] = time.perf_counter() - t_select
    timings = dict(tree.timings, total_s=time.perf_counter() - t0)
    status, detail = outcome(spec, tree, chosen)
    return TeamResult(
        tree=tree,
        status=status,
        answer=chosen.answer if chosen else None,
        detail=detail,
        selection=sel,
        usage=usage_out(merge_usage(*(p.usage.snapshot() for p in (designer, executor) if p)), tree.designs),
        timings=timings,
        seed=seed,
    )


def raise_if_unanswerable(result: TeamResult, budget: RequestBudget) -> None:
    """After the team is recorded: nobody to answer (client gone), or no answer because time ran out (504)."""
    if budget.cancelled.is_set():
        raise ClientGone()
    if result.status == "no_answer" and budget.expired:
        raise ServeError(504, f"no answer within the request's time budget: {result.detail}", code="timeout")


#: how long past the request's deadline a reward may still arrive before it is given up (the code tests
#: stop at the deadline themselves; this covers reading their results back)
SCORE_GRACE_S = 1.0
#: RewardRecord.details["error_kind"] of a reward the request's time budget cut short
DEADLINE_ERROR = "request_deadline"


def score_within(deadline: float, score: Callable[[], RewardRecord]) -> RewardRecord:
    """``score()`` run under the request's ``deadline`` (a ``time.monotonic()`` time).

    Every code test it runs stops at the deadline (:func:`metaagent.execution.code.deadline`), and the call
    returns by ``deadline + SCORE_GRACE_S`` whatever the scorer does (a math check past it finishes in the
    background and is dropped). A reward not finished by the deadline is an error record
    (``error_kind = "request_deadline"``, counted in ``metaagent_serve_reward_errors_total``), never a 0: a
    test cut by the request's budget says nothing about the program.
    """
    box: list[RewardRecord] = []

    def run() -> None:
        with code_deadline(deadline):
            box.append(score())

    if deadline - time.monotonic() > 0:
        context = contextvars.copy_context()  # the scorer's threads see the deadline through this context
        worker = threading.Thread(target=context.run, args=(run,), name="metaagent-score", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()) + SCORE_GRACE_S)
    if box and time.monotonic() < deadline:
        return box[0]
    message = "the reward was not computed within the request's time budget (the server's --timeout)"
    return RewardRecord(None, None, None, error=message, details={"error_kind": DEADLINE_ERROR})


@dataclass
class DeadlineEngine(RolloutEngine):
    """The rollout engine of one served request: every reward is computed under the request's deadline
    (:func:`score_within`), so scoring a client's task cannot hold the request past ``--timeout``."""

    budget: RequestBudget | None = None

    def _score(self, task: Task, execution: Execution) -> RewardRecord:
        if self.budget is None:
            return super()._score(task, execution)
        return score_within(self.budget.deadline, lambda: RolloutEngine._score(self, task, execution))


def _engine(
    ctx: TeamContext,
    designer: RequestPolicy | None,
    executor: RequestPolicy,
    spec: TeamSpec,
    observer: RolloutObserver,
    budget: RequestBudget | None = None,
) -> RolloutEngine:
    c = ctx.config
    config = RolloutConfig(
        m_designs=spec.n_designs,
        n_executions=spec.n_executions,
        k_templates=c.k_templates,
        designer_prompt=c.designer_prompt,
        domain_hint=c.domain_hint,
        designer=c.designer_sampling,
        executor=c.executor_sampling,
        frozen_designer=c.frozen_designer,
        limits=c.limits(),
        budget={"low_max_calls": c.low_max_calls},
        sandbox_workers=c.sandbox_workers,
        max_inflight=spec.n_designs * spec.n_executions,
    )
    return DeadlineEngine(
        designer,
        executor,
        config=config,
        pool=ctx.pool,
        reward_config=ctx.reward_config,
        run_id=ctx.run_id,
        record_config=ctx.record_config,
        templates=ctx.templates,
        observer=observer,
        budget=budget,
        budget_tag=c.budget,
    )


def drop_missing_rewards(tree: RolloutTree, task: Task) -> None:
    """A served task without reference has no reward: the scorer's "no reference" record becomes None (it
    is not an error); rewards of tasks with a reference are kept, errors included."""
    if task.has_reference:
        return
    for _, execution in tree.executions():
        if is_no_reference(execution.reward):
            execution.reward = None
    fill_design_rewards(tree)


# ---- picking the answer ------------------------------------------------------------------------------------


def select_answer(
    ctx: TeamContext, spec: TeamSpec, tree: RolloutTree, executor: RequestPolicy, seed: int
) -> tuple[selection.Candidate | None, SelectionOut]:
    method = spec.select
    cands = selection.collect(tree.designs, spec.task.domain)
    out = SelectionOut(
        method=method,  # type: ignore[arg-type]
        design=None,
        execution=None,
        candidates=len(cands),
        votes=selection.tally(cands),
    )
    if not cands:
        out.note = "no execution ended ok with an answer"
        return None, out
    if method == "first":
        chosen = cands[0]
    elif method == "majority":
        chosen = selection.majority(cands)
    else:
        chosen = _judge(ctx, spec, cands, executor, seed, out)
    out.design, out.execution = chosen.design, chosen.execution
    return chosen, out


def _judge(
    ctx: TeamContext,
    spec: TeamSpec,
    cands: list[selection.Candidate],
    executor: RequestPolicy,
    seed: int,
    out: SelectionOut,
) -> selection.Candidate:
    """One executor call reads the distinct candidates and names one; majority decides if it cannot."""
    options = selection.distinct(cands)
    if len(options) == 1:
        out.note = "all candidates agree: no judge call was needed"
        return options[0]
    sampling = ctx.config.executor_sampling.params(seed=derive_seed(seed, "judge"))
    sampling = sampling.replace(temperature=0.0, max_tokens=ctx.config.judge_max_tokens)
    request = ChatRequest(selection.judge_messages(spec.task.question, options), sampling, role="judge")
    try:
        completion = executor.generate([request])[0]
    except PolicyError as e:
        out.note = f"the judge call failed ({e}); majority decided"
        return selection.majority(cands)
    choice = selection.parse_choice(completion.text, len(options))
    out.judge = JudgeOut(
        response=completion.text,
        choice=choice,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
    )
    if choice is None:
        out.note = f"the judge named no candidate number in 1..{len(options)}; majority decided"
        return selection.majority(cands)
    return options[choice - 1]


# ---- outcomes ----------------------------------------------------------------------------------------------


def outcome(spec: TeamSpec, tree: RolloutTree, chosen: selection.Candidate | None) -> tuple[str, str | None]:
    """``(status, detail)``: answered, designed (no execution asked), or no_answer with the reason."""
    if not spec.execute:
        return "designed", None
    if chosen is not None:
        return "answered", None
    if not any(d.valid for d in tree.designs):
        reasons = []
        for d in tree.designs:
            first = d.check.errors[0] if d.check.errors else None
            reasons.append(f"design {d.index}: {first}" if first else f"design {d.index}: invalid")
        return "no_answer", "no valid design: " + "; ".join(reasons)
    statuses: dict[str, int] = {}
    first_error = None
    for _, e in tree.executions():
        statuses[e.status] = statuses.get(e.status, 0) + 1
        if first_error is None and e.error is not None:
            first_error = f"{e.error.type}: {e.error.message}"
    summary = ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items()))
    detail = f"no execution produced an answer ({summary})"
    return "no_answer", detail + (f"; first error: {first_error}" if first_error else "")


def policy_failure(error: PolicyError, budget: RequestBudget) -> Exception:
    """What a failed designer call means for the client: gone, out of time (504), or backend down (503)."""
    if budget.cancelled.is_set():
        return ClientGone()
    if budget.expired:
        return ServeError(504, str(error), code="timeout")
    return unavailable(f"the model backend failed: {error}", code="backend_error")


def frozen_preview(frozen: FrozenDesign) -> Design:
    """The fixed design as the engine will build it, checked once at start-up (a bad script fails there)."""
    from metaagent.workflow import analyze_script, check_script

    if frozen.per_domain:
        raise ValueError(
            f"frozen designer {frozen.name!r} picks each task domain's own script (training and eval only); "
            "metaagent-serve needs one fixed script: name a template or a script file"
        )
    report = check_script(frozen.script)
    if not report.ok:
        errors = "; ".join(str(e) for e in report.errors)
        raise ValueError(f"the frozen design {frozen.name} does not pass the script checker: {errors}")
    return Design(index=0, source=f"frozen:{frozen.name}", sample=None, script=frozen.script, check=report,
                  structure=analyze_script(frozen.script))  # fmt: skip
