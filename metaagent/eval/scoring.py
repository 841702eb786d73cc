"""From evaluation trees to numbers: samples per task, task scores, and a method's summary on a benchmark.

A sample whose reward could not be computed is not a 0: it is left out of the task's ``n`` and counted in
``reward_errors``; a task with fewer than ``k`` scored samples gets no pass@k / avg@k / maj@k and is
counted in ``metric_errors`` (the number of tasks a metric is averaged over is reported next to it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any

from metaagent.domain import Domain, domains
from metaagent.records import EXECUTION_STATUSES, Design, Execution, RolloutTree
from metaagent.rewards.selection import SELECT_MAJORITY, choose
from metaagent.rewards.shortcuts import SHORTCUT_CLASSES, shortcuts_of

from .errors import EvalError
from .methods import EVAL_KEY
from .metrics import DEFAULT_BOOTSTRAP, avg_at_k, bootstrap_ci, maj_at_k, pass_at_k

INVALID_DESIGN = "invalid_design"  # status of a sample whose design did not pass the checker


@dataclass
class Sample:
    """One (design, execution) outcome of a task."""

    correct: float | None  # None: the reward could not be computed
    answer: str | None  # the answer's voting key (its domain's ``answer_key``), for maj@k
    status: str  # execution status, or INVALID_DESIGN
    tokens: int  # generated tokens (designer share + the execution's agent turns)
    prompt_tokens: int
    agent_calls: int
    reward_error: str | None = None
    shortcuts: tuple[str, ...] | None = None  # shortcut classes the reward refused; None: records predate them


def _shortcuts(e: Execution) -> tuple[str, ...] | None:
    details = e.reward.details if e.reward is not None else None
    if not details or "shortcuts" not in details:
        return None
    return tuple(shortcuts_of(e.reward))


def _answer(e: Execution, domain: Domain | None) -> str | None:
    """A sample's vote for maj@k: its domain's voting key of the submitted answer (``Domain.answer_key``, the key
    serve's majority and ``sa@k`` vote on; math: the extracted final answer, normalised); None without an
    answer (never a vote) or for a domain not registered here."""
    if domain is None or not e.answer or not e.answer.strip():
        return None
    return domain.answer_key(e.answer)


def _design_tokens(d: Design) -> tuple[int, int]:
    if d.sample is None:
        return 0, 0
    return len(d.sample.response_ids), len(d.sample.prompt_ids)


def samples_of(tree: RolloutTree) -> list[Sample]:
    """The samples of a tree in order: each execution of a valid design, and each invalid design (a
    correctness-0 sample without execution). A design's own tokens go to its first sample."""
    out: list[Sample] = []
    domain = domains().get(str(tree.task.get("domain")))
    for d in tree.designs:
        gen, prompt = _design_tokens(d)
        if not d.valid:
            out.append(Sample(0.0, None, INVALID_DESIGN, gen, prompt, 0))
            continue
        for i, e in enumerate(d.executions):
            r = e.reward
            scored = r is not None and r.total is not None
            out.append(
                Sample(
                    correct=float(r.correct or 0.0) if scored else None,  # type: ignore[union-attr]
                    answer=_answer(e, domain),
                    status=e.status,
                    tokens=sum(len(t.response_ids) for t in e.turns) + (gen if i == 0 else 0),
                    prompt_tokens=sum(len(t.prompt_ids) for t in e.turns) + (prompt if i == 0 else 0),
                    agent_calls=len(e.turns),
                    reward_error=None if scored else (r.error if r is not None else "no reward record"),
                    shortcuts=_shortcuts(e),
                )
            )
    return out


def vote_samples(tree: RolloutTree) -> list[Sample]:
    """The ``sa@k`` samples of a tree whose record says ``k`` (``tree.config["eval"]``): executions in order,
    k a sample; each sample is the chosen execution's outcome (:func:`metaagent.rewards.selection.choose`)
    with the compute of all k (tokens, prompt tokens and executor calls summed)."""
    info = (tree.config or {}).get(EVAL_KEY) or {}
    k = int(info["k"])
    base = samples_of(tree)
    if not base or len(base) % k:
        raise EvalError(f"task {tree.task_id}: {len(base)} executions is not a multiple of sa@k's k={k}")
    marks = info.get("keys") if info["select"] == SELECT_MAJORITY else info.get("public_passed")
    if marks is None or len(marks) != len(base):
        raise EvalError(f"task {tree.task_id}: its sa@k record has no {info['select']} mark per execution")
    out = []
    for start in range(0, len(base), k):
        group = base[start : start + k]
        try:
            i, error = choose(info["select"], marks[start : start + k])
        except ValueError as e:
            raise EvalError(f"task {tree.task_id}: {e} in its evaluation record") from None
        c = group[i]
        out.append(
            Sample(
                correct=None if error else c.correct,
                answer=c.answer,
                status=c.status,
                tokens=sum(s.tokens for s in group),
                prompt_tokens=sum(s.prompt_tokens for s in group),
                agent_calls=sum(s.agent_calls for s in group),
                reward_error=error or c.reward_error,
                shortcuts=c.shortcuts,
            )
        )
    return out


@dataclass
class TaskScore:
    """A task's numbers under one method: per-k metrics (None when fewer than k samples were scored)."""

    task_id: str
    domain: str
    n: int  # scored samples
    c: int  # correct scored samples (correct >= 0.5 counts as correct for pass@k)
    samples: int  # all samples, scored or not
    reward_errors: int
    avg: dict[int, float | None] = field(default_factory=dict)
    pass_: dict[int, float | None] = field(default_factory=dict)
    maj: dict[int, float | None] = field(default_factory=dict)
    tokens: int = 0
    prompt_tokens: int = 0
    agent_calls: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    designs: int = 0
    valid_designs: int = 0
    sampled_designs: int = 0
    structure: str | None = None  # modal pattern among the valid designs
    family: str | None = None
    shortcuts: dict[str, int] | None = None  # samples per shortcut class (rewards/shortcuts.py); None: unrecorded

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass"] = {str(k): v for k, v in d.pop("pass_").items()}
        d["avg"] = {str(k): v for k, v in d["avg"].items()}
        d["maj"] = {str(k): v for k, v in d["maj"].items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskScore:
        """Inverse of :meth:`to_dict` (a ``per_task`` entry of ``results.json``)."""
        ks = {key: {int(k): v for k, v in d[key].items()} for key in ("avg", "pass", "maj")}
        fields = {f: d[f] for f in cls.__dataclass_fields__ if f in d and f not in ("avg", "pass_", "maj")}
        return cls(**fields, avg=ks["avg"], pass_=ks["pass"], maj=ks["maj"])


def _modal(labels: Sequence[str]) -> str | None:
    if not labels:
        return None
    counts = Counter(labels)
    return max(counts, key=lambda label: (counts[label], -labels.index(label)))


def _count_shortcuts(samples: Sequence[Sample]) -> dict[str, int] | None:
    recorded = [s.shortcuts for s in samples if s.shortcuts is not None]
    if not recorded:
        return None
    counts = Counter(name for names in recorded for name in set(names))
    return {name: counts.get(name, 0) for name in SHORTCUT_CLASSES}


def votes(domain: str) -> bool:
    """maj@k is reported for ``domain`` (its ``Domain.votes``: math, or a plugin's that votes); False for an
    unregistered one."""
    found = domains().get(domain)
    return found is not None and found.votes


def score_task(tree: RolloutTree, ks: Sequence[int]) -> TaskScore:
    """avg@k, pass@k and maj@k (domains that vote: math) of one task's tree for each budget in ``ks`` (an
    ``sa@k`` tree's samples are its k-execution groups, :func:`vote_samples`)."""
    voted = "select" in ((tree.config or {}).get(EVAL_KEY) or {})
    samples = vote_samples(tree) if voted else samples_of(tree)
    scored = [s for s in samples if s.correct is not None]
    correct = [1.0 if (s.correct or 0.0) >= 0.5 else 0.0 for s in scored]
    domain = str(tree.task.get("domain", "?"))
    score = TaskScore(
        task_id=tree.task_id,
        domain=domain,
        n=len(scored),
        c=int(sum(correct)),
        samples=len(samples),
        reward_errors=len(samples) - len(scored),
        tokens=sum(s.tokens for s in samples),
        prompt_tokens=sum(s.prompt_tokens for s in samples),
        agent_calls=sum(s.agent_calls for s in samples),
        statuses=dict(Counter(s.status for s in samples)),
        designs=len(tree.designs),
        valid_designs=sum(1 for d in tree.designs if d.valid),
        sampled_designs=sum(1 for d in tree.designs if d.sample is not None),
        structure=_modal([str((d.structure or {}).get("pattern", "other")) for d in tree.designs if d.valid]),
        family=_modal([str((d.structure or {}).get("family", "other")) for d in tree.designs if d.valid]),
        shortcuts=_count_shortcuts(samples),
    )
    for k in ks:
        if len(scored) < k:
            score.avg[k] = score.pass_[k] = score.maj[k] = None
            continue
        score.avg[k] = avg_at_k([s.correct or 0.0 for s in scored[:k]])
        score.pass_[k] = pass_at_k(len(scored), int(sum(correct)), k)
        score.maj[k] = maj_at_k([s.answer for s in scored], correct, k) if votes(domain) else None
    return score


def check_budgets(ks: Sequence[int], n: int) -> list[int]:
    """The sorted distinct budgets; each must satisfy 1 <= k <= n."""
    if n < 1:
        raise EvalError(f"samples per task must be >= 1, got n={n}")
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise EvalError(f"k={bad[0]} is not in 1..n={n}: pass@k needs k <= n samples per task; raise --n or lower --k")
    return sorted(set(ks)) or [n]


def _ci(values: list[float], n_boot: int, seed: int) -> dict[str, Any]:
    if not values:
        return {"mean": None, "ci95": None, "tasks": 0}
    low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed)
    return {"mean": fmean(values), "ci95": [low, high], "tasks": len(values)}


def summarize(
    scores: Sequence[TaskScore], ks: Sequence[int], *, n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0
) -> dict[str, Any]:
    """A method's numbers on a set of tasks: each metric's mean over tasks with a 95% bootstrap CI,
    budgets per task, validity, execution statuses and error counts."""
    out: dict[str, Any] = {"tasks": len(scores)}
    metrics: dict[str, Any] = {}
    metric_errors = 0
    for k in ks:
        for name, attr in (("avg", "avg"), ("pass", "pass_"), ("maj", "maj")):
            per_task = [getattr(s, attr).get(k) for s in scores]
            values = [v for v in per_task if v is not None]
            if name == "maj" and not any(votes(s.domain) for s in scores):
                continue
            metrics[f"{name}@{k}"] = _ci(values, n_boot, seed)
        metric_errors = max(metric_errors, sum(1 for s in scores if s.avg.get(k) is None))
    out["metrics"] = metrics
    out["metric_errors"] = metric_errors  # tasks left out of some metric: fewer than k scored samples
    samples = sum(s.samples for s in scores)
    out["samples"] = samples
    out["reward_errors"] = sum(s.reward_errors for s in scores)
    recorded = [s.shortcuts for s in scores if s.shortcuts is not None]
    out["shortcuts"] = (
        {name: sum(c.get(name, 0) for c in recorded) for name in SHORTCUT_CLASSES} if recorded else None
    )  # samples the reward refused as a shortcut, per class (None: records from before the counters)
    statuses = Counter()
    for s in scores:
        statuses.update(s.statuses)
    out["exec_status"] = {st: statuses.get(st, 0) for st in (*EXECUTION_STATUSES, INVALID_DESIGN)}
    sampled = sum(s.sampled_designs for s in scores)
    valid_sampled = sum(s.valid_designs for s in scores if s.sampled_designs)
    out["valid_script_rate"] = valid_sampled / sampled if sampled else None
    n_tasks = len(scores) or 1
    out["budget"] = {
        "tokens_per_task": sum(s.tokens for s in scores) / n_tasks,
        "prompt_tokens_per_task": sum(s.prompt_tokens for s in scores) / n_tasks,
        "agent_calls_per_task": sum(s.agent_calls for s in scores) / n_tasks,
        "tokens_per_sample": sum(s.tokens for s in scores) / samples if samples else 0.0,
        "agent_calls_per_sample": sum(s.agent_calls for s in scores) / samples if samples else 0.0,
        "designer_calls_per_sample": sum(s.sampled_designs for s in scores) / samples if samples else 0.0,
    }
    return out


def flat_metrics(summary: dict[str, Any], prefix: str) -> dict[str, float]:
    """A summary as flat ``prefix + name`` floats for a metrics log (e.g. the trainer's ``val/``)."""
    out: dict[str, float] = {}
    for name, m in summary["metrics"].items():
        if m["mean"] is not None:
            out[prefix + name] = m["mean"]
            out[prefix + name + "/ci_low"], out[prefix + name + "/ci_high"] = m["ci95"]
    out[prefix + "metric_errors"] = summary["metric_errors"]
    out[prefix + "eval_reward_errors"] = summary["reward_errors"]
    for name, count in (summary.get("shortcuts") or {}).items():
        out[prefix + "shortcut/" + name] = count
    for key, value in summary["budget"].items():
        out[prefix + "budget/" + key] = value
    return out
