"""The `metaagent-replay` command: a thin layer over metaagent.replay, with clear errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from metaagent.cli.replay import main
from metaagent.replay import compare, load_run, stats


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["--width", "200", *map(str, argv)])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_without_task_lists_steps_and_tasks(capsys, scripted_runs):
    a, _, expected = scripted_runs
    code, out, err = run_cli(capsys, a)
    assert code == 0 and err == ""
    assert "run scripted-A" in out and "3 tasks" in out
    for task_id in expected:
        assert task_id in out


def test_task_replay_shows_script_turns_answer_reference_and_reward(capsys, scripted_runs):
    a, _, expected = scripted_runs
    task_id = next(iter(expected))
    gold = load_run(a).task(task_id)["answer"]
    code, out, _ = run_cli(capsys, a, "--task", task_id, "--execution", 1)
    assert code == 0
    for text in (
        f"task {task_id}",
        'solver = Agent("MathSolver"',
        "structure single / pattern single",
        "turn 0 · MathSolver",
        "system prompt",
        "response",
        "delivery: \\boxed{-1}",
        "answer    \\boxed{-1}",
        f"reference {gold}",
        "reward 0.400 = correct 0.000 + 0.4 × format 1.000",
        "execution 1",
    ):
        assert text in out, text
    assert "execution 0 " not in out  # --execution 1 only


def test_stats_and_compare_as_json_equal_the_python_api(capsys, scripted_runs):
    a, b, _ = scripted_runs
    code, out, _ = run_cli(capsys, a, "--stats", "--json")
    assert code == 0 and json.loads(out) == json.loads(json.dumps(stats(a)))
    code, out, _ = run_cli(capsys, a, "--compare", b, "--json")
    assert code == 0 and json.loads(out)["summary"] == compare(a, b).summary()
    code, out, _ = run_cli(capsys, a, "--compare", b, "--stats", "--json")
    assert code == 0 and set(json.loads(out)) == {"stats", "comparison"}


def test_compare_prints_outcomes_and_one_task_side_by_side(capsys, scripted_runs):
    a, b, expected = scripted_runs
    code, out, _ = run_cli(capsys, a, "--compare", b)
    assert code == 0
    assert "only B: structure changed" in out and "only B: same structure" in out
    assert "same structure (executor-side gain) 50.0%, structure changed (designer flip) 50.0%" in out
    flip = list(expected)[1]
    code, out, _ = run_cli(capsys, a, "--compare", b, "--task", flip)
    assert code == 0
    assert "A = scripted-A" in out and "B = scripted-B" in out
    assert "AlgebraSolver, MathCritic" in out and "\\boxed{12}" in out


def test_html_writes_the_report_only(capsys, scripted_runs, tmp_path):
    a, b, _ = scripted_runs
    code, out, err = run_cli(capsys, a, "--html", tmp_path / "r.html", "--compare", b, "--stats")
    assert code == 0 and out == "" and "wrote" in err
    assert "Comparison: A = scripted-A" in (tmp_path / "r.html").read_text()


def test_errors_name_the_problem_and_exit_non_zero(capsys, scripted_runs, tmp_path):
    a, _, _ = scripted_runs
    code, _, err = run_cli(capsys, a, "--task", "nope")
    assert code == 2 and "task 'nope' is not in scripted-A" in err
    code, _, err = run_cli(capsys, tmp_path / "missing")
    assert code == 2 and "does not exist" in err
    code, _, err = run_cli(capsys, a, "--rerun", "--task", "x")
    assert code == 2 and "--rerun needs --task ID and --model M" in err
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"schema_version": 99}\nnot json\n')
    code, _, err = run_cli(capsys, junk)
    assert code == 1 and "no readable rollout records" in err
    assert "schema_version 99" in err and "not valid JSON" in err


def test_bad_lines_go_to_stderr_and_the_rest_is_shown(capsys, scripted_runs, tmp_path):
    a, _, expected = scripted_runs
    path = tmp_path / "step_000000.jsonl"
    path.write_text((a / "rollouts" / "step_000000.jsonl").read_text() + '{"schema_version": 1, "run_id"')
    code, out, err = run_cli(capsys, path)
    assert code == 0 and all(t in out for t in expected)
    assert "1 unreadable line(s), skipped" in err and "incomplete last line" in err and " 4 " in err


@pytest.mark.slow
def test_long_texts_fold_unless_full(capsys, tiny_runs):
    run = load_run(tiny_runs["a"])
    code_task = next(t for t in run.task_ids() if "code" in t)
    code, folded, _ = run_cli(capsys, tiny_runs["a"], "--task", code_task, "--step", 2, "--kind", "fixed")
    assert code == 0 and "(--full to expand)" in folded
    code, full, _ = run_cli(
        capsys, tiny_runs["a"], "--task", code_task, "--step", 2, "--kind", "fixed", "--full"
    )
    assert code == 0 and "(--full to expand)" not in full and len(full) > len(folded)


@pytest.mark.slow
def test_rerun_from_the_command_line(tiny_runs):
    """The installed entry point, in its own process: loads the tiny model and re-runs a recorded design."""
    run = load_run(tiny_runs["a"])
    ref = run.view(kind="val").refs[0]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "metaagent.cli.replay",
            str(tiny_runs["a"]),
            "--task",
            ref.task_id,
            "--kind",
            "val",
            "--rerun",
            "--model",
            "tiny",
            "--json",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["identical_turns"] and res["same_answer"] and res["same_reward"]
    assert res["sampling"]["temperature"] == 0.0 and res["model"] == "tiny"


@pytest.mark.slow
def test_tiny_run_listing_and_replay_with_designer_and_tool_turns(capsys, tiny_runs):
    run = load_run(tiny_runs["a"])
    code, out, _ = run_cli(capsys, tiny_runs["a"])
    assert code == 0 and "kinds: fixed, train, val" in out and all(t in out for t in run.task_ids())
    code_task = next(r.task_id for r in run.select(step=2, kind="train", latest=False) if "code" in r.task_id)
    code, out, _ = run_cli(capsys, tiny_runs["a"], "--task", code_task, "--step", 2)
    assert code == 0
    assert "design 0 · designer" in out and "design 1 · designer" in out  # the tiny designer's two designs
    assert "structure: — (invalid design)" in out and "[E-" in out  # and why the checker refused them
    assert "frozen:template:solver_tester" in out and "tool run_tests(" in out  # a fixed design's tool calls
    code, out, _ = run_cli(
        capsys, tiny_runs["a"], "--task", code_task, "--step", 2, "--kind", "train", "--design", 1
    )
    assert code == 0 and "design 1 · designer" in out and "design 0 · designer" not in out
    code, _, err = run_cli(capsys, tiny_runs["a"], "--task", code_task, "--step", 7)
    assert code == 2 and "no records at step 7" in err and "steps: 0, 1, 2, 3" in err
