"""Real run directories for the replay tests, produced by the rollout engine (a module with a unique name:
tests/ has no packages).

- :func:`make_tiny_run`: the tiny random model as designer and executor (it writes invalid scripts, a real
  case) plus fixed multi-agent rollouts (frozen templates) with the same model, so there are valid designs
  with agent turns and tool calls; credit assigned; ``metrics.jsonl`` from ``MetricsLogger`` with
  ``rollout_metrics`` per step and ``schedule/*`` keys; a validation file; ``config.yaml`` and ``run.json``.
- :func:`make_scripted_pair`: two runs of the same math tasks through the real engine with a scripted
  executor whose correctness is chosen per task, so the comparison outcomes are known in advance.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from metaagent.config import to_dict
from metaagent.credit import assign_credit
from metaagent.data import Task, load_bundled
from metaagent.learn.metrics import MetricsLogger
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import write_trees
from metaagent.rollout.config import RolloutConfig, SamplingConfig
from metaagent.rollout.engine import FrozenDesign, RolloutEngine
from metaagent.rollout.metrics import rollout_metrics
from metaagent.train.config import ScheduleConfig, TrainConfig, TrainerConfig
from metaagent.train.schedule import StageSchedule
from metaagent.workflow.protocol import DELIVERY_CLOSE

STEPS = 4
STAGE_LEN = 2
VAL_STEP = 2
#: frozen template per training step and domain (so structure shares move over steps)
FROZEN = {
    "math": ["reflection", "single_math", "ensemble_judge", "reflection"],
    "code": ["reflection_code", "single_code", "solver_tester", "ensemble_code"],
}


def tiny_tasks() -> list[Task]:
    """Two bundled math tasks and two bundled code tasks (one stdin, one call-based)."""
    math = load_bundled("train", "math")[:2]
    code = load_bundled("train", "code")
    stdin = next(t for t in code if "fn_name" not in (t.tests or {}))
    call = next(t for t in code if "fn_name" in (t.tests or {}))
    return [*math, stdin, call]


def tiny_config(run_dir: Path) -> TrainConfig:
    return TrainConfig(
        rollout=RolloutConfig(
            m_designs=2,
            n_executions=2,
            k_templates=1,
            designer=SamplingConfig(temperature=1.0, max_tokens=40),
            executor=SamplingConfig(temperature=1.0, max_tokens=10, stop=[DELIVERY_CLOSE]),
            limits={"timeout_s": 20.0},
            sandbox_workers=2,
            max_inflight=4,
        ),
        reward={"domains": {"code": {"workers": 1, "time_limit_s": 2.0}}},
        schedule=ScheduleConfig(mode="stagewise", stage_len=STAGE_LEN),
        trainer=TrainerConfig(steps=STEPS, out=str(run_dir), tensorboard=False),
    )


def _write_run_files(run_dir: Path, cfg: TrainConfig, run_id: str, models: dict[str, str]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "seed": 0, "models": models}))


def make_tiny_run(run_dir: Path, policy: Any, pool: Any, *, run_id: str = "tiny-a") -> Path:
    """A run directory of real tiny-model records (see the module docstring)."""
    cfg = tiny_config(run_dir)
    tasks = tiny_tasks()
    schedule = StageSchedule(cfg.schedule.mode, cfg.schedule.stage_len)
    engine = RolloutEngine(
        designer=policy,
        executor=policy,
        config=cfg.rollout,
        pool=pool,
        reward_config=cfg.reward_config(),
        run_id=run_id,
        record_config=cfg.to_dict(),
    )
    _write_run_files(run_dir, cfg, run_id, engine.models())
    logger = MetricsLogger(run_dir, tensorboard=False)
    try:
        for step in range(STEPS):
            trees = engine.rollout(tasks[step % 2 :: 2], step=step, seed=0)  # the tiny designer
            for domain in ("math", "code"):
                frozen = FrozenDesign.resolve(FROZEN[domain][step])
                trees += engine.rollout(
                    [t for t in tasks if t.domain == domain], step=step, seed=0, frozen=frozen, n_executions=1
                )
            credit = assign_credit(trees)
            write_trees(run_dir / "rollouts" / f"step_{step:06d}.jsonl", trees)
            stage = schedule.stage(step)
            logger.log(
                step,
                {
                    **rollout_metrics(trees),
                    **credit.metrics,
                    "schedule/active": stage.name,
                    "schedule/stage": stage.index,
                },
            )
            if step == VAL_STEP:
                greedy = cfg.rollout.executor.params().replace(temperature=0.0)  # trainer.val_greedy
                val = engine.rollout(
                    tasks[:1],
                    step=step,
                    seed=1,
                    mode="eval",
                    n_executions=1,
                    frozen=FrozenDesign.resolve("single_math"),
                    executor_sampling=greedy,
                )
                write_trees(run_dir / "rollouts" / f"val_step_{step:06d}.jsonl", val)
    finally:
        logger.close()
    return run_dir


def _fixed_engine(
    template: str,
    config: RolloutConfig,
    executor: Any,
    pool: Any,
    run_id: str,
    record_config: dict[str, Any],
    reward_config: Any = None,
) -> RolloutEngine:
    """An engine whose every design is the frozen ``template`` (a fixed multi-agent system)."""
    return RolloutEngine(
        designer=None,
        executor=executor,
        config=replace(config, frozen_designer=template),
        pool=pool,
        reward_config=reward_config,
        run_id=run_id,
        record_config=record_config,
    )


def make_fixed_run(run_dir: Path, policy: Any, pool: Any, *, run_id: str = "tiny-b") -> Path:
    """One step of single-agent fixed rollouts with the tiny model on the tasks of :func:`make_tiny_run`."""
    cfg = tiny_config(run_dir)
    _write_run_files(run_dir, cfg, run_id, {"executor": policy.model_id})
    trees = []
    for domain, name in (("math", "single_math"), ("code", "single_code")):
        engine = _fixed_engine(name, cfg.rollout, policy, pool, run_id, cfg.to_dict(), cfg.reward_config())
        trees += engine.rollout(
            [t for t in tiny_tasks() if t.domain == domain], step=0, seed=0, n_executions=1
        )
    write_trees(run_dir / "rollouts" / "step_000000.jsonl", trees)
    return run_dir


# ---- scripted runs with known outcomes ------------------------------------------------------------------


def scripted_tasks() -> list[Task]:
    return load_bundled("train", "math")[:3]


def answering_policy(correct: set[str], tasks: list[Task]) -> ScriptedPolicy:
    """Agents answer the gold answer for questions of tasks in ``correct`` and -1 otherwise; critics approve."""
    gold = {t.question: (t.answer if t.id in correct else "-1") for t in tasks}

    def reply(request: ChatRequest) -> str:
        system = request.messages[0]["content"]
        if re.search(r"CORRECT", system):
            return f"Looks right.<delivery>CORRECT{DELIVERY_CLOSE}"
        text = "\n".join(m["content"] for m in request.messages)
        answer = next((a for q, a in gold.items() if q in text), "-1")
        return f"Step by step.<delivery>\\boxed{{{answer}}}{DELIVERY_CLOSE}"

    return ScriptedPolicy(reply, model_id="scripted-solver")


def make_scripted_pair(root: Path, pool: Any) -> tuple[Path, Path, dict[str, str]]:
    """Runs A (cold start) and B (improved) of three math tasks and the expected outcome per task:

    task 0: single_math in both, wrong in A, right in B      -> only B, same structure
    task 1: single_math in A (wrong), reflection in B (right) -> only B, structure changed
    task 2: single_math in both, wrong in both                -> neither
    """
    tasks = scripted_tasks()
    cfg = RolloutConfig(
        m_designs=1, n_executions=2, sandbox_workers=2, max_inflight=4, limits={"timeout_s": 20.0}
    )
    plans = {
        "A": (set(), ["single_math", "single_math", "single_math"]),
        "B": ({tasks[0].id, tasks[1].id}, ["single_math", "reflection", "single_math"]),
    }
    dirs = {}
    for name, (correct, frozen) in plans.items():
        policy = answering_policy(correct, tasks)
        trees = []
        for task, template in zip(tasks, frozen):
            engine = _fixed_engine(template, cfg, policy, pool, f"scripted-{name}", {"rollout": to_dict(cfg)})
            trees += engine.rollout([task], step=0, seed=0, mode="eval")
        dirs[name] = root / f"scripted_{name}"
        write_trees(dirs[name] / "rollouts" / "step_000000.jsonl", trees)
    expected = {
        tasks[0].id: "only B: same structure",
        tasks[1].id: "only B: structure changed",
        tasks[2].id: "neither",
    }
    return dirs["A"], dirs["B"], expected


# ---- HTML checks ------------------------------------------------------------------------------------------

#: a reference to anything outside the file: an external src/href, a script file, a CSS import or url()
NETWORK_PATTERNS = {
    "external src/href": re.compile(
        r"""\b(?:src|href)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//""", re.IGNORECASE
    ),
    "script file": re.compile(r"<script\b[^>]*\bsrc\s*=", re.IGNORECASE),
    "css import": re.compile(r"@import", re.IGNORECASE),
    "css url()": re.compile(r"url\(\s*['\"]?\s*(?!data:)", re.IGNORECASE),
    "link element": re.compile(r"<link\b", re.IGNORECASE),
    "font face": re.compile(r"@font-face", re.IGNORECASE),
}


def network_references(html: str) -> list[str]:
    return [name for name, pattern in NETWORK_PATTERNS.items() if pattern.search(html)]


def embedded_pngs(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]
