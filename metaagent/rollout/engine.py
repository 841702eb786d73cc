"""The hierarchical rollout engine (paper §3.1–3.2): per task, M designs × N executions.

    tasks ─► designer stage: B·M designer prompts generated together
          ─► extract + check + analyse each design (invalid designs are kept, reward 0, no executions)
          ─► executor stage: B·M·N sandboxed executions in flight at once; their agent calls meet in the
             policy layer's batcher, so the backend sees few, large batches
          ─► reward of each execution as soon as it ends (overlaps with other executions)
          ─► one RolloutTree per task

Training rollouts (``mode="train"``, no adaptive budget) with a continuous-batching designer policy
(``Policy.continuous``: ``policy.continuous``) overlap the two stages: each designer prompt is its own call,
and a design's N executions start as soon as that design is generated and checked, so the remaining designs
and the first agent calls decode in one batch. Other rollouts run the stages one after the other.

Two options credit one agent at a design's budget: ``controls`` (``algo.designer_baseline: control``) runs, after a training tree's
executions, its budget-matched single-agent control (:meth:`RolloutEngine.run_controls`, recorded in
``RolloutTree.control``, never trained on); the budget tag (``rollout.budget``, or ``budget_tag`` for every
tree) goes into each designer prompt and caps the agent calls of every execution under ``LOW``
(:mod:`metaagent.rollout.budget`).

The engine never trains and never decides who is trained: it produces records. Every random choice is
derived from (seed, step, task, design, execution), so a rollout is reproducible from its record.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaagent.credit import fill_design_rewards
from metaagent.data.tasks import Task
from metaagent.domain import domain_tool_names, get_domain
from metaagent.policy.base import ChatRequest, Completion, Policy, PolicyError, SamplingParams, team_affinity
from metaagent.records import (
    DESIGNER,
    EXECUTOR,
    CheckReport,
    Control,
    Design,
    DesignerSample,
    Diagnostic,
    Execution,
    RewardRecord,
    RolloutTree,
    ScriptError,
)
from metaagent.resources import fixed_workflow_dir
from metaagent.rewards import RewardConfig, score_execution
from metaagent.rewards.selection import selection_marks
from metaagent.rollout.branching import make_brancher
from metaagent.rollout.budget import capped_limits, check_tag, sample_tag
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.prompts import (
    designer_messages,
    resolve_designer_prompt,
    resolve_domain_hint,
    select_templates,
)
from metaagent.rollout.ray_pool import RaySandboxPool
from metaagent.seeding import derive_seed
from metaagent.workflow import SandboxPool, load_templates, rules
from metaagent.workflow.tools import default_tools


#: the frozen-designer spec whose design is each task domain's single-agent script (``Domain.solo_script``)
SOLO_DESIGN = "sa"
#: ``Design.index`` of the control's script while it runs (it is no design of the tree)
CONTROL_DESIGN = -1


@dataclass
class FrozenDesign:
    """A fixed multi-agent system: the script every design of a task is replaced by. With ``per_domain`` the
    script is the task domain's single-agent baseline (``Domain.solo_script``, eval's ``sa``), so one frozen
    designer serves a math + code mixture (the ``sa+grpo`` recipe: ``rollout.frozen_designer: sa``)."""

    name: str
    script: str
    per_domain: bool = False

    def script_for(self, domain: str) -> str:
        """The script a task of ``domain`` runs: ``script``, or the domain's ``solo_script``
        (``per_domain``)."""
        if not self.per_domain:
            return self.script

        solo = get_domain(domain).solo_script
        if solo is None:
            raise ValueError(
                f"domain {domain!r} has no single-agent script (Domain.solo_script); "
                f"frozen designer {SOLO_DESIGN!r} cannot run its tasks"
            )
        return solo

    @classmethod
    def resolve(cls, spec: str, templates: Sequence | None = None) -> FrozenDesign:
        """A template name from the bank, a fixed workflow (``templates/fixed/``: the
        seed systems' workflows, never shown to the designer), a path to a script file, or :data:`SOLO_DESIGN`
        (``sa``: each task domain's single-agent baseline script)."""
        if spec == SOLO_DESIGN:
            return cls(name=SOLO_DESIGN, script="", per_domain=True)
        path = Path(spec)
        if path.suffix == ".py" and path.is_file():
            return cls(name=f"file:{path}", script=path.read_text())

        bank = {t.name: t for t in (templates if templates is not None else load_templates())}
        fixed = {t.name: t for t in load_templates(fixed_workflow_dir())}
        bank = {**fixed, **bank}
        if spec in bank:
            return cls(name=f"template:{spec}", script=bank[spec].source)
        raise ValueError(
            f"frozen designer {spec!r} is neither a script file nor a template; "
            f"templates: {', '.join(sorted(bank))}"
        )


class RolloutObserver:
    """Progress hooks; the CLI's rich display implements them. All methods are called from many threads."""

    def designs_started(self, n: int) -> None: ...
    def designs_done(self, designs: Sequence[Design]) -> None: ...
    def executions_started(self, n: int) -> None: ...
    def execution_done(self, execution: Execution) -> None: ...


@dataclass
class _Job:
    tree_idx: int
    design: Design
    task: Task
    exec_idx: int
    seed: int
    branch: bool = False  # tree sampling (training rollouts only)
    step: int | None = None
    budget: str | None = None  # the tree's budget tag: LOW caps the execution's agent calls


@dataclass
class RolloutEngine:
    """Produces :class:`RolloutTree` records for batches of tasks.

    Args:
        designer: policy that writes workflow scripts (ignored in fixed-MAS mode).
        executor: policy every agent call of every script goes to (a batching policy in practice).
        config: M, N, sampling per role, limits, concurrency.
        pool: a ``metaagent.workflow.SandboxPool``; created from ``config`` when None.
        reward_config: ``metaagent.rewards.RewardConfig``; default when None.
        run_id / record_config: stored in every tree so replay needs nothing else.
        templates: the template bank (default: ``metaagent.workflow.load_templates()``).
        controls: run each training tree's budget-matched single-agent control (:meth:`run_controls`;
            ``algo.designer_baseline: control``).
        budget_tag: the budget tag (``LOW`` / ``HIGH``) of every tree, whatever the mode (``metaagent-eval
            --budget``, ``metaagent-serve --budget``); None: training rollouts draw one per question from
            ``config.budget`` (when its tags are on), other rollouts show none.
    """

    designer: Policy | None
    executor: Policy
    config: RolloutConfig = field(default_factory=RolloutConfig)
    pool: Any = None
    reward_config: Any = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    record_config: Mapping[str, Any] = field(default_factory=dict)
    templates: Sequence | None = None
    observer: RolloutObserver = field(default_factory=RolloutObserver)
    tools_factory: Callable[[Task], Mapping[str, Callable[..., str]]] | None = None
    # per-turn rewards written after each training execution, in its thread (overlapping the other executions),
    # e.g. MAPPA's coach (metaagent.rewards.coach.Coach.score_execution); must not raise for its own failures
    turn_scorer: Callable[[Task, Execution], None] | None = None
    controls: bool = False
    budget_tag: str | None = None

    def __post_init__(self) -> None:
        check_tag(self.budget_tag)

        if self.templates is None:
            self.templates = load_templates()
        if self.reward_config is None:
            self.reward_config = RewardConfig()
        self._own_pool = self.pool is None
        if self.pool is None:
            self.pool = make_pool(self.config, self.reward_config)
        if self.tools_factory is None:
            self.tools_factory = default_tools
        self.frozen = (
            FrozenDesign.resolve(self.config.frozen_designer, self.templates) if self.config.frozen_designer else None
        )
        if self.frozen is None and self.designer is None:
            raise ValueError("a designer policy is required unless rollout.frozen_designer is set")
        #: "full" or "compact": the designer prompt style, "auto" resolved from the designer's model folder
        self.designer_prompt = resolve_designer_prompt(self.config.designer_prompt, self.designer)
        #: whether the designer prompt shows the task's domain ("auto" resolved as the style is)
        self.domain_hint = resolve_domain_hint(self.config.domain_hint, self.designer)

    # ---- public -------------------------------------------------------------------------------------------

    def models(self, frozen: FrozenDesign | None = None) -> dict[str, str]:
        frozen = frozen or self.frozen
        models = {EXECUTOR: self.executor.model_id}
        models[DESIGNER] = frozen.name if frozen else self.designer.model_id  # type: ignore[union-attr]
        return models

    def rollout(
        self,
        tasks: Sequence[Task | Mapping[str, Any]],
        *,
        step: int | None = None,
        seed: int = 0,
        mode: str = "train",
        m_designs: int | None = None,
        n_executions: int | None = None,
        designer_sampling: SamplingParams | None = None,
        executor_sampling: SamplingParams | None = None,
        frozen: FrozenDesign | None = None,
        execute: bool = True,
    ) -> list[RolloutTree]:
        """Run M designs × N executions for each task and return one tree per task (input order).

        ``execute=False`` stops after the designer stage (designs checked and analysed, no executions).
        """
        tasks = [Task.coerce(t) for t in tasks]
        if not tasks:
            return []
        frozen = frozen or self.frozen
        m = 1 if frozen else (m_designs or self.config.m_designs)
        n = n_executions or self.config.n_executions
        t0 = time.perf_counter()
        tags = self.budget_tags(tasks, step=step, seed=seed, mode=mode)
        controls = self.controls and execute and mode == "train" and not frozen

        overlap = self.designer is not None and self.designer.continuous and not self.config.adaptive_budget.enabled
        if not frozen and execute and mode == "train" and overlap:
            trees = self._rollout_overlapped(tasks, m, n, step, seed, designer_sampling, executor_sampling, t0, tags)
            if controls:
                self.run_controls(trees, step=step, seed=seed, executor_sampling=executor_sampling)
            for tree in trees:
                fill_design_rewards(tree)
                tree.timings["total_s"] = time.perf_counter() - t0
            return trees
        if frozen:
            designs = [[self._frozen_design(frozen, task.domain)] for task in tasks]
        else:
            designs = self._design(tasks, m, step, seed, designer_sampling, tags)
        t_design = time.perf_counter() - t0

        trees = [
            RolloutTree(
                run_id=self.run_id,
                task=task.to_dict(),
                seed=seed,
                config=dict(self.record_config),
                models=self.models(frozen),
                designs=ds,
                step=step,
                mode="fixed" if frozen and mode == "train" else mode,
                timings={"design_s": t_design},
                budget=tag,
            )
            for task, ds, tag in zip(tasks, designs, tags)
        ]
        if execute:
            self.execute(trees, step=step, seed=seed, mode=mode, n_executions=n, executor_sampling=executor_sampling)
        if controls:
            self.run_controls(trees, step=step, seed=seed, executor_sampling=executor_sampling)
        for tree in trees:
            fill_design_rewards(tree)
            tree.timings["total_s"] = time.perf_counter() - t0
        return trees

    def execute(
        self,
        trees: list[RolloutTree],
        *,
        step: int | None = None,
        seed: int = 0,
        mode: str = "train",
        n_executions: int | None = None,
        executor_sampling: SamplingParams | None = None,
    ) -> None:
        """The executor stage of :meth:`rollout` on trees made with ``execute=False`` (same ``step`` and
        ``seed``): executions are appended to their designs and design rewards filled in. Lets one designer
        stage be executed under two settings (``benchmarks/adaptive_budget.py``)."""
        tasks = [Task.coerce(t.task) for t in trees]
        n = n_executions or self.config.n_executions
        train = mode == "train"
        self._execute(trees, tasks, n, step, seed, executor_sampling, score_turns=train, branch=train)
        for tree in trees:
            fill_design_rewards(tree)

    def budget_tags(self, tasks: Sequence[Task], *, step: int | None, seed: int, mode: str) -> list[str | None]:
        """Each task's budget tag: ``budget_tag`` for every task when set; else, in a training rollout, drawn
        from ``config.budget`` per question (:func:`metaagent.rollout.budget.sample_tag`); else None."""
        if self.budget_tag is not None:
            return [self.budget_tag] * len(tasks)
        if mode != "train":
            return [None] * len(tasks)
        return [sample_tag(self.config.budget, seed, step, task.id, b) for b, task in enumerate(tasks)]

    def run_controls(
        self,
        trees: list[RolloutTree],
        *,
        step: int | None = None,
        seed: int = 0,
        executor_sampling: SamplingParams | None = None,
    ) -> None:
        """The budget-matched single-agent control of every tree (:mod:`metaagent.credit.control`),
        run after its designs' executions and written to ``tree.control``.

        A tree whose designs need the budgets ``k_i`` (agent calls per execution, mean rounded up, at least 1)
        gets ``K = max_i k_i`` executions of its domain's single-agent script (eval's ``sa``), seeded by
        ``derive_seed(seed, step, task, position, "control", j)``, under the tree's budget tag, scored like
        every execution, and marked for the selection rule (vote keys, or public-test verdicts for code:
        :func:`metaagent.rewards.selection.selection_marks`). One run serves every budget: the control at ``k``
        is the choice among its first ``k`` executions. Every turn is marked ``synthetic`` (never trained)."""
        from metaagent.credit.control import control_size

        t0 = time.perf_counter()
        solo = FrozenDesign.resolve(SOLO_DESIGN)
        holders: list[tuple[RolloutTree, Task, Design]] = []
        jobs: list[_Job] = []
        for t, tree in enumerate(trees):
            task = Task.coerce(tree.task)
            try:
                holder = self._frozen_design(solo, task.domain)
            except ValueError as e:
                raise ValueError(
                    f"algo.designer_baseline=control runs one agent per task, but {e}; train this domain with "
                    "algo.designer_baseline=group"
                ) from None
            holder.index, holder.source = CONTROL_DESIGN, "control:sa"
            for j in range(control_size(tree.designs)):
                s = derive_seed(seed, step, task.id, t, "control", j)
                jobs.append(_Job(t, holder, task, j, s, step=step, budget=tree.budget))
            holders.append((tree, task, holder))
        _WaveRunner(self, trees, executor_sampling, score_turns=False)(jobs)
        elapsed = time.perf_counter() - t0
        for tree, task, holder in holders:
            executions = sorted(holder.executions, key=lambda e: e.index)
            for e in executions:
                for turn in e.turns:
                    turn.synthetic = True  # recorded and replayable, never a training sample
            rule, marks = selection_marks(task, [e.answer for e in executions])
            tree.control = Control(
                script=str(holder.script), select=rule, marks=marks, executions=executions, source=holder.source
            )
            tree.timings["control_s"] = elapsed

    def close(self) -> None:
        if self._own_pool and self.pool is not None:
            self.pool.close()

    def __enter__(self) -> RolloutEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- designer stage -----------------------------------------------------------------------------------

    def _designer_requests(
        self,
        tasks: list[Task],
        m: int,
        step: int | None,
        seed: int,
        sampling: SamplingParams | None,
        tags: Sequence[str | None] | None = None,
    ) -> tuple[list[ChatRequest], list[list[str]]]:
        """The B·M designer requests (task-major), each with its task's budget tag, and the template names each
        one shows."""
        cfg = self.config
        requests, shown = [], []
        style = self.designer_prompt
        for b, task in enumerate(tasks):
            for i in range(m):
                s = derive_seed(seed, step, task.id, b, i, "design")
                examples = select_templates(
                    self.templates, task, cfg.k_templates if style == "full" else 0, random.Random(s),
                    cfg.template_selection,
                )
                params = (sampling or cfg.designer.params()).replace(seed=s)
                messages = designer_messages(
                    task, examples, style=style, domain_hint=self.domain_hint, budget=tags[b] if tags else None
                )
                requests.append(ChatRequest(messages, params, role=DESIGNER, affinity=team_affinity(step, b)))
                shown.append([t.name for t in examples])
        return requests, shown

    def _design_from(self, index: int, req: ChatRequest, c: Completion, shown: list[str], elapsed: float) -> Design:
        sample = DesignerSample(
            messages=req.messages,
            text=c.text,
            prompt_ids=c.prompt_ids,
            response_ids=c.response_ids,
            logprobs=c.logprobs,
            finish_reason=c.finish_reason,
            model=c.model,
            templates=shown,
            elapsed_s=elapsed,
            temperature=req.sampling.temperature,
        )
        return self._checked_design(index, DESIGNER, sample, c.text)

    def _design(
        self,
        tasks: list[Task],
        m: int,
        step: int | None,
        seed: int,
        sampling: SamplingParams | None,
        tags: Sequence[str | None] | None = None,
    ) -> list[list[Design]]:
        requests, shown = self._designer_requests(tasks, m, step, seed, sampling, tags)
        self.observer.designs_started(len(requests))
        t0 = time.perf_counter()
        completions = self.designer.generate(requests)  # type: ignore[union-attr]
        elapsed = time.perf_counter() - t0
        out = [
            [self._design_from(i, requests[b * m + i], completions[b * m + i], shown[b * m + i], elapsed) for i in range(m)]
            for b in range(len(tasks))
        ]
        self.observer.designs_done([d for row in out for d in row])
        return out

    def _rollout_overlapped(
        self,
        tasks: list[Task],
        m: int,
        n: int,
        step: int | None,
        seed: int,
        designer_sampling: SamplingParams | None,
        executor_sampling: SamplingParams | None,
        t0: float,
        tags: Sequence[str | None],
    ) -> list[RolloutTree]:
        """A training rollout whose executor stage starts design by design (module docstring): the same
        requests, seeds and records as the staged rollout; only when each execution starts differs."""
        requests, shown = self._designer_requests(tasks, m, step, seed, designer_sampling, tags)
        trees = [
            RolloutTree(
                run_id=self.run_id, task=task.to_dict(), seed=seed, config=dict(self.record_config),
                models=self.models(None), designs=[], step=step, mode="train", budget=tag,
            )  # fmt: skip
            for task, tag in zip(tasks, tags)
        ]
        slots: list[list[Design | None]] = [[None] * m for _ in tasks]
        run = _WaveRunner(self, trees, executor_sampling, score_turns=True)
        self.observer.designs_started(len(requests))
        lock = threading.Lock()
        finished_at: list[float] = []

        with ThreadPoolExecutor(self.config.max_inflight, thread_name_prefix="rollout") as executions:
            pending: list[Any] = []

            def design(k: int) -> None:
                b, i = divmod(k, m)
                c = self.designer.generate([requests[k]])[0]  # type: ignore[union-attr]
                d = self._design_from(i, requests[k], c, shown[k], time.perf_counter() - t0)
                with lock:
                    slots[b][i] = d
                    finished_at.append(time.perf_counter() - t0)
                if d.valid:
                    self.observer.executions_started(n)
                    for j in range(n):
                        s = derive_seed(seed, step, tasks[b].id, b, d.index, j, "execute")
                        job = _Job(b, d, tasks[b], j, s, branch=True, step=step, budget=trees[b].budget)
                        with lock:
                            pending.append(executions.submit(run.run_job, job))

            with ThreadPoolExecutor(len(requests), thread_name_prefix="design") as designers:
                for f in [designers.submit(design, k) for k in range(len(requests))]:
                    f.result()
            for tree, row in zip(trees, slots):
                tree.designs = list(row)  # type: ignore[arg-type]
                tree.timings["design_s"] = max(finished_at)
            self.observer.designs_done([d for row in slots for d in row])  # type: ignore[misc]
            for f in list(pending):
                f.result()  # run_job never raises for a job's own failures
        run.finish()
        return trees

    def _checked_design(
        self, index: int, source: str, sample: DesignerSample | None, text: str, tool_names: tuple[str, ...] | None = None
    ) -> Design:
        from metaagent.workflow import analyze_script, check_script, extract_script

        script = extract_script(text)
        if script is None:
            report = CheckReport(
                ok=False,
                errors=[Diagnostic(1, 0, "E-NO-SCRIPT", "no Python script found: reply with one ```python block")],
            )
            return Design(index=index, source=source, sample=sample, script=None, check=report, reward=0.0)
        report = check_script(script) if tool_names is None else check_script(script, tool_names=tool_names)
        structure = analyze_script(script) if report.ok else None
        return Design(index=index, source=source, sample=sample, script=script, check=report, structure=structure)

    def _frozen_design(self, frozen: FrozenDesign, domain: str) -> Design:
        tools = rules.DEFAULT_TOOL_NAMES + domain_tool_names()
        script = frozen.script_for(domain)
        design = self._checked_design(0, f"frozen:{frozen.name}", None, f"```python\n{script}\n```", tools)
        if not design.valid:
            errors = "; ".join(str(e) for e in design.check.errors)
            raise ValueError(f"frozen design {frozen.name} does not pass the checker: {errors}")
        return design

    # ---- executor stage -----------------------------------------------------------------------------------

    def _execute(
        self,
        trees: list[RolloutTree],
        tasks: list[Task],
        n: int,
        step: int | None,
        seed: int,
        sampling: SamplingParams | None,
        score_turns: bool = True,
        branch: bool = False,
    ) -> None:
        """N executions of every valid design; with ``rollout.adaptive_budget`` on a training rollout
        (``branch``), in waves that move the budget to designs whose rewards disagree
        (:mod:`metaagent.rollout.adaptive`)."""

        def job(t: int, d: Design, j: int) -> _Job:
            s = derive_seed(seed, step, tasks[t].id, t, d.index, j, "execute")
            return _Job(t, d, tasks[t], j, s, branch=branch, step=step, budget=trees[t].budget)

        valid = [(t, d) for t, tree in enumerate(trees) for d in tree.designs if d.valid]
        ab = self.config.adaptive_budget
        run = _WaveRunner(self, trees, sampling, score_turns)
        if not (branch and ab.enabled and ab.first_n < n):
            run([job(t, d, j) for t, d in valid for j in range(n)])
        else:
            from metaagent.rollout.adaptive import allot, is_open

            budget = n * len(valid) - ab.first_n * len(valid)
            run([job(t, d, j) for t, d in valid for j in range(ab.first_n)])
            while budget > 0:
                counts = [len(d.executions) for _, d in valid]
                extra = allot(counts, [is_open(trees[t], d.index) for t, d in valid], budget, ab.cap(n))
                if not any(extra):
                    break
                budget -= sum(extra)
                run([job(t, d, c + k) for (t, d), c, e in zip(valid, counts, extra) for k in range(e)])
        run.finish()

    def _run_one(self, job: _Job, params: SamplingParams) -> Execution:
        """One sandboxed execution. A failure of the host side (policy down) is recorded, not raised."""
        tools = self.tools_factory(job.task)
        extra = {}
        if job.branch and self.config.branching.active:
            prefix = f"{job.tree_idx}:{job.task.id}/d{job.design.index}/e{job.exec_idx}"
            extra["branching"] = make_brancher(self.config.branching, job.task.to_dict(), prefix, tools)
        try:
            execution = self.pool.run(
                job.design.script,
                job.task,
                _TeamPolicy(self.executor, step=job.step, task=job.tree_idx, design=job.design.index),
                capped_limits(self.config.limits, job.budget, self.config.budget.low_max_calls),
                sampling=params,
                tools=tools,
                seed=job.seed,
                **extra,
            )
        except PolicyError as e:
            execution = Execution(
                index=job.exec_idx,
                status="error",
                error=ScriptError(type=type(e).__name__, message=f"agent call failed on the host: {e}"),
                seed=job.seed,
            )
            execution.reward = RewardRecord(None, None, None, error=f"not scored: execution failed on the host ({e})")
            return execution
        execution.index = job.exec_idx
        execution.seed = job.seed
        return execution

    def _score(self, task: Task, execution: Execution) -> RewardRecord:
        if execution.reward is not None:  # scored where it ran (Ray actors), or a host failure marked unscorable
            return execution.reward

        try:
            return score_execution(task, execution, self.reward_config)
        except Exception as e:  # a scorer bug must not be a silent 0: record it as an unscored execution
            return RewardRecord(None, None, None, error=f"reward could not be computed: {type(e).__name__}: {e}")


class _WaveRunner:
    """Runs waves of execution jobs of one rollout call (in parallel within a wave) and keeps the trees'
    timings over all waves."""

    def __init__(self, engine: RolloutEngine, trees: list[RolloutTree], sampling: SamplingParams | None, score_turns: bool):
        self.engine, self.trees = engine, trees
        self.params = sampling or engine.config.executor.params()
        self.scorer = engine.turn_scorer if score_turns else None
        self.lock = threading.Lock()
        self.reward_s = [0.0] * len(trees)
        self.judge_s = [0.0] * len(trees)
        self.spans: list[list[float]] = [[float("inf"), 0.0] for _ in trees]

    def __call__(self, jobs: list[_Job]) -> None:
        """One wave: run ``jobs`` (at most ``rollout.max_inflight`` at once) and wait for all of them."""
        self.engine.observer.executions_started(len(jobs))
        if not jobs:
            return
        workers = min(len(jobs), self.engine.config.max_inflight)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout") as ex:
            for f in [ex.submit(self.run_job, job) for job in jobs]:
                f.result()  # _run_one and _score never raise for a job's own failures
        self._sort()

    def run_job(self, job: _Job) -> None:
        """One execution, its reward and turn scores, recorded into its design."""
        engine = self.engine
        start = time.perf_counter()
        execution = engine._run_one(job, self.params)
        t_reward = time.perf_counter()
        execution.reward = engine._score(job.task, execution)
        t_judge = time.perf_counter()
        if self.scorer is not None:
            self.scorer(job.task, execution)
        end = time.perf_counter()
        with self.lock:
            job.design.executions.append(execution)
            self.reward_s[job.tree_idx] += t_judge - t_reward
            self.judge_s[job.tree_idx] += end - t_judge
            span = self.spans[job.tree_idx]
            span[0], span[1] = min(span[0], start), max(span[1], end)
        engine.observer.execution_done(execution)

    def _sort(self) -> None:
        for tree in self.trees:
            for d in tree.designs:
                d.executions.sort(key=lambda e: e.index)

    def finish(self) -> None:
        self._sort()
        for t, tree in enumerate(self.trees):
            span = self.spans[t]
            tree.timings["execute_s"] = max(0.0, span[1] - span[0]) if span[1] else 0.0
            tree.timings["reward_s"] = self.reward_s[t]
            if self.scorer is not None:
                tree.timings["judge_s"] = self.judge_s[t]


class _TeamPolicy(Policy):
    """The executor policy as one execution sees it: every agent call carries the affinity key of its
    (step, task, design, agent), so a multi-server backend keeps a design's calls of an agent on one server."""

    def __init__(self, policy: Policy, *, step: int | None, task: int, design: int) -> None:
        super().__init__()
        self.policy, self.step, self.task, self.design = policy, step, task, design
        self.model_id = policy.model_id

    @property
    def provides_logprobs(self) -> bool:  # type: ignore[override]
        return self.policy.provides_logprobs

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        tagged = [
            r if r.affinity else dataclasses.replace(r, affinity=team_affinity(self.step, self.task, self.design, r.agent))
            for r in requests
        ]
        return self.policy.generate(tagged)


def make_pool(config: RolloutConfig, reward_config: Any = None):
    """The sandbox pool for a config: local worker processes, or Ray actors when ``ray_address`` is set
    (then tools and rewards run on the actors too: code tests execute where the script ran)."""
    if config.ray_address:
        return RaySandboxPool(
            address=config.ray_address, workers=config.workers(), reward_config=reward_config,
            placement=config.ray_placement, resource=config.ray_resource,
        )  # fmt: skip
    return SandboxPool(workers=config.workers())
