import json

import pytest

from metaagent.records import (
    SCHEMA_VERSION,
    AgentTurn,
    CheckReport,
    Design,
    Diagnostic,
    Execution,
    RewardRecord,
    RolloutTree,
    SchemaError,
    read_trees,
    write_trees,
)


def _tree(seed=0):
    turn = AgentTurn(0, "Solver", "sys", [{"role": "user", "content": "q"}], "r <delivery>5</delivery>", "5",
                     [1, 2], [3, 4], [-0.125, -1e-9], "stop", "m", parents=[])
    ex = Execution(0, "ok", answer="\\boxed{5}", submitted=True, turns=[turn],
                   reward=RewardRecord(1.4, 1.0, 1.0, {"delivery_format": 1.0}))
    bad = Design(1, "designer", None, None, CheckReport(False, [Diagnostic(3, 4, "E-IMPORT", "no imports")]))
    return RolloutTree("run", {"id": "t1", "domain": "math"}, seed, {"m": 2}, {"designer": "m"},
                       designs=[Design(0, "designer", None, "x", CheckReport(True), executions=[ex]), bad])


def test_jsonl_round_trip_is_exact(tmp_path):
    trees = [_tree(0), _tree(1)]
    write_trees(tmp_path / "r.jsonl", trees)
    back, bad = read_trees(tmp_path / "r.jsonl")
    assert bad == [] and back == trees
    assert back[0].designs[0].executions[0].turns[0].logprobs == [-0.125, -1e-9]
    assert not back[0].designs[1].valid and back[0].designs[0].valid


def test_corrupt_and_newer_lines_are_reported_not_fatal(tmp_path):
    p = tmp_path / "r.jsonl"
    write_trees(p, [_tree()])
    newer = _tree().to_dict() | {"schema_version": SCHEMA_VERSION + 1}
    with open(p, "a") as f:
        f.write(json.dumps(newer) + "\n")
        f.write('{"schema_version": 1, "run_id": "trunc')  # truncated last line of a live run
    trees, bad = read_trees(p)
    assert len(trees) == 1
    assert [b.line for b in bad] == [2, 3]
    assert "upgrade metaagent" in bad[0].error
    with pytest.raises(SchemaError, match=r"r.jsonl:2"):
        list(__import__("metaagent.records", fromlist=["iter_trees"]).iter_trees(p))


def test_bad_status_is_refused():
    with pytest.raises(SchemaError, match="status"):
        Execution(0, "finished")
