"""Stage schedule (Eq. 9) over 100 steps in every mode."""

from __future__ import annotations

import json

import pytest

from metaagent.credit import register_estimator
from metaagent.train.schedule import MODES, ScheduleError, StageSchedule

D, E = "designer", "executor"


def test_stagewise_k30_over_100_steps():
    s = StageSchedule("stagewise", 30)
    roles = [s.active_roles(t) for t in range(100)]
    expected = [{E}] * 30 + [{D}] * 30 + [{E}] * 30 + [{D}] * 10  # executor stage first
    assert roles == [frozenset(r) for r in expected]
    assert [s.stage(t).index for t in (0, 29, 30, 59, 60, 99)] == [0, 0, 1, 1, 2, 3]
    assert s.stage(45).name == D and s.stage(61).name == E
    assert s.boundaries(100) == [(0, 30, E), (30, 60, D), (60, 90, E), (90, 100, D)]
    assert s.is_active(E, 0) and not s.is_active(D, 0) and s.is_active(D, 30)


def test_stagewise_k1_alternates_every_step():
    s = StageSchedule("stagewise", 1)
    assert [next(iter(s.active_roles(t))) for t in range(100)] == [E, D] * 50
    assert len(s.boundaries(100)) == 100


def test_stagewise_matches_eq9_for_other_k():
    s = StageSchedule("stagewise", 7)
    for t in range(100):
        assert s.active_roles(t) == ({E} if (t // 7) % 2 == 0 else {D})
    bounds = s.boundaries(100)
    assert bounds[0] == (0, 7, E) and bounds[-1] == (98, 100, E)
    assert sum(end - start for start, end, _ in bounds) == 100


@pytest.mark.parametrize(
    "mode, roles, name",
    [("coupled", {D, E}, "coupled"), ("designer_only", {D}, D), ("executor_only", {E}, E), ("frozen", set(), "frozen")],
)
def test_fixed_modes_over_100_steps(mode, roles, name):
    s = StageSchedule(mode, 30)
    assert all(s.active_roles(t) == roles for t in range(100))
    assert all(s.stage(t).name == name and s.stage(t).index == 0 for t in range(100))
    assert s.boundaries(100) == [(0, 100, name)]
    assert s.boundaries(0) == []


@pytest.mark.parametrize("mode", MODES)
def test_state_round_trips_through_json(mode):
    s = StageSchedule(mode, 5)
    back = StageSchedule.from_state_dict(json.loads(json.dumps(s.state_dict())))
    assert back == s and [back.active_roles(t) for t in range(100)] == [s.active_roles(t) for t in range(100)]


def test_bad_settings_are_refused():
    with pytest.raises(ScheduleError, match="mode must be one of"):
        StageSchedule("alternating")
    with pytest.raises(ScheduleError, match="stage_len must be a positive integer"):
        StageSchedule("stagewise", 0)
    with pytest.raises(ScheduleError, match="step must be an integer >= 0"):
        StageSchedule().active_roles(-1)
    with pytest.raises(ScheduleError, match="role must be one of"):
        StageSchedule().is_active("judge", 0)
    with pytest.raises(ScheduleError, match="unknown schedule state"):
        StageSchedule.from_state_dict({"mode": "coupled", "stage_len": 3, "step": 4})


# ---- optim.stage_switch in the training loop -------------------------------------------------------------------


@register_estimator("ones_for_stage_switch_tests")
def _ones(trees):
    """Advantage 1 for every design and execution: each step with samples updates (no all-zero skip)."""
    from metaagent.credit import TreeCredit

    return [
        TreeCredit(
            designer={i: 1.0 for i in range(len(t.designs))},
            executor={(i, j): 1.0 for i, d in enumerate(t.designs) for j in range(len(d.executions))},
        )
        for t in trees
    ]


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["keep", "reset"])
def test_the_loop_resets_the_optimizer_moments_at_each_stage_boundary(tmp_path, monkeypatch, switch):
    """K = 1 stagewise, one shared model, a frozen one-agent design: executor (step 0), designer (step 1: the
    frozen design has no designer sample, nothing to update), executor (step 2). ``reset`` clears AdamW at the
    boundaries before steps 1 and 2, so the executor's step-2 update starts AdamW afresh (step count 1);
    ``keep`` carries the step-0 moments on (count 2)."""
    from metaagent.train.config import TrainConfig
    from metaagent.train.local import LocalBackend
    from metaagent.train.loop import TrainLoop

    calls: list[int] = []
    real = LocalBackend.reset_optimizer_moments
    monkeypatch.setattr(LocalBackend, "reset_optimizer_moments", lambda self: (calls.append(1), real(self))[-1])
    cfg = TrainConfig.load("tiny", [
        f"trainer.out={tmp_path / 'run'}", "trainer.steps=3", "trainer.save_every=0", "schedule.stage_len=1",
        "rollout.frozen_designer=single_math", "rollout.m_designs=1", "rollout.n_executions=1", "data.batch_size=1",
        "data.train=[{source: bundled, split: train, levels: [1], domain: math}]", "data.val=[]",
        "rollout.executor.max_tokens=4", "algo.estimator=ones_for_stage_switch_tests", f"optim.stage_switch={switch}",
    ])  # fmt: skip
    per_step: list[tuple[str, int, float]] = []
    with TrainLoop(cfg) as trainer:
        (updater,) = trainer.backend.updaters.values()

        def seen(result) -> None:
            steps = {int(s["step"]) for s in updater.optimizer.state.values()}
            per_step.append((result.metrics["schedule/active"], len(calls), result.metrics["train/skipped_step"]))
            per_step[-1] += (steps,)

        trainer.train(on_step=seen)
    active = [p[0] for p in per_step]
    assert active == [E, D, E] and [p[2] for p in per_step] == [0.0, 1.0, 0.0]
    if switch == "reset":
        assert [p[1] for p in per_step] == [0, 1, 2]  # called entering steps 1 and 2, not at step 0
        assert per_step[2][3] == {1}  # the executor's update at step 2 started AdamW afresh
    else:
        assert [p[1] for p in per_step] == [0, 0, 0]
        assert per_step[2][3] == {2}
