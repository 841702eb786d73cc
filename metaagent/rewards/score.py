"""The execution reward R (paper App. B, Eq. 10): ``R = R_correct + lam * R_format``, lam = 0.4.

``R_correct`` is the task domain's verdict (``Domain.score``, one file per domain in :mod:`metaagent.domains`):
in {0, 1} for math (the gold answer, :mod:`.math`) and code (every hidden test must pass; the ``pass_rate``
variant uses the fraction of passed tests instead), the best token F1 against the gold answers for QA
(UnityMAS-O, :mod:`.qa`), in [0, 1]. ``R_format`` is in [0, 1] (:mod:`.format`).

A domain's own settings are its section of the reward config, ``reward.domains.<domain>`` (the fields of its
``Domain.settings`` class, e.g. the math domain's ``reward.domains.math.final_form``), read by its scorer as
:meth:`RewardConfig.domain_settings`; the settings here are the ones every domain shares (lam, the format
rules: which fenced languages count as a program, how unsubmitted and refused answers are formatted).

Every component is kept in the :class:`~metaagent.records.RewardRecord`, not only the sum. A
reward that could not be computed (checker timeout, runner failure, missing or malformed reference) is a
record with ``total=None`` and ``error`` set, counted by :func:`reward_metrics`; a wrong or missing
answer is a computed 0.

The rollout engine calls :func:`score_execution` on each execution as it finishes (on the engine's own
threads, or on the Ray sandbox actors where the execution ran), as replay does on a re-run. For scoring
outside a rollout, :func:`score_executions` scores many pairs on a bounded thread pool (math checks and code
tests run in their own processes, the threads only wait) and :func:`score_tree` fills ``execution.reward``
for a whole rollout tree.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat

from metaagent.config import Checked, ConfigError, from_dict
from metaagent.domain import REWARDS, DomainError, RewardFn, get_domain
from metaagent.execution.code import DEFAULT_FENCE_LANGUAGES
from metaagent.records import Execution, RewardRecord, RolloutTree

from ..data.tasks import Task
from .format import empty_deliveries, format_components
from .shortcuts import REFUSED_ANSWER_CLASSES, shortcut_metrics
from .task_reward import DEFAULT_TIMEOUT_S as TASK_REWARD_TIMEOUT_S
from .task_reward import task_reward_verdict

UNSUBMITTED_FORMAT = ("zero", "delivery")
SHORTCUT_FORMAT = ("zero", "keep")


#: flat reward keys that became a domain's own settings (``reward.<old>`` -> ``reward.domains.<domain>.<key>``)
MOVED_KEYS = {
    "math_rel_tol": ("math", "rel_tol"),
    "math_timeout_s": ("math", "timeout_s"),
    "math_final_form": ("math", "final_form"),
    "answer_fallbacks": ("math", "answer_fallbacks"),
    "code_correct": ("code", "correct"),
    **{k: ("code", k) for k in ("time_limit_s", "memory_mb", "time_limit_multiplier", "time_limit_floor_s",
                               "memory_floor_mb", "max_time_limit_s", "max_memory_mb")},
    "code_workers": ("code", "workers"),
    "stop_on_failure": ("code", "stop_on_failure"),
    "site_packages": ("code", "site_packages"),
}


@dataclass(frozen=True)
class RewardConfig(Checked):
    """How executions are scored: what every domain shares (Eq. 10's lam, the format rules) and each domain's own
    settings (``domains``). Defaults follow the paper (lam = 0.4; code: all tests must pass)."""

    moved_keys: ClassVar[dict[str, str]] = {
        old: f"reward.domains.{domain}.{key}" for old, (domain, key) in MOVED_KEYS.items()
    }

    lam: NonNegativeFloat = 0.4  # weight of R_format (paper: 0.4)
    fence_languages: Annotated[tuple[str, ...], Field(min_length=1)] = DEFAULT_FENCE_LANGUAGES  # ("python", "py", "")
    # R_format of an execution that never submitted: "zero" (no final solution, no format reward) or
    # "delivery" (keep the delivery share of its turns: half of delivery_format). R_correct is 0 either way.
    unsubmitted_format: Literal[UNSUBMITTED_FORMAT] = "zero"
    # R_format of an execution whose answer was refused as a shortcut (shortcuts.REFUSED_ANSWER_CLASSES: a copy of
    # the question, an expression for a number, ...): "zero" (it pays nothing) or "keep" (the format share any
    # wrong answer gets, the paper's Eq. 10 as written)
    shortcut_format: Literal[SHORTCUT_FORMAT] = "zero"
    # CPU seconds one call of a registered reward(task, answer) may take (data.rewards, register_reward); it runs
    # in a helper process killed at the deadline (wall clock 3x): a reward error task_reward_timeout, never a 0
    task_reward_timeout_s: PositiveFloat = TASK_REWARD_TIMEOUT_S
    # each domain's own settings: reward.domains.<domain>.<key>, the fields of its Domain.settings class over
    # their defaults (e.g. reward.domains.math.final_form=lenient; docs: Configuration reference, domain settings)
    domains: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()  # types and ranges (YAML and JSON lists become tuples: hashable, immutable)
        built = {name: _settings(name, section) for name, section in self.domains.items()}
        # the config keeps plain mappings (YAML-able records); the built settings are kept beside them
        object.__setattr__(self, "domains", {n: dataclasses.asdict(v) for n, v in built.items()})
        object.__setattr__(self, "_built", built)

    def domain_settings(self, domain: str) -> Any:
        """The settings of ``domain`` (an instance of its ``Domain.settings`` class: ``reward.domains.<domain>``
        over the class's defaults); None for a domain without settings of its own."""
        if domain in self._built:
            return self._built[domain]
        cls = get_domain(domain).settings
        return None if cls is None else cls()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RewardConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown reward option(s) {sorted(unknown)}; known: {sorted(names)}")
        return cls(**dict(data))


def upgrade_reward_section(section: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded ``reward`` section (a run's ``config.yaml``, a record's config) with the keys of
    :data:`MOVED_KEYS` moved into their domain's settings, so records written before the move still load."""
    out = dict(section)
    domains = {k: dict(v) for k, v in (out.pop("domains", None) or {}).items()}
    for old, (domain, key) in MOVED_KEYS.items():
        if old in out:
            domains.setdefault(domain, {}).setdefault(key, out.pop(old))
    return out | ({"domains": domains} if domains else {})


def _settings(name: str, section: Any) -> Any:
    """The ``Domain.settings`` instance of ``reward.domains.<name>`` (a mapping, or an instance already)."""
    try:
        cls = get_domain(name).settings
    except DomainError as e:
        raise ConfigError(f"reward.domains: {e}") from None
    if cls is None:
        raise ConfigError(f"reward.domains.{name}: the {name} domain has no settings of its own; remove the section")
    if isinstance(section, cls):
        return section
    return from_dict(cls, section, where=f"reward.domains.{name}")


def _error_record(kind: str, message: str, fmt: dict[str, float], details: dict[str, Any]) -> RewardRecord:
    details["error_kind"] = kind
    return RewardRecord(
        total=None, correct=None, format=fmt["format"], components=dict(fmt), error=message, details=details
    )


def _as_task(task: Task | Mapping[str, Any]) -> Task:
    return task if isinstance(task, Task) else Task.from_dict(task)


def score_execution(
    task: Task | Mapping[str, Any],
    execution: Execution,
    config: RewardConfig | None = None,
    *,
    rewards: Mapping[str, RewardFn] | None = None,
) -> RewardRecord:
    """Reward of one execution (Eq. 10) with all components; errors are recorded, not raised.

    R_correct is the domain's registered reward when it has one (``rewards``, the registrations of the process
    that started the run as :func:`~.task_reward.load_rewards` unpacks them elsewhere, before this process's
    ``REWARDS``), else the domain's scorer.

    The answer scored is ``execution.answer`` (what the script submitted): for math the final answer is
    extracted from it (:func:`~metaagent.rewards.math.extract_answer`), for code the last fenced program
    (:func:`~metaagent.execution.code.extract_program`). No answer, no program or a wrong one gives
    ``correct = 0``.

    An execution that never submitted (the script crashed, timed out, hit a limit or returned without
    ``submit``) has no final solution: ``R_correct = 0`` without running a checker, and ``R_format = 0``
    (``unsubmitted_format="delivery"`` keeps the delivery share of its turns). Its ``answer`` (the last
    reply) stays in the record for replay. Otherwise a crashed design would keep most of a clean design's
    reward and the designer would never be taught to write scripts that finish.

    An execution in which no agent call ran scores 0 for both ``R_correct`` and ``R_format``: the team did no
    work. It is counted as the shortcut ``no_agent_runs`` only when the script submitted text it built itself;
    a script that fails before its first agent call earned nothing to refuse (its status counts it). An answer
    (or a plan's ``env_step`` action) that no agent reply and no output of an agent's program states is refused
    by the domain's scorer (``answer_not_from_agents``, :mod:`metaagent.rewards.provenance`). Every
    shortcut class the execution tried (:mod:`metaagent.rewards.shortcuts`) is listed in ``details["shortcuts"]``.
    """
    cfg = config or RewardConfig()
    task = _as_task(task)
    fmt = format_components(task.domain, execution, fence_languages=cfg.fence_languages)
    if not execution.submitted and cfg.unsubmitted_format == "delivery":
        fmt["format"] = fmt["delivery_format"] / 2
    details: dict[str, Any] = {"domain": task.domain, "task_id": task.id, "submitted": execution.submitted}
    found = ["empty_delivery"] if empty_deliveries(execution.turns) else []
    details["shortcuts"] = found
    if not task.has_reference:
        what = get_domain(task.domain).reference
        return _error_record(
            "no_reference", f"task {task.id!r} has no {what}; it cannot be scored", fmt, details
        )

    if not execution.turns:
        if execution.submitted:  # a script that fails before its first call is an error, not a shortcut
            found.append("no_agent_runs")
        fmt["format"] = 0.0
        correct = 0.0
    elif not execution.submitted:
        details["unsubmitted"] = execution.status
        correct = 0.0
    else:
        fn = (rewards or {}).get(task.domain) or REWARDS.find(task.domain)  # replaces the domain's scorer
        if fn is not None:
            verdict = task_reward_verdict(
                task.domain, fn, task, execution.answer, timeout_s=cfg.task_reward_timeout_s
            )
        else:
            verdict = get_domain(task.domain).score(task, execution, cfg)
        details.update(verdict.details)
        found.extend(verdict.shortcuts)
        if verdict.error_kind is not None or verdict.correct is None:
            kind = verdict.error_kind or "domain"
            return _error_record(kind, verdict.error or f"{task.domain} scorer computed no reward", fmt, details)
        correct = verdict.correct

    if cfg.shortcut_format == "zero" and any(c in REFUSED_ANSWER_CLASSES for c in found):
        fmt["format"] = 0.0  # a refused answer pays nothing, not even the share an honest wrong answer earns
    components = dict(fmt, correct=correct)
    total = correct + cfg.lam * fmt["format"]
    return RewardRecord(
        total=total, correct=correct, format=fmt["format"], components=components, details=details
    )


def score_executions(
    items: Iterable[tuple[Task | Mapping[str, Any], Execution]],
    config: RewardConfig | None = None,
    *,
    max_workers: int = 4,
) -> list[RewardRecord]:
    """Score many ``(task, execution)`` pairs concurrently (at most ``max_workers`` at once), in input order.
    An unexpected exception while scoring one pair becomes an error record (``error_kind = "internal"``) instead of failing the batch."""
    cfg = config or RewardConfig()
    pairs = list(items)

    def one(pair: tuple[Task | Mapping[str, Any], Execution]) -> RewardRecord:
        try:
            return score_execution(pair[0], pair[1], cfg)
        except Exception as e:  # noqa: BLE001 - recorded and counted, never a silent 0
            return RewardRecord(
                total=None,
                correct=None,
                format=None,
                error=f"internal error: {type(e).__name__}: {e}",
                details={"error_kind": "internal"},
            )

    if not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}")
    workers = min(max_workers, len(pairs) or 1)
    if workers == 1:
        return [one(p) for p in pairs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward") as pool:
        return list(pool.map(one, pairs))


def score_tree(tree: RolloutTree, config: RewardConfig | None = None, *, max_workers: int = 4) -> list[RewardRecord]:
    """Score every execution of ``tree`` against ``tree.task`` and store each record in ``execution.reward``."""
    executions = [e for _, e in tree.executions()]
    records = score_executions(((tree.task, e) for e in executions), config, max_workers=max_workers)
    for execution, record in zip(executions, records):
        execution.reward = record
    return records


def reward_metrics(records: Iterable[RewardRecord], prefix: str = "reward/") -> dict[str, float]:
    """Means over computed rewards, error counts (total and per kind) and the shortcut counters
    (``reward/shortcut/<class>``, ``reward/no_agent_runs``) for logging."""
    records = list(records)
    computed = [r for r in records if r.error is None and r.total is not None]
    errors = Counter(str(r.details.get("error_kind", "other")) for r in records if r.error is not None)
    out: dict[str, float] = {
        f"{prefix}count": float(len(records)),
        f"{prefix}errors": float(sum(errors.values())),
        f"{prefix}error_rate": sum(errors.values()) / len(records) if records else 0.0,
    }
    for kind, n in sorted(errors.items()):
        out[f"{prefix}errors/{kind}"] = float(n)
    out.update(shortcut_metrics(records))
    if computed:
        out[f"{prefix}mean_total"] = sum(r.total for r in computed) / len(computed)  # type: ignore[misc]
        out[f"{prefix}mean_correct"] = sum(r.correct or 0.0 for r in computed) / len(computed)
        out[f"{prefix}mean_format"] = sum(r.format or 0.0 for r in computed) / len(computed)
        for key in ("solution_format", "delivery_format"):
            out[f"{prefix}mean_{key}"] = sum(r.components.get(key, 0.0) for r in computed) / len(computed)
    return out
