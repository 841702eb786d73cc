"""Records schema v2: v1 files load and replay unchanged, v2 round-trips, the new records validate."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from metaagent.records import (
    SCHEMA_VERSION,
    AgentTurn,
    Counterfactual,
    FirstError,
    PreferencePair,
    RewardRecord,
    RolloutTree,
    SchemaError,
    TurnGroup,
    TurnReward,
    iter_trees,
    write_trees,
)

V1_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"  # written by metaagent 0.1 (schema 1)


def v1_trees() -> list[RolloutTree]:
    return list(iter_trees(V1_RUN / "rollouts" / "step_000001.jsonl"))


def tree_with_turns() -> RolloutTree:
    return next(t for t in v1_trees() if any(e.turns for _, e in t.executions()))


def test_the_fixture_is_really_v1():
    import json

    rows = [json.loads(line) for line in (V1_RUN / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert {r["schema_version"] for r in rows} == {1}
    turns = [t for r in rows for d in r["designs"] for e in d["executions"] for t in e["turns"]]
    assert turns and all("role_turn" not in t for t in turns)


def test_v1_records_migrate_with_derived_turn_fields():
    trees = v1_trees()
    assert trees and all(t.schema_version == SCHEMA_VERSION == 2 for t in trees)
    turns = [turn for t in trees for _, e in t.executions() for turn in e.turns]
    assert turns
    for _, e in (pair for t in trees for pair in t.executions()):
        seen: dict[str, int] = {}
        for turn in e.turns:
            assert turn.call_index == turn.index
            assert turn.role_turn == seen.get(turn.role, 0)
            seen[turn.role] = seen.get(turn.role, 0) + 1
            assert turn.reward is None and turn.advantage is None and not turn.synthetic
        assert e.groups == [] and e.counterfactuals == [] and e.first_error is None and e.preferences == []


def test_v2_round_trips_with_every_new_record(tmp_path):
    tree = tree_with_turns()
    _, execution = next((d, e) for d, e in tree.executions() if e.turns)
    turn = execution.turns[0]
    turn.reward = TurnReward(0.5, "judge", components={"score": 5.0}, details={"judge": "rule"})
    turn.labels = {"helpful": 1.0}
    turn.advantage = -0.25
    cand = AgentTurn.from_dict({**turn.to_dict(), "response": "another reply", "advantage": None})
    execution.groups = [TurnGroup("e0/Solver/0", turn.role, 0, 0, [turn, cand], 1, [0.5, None], [0.7, None])]
    execution.counterfactuals = [
        Counterfactual([turn.role], "noop", 7, "ok", RewardRecord(1.0, 1.0, 0.0), n_calls=2, turns=[cand])
    ]
    execution.first_error = FirstError(2, turn.role, [{"turn": 1, "verdict": "OK"}, {"turn": 2, "verdict": "ERR"}], "rule")
    execution.preferences = [PreferencePair(0, turn.messages, [1, 2], [3], [4, 5], "resample", 0.5, [-0.1])]
    path = tmp_path / "v2.jsonl"
    write_trees(path, [tree])
    (back,) = list(iter_trees(path))
    assert back.to_dict() == tree.to_dict()
    back_execution = next(e for _, e in back.executions() if e.turns)
    assert back_execution.groups[0].candidates[1].response == "another reply"
    assert isinstance(back_execution.counterfactuals[0].reward, RewardRecord)
    assert isinstance(back_execution.turns[0].reward, TurnReward)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: TurnReward(None, "judge"), "set error"),
        (lambda: TurnReward(1.0, "oracle"), "source"),
        (lambda: TurnGroup("k", "A", 0, 0, [], 0, []), "selected"),
        (lambda: PreferencePair(0, [], [], [], [], "guess"), "source"),
    ],
)
def test_new_records_refuse_bad_values(build, message):
    with pytest.raises(SchemaError, match=message):
        build()


def _render(run_dir: Path) -> str:
    from metaagent.replay import load_run
    from metaagent.replay.console import print_task

    run = load_run(run_dir)
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    print_task(run.refs, console, full=True)
    return " ".join(out.getvalue().replace(str(run_dir), "RUN").replace("─", "").split())  # boxes vary with the path


def test_v1_files_replay_exactly_like_their_v2_rewrite(tmp_path):
    """Replay of the v1 run directory prints the same as the same trees written back as v2."""
    v2_run = tmp_path / "v2"
    shutil.copytree(V1_RUN, v2_run)
    for f in (v2_run / "rollouts").glob("*.jsonl"):
        trees = list(iter_trees(f))
        f.unlink()
        write_trees(f, trees)
    assert '"schema_version":2' in (v2_run / "rollouts" / "step_000001.jsonl").read_text()
    assert _render(V1_RUN) == _render(v2_run)
    assert "turn 0 ·" in _render(V1_RUN)


def test_the_html_report_shows_per_turn_credit_candidates_and_counterfactuals(tmp_path):
    from metaagent.replay import load_run
    from metaagent.replay.report import render_html

    tree = tree_with_turns()
    _, execution = next((d, e) for d, e in tree.executions() if e.turns)
    turn = execution.turns[0]
    turn.reward = TurnReward(0.5, "judge", components={"score": 5.0})
    turn.advantage = -0.25
    cand = AgentTurn.from_dict({**turn.to_dict(), "response": "the other candidate"})
    execution.groups = [TurnGroup("k", turn.role, 0, 0, [turn, cand], 1, [0.5, 0.9], [0.1, 0.2])]
    execution.counterfactuals = [Counterfactual([turn.role], "noop", 7, "ok", RewardRecord(1.0, 1.0, 0.0))]
    run_dir = tmp_path / "run"
    write_trees(run_dir / "rollouts" / "step_000000.jsonl", [tree])
    html = render_html(load_run(run_dir), tmp_path / "report.html").read_text()
    assert "turn reward (judge) <b>0.500</b>" in html and "turn advantage <b>-0.250</b>" in html
    assert "▶ selected candidate 1" in html and "the other candidate" in html
    assert "counterfactual: keep" in html and "others → noop" in html
