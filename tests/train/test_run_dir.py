"""The run directory (:mod:`metaagent.train.run_dir`) on its own, without a model: a fresh run moves an earlier
one aside, ``--resume`` finds its checkpoint or says in one line why not, run.json and the rollouts go where the
tools read them."""

from __future__ import annotations

import json

import pytest

from metaagent.records import RolloutTree, read_trees
from metaagent.train.config import ScheduleConfig, TrainConfig
from metaagent.train.errors import TrainError
from metaagent.train.run_dir import RunDirectory, config_hash, new_run_info
from metaagent.train.schedule import StageSchedule


def test_a_fresh_run_starts_a_folder_and_moves_an_earlier_run_aside(tmp_path):
    run = RunDirectory(tmp_path / "run")
    run.prepare(resume=None)
    info = new_run_info(seed=3, backend="local", backend_info={"models": {"policy": "tiny"}, "x": 1}, isolation="none")
    assert info["seed"] == 3 and info["models"] == {"policy": "tiny"} and info["x"] == 1 and info["backend"] == "local"
    run.start(info, {"trainer": {"seed": 3}})
    assert run.run_info() == info and (run.path / "config.yaml").is_file()
    again = RunDirectory(tmp_path / "run")
    again.prepare(resume=True)  # a resumed run keeps its folder
    assert again.run_info() == info
    again.prepare(resume=None)  # a fresh one moves it aside, under its run id
    assert json.loads((tmp_path / f"run.{info['run_id']}" / "run.json").read_text()) == info
    assert list(again.path.iterdir()) == []


def test_resume_finds_the_checkpoint_or_says_why_not(tmp_path):
    run = RunDirectory(tmp_path / "run")
    run.prepare(resume=True)
    assert run.find_checkpoint(None) is None
    with pytest.raises(TrainError, match="--resume: no checkpoint under .*/checkpoints; start without --resume"):
        run.find_checkpoint(True)
    with pytest.raises(TrainError, match=r"--resume .*nowhere: not a checkpoint folder \(no meta.json\)"):
        run.find_checkpoint(str(tmp_path / "nowhere"))
    given = tmp_path / "ck"
    given.mkdir()
    (given / "meta.json").write_text("{}")
    assert run.find_checkpoint(str(given)) == given


def test_the_rollouts_of_a_step_replace_an_earlier_write(tmp_path):
    run = RunDirectory(tmp_path / "run")
    tree = RolloutTree(run_id="r", task={"id": "t", "domain": "math", "question": "q"}, seed=0, config={}, models={})
    path = run.write_rollouts(2, [tree, tree])
    assert path == tmp_path / "run" / "rollouts" / "step_000002.jsonl"
    run.write_rollouts(2, [tree])
    trees, bad = read_trees(path)
    assert len(trees) == 1 and not bad
    assert run.rollout_path(2, prefix="val_").name == "val_step_000002.jsonl"


def test_the_config_hash_ignores_where_the_run_goes_and_how_long_it_is():
    a = TrainConfig.load("tiny")
    b = TrainConfig.load("tiny", ["trainer.steps=9", "trainer.out=elsewhere", "trainer.loggers=[jsonl]"])
    c = TrainConfig.load("tiny", ["trainer.seed=1"])
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_the_schedule_section_builds_the_schedule():
    assert ScheduleConfig(mode="coupled", stage_len=3).build() == StageSchedule("coupled", 3)
    assert TrainConfig.load("tiny", ["schedule.stage_len=2"]).schedule.build().active_roles(2) == {"designer"}


def test_only_the_schedule_section_builds_a_schedule():
    """The loop, the verl plan and the display all take their schedule from ``ScheduleConfig.build()``: no
    other code of the package constructs a ``StageSchedule``."""
    import ast

    from package_graph import Package

    built, users = [], set()
    for module, tree in Package().trees.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "StageSchedule":
                    built.append((module, fn.name))
                if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("schedule.build"):
                    users.add(module)
    assert sorted(set(built)) == [("metaagent.train.config", "build")]
    assert {"metaagent.train.loop", "metaagent.train.verl_backend.plan", "metaagent.cli.display"} <= users
