"""The evaluated methods and how each one samples a task (paper §4.1, Tables 1/2).

- ``sa``: the single-agent baseline: the bare model answers the task once per sample, with a minimal
  format instruction and no role or method (the domain's ``Domain.solo_script``, one frozen script per domain);
- ``fixed:<template>``: a template of the bank as a frozen design (every fixed multi-agent baseline). A
  template written for another domain is swapped for the task domain's twin of it (``Domain.template_twins``:
  ``fixed:single_math`` runs ``single_code`` on code tasks), so one method covers a math+code benchmark;
- ``auto``: the designer writes a team per sample and the executor runs it (the paper's method);
- ``sa@k`` (``sa@4``): one agent at equal compute: each sample is one answer chosen from ``k`` executions of
  the ``sa`` script: the majority vote of the domain's voting key (``Domain.answer_key``, serve's vote;
  :mod:`metaagent.rewards.selection`, maj@k's choice), or on a code task with public tests the
  first of the k programs that passes them (public tests only, never the hidden ones; none passes: the first).
  Its compute per sample is k executor calls. ``sa@auto`` (or ``sa@=auto``, ``sa@=<method>``): k is the
  compared method's mean executor calls per sample on the same model and benchmark, rounded (half up, >= 1);
- ``best-per-domain``: per domain (a suite task's ``metadata["family"]``, else its domain) the best of the
  candidate methods (``sa`` and the ``fixed:`` methods of the run, or ``--best-of``) on the validation split
  (``--selection-split``, default ``val``; never the test split), scored on the benchmark's own tasks with the
  chosen method's records; the choice and every candidate's validation score are kept in the results.

One *sample* of a task is one (design, execution) outcome: ``sa`` and ``fixed:`` run their frozen design
``n`` times (1 design x n executions), ``auto`` samples ``n`` designs and runs each once (n x 1), so an
invalid design is a sample with correctness 0 (Eq. 4). Every task's rollout is seeded by
``derive_seed(seed, method, task id)`` alone, so a task's samples do not depend on which other tasks are
evaluated, in which order, or whether the run was resumed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from metaagent.data.tasks import Task
from metaagent.domain import get_domain
from metaagent.policy.base import SamplingParams
from metaagent.records import RolloutTree
from metaagent.rewards.selection import SELECT_MAJORITY, selection_marks
from metaagent.rollout.engine import FrozenDesign, RolloutEngine, derive_seed

from .errors import EvalError

SA, AUTO, FIXED_PREFIX = "sa", "auto", "fixed:"
SA_AT = "sa@"  # sa@<k>, sa@auto, sa@=<method>: one agent at k executions a sample
MATCH = "="  # sa@=<method>: k from that method's executor calls per sample
BEST = "best-per-domain"

EVAL_MODE = "eval"  # RolloutTree.mode of every evaluation tree
EVAL_KEY = "eval"  # tree.config[EVAL_KEY]: method, benchmark, n, seed of the tree

@dataclass(frozen=True)
class Method:
    """A parsed method spec: ``name`` as given (``sa``, ``fixed:reflection``, ``auto``, ``sa@4``, ...).

    ``sa@k`` methods have kind ``sa@k`` and ``k`` (None until ``sa@=<method>``'s k is resolved, with
    ``match`` naming the method whose executor calls set it); ``best-per-domain`` has kind ``best``.
    """

    name: str
    kind: str  # sa | fixed | auto | sa@k | best
    template: str | None = None
    k: int | None = None
    match: str | None = None

    @property
    def uses_designer(self) -> bool:
        return self.kind == AUTO

    @property
    def runs(self) -> bool:
        """Whether the method has records of its own (``best-per-domain`` is scored from its candidates')."""
        return self.kind != "best" and not (self.kind == "sa@k" and self.k is None)

    def with_k(self, k: int) -> Method:
        """``sa@=<method>`` resolved to ``sa@<k>`` (records and seeds of the explicit ``sa@<k>``)."""
        if self.kind != "sa@k" or k < 1:
            raise EvalError(f"only an sa@k method takes a k >= 1, got {self.name!r} and k={k}")
        return Method(f"{SA_AT}{k}", "sa@k", k=k, match=self.match)


def method_names(templates: Sequence[Any]) -> list[str]:
    """Every valid method spec, for error messages and ``--help``."""
    fixed = [FIXED_PREFIX + t.name for t in templates]
    return [SA, AUTO, *fixed, f"{SA_AT}<k>", f"{SA_AT}auto", f"{SA_AT}{MATCH}<method>", BEST]


def _parse_sa_at(spec: str, templates: Sequence[Any]) -> Method:
    """``sa@<k>`` (k >= 1), ``sa@auto`` / ``sa@=auto``, ``sa@=<method>``."""
    rest = spec[len(SA_AT) :]
    if rest.isdigit() and int(rest) >= 1:
        return Method(spec, "sa@k", k=int(rest))
    match = rest[len(MATCH) :] if rest.startswith(MATCH) else rest
    if match == AUTO or (rest.startswith(MATCH) and match):
        target = parse_method(match, templates)
        if target.kind in ("sa@k", "best"):
            raise EvalError(
                f"method {spec!r}: k is matched to a method with designs of its own, not {match!r}"
            )
        return Method(spec, "sa@k", match=match)
    raise EvalError(
        f"method {spec!r}: write sa@<k> with k >= 1 (sa@4), sa@auto or sa@=<method> (sa@=fixed:debate)"
    )


def parse_method(spec: str, templates: Sequence[Any]) -> Method:
    """``sa`` | ``auto`` | ``fixed:<template>`` | ``sa@k`` forms | ``best-per-domain``; anything else is an
    error
    listing the valid specs."""
    spec = spec.strip()
    if spec in (SA, AUTO):
        return Method(spec, spec)
    if spec == BEST:
        return Method(spec, "best")
    if spec.startswith(SA_AT):
        return _parse_sa_at(spec, templates)
    names = {t.name for t in templates}
    if spec.startswith(FIXED_PREFIX):
        template = spec[len(FIXED_PREFIX) :]
        if template in names:
            return Method(spec, "fixed", template)
        raise EvalError(f"unknown template {template!r} in method {spec!r}; valid templates: {', '.join(sorted(names))}")
    raise EvalError(f"unknown method {spec!r}; valid methods: {', '.join(method_names(templates))}")


def frozen_for(method: Method, task: Task, templates: Sequence[Any]) -> FrozenDesign | None:
    """The frozen design a method runs on a task (None for ``auto``)."""
    if method.kind in (SA, "sa@k"):
        script = get_domain(task.domain).solo_script
        if script is None:
            raise EvalError(f"domain {task.domain!r} has no single-agent baseline (Domain.solo_script); drop method sa")
        return FrozenDesign(name=SA, script=script)
    if method.kind == "fixed":
        return FrozenDesign.resolve(template_for(str(method.template), task.domain, templates), templates)
    return None


def template_for(name: str, domain: str, templates: Sequence[Any]) -> str:
    """``name``, or ``domain``'s twin of it (``Domain.template_twins``) when ``name`` is written for another domain."""
    bank = {t.name: t for t in templates}
    own = bank.get(name)
    twin = get_domain(domain).twin(name)
    if own is not None and domain not in own.domains and twin in bank and domain in bank[twin].domains:
        return twin
    return name


def task_seed(seed: int, method: str, task_id: str) -> int:
    """The rollout seed of one task under one method: independent of the other tasks evaluated."""
    return derive_seed(seed, EVAL_MODE, method, task_id)


def rollout_task(
    engine: RolloutEngine,
    task: Task,
    method: Method,
    *,
    n: int,
    seed: int,
    step: int | None = None,
    designer_sampling: SamplingParams | None = None,
    executor_sampling: SamplingParams | None = None,
    info: dict[str, Any] | None = None,
) -> RolloutTree:
    """``n`` samples of one task under one method, as one :class:`RolloutTree` (mode ``eval``)."""
    if n < 1:
        raise EvalError(f"samples per task must be >= 1, got {n}")
    if not method.runs:
        raise EvalError(
            f"method {method.name!r} has no rollouts of its own (its k or its candidates decide it)"
        )
    task = Task.coerce(task)
    frozen = frozen_for(method, task, engine.templates or []) or engine.frozen  # a fixed-MAS training run
    k = method.k if method.kind == "sa@k" else 1
    (tree,) = engine.rollout(
        [task],
        step=step,
        seed=task_seed(seed, method.name, task.id),
        mode=EVAL_MODE,
        m_designs=1 if frozen else n,
        n_executions=n * int(k or 1) if frozen else 1,
        designer_sampling=designer_sampling,
        executor_sampling=executor_sampling,
        frozen=frozen,
    )
    extra = sa_at_k_info(tree, task, int(k)) if method.kind == "sa@k" else {}
    record = {"method": method.name, "n": n, "seed": seed, **extra, **(info or {})}
    tree.config = {**tree.config, EVAL_KEY: record}
    return tree


def sa_at_k_info(tree: RolloutTree, task: Task, k: int) -> dict[str, Any]:
    """What scoring needs to build ``sa@k`` samples from the tree's executions (in order, k a sample): the
    rule,
    and per execution its vote key (``majority``) or whether its program passed the public tests
    (``public_tests``; None: the tests could not be run, an error of that sample, never a fail)."""
    executions = [e for d in tree.designs for e in d.executions]
    rule, marks = selection_marks(task, [e.answer for e in executions])
    return {"k": k, "select": rule, "keys" if rule == SELECT_MAJORITY else "public_passed": marks}


def rollout_tasks(
    engine: RolloutEngine,
    tasks: Sequence[Task],
    method: Method,
    *,
    n: int,
    seed: int,
    step: int | None = None,
    designer_sampling: SamplingParams | None = None,
    executor_sampling: SamplingParams | None = None,
    concurrency: int = 1,
    info: dict[str, Any] | None = None,
    on_tree: Callable[[RolloutTree], None] | None = None,
) -> list[RolloutTree]:
    """:func:`rollout_task` for many tasks, ``concurrency`` tasks in flight (their agent calls meet in
    the policy's batcher); trees in input order. ``on_tree`` is called as each tree finishes."""

    def one(task: Task) -> RolloutTree:
        tree = rollout_task(
            engine,
            task,
            method,
            n=n,
            seed=seed,
            step=step,
            designer_sampling=designer_sampling,
            executor_sampling=executor_sampling,
            info=info,
        )
        if on_tree is not None:
            on_tree(tree)
        return tree

    tasks = [Task.coerce(t) for t in tasks]
    if concurrency <= 1 or len(tasks) <= 1:
        return [one(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(tasks)), thread_name_prefix="eval") as ex:
        return list(ex.map(one, tasks))
