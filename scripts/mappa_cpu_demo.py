"""MAPPA end to end on CPU: the MathChat team trained with REINFORCE++ on the rule coach's per-action scores.

    python scripts/mappa_cpu_demo.py [--steps 16] [--out runs/mappa_cpu_demo]

1. Warm start: a few SFT steps teach the tiny random model (real tokenizer) to answer every MathChat agent
   prompt either ``<delivery>\\boxed{3}</delivery>`` or ``I think it is 3.`` (about half each), so the coach's
   scores vary. The prompts are the ones the sandbox really sends for the ``mappa_mathchat`` template.
2. Train: ``configs/mappa_tiny.yaml`` (rule coach ``mappa_format``: 5 for a delivery block, +3 for a boxed
   answer, +2 for the right final answer, shown only to the Verifier's final action), beta 0.01 with the
   reference pre-pass, global normalisation, PPO-clip 0.2, token-mean.
3. Print the mean coach score per step (all actions and per agent) and write ``OUT/curve.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TAGGED = "<delivery>\\boxed{3}</delivery>"
UNTAGGED = "I think it is 3."
TRAIN = {"source": "bundled", "split": "train", "levels": [1], "domain": "math"}
ROLES = ("ProblemSolver", "CodeExecutor", "Verifier")


def mathchat_prompts(n_tasks: int) -> list[list[dict]]:
    """The chat messages each MathChat agent receives (the sandbox runs the template with a scripted team)."""
    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.config import RolloutConfig
    from metaagent.rollout.engine import RolloutEngine

    prompts: list[list[dict]] = []

    def record(request) -> str:
        prompts.append([dict(m) for m in request.messages])
        return TAGGED

    config = RolloutConfig(m_designs=1, n_executions=1, frozen_designer="mappa_mathchat", sandbox_workers=2)
    engine = RolloutEngine(None, ScriptedPolicy(record), config)
    try:
        engine.rollout(load_tasks(DatasetSpec(**TRAIN))[:n_tasks], seed=0)
    finally:
        engine.close()
    return prompts


def warm_start(out: Path, steps: int = 60) -> str:
    """SFT the tiny model on every agent prompt answered both ways; returns the merged model folder."""
    from metaagent.sft.warm import sft_on_rows

    rows = [
        {"messages": [*p, {"role": "assistant", "content": reply}], "kind": "executor"}
        for p in mathchat_prompts(12)
        for reply in (TAGGED, UNTAGGED)
    ]
    return sft_on_rows(rows, out, steps=steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--out", default="runs/mappa_cpu_demo")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainLoop

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    t0 = time.perf_counter()
    model = warm_start(out)
    print(f"warm start: {model} ({time.perf_counter() - t0:.0f} s)")
    cfg = TrainConfig.load(
        "mappa_tiny",
        [
            f"policy.model={model}",
            f"data.train=[{json.dumps(TRAIN)}]",
            "data.batch_size=4",
            "rollout.n_executions=4",
            "rollout.executor.max_tokens=16",
            "optim.lr=1e-3",
            f"trainer.steps={args.steps}",
            f"trainer.out={out / 'run'}",
        ],
    )
    curve = []
    with TrainLoop(cfg) as trainer:
        for result in trainer.train():
            m = result.metrics
            row = {"step": result.step, "score": m.get("judge/score_mean")}
            row.update({role: m.get(f"judge/score_mean/{role}") for role in ROLES})
            row.update(
                actions=m.get("samples/token_stage_actions"), kl=m.get("credit/ref_kl_mean"),
                errors=m.get("judge/errors"), step_s=m.get("time/step_s"),
            )  # fmt: skip
            curve.append(row)
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    (out / "curve.json").write_text(json.dumps(curve, indent=1))
    first = sum(r["score"] for r in curve[:4]) / 4
    later = sum(r["score"] for r in curve[len(curve) // 2 :]) / len(curve[len(curve) // 2 :])
    print(f"mean coach score: first 4 steps {first:.2f}, second half {later:.2f} ({time.perf_counter() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
