"""UnityMAS-O's reflective code loop (workflow D) end to end on CPU with a warm-started tiny model, under
``unity/whiten``: a curve in minutes instead of hours.

    python scripts/unity_code_warm_tiny.py [--steps 16] [--out runs/unity_code_warm_tiny] [--curve DIR] [overrides...]

Extra ``section.field=value`` overrides go to the training config, e.g. ``'algo.options={mode: gae}'`` for the
paper's GAE with a critic instead of ``whiten``.

1. Tasks: three bundled level-1 stdin problems (absolute_difference, square, sum_two), every one in every step.
2. Warm start: a few SFT steps teach the tiny random model (real tokenizer) the prompts the sandbox really sends
   in this workflow (collected with a scripted team over all three rounds), each answered two ways, about half
   each: Planner and Reflector with or without the ``<delivery>`` block their format term asks for (0 / -1);
   Coder with the task's reference program (code_references.jsonl, pass rate 1) or ``print(0)`` (passes the
   odd test whose answer is 0). So every role's reward varies, and the coder's correct answer ends the loop
   after round 1.
3. Train: config ``unity_code_cpu`` with that model (code_delta allocator + 0/-1 format term, unity/whiten per
   model, PPO-clip), then the curve (benchmarks/unity_code_curve.py): per-role turn reward, rounds used.

What it shows: the allocator -> whiten -> PPO pipeline moves each role towards what its reward favours (format
for Planner / Reflector, the passing program for the Coder, hence fewer rounds). It is not code ability: the
model only chooses between two memorised answers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

TITLES = ("absolute_difference", "square", "sum_two")
BUNDLED = Path(__file__).resolve().parents[1] / "metaagent" / "data" / "bundled"
PLAN = "<delivery>Read, compute, print.</delivery>"
PLAN_UNTAGGED = "Read and print."
REFLECT = "<delivery>Use the input.</delivery>"
REFLECT_UNTAGGED = "Wrong."
WRONG = "```python\nprint(0)\n```"


def write_tasks(out: Path) -> tuple[Path, dict[str, str]]:
    """The three tasks as a bundled-format jsonl file, and task question -> reference program (fenced)."""
    rows = [json.loads(line) for line in (BUNDLED / "code.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["metadata"]["title"] in TITLES]
    refs = {json.loads(line)["id"]: json.loads(line)["solution"] for line in (BUNDLED / "code_references.jsonl").read_text().splitlines()}
    path = out / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, {r["question"]: f"```python\n{refs[r['id']].strip()}\n```" for r in rows}


def workflow_prompts(tasks_path: Path) -> list[tuple[str, list[dict]]]:
    """(agent, chat messages) of every call of the workflow over the tasks, three full rounds each (the scripted
    coder always fails, so the reflector and rounds 2-3 are reached)."""
    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.config import RolloutConfig
    from metaagent.rollout.engine import RolloutEngine

    prompts: list[tuple[str, list[dict]]] = []

    def reply(request) -> str:
        prompts.append((request.agent, [dict(m) for m in request.messages]))
        return {"Planner": PLAN, "Reflector": REFLECT}.get(request.agent, WRONG)

    config = RolloutConfig(m_designs=1, n_executions=1, frozen_designer="unity_code_reflect", sandbox_workers=2)
    engine = RolloutEngine(None, ScriptedPolicy(reply), config)
    try:
        engine.rollout(load_tasks(DatasetSpec(source="bundled", path=str(tasks_path))), seed=0)
    finally:
        engine.close()
    return prompts


def warm_start(out: Path, tasks_path: Path, refs: dict[str, str], steps: int) -> str:
    """SFT the tiny model on every workflow prompt answered both ways; returns the merged model folder."""
    from metaagent.sft.warm import sft_on_rows

    rows = []
    for agent, messages in workflow_prompts(tasks_path):
        if agent == "Coder":
            ref = next(program for question, program in refs.items() if question in messages[-1]["content"])
            replies = (ref, WRONG)
        else:
            replies = (PLAN, PLAN_UNTAGGED) if agent == "Planner" else (REFLECT, REFLECT_UNTAGGED)
        rows += [{"messages": [*messages, {"role": "assistant", "content": r}], "kind": "executor"} for r in replies]
    return sft_on_rows(rows, out, steps=steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--sft-steps", type=int, default=400)
    parser.add_argument("--out", default="runs/unity_code_warm_tiny")
    parser.add_argument("--curve", default=None, help="curve folder (default OUT/curve)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warm", default=None, help="a warm-started model folder from an earlier run (skips the SFT)")
    parser.add_argument("overrides", nargs="*", help="training config overrides (section.field=value)")
    args = parser.parse_args()

    import torch

    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainLoop

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tasks_path, refs = write_tasks(out)
    model = args.warm or warm_start(out, tasks_path, refs, args.sft_steps)
    print(f"warm start: {model} ({time.perf_counter() - t0:.0f} s)", flush=True)
    cfg = TrainConfig.load("unity_code_cpu", [
        f"policy.model={model}", f'data.train=[{{source: bundled, path: "{tasks_path}"}}]', "data.val=[]",
        "data.batch_size=3", "rollout.executor.max_tokens=40", "optim.lr=1e-3", f"trainer.steps={args.steps}",
        f"trainer.out={out / 'run'}", *args.overrides,
    ])  # fmt: skip

    def show(result) -> None:
        m = result.metrics
        print(f"step {result.step}: " + " ".join(
            f"{k.split('/')[-1]}={m.get(k, float('nan')):.3f}"
            for k in ("reward/turn/Planner", "reward/turn/Coder", "reward/turn/Reflector", "rollout/rounds_used",
                      "credit/execution_reward_mean", "time/step_s")
        ), flush=True)  # fmt: skip

    with TrainLoop(cfg) as trainer:
        trainer.train(on_step=show)
    curve = args.curve or str(out / "curve")
    subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "benchmarks" / "unity_code_curve.py"),
                    str(out / "run"), curve], check=True)  # fmt: skip
    print(f"{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
