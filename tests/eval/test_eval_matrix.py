"""The structure matrix's numbers: oracles, the cross-fitted oracle, the mixture, the oracle-pattern share."""

from __future__ import annotations

import pytest

from metaagent.eval.matrix import cell, compute, cross_fitted_oracle, mixture, oracle, pattern_share
from metaagent.eval.scoring import TaskScore
from metaagent.records import RolloutTree


def _scores(family: str, values: list[float]) -> list[TaskScore]:
    return [TaskScore(f"{family}-{i:02d}", "math", 4, 0, 4, 0, avg={4: v}) for i, v in enumerate(values)]


def _matrix() -> dict[tuple[str, str], list[TaskScore]]:
    # family "a": tool best (0.8 vs sa 0.1); family "b": sa best (0.6 vs tool 0.2); auto is never a candidate
    return {
        ("a", "sa"): _scores("a", [0.0, 0.25, 0.0, 0.15] * 5),
        ("a", "fixed:tool"): _scores("a", [1.0, 0.5, 0.75, 0.95] * 5),
        ("a", "auto"): _scores("a", [1.0] * 20),
        ("b", "sa"): _scores("b", [0.5, 0.75, 0.5, 0.65] * 5),
        ("b", "fixed:tool"): _scores("b", [0.25, 0.0, 0.25, 0.3] * 5),
        ("b", "auto"): _scores("b", [1.0] * 20),
    }


def test_oracle_is_the_best_candidate_and_never_auto():
    m = _matrix()
    assert oracle(m, "a", k=4) == "fixed:tool" and oracle(m, "b", k=4) == "sa"
    c = cell(m["a", "fixed:tool"], k=4)
    assert c["tasks"] == 20 and c["mean"] == pytest.approx(0.8) and c["ci95"][0] < 0.8 < c["ci95"][1]
    empty = cell(m["a", "sa"], k=1)  # no avg@1 recorded
    assert (empty["tasks"], empty["mean"], empty["ci95"]) == (0, None, None)


def test_cells_carry_the_compute_per_sample():
    scores = [
        TaskScore("t0", "math", 2, 1, 2, 0, avg={2: 0.5}, tokens=30, agent_calls=4, sampled_designs=2),
        TaskScore("t1", "math", 2, 2, 2, 0, avg={2: 1.0}, tokens=10, agent_calls=2, sampled_designs=2),
    ]
    assert cell(scores, k=2)["compute"] == {"executor_calls": 1.5, "designer_calls": 1.0, "tokens": 10.0}
    assert compute([]) == {"executor_calls": None, "designer_calls": None, "tokens": None}


def test_mixture_oracle_beats_the_best_single_method_and_auto_is_not_a_single_method():
    out = mixture(_matrix(), ["a", "b"], ["sa", "fixed:tool", "auto"], k=4)
    assert out["oracles"] == {"a": "fixed:tool", "b": "sa"}
    assert out["methods"]["sa"] == pytest.approx((0.1 + 0.6) / 2)
    assert out["methods"]["fixed:tool"] == pytest.approx((0.8 + 0.2) / 2)
    assert out["best_single"] == "fixed:tool" and out["oracle"] == pytest.approx(0.7)
    diff = out["oracle_minus_best_single"]
    assert diff["tasks"] == 40 and diff["diff"] == pytest.approx(0.2) and diff["ci95"][0] > 0


def test_a_method_not_run_on_a_family_scores_zero_there():
    m = _matrix()
    m["a", "fixed:code_only"] = _scores("a", [1.0] * 20)  # e.g. a code template: not run on family b
    out = mixture(m, ["a", "b"], ["sa", "fixed:tool", "fixed:code_only"], k=4)
    assert out["methods"]["fixed:code_only"] == pytest.approx(0.5)


def test_cross_fitted_oracle_does_not_reward_picking_noise():
    """Two methods equal in truth: the in-sample max is optimistic, the cross-fitted choice is not."""
    noise_a = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0] * 3
    noise_b = [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0] * 3
    m = {("f", "sa"): _scores("f", noise_a), ("f", "fixed:x"): _scores("f", noise_b)}
    in_sample = max(sum(noise_a), sum(noise_b)) / 24
    crossed = cross_fitted_oracle(m, "f", k=4)
    assert len(crossed) == 24 and sum(crossed.values()) / 24 < in_sample


def test_pattern_share_counts_valid_designs_only():
    def tree(patterns):
        designs = [
            {"index": i, "source": "designer", "sample": None, "script": "x", "check": {"ok": p is not None, "errors": [], "warnings": []},
             "structure": {"pattern": p} if p else None, "executions": []}
            for i, p in enumerate(patterns)
        ]  # fmt: skip
        return RolloutTree.from_dict({"run_id": "r", "task": {"id": "t", "domain": "math", "question": "q"},
                                      "seed": 0, "config": {}, "models": {}, "designs": designs})  # fmt: skip

    out = pattern_share([tree(["tool-pair", "single", None, "tool-pair"]), tree(["single"])], "tool-pair")
    assert out["designs"] == 5 and out["valid"] == 4 and out["share"] == pytest.approx(0.5)
    assert pattern_share([tree([None])], "single")["share"] is None


def test_a_tie_goes_to_the_single_agent():
    m = {("f", "sa"): _scores("f", [0.5] * 4), ("f", "fixed:a"): _scores("f", [0.5] * 4)}
    assert oracle(m, "f", k=4) == "sa"
