"""Warm-started tiny models for trainer tests: a few SFT steps on the real prompts give the tiny random model
behaviour with reward variance, so GRPO has something to learn in seconds.

- designer: answers every designer prompt with ``SCRIPT`` (a valid one-agent workflow);
- designer, ``"designer_mixed"``: answers every compact designer prompt with ``SCRIPT`` or ``BROKEN`` (about
  half each; ``BROKEN`` calls an undefined function, so the checker refuses it and the design earns 0);
- executor: answers every agent prompt with ``TAGGED`` or ``UNTAGGED`` (about half each). ``TAGGED`` earns the full
  format reward (delivery tag + boxed answer: R = 0.4), ``UNTAGGED`` none (R = 0), unless "3" happens to be
  the right answer;
- executor, ``"executor_tagged"``: answers every agent prompt with ``TAGGED`` (a valid design's execution then
  nearly always earns the format reward: the designer-learning benchmark's executor, benchmarks/tiny_learning.py).
"""

from __future__ import annotations

import json
from pathlib import Path

SCRIPT = 'solver = Agent("Solver", "Solve it.")\nsubmit(solver(task))\n'
TAGGED = "<delivery>\\boxed{3}</delivery>"
UNTAGGED = "I think it is 3."
BROKEN = "answer = solve(task)\nsubmit(answer)\n"
TRAIN_SPEC = {"source": "bundled", "split": "train", "levels": [1], "domain": "math"}


def _tasks(n: int):
    from metaagent.data import DatasetSpec, load_tasks

    return load_tasks(DatasetSpec(**TRAIN_SPEC))[:n]


def designer_examples(n: int = 24) -> list[dict]:
    from metaagent.rollout.prompts import designer_messages
    from metaagent.workflow import load_templates

    templates = load_templates()
    rows = []
    for i, task in enumerate(_tasks(n)):
        messages = designer_messages(task, [templates[i % len(templates)]])
        reply = f"```python\n{SCRIPT}```"
        rows.append({"messages": [*messages, {"role": "assistant", "content": reply}], "kind": "designer"})
    return rows


def mixed_designer_examples(n: int = 24) -> list[dict]:
    """Every compact designer prompt answered once with ``SCRIPT`` (valid) and once with ``BROKEN`` (refused)."""
    from metaagent.rollout.prompts import designer_messages

    return [
        {"messages": [*designer_messages(task, [], style="compact"), {"role": "assistant", "content": reply}],
         "kind": "designer"}
        for task in _tasks(n)
        for reply in (f"```python\n{SCRIPT}```", f"```python\n{BROKEN}```")
    ]


def executor_examples(n: int = 24, replies: tuple[str, ...] = (TAGGED, UNTAGGED)) -> list[dict]:
    """The agent prompts the sandbox really sends for ``SCRIPT``, each answered with every one of ``replies``
    (default: tagged and untagged; ``"executor_tagged"``: tagged only, an executor that nearly always delivers)."""
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.config import RolloutConfig
    from metaagent.rollout.engine import FrozenDesign, RolloutEngine

    prompts: list[list[dict]] = []

    def record(request) -> str:
        prompts.append([dict(m) for m in request.messages])
        return TAGGED

    engine = RolloutEngine(
        ScriptedPolicy(["unused"], cycle=True), ScriptedPolicy(record), RolloutConfig(m_designs=1, n_executions=1)
    )
    try:
        engine.rollout(_tasks(n), seed=0, frozen=FrozenDesign(script=SCRIPT, name="warm"))
    finally:
        engine.close()
    # every prompt with both replies: the model learns a 50/50 choice, not which task gets which. The sandbox
    # workers call in whatever order they finish, so the prompts are sorted: the data (and the model) must not
    # depend on timing
    return [
        {"messages": [*p, {"role": "assistant", "content": reply}], "kind": "executor"}
        for p in _seeded_order(prompts)
        for reply in replies
    ]


def _seeded_order(prompts: list[list[dict]]) -> list[list[dict]]:
    """The prompts in an order that does not depend on timing: sorted, then shuffled with a fixed seed. Seed 1
    leaves the warm executor delivering ~40% of the time, so the learning benchmark has room to show a rise (seeds
    0 and 2 start at ~80% and ~65%)."""
    import random

    out = sorted(prompts, key=lambda m: json.dumps(m, sort_keys=True))
    random.Random(1).shuffle(out)
    return out


#: (kind, steps, lr) -> the model folder already built in this test process (read-only for its users)
_BUILT: dict[tuple[str, int | None, float], str] = {}


def warm_tiny(out: Path, kind: str, *, steps: int | None = None, lr: float = 1e-2) -> str:
    """SFT the tiny model on ``kind`` examples; returns the merged model folder (a valid ``--model``).

    The SFT is seeded and runs on one thread, so one build per process serves every test that asks for the same
    model, whichever asks first (the tests of tests/train and tests/verl asked for the executor model four times).
    """
    import torch

    key = (kind, steps, lr)
    if key in _BUILT and (Path(_BUILT[key]) / "config.json").is_file():
        return _BUILT[key]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _BUILT[key] = _build(out, kind, steps=steps, lr=lr)
    finally:
        torch.set_num_threads(before)
    return _BUILT[key]


def _build(out: Path, kind: str, *, steps: int | None, lr: float) -> str:
    from metaagent.sft.warm import sft_on_rows

    builders = {
        "designer": designer_examples,
        "designer_mixed": mixed_designer_examples,
        "executor_tagged": lambda: executor_examples(replies=(TAGGED,)),
    }
    rows = builders.get(kind, executor_examples)()
    steps = steps or (60 if kind == "executor" else 100)
    return sft_on_rows(rows, out, steps=steps, name=f"sft_{kind}", kinds=[kind.split("_")[0]], lr=lr)
