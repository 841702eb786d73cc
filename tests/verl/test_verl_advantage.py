"""metaagent credit in verl's advantage-estimator registry: identical to the local backend's advantages."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from builders import NO_TURNS, make_tree, mixed_trees, samples_of

from metaagent.credit import assign_credit
from metaagent.train.verl_backend import advantage as adv
from metaagent.train.verl_backend.errors import VerlBackendError


def local_advantages(trees, estimator="hierarchical", **options):
    """(t, i) -> designer advantage and (t, i, j) -> executor advantage written by metaagent.credit."""
    assign_credit(trees, estimator, **options)
    out = {}
    for t, tree in enumerate(trees):
        for i, d in enumerate(tree.designs):
            if d.advantage is not None:
                out[(t, i)] = d.advantage
            for j, e in enumerate(d.executions):
                if e.advantage is not None:
                    out[(t, i, j)] = e.advantage
    return out


def test_estimators_are_registered_in_verls_registry():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    assert get_adv_estimator_fn("metaagent_hierarchical") is adv.compute_metaagent_hierarchical_advantage
    assert get_adv_estimator_fn("metaagent_flat") is adv.compute_metaagent_flat_advantage


@pytest.mark.parametrize(
    "estimator, options",
    [
        ("hierarchical", {}),
        ("hierarchical", {"executor_group": "design"}),
        ("hierarchical", {"norm_by_std": False}),
        ("hierarchical", {"eps": 1e-3}),
        ("flat", {}),
    ],
)
def test_registry_advantages_equal_the_local_backends(estimator, options):
    trees = mixed_trees()
    local = local_advantages(trees, estimator, **options)
    via_verl = adv.member_advantages(trees, estimator, **options)
    assert {k for k, v in via_verl.items() if v is not None} == set(local)
    for key, value in local.items():
        assert via_verl[key] == pytest.approx(value, abs=1e-12), key
    # the training samples of both roles carry exactly these advantages
    samples = samples_of(mixed_trees(), estimator=estimator, **options)
    assert {s.role for s in samples} == {"designer", "executor"}
    assert adv.check_sample_advantages(samples, via_verl) <= 1e-12


def test_hand_checked_values_through_get_adv_estimator_fn():
    """One question, designs [[1, 0], [0, 0], invalid]: the docstring example of hierarchical_advantages."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    tree = make_tree([[1.0, 0.0], [0.0, 0.0], []])
    data = adv.credit_batch([tree])
    fn = get_adv_estimator_fn("metaagent_hierarchical")
    a, returns = fn(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=None,
        non_tensor_batch=data.non_tensor_batch,
        executor_unit="execution",  # each execution one member: the docstring's hand-checked values
    )
    got = {
        (r, int(d), int(e)): float(a[k, 0])
        for k, (r, d, e) in enumerate(
            zip(
                data.non_tensor_batch["mas_role"],
                data.non_tensor_batch["mas_design"],
                data.non_tensor_batch["mas_execution"],
            )
        )
    }
    assert got == pytest.approx(
        {
            ("designer", 0, -1): 1.1547,
            ("executor", 0, 0): 1.5,
            ("executor", 0, 1): -0.5,
            ("designer", 1, -1): -0.5774,
            ("executor", 1, 0): -0.5,
            ("executor", 1, 1): -0.5,
            ("designer", 2, -1): -0.5774,
        },
        abs=1e-4,
    )
    assert torch.equal(a, returns)


def test_per_turn_rows_of_one_execution_are_one_group_member():
    """A training-style batch repeats an execution's reward on each of its turns; the groups must not change."""
    trees = [make_tree([[1.0, 0.4, 0.0], [0.2, NO_TURNS]], seed=4)]
    data = adv.credit_batch(trees)
    nt = data.non_tensor_batch
    reps = np.where(nt["mas_role"] == "executor", 3, 1)  # three "turns" per execution
    idx = np.repeat(np.arange(len(data)), reps)
    rewards = data.batch["token_level_rewards"][idx]
    rewards = torch.cat([torch.zeros_like(rewards), rewards], dim=1)  # reward on the last of 2 tokens
    mask = torch.ones_like(rewards, dtype=torch.long)
    repeated = {k: v[idx] for k, v in nt.items()}
    a, _ = adv.compute_metaagent_hierarchical_advantage(
        rewards, mask, repeated["uid"], non_tensor_batch=repeated
    )
    expected = local_advantages(trees)
    for row in range(len(idx)):
        t, i, j = (
            int(repeated["mas_tree"][row]),
            int(repeated["mas_design"][row]),
            int(repeated["mas_execution"][row]),
        )
        key = (t, i) if j == -1 else (t, i, j)
        if key not in expected:  # the execution without agent calls is no member of the executor group
            assert j == 1 and i == 1 and math.isnan(float(a[row, 0]))
            continue
        assert float(a[row, 0]) == pytest.approx(expected[key], abs=1e-12)
        assert float(a[row, 0]) == float(a[row, 1])  # the scalar sits on every response token


def test_filtered_zero_variance_groups_get_nan_not_zero():
    trees = [make_tree([[1.0, 1.0], [1.0, 1.0]])]  # every reward equal: degenerate groups
    members = adv.member_advantages(trees, "hierarchical", filter_zero_var=True)
    assert members and all(v is None for v in members.values())
    data = adv.credit_batch(trees)
    a, _ = adv.compute_metaagent_hierarchical_advantage(
        data.batch["token_level_rewards"],
        data.batch["response_mask"],
        data.non_tensor_batch["uid"],
        non_tensor_batch=data.non_tensor_batch,
        filter_zero_var=True,
    )
    assert torch.isnan(a).all()


def test_norm_by_std_follows_verls_algo_config_when_not_given():
    trees = [make_tree([[1.0, 0.0], [0.0, 0.0]])]
    data = adv.credit_batch(trees)
    args = (data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"])
    dr_grpo, _ = adv.compute_metaagent_hierarchical_advantage(
        *args, config={"norm_adv_by_std_in_grpo": False}, non_tensor_batch=data.non_tensor_batch
    )
    grpo, _ = adv.compute_metaagent_hierarchical_advantage(
        *args, config=None, non_tensor_batch=data.non_tensor_batch
    )
    assert float(dr_grpo[0, 0]) == pytest.approx(0.5 - 0.25)  # design 0: Rbar 0.5 minus the mean 0.25
    assert not math.isclose(float(grpo[0, 0]), float(dr_grpo[0, 0]))


def test_incomplete_or_inconsistent_batches_are_refused():
    data = adv.credit_batch([make_tree([[1.0, 0.0], [0.5, 0.5]])])
    rewards, mask, uid, nt = (
        data.batch["token_level_rewards"],
        data.batch["response_mask"],
        data.non_tensor_batch["uid"],
        data.non_tensor_batch,
    )
    fn = adv.compute_metaagent_hierarchical_advantage
    with pytest.raises(VerlBackendError, match="non_tensor_batch"):
        fn(rewards, mask, uid)  # how verl's compute_advantage would call it
    without_exec = {k: v[nt["mas_role"] == "designer"] for k, v in nt.items()}
    keep = torch.as_tensor(nt["mas_role"] == "designer")
    with pytest.raises(VerlBackendError, match="every computable execution"):
        fn(rewards[keep], mask[keep], without_exec["uid"], non_tensor_batch=without_exec)
    twice = {k: np.concatenate([v, v]) for k, v in nt.items()}
    changed = torch.cat([rewards, rewards + 0.5])
    with pytest.raises(VerlBackendError, match="different rewards"):
        fn(changed, torch.cat([mask, mask]), twice["uid"], non_tensor_batch=twice)


def test_check_sample_advantages_catches_a_disagreement():
    trees = mixed_trees()
    samples = samples_of(trees)
    members = adv.member_advantages(trees)
    assert adv.check_sample_advantages(samples, members) == 0.0
    samples[0].advantage += 0.01
    with pytest.raises(VerlBackendError, match="disagree"):
        adv.check_sample_advantages(samples, members)


@pytest.mark.parametrize("balance", ["member", "design"])
def test_unequal_executions_per_design_equal_the_local_backends(balance):
    """An adaptive budget's trees (N_i = 4, 2, 3; an invalid design) give the same advantages through verl."""
    trees = [make_tree([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0], [0.0, 1.0, 0.0], []], "u0"), make_tree([[0.5, 0.0], [1.0]], "u1")]
    local = local_advantages(trees, "hierarchical", executor_balance=balance)
    via_verl = adv.member_advantages(trees, "hierarchical", executor_balance=balance)
    assert {k for k, v in via_verl.items() if v is not None} == set(local)
    for key, value in local.items():
        assert via_verl[key] == pytest.approx(value, abs=1e-12), key
