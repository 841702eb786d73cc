"""The replay's reward line shows the format weight: ``0.267 = correct 0.000 + 0.4 × format 0.667``."""

from __future__ import annotations

from metaagent.records import RewardRecord
from metaagent.replay.text import reward_terms


def _reward(correct: float, fmt: float, lam: float = 0.4, overlong: float = 0.0) -> RewardRecord:
    components = {"format": fmt, "correct": correct, **({"overlong": overlong} if overlong else {})}
    total = correct + lam * fmt + overlong
    return RewardRecord(total=total, correct=correct, format=fmt, components=components)


def test_the_reward_line_names_the_format_weight():
    assert reward_terms(_reward(0.0, 2 / 3)) == "correct 0.000 + 0.4 × format 0.667"
    assert reward_terms(_reward(1.0, 1.0, lam=0.25)) == "correct 1.000 + 0.25 × format 1.000"
    with_overlong = reward_terms(_reward(1.0, 0.5, overlong=-0.25))
    assert with_overlong == "correct 1.000 + 0.4 × format 0.500 - overlong 0.250"


def test_a_zero_format_score_shows_no_weight_it_cannot_read():
    assert reward_terms(_reward(1.0, 0.0)) == "correct 1.000 + format 0.000"
