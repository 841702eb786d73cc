"""One evaluation run: model cells x benchmarks x methods, records on disk, resumable, then the results.

Layout of a results directory (``--out``)::

    OUT/rollouts/<cell>/<benchmark>/<method>.jsonl   one RolloutTree per task (mode "eval"), appended as
                                                    each task finishes: a killed run keeps them
                                                    (or .jsonl.xz / .jsonl.gz: committed, compressed
                                                    records; read the same, plain again on append)
    OUT/run.json                                    run id, seed, models, versions (read by the replay tool)
    OUT/results.json                                every number, the config, models, seeds, versions
    OUT/table.md                                    Table 1 layout: methods x benchmarks + average
    OUT/report.html                                 self-contained report with plots

``<cell>`` is ``d=<designer>__e=<executor>`` for ``auto`` and ``e=<executor>`` for ``sa`` / ``fixed:``
(those never call the designer, so cells sharing an executor share their records). A run with an
``OUT`` that holds records of the same settings (:data:`~metaagent.eval.config.IDENTITY_FIELDS`) skips
the tasks already recorded; another limit, more methods, benchmarks or models simply add records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata as md
import json
import logging
import math
import platform
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from metaagent import __version__
from metaagent.data.tasks import Task
from metaagent.domain import use_rewards
from metaagent.execution.isolation import ExecutionConfig, for_config
from metaagent.learn.checkpoint import checkpoint_model
from metaagent.policy.base import Policy
from metaagent.policy.cold_start import model_revision
from metaagent.policy.factory import batcher_options, build_policy
from metaagent.policy.registry import PolicyRegistry, RoutingPolicy
from metaagent.records import (
    RECORD_SUFFIX,
    SCHEMA_VERSION,
    RolloutTree,
    TreeWriter,
    read_record_lines,
    read_trees,
    record_file,
    write_record_lines,
)
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import RolloutEngine, make_pool
from metaagent.seeding import derive_seed
from metaagent.workflow import load_templates
from metaagent.workflow.protocol import DELIVERY_CLOSE

from .analysis import design_stats, paired_comparison
from .benchmarks import Benchmark, benchmark_tasks, parse_benchmark
from .config import EvalConfig
from .errors import EvalError
from .methods import BEST, SA, Method, parse_method, rollout_task
from .scoring import TaskScore, check_budgets, score_task, summarize

log = logging.getLogger(__name__)

ROLLOUTS_DIR = "rollouts"
RESULTS_FILE = "results.json"
RUN_FILE = "run.json"
TABLE_FILE = "table.md"
REPORT_FILE = "report.html"
PROBE_TIMEOUT_S = 5.0
CARVE = "~"  # --selection-split <split>~<N>: a seeded carve-out of N tasks of that split
#: least seconds between two rewrites of results.json and the tables during a run (and at its end): scoring
#: every record with its bootstrap CIs takes seconds on a whole held-out set and holds the interpreter lock
#: the decode thread needs, so rewriting it every few tasks slowed the run; records are appended per task
RESULTS_EVERY_S = 120.0


class EvalObserver:
    """Progress hooks (the CLI's rich bar implements them); called from many threads."""

    def start(self, total: int, done: int) -> None: ...
    def part(self, label: str, todo: int) -> None: ...
    def task_done(self, tree: RolloutTree) -> None: ...
    def finish(self) -> None: ...


#: longest folder-name part made from a model path or name; a longer one keeps its tail and a hash of the whole
#: (a checkpoint path can exceed the file system's 255 bytes a name once designer and executor are both in it)
MAX_NAME_PART = 96


def _safe(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._+=-]+", "_", name).strip("_") or "_"
    if len(safe) <= MAX_NAME_PART:
        return safe
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return f"{digest}_{safe[-(MAX_NAME_PART - len(digest) - 1):]}"


def cell_label(designer: str, executor: str) -> str:
    return designer if designer == executor else f"{designer} -> {executor}"


def record_path(out: Path, method: Method, designer: str, executor: str, bench: str) -> Path:
    """The record file of a (cell, benchmark, method): ``<method>.jsonl``, or its compressed form where only
    that exists (committed results)."""
    cell = f"d={_safe(designer)}__e={_safe(executor)}" if method.uses_designer else f"e={_safe(executor)}"
    return record_file(out / ROLLOUTS_DIR / cell / _safe(bench) / f"{_safe(method.name)}{RECORD_SUFFIX}")


def probe_endpoint(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast (before any work) when an OpenAI-compatible endpoint does not answer ``GET /models``."""
    url = base_url.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            r.read(1)
    except urllib.error.HTTPError as e:  # it answers (the key and the routes are checked by the first request)
        log.warning("endpoint %s answered GET /models with HTTP %s", base_url, e.code)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise EvalError(
            f"endpoint {base_url} is unreachable ({reason}); start the server or fix --base-url"
        ) from None


@dataclass
class Part:
    """One (cell, benchmark, method) of the run: its tasks and record file. ``label`` is the method's name in
    the results when it differs from the method run (``sa@auto`` runs ``sa@<k>``); a ``selection`` part is a
    best-per-domain candidate on the selection split (kept in ``results["selection"]``, not in the tables)."""

    designer: str
    executor: str
    bench: Benchmark
    method: Method
    tasks: list[Task]
    path: Path
    done: dict[str, RolloutTree] = field(default_factory=dict)
    label: str | None = None
    selection: bool = False
    target: str | None = None  # a selection part: the benchmark whose best-per-domain it chooses for

    @property
    def name(self) -> str:
        return self.label or self.method.name

    @property
    def todo(self) -> list[Task]:
        return [t for t in self.tasks if t.id not in self.done]

    @property
    def complete(self) -> bool:
        return not self.todo


class Evaluation:
    """Plan, run and summarise an evaluation (see the module docstring).

    Args:
        config: the evaluation settings.
        policies: model name -> ready policy (tests, or a caller that holds the models); others are built.
        observer: progress hooks.
    """

    def __init__(
        self,
        config: EvalConfig,
        *,
        policies: dict[str, Policy] | None = None,
        observer: EvalObserver | None = None,
        pool: Any = None,
    ) -> None:
        self.config = cfg = config
        use_rewards(cfg.rewards)  # --rewards: each domain's own reward(task, answer), before any scoring
        self.isolation = for_config(ExecutionConfig(cfg.isolation), purpose="eval")
        self.observer = observer or EvalObserver()
        self.templates = load_templates()
        self.ks = check_budgets(cfg.k or [1, cfg.n], cfg.n)
        self.methods = [parse_method(m, self.templates) for m in dict.fromkeys(cfg.methods)]
        self.benchmarks = [parse_benchmark(b, split=cfg.split) for b in dict.fromkeys(cfg.benchmarks)]
        self.candidates = self._candidates()
        self._check_matches()
        self.cells = list(dict.fromkeys(cfg.cells()))
        self.out = Path(cfg.out)
        self._policies: dict[str, Policy] = dict(policies or {})
        self._own: list[Policy] = []
        self._pool = pool
        self._own_pool = pool is None
        self._engines: dict[tuple[str | None, str], RolloutEngine] = {}
        self._writers: dict[Path, TreeWriter] = {}
        if cfg.backend == "openai" and not policies and not cfg.report_only:
            probe_endpoint(str(cfg.base_url))
        self.tasks = {b.label: benchmark_tasks(b, limit=cfg.limit, task_ids=cfg.tasks) for b in self.benchmarks}
        if cfg.tasks:  # --tasks: the benchmarks that hold none of them are left out
            if not any(self.tasks.values()):
                raise EvalError(f"none of --tasks {cfg.tasks[:3]} is in {[b.label for b in self.benchmarks]}")
            self.benchmarks = [b for b in self.benchmarks if self.tasks[b.label]]
        self.selection = (
            {b.label: self._selection_bench(b) for b in self.benchmarks} if self.candidates else {}
        )
        for label, b in self.selection.items():
            self.tasks[b.label] = self._selection_tasks(b)
            self._check_disjoint(label, b)
        self._check_resume()

    def _check_disjoint(self, label: str, selection: Benchmark) -> None:
        """best-per-domain never chooses on a task it is scored on: a loader without the selection split (one
        that returns the same tasks for every split, e.g. ``humaneval``) is refused."""
        scored = {t.id for t in benchmark_tasks(next(b for b in self.benchmarks if b.label == label))}
        shared = sorted(scored & {t.id for t in self.tasks[selection.label]})
        if shared:
            raise EvalError(
                f"best-per-domain: {selection.label} shares {len(shared)} task(s) with {label} "
                f"(e.g. {shared[0]}): that benchmark has no separate selection split; choose on another "
                "split with --selection-split"
            )

    def _candidates(self) -> list[Method]:
        """best-per-domain's candidates (none without it); a candidate not among the methods joins them."""
        if not any(m.kind == "best" for m in self.methods):
            if self.config.best_of:
                raise EvalError(
                    "--best-of names best-per-domain's candidates; add best-per-domain to --methods"
                )
            return []
        names = self.config.best_of or [m.name for m in self.methods if m.kind in (SA, "fixed")]
        found = [parse_method(n, self.templates) for n in dict.fromkeys(names)]
        bad = [m.name for m in found if m.kind not in (SA, "fixed", "sa@k") or not m.runs]
        if bad or not found:
            raise EvalError(
                "best-per-domain chooses among sa, fixed:<template> and sa@<k> methods, "
                f"got {bad or 'none'}; "
                "add sa or fixed:<template> methods to --methods, or name them in --best-of"
            )
        known = {m.name for m in self.methods}
        self.methods += [m for m in found if m.name not in known]
        return found

    def _check_matches(self) -> None:
        """Every ``sa@=<method>`` names a method of the run (its k is read from that method's records)."""
        known = {m.name for m in self.methods}
        matches = [m for m in self.methods if m.kind == "sa@k" and m.k is None and m.match not in known]
        if matches:
            raise EvalError(
                f"{matches[0].name} matches k to {matches[0].match!r}, which is not in --methods; add it"
            )

    def _selection_tasks(self, selection: Benchmark) -> list[Task]:
        """The selection split's tasks: its first ``--limit``, or for a carve-out ``<split>~<N>`` N tasks of
        that split in the seeded order ``derive_seed(seed, "selection", task id)`` (the same for every
        method)."""
        _, _, carve = self.config.selection_split.partition(CARVE)
        if not carve:
            return benchmark_tasks(selection, limit=self.config.limit)
        tasks = benchmark_tasks(selection)
        return sorted(tasks, key=lambda t: derive_seed(self.config.seed, "selection", t.id))[: int(carve)]

    def _selection_bench(self, bench: Benchmark) -> Benchmark:
        """The benchmark's selection split (``--selection-split``): best-per-domain never chooses on its
        test."""
        split, sep, carve = self.config.selection_split.partition(CARVE)
        if sep and not (carve.isdigit() and int(carve) >= 1):
            raise EvalError(
                f"--selection-split {self.config.selection_split!r}: a carve-out is <split>~<N> with N >= 1 "
                "tasks, e.g. train~50"
            )
        if bench.spec.split_name == split:
            raise EvalError(
                f"best-per-domain chooses on split {split!r}, which is {bench.label}'s own split: "
                "evaluate on another split, or pass --selection-split (e.g. val) to choose on a split the "
                "scores never use"
            )
        spec = dataclasses.replace(bench.spec, split=split)
        head = bench.spec.source + f":{self.config.selection_split}"
        head += f"/{bench.spec.domain}" if bench.spec.domain else ""
        return Benchmark(head, spec)

    # ---- set-up ---------------------------------------------------------------------------------------------

    def _check_resume(self) -> None:
        run_file = self.out / RUN_FILE
        if self.config.fresh and self.out.exists():
            shutil.rmtree(self.out / ROLLOUTS_DIR, ignore_errors=True)
            run_file.unlink(missing_ok=True)
        if run_file.is_file():
            try:
                old = json.loads(run_file.read_text()).get("identity", {})
            except (OSError, ValueError):
                old = {}
            new = self.config.identity()
            diff = sorted(k for k in new if k in old and old[k] != new[k])
            if diff:
                raise EvalError(
                    f"{self.out} holds results of other settings ({', '.join(f'{k}: {old[k]!r} != {new[k]!r}' for k in diff)}); "
                    "use another --out, the same settings to resume, or --fresh to discard them"
                )
            recorded = self._recorded_revisions()
            changed = sorted(
                m
                for m, rev in self.model_revisions().items()
                if m in recorded and recorded[m] != rev and self._has_records(m)
            )
            if changed:
                raise EvalError(
                    f"{self.out} holds results of {', '.join(f'{m} at revision {recorded[m]}' for m in changed)}, "
                    f"but {'it is' if len(changed) == 1 else 'they are'} now "
                    f"{', '.join(str(self.model_revisions()[m]) for m in changed)} (the adapter changed); "
                    "use another --out, or --fresh to discard the old results"
                )
            self.run_id = json.loads(run_file.read_text()).get("run_id") or self._new_run_id()
        else:
            self.run_id = self._new_run_id()

    def model_revisions(self) -> dict[str, str]:
        """The weights behind each model name whose name alone does not pin them (``embedded-sft``, adapter
        folders): :func:`metaagent.policy.cold_start.model_revision`, kept in run.json and checked on resume."""
        if not hasattr(self, "_revisions"):
            names = {checkpoint_model(m, role) for d, e in self.cells for m, role in ((d, "designer"), (e, "executor")) if m}
            revs = {n: model_revision(n) for n in sorted(names)} if self.config.backend == "hf" else {}
            self._revisions = {n: r for n, r in revs.items() if r is not None}
        return self._revisions

    def _has_records(self, model: str) -> bool:
        """Whether the results directory holds any task record made with ``model`` (as designer or executor)."""
        return any(
            record_path(self.out, method, d, e, bench.label).is_file()
            for d, e in self.cells
            if model in (checkpoint_model(d, "designer") if d else None, checkpoint_model(e, "executor"))
            for method in self.methods
            for bench in self.benchmarks
        )

    def _revision_info(self, part: Part) -> dict[str, Any]:
        """The adapter revisions behind a task's record (``revisions: {designer, executor}``), when any."""
        revs = self.model_revisions()
        roles = {"designer": part.designer, "executor": part.executor}
        found = {r: revs[checkpoint_model(m, r)] for r, m in roles.items() if m and checkpoint_model(m, r) in revs}
        return {"revisions": found} if found else {}

    def _recorded_revisions(self) -> dict[str, str]:
        """The revisions run.json holds (also of models this run leaves out: a later run may add them back)."""
        try:
            return dict(json.loads((self.out / RUN_FILE).read_text()).get("model_revisions", {}))
        except (OSError, ValueError):
            return {}

    @staticmethod
    def _new_run_id() -> str:
        return "eval-" + time.strftime("%Y%m%d-%H%M%S")

    def _policy(self, name: str, role: str) -> Policy:
        key = checkpoint_model(name, role)
        if key not in self._policies:
            cfg = self.config
            try:
                if cfg.backend == "openai":
                    policy = build_policy("openai", key, base_url=cfg.base_url, api_key_env=cfg.api_key_env)
                elif cfg.backend == "vllm":
                    policy = build_policy("vllm", key)
                else:  # continuous: every request its own backend call, joining the one running batch
                    policy = build_policy(
                        "hf",
                        key,
                        device=cfg.device,
                        dtype=cfg.dtype,
                        max_batch_size=cfg.max_batch_size,
                        continuous=cfg.continuous,
                        batching=True,
                        **batcher_options(cfg.max_batch_size, cfg.continuous),
                    )
            except (OSError, ValueError) as e:
                raise EvalError(f"cannot load model {name!r} with the {cfg.backend} backend: {e}") from None
            self._policies[key] = policy
            self._own.append(policy)
        return self._policies[key]

    def rollout_config(self) -> RolloutConfig:
        cfg = self.config
        return RolloutConfig(
            m_designs=cfg.n,
            n_executions=cfg.n,
            k_templates=cfg.k_templates,
            template_selection=cfg.template_selection,
            designer_prompt=cfg.designer_prompt,
            domain_hint=cfg.domain_hint,
            designer=SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.designer_max_tokens),
            executor=SamplingConfig(
                temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.executor_max_tokens, stop=[DELIVERY_CLOSE]
            ),
            limits={"timeout_s": cfg.timeout_s},
            budget={"low_max_calls": cfg.low_max_calls},
            sandbox_workers=cfg.sandbox_workers,
            max_inflight=max(8, cfg.sandbox_workers * 2),
        )

    def plan(self) -> list[Part]:
        """Every (cell, benchmark, method) with its record file and the tasks already recorded there; an
        ``sa@=<method>`` part only once that method's part is complete (its k is read from those records), and
        best-per-domain's candidates on each benchmark's selection split (``selection`` parts)."""
        parts: list[Part] = []
        seen: dict[Path, dict[str, RolloutTree]] = {}
        self.pending = []  # sa@=<method> parts whose method is not complete yet (planned again after it)
        later = [m for m in self.methods if m.kind == "sa@k" and not m.runs]  # sa@=<method>: after it
        order = [m for m in self.methods if m.runs] + later
        for bench in self.benchmarks:  # every model of a (benchmark, method) before the next: partial runs compare
            for method in order:
                for designer, executor in self.cells:
                    run, label = method, None
                    if not method.runs:
                        run = self._matched(parts, method, designer, executor, bench)
                        if run is None:
                            self.pending.append((designer, executor, bench.label, method.name))
                            continue
                        label = method.name
                    parts.append(self._part(designer, executor, bench, run, seen, label=label))
            for method in self.candidates if bench.label in self.selection else ():
                for designer, executor in self.cells:
                    sel = self.selection[bench.label]
                    part = self._part(designer, executor, sel, method, seen, selection=True, target=bench.label)
                    parts.append(part)
        return parts

    def _part(
        self, designer: str, executor: str, bench: Benchmark, method: Method, seen: dict, **kw: Any
    ) -> Part:
        """A part and the trees already recorded in its file (shared with earlier parts of the same file)."""
        path = record_path(self.out, method, designer, executor, bench.label)
        part = Part(designer, executor, bench, method, self.tasks[bench.label], path, **kw)
        if path in seen:  # sa/fixed: cells with the same executor share records
            part.done = seen[path]
        elif path.is_file():
            trees, bad = read_trees(path)
            lines, _ = read_record_lines(path)
            if bad or (lines and not lines[-1].endswith("\n")):
                log.warning(
                    "%s: %d unreadable line(s) dropped (a killed run); their tasks run again", path, len(bad)
                )
                write_record_lines(path, [t.to_json() + "\n" for t in trees])  # appends start on a fresh line
            part.done = {t.task_id: t for t in trees}
        seen[path] = part.done
        return part

    def _matched(self, parts: Sequence[Part], method: Method, designer: str, executor: str, bench: Benchmark):
        """``sa@=<method>`` as ``sa@<k>`` with k = that method's mean executor calls per sample on the same
        cell and
        benchmark (:func:`matched_k`), or None while its part is not complete."""
        target = next(
            (p for p in parts if p.name == method.match and (p.designer, p.executor) == (designer, executor)
             and p.bench.label == bench.label and not p.selection),
            None,
        )  # fmt: skip
        if target is None or not target.complete or not target.tasks:
            return None
        return method.with_k(matched_k([target.done[t.id] for t in target.tasks], self.ks))

    # ---- running --------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Run every task not recorded yet, then write and return the results.

        All parts' tasks form one queue, ordered task by task (task 1 of every benchmark, method and
        model, then task 2, ...), with ``concurrency`` tasks in flight across parts (their model calls
        meet in the batcher): whenever a run stops, every method and model has about as many tasks done.
        ``results.json`` and the tables are rewritten at most every :data:`RESULTS_EVERY_S` seconds while
        tasks finish, and at the end.
        """
        parts = self.plan()
        unique = list({p.path: p for p in parts}.values())
        total = sum(len(p.tasks) for p in unique)
        self.observer.start(total, total - sum(len(p.todo) for p in unique))
        self.out.mkdir(parents=True, exist_ok=True)
        if not self.config.report_only:  # --report-only rewrites the tables, never the record of the run
            self._write_run_file()
        jobs = [] if self.config.report_only else self._jobs(unique)
        try:
            if jobs:
                self._run_jobs(jobs, parts)
            if self.pending and not self.config.report_only:  # sa@=<method>: k is known once its method ran
                parts = self.plan()
                unique = list({p.path: p for p in parts}.values())
                more = self._jobs(unique)
                self.observer.start(
                    sum(len(p.tasks) for p in unique), sum(len(p.tasks) - len(p.todo) for p in unique)
                )
                if more:
                    self._run_jobs(more, parts)
        finally:
            self.observer.finish()
            for w in self._writers.values():
                w.close()
            self.close()
        return self.finish(parts)

    def _jobs(self, parts: Sequence[Part]) -> list[tuple[Part, Task]]:
        jobs = [(i, j, p, t) for j, p in enumerate(parts) for i, t in enumerate(p.tasks) if t.id not in p.done]
        return [(p, t) for _, _, p, t in sorted(jobs, key=lambda x: (x[0], x[1]))]

    def _engine(self, part: Part) -> RolloutEngine:
        key = (part.designer if part.method.uses_designer else None, part.executor)
        if key not in self._engines:
            rcfg = self.rollout_config()
            if self._pool is None:
                self._pool = make_pool(rcfg)
            designer = self._policy(part.designer, "designer") if part.method.uses_designer else None
            executor = self._policy(part.executor, "executor")
            self._engines[key] = RolloutEngine(
                designer=designer or executor,
                executor=self._role_routing(executor),
                config=rcfg,
                pool=self._pool,
                run_id=self.run_id,
                record_config={
                    "eval": self.config.to_dict(),
                    "rollout": {"limits": rcfg.limits, "budget": {"low_max_calls": rcfg.budget.low_max_calls}},
                },
                templates=self.templates,
                budget_tag=self.config.budget,
            )
        return self._engines[key]

    def _role_routing(self, executor: Policy) -> Policy:
        """The cell's executor, or a router sending each agent to its ``role_models`` model (swapped by
        ``swap_roles``) and every other agent to the cell's executor."""
        role_models = self.config.effective_role_models()
        if not role_models:
            return executor

        routes = {p if p.startswith("executor:") else f"executor:{p}": self._policy(m, "executor") for p, m in role_models.items()}
        return RoutingPolicy(PolicyRegistry({**routes, "executor": executor}))

    def _run_jobs(self, jobs: list[tuple[Part, Task]], parts: Sequence[Part]) -> None:
        cfg = self.config
        rcfg = self.rollout_config()
        for part, _ in jobs:  # load every model before the first task: a bad model fails before any work
            self._engine(part)
        lock = threading.Lock()
        written = [time.monotonic()]  # when results.json was last rewritten

        def one(part: Part, task: Task) -> None:
            self.observer.part(f"{cell_label(part.designer, part.executor)} | {part.bench.label} | {part.method.name}", 0)
            tree = rollout_task(
                self._engine(part),
                task,
                part.method,
                n=cfg.n,
                seed=cfg.seed,
                designer_sampling=rcfg.designer.params(),
                executor_sampling=rcfg.executor.params(),
                info={
                    "benchmark": part.bench.label,
                    "designer": part.designer,
                    "executor": part.executor,
                    **self._revision_info(part),
                },
            )
            with lock:
                writer = self._writers.get(part.path)
                if writer is None:
                    writer = self._writers[part.path] = TreeWriter(part.path)
                writer.write(tree)
                part.done[tree.task_id] = tree
            self.observer.task_done(tree)

        queue = list(jobs)
        with ThreadPoolExecutor(max_workers=cfg.concurrency, thread_name_prefix="eval") as ex:
            running = set()
            while queue or running:
                while queue and len(running) < cfg.concurrency:
                    running.add(ex.submit(one, *queue.pop(0)))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
                if queue and time.monotonic() - written[0] >= RESULTS_EVERY_S:
                    with lock:
                        self.finish(parts)  # results so far: a run killed later still leaves its tables
                    written[0] = time.monotonic()

    def close(self) -> None:
        for p in self._own:
            p.close()
        self._own.clear()
        if self._own_pool and self._pool is not None:
            self._pool.close()
            self._pool = None

    def _write_run_file(self) -> None:
        info = {
            "run_id": self.run_id,
            "kind": "eval",
            "seed": self.config.seed,
            "models": {cell_label(d, e): {"designer": d, "executor": e} for d, e in self.cells},
            "identity": self.config.identity(),
            "model_revisions": {**self._recorded_revisions(), **self.model_revisions()},
            "isolation": self.isolation.describe(),
            "metaagent_version": __version__,
            "created_at": time.time(),
        }
        (self.out / RUN_FILE).write_text(json.dumps(info, indent=2))

    # ---- results --------------------------------------------------------------------------------------------

    def finish(self, parts: Sequence[Part]) -> dict[str, Any]:
        """Score the recorded trees of the requested tasks and write results.json, table.md, report.html."""
        from .report import render_html, render_table

        results = build_results(self.config, parts, self.ks, run_id=self.run_id)
        # sa@=<method> parts whose method is not complete yet: (designer, executor, benchmark, method)
        results["pending"] = [list(p) for p in getattr(self, "pending", [])]
        results["complete"] = results["complete"] and not results["pending"]
        (self.out / RESULTS_FILE).write_text(json.dumps(results, indent=1, default=str))
        (self.out / TABLE_FILE).write_text(render_table(results))
        if self.config.html:
            trees = [t for p in parts for t in p.done.values()]
            render_html(results, trees, self.out / REPORT_FILE, max_tasks=self.config.html_tasks)
        return results


def versions() -> dict[str, str]:
    out = {"metaagent": __version__, "python": platform.python_version(), "records_schema": str(SCHEMA_VERSION)}
    for pkg in ("torch", "transformers", "vllm", "openai"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def build_results(
    config: EvalConfig, parts: Sequence[Part], ks: Sequence[int], *, run_id: str = ""
) -> dict[str, Any]:
    """Every number of the run as JSON data (see :mod:`metaagent.eval.report` for the table)."""
    k_main = max(ks)
    cells: dict[str, Any] = {}
    scores: dict[tuple[str, str, str], list[TaskScore]] = {}
    selection: dict[tuple[str, str, str], list[TaskScore]] = {}  # (cell, benchmark chosen for, method) on val
    complete = True
    for p in parts:
        cell = cell_label(p.designer, p.executor)
        trees = [p.done[t.id] for t in p.tasks if t.id in p.done]
        complete = complete and len(trees) == len(p.tasks)
        task_scores = [score_task(t, ks) for t in trees]
        if p.selection:
            selection[(cell, str(p.target), p.name)] = task_scores
            continue
        scores[(cell, p.bench.label, p.name)] = task_scores
        entry = summarize(task_scores, ks, n_boot=config.bootstrap, seed=config.seed)
        entry["tasks_planned"] = len(p.tasks)
        entry["complete"] = len(trees) == len(p.tasks)
        entry["designs"] = design_stats(trees)
        entry["records"] = str(p.path)
        entry["per_task"] = [s.to_dict() for s in task_scores]
        if p.label:  # sa@=<method>: the k it ran with
            entry["k"], entry["k_from"] = p.method.k, p.method.match
        cells.setdefault(cell, {"designer": p.designer, "executor": p.executor, "benchmarks": {}})
        cells[cell]["benchmarks"].setdefault(p.bench.label, {})[p.name] = entry
    best = _best_per_domain(config, parts, scores, selection, ks)
    for (cell, bench), entry in best.items():
        cells[cell]["benchmarks"].setdefault(bench, {})[BEST] = entry
        scores[(cell, bench, BEST)] = entry.pop("_scores")
        complete = complete and entry["complete"]

    comparisons: list[dict[str, Any]] = []
    methods = list(dict.fromkeys([p.name for p in parts if not p.selection] + ([BEST] if best else [])))
    benches = list(dict.fromkeys(p.bench.label for p in parts if not p.selection))
    cell_names = list(cells)
    for cell in cell_names:  # every method vs sa, same cell
        for bench in benches:
            for m in methods:
                if m != SA and (cell, bench, SA) in scores:
                    cmp = paired_comparison(
                        scores[(cell, bench, SA)], scores[(cell, bench, m)], k=k_main, n_boot=config.bootstrap, seed=config.seed
                    )
                    comparisons.append({"a": [cell, bench, SA], "b": [cell, bench, m], **cmp})
    for i, ca in enumerate(cell_names):  # the same method across cells (e.g. SFT -> RL; App. C split)
        for cb in cell_names[i + 1 :]:
            for bench in benches:
                for m in methods:
                    if (ca, bench, m) in scores and (cb, bench, m) in scores:
                        cmp = paired_comparison(
                            scores[(ca, bench, m)], scores[(cb, bench, m)], k=k_main, n_boot=config.bootstrap, seed=config.seed
                        )
                        comparisons.append({"a": [ca, bench, m], "b": [cb, bench, m], **cmp})

    return {
        "run_id": run_id,
        "complete": complete,
        "config": config.to_dict(),
        "ks": list(ks),
        "k_main": k_main,
        "methods": methods,
        "benchmarks": benches,
        "cells": cells,
        "grid": _grid(config, cells, benches, k_main),
        "comparisons": comparisons,
        "seeds": {"seed": config.seed, "task_seed": "derive_seed(seed, 'eval', method, task_id)"},
        "versions": versions(),
        "created_at": time.time(),
    }


def matched_k(trees: Sequence[RolloutTree], ks: Sequence[int]) -> int:
    """``sa@=<method>``'s k: the method's mean executor calls per sample over ``trees``, rounded half up, at
    least
    1: ``k = max(1, floor(Σ calls / Σ samples + 1/2))``."""
    task_scores = [score_task(t, ks) for t in trees]
    samples = sum(s.samples for s in task_scores)
    if not samples:
        raise EvalError("sa@=<method>: the matched method has no samples to count executor calls on")
    return max(1, math.floor(sum(s.agent_calls for s in task_scores) / samples + 0.5))


def task_group(task: Task) -> str:
    """The domain best-per-domain chooses for: a suite task's family (``metadata["family"]``), else its
    domain."""
    family = task.metadata.get("family") if isinstance(task.metadata, dict) else None
    return str(family or task.domain)


def _best_per_domain(
    config: EvalConfig,
    parts: Sequence[Part],
    scores: dict[tuple[str, str, str], list[TaskScore]],
    selection: dict[tuple[str, str, str], list[TaskScore]],
    ks: Sequence[int],
) -> dict[tuple[str, str], dict[str, Any]]:
    """(cell, benchmark) -> best-per-domain's entry: per domain the candidate with the best mean avg@k on the
    selection split (:func:`metaagent.eval.matrix.oracle`: ties to ``sa``, else by name), scored on the
    benchmark's tasks with that candidate's records; ``selection`` keeps every candidate's validation mean."""
    from .matrix import oracle, values

    k = max(ks)
    groups: dict[tuple[str, str], dict[str, str]] = {}  # (cell, benchmark) -> task id -> domain
    val_groups: dict[tuple[str, str], dict[str, str]] = {}
    done: dict[tuple[str, str], bool] = {}  # every candidate's parts (selection and scored) complete
    candidates = {m for (_, _, m) in selection}
    for p in parts:
        key = (cell_label(p.designer, p.executor), str(p.target) if p.selection else p.bench.label)
        (val_groups if p.selection else groups).setdefault(key, {}).update(
            {t.id: task_group(t) for t in p.tasks}
        )
        if p.name in candidates:
            done[key] = done.get(key, True) and p.complete
    out = {}
    for (cell, bench), by_task in groups.items():
        cands = [m for (c, b, m) in selection if (c, b) == (cell, bench)]
        if not cands:
            continue
        merged: dict[tuple[str, str], list[TaskScore]] = {}
        for m in cands:
            for s in selection[(cell, bench, m)]:
                merged.setdefault((val_groups[(cell, bench)][s.task_id], m), []).append(s)
        chosen, record = {}, {}
        for domain in sorted(set(by_task.values())):
            seen = {m: values(merged.get((domain, m), ()), "avg", k) for m in cands}
            if not any(seen.values()):
                record[domain] = {
                    "chosen": None,
                    "val": {},
                    "val_tasks": 0,
                    "note": "no selection-split tasks",
                }
                continue
            chosen[domain] = oracle(
                {key: v for key, v in merged.items() if key[0] == domain}, domain, k=k, exclude=()
            )
            record[domain] = {
                "chosen": chosen[domain],
                "val": {m: (fmean(v.values()) if v else None) for m, v in seen.items()},
                "val_tasks": max(len(v) for v in seen.values()),
            }
        by_method = {
            m: {s.task_id: s for s in scores.get((cell, bench, m), [])} for m in set(chosen.values())
        }
        composed = [
            by_method[chosen[d]][t] for t, d in by_task.items() if d in chosen and t in by_method[chosen[d]]
        ]
        entry = summarize(composed, ks, n_boot=config.bootstrap, seed=config.seed)
        entry.update(
            tasks_planned=len(by_task),
            complete=done.get((cell, bench), False) and len(composed) == len(by_task),
            selection=record,
            selection_split=config.selection_split,
            per_task=[s.to_dict() for s in composed],
            _scores=composed,
        )
        out[(cell, bench)] = entry
    return out


def _grid(config: EvalConfig, cells: dict[str, Any], benches: Sequence[str], k: int) -> dict[str, Any] | None:
    """The co-evolution grid: auto's avg@k per (designer, executor) on each benchmark."""
    if not config.grid_designers:
        return None
    out: dict[str, Any] = {"designers": config.grid_designers, "executors": config.grid_executors, "benchmarks": {}}
    for bench in benches:
        rows = []
        for d in config.grid_designers:
            row = []
            for e in config.grid_executors:
                entry = cells.get(cell_label(d, e), {}).get("benchmarks", {}).get(bench, {}).get("auto")
                row.append(entry["metrics"].get(f"avg@{k}", {}).get("mean") if entry else None)
            rows.append(row)
        out["benchmarks"][bench] = rows
    return out


def evaluate(config: EvalConfig, **kwargs: Any) -> dict[str, Any]:
    """Run an evaluation and return its results (see :class:`Evaluation`)."""
    return Evaluation(config, **kwargs).run()

