"""rollout_metrics: the spread of the designer's patterns (a collapse onto one team shows as entropy 0)."""

from __future__ import annotations

import math

import pytest

from metaagent.records import CheckReport, Design, DesignerSample, RolloutTree
from metaagent.rollout.metrics import rollout_metrics


def design(index: int, pattern: str | None, *, sampled: bool = True) -> Design:
    sample = DesignerSample(messages=[], text="", prompt_ids=[1], response_ids=[2], logprobs=None,
                            finish_reason="stop", model="m") if sampled else None  # fmt: skip
    return Design(index=index, source="designer" if sampled else "frozen:sa", sample=sample,
                  script="x" if pattern else None, check=CheckReport(ok=pattern is not None),
                  structure={"pattern": pattern} if pattern else None, reward=0.0)  # fmt: skip


def tree(*designs: Design) -> RolloutTree:
    return RolloutTree(run_id="r", task={"id": "t", "domain": "math"}, seed=0, config={}, models={},
                       designs=list(designs))  # fmt: skip


def test_pattern_entropy_counts_the_designers_valid_sampled_designs_only():
    m = rollout_metrics([tree(design(0, "single"), design(1, "tool-pair"), design(2, None)),
                         tree(design(0, "single"), design(1, "single"), design(2, "debate", sampled=False))])  # fmt: skip
    # valid sampled designs: single x3, tool-pair x1 (the invalid one and the frozen one are not the designer's choice)
    assert m["rollout/pattern_entropy"] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert m["rollout/top_pattern_share"] == pytest.approx(0.75)


def test_one_pattern_everywhere_is_entropy_zero_and_no_valid_design_logs_nothing():
    m = rollout_metrics([tree(design(0, "single"), design(1, "single"))])
    assert m["rollout/pattern_entropy"] == 0.0 and m["rollout/top_pattern_share"] == 1.0
    assert "rollout/pattern_entropy" not in rollout_metrics([tree(design(0, None))])
