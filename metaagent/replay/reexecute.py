"""Re-execute a recorded design with a given model, to check reproducibility or study a new checkpoint.

The recorded execution's seed, and the executor sampling, sandbox limits and reward config of the record's
own ``config`` (the resolved training config the engine stored in the tree) are reused, so with the same
model and backend the agent turns come out identical (the policy derives each call's seed from the
execution seed). What could not be taken from the record is said in ``RerunResult.notes``:

- records without a rollout config are re-run with :class:`~metaagent.rollout.config.RolloutConfig`
  defaults;
- validation records (kind ``val``) of a config with ``trainer.val_greedy: true`` are re-run greedily,
  which is how the trainer validates.

A tree with a budget tag (``RolloutTree.budget``) is re-run under that budget's cap (``LOW``: the recorded
``rollout.budget.low_max_calls``). ``control=True`` re-runs an execution of the tree's budget-matched
single-agent control (``RolloutTree.control``) instead of a design's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from metaagent.config import ConfigError, from_dict
from metaagent.data.tasks import Task
from metaagent.policy.base import Policy, PolicyError, SamplingParams
from metaagent.policy.factory import build_policy
from metaagent.records import CheckReport, Design, Execution, RewardRecord
from metaagent.rewards import RewardConfig, score_execution
from metaagent.rewards.score import upgrade_reward_section
from metaagent.rollout.budget import capped_limits
from metaagent.workflow import SandboxPool, default_tools

from .errors import ReplayError
from .run import Run, TreeRef, load_run


@dataclass
class RerunResult:
    """A recorded execution next to its re-execution."""

    where: str  # file:line of the tree
    task_id: str
    design: int
    execution: int
    model: str
    recorded: Execution
    rerun: Execution
    seed: int | None
    sampling: dict[str, Any]
    limits: dict[str, Any]
    identical_turns: bool
    first_difference: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def same_answer(self) -> bool:
        return self.recorded.answer == self.rerun.answer

    @property
    def same_reward(self) -> bool:
        a, b = self.recorded.reward, self.rerun.reward
        return (a.total if a else None) == (b.total if b else None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(same_answer=self.same_answer, same_reward=self.same_reward)
        return out


# ---- what to reuse from the record -------------------------------------------------------------------------


def _rollout_section(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The rollout config in a record's config: a TrainConfig dict (``rollout:``) or a RolloutConfig dict."""
    section = config.get("rollout")
    if isinstance(section, Mapping):
        return section
    if "executor" in config and "limits" in config:
        return config
    return None


def recorded_settings(
    ref: TreeRef, overrides: Mapping[str, Any] | None = None
) -> tuple[SamplingParams, dict[str, Any], Any, list[str]]:
    """Executor sampling, limits and reward config of a record, and notes on what was not recorded."""
    from metaagent.rollout.config import RolloutConfig, SamplingConfig

    notes: list[str] = []
    config = ref.tree.config
    section = _rollout_section(config)
    if section is None:
        notes.append(
            "the record has no rollout config: executor sampling and limits are RolloutConfig defaults"
        )
        rollout = RolloutConfig()
    else:
        try:
            rollout = RolloutConfig(
                executor=from_dict(SamplingConfig, section.get("executor") or {}, where="rollout.executor"),
                limits=dict(section.get("limits") or RolloutConfig().limits),
                budget=dict(section.get("budget") or {}),
            )
        except ConfigError as e:
            raise ReplayError(
                f"the record's rollout config cannot be used ({e}); re-run with sampling overrides"
            ) from None
    params = rollout.executor.params()
    trainer = config.get("trainer") if isinstance(config.get("trainer"), Mapping) else {}
    if ref.kind == "val" and trainer.get("val_greedy"):
        params = params.replace(temperature=0.0)
        notes.append("validation record with trainer.val_greedy: executor sampling is greedy")
    if overrides:
        try:
            params = params.replace(**dict(overrides))
        except (TypeError, ValueError) as e:
            raise ReplayError(f"bad sampling override {dict(overrides)}: {e}") from None
        notes.append(f"sampling overridden: {dict(overrides)}")
    reward_section = config.get("reward")
    if isinstance(reward_section, Mapping):
        try:
            reward = RewardConfig(**upgrade_reward_section(reward_section))
        except (TypeError, ValueError) as e:
            raise ReplayError(f"the record's reward config cannot be used: {e}") from None
    else:
        reward = RewardConfig()
        notes.append("the record has no reward config: scored with RewardConfig defaults")
    limits = capped_limits(rollout.limits, ref.tree.budget, rollout.budget.low_max_calls)
    if limits != dict(rollout.limits):
        notes.append(f"budget {ref.tree.budget}: at most {limits['max_agent_calls']} agent calls per execution")
    return params, limits, reward, notes


def build_rerun_policy(model: str, backend: str = "hf", model_key: str | None = None) -> Policy:
    """The policy for ``--model``: errors (unknown backend, no model there) as :class:`ReplayError`."""
    from metaagent.learn.checkpoint import CheckpointError, checkpoint_model

    try:
        path = checkpoint_model(model, key=model_key)
    except CheckpointError as e:
        raise ReplayError(str(e)) from None
    try:
        return build_policy(backend, path)
    except (OSError, ValueError) as e:  # FileNotFoundError for a missing model, ValueError for bad options
        raise ReplayError(f"cannot build the {backend!r} policy for model {model!r}: {e}") from None


# ---- comparing executions ----------------------------------------------------------------------------------


def first_difference(a: Execution, b: Execution) -> str | None:
    """Where two executions' agent turns first differ (role, prompt, response tokens); None if identical."""
    for k, (x, y) in enumerate(zip(a.turns, b.turns)):
        if x.role != y.role:
            return f"turn {k}: role {x.role!r} vs {y.role!r}"
        if x.messages != y.messages:
            return f"turn {k} ({x.role}): the prompt differs"
        if x.response_ids != y.response_ids or x.response != y.response:
            at = next(
                (i for i, (p, q) in enumerate(zip(x.response_ids, y.response_ids)) if p != q),
                min(len(x.response_ids), len(y.response_ids)),
            )
            return (
                f"turn {k} ({x.role}): the response differs from token {at} "
                f"({len(x.response_ids)} vs {len(y.response_ids)} tokens)"
            )
    if len(a.turns) != len(b.turns):
        return f"{len(a.turns)} vs {len(b.turns)} agent turns"
    return None


# ---- re-running --------------------------------------------------------------------------------------------


def _pick(
    run: Run, task: str, design: int, execution: int, step: int | None, kind: str | None, control: bool = False
):
    refs = run.select(task, step=step, kind=kind)
    notes = []
    if len(refs) > 1:
        notes.append(f"{len(refs)} trees match; re-ran the first ({refs[0].where}); narrow with step/kind")
    ref = refs[0]
    if control:
        c = ref.tree.control
        if c is None:
            raise ReplayError(f"task {task!r} at {ref.where} has no control (algo.designer_baseline was not control)")
        executions = {e.index: e for e in c.executions}
        if execution not in executions:
            raise ReplayError(f"the control of task {task!r} has executions {sorted(executions)}, not {execution}")
        holder = Design(index=-1, source=c.source, sample=None, script=c.script, check=CheckReport(ok=True))
        return ref, holder, executions[execution], notes
    designs: dict[int, Design] = {d.index: d for d in ref.tree.designs}
    if design not in designs:
        raise ReplayError(f"task {task!r} at {ref.where} has designs {sorted(designs)}, not {design}")
    d = designs[design]
    if not d.valid:
        errors = "; ".join(str(e) for e in d.check.errors) or "no script"
        raise ReplayError(
            f"design {design} of task {task!r} is invalid ({errors}): there is nothing to execute"
        )
    executions = {e.index: e for e in d.executions}
    if execution not in executions:
        raise ReplayError(
            f"design {design} of task {task!r} has executions {sorted(executions)}, not {execution}"
        )
    return ref, d, executions[execution], notes


def rerun(
    run: Run | Any,
    task: str,
    policy: Policy | str,
    *,
    design: int = 0,
    execution: int = 0,
    step: int | None = None,
    kind: str | None = None,
    backend: str = "hf",
    model_key: str | None = None,
    sampling: Mapping[str, Any] | None = None,
    pool: Any = None,
    control: bool = False,
) -> RerunResult:
    """Re-execute design ``design`` of ``task`` with ``policy`` (a Policy, or a model name / HF folder /
    checkpoint / run directory built with ``backend``), with the seed of recorded execution ``execution``.

    Args:
        sampling: overrides of the recorded executor sampling (e.g. ``{"temperature": 0.0}``).
        pool: a ``metaagent.workflow.SandboxPool`` to run in (a one-worker pool is started otherwise).
        control: re-run execution ``execution`` of the tree's budget-matched control (``design`` is ignored;
            ``RerunResult.design`` is -1).
    """
    run = load_run(run)
    ref, d, recorded, notes = _pick(run, task, design, execution, step, kind, control)
    params, limits, reward_config, more = recorded_settings(ref, sampling)
    notes += more
    task_record = Task.coerce(ref.tree.task)
    if isinstance(policy, str):
        policy = build_rerun_policy(policy, backend, model_key)
    own_pool = pool is None
    pool = pool or SandboxPool(workers=1)
    try:
        again = pool.run(
            d.script,  # type: ignore[arg-type]
            task_record,
            policy,
            limits,
            sampling=params,
            tools=default_tools(task_record),
            seed=recorded.seed,
            index=recorded.index,
        )
    except PolicyError as e:
        raise ReplayError(f"the policy {policy.model_id} failed during the re-run: {e}") from None
    finally:
        if own_pool:
            pool.close()
    again.seed = recorded.seed
    again.reward = _score(task_record, again, reward_config)
    diff = first_difference(recorded, again)
    return RerunResult(
        where=ref.where,
        task_id=task,
        design=d.index if control else design,
        execution=execution,
        model=policy.model_id,
        recorded=recorded,
        rerun=again,
        seed=recorded.seed,
        sampling=asdict(params),
        limits=limits,
        identical_turns=diff is None,
        first_difference=diff,
        notes=notes,
    )


def _score(task: Any, execution: Execution, config: Any) -> RewardRecord:
    try:
        return score_execution(task, execution, config)
    except Exception as e:  # noqa: BLE001 - as the engine: an unscorable execution is recorded, never a 0
        return RewardRecord(None, None, None, error=f"reward could not be computed: {type(e).__name__}: {e}")
