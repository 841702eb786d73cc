"""Code runner: test formats, every failure status, isolation (env, cwd, process group), parallelism."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from metaagent.execution.code_tests import call_result_matches, outputs_match
from metaagent.rewards import TestsFormatError, extract_program, normalize_tests, run_code_tests

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_TESTS = {"inputs": ["1 2\n", "10 20\n", "-1 1\n"], "outputs": ["3\n", "30\n", "0\n"]}


# ---- extraction -------------------------------------------------------------------------------------------------


def test_extract_program_takes_last_python_fence():
    text = (
        "Plan:\n```python\nprint(1)\n```\nBetter:\n```py\nprint(2)\n```\nand a shell line\n```bash\nls\n```\n"
    )
    assert extract_program(text) == "print(2)\n"


def test_extract_program_unlabelled_and_configurable():
    assert extract_program("```\nx = 1\n```") == "x = 1\n"
    assert extract_program("```\nx = 1\n```", languages=("python",)) is None
    assert extract_program("```cpp\nint main(){}\n```", languages=("cpp",)) == "int main(){}\n"


@pytest.mark.parametrize("text", [None, "", "no code here", "```python\nprint(1)\n"])  # last: unclosed
def test_extract_program_none(text):
    assert extract_program(text) is None


# ---- formats ------------------------------------------------------------------------------------------------------


def test_stdio_passes_and_reports():
    result = run_code_tests(ADD, ADD_TESTS)
    assert (result.passed, result.total, result.status) == (3, 3, "passed")
    assert result.all_passed and result.pass_rate == 1.0 and result.first_failure is None
    assert all(t.elapsed_s > 0 for t in result.tests)


def test_apps_json_string_and_line_lists():
    tests = json.dumps({"inputs": [["1 2"], ["3 4"]], "outputs": [["3"], ["7"]]})
    assert run_code_tests(ADD, tests).all_passed


def test_call_based_apps_style_with_wrapped_outputs():
    program = "def add(a, b):\n    return a + b\n"
    tests = {
        "inputs": [[1, 2], [3, 4]],
        "outputs": [[3], 7],
        "fn_name": "add",
    }  # APPS wraps outputs in a list
    assert run_code_tests(program, tests).all_passed


def test_call_based_leetcode_solution_class_and_tuples():
    program = "class Solution:\n    def pair(self, xs: List[int]) -> Tuple[int, int]:\n        return min(xs), max(xs)\n"
    tests = {"inputs": [[[3, 1, 2]], [[5]]], "outputs": [[1, 3], [5, 5]], "fn_name": "pair"}
    result = run_code_tests(program, tests)
    assert result.all_passed, result.summary()


def test_livecodebench_list_forms():
    functional = [
        {"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"},
        {"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"},
    ]
    program = (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n"
    )
    assert run_code_tests(program, functional, fn_name="twoSum").all_passed
    with pytest.raises(TestsFormatError, match="fn_name"):
        run_code_tests(program, functional)
    stdin = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    assert run_code_tests(ADD, stdin).all_passed


def test_assert_source_counts_as_one_test_and_calls_check():
    program = "def add(a, b):\n    return a + b\n"
    tests = {
        "assert": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n",
        "entry_point": "add",
    }
    result = run_code_tests(program, tests)
    assert (result.passed, result.total) == (1, 1)
    plain = run_code_tests(program, {"assert": "assert add(2, 2) == 5"})
    assert plain.status == "wrong_answer" and "AssertionError" in plain.tests[0].error


def test_output_comparison_rules():
    assert outputs_match("1 2\n3\n", "1 2 3")  # whitespace-normalised
    assert outputs_match("0.3333333\n", "0.333333333")  # float tolerance
    assert not outputs_match("0.34", "0.33")
    assert not outputs_match("1000001", "1000000")  # integers exact
    assert not outputs_match("YES", "yes")
    assert call_result_matches([1.0000000001, 2], [1, 2])
    assert not call_result_matches(True, 1)
    assert call_result_matches({"a": [1, 2]}, {"a": [1, 2]})


@pytest.mark.parametrize(
    "bad",
    [
        {"inputs": ["1"], "outputs": []},
        {"inputs": [], "outputs": []},
        42,
        "not json",
        [{"input": "1"}],
        {"assert": ""},
    ],
)
def test_malformed_tests_raise_format_error(bad):
    with pytest.raises(TestsFormatError):
        normalize_tests(bad)


def test_normalized_form_round_trips():
    suite = normalize_tests({"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"})
    assert normalize_tests(suite.to_dict()) == suite
    assert normalize_tests({"assert": "assert True", "entry_point": "f"}).to_dict() == {
        "assert": "assert True",
        "entry_point": "f",
    }


# ---- statuses -----------------------------------------------------------------------------------------------------


def test_wrong_answer_reports_first_failure():
    result = run_code_tests("a, b = map(int, input().split())\nprint(a - b)\n", ADD_TESTS, workers=1)
    assert result.status == "wrong_answer" and result.passed == 0
    first = result.first_failure
    assert first.index == 0 and first.input == "1 2\n" and first.expected == "3\n" and first.actual == "-1\n"
    assert "first failure: test 0" in result.summary()


def test_crash_is_runtime_error_with_traceback():
    result = run_code_tests("x = int(input())\nprint(1 // (x - x))\n", {"inputs": ["3"], "outputs": ["1"]})
    assert result.status == "runtime_error"
    assert "ZeroDivisionError" in result.tests[0].error
    assert "_code_harness" not in result.tests[0].error  # only the program's frames are shown


def test_syntax_error_is_runtime_error():
    result = run_code_tests("def f(:\n", {"inputs": [""], "outputs": [""]})
    assert result.status == "runtime_error" and "SyntaxError" in result.tests[0].error


def test_infinite_loop_stopped_at_time_limit():
    start = time.monotonic()
    result = run_code_tests("while True:\n    pass\n", {"inputs": [""], "outputs": [""]}, time_limit_s=1.0)
    assert result.status == "timeout"
    assert time.monotonic() - start < 5
    assert 1.0 <= result.tests[0].elapsed_s < 4


def test_sleeping_program_is_a_timeout_too():
    result = run_code_tests(
        "import time\ntime.sleep(30)\n", {"inputs": [""], "outputs": [""]}, time_limit_s=0.5
    )
    assert result.status == "timeout"


def test_memory_bomb_stopped_at_limit():
    bomb = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))\n"
    result = run_code_tests(bomb, {"inputs": [""], "outputs": [""]}, memory_mb=256)
    assert result.status == "memory"
    single = run_code_tests("x = 'a' * (10 ** 10)\n", {"inputs": [""], "outputs": [""]}, memory_mb=256)
    assert single.status == "memory"


def test_fork_attempt_is_refused():
    result = run_code_tests("import os\nos.fork()\n", {"inputs": [""], "outputs": [""]})
    assert result.status == "runtime_error" and "os.fork is disabled" in result.tests[0].error
    result = run_code_tests(
        "import subprocess\nsubprocess.run(['true'])\n", {"inputs": [""], "outputs": [""]}
    )
    assert result.status == "runtime_error"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_fork_through_ctypes_is_contained_by_process_group_kill(tmp_path, monkeypatch):
    """Bypassing the guard with libc fork, without the kernel isolation layer (which refuses the fork:
    tests/execution/test_isolation.py): the grandchild is killed with the program's process group."""
    from metaagent.execution import isolation

    monkeypatch.setattr(isolation, "_active", isolation.resolve("none"))
    pid_file = tmp_path / "grandchild.pid"
    program = (
        "import ctypes, os, time\n"
        "pid = ctypes.CDLL(None).fork()\n"
        "if pid == 0:\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    while True:\n        time.sleep(0.05)\n"
        "time.sleep(0.3)\nprint('parent done')\n"
    )
    result = run_code_tests(program, {"inputs": [""], "outputs": ["parent done"]})
    assert result.all_passed, result.summary()
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_output_flood_is_truncated():
    start = time.monotonic()
    result = run_code_tests(
        "while True:\n    print('x' * 1000)\n", {"inputs": [""], "outputs": ["x"]}, time_limit_s=10
    )
    outcome = result.tests[0]
    assert outcome.status == "wrong_answer" and outcome.output_truncated
    assert "cut" in outcome.actual and len(outcome.actual) < 1000
    assert time.monotonic() - start < 10  # stopped by the size cap, not the clock


def test_early_exit_cannot_fake_an_assert_pass():
    forged = (
        'import os\nopen(\'result.txt\', \'w\').write(\'{"nonce": "guess", "status": "ok"}\')\nos._exit(0)\n'
    )
    assert run_code_tests(forged, {"assert": "assert False"}).status == "runtime_error"
    assert run_code_tests("import sys\nsys.exit(0)\n", {"assert": "assert False"}).status == "runtime_error"


def test_exit_and_threads_in_stdio_programs():
    assert run_code_tests("print(3)\nexit()\n", {"inputs": [""], "outputs": ["3"]}).all_passed
    threaded = (
        "import threading\nthreading.stack_size(1 << 26)\n"
        "def main():\n    print(sum(map(int, input().split())))\n"
        "threading.Thread(target=main).start()\n"
    )
    assert run_code_tests(threaded, ADD_TESTS).all_passed


# ---- isolation ----------------------------------------------------------------------------------------------------


def test_clean_environment_and_fresh_cwd(monkeypatch):
    monkeypatch.setenv("METAAGENT_TEST_SECRET", "hunter2")
    program = "import os, json\nprint(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd(), 'ls': os.listdir('.')}))\n"
    seen = []
    for _ in range(2):
        result = run_code_tests(program, {"inputs": [""], "outputs": ["-"]}, max_output_bytes=1 << 16)
        seen.append(json.loads(result.tests[0].actual))
    for info in seen:
        assert "METAAGENT_TEST_SECRET" not in info["env"] and "hunter2" not in json.dumps(info)
        assert set(info["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONHASHSEED"}
        assert "spec.txt" not in info["ls"]  # the harness deleted it before the program ran
    assert seen[0]["cwd"] != seen[1]["cwd"]
    assert not Path(seen[0]["cwd"]).exists()  # removed after the test


def test_program_cannot_delete_files(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("x")
    result = run_code_tests(f"import os\nos.remove({str(victim)!r})\n", {"inputs": [""], "outputs": [""]})
    assert result.status == "runtime_error" and victim.exists()


# ---- parallelism ----------------------------------------------------------------------------------------------------


def test_parallel_workers_keep_order_and_speed_up():
    program = "import time\nn = int(input())\ntime.sleep(0.4)\nprint(n * 2)\n"
    tests = {"inputs": [f"{i}\n" for i in range(4)], "outputs": [f"{2 * i}\n" for i in range(4)]}
    start = time.monotonic()
    serial = run_code_tests(program, tests, workers=1)
    serial_s = time.monotonic() - start
    start = time.monotonic()
    parallel = run_code_tests(program, tests, workers=4)
    parallel_s = time.monotonic() - start
    assert serial.all_passed and parallel.all_passed
    assert [t.index for t in parallel.tests] == [0, 1, 2, 3]
    assert parallel_s < serial_s * 0.75


def test_stop_on_failure_skips_remaining_tests():
    tests = {"inputs": ["1 2\n"] * 5, "outputs": ["0\n"] * 5}
    result = run_code_tests(ADD, tests, workers=1, stop_on_failure=True)
    assert result.status == "wrong_answer"
    assert [t.status for t in result.tests] == ["wrong_answer"] + ["skipped"] * 4
    assert result.status_counts() == {"wrong_answer": 1, "skipped": 4}


def test_invalid_arguments():
    with pytest.raises(ValueError, match="workers"):
        run_code_tests(ADD, ADD_TESTS, workers=0)
    with pytest.raises(ValueError, match="memory_mb"):
        run_code_tests(ADD, ADD_TESTS, memory_mb=1)


def test_livecodebench_private_test_encoding_round_trip():
    """The loader's decoder (data side) and the runner agree on the decoded list form."""
    import pickle
    import zlib

    from metaagent.data.mappers import decode_lcb_tests

    cases = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    encoded = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()
    decoded = decode_lcb_tests(encoded, trusted=True)
    assert decoded == cases and run_code_tests(ADD, decoded).all_passed


def test_no_leftover_processes():
    """Runs above leave no harness process of ours behind."""
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"_code_harness.py" in cmd and ppid == os.getpid() and _alive(int(pid)):
            leftovers.append(pid)
    assert leftovers == []


def test_call_results_are_compared_as_json_values():
    cases = [
        ("def f():\n    return {1: (2, 3)}\n", {"1": [2, 3]}, True),  # int keys -> strings, tuples -> lists
        ("def f():\n    return 'text'\n", "text", True),
        ("def f():\n    return None\n", None, True),
        ("def f():\n    class X: pass\n    return X()\n", 0, False),  # no literal repr: compared as a string
        ("def f():\n    return float('nan')\n", 0, False),
        ("def f():\n    return [[1, 2]] * 3\n", [[1, 2], [1, 2], [1, 2]], True),
    ]
    for program, expected, ok in cases:
        result = run_code_tests(program, {"inputs": [[]], "outputs": [expected], "fn_name": "f"})
        assert result.all_passed is ok, (program, result.summary())


def test_prelude_names_are_available_only_when_used():
    program = "def f(xs: List[int]) -> int:\n    return sum(Counter(xs).values()) + gcd(4, 6)\n"
    assert run_code_tests(program, {"inputs": [[[1, 1, 2]]], "outputs": [5], "fn_name": "f"}).all_passed
    probe = "import sys\ndef f():\n    return 'typing' in sys.modules\n"
    assert run_code_tests(probe, {"inputs": [[]], "outputs": [False], "fn_name": "f"}).all_passed
