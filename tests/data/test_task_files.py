"""Your own tasks: a JSONL task file per domain (metaagent/data/files.py), its one-line schema errors naming
file, line and field, ``--data.train FILE`` and ``--benchmarks file:PATH``, and a plain reward function
registered for a domain (metaagent.domain.register_reward) scoring R_correct in a helper process under a
deadline, its failures and timeouts counted as errors, never a 0."""

from __future__ import annotations

import json
import re
import time

import pytest
from builders import HANG_MARGIN_S

import metaagent.domain as domain_registry
from metaagent.data import DataError, load_tasks
from metaagent.domain import DomainError, load_reward, register_reward, use_rewards
from metaagent.records import AgentTurn, Execution
from metaagent.rewards import score_execution
from metaagent.execution.process import WALL_FACTOR
from metaagent.rewards.score import RewardConfig, reward_metrics


def write(tmp_path, *rows, name="tasks.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_question_and_answer_rows_are_math_tasks_and_each_domain_takes_its_own_fields(tmp_path):
    path = write(
        tmp_path,
        {"question": "What is 2 + 3?", "answer": 5},
        "",
        {"question": "Capital of France?", "domain": "qa", "answers": ["Paris", "paris"], "id": "fr"},
        {
            "question": "Add a and b.",
            "domain": "code",
            "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]},
            "public_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]},
            "split": "val",
        },
    )
    math, qa, code = load_tasks({"source": "file", "path": str(path)})
    assert (math.id, math.domain, math.answer, math.split, math.source) == (
        "tasks-1",
        "math",
        "5",
        "train",
        "file",
    )
    assert (qa.id, qa.domain, qa.answer, qa.metadata["answers"]) == ("fr", "qa", None, ["Paris", "paris"])
    assert code.domain == "code" and code.tests["inputs"] == ["1 2\n"] and code.split == "val"
    assert code.metadata["public_tests"] == code.tests  # both normalised (metaagent.execution.code_tests)
    assert [t.id for t in load_tasks({"source": "file", "path": str(path), "split": "val"})] == [
        "tasks-1",
        "fr",
        code.id,
    ]
    assert [t.id for t in load_tasks({"source": "file", "path": str(path), "split": "train"})] == [
        "tasks-1",
        "fr",
    ]
    # the spec's domain is the domain of rows without one, and keeps only that domain's rows
    assert [t.domain for t in load_tasks({"source": "file", "path": str(path), "domain": "qa"})] == [
        "qa",
        "qa",
    ]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], r"tasks.jsonl: the file is empty; write one task a line"),
        (["", "  "], r"tasks.jsonl: the file is empty"),
        (['{"question": "q", "answer": "1"}', "{oops"], r"tasks.jsonl line 2: not valid JSON"),
        (["[1, 2]"], r"tasks.jsonl line 1: a task is a JSON object, got list"),
        (['{"question": "What?"}'], r"tasks.jsonl line 1: field 'answer': a math task needs a gold 'answer'"),
        (
            ['{"question": "", "answer": "1"}'],
            r"tasks.jsonl line 1: field 'question' must be a non-empty string",
        ),
        (
            ['{"question": "q", "answer": [1]}'],
            r"tasks.jsonl line 1: field 'answer' must be a string or a number",
        ),
        (
            ['{"question": "q", "gold": "1"}'],
            r"tasks.jsonl line 1: unknown field 'gold' for a math task; allowed: id,",
        ),
        (
            ['{"question": "q", "answer": "1", "domain": "poetry"}'],
            r"line 1: field 'domain': unknown domain 'poetry'",
        ),
        (
            ['{"question": "q", "domain": "code"}'],
            r"tasks.jsonl line 1: field 'tests': a code task needs 'tests'",
        ),
        (
            ['{"question": "q", "domain": "code", "tests": {"x": 1}}'],
            r"line 1: field 'tests': unrecognised tests",
        ),
        (
            ['{"question": "q", "answer": "1", "metadata": 3}'],
            r"line 1: field 'metadata' must be a JSON object",
        ),
        (
            ['{"question": "a", "answer": "1", "id": "x"}', '{"question": "b", "answer": "2", "id": "x"}'],
            r"tasks.jsonl line 2: field 'id': 'x' is already the id of line 1",
        ),
    ],
)
def test_a_row_that_does_not_fit_is_one_line_naming_file_line_and_field(tmp_path, lines, message):
    path = write(tmp_path, *lines)
    with pytest.raises(DataError, match=message) as err:
        load_tasks({"source": "file", "path": str(path)})
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_task_file_is_jsonl_and_the_file_source_needs_a_path(tmp_path):
    with pytest.raises(
        DataError, match=r"tasks.json: a task file is one .jsonl file, one JSON object a line"
    ):
        load_tasks({"source": "file", "path": str(write(tmp_path, "[]", name="tasks.json"))})
    with pytest.raises(
        DataError, match=r"source 'file' needs a task file: \{source: file, path: tasks.jsonl\}"
    ):
        load_tasks({"source": "file"})


def test_data_train_and_val_take_a_task_file_path(tmp_path):
    from metaagent.cli.train import build_parser, resolve_config
    from metaagent.train.loop import load_tasks as train_tasks

    path = write(tmp_path, {"question": "What is 2 + 3?", "answer": "5"})
    for argv in (["--data.train", str(path)], [f"data.train=file:{path}"], [f"data.train=[{path}]"]):
        cfg = resolve_config(
            build_parser().parse_intermixed_args(["--config", "tiny", *argv, "--data.val", str(path)])
        )
        assert cfg.data.train == cfg.data.val == [{"source": "file", "path": str(path)}]
        assert [t.id for t in train_tasks(cfg.data.train)] == ["tasks-1"]
    with pytest.raises(DataError, match="dataset file 'missing.jsonl' does not exist"):
        train_tasks(
            resolve_config(build_parser().parse_intermixed_args(["--data.train", "missing.jsonl"])).data.train
        )


def test_benchmarks_take_a_task_file(tmp_path):
    from metaagent.eval.benchmarks import benchmark_tasks, parse_benchmark
    from metaagent.eval.config import EvalConfig
    from metaagent.eval.errors import EvalError

    path = write(
        tmp_path,
        {"question": "What is 2 + 3?", "answer": "5"},
        {"question": "1 + 1?", "answer": "2", "split": "x"},
        {"question": "2 + 2?", "answer": "4", "split": "test"},
    )
    bench = parse_benchmark(f"file:{path}")
    assert "rewards" in EvalConfig().identity()  # a results directory resumes only under the same rewards
    assert bench.label == "file:tasks.jsonl" and len(benchmark_tasks(bench)) == 3
    assert [t.id for t in benchmark_tasks(parse_benchmark(f"file:{path}", split="test"))] == [
        "tasks-1",
        "tasks-3",
    ]
    with pytest.raises(EvalError, match=r"benchmark file:nope.jsonl: no such file"):
        parse_benchmark("file:nope.jsonl")
    with pytest.raises(
        EvalError, match=rf"benchmark file:empty.jsonl: {re.escape(str(tmp_path))}.*the file is empty"
    ):
        benchmark_tasks(parse_benchmark(f"file:{write(tmp_path, name='empty.jsonl')}"))


# ---- a reward function registered for a domain ----------------------------------------------------------


@pytest.fixture
def rewards():
    """The reward registry emptied again after the test (registrations are process-wide)."""
    saved = dict(domain_registry.REWARDS._table)
    yield domain_registry.REWARDS
    domain_registry.REWARDS._table.clear()
    domain_registry.REWARDS._table.update(saved)


def _execution(answer: str) -> Execution:
    turn = AgentTurn(
        index=0,
        role="Solver",
        system_prompt="",
        messages=[],
        response=f"<delivery>{answer}</delivery>",
        delivery=answer,
        prompt_ids=[],
        response_ids=[],
        logprobs=None,
        finish_reason="stop",
        model="m",
    )
    return Execution(index=0, status="ok", answer=answer, submitted=True, turns=[turn])


TASK = {"id": "t", "domain": "math", "question": "What is 2 + 3?", "answer": "5"}


def test_a_registered_reward_is_the_domains_r_correct_and_its_failures_are_counted_errors(rewards):
    seen = []

    @register_reward("math")
    def half_for_five(task, answer):
        seen.append((task.id, answer))
        print("a reward's own output")  # goes to the helper's stderr, not into its answers
        return 0.5 if "5" in answer and task.id == "t" else 0.0

    assert rewards.get("math") is half_for_five
    right, wrong = (
        score_execution(TASK, _execution("It is 5")),
        score_execution(TASK, _execution("It is \\boxed{6}")),
    )
    assert seen == []  # it ran in its helper process, on copies: what it changes stays there
    assert right.details["task_reward"]["status"] == "ok"
    assert right.correct == 0.5 and right.total == pytest.approx(0.5 + 0.4 * right.format)
    assert wrong.correct == 0.0 and wrong.error is None and wrong.details["task_reward"]["value"] == 0.0
    rewards._table.clear()
    for value, match in (
        (1.5, r"returned 1.5; it must be a number in \[0, 1\]"),
        ("1", r"returned '1'"),
        (float("nan"), "returned nan"),
        (ZeroDivisionError("boom"), "raised ZeroDivisionError: boom"),
        (SystemExit(3), "raised SystemExit: 3"),
    ):
        rewards._table.clear()

        def broken(task, answer, value=value):
            if isinstance(value, BaseException):
                raise value
            return value

        register_reward("math", broken)
        record = score_execution(TASK, _execution("5"))
        assert record.total is None and record.correct is None and re.search(match, record.error)
        assert reward_metrics([record])["reward/errors/task_reward"] == 1


def sleeps(task, answer):
    time.sleep(600)


def spins(task, answer):
    while True:
        pass


def test_a_registered_reward_that_hangs_is_a_timeout_error_within_its_deadline(rewards):
    """Run in a helper process killed at ``reward.task_reward_timeout_s`` (CPU seconds; the wall clock allows
    WALL_FACTOR x): a reward that sleeps or spins is an error counted as task_reward_timeout, never a 0, and the
    next call gets a fresh helper (each timed call finds one started: a start is not the deadline's)."""
    cfg = RewardConfig(task_reward_timeout_s=0.5)
    records = []
    for hang in (sleeps, spins):
        rewards._table.clear()
        register_reward("math", lambda task, answer: float(answer == task.answer))
        assert score_execution(TASK, _execution("5"), cfg).correct == 1.0  # a helper started (after a kill: anew)
        rewards._table.clear()
        register_reward("math", hang)
        start = time.monotonic()
        record = score_execution(TASK, _execution("5"), cfg)
        assert time.monotonic() - start < WALL_FACTOR * 0.5 + HANG_MARGIN_S
        assert record.total is None and record.correct is None and record.details["error_kind"] == "task_reward_timeout"
        assert re.search(rf"reward .*:{hang.__name__} of math did not finish within 0.5 CPU seconds", record.error)
        assert record.details["task_reward"]["status"] == "timeout"
        records.append(record)
    assert reward_metrics(records)["reward/errors/task_reward_timeout"] == 2
    with pytest.raises(ValueError, match="task_reward_timeout_s"):
        RewardConfig(task_reward_timeout_s=0)


def test_rewards_load_from_a_module_function_spec(tmp_path, rewards, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def exact(task, answer):\n    return float(answer == task.answer)\n"
    )
    monkeypatch.chdir(tmp_path)
    use_rewards({"math": "my_rewards.py:exact"})
    use_rewards({"math": "my_rewards.py:exact"})  # the same function again: one registration
    assert score_execution(TASK, _execution("5")).correct == 1.0
    assert load_reward("metaagent.domain:text_key") is domain_registry.text_key
    for spec, match in (
        ("exact", "must look like module:function"),
        ("nope.py:f", "cannot import 'nope.py'"),
        ("my_rewards.py:missing", "has no 'missing'"),
        ("metaagent.domain:MAX_KEY_CHARS", "not a function"),
    ):
        with pytest.raises(DomainError, match=match):
            load_reward(spec)
    with pytest.raises(DomainError, match="unknown domain 'poetry'"):
        use_rewards({"poetry": "my_rewards.py:exact"})
    with pytest.raises(DomainError, match="task reward 'math' is already registered"):
        register_reward("math", lambda task, answer: 1.0)
