"""Field mapping of every dataset source, from small fixture files written in each source's real schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metaagent.data import DataError, DatasetSpec, Task, load_tasks
from metaagent.data import loaders as loaders_module
from metaagent.rewards import normalize_tests, run_code_tests

FIXTURES = Path(__file__).parent / "fixtures"


def load(source: str, **kwargs) -> list[Task]:
    return load_tasks(DatasetSpec(source, path=str(FIXTURES / f"{source}.jsonl"), **kwargs))


def test_polaris():
    tasks = load("polaris")
    assert [t.answer for t in tasks] == ["4", "720", "\\frac{5}{6}"]
    assert tasks[0].id == "polaris-0" and tasks[0].domain == "math" and tasks[0].split == "train"
    assert tasks[0].question.startswith("Let $x$") and tasks[0].metadata["difficulty"] == "8/8"
    assert tasks[0].source == "polaris"


def test_polaris_from_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (FIXTURES / "polaris.jsonl").read_text().splitlines()]
    path = tmp_path / "polaris.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = load_tasks(DatasetSpec("polaris", path=str(path), limit=2))
    assert [t.answer for t in tasks] == ["4", "720"]


def test_aime24_keeps_answer_text_and_drops_solution():
    tasks = load("aime24", split="test")
    assert [t.id for t in tasks] == ["aime24-60", "aime24-61"]
    assert tasks[0].answer == "016" and tasks[0].split == "test"
    assert "solution" not in tasks[0].metadata and "2^3" not in tasks[0].question
    assert tasks[0].metadata["year"] == "2024"


def test_aime25_integer_answers_become_strings():
    tasks = load("aime25")
    assert [(t.id, t.answer) for t in tasks] == [("aime25-1", "70"), ("aime25-2", "45")]


def test_olympiadbench_skips_images_and_joins_answers():
    tasks = load("olympiadbench")
    assert [t.id for t in tasks] == ["olympiadbench-1606", "olympiadbench-1607", "olympiadbench-1609"]
    assert tasks[0].answer == "\\frac{1}{2}"
    assert tasks[1].answer == "-2, 2" and tasks[1].metadata["is_multiple_answer"] is True
    assert tasks[2].question.startswith("All speeds are constant.") and tasks[2].metadata["unit"] == "km/h"


def test_apps_introductory_stdio_and_call_based():
    tasks = load("apps")
    assert [t.id for t in tasks] == ["apps-4001", "apps-4002"]  # interview filtered, empty tests skipped
    stdio, call = tasks
    assert stdio.tests == {"inputs": ["1 2\n", "5 7\n", "-3 3\n"], "outputs": ["3\n", "12\n", "0\n"]}
    assert stdio.metadata["public_tests"] == {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
    assert call.metadata["fn_name"] == "solve" and call.tests["fn_name"] == "solve"
    # one reference solution kept for the reward side (AT-GRPO's tester check); call-based tasks keep none
    assert stdio.metadata["reference_solution"].startswith("a, b = map(int") and "reference_solution" not in call.metadata
    assert "Use this starter code" in call.question and call.metadata["starter_code"].startswith("def solve")
    assert run_code_tests("a, b = map(int, input().split())\nprint(a + b)\n", stdio.tests).all_passed
    assert run_code_tests("def solve(xs):\n    return sum(xs)\n", call.tests).all_passed  # wrapped outputs


def test_apps_all_difficulties():
    assert len(load("apps", difficulty="all")) == 3
    assert [t.id for t in load("apps", difficulty="interview")] == ["apps-2001"]


def test_code_contests_public_plus_private_tests():
    tasks = load("code_contests")
    assert [t.id for t in tasks] == ["code_contests-1_A. Sum"]  # the file-IO problem is skipped
    task = tasks[0]
    assert task.tests == {"inputs": ["1 2\n", "10 20\n", "0 0\n"], "outputs": ["3\n", "30\n", "0\n"]}
    assert task.metadata["public_tests"] == {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    assert task.metadata["time_limit_s"] == 2.5 and task.metadata["cf_rating"] == 800
    assert run_code_tests("a, b = map(int, input().split())\nprint(a + b)\n", task.tests).all_passed


def test_livecodebench_needs_trust_for_pickled_tests():
    with pytest.raises(DataError, match="trust_pickled_tests"):
        load("livecodebench")
    tasks = load("livecodebench", trust_pickled_tests=True)
    leet, atcoder = tasks
    assert leet.id == "livecodebench-3000" and leet.metadata["fn_name"] == "maxSumBelow"
    assert normalize_tests(leet.tests).kind == "call" and len(leet.tests["inputs"]) == 3
    assert leet.metadata["public_tests"]["inputs"] == [[[1, 2, 3], 5]]
    assert "class Solution" in leet.question
    program = (
        "class Solution:\n    def maxSumBelow(self, nums: List[int], k: int) -> int:\n        best = -1\n"
        "        for i in range(len(nums)):\n            for j in range(i + 1, len(nums)):\n"
        "                if nums[i] + nums[j] < k:\n                    best = max(best, nums[i] + nums[j])\n"
        "        return best\n"
    )
    assert run_code_tests(program, leet.tests).all_passed
    assert atcoder.tests == {"inputs": ["3\n", "0\n"], "outputs": ["6\n", "0\n"]}
    assert "fn_name" not in atcoder.metadata


def test_lcb_decoder_refuses_objects_even_when_trusted():
    import base64
    import pickle
    import zlib

    from metaagent.data.mappers import decode_lcb_tests

    evil = base64.b64encode(zlib.compress(pickle.dumps(Path("/etc/passwd")))).decode()
    with pytest.raises(DataError, match="refusing to load"):
        decode_lcb_tests(evil, trusted=True)


def test_humaneval_from_the_package():
    tasks = load_tasks("humaneval")
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0"
    assert tasks[0].tests["entry_point"] == "has_close_elements" and "def check" in tasks[0].tests["assert"]
    assert "```python" in tasks[0].question and tasks[0].split == "test"


def test_limit_domain_and_spec_string():
    assert len(load("polaris", limit=2)) == 2
    spec = DatasetSpec.parse(f"aime24:test@{FIXTURES / 'aime24.jsonl'}")
    assert (spec.source, spec.split, spec.path) == ("aime24", "test", str(FIXTURES / "aime24.jsonl"))
    assert {t.domain for t in load_tasks({"source": "bundled", "domain": "code"})} == {"code"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "nope"}, "unknown dataset source"),
        ({"source": "polaris", "path": "/nonexistent/file.jsonl"}, "does not exist"),
        ({"source": "polaris", "limit": 0}, "limit"),
        ({"source": "polaris", "domain": "poetry"}, "domain"),
    ],
)
def test_bad_specs(kwargs, message):
    with pytest.raises(DataError, match=message):
        DatasetSpec(**kwargs)


def test_unsupported_file_type(tmp_path):
    bad = tmp_path / "tasks.csv"
    bad.write_text("problem,answer\n")
    with pytest.raises(DataError, match="parquet"):
        load_tasks(DatasetSpec("polaris", path=str(bad)))


def test_hub_failure_says_to_pass_a_local_file(monkeypatch):
    calls = []

    def offline(*args, **kwargs):
        calls.append((args, kwargs))
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="pass a local file") as info:
        load_tasks("polaris")
    assert "POLARIS-Project/Polaris-Dataset-53K" in str(info.value)
    assert calls[-1] == (("POLARIS-Project/Polaris-Dataset-53K", None), {"split": "train"})
    with pytest.raises(DataError, match="pass a local file"):
        load_tasks("olympiadbench")
    assert calls[-1] == (("Hothan/OlympiadBench", "OE_TO_maths_en_COMP"), {"split": "train"})
    with pytest.raises(DataError, match="pass a local file"):
        load_tasks("livecodebench")
    assert calls[-1][1]["data_files"] == {
        "test": "hf://datasets/livecodebench/code_generation_lite/test6.jsonl"
    }


def test_every_source_is_registered_with_a_domain():
    assert set(loaders_module.SOURCES) == {
        "bundled_qa",
        "polaris",
        "aime24",
        "aime25",
        "olympiadbench",
        "apps",
        "code_contests",
        "livecodebench",
        "humaneval",
        "gsm8k",
        "mbpp",
        "bundled",
        "sudoku",
        "planpath",
        "sokoban",
        "suite",
        "suite_arith",
        "suite_code",
        "suite_lookup",
        "suite_start",
        "suite_strings",
        "file",  # your own tasks (metaagent.data.files): rows of any registered domain
    }
    for name in loaders_module.SOURCES:
        source = loaders_module.SOURCES.get(name)
        assert source.domain in ("math", "code", "math+code", "plan", "qa", "any"), name


def test_rows_without_usable_content_only_give_an_error_when_nothing_is_left(tmp_path):
    empty = tmp_path / "apps.jsonl"
    empty.write_text(
        json.dumps(
            {
                "problem_id": 1,
                "question": "q",
                "solutions": "[]",
                "input_output": "",
                "difficulty": "introductory",
                "url": "",
                "starter_code": "",
            }
        )
        + "\n"
    )
    with pytest.raises(DataError, match="no tasks loaded"):
        load_tasks(DatasetSpec("apps", path=str(empty)))
