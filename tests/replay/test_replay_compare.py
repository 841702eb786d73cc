"""--compare: the same tasks under two runs; tasks solved only by B split into executor gain vs designer flip."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from metaagent.replay import ReplayError, compare, load_run
from metaagent.replay.comparison import ONLY_B_CHANGED, ONLY_B_SAME, classify, task_side


def test_scripted_pair_outcomes_are_classified_as_in_the_paper(scripted_runs):
    a, b, expected = scripted_runs
    cmp = compare(a, b)
    assert {t.task_id: t.outcome for t in cmp.tasks} == expected
    s = cmp.summary()
    assert s["solved_a"] == 0 and s["solved_b"] == 2 and s["only_b"] == 2
    assert s["only_b_same_structure_share"] == 0.5 and s["only_b_structure_changed_share"] == 0.5
    flip = cmp.task(list(expected)[1])
    assert (flip.a.structure, flip.b.structure) == ("single", "reflection")
    assert flip.b.roles == ["AlgebraSolver", "MathCritic"] and flip.a.roles == ["MathSolver"]
    assert flip.a.answers == ["\\boxed{-1}"] and flip.b.solve_rate == 1.0 and flip.a.solve_rate == 0.0
    assert flip.b.mean_reward == pytest.approx(1.4)  # correct 1 + 0.4 x format 1
    assert cmp.to_dict()["summary"] == s
    json.dumps(cmp.to_dict())  # plain data


def test_the_structure_level_decides_what_counts_as_the_same(scripted_runs):
    a, b, expected = scripted_runs
    family = compare(a, b, level="family")
    assert [t.outcome for t in family.tasks] == list(expected.values())  # single vs reflection family too
    reversed_ = compare(b, a)
    assert [t.outcome for t in reversed_.tasks][:2] == ["only A: same structure", "only A: structure changed"]
    with pytest.raises(ReplayError, match="structure level"):
        compare(a, b, level="shape")
    with pytest.raises(ReplayError, match="threshold"):
        compare(a, b, threshold=0.0)


def test_unscored_executions_are_not_counted_as_failures(scripted_runs, tmp_path):
    a, b, expected = scripted_runs
    copy = tmp_path / "b"
    shutil.copytree(b, copy)
    path = copy / "rollouts" / "step_000000.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for e in lines[0]["designs"][0]["executions"]:
        e["reward"] = {"total": None, "correct": None, "format": None, "error": "math checker timed out"}
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cmp = compare(a, copy)
    first = cmp.task(next(iter(expected)))
    assert first.outcome == "unscored" and first.b.solved is None and first.b.scored == 0


def test_tasks_missing_from_one_run_are_reported(scripted_runs, tmp_path):
    a, b, expected = scripted_runs
    ids = list(expected)
    lines_a = (a / "rollouts" / "step_000000.jsonl").read_text().splitlines()
    lines_b = (b / "rollouts" / "step_000000.jsonl").read_text().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines_a[:2]) + "\n")  # without task 2
    (tmp_path / "b.jsonl").write_text("\n".join(lines_b[1:]) + "\n")  # without task 0
    cmp = compare(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert {t.task_id: t.outcome for t in cmp.tasks} == {
        ids[0]: "missing in B",
        ids[1]: "only B: structure changed",
        ids[2]: "missing in A",
    }
    assert cmp.task(ids[0]).b is None and cmp.task(ids[2]).a is None
    with pytest.raises(ReplayError, match="in neither"):
        compare(a, b, tasks=["no-such-task"])


@pytest.mark.slow
def test_tiny_runs_compare_at_chosen_steps(tiny_runs):
    run_a, run_b = load_run(tiny_runs["a"]), load_run(tiny_runs["b"])
    latest = compare(run_a, run_b)
    assert len(latest.tasks) == 4 and {t.outcome for t in latest.tasks} == {"neither"}  # a random model
    assert {t.b.structure for t in latest.tasks} == {"single"}
    assert {t.a.step for t in latest.tasks} == {3}
    at1 = compare(run_a, run_b, step_a=1, kind=None)
    assert {t.a.step for t in at1.tasks} == {1} and {t.a.structure for t in at1.tasks} == {"single"}


@pytest.mark.slow
def test_a_side_without_valid_designs_is_a_designer_flip(tiny_runs):
    run = load_run(tiny_runs["a"])
    invalid_only = run.select(run.task_ids()[0], step=0, kind="train")  # tiny designer: invalid scripts
    side = task_side(invalid_only)
    assert side.valid == 0 and side.structure is None
    assert side.solve_rate == 0.0 and side.solved is False  # Eq. 4: an invalid design scores 0
    solved = replace(side, structure="single", solved=True, solve_rate=1.0)
    assert classify(side, solved) == ONLY_B_CHANGED
    assert classify(replace(side, structure="single"), solved) == ONLY_B_SAME
