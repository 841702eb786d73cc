"""Warm start for the AT-GRPO CPU run: a short SFT that teaches the tiny model the Plan-Path answer format.

    python scripts/at_grpo_warm_start.py OUT [--steps 60]      # prints the merged model folder

Why: the random tiny model (and the 135M embedded one) never writes a move list the environment can parse,
so every candidate of every group scores the same and Eq. 1 gives zero advantages (nothing to learn).

What: the prompts the sandbox really sends to the two agents of ``at_plan_t2`` on 5x5 Plan-Path boards
(collected with a scripted team), each answered several ways:

- PlanAgent: ``<delivery>##### [M]</delivery>`` with a uniformly random move M (parsable, random content),
  or ``<delivery>I am not sure.</delivery>`` (not parsable: s_fmt = 0), one in two of each;
- ToolAgent: ``<delivery>```python\\nprint("[M]")\\n```</delivery>`` with a random move (short, runs).

No reply depends on the board, so the warm-started policy knows the format and nothing of the task: what
the RL run then gains (more parsable answers, moves toward the goal) comes from the AT-GRPO updates.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

TEMPLATE = "at_plan_t2"
TRAIN = {"source": "planpath", "split": "train", "limit": 64, "env": {"size": 5, "block_ratio": 0.22}}
MOVES = "UDLR"
UNPARSABLE = "<delivery>I am not sure.</delivery>"


def plan_reply(move: str) -> str:
    return f"<delivery>##### [{move}]</delivery>"


def tool_reply(move: str) -> str:
    return f'<delivery>```python\nprint("[{move}]")\n```</delivery>'


def team_prompts(n_tasks: int) -> list[tuple[str, list[dict]]]:
    """(agent, chat messages) of every agent call of the template on the first n train boards."""
    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.config import RolloutConfig
    from metaagent.rollout.engine import RolloutEngine

    rng = random.Random(0)
    prompts: list[tuple[str, list[dict]]] = []

    def record(request) -> str:
        prompts.append((request.agent, [dict(m) for m in request.messages]))
        move = rng.choice(MOVES)
        return tool_reply(move) if "Tool" in request.agent else plan_reply(move)

    config = RolloutConfig(m_designs=1, n_executions=1, frozen_designer=TEMPLATE, sandbox_workers=2)
    engine = RolloutEngine(None, ScriptedPolicy(record), config)
    try:
        engine.rollout(load_tasks(DatasetSpec(**TRAIN))[:n_tasks], seed=0)
    finally:
        engine.close()
    return prompts


def sft_rows(prompts: list[tuple[str, list[dict]]], seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for agent, messages in prompts:
        if "Tool" in agent:
            replies = [tool_reply(rng.choice(MOVES)) for _ in range(2)]
        else:
            replies = [plan_reply(rng.choice(MOVES)), UNPARSABLE]
        rows += [{"messages": [*messages, {"role": "assistant", "content": r}], "kind": "executor"} for r in replies]
    return rows


def warm_start(out: Path, steps: int = 60, n_tasks: int = 12) -> str:
    from metaagent.sft.warm import sft_on_rows

    return sft_on_rows(sft_rows(team_prompts(n_tasks)), out, steps=steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(warm_start(Path(args.out), args.steps))


if __name__ == "__main__":
    main()
