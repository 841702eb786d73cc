"""``data.mix`` through ``train-metaagent``: a task file of math, arith (the one-file plugin domain) and qa
tasks trains with every domain in every batch, ``data/drawn/<domain>`` logged at each step; a mix that leaves a
loaded domain out stops the run before it starts, one line naming the domain."""

from __future__ import annotations

import json

import pytest
from builders import forced_generate, load_plugin_domain

import metaagent.domain as registry

SCRIPT = 'solver = Agent("Solver", "Solve it.")\nsubmit(solver(task))\n'
ROWS = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {"question": "What is 4 + 4?", "answer": "8"},
    {"question": "What is 3 + 4?", "answer": "7", "domain": "arith"},
    {"question": "What is 1 + 1?", "answer": "2", "domain": "arith"},
    {"question": "What is the capital of Australia?", "answer": "Canberra", "domain": "qa"},
    {"question": "Which river flows through Paris?", "answers": ["Seine", "the Seine"], "domain": "qa"},
]


@pytest.fixture
def arith(monkeypatch):
    """The one-file example domain ``arith`` (tests/domains/arith_domain.py) loaded as a plugin, then gone."""
    unload = load_plugin_domain(monkeypatch)
    yield registry.get_domain("arith")
    unload()


def reply(request) -> str:
    return f"```python\n{SCRIPT}```" if request.role == "designer" else "<delivery>42</delivery>"


def train(tmp_path, *extra: str) -> int | None:
    from metaagent.cli.train import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    argv = ["--config", "tiny", "--data.train", str(tasks), "--data.val", "[]", "--data.batch-size", "3",
            "--trainer.steps", "2", "--trainer.save-every", "0", "--trainer.out", str(tmp_path / "run"),
            "rollout.sandbox_workers=2", *extra]  # fmt: skip
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


@pytest.mark.slow
def test_math_arith_and_qa_are_drawn_alike_and_logged_every_step(arith, tmp_path, monkeypatch):
    from metaagent.learn.metrics import read_metrics
    from metaagent.policy.hf import HFPolicy

    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(reply))
    assert train(tmp_path) in (0, None)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl")[0] if r["step"] >= 0]
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        assert {k: row[k] for k in row if k.startswith("data/drawn/")} == {
            "data/drawn/arith": 1, "data/drawn/math": 1, "data/drawn/qa": 1,
        }  # fmt: skip
        assert row["rollout/reward_errors"] == 0


def test_a_mix_without_a_loaded_domain_stops_the_run_naming_it(arith, tmp_path, capsys):
    assert train(tmp_path, "--data.mix", "{math: 1, arith: 1}") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train-metaagent: data.mix gives domain(s) ['qa'] share 0, but data.train loaded 2")
    assert len(err.splitlines()) == 1 and not (tmp_path / "run" / "metrics.jsonl").exists()
