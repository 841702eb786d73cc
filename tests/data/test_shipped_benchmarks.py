"""The public benchmarks shipped in the package (``metaagent/data/benchmarks``): GSM8K's test split and MBPP
sanitized load offline with no placed copy and no hub, match the sha256 their SOURCE.md records, and give way
to a placed copy."""

from __future__ import annotations

import hashlib
import json
import lzma
import re

import pytest

from metaagent.data import DataError, DatasetSpec, load_tasks, loaders
from metaagent.eval.benchmarks import benchmark_tasks, parse_benchmark
from metaagent.eval.errors import EvalError

SHIPPED = {"gsm8k": "test.jsonl.xz", "mbpp": "sanitized-mbpp.json.xz"}
ROWS = {"gsm8k": 1319, "mbpp": 427}


@pytest.fixture
def shipped_only(monkeypatch):
    """No placed copy (environment or checkout) and no hub: a read that is not the shipped copy fails."""
    monkeypatch.delenv(loaders.BENCHMARKS_ENV, raising=False)
    monkeypatch.setattr(loaders, "CHECKOUT_BENCHMARK_DIRS", ())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(spec):
        raise AssertionError(f"{spec.source} read from the hub, not from the shipped copy")

    monkeypatch.setattr(loaders, "_hub_rows", refuse)


@pytest.mark.parametrize("source", sorted(SHIPPED))
def test_the_shipped_copy_matches_its_source_record_and_carries_its_licence(source):
    folder = loaders.SHIPPED_DIR / source
    assert loaders.shipped_copy(source, "test") == folder / SHIPPED[source]
    data = lzma.decompress((folder / SHIPPED[source]).read_bytes())
    record = (folder / "SOURCE.md").read_text()
    (digest,) = re.findall(r"sha256 of the uncompressed file: `([0-9a-f]{64})`", record)
    assert hashlib.sha256(data).hexdigest() == digest
    assert re.search(r"Commit: `[0-9a-f]{40}`", record) and f"Rows: {ROWS[source]:,}" in record
    assert len(loaders.shipped_rows(folder / SHIPPED[source])) == ROWS[source]
    licence = (folder / "LICENSE").read_text()
    expected = ("MIT License", "OpenAI") if source == "gsm8k" else ("CC BY 4.0", "Jacob Austin")
    assert all(text in licence for text in expected)


def test_shipped_gsm8k_loads_every_test_problem_with_the_number_after_the_mark(shipped_only):
    tasks = load_tasks(DatasetSpec("gsm8k"))
    assert len(tasks) == 1319 and len({t.id for t in tasks}) == 1319
    by_line = {t.metadata["index"]: t for t in tasks}
    # lines 0, 1, 2 and the last of grade_school_math/data/test.jsonl: "#### 18", "#### 3", "#### 70000", ...
    assert [by_line[i].answer for i in (0, 1, 2, 1318)] == ["18", "3", "70000", "14"]
    assert by_line[0].question.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert all("####" not in t.question for t in tasks)  # the worked solution stays out


def test_shipped_gsm8k_seeded_subset_is_stable_and_nests(shipped_only):
    first5 = [t.id for t in load_tasks(DatasetSpec("gsm8k", limit=5))]
    # the order of random.Random(GSM8K_SEED).shuffle over the file's 1,319 lines: pinned, so a change shows
    assert first5 == [f"gsm8k-test-{line:04d}" for line in (135, 361, 1058, 911, 1066)]
    first300 = [t.id for t in benchmark_tasks(parse_benchmark("gsm8k"), limit=300)]
    assert first300[:5] == first5 and len(set(first300)) == 300


def test_shipped_mbpp_test_split_shows_the_first_assert_and_hides_the_rest(shipped_only):
    rows = {r["task_id"]: r for r in loaders.shipped_rows(loaders.shipped_copy("mbpp", "test"))}
    tasks = load_tasks(DatasetSpec("mbpp"))
    assert len(tasks) == 257 and all(11 <= int(t.id.split("-")[1]) <= 510 for t in tasks)
    for task in tasks:
        row = rows[int(task.id.split("-")[1])]
        imports = "".join(f"{line}\n" for line in row["test_imports"])
        assert task.metadata["public_tests"]["assert"] == f"{imports}{row['test_list'][0]}\n", task.id
        assert task.tests["assert"] == imports + "\n".join(row["test_list"]) + "\n", task.id
        assert task.metadata["hidden_asserts"] == len(row["test_list"]) - 1, task.id
        assert task.tests["entry_point"] == task.metadata["public_tests"]["entry_point"], task.id
        hidden = [a for a in row["test_list"][1:] if a != row["test_list"][0]]
        assert row["code"] not in task.question and not any(a in task.question for a in hidden), task.id
    splits = ("prompt", "validation", "train")
    counts = {split: len(load_tasks(DatasetSpec("mbpp", split=split))) for split in splits}
    assert counts == {"prompt": 7, "validation": 43, "train": 120}  # 257 + 7 + 43 + 120 = 427


def test_offline_evaluation_reads_the_shipped_copies_and_names_what_is_not_shipped(shipped_only):
    assert len(benchmark_tasks(parse_benchmark("mbpp:test"), limit=3)) == 3
    assert loaders.shipped_copy("gsm8k", "train") is None and loaders.shipped_copy("aime24", "train") is None
    with pytest.raises(EvalError, match=r"gsm8k is not shipped \(split train\).*METAAGENT_BENCHMARKS_DIR"):
        parse_benchmark("gsm8k:train")


def test_a_placed_copy_takes_priority_over_the_shipped_one(tmp_path, monkeypatch, shipped_only):
    (tmp_path / "gsm8k").mkdir()
    problem = {"question": "1 + 1?", "answer": "#### 2"}
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps(problem) + "\n")
    (tmp_path / "mbpp").mkdir()
    row = {"source_file": "x", "task_id": 12, "prompt": "Double.", "code": "def f(x):\n    return 2 * x",
           "test_imports": [], "test_list": ["assert f(2) == 4"]}  # fmt: skip
    (tmp_path / "mbpp" / "sanitized-mbpp.json").write_text(json.dumps([row]))
    monkeypatch.setenv(loaders.BENCHMARKS_ENV, str(tmp_path))
    assert [(t.id, t.answer) for t in load_tasks(DatasetSpec("gsm8k"))] == [("gsm8k-test-0000", "2")]
    assert [t.id for t in load_tasks(DatasetSpec("mbpp"))] == ["mbpp-12"]
    monkeypatch.delenv(loaders.BENCHMARKS_ENV)
    assert len(load_tasks(DatasetSpec("gsm8k"))) == 1319  # without it, the shipped copy again


def test_a_damaged_shipped_copy_is_a_clear_error(tmp_path, monkeypatch, shipped_only):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl.xz").write_bytes(b"not xz")
    monkeypatch.setattr(loaders, "SHIPPED_DIR", tmp_path)
    with pytest.raises(DataError, match=r"cannot read the shipped copy .*test.jsonl.xz.*reinstall metaagent"):
        load_tasks(DatasetSpec("gsm8k"))


def test_another_subset_is_not_read_from_the_shipped_copy(shipped_only):
    """GSM8K ships its ``main`` subset and MBPP its ``sanitized`` one: asking for another goes past the copy."""
    with pytest.raises(AssertionError, match="gsm8k read from the hub"):
        load_tasks(DatasetSpec("gsm8k", subset="socratic"))
    with pytest.raises(AssertionError, match="mbpp read from the hub"):
        load_tasks(DatasetSpec("mbpp", subset="full"))
    assert len(load_tasks(DatasetSpec("gsm8k", subset="main", limit=2))) == 2  # the shipped subset named
