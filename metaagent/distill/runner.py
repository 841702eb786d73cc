"""The distillation loop (paper App. A): per task, designs -> sandboxed executions -> rewards -> kept examples.

    for each task not yet in the done-set (``tasks_in_flight`` at a time):
        teacher mode:   RolloutEngine(designer=teacher, executor=teacher).rollout([task])   M x N
        template mode:  M designs: the designer prompt as the engine builds it + a template variant as the
                        reply; each run N times by the local executor (the engine's fixed-design path)
        examples = tree_examples(tree)     correct executions only, unless keep_all
        store.commit(task, examples)       append + fsync, done line last (resumable)
        manifest.json rewritten            counts, acceptance rate, tokens spent

A task whose rollout raises (the teacher is unreachable, ...) is reported and not committed, so the next
invocation runs it again; after :data:`MAX_CONSECUTIVE_FAILURES` failures in a row the run stops.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from metaagent.data import load_tasks
from metaagent.data.tasks import Task
from metaagent.errors import MetaAgentError
from metaagent.policy.base import Policy
from metaagent.records import Design, DesignerSample, RolloutTree
from metaagent.rollout.engine import FrozenDesign, RolloutEngine
from metaagent.rollout.prompts import designer_messages, select_templates
from metaagent.seeding import derive_seed
from metaagent.workflow import load_templates

from .config import DistillConfig
from .examples import DESIGNER, EXECUTOR, tree_examples
from .manifest import ManifestWriter, RunTotals
from .store import ExampleStore
from .teacher import policy_tokens
from .variation import choose_variant, fenced

MAX_CONSECUTIVE_FAILURES = 3


class DistillError(MetaAgentError, RuntimeError):
    """The run cannot continue; the message says why and what to do."""


@dataclass
class TaskResult:
    """What one finished task contributed."""

    task_id: str
    domain: str
    summary: dict[str, Any]
    kept: dict[str, int]  # kept / duplicate examples per kind
    fresh: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)


class DistillObserver:
    """Progress hooks (the CLI's rich display implements them); called from the run's main thread."""

    def started(self, totals: RunTotals, pending: int) -> None: ...
    def task_done(self, result: TaskResult, totals: RunTotals) -> None: ...
    def task_failed(self, task_id: str, error: BaseException, totals: RunTotals) -> None: ...


@dataclass
class RunSummary:
    totals: RunTotals
    processed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped_done: int = 0
    interrupted: bool = False


def unique_tasks(tasks: Sequence[Task]) -> list[Task]:
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.id in seen:
            raise DistillError(
                f"task id {t.id!r} occurs twice in the data; the done-set is keyed by task id, so ids must be "
                "unique (deduplicate the dataset or give tasks distinct ids)"
            )
        seen[t.id] = t
    return list(seen.values())


class Distiller:
    """Runs distillation into ``config.out``.

    Args:
        config: the run.
        teacher: teacher policy (teacher mode); built from ``config.teacher`` when None.
        executor: local executor policy (template-only mode); built from ``config.executor_model`` when None.
        pool: a sandbox pool (``metaagent.workflow.SandboxPool``); created from the rollout config when None.
        templates: the template bank (default: ``metaagent.workflow.load_templates()``).
        count_tokens: ``text -> tokens`` for the template-only script budget (default: the executor's
            tokenizer when it has one, else characters / 3).
        observer: progress hooks.
    """

    def __init__(
        self,
        config: DistillConfig,
        *,
        teacher: Policy | None = None,
        executor: Policy | None = None,
        pool: Any = None,
        templates: Sequence | None = None,
        count_tokens: Callable[[str], int] | None = None,
        observer: DistillObserver | None = None,
    ) -> None:
        self.config = cfg = config
        self.templates = list(templates) if templates is not None else load_templates()
        self.observer = observer or DistillObserver()
        self._own_policy = False
        if cfg.template_only:
            if executor is None:
                from .teacher import build_local_executor

                executor, self._own_policy = build_local_executor(cfg), True
            self.policy, designer = executor, None
        else:
            if teacher is None:
                from .teacher import build_teacher

                teacher, self._own_policy = build_teacher(cfg.teacher), True
            self.policy, designer = teacher, teacher
        self.count_tokens = count_tokens or _default_counter(self.policy)
        self.store = ExampleStore(cfg.out, save_trees=cfg.save_trees)
        self.run_id = f"distill-{int(time.time())}"
        self.engine = RolloutEngine(
            designer if designer is not None else self.policy,
            self.policy,
            config=cfg.rollout,  # type: ignore[arg-type]
            pool=pool,
            run_id=self.run_id,
            record_config={"distill": cfg.describe()},
            templates=self.templates,
        )
        self.manifest = ManifestWriter(self.store, cfg, policy_id=self.policy.model_id)
        self._stop = threading.Event()
        self._designs = ThreadPoolExecutor(
            max_workers=max(1, cfg.tasks_in_flight * cfg.rollout.m_designs),  # type: ignore[union-attr]
            thread_name_prefix="distill-design",
        )

    # ---- public -------------------------------------------------------------------------------------------

    def load_tasks(self) -> list[Task]:
        tasks: list[Task] = []
        for spec in self.config.dataset_specs():
            tasks.extend(load_tasks(spec))
        if not tasks:
            raise DistillError(f"the data {self.config.data} (with the level/domain filters) holds no tasks")
        return tasks

    def run(self, tasks: Sequence[Task] | None = None) -> RunSummary:
        """Distil every task not yet done (at most ``max_tasks`` of them); safe to call again to resume."""
        tasks = unique_tasks(self.load_tasks() if tasks is None else [Task.coerce(t) for t in tasks])
        pending = [t for t in tasks if not self.store.is_done(t.id)]
        skipped = len(tasks) - len(pending)
        if self.config.max_tasks is not None:
            pending = pending[: self.config.max_tasks]
        totals = self.manifest.start(tasks_total=len(tasks), tokens_now=self._tokens)
        summary = RunSummary(totals=totals, skipped_done=skipped)
        self.observer.started(totals, len(pending))
        failures_in_row = 0
        queue = list(pending)
        running: dict[Future, Task] = {}
        ex = ThreadPoolExecutor(max_workers=self.config.tasks_in_flight, thread_name_prefix="distill-task")
        try:
            while queue or running:
                while queue and len(running) < self.config.tasks_in_flight and not self._stop.is_set():
                    task = queue.pop(0)
                    running[ex.submit(self._task_tree, task)] = task
                if not running:
                    break
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in finished:
                    task = running.pop(fut)
                    try:
                        result = self._commit(task, fut.result())
                    except Exception as e:  # noqa: BLE001 - one task's failure is reported, not fatal
                        failures_in_row += 1
                        summary.failed[task.id] = f"{type(e).__name__}: {e}"
                        totals.tasks_failed += 1
                        self.observer.task_failed(task.id, e, totals)
                        if failures_in_row >= MAX_CONSECUTIVE_FAILURES:
                            self._stop.set()
                            queue.clear()
                        continue
                    failures_in_row = 0
                    summary.processed.append(task.id)
                    self.manifest.task_done(result.fresh, tokens_now=self._tokens)
                    self.observer.task_done(result, totals)
        except BaseException:  # KeyboardInterrupt / SIGTERM: commit nothing more, do not wait for rollouts
            summary.interrupted = True
            self._stop.set()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        else:
            ex.shutdown(wait=True)
        finally:
            self.manifest.finish(failed=summary.failed, tokens_now=self._tokens)
        return summary

    def close(self) -> None:
        self._stop.set()
        self._designs.shutdown(wait=False, cancel_futures=True)
        self.engine.close()
        self.store.close()
        if self._own_policy:
            self.policy.close()

    def __enter__(self) -> Distiller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one task -----------------------------------------------------------------------------------------

    def _tokens(self) -> dict[str, int]:
        return policy_tokens(self.policy)

    def _task_tree(self, task: Task) -> RolloutTree:
        t0 = time.perf_counter()
        if self.config.template_only:
            tree = self._template_tree(task)
        else:
            tree = self.engine.rollout([task], seed=self.config.seed, mode="distill")[0]
        tree.timings["distill_s"] = time.perf_counter() - t0
        return tree

    def _fits(self, script: str) -> bool:
        return self.count_tokens(fenced(script)) <= self.config.script_token_budget

    def _template_design(self, task: Task, i: int) -> Design | None:
        """Design i of a task in template-only mode: prompt as the engine builds it, a template variant as the
        reply, executed N times through the engine's fixed-design path."""
        cfg, rollout = self.config, self.config.rollout
        s = derive_seed(cfg.seed, None, task.id, 0, i, "design")  # the engine's designer-stage derivation
        shown = select_templates(
            self.templates, task, rollout.k_templates, random.Random(s), rollout.template_selection
        )  # type: ignore[union-attr]
        style = rollout.designer_prompt if rollout.designer_prompt != "auto" else "full"  # type: ignore[union-attr]
        messages = designer_messages(
            task, shown if style == "full" else [], style=style, domain_hint=self.engine.domain_hint
        )
        rng = random.Random(derive_seed(cfg.seed, task.id, i, "variant"))
        variant = choose_variant(self.templates, task, rng, fits=self._fits, vary=cfg.vary)
        if variant is None:
            return None
        name = f"template:{variant.template}"
        tree = self.engine.rollout(
            [task],
            seed=derive_seed(cfg.seed, task.id, i, "execute"),
            mode="distill",
            frozen=FrozenDesign(name, variant.script),
        )[0]
        design = tree.designs[0]
        design.index, design.source = i, name
        design.sample = DesignerSample(
            messages=messages,
            text=fenced(variant.script),
            prompt_ids=[],
            response_ids=[],
            logprobs=None,
            finish_reason="stop",
            model=name,
            templates=[t.name for t in shown],
        )
        return design

    def _template_tree(self, task: Task) -> RolloutTree:
        m = self.config.rollout.m_designs  # type: ignore[union-attr]
        futures = [self._designs.submit(self._template_design, task, i) for i in range(m)]
        designs = [d for d in (f.result() for f in futures) if d is not None]
        if not designs:
            raise DistillError(
                f"no template for domain {task.domain!r} fits the designer budget of "
                f"{self.config.script_token_budget} tokens; raise --max-script-tokens"
            )
        return RolloutTree(
            run_id=self.run_id,
            task=task.to_dict(),
            seed=self.config.seed,
            config={"distill": self.config.describe()},
            models={"designer": "templates", "executor": self.policy.model_id},
            designs=designs,
            mode="distill",
        )

    def _commit(self, task: Task, tree: RolloutTree) -> TaskResult:
        if self._stop.is_set():  # interrupted while it ran: its executions may have been cut short
            raise DistillError("run stopped before this task was committed")
        source = "template" if self.config.template_only else "teacher"
        ex = tree_examples(tree, source=source, keep_all=self.config.keep_all)
        summary = {
            "domain": task.domain,
            "level": (task.metadata or {}).get("level"),
            "designs": ex.designs,
            "valid_designs": ex.valid_designs,
            "accepted_designs": ex.accepted_designs,
            "executions": ex.executions,
            "scored": ex.scored,
            "correct": ex.correct,
            "unscored": ex.unscored,
            "templates_shown": sorted({n for d in tree.designs if d.sample for n in d.sample.templates}),
            "templates_used": [
                d.source.split(":", 1)[1] for d in tree.designs if d.source.startswith("template:")
            ],
            "structures": [(d.structure or {}).get("structure", "invalid") for d in tree.designs],
            "elapsed_s": round(tree.timings.get("distill_s", 0.0), 3),
            "finished_at": time.time(),
        }
        commit = self.store.commit(
            task.id,
            {DESIGNER: ex.designer, EXECUTOR: ex.executor},
            summary,
            tree.to_json() if self.config.save_trees else None,
        )
        return TaskResult(task.id, task.domain, summary, commit.counts, commit.fresh)


def _default_counter(policy: Any) -> Callable[[str], int]:
    tokenizer = getattr(policy, "tokenizer", None) or getattr(
        getattr(policy, "backend", None), "tokenizer", None
    )
    if tokenizer is not None:
        return lambda text: len(tokenizer.encode(text, add_special_tokens=False)) + 1  # + end of turn
    return lambda text: len(text) // 3 + 1
