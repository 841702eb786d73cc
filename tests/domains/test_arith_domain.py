"""A domain is one file plus its data (arith_domain.py, arith_tasks.jsonl): once loaded, its tasks come from its
own source, are scored under its own setting (``reward.domains.arith.tolerance``), trained on through
``train-metaagent`` and evaluated with maj@k on its own voting key through ``metaagent-eval``; nothing in the
package names it. An unknown domain is one error naming the registered ones."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from builders import forced_generate, load_plugin_domain, make_tree

import metaagent.domain as registry
from metaagent.data import DataError, DatasetSpec, Task, TaskError, load_tasks
from metaagent.domain import DomainError, domain_names, get_domain, register_domain
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import RewardConfig, score_execution, solution_format

SCRIPT = 'solver = Agent("Solver", "Solve it.")\nsubmit(solver(task))\n'
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "own-tasks.md"  # its last section: this domain


@pytest.fixture
def plugin(monkeypatch):
    """``arith`` loaded the way a user loads it (METAAGENT_DOMAINS), and unregistered afterwards."""
    unload = load_plugin_domain(monkeypatch)
    yield get_domain("arith")
    unload()


def _execution(answer: str) -> Execution:
    turn = AgentTurn(
        index=0, role="Solver", system_prompt="", messages=[], response=f"<delivery>{answer}</delivery>",
        delivery=answer, prompt_ids=[], response_ids=[], logprobs=None, finish_reason="stop", model="m",
    )  # fmt: skip
    return Execution(index=0, status="ok", answer=answer, submitted=True, turns=[turn])


def test_unknown_domain_names_the_registered_ones_and_how_to_add_one():
    with pytest.raises(TaskError, match=r"unknown domain 'arith'; registered: \['code', 'math', 'plan', 'qa'\].*register_domain.*METAAGENT_DOMAINS"):
        Task(id="t", domain="arith", question="What is 2 + 3?", answer="5")
    with pytest.raises(DomainError, match="unknown domain 'poetry'"):
        solution_format("poetry", "x")
    with pytest.raises(DataError, match=r"unknown dataset source 'arith'; known: \['aime24'"):
        DatasetSpec("arith")


def test_the_domain_is_one_file_plus_its_data_and_nothing_of_the_package_names_it():
    from package_graph import EXAMPLE_DOMAIN, domain_files, files_naming

    assert [f.name for f in domain_files(EXAMPLE_DOMAIN)] == ["arith_domain.py", "arith_tasks.jsonl"]
    assert files_naming("arith") == []
    assert files_naming("planpath")  # the check finds a name the package does use (the built-in environment)


def test_a_loaded_domain_builds_scores_and_formats_its_tasks(plugin):
    assert "arith" in domain_names() and plugin.name == "arith"
    task = Task(id="t", domain="arith", question="What is 2 + 3?", answer="5")
    with pytest.raises(TaskError, match="a arith task needs its gold answer"):
        Task(id="u", domain="arith", question="What is 2 + 3?", answer="five")
    right, wrong = score_execution(task, _execution("It is 5")), score_execution(task, _execution("It is 6"))
    assert right.correct == 1.0 and right.details["arith"] == {"pred": 5, "gold": "5", "tolerance": 0}
    assert wrong.correct == 0.0 and wrong.components["solution_format"] == 1.0
    assert score_execution(task, _execution("no idea")).components["solution_format"] == 0.0
    with pytest.raises(DomainError, match="already registered"):
        register_domain(registry.Domain(name="arith", reference="x", has_reference=bool, score=None, solution_format=None))


def test_its_setting_is_its_own_config_section(plugin):
    """``reward.domains.arith.tolerance`` reaches the arith scorer; a key it does not have is refused by name."""
    task = Task(id="t", domain="arith", question="What is 2 + 3?", answer="5")
    lenient = RewardConfig(domains={"arith": {"tolerance": 1}})
    assert score_execution(task, _execution("6"), lenient).correct == 1.0
    assert score_execution(task, _execution("7"), lenient).correct == 0.0
    assert score_execution(task, _execution("6")).correct == 0.0  # default: exact
    with pytest.raises(ValueError, match=r"unknown key\(s\) reward\.domains\.arith\.tol\b.*tolerance"):
        RewardConfig.from_dict({"domains": {"arith": {"tol": 1}}})
    with pytest.raises(ValueError, match=r"reward\.domains\.arith\.tolerance = -1"):
        RewardConfig(domains={"arith": {"tolerance": -1}})


def test_its_data_source_reads_the_file_beside_it(plugin):
    train, test = load_tasks("arith:train"), load_tasks(DatasetSpec("arith", split="test"))
    assert [t.question for t in train] == ["What is 2 + 3?", "What is 3 + 4?"]
    assert [t.answer for t in test] == ["8", "7"]
    assert {(t.domain, t.source) for t in train + test} == {("arith", "arith")}


def test_maj_at_k_votes_on_the_domains_answer_key(plugin):
    """Two of three samples say 6 in different words: the vote on arith's key (the last integer) picks 6, so maj@3
    is 1 although avg@3 is 2/3; a vote on the raw text would see three answers and take the first, a wrong 7."""
    from metaagent.eval.scoring import score_task

    tree = make_tree([[0.0, 1.0, 1.0]], task_id="a")
    tree.task = {"id": "a", "domain": "arith", "question": "What is 3 + 3?", "answer": "6"}
    for e, answer in zip(tree.designs[0].executions, ("7", "It is 6.", "6")):
        e.answer = answer
    score = score_task(tree, [3])
    assert score.avg[3] == pytest.approx(2 / 3) and score.maj[3] == 1.0


def _reply(request) -> str:
    """The designer writes a one-agent script; the agent answers a + b + (a mod 2): 2 + 3 and 4 + 4 right, 3 + 4
    and 5 + 2 off by one."""
    if request.role == "designer":
        return f"```python\n{SCRIPT}```"
    text = " ".join(str(m["content"]) for m in request.messages)
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
    return f"<delivery>It is {a + b + a % 2}.</delivery>"


def _run(command: str) -> None:
    """A console command run in this process (train-metaagent, metaagent-eval), as a user types it."""
    from metaagent.cli import eval as eval_cli
    from metaagent.cli import train as train_cli

    name, *argv = shlex.split(command)
    main = {"train-metaagent": train_cli.main, "metaagent-eval": eval_cli.main}[name]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code in (0, None), f"{command} exited with {code}"


@pytest.mark.slow
def test_the_domain_trains_one_step_and_evaluates_with_maj_at_k_through_the_cli(plugin, tmp_path, monkeypatch):
    """The guide's commands as written (docs/guide/own-tasks.md, a domain of your own): ``train-metaagent`` on the
    domain's own source with its setting (tolerance 1: the off-by-one answers count, mean correctness exactly 1),
    then ``metaagent-eval`` on its test split with the default setting (exact: one task right, one wrong):
    avg@2 = maj@2 = 0.5, maj@2 voted on arith's key (a vote on no key would give 0)."""
    from metaagent.learn.metrics import read_metrics
    from metaagent.policy.hf import HFPolicy

    _, _, section = GUIDE.read_text(encoding="utf-8").partition("## A domain of your own")
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    export, train, evaluate = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert export == "export METAAGENT_DOMAINS=arith_domain PYTHONPATH=tests/domains"  # what the fixture does
    monkeypatch.setattr(HFPolicy, "_generate", forced_generate(_reply))
    monkeypatch.chdir(tmp_path)
    _run(train)
    rows = [r for r in read_metrics(tmp_path / "runs" / "arith" / "metrics.jsonl")[0] if r["step"] >= 0]
    assert len(rows) == 1 and rows[0]["data/drawn/arith"] == 2
    assert rows[0]["rollout/correct"] == 1.0 and rows[0]["rollout/reward_errors"] == 0

    _run(evaluate)
    results = json.loads((tmp_path / "eval_arith" / "results.json").read_text())
    entry = results["cells"]["tiny"]["benchmarks"]["arith:test"]["sa"]
    assert entry["tasks"] == 2 and entry["complete"]
    assert entry["metrics"]["avg@2"]["mean"] == 0.5 and entry["metrics"]["maj@2"]["mean"] == 0.5
