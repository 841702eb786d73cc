"""Samples from records (roles, advantages, truncation), micro-batching, collation and routing."""

from __future__ import annotations

import pytest
import torch

from metaagent.credit import assign_credit
from metaagent.learn.samples import (
    SampleError,
    build_samples,
    collate,
    micro_batches,
    model_key,
    route_samples,
)

TEMPS = {"designer": 0.8, "executor": 1.0}


def credited(make_token_tree, rows=((1.0, 0.0), (0.0, 0.0), ()), seed=0):
    tree = make_token_tree([list(r) for r in rows], seed=seed)
    assign_credit([tree])
    return tree


def test_both_roles(make_token_tree):
    tree = credited(make_token_tree)
    samples = build_samples([tree], active_roles={"designer", "executor"}, temperatures=TEMPS)
    designer = [s for s in samples if s.role == "designer"]
    executor = [s for s in samples if s.role == "executor"]
    assert [s.key for s in designer] == [(0, 0), (0, 1), (0, 2)]  # the invalid design is trained (reward 0)
    assert [s.advantage for s in designer] == [d.advantage for d in tree.designs]
    assert len(executor) == 8  # 4 executions x 2 turns
    for s in executor:
        _, i, j, k = s.key
        e = tree.designs[i].executions[j]
        assert s.advantage == e.advantage and s.agent == e.turns[k].role and s.temperature == 1.0
        assert s.response_ids == e.turns[k].response_ids and s.old_logprobs == e.turns[k].logprobs
    assert designer[0].temperature == 0.8 and designer[0].prompt_ids == tree.designs[0].sample.prompt_ids
    assert samples.metrics["samples/designer"] == 3 and samples.metrics["samples/executor"] == 8
    assert samples.metrics["samples/tokens/executor"] == sum(len(s.response_ids) for s in executor)


def test_inactive_role_is_not_built_and_counted(make_token_tree):
    tree = credited(make_token_tree)
    ex = build_samples([tree], active_roles={"executor"}, temperatures={"executor": 1.0})
    assert {s.role for s in ex} == {"executor"} and ex.metrics["samples/inactive/designer"] == 3
    de = build_samples([tree], active_roles=frozenset({"designer"}), temperatures={"designer": 1.0})
    assert {s.role for s in de} == {"designer"} and de.metrics["samples/inactive/executor"] == 8


def test_frozen_designs_and_missing_advantages_are_skipped_and_counted(make_token_tree):
    tree = credited(make_token_tree)
    tree.designs[0].sample = None  # frozen design: nothing to train for the designer
    tree.designs[1].advantage = None
    tree.designs[0].executions[1].advantage = None
    samples = build_samples([tree], active_roles={"designer", "executor"}, temperatures=TEMPS)
    assert [s.key for s in samples if s.role == "designer"] == [(0, 2)]
    assert samples.metrics["samples/frozen_designs"] == 1
    assert samples.metrics["samples/no_advantage/designer"] == 1
    assert samples.metrics["samples/no_advantage/executor"] == 2
    assert samples.metrics["samples/executor"] == 6


def test_turn_advantages_override_the_execution(make_token_tree):
    tree = credited(make_token_tree)
    samples = build_samples(
        [tree], active_roles={"executor"}, temperatures=TEMPS, turn_advantages={(0, 0, 0, 1): 9.0}
    )
    by_key = {s.key: s.advantage for s in samples}
    assert by_key[(0, 0, 0, 1)] == 9.0 and by_key[(0, 0, 0, 0)] == tree.designs[0].executions[0].advantage


def test_greedy_temperature_means_plain_softmax(make_token_tree):
    tree = credited(make_token_tree)
    samples = build_samples([tree], active_roles={"designer"}, temperatures={"designer": 0.0})
    assert {s.temperature for s in samples} == {1.0}


def test_truncation_rule(make_token_tree):
    tree = credited(make_token_tree)
    turn = tree.designs[0].executions[0].turns[0]
    turn.response_ids, turn.logprobs = list(range(10)), [-0.1 * i for i in range(10)]
    turn.prompt_ids = list(range(3))
    long_prompt = tree.designs[0].executions[0].turns[1]
    long_prompt.prompt_ids = list(range(40))
    samples = build_samples(
        [tree], active_roles={"executor"}, temperatures=TEMPS, max_prompt_len=20, max_response_len=4
    )
    cut = next(s for s in samples if s.key == (0, 0, 0, 0))
    assert cut.response_ids == [0, 1, 2, 3] and cut.old_logprobs == [0.0, -0.1, -0.2, -0.30000000000000004]
    assert cut.truncated and cut.prompt_ids == [0, 1, 2]  # the response keeps its first tokens
    assert (0, 0, 0, 1) not in {s.key for s in samples}  # a long prompt is never cut: the sample is dropped
    assert samples.metrics["samples/dropped_long_prompt"] == 1
    assert samples.metrics["samples/truncated_response"] >= 1
    assert all(len(s.response_ids) <= 4 for s in samples)


def test_bad_records_are_named(make_token_tree):
    tree = credited(make_token_tree)
    with pytest.raises(SampleError, match="no sampling temperature for role 'executor'"):
        build_samples([tree], active_roles={"executor"}, temperatures={"designer": 1.0})
    with pytest.raises(SampleError, match="unknown role"):
        build_samples([tree], active_roles={"judge"}, temperatures=TEMPS)
    tree.designs[0].executions[0].turns[1].logprobs = None
    with pytest.raises(SampleError, match=r"designs\[0\].executions\[0\].turns\[1\] has no log-probs"):
        build_samples([tree], active_roles={"executor"}, temperatures=TEMPS)
    tree.designs[0].executions[0].turns[1].logprobs = [0.0]
    with pytest.raises(SampleError, match="log-probs"):
        build_samples([tree], active_roles={"executor"}, temperatures=TEMPS)


def test_micro_batches_respect_the_budget_and_keep_every_sample(make_samples):
    samples = make_samples(40, seed=7)
    for budget in (1, 16, 40, 10_000):
        mbs = micro_batches(samples, budget)
        assert sorted(id(s) for mb in mbs for s in mb) == sorted(id(s) for s in samples)
        for mb in mbs:
            assert len(mb) == 1 or len(mb) * max(s.num_tokens for s in mb) <= budget
    assert len(micro_batches(samples, 10_000)) == 1 and len(micro_batches(samples, 1)) == 40


def test_collate_shapes_and_alignment(make_samples):
    samples = make_samples(3, seed=8)
    b = collate(samples, pad_id=60)
    L = max(s.num_tokens for s in samples)
    R = max(len(s.response_ids) for s in samples)
    assert (
        b["input_ids"].shape == (3, L) and b["responses"].shape == (3, R) and b["temperatures"].shape == (3,)
    )
    for row, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        assert b["input_ids"][row, : p + r].tolist() == s.prompt_ids + s.response_ids
        assert (b["input_ids"][row, p + r :] == 60).all() and b["attention_mask"][row].sum() == p + r
        # the hidden state at response_index[t] predicts response token t
        idx = b["response_index"][row, :r]
        assert b["input_ids"][row, idx + 1].tolist() == s.response_ids
        assert b["response_mask"][row].sum() == r
        assert torch.allclose(b["advantages"][row, :r], torch.full((r,), s.advantage))
        assert (b["advantages"][row, r:] == 0).all()
        assert b["old_log_probs"][row, :r].tolist() == pytest.approx(s.old_logprobs)
    with pytest.raises(SampleError):
        collate([])


def test_route_samples_shared_separate_partial(make_samples):
    samples = make_samples(6)
    samples[1].agent = "Verifier"
    shared = route_samples(samples, {"designer": "policy", "executor": "policy"})
    assert list(shared) == ["policy"] and len(shared["policy"]) == 6
    separate = route_samples(samples, {"designer": "D", "executor": "E"})
    assert {s.role for s in separate["D"]} == {"designer"} and {s.role for s in separate["E"]} == {"executor"}
    partial = route_samples(samples, {"executor:Verifier*": "V", "*": "policy"})
    assert [s.agent for s in partial["V"]] == ["Verifier"] and len(partial["policy"]) == 5
    assert model_key(samples[0], lambda s: s.role.upper()) == "DESIGNER"
    with pytest.raises(SampleError, match="no model for sample 'executor:Verifier'"):
        route_samples(samples, {"designer": "D"})
