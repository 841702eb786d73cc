"""Request checks that need the server's configuration: caps, the served model name, tasks, sampling.

(Field types and ranges are checked by the pydantic models of :mod:`.protocol`; these are the rules that
depend on how the server was started.) Every refusal is a :class:`ServeError` naming the request field and
the server flag behind the limit.
"""

from __future__ import annotations

import hashlib

from metaagent.data.tasks import ADHOC, Task, TaskError
from metaagent.domain import guess_domain
from metaagent.policy.base import RequestError, SamplingParams
from metaagent.rollout.config import SamplingConfig

from .config import ServeConfig
from .errors import ServeError, bad_request, too_large
from .protocol import SamplingSpec, TaskSpec, TeamRequest
from .team import TeamSpec


class RequestValidator:
    """Checks requests against ``config``; ``frozen_name`` is the fixed design's name, if any."""

    def __init__(self, config: ServeConfig, frozen_name: str | None = None) -> None:
        self.config = config
        self.frozen_name = frozen_name

    def check_model(self, model: str) -> None:
        if model != self.config.served_model_name:
            raise ServeError(
                404,
                f"the model {model!r} does not exist here; this server serves {self.config.served_model_name!r} "
                "(see GET /v1/models)",
                code="model_not_found",
                param="model",
            )

    def check_text_length(self, text: str, param: str, what: str = "the task") -> None:
        limit = self.config.max_task_chars
        if len(text) > limit:
            raise too_large(
                f"{what} has {len(text)} characters; this server accepts at most {limit} (--max-task-chars)",
                param=param,
                code="task_too_long",
            )

    def make_task(self, task: str | TaskSpec, domain: str | None) -> Task:
        """A served task: ad hoc (no reference) or with the client's answer/tests.

        Its id is a digest of domain and question, not of the request: the engine derives every seed from
        it, so the same task and seed give the same team.
        """
        spec = task if isinstance(task, TaskSpec) else TaskSpec(question=task)
        question = spec.question
        self.check_text_length(question, "task")
        if not question.strip():
            raise bad_request("the task is empty; send the question as text", param="task", code="empty_task")
        domain = domain or guess_domain(question)
        digest = hashlib.blake2b(f"{domain}\n{question}".encode(), digest_size=8).hexdigest()
        task_id = f"serve-{digest}"
        try:
            if spec.answer is None and not spec.tests:  # no reference: an ad-hoc task, no correctness reward
                return Task(id=task_id, domain=domain, question=question, source="serve", split=ADHOC,
                            metadata=dict(spec.metadata))  # fmt: skip
            return Task(id=task_id, domain=domain, question=question, answer=spec.answer, tests=spec.tests,
                        source="serve", split="serve", metadata=dict(spec.metadata))  # fmt: skip
        except TaskError as e:
            raise ServeError(422, str(e), param="task", code="invalid_task") from None

    def check_counts(self, n_designs: int, n_executions: int, param_prefix: str = "") -> None:
        c = self.config
        if n_designs > c.max_designs:
            raise bad_request(
                f"n_designs={n_designs} is above this server's cap of {c.max_designs} (--max-designs)",
                param=param_prefix + "n_designs",
            )
        if self.frozen_name is not None and n_designs > 1:
            raise bad_request(
                f"this server runs the fixed design {self.frozen_name} (--frozen-designer), so there is one "
                "design per task; use n_executions for several runs",
                param=param_prefix + "n_designs",
            )
        if n_executions > c.max_executions:
            raise bad_request(
                f"n_executions={n_executions} is above this server's cap of {c.max_executions} (--max-executions)",
                param=param_prefix + "n_executions",
            )

    def sampling(self, role: str, spec: SamplingSpec | None, param: str = "") -> SamplingParams:
        """The server default of ``role`` with the request's overrides, within the server's caps. ``param``
        is where the overrides sit in the request body ("" for top-level fields)."""
        base: SamplingConfig = getattr(self.config, f"{role}_sampling")
        params = base.params()
        if spec is None:
            return params
        changes = {k: v for k, v in spec.model_dump().items() if v is not None}
        cap = self.config.max_tokens_cap
        if changes.get("max_tokens", 0) > cap:
            raise bad_request(
                f"max_tokens={changes['max_tokens']} is above this server's cap of {cap} (--max-tokens-cap)",
                param=f"{param}.max_tokens" if param else "max_tokens",
            )
        try:
            return params.replace(**changes)
        except RequestError as e:
            raise bad_request(str(e), param=param or None) from None

    def team_spec(self, req: TeamRequest) -> TeamSpec:
        """Validate a ``/v1/teams`` request."""
        self.check_counts(req.n_designs, req.n_executions)
        roles = req.sampling
        return TeamSpec(
            task=self.make_task(req.task, req.domain),
            n_designs=req.n_designs,
            n_executions=req.n_executions,
            execute=req.execute,
            select=req.select,
            designer_sampling=self.sampling("designer", roles.designer if roles else None, "sampling.designer"),
            executor_sampling=self.sampling("executor", roles.executor if roles else None, "sampling.executor"),
            seed=req.seed,
            return_trace=req.return_trace,
        )
