"""AT-GRPO Eq. 1 within (environment, agent, turn) candidate groups: values, exclusions, singletons,
zero variance, and what the records carry afterwards."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metaagent.credit import CreditError, assign_credit
from metaagent.credit.at_grpo import candidate_advantages
from metaagent.records import (
    AgentTurn,
    CheckReport,
    Design,
    Execution,
    RewardRecord,
    RolloutTree,
    TurnGroup,
)


def _turn(call: int, role: str = "A", text: str = "r") -> AgentTurn:
    return AgentTurn(call, role, "sys", [{"role": "user", "content": "q"}], text, text, [1, 2], [3, 4],
                     [-0.1, -0.2], "stop", "m", call_index=call)  # fmt: skip


def _group(key: str, call: int, rewards, role: str = "A") -> TurnGroup:
    cands = [_turn(call, role, f"c{c}") for c in range(len(rewards))]
    computable = [r for r in rewards if r is not None]
    sel = rewards.index(max(computable)) if computable else 0
    return TurnGroup(key, role, call, call, cands, sel, list(rewards))


def _tree(groups_per_execution) -> RolloutTree:
    executions = []
    for j, groups in enumerate(groups_per_execution):
        turns = [_turn(g.call_index, g.role, g.candidates[g.selected].response) for g in groups]
        executions.append(Execution(j, "ok", turns=turns, groups=groups, reward=RewardRecord(float(j), float(j), 0.0)))
    design = Design(0, "frozen:t", None, "s", CheckReport(True), executions=executions)
    return RolloutTree("r", {"id": "q"}, 0, {}, {}, designs=[design])


def _eq1(r):
    r = np.asarray(r, dtype=np.float64)
    return (r - r.mean()) / (r.std(ddof=1) + 1e-6)


def test_eq1_with_k_candidates_and_an_excluded_one():
    advs, case = candidate_advantages([1.0, None, 0.0, 0.5], eps=1e-6, norm_by_std=True,
                                      filter_zero_var=False, allow_singletons=False)  # fmt: skip
    assert case == "ok" and advs[1] is None
    np.testing.assert_allclose([advs[0], advs[2], advs[3]], _eq1([1.0, 0.0, 0.5]), rtol=1e-12)
    # hand value: mean 0.5, sample std 0.5 -> A = +-1/(1+2e-6)
    assert advs[0] == pytest.approx(0.5 / (0.5 + 1e-6), abs=1e-12) and advs[3] == 0.0


def test_singleton_and_zero_variance_groups_are_explicit():
    kw = dict(eps=1e-6, norm_by_std=True, filter_zero_var=False)
    assert candidate_advantages([None, 2.0, None], allow_singletons=False, **kw) == ([None, None, None], "singleton")
    assert candidate_advantages([None, 2.0, None], allow_singletons=True, **kw) == ([None, 0.0, None], "singleton")
    assert candidate_advantages([3.0, 3.0, 3.0], allow_singletons=False, **kw) == ([0.0, 0.0, 0.0], "zero_var")
    filt = dict(kw, filter_zero_var=True)
    assert candidate_advantages([3.0, 3.0], allow_singletons=False, **filt) == ([None, None], "zero_var")
    assert candidate_advantages([None, None], allow_singletons=False, **kw) == ([None, None], "empty")


def test_shift_invariance_a_constant_team_term_changes_nothing():
    """SEED-SYSTEMS 1.1 insight: a reward term constant over a group's K candidates changes no advantage."""
    kw = dict(eps=0.0, norm_by_std=True, filter_zero_var=False, allow_singletons=False)
    a, _ = candidate_advantages([0.2, 0.7, 0.1, 0.4], **kw)
    b, _ = candidate_advantages([1.2, 1.7, 1.1, 1.4], **kw)
    assert all(math.isclose(x, y, abs_tol=1e-12) for x, y in zip(a, b))


def test_record_level_groups_counts_and_written_advantages():
    e0 = [_group("q/e0|A|0", 0, [1.0, None, 0.0]), _group("q/e0|B|0", 1, [2.0, 2.0, 2.0], "B")]
    e1 = [_group("q/e1|A|0", 0, [None, 5.0, None]), _group("q/e1|B|0", 1, [None, None, None], "B")]
    tree = _tree([e0, e1])
    res = assign_credit([tree], "at_grpo")
    m = res.metrics
    assert m["credit/at_grpo/groups"] == 4 and m["credit/at_grpo/candidates"] == 12
    assert m["credit/at_grpo/excluded_candidates"] == 1 + 2 + 3
    assert m["credit/at_grpo/singleton_groups"] == 1 and m["credit/at_grpo/zero_var_groups"] == 1
    assert m["credit/at_grpo/empty_groups"] == 1 and m["credit/at_grpo/selected_is_best"] == 3
    g = tree.designs[0].executions[0].groups
    assert g[0].advantages[1] is None and g[0].advantages[0] == pytest.approx(0.5 / (0.5**0.5 + 1e-6), abs=1e-12)
    assert g[1].advantages == [0.0, 0.0, 0.0]
    assert tree.designs[0].executions[1].groups[0].advantages == [None, None, None]  # singleton dropped
    # the executed turn carries its selected candidate's advantage; ungrouped turns get none (fallback)
    assert tree.designs[0].executions[0].turns[0].advantage == g[0].advantages[g[0].selected]
    assert tree.designs[0].executions[0].advantage is None


def test_k1_groups_are_refused_unless_singletons_are_allowed():
    tree = _tree([[_group("q/e0|A|0", 0, [1.0])]])
    with pytest.raises(CreditError, match="one candidate"):
        assign_credit([tree], "at_grpo")
    res = assign_credit([tree], "at_grpo", allow_singletons=True)
    assert tree.designs[0].executions[0].groups[0].advantages == [0.0]
    assert res.metrics["credit/at_grpo/singleton_groups"] == 1


def test_duplicate_group_keys_are_an_error():
    tree = _tree([[_group("same", 0, [1.0, 0.0])], [_group("same", 0, [1.0, 0.0])]])
    with pytest.raises(CreditError, match="two candidate groups"):
        assign_credit([tree], "at_grpo")
