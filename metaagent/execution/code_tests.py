"""Code test formats, normalised into one :class:`TestSuite`, and how outputs are compared.

Accepted input forms (what :func:`normalize_tests` takes; the first and third are also the stored form in
``Task.tests``, see :meth:`TestSuite.to_dict`):

* APPS / CodeContests dict ``{"inputs": [...], "outputs": [...]}``: stdin/stdout tests. Inputs and outputs
  are strings (a list of lines is joined with newlines). A JSON string of this dict (APPS' raw
  ``input_output`` field) is accepted too.
* The same dict with ``"fn_name": name``: call-based tests. ``inputs[i]`` is the list of positional
  arguments (or LiveCodeBench's newline-separated JSON values), ``outputs[i]`` the expected return value.
  The function is a module-level ``def name`` or a method of a LeetCode-style ``class Solution``.
* LiveCodeBench list ``[{"input": str, "output": str, "testtype": "stdin" | "functional"}, ...]``;
  functional tests need ``fn_name`` (LiveCodeBench keeps it in ``metadata["func_name"]``).
* ``{"assert": source, "entry_point"?: name}``: assertion source that raises on failure (HumanEval / MBPP),
  counted as one test. When ``entry_point`` is given and the source defines ``check(candidate)``
  (HumanEval), ``check`` is called with the program's ``entry_point`` function; the source's own calls of
  ``entry_point`` reach the program even when the name is a builtin's (MBPP's ``sum``), other builtin names
  stay the test's.

Comparison: stdout is compared token by token after splitting on whitespace; two tokens that are both
numbers and not both integers are equal within :data:`FLOAT_TOL` (relative or absolute). Call results are
compared as JSON values (tuples become lists, dict keys strings) with the same float tolerance; as in the
APPS harness, an expected value ``[x]`` also accepts ``x``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import TestsFormatError

FLOAT_TOL = 1e-6
SUITE_KINDS = ("stdio", "call", "assert")

ACCEPTED_FORMS = (
    'accepted test forms: {"inputs": [...], "outputs": [...]} (stdin/stdout), the same with "fn_name" '
    '(call-based), a LiveCodeBench list [{"input", "output", "testtype"}], or {"assert": source, '
    '"entry_point"?: name}'
)


@dataclass(frozen=True)
class TestCase:
    """One test: stdin text and expected stdout (stdio), or argument list and expected value (call)."""

    input: Any
    expected: Any

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class TestSuite:
    """Normalised tests of one problem."""

    kind: str  # one of SUITE_KINDS
    cases: tuple[TestCase, ...]
    fn_name: str | None = None  # call
    source: str | None = None  # assert
    entry_point: str | None = None  # assert

    __test__ = False

    def __len__(self) -> int:
        return len(self.cases)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in ``Task.tests`` (accepted back by :func:`normalize_tests`)."""
        if self.kind == "assert":
            out: dict[str, Any] = {"assert": self.source}
            if self.entry_point:
                out["entry_point"] = self.entry_point
            return out
        out = {"inputs": [c.input for c in self.cases], "outputs": [c.expected for c in self.cases]}
        if self.kind == "call":
            out["fn_name"] = self.fn_name
        return out

    def subset(self, indices: Sequence[int]) -> TestSuite:
        return TestSuite(
            self.kind, tuple(self.cases[i] for i in indices), self.fn_name, self.source, self.entry_point
        )


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise TestsFormatError(
        f"stdin/stdout test {what} must be a string or a list of lines, got {type(value).__name__}"
    )


def _call_args(value: Any, index: int) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):  # LiveCodeBench functional input: one JSON value per line
        try:
            return [json.loads(line) for line in value.split("\n") if line.strip()]
        except json.JSONDecodeError as e:
            raise TestsFormatError(
                f"call-based test {index}: input is not newline-separated JSON: {e}"
            ) from None
    raise TestsFormatError(
        f"call-based test {index}: input must be an argument list, got {type(value).__name__}"
    )


def _from_io_dict(tests: Mapping[str, Any], fn_name: str | None) -> TestSuite:
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TestsFormatError(f'"inputs" and "outputs" must be lists; {ACCEPTED_FORMS}')
    if len(inputs) != len(outputs):
        raise TestsFormatError(f"{len(inputs)} inputs but {len(outputs)} outputs; they must pair up")
    if not inputs:
        raise TestsFormatError("the test list is empty; a code task needs at least one test")
    name = tests.get("fn_name") or fn_name
    if name:
        cases = tuple(TestCase(_call_args(i, k), o) for k, (i, o) in enumerate(zip(inputs, outputs)))
        return TestSuite("call", cases, fn_name=str(name))
    cases = tuple(TestCase(_text(i, "input"), _text(o, "output")) for i, o in zip(inputs, outputs))
    return TestSuite("stdio", cases)


def _from_lcb_list(tests: Sequence[Any], fn_name: str | None) -> TestSuite:
    if not tests:
        raise TestsFormatError("the test list is empty; a code task needs at least one test")
    types = set()
    for k, t in enumerate(tests):
        if not isinstance(t, Mapping) or "input" not in t or "output" not in t:
            raise TestsFormatError(
                f"test {k} is not an {{'input', 'output', 'testtype'}} object; {ACCEPTED_FORMS}"
            )
        types.add(t.get("testtype", "stdin"))
    if len(types) > 1 or not types <= {"stdin", "functional"}:
        raise TestsFormatError(
            f"LiveCodeBench testtype must be all 'stdin' or all 'functional', got {sorted(types)}"
        )
    if types == {"functional"}:
        if not fn_name:
            raise TestsFormatError(
                "LiveCodeBench functional tests need the function name: pass fn_name (metadata['func_name'])"
            )
        cases = []
        for k, t in enumerate(tests):
            try:
                expected = json.loads(t["output"]) if isinstance(t["output"], str) else t["output"]
            except json.JSONDecodeError as e:
                raise TestsFormatError(f"functional test {k}: output is not JSON: {e}") from None
            cases.append(TestCase(_call_args(t["input"], k), expected))
        return TestSuite("call", tuple(cases), fn_name=fn_name)
    return TestSuite(
        "stdio", tuple(TestCase(_text(t["input"], "input"), _text(t["output"], "output")) for t in tests)
    )


def normalize_tests(tests: Any, *, fn_name: str | None = None) -> TestSuite:
    """Turn any accepted test form (module doc) into a :class:`TestSuite`; :class:`TestsFormatError` otherwise."""
    if isinstance(tests, TestSuite):
        return tests
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            raise TestsFormatError(f"tests given as a string must be JSON; {ACCEPTED_FORMS}") from None
    if isinstance(tests, Mapping):
        if "assert" in tests:
            source = tests["assert"]
            if not isinstance(source, str) or not source.strip():
                raise TestsFormatError('"assert" must be non-empty test source code')
            entry = tests.get("entry_point")
            return TestSuite("assert", (TestCase(None, None),), source=source, entry_point=entry or None)
        if "inputs" in tests or "outputs" in tests:
            return _from_io_dict(tests, fn_name)
    if isinstance(tests, Sequence) and not isinstance(tests, (str, bytes)):
        return _from_lcb_list(tests, fn_name)
    raise TestsFormatError(f"unrecognised tests of type {type(tests).__name__}; {ACCEPTED_FORMS}")


# ---- comparison -------------------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_INTEGER_RE = re.compile(r"[+-]?\d+")


def _tokens_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    if not (_NUMBER_RE.fullmatch(a) and _NUMBER_RE.fullmatch(b)):
        return False
    if _INTEGER_RE.fullmatch(a) and _INTEGER_RE.fullmatch(b):
        return int(a) == int(b)
    x, y = float(a), float(b)
    return math.isclose(x, y, rel_tol=FLOAT_TOL, abs_tol=FLOAT_TOL)


def outputs_match(actual: str, expected: str) -> bool:
    """Whitespace-normalised stdout comparison with float tolerance on numeric tokens."""
    got, want = actual.split(), expected.split()
    return len(got) == len(want) and all(_tokens_equal(a, b) for a, b in zip(got, want))


def values_equal(actual: Any, expected: Any) -> bool:
    """JSON-value equality; floats within :data:`FLOAT_TOL`, ints and bools exact."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected if isinstance(actual, bool) and isinstance(expected, bool) else False
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(actual, int) and isinstance(expected, int):
            return actual == expected
        return math.isclose(actual, expected, rel_tol=FLOAT_TOL, abs_tol=FLOAT_TOL)
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(values_equal(a, e) for a, e in zip(actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(values_equal(actual[k], expected[k]) for k in actual)
    return actual == expected


def call_result_matches(actual: Any, expected: Any) -> bool:
    """A call's JSON result against the expected value; ``[x]`` expected also accepts ``x`` (APPS)."""
    if values_equal(actual, expected):
        return True
    return isinstance(expected, list) and len(expected) == 1 and values_equal(actual, expected[0])
