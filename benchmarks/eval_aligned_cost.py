"""Cost of evaluation-aligned credit per training step: re-executions (coalitions, prefix-judge
continuations, corrections) and judge calls, with the default configuration (``prefix_judge: mc``, 4
continuations, ``nbest: 4``, exact Shapley) beside the cheaper rule prefix judge.

Setup (the team and tasks of the end-to-end test ``tests/train/test_eval_aligned_run.py``, with a real warm
start in place of its scripted replies): the tiny model fine-tuned on the team's own agent prompts to answer
``\\boxed{3}`` (two in three) or "I think it is 3.", a frozen Solver -> Checker team, the tasks "1 + 2" (success
possible) and "2 + 2" (always a failure), batch 2 x 4 executions, executor-only training, helpfulness judge
``rule:gold``. Prints per variant and step: success / failure episodes, runs by kind, judge calls, pairs, the
stage's wall time and the step's, then the mean ratio of runs and time to the rule-judge variant.

    python benchmarks/eval_aligned_cost.py [--steps 2] [--variants mc rule:gold] [--warm-steps 60]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from metaagent.data.tasks import Task
from metaagent.policy import ScriptedPolicy
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.engine import FrozenDesign, RolloutEngine
from metaagent.sft.warm import sft_on_rows
from metaagent.train.config import TrainConfig
from metaagent.train.loop import TrainLoop

SCRIPT = (
    'solver = Agent("Solver", "Solve it.")\n'
    'checker = Agent("Checker", "Check the answer and give the final one.")\n'
    "draft = solver(task)\n"
    'submit(checker(task + "\\n" + draft))\n'
)
TAGGED = "<delivery>\\boxed{3}</delivery>"
UNTAGGED = "I think it is 3."
TASKS = [
    {"id": "ea-3", "domain": "math", "question": "What is 1 + 2?", "answer": "3", "source": "bundled", "split": "train", "metadata": {}},
    {"id": "ea-4", "domain": "math", "question": "What is 2 + 2?", "answer": "4", "source": "bundled", "split": "train", "metadata": {}},
]  # fmt: skip

KEYS = ("success_episodes", "failure_episodes", "coalition_runs", "prefix_runs", "correction_runs", "runs",
        "judge_calls", "prefix_queries", "nbest_samples", "pairs", "no_pair")  # fmt: skip


def team_prompts() -> list[list[dict]]:
    """The chat messages of every agent call of the frozen team on TASKS (2 executions each), in a fixed order:
    the sandbox workers call in an order that depends on timing, and the warm-start data must not."""
    prompts: list[list[dict]] = []

    def record(request) -> str:
        prompts.append([dict(m) for m in request.messages])
        return TAGGED if len(prompts) % 2 else UNTAGGED  # the Checker sees drafts of both kinds

    engine = RolloutEngine(
        ScriptedPolicy(["unused"], cycle=True), ScriptedPolicy(record), RolloutConfig(m_designs=1, n_executions=2)
    )
    try:
        engine.rollout([Task.coerce(t) for t in TASKS], seed=0, frozen=FrozenDesign(script=SCRIPT, name="warm"))
    finally:
        engine.close()
    return sorted(prompts, key=lambda m: json.dumps(m, sort_keys=True))


def warm_team(root: Path, steps: int) -> str:
    """SFT the tiny model on the team's agent prompts, each answered tagged (two in three) and untagged, so that
    some episodes succeed and some fail; returns the merged model folder."""
    rows = [
        {"messages": [*p, {"role": "assistant", "content": r}], "kind": "executor"}
        for p in team_prompts()
        for r in (TAGGED, TAGGED, UNTAGGED)
    ]
    return sft_on_rows(rows, root, steps=steps, name="sft")


def run(root: Path, model: str, prefix_judge: str, steps: int) -> list[dict]:
    cfg = TrainConfig.load(None, [
        f"policy.model={model}", f"data.train=[{{source: bundled, path: {root / 'tasks.jsonl'}}}]", "data.val=[]",
        "data.batch_size=2", "rollout.n_executions=4", "rollout.executor.max_tokens=12",
        "rollout.executor.stop=['</delivery>']", f"rollout.frozen_designer={root / 'team.py'}",
        "rollout.sandbox_workers=2", "schedule.mode=executor_only", "algo.estimator=eval_aligned",
        f"eval_aligned.prefix_judge={prefix_judge}", "optim.dpo=true", "optim.kl_coef=0.001", "optim.lr=1e-3",
        f"trainer.steps={steps}", "trainer.save_every=0", "trainer.tensorboard=false", "trainer.show_samples=false",
        f"trainer.out={root / ('run_' + prefix_judge.replace(':', '_'))}",
    ])  # fmt: skip
    with TrainLoop(cfg) as trainer:
        return [r.metrics for r in trainer.train()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=["mc", "rule:gold"])
    ap.add_argument("--warm-steps", type=int, default=60, help="SFT steps of the warm start (fewer: faster, less warm)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="eval_aligned_cost_"))
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    (root / "team.py").write_text(SCRIPT)
    model = warm_team(root, args.warm_steps)
    means = {}
    print("variant    step " + " ".join(f"{k:>16}" for k in KEYS) + "  stage_s  step_s")
    for variant in args.variants:
        rows = run(root, model, variant, args.steps)
        for step, m in enumerate(rows):
            cells = " ".join(f"{m.get('credit/eval_aligned/' + k, 0.0):16.0f}" for k in KEYS)
            print(f"{variant:10} {step:4} {cells}  {m['credit/eval_aligned/time_s']:7.1f} {m['time/step_s']:7.1f}")
        means[variant] = {k: sum(m[k] for m in rows) / len(rows) for k in ("credit/eval_aligned/runs",
                          "credit/eval_aligned/judge_calls", "credit/eval_aligned/time_s", "time/step_s")}  # fmt: skip
    base = args.variants[-1]
    for variant in args.variants[:-1]:
        ratio = {k.split("/")[-1]: means[variant][k] / max(means[base][k], 1e-9) for k in means[variant]}
        print(f"{variant} / {base}: " + ", ".join(f"{k} x{v:.2f}" for k, v in ratio.items()))
    for variant, m in means.items():
        print(f"{variant}: per step {m['credit/eval_aligned/runs']:.1f} re-runs, {m['credit/eval_aligned/judge_calls']:.1f} "
              f"judge calls, stage {m['credit/eval_aligned/time_s']:.1f} s of a {m['time/step_s']:.1f} s step")


if __name__ == "__main__":
    main()
