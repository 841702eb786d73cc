"""The same tasks under two runs (e.g. SFT cold start vs. an RL checkpoint), as in paper §4.4 / App. C.

Per task and run, a :class:`TaskSide` summarises the trees of the selected step (default: the latest step
at which the task appears): the structure labels of its valid designs and the *modal* one, the roles,
the answers, the mean reward and the solve rate.

Solve rate: the mean over the task's designs of each design's correctness, where an invalid design counts
0 (it has no executions; Eq. 4 gives it reward 0) and a valid design counts the mean ``correct`` of its
scored executions (designs with no scored execution are left out). ``solved`` is ``rate >= threshold``
(default 0.5); None when nothing could be scored.

Outcome of a task (the "which role brings the improvement?" analysis): solved by both, by neither, only
by B (or only by A) under the *same* modal structure (an executor-side gain) or a *changed* one (a
designer flip; a side without a valid design has no structure, so a gain from it is a flip too),
``unscored`` when either side could not be scored, ``missing in A/B`` when a run lacks the task.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any

from .errors import ReplayError
from .run import Run, TreeRef, benchmark_of, load_run
from .summary import LEVELS, design_label

BOTH, NEITHER, UNSCORED = "both", "neither", "unscored"
ONLY_A_SAME, ONLY_A_CHANGED = "only A: same structure", "only A: structure changed"
ONLY_B_SAME, ONLY_B_CHANGED = "only B: same structure", "only B: structure changed"
MISSING_A, MISSING_B = "missing in A", "missing in B"
OUTCOMES = (
    BOTH,
    ONLY_B_SAME,
    ONLY_B_CHANGED,
    ONLY_A_SAME,
    ONLY_A_CHANGED,
    NEITHER,
    UNSCORED,
    MISSING_A,
    MISSING_B,
)
DEFAULT_THRESHOLD = 0.5


@dataclass
class TaskSide:
    """One run's view of one task (at one step)."""

    step: int | None
    trees: int
    designs: int
    valid: int
    structures: dict[str, int]  # label -> number of valid designs with it
    structure: str | None  # the modal label; None when no design is valid
    roles: list[str]
    answers: list[str | None]  # distinct submitted answers, in order
    executions: int
    scored: int
    mean_reward: float | None
    solve_rate: float | None
    solved: bool | None
    where: list[str] = field(default_factory=list)  # file:line of each tree


def task_side(refs: list[TreeRef], level: str = "pattern", threshold: float = DEFAULT_THRESHOLD) -> TaskSide:
    """Summarise the trees of one task in one run (see the module docstring for the solve rate)."""
    designs = [d for r in refs for d in r.tree.designs]
    valid = [d for d in designs if d.valid]
    labels = Counter(design_label(d, level) for d in valid)
    # modal label; ties go to the label seen first
    structure = max(labels, key=lambda l: (labels[l], -list(labels).index(l))) if labels else None
    executions = [e for d in valid for e in d.executions]
    scored = [e for e in executions if e.reward is not None and e.reward.total is not None]
    per_design: list[float] = []
    for d in designs:
        if not d.valid:
            per_design.append(0.0)
            continue
        correct = [
            float(e.reward.correct or 0.0) for e in d.executions if e.reward and e.reward.total is not None
        ]
        if correct:
            per_design.append(fmean(correct))
    rate = fmean(per_design) if per_design else None
    return TaskSide(
        step=refs[0].step if refs else None,
        trees=len(refs),
        designs=len(designs),
        valid=len(valid),
        structures=dict(labels),
        structure=structure,
        roles=list(dict.fromkeys(r for d in valid for r in (d.structure or {}).get("roles", []))),
        answers=list(dict.fromkeys(e.answer for e in executions)),
        executions=len(executions),
        scored=len(scored),
        mean_reward=fmean([float(e.reward.total) for e in scored]) if scored else None,  # type: ignore[union-attr,arg-type]
        solve_rate=rate,
        solved=None if rate is None else rate >= threshold,
        where=[r.where for r in refs],
    )


@dataclass
class TaskComparison:
    task_id: str
    benchmark: str
    domain: str
    a: TaskSide | None
    b: TaskSide | None
    outcome: str


def classify(a: TaskSide | None, b: TaskSide | None) -> str:
    """The outcome of one task (see the module docstring)."""
    if a is None:
        return MISSING_A
    if b is None:
        return MISSING_B
    if a.solved is None or b.solved is None:
        return UNSCORED
    if a.solved and b.solved:
        return BOTH
    if not a.solved and not b.solved:
        return NEITHER
    same = a.structure is not None and a.structure == b.structure
    if b.solved:
        return ONLY_B_SAME if same else ONLY_B_CHANGED
    return ONLY_A_SAME if same else ONLY_A_CHANGED


@dataclass
class Comparison:
    """Per-task comparison of run A and run B."""

    name_a: str
    name_b: str
    level: str
    threshold: float
    tasks: list[TaskComparison]

    def task(self, task_id: str) -> TaskComparison:
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise ReplayError(f"task {task_id!r} is in neither {self.name_a} nor {self.name_b}")

    def summary(self) -> dict[str, Any]:
        """Counts per outcome, and how the tasks solved only by B split (executor gain vs designer flip)."""
        counts = Counter(t.outcome for t in self.tasks)
        only_b = counts[ONLY_B_SAME] + counts[ONLY_B_CHANGED]
        only_a = counts[ONLY_A_SAME] + counts[ONLY_A_CHANGED]
        return {
            "tasks": len(self.tasks),
            "outcomes": {o: counts.get(o, 0) for o in OUTCOMES},
            "only_b": only_b,
            "only_b_same_structure_share": counts[ONLY_B_SAME] / only_b if only_b else None,
            "only_b_structure_changed_share": counts[ONLY_B_CHANGED] / only_b if only_b else None,
            "only_a": only_a,
            "solved_a": sum(1 for t in self.tasks if t.a is not None and t.a.solved),
            "solved_b": sum(1 for t in self.tasks if t.b is not None and t.b.solved),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.name_a,
            "b": self.name_b,
            "level": self.level,
            "threshold": self.threshold,
            "summary": self.summary(),
            "tasks": [asdict(t) for t in self.tasks],
        }


def compare(
    run_a: Run | Any,
    run_b: Run | Any,
    *,
    level: str = "pattern",
    threshold: float = DEFAULT_THRESHOLD,
    kind: str | None = None,
    step_a: int | None = None,
    step_b: int | None = None,
    tasks: list[str] | None = None,
) -> Comparison:
    """Compare every task of two runs (or ``tasks``), each at its latest step unless ``step_a``/``step_b``.

    ``kind`` restricts both runs to one kind of record (``val``, ``eval``, ``train``, ``fixed``, ...).
    """
    if level not in LEVELS:
        raise ReplayError(f"structure level must be one of {tuple(LEVELS)}, got {level!r}")
    if not 0.0 < threshold <= 1.0:
        raise ReplayError(f"the solve threshold must be in (0, 1], got {threshold}")
    run_a, run_b = load_run(run_a), load_run(run_b)
    ids = tasks or list(dict.fromkeys(run_a.task_ids() + run_b.task_ids()))
    rows = []
    for task_id in ids:
        sides = []
        task: dict[str, Any] = {}
        for run, step in ((run_a, step_a), (run_b, step_b)):
            refs = [r for r in run.refs if r.task_id == task_id and (kind is None or r.kind == kind)]
            if step is not None:
                refs = [r for r in refs if r.step == step]
            elif refs:
                refs = run.select(task_id, kind=kind)
            sides.append(task_side(refs, level, threshold) if refs else None)
            task = task or (refs[-1].tree.task if refs else {})
        if sides[0] is None and sides[1] is None:
            if tasks:
                raise ReplayError(f"task {task_id!r} is in neither {run_a.name} nor {run_b.name}")
            continue  # only records of another kind or step
        a, b = sides
        rows.append(
            TaskComparison(task_id, benchmark_of(task), str(task.get("domain", "?")), a, b, classify(a, b))
        )
    return Comparison(run_a.name, run_b.name, level, threshold, rows)
