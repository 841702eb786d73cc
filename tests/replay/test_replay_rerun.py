"""--rerun: re-execute a recorded design with a model, with the recorded seed, sampling and limits."""

from __future__ import annotations

import pytest
from replay_helpers import answering_policy, scripted_tasks

from metaagent.replay import ReplayError, load_run, rerun
from metaagent.learn.checkpoint import CheckpointError, checkpoint_model


def _fixed_math_task(run):
    """A task whose step-0 records include a frozen reflection design (several agent turns)."""
    for r in run.select(step=0, kind="fixed", latest=False):
        if r.tree.designs[0].source == "frozen:template:reflection":
            return r.task_id
    raise AssertionError("the tiny run has no reflection design at step 0")


@pytest.mark.slow
def test_rerun_with_the_recording_model_reproduces_every_turn(tiny_runs, tiny_policy, sandbox_pool):
    run = load_run(tiny_runs["a"])
    task = _fixed_math_task(run)
    res = rerun(run, task, tiny_policy, step=0, kind="fixed", pool=sandbox_pool)
    recorded = run.select(task, step=0, kind="fixed")[0].tree.designs[0].executions[0]
    assert res.recorded == recorded and len(recorded.turns) >= 3
    assert res.identical_turns and res.first_difference is None
    assert [t.response_ids for t in res.rerun.turns] == [t.response_ids for t in recorded.turns]
    assert res.same_answer and res.same_reward and res.rerun.reward.total == recorded.reward.total
    assert res.seed == recorded.seed and res.rerun.seed == recorded.seed
    # sampling and limits come from the record's config
    assert res.sampling["max_tokens"] == 10 and res.sampling["temperature"] == 1.0
    assert res.limits == {"timeout_s": 20.0} and res.notes == []


@pytest.mark.slow
def test_rerun_with_other_sampling_shows_where_turns_differ(tiny_runs, tiny_policy, sandbox_pool):
    run = load_run(tiny_runs["a"])
    task = _fixed_math_task(run)
    res = rerun(
        run, task, tiny_policy, step=0, kind="fixed", pool=sandbox_pool, sampling={"temperature": 0.0}
    )
    assert res.sampling["temperature"] == 0.0 and any("overridden" in n for n in res.notes)
    assert not res.identical_turns
    assert res.first_difference.startswith("turn 0 (AlgebraSolver): the response differs from token")


@pytest.mark.slow
def test_validation_records_are_rerun_greedily(tiny_runs, tiny_policy, sandbox_pool):
    run = load_run(tiny_runs["a"])
    ref = run.view(kind="val").refs[0]
    res = rerun(run, ref.task_id, tiny_policy, kind="val", pool=sandbox_pool)
    assert res.sampling["temperature"] == 0.0 and any("val_greedy" in n for n in res.notes)
    assert res.identical_turns and res.same_answer


@pytest.mark.slow
def test_rerun_explains_what_cannot_be_rerun(tiny_runs, tiny_policy, sandbox_pool):
    run = load_run(tiny_runs["a"])
    designed = next(r for r in run.refs if r.kind == "train")
    with pytest.raises(ReplayError, match="is invalid .*nothing to execute"):
        rerun(run, designed.task_id, tiny_policy, step=designed.step, kind="train", pool=sandbox_pool)
    task = _fixed_math_task(run)
    with pytest.raises(ReplayError, match=r"has designs \[0\], not 3"):
        rerun(run, task, tiny_policy, design=3, step=0, kind="fixed", pool=sandbox_pool)
    with pytest.raises(ReplayError, match=r"has executions \[0\], not 5"):
        rerun(run, task, tiny_policy, execution=5, step=0, kind="fixed", pool=sandbox_pool)


@pytest.mark.slow
def test_rerun_from_a_training_checkpoint(tiny_runs, tiny_policy, sandbox_pool, tmp_path):
    """A run directory as --model: its latest checkpoint's executor weights (here: the tiny model's)."""
    from metaagent.learn.checkpoint import save_checkpoint

    save_checkpoint(
        tmp_path, 2, models={"executor": tiny_policy.model}, tokenizers={"executor": tiny_policy.tokenizer}
    )
    assert checkpoint_model(str(tmp_path)) == str(
        tmp_path / "checkpoints" / "step_00000002" / "models" / "executor"
    )
    run = load_run(tiny_runs["a"])
    res = rerun(run, _fixed_math_task(run), str(tmp_path), step=0, kind="fixed", pool=sandbox_pool)
    assert res.model.endswith("models/executor") and res.identical_turns


def test_rerun_of_scripted_records_with_another_policy(scripted_runs, sandbox_pool):
    a, _, expected = scripted_runs
    run = load_run(a)
    task = next(iter(expected))
    same = rerun(run, task, answering_policy(set(), scripted_tasks()), pool=sandbox_pool)
    assert same.identical_turns and same.same_answer and same.same_reward
    assert "the record has no reward config: scored with RewardConfig defaults" in same.notes
    better = rerun(run, task, answering_policy({task}, scripted_tasks()), execution=1, pool=sandbox_pool)
    assert not better.identical_turns and better.first_difference.startswith("turn 0 (MathSolver)")
    assert (
        not better.same_answer
        and better.rerun.reward.correct == 1.0
        and better.recorded.reward.correct == 0.0
    )


def test_rerun_names_a_model_or_backend_that_cannot_be_built(scripted_runs):
    a, _, expected = scripted_runs
    task = next(iter(expected))
    with pytest.raises(
        ReplayError, match="cannot build the 'hf' policy for model '/no/such/model': no model at"
    ):
        rerun(a, task, "/no/such/model")
    with pytest.raises(ReplayError, match="unknown policy backend 'nope'"):
        rerun(a, task, "tiny", backend="nope")


def test_checkpoint_model_passes_names_through_and_rejects_broken_checkpoints(scripted_runs, tmp_path):
    assert checkpoint_model("tiny") == "tiny"
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        checkpoint_model(str(tmp_path))
    a, _, expected = scripted_runs
    with pytest.raises(ReplayError, match="no complete checkpoint"):  # rerun names it as replay's own error
        rerun(a, next(iter(expected)), str(tmp_path))
