"""Loading runs: run directories, record files, selection, and bad input that is reported, not fatal."""

from __future__ import annotations

import json
import shutil

import pytest

from metaagent.records import SCHEMA_VERSION, TreeWriter, read_trees
from metaagent.replay import ReplayError, load_run


def _records(run_dir):
    return run_dir / "rollouts" / "step_000000.jsonl"


def test_scripted_run_directory_loads_every_tree(scripted_runs):
    a, _, expected = scripted_runs
    run = load_run(a)
    trees, bad = read_trees(_records(a))
    assert bad == [] and run.bad_lines == []
    assert [r.tree for r in run.refs] == trees  # the same records the engine wrote
    assert run.name == "scripted-A" and run.root == a and run.files == [_records(a)]
    assert run.task_ids() == list(expected)
    assert [r.line for r in run.refs] == [1, 2, 3]
    assert run.kinds() == ["eval"] and run.steps() == [0]
    # no metrics.jsonl: per-step rollout metrics are computed from the records
    assert run.metrics_source == "records" and run.metrics[0]["rollout/tasks"] == 3


@pytest.mark.slow
def test_tiny_run_directory_has_train_fixed_and_val_records(tiny_runs):
    run = load_run(tiny_runs["a"])
    assert run.bad_lines == [] and run.notes == []
    assert [p.name for p in run.files] == [
        "step_000000.jsonl",
        "step_000001.jsonl",
        "step_000002.jsonl",
        "step_000003.jsonl",
        "val_step_000002.jsonl",
    ]
    assert run.kinds() == ["fixed", "train", "val"] and run.steps() == [0, 1, 2, 3]
    assert run.name == "tiny-a" and run.info["run_id"] == "tiny-a"
    assert run.config["rollout"]["m_designs"] == 2  # config.yaml
    assert run.metrics_source == "metrics.jsonl" and [m["step"] for m in run.metrics] == [0, 1, 2, 3]
    assert [m["schedule/active"] for m in run.metrics] == ["executor", "executor", "designer", "designer"]
    val = run.view(kind="val")
    assert len(val.refs) == 1 and val.refs[0].tree.mode == "eval" and val.refs[0].step == 2


@pytest.mark.slow
def test_select_defaults_to_the_latest_step_and_names_what_exists(tiny_runs):
    run = load_run(tiny_runs["a"])
    task = run.task_ids()[0]
    latest = run.select(task)
    assert {r.step for r in latest} == {max(r.step for r in run.refs if r.task_id == task)}
    assert all(r.task_id == task for r in latest)
    at0 = run.select(task, step=0)
    assert {r.kind for r in at0} == {"train", "fixed"} and {r.step for r in at0} == {0}
    assert [r.kind for r in run.select(task, step=0, kind="fixed")] == ["fixed"]
    with pytest.raises(ReplayError, match=r"no records at step 99 .*steps: 0, 1, 2, 3"):
        run.select(task, step=99)
    with pytest.raises(ReplayError, match="is not in tiny-a .*run without --task"):
        run.select("no-such-task")
    with pytest.raises(ReplayError, match="no records of kind 'serve'"):
        run.view(kind="serve")


def test_missing_paths_and_empty_directories_are_clear_errors(tmp_path):
    with pytest.raises(ReplayError, match="does not exist"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReplayError, match="holds no rollout record files; expected .*rollouts/step_"):
        load_run(tmp_path / "empty")
    with pytest.raises(ReplayError, match="no input"):
        load_run([])


def test_corrupt_truncated_newer_and_older_lines_are_reported_with_file_and_line(scripted_runs, tmp_path):
    a, _, _ = scripted_runs
    good = _records(a).read_text().splitlines()
    newer = json.loads(good[0])
    newer["schema_version"] = SCHEMA_VERSION + 1
    older = json.loads(good[0])
    older["schema_version"] = 0
    wrong_nested = json.loads(good[0])
    wrong_nested["designs"][0]["executions"][0]["turns"] = "not a list"
    wrong_type = json.loads(good[0])
    wrong_type["designs"][0]["structure"] = "single"  # parses, but is not the analysis object
    lines = [
        good[0],
        "{not json",
        json.dumps(newer),
        good[1],
        json.dumps(older),
        json.dumps(wrong_nested),
        "",
        '["a list"]',
        good[2],
        json.dumps(wrong_type),
        good[0][: len(good[0]) // 2],
    ]
    path = tmp_path / "rollouts" / "step_000000.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines))  # the last line is cut and has no newline: a run still writing

    run = load_run(tmp_path)
    assert len(run.refs) == 3 and [r.line for r in run.refs] == [1, 4, 9]
    reasons = {b.line: b.error for b in run.bad_lines}
    assert {b.path for b in run.bad_lines} == {str(path)}
    assert sorted(reasons) == [2, 3, 5, 6, 8, 10, 11]
    assert "not valid JSON" in reasons[2]
    assert f"schema_version {SCHEMA_VERSION + 1}" in reasons[3] and "upgrade metaagent" in reasons[3]
    assert "no migration from schema_version 0" in reasons[5]
    assert "AgentTurn: expected an object" in reasons[6]
    assert "must be a JSON object" in reasons[8]
    assert reasons[10] == "malformed record: design 0: structure must be an object"
    assert reasons[11].startswith("incomplete last line")


def test_a_run_still_being_written_is_readable(scripted_runs, tmp_path):
    """A writer has appended some trees and is in the middle of the next line."""
    a, _, _ = scripted_runs
    trees, _ = read_trees(_records(a))
    path = tmp_path / "rollouts" / "step_000007.jsonl"
    writer = TreeWriter(path)
    try:
        for t in trees[:2]:
            writer.write(t)
        writer._f.write(trees[2].to_json()[:100])  # a torn write, not yet flushed by the writer
        writer._f.flush()
        run = load_run(tmp_path)
    finally:
        writer.close()
    assert [r.tree for r in run.refs] == trees[:2]
    assert len(run.bad_lines) == 1 and run.bad_lines[0].line == 3
    assert run.bad_lines[0].error.startswith("incomplete last line")


def test_record_files_can_be_given_directly_and_together(scripted_runs, tmp_path):
    a, b, expected = scripted_runs
    copy = tmp_path / "extra.jsonl"
    shutil.copy(_records(b), copy)
    run = load_run([_records(a), copy])
    assert run.root is None and run.files == [_records(a), copy]
    assert len(run.refs) == 6 and run.task_ids() == list(expected)
    assert {r.tree.run_id for r in run.refs} == {"scripted-A", "scripted-B"}


def test_bad_metrics_lines_and_config_are_reported(scripted_runs, tmp_path):
    a, _, _ = scripted_runs
    run_dir = tmp_path / "run"
    shutil.copytree(a, run_dir)
    (run_dir / "metrics.jsonl").write_text(
        '{"step": 0, "rollout/reward/executor": 0.5}\n{"step": 1, "rollo\n'
    )
    (run_dir / "config.yaml").write_text("rollout: [unclosed\n")
    run = load_run(run_dir)
    assert run.metrics == [{"step": 0, "rollout/reward/executor": 0.5}]
    assert [(b.path.endswith("metrics.jsonl"), b.line) for b in run.bad_lines] == [(True, 2)]
    assert run.config is None and len(run.notes) == 1 and "config.yaml" in run.notes[0]


@pytest.mark.slow
def test_steps_filter_skips_other_step_files_unread(tiny_runs):
    run = load_run(tiny_runs["a"], steps=[2])
    assert [p.name for p in run.files] == ["step_000002.jsonl", "val_step_000002.jsonl"]
    assert run.steps() == [2] and run.kinds() == ["fixed", "train", "val"]
