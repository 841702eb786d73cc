"""The guide "Your own tasks and rewards" (docs/guide/own-tasks.md) as written: its files (``tasks.jsonl``,
``my_rewards.py``) and its commands (one training step, one evaluation on the tiny model) run here, and the
reward that scores them is the guide's function, not the math domain's check."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import tomllib
from builders import forced_generate

import metaagent.domain as domain_registry
from metaagent.records import read_trees

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "own-tasks.md"
FENCE = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```', re.MULTILINE | re.DOTALL)
SCRIPT = 'solver = Agent("Solver", "Solve it.")\nsubmit(solver(task))\n'


DOMAIN_SECTION = "## A domain of your own"  # its commands run in tests/domains/test_arith_domain.py


def guide_blocks(section: str = "tasks") -> tuple[dict[str, str], list[str]]:
    """The titled code blocks (file name -> text) and the lines of the ``bash`` blocks of the guide's own-tasks
    part (``section="tasks"``) or of its last section, a domain of your own (``"domain"``)."""
    tasks, _, domain = GUIDE.read_text(encoding="utf-8").partition(DOMAIN_SECTION)
    files, commands = {}, []
    for language, title, body in FENCE.findall(tasks if section == "tasks" else domain):
        if title:
            files[title] = body
        elif language == "bash":
            commands += [line for line in body.splitlines() if line.strip()]
    return files, commands


def console_script(name: str):
    """The ``main`` a console script of pyproject.toml names (train-metaagent: metaagent.cli.train:main)."""
    import importlib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][name]
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)


def reply(request) -> str:
    """The designer writes a one-agent script; the agent answers the sum right, in words (no \\boxed{})."""
    if request.role == "designer":
        return f"```python\n{SCRIPT}```"
    text = " ".join(str(m["content"]) for m in request.messages)
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
    return f"<delivery>The sum is {a + b}.</delivery>"


def run(command: str) -> None:
    name, *argv = shlex.split(command)
    try:
        code = console_script(name)(argv)
    except SystemExit as e:
        code = e.code
    assert code in (0, None), f"{command} exited with {code}"


@pytest.mark.slow
def test_the_guides_files_and_commands_train_one_step_and_evaluate(tmp_path, monkeypatch):
    from metaagent.learn.metrics import read_metrics
    from metaagent.policy.hf import HFPolicy

    files, commands = guide_blocks()
    assert set(files) == {"tasks.jsonl", "my_rewards.py"}
    assert [c.split()[0] for c in commands] == ["train-metaagent", "metaagent-eval"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(reply))
    saved = dict(domain_registry.REWARDS._table)
    try:
        run(commands[0])
        rows = [r for r in read_metrics(tmp_path / "runs/own/metrics.jsonl")[0] if r["step"] >= 0]
        assert len(rows) == 1 and rows[0]["data/drawn/math"] == 2  # tiny's batch: 2 tasks of the one domain
        assert rows[0]["rollout/correct"] == 1.0 and rows[0]["rollout/reward_errors"] == 0
        rewards = [
            e.reward
            for tree in read_trees(tmp_path / "runs/own/rollouts/step_000000.jsonl")[0]
            for _, e in tree.executions()
        ]
        assert len(rewards) == 8 and {r.details["task_reward"]["fn"].rsplit(":")[-1] for r in rewards} == {
            "exact_number"
        }

        run(commands[1])
        results = json.loads((tmp_path / "eval_own/results.json").read_text())
        entry = results["cells"]["tiny"]["benchmarks"]["file:tasks.jsonl"]["sa"]
        assert entry["tasks"] == 4 and entry["complete"] and entry["metrics"]["avg@1"]["mean"] == 1.0
    finally:
        domain_registry.REWARDS._table.clear()
        domain_registry.REWARDS._table.update(saved)
