"""Stage schedule (Eq. 9) over 100 steps in every mode."""

from __future__ import annotations

import json

import pytest

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
    [("coupled", {D, E}, "coupled"), ("designer_only", {D}, D), ("executor_only", {E}, E)],
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
