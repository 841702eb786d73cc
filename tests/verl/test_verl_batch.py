"""Samples -> verl DataProto: fields, shapes, masks, advantage placement, DP padding and balance (CPU)."""

from __future__ import annotations

import pytest
import torch
from builders import PAD, samples_of

from metaagent.learn.samples import Sample
from metaagent.train.verl_backend.batch import build_update_batch, padded_size, update_tensordict
from metaagent.train.verl_backend.errors import VerlBackendError


def _rows_by_key(batch):
    keys = batch.data.non_tensor_batch["mas_key"]
    pad = batch.data.non_tensor_batch["is_padding"]
    return {k: i for i, (k, p) in enumerate(zip(keys, pad)) if not p}


def test_fields_shapes_and_masks_of_a_mixed_designer_executor_batch(trees):
    samples = samples_of(trees)
    roles = {s.role for s in samples}
    assert roles == {"designer", "executor"}
    batch = build_update_batch(samples, dp_size=1, pad_id=PAD)
    d = batch.data.batch
    b = len(samples)
    p = max(len(s.prompt_ids) for s in samples)
    r = max(len(s.response_ids) for s in samples)
    shapes = {k: tuple(v.shape) for k, v in d.items()}
    assert shapes == {
        "prompts": (b, p),
        "responses": (b, r),
        "input_ids": (b, p + r),
        "attention_mask": (b, p + r),
        "position_ids": (b, p + r),
        "response_mask": (b, r),
        "old_log_probs": (b, r),
        "advantages": (b, r),
        "returns": (b, r),
        "temperature": (b,),
    }
    assert batch.real_rows == b and batch.pad_rows == 0
    rows = _rows_by_key(batch)
    for s in samples:
        i = rows[",".join(map(str, s.key))]
        lp, lr = len(s.prompt_ids), len(s.response_ids)
        # prompt left-padded, response right-padded, input_ids their concatenation
        assert d["prompts"][i, p - lp :].tolist() == s.prompt_ids
        assert (d["prompts"][i, : p - lp] == PAD).all()
        assert d["responses"][i, :lr].tolist() == s.response_ids
        assert (d["responses"][i, lr:] == PAD).all()
        assert torch.equal(d["input_ids"][i], torch.cat([d["prompts"][i], d["responses"][i]]))
        expected_attn = [0] * (p - lp) + [1] * (lp + lr) + [0] * (r - lr)
        assert d["attention_mask"][i].tolist() == expected_attn
        # positions count real tokens from 0 (verl's compute_position_id_with_mask)
        assert d["position_ids"][i, p - lp : p + lr].tolist() == list(range(lp + lr))
        assert d["response_mask"][i].tolist() == [1] * lr + [0] * (r - lr)
        assert d["old_log_probs"][i, :lr].tolist() == pytest.approx(s.old_logprobs, abs=1e-6)
        assert (d["old_log_probs"][i, lr:] == 0).all()
        assert d["advantages"][i, :lr].tolist() == pytest.approx([s.advantage] * lr, abs=1e-6)
        assert (d["advantages"][i, lr:] == 0).all()
        assert float(d["temperature"][i]) == pytest.approx(s.temperature)
        assert batch.data.non_tensor_batch["mas_role"][i] == s.role
        assert batch.data.non_tensor_batch["uid"][i] == f"{s.key[0]}:{s.task_id}"
    assert batch.response_tokens == sum(len(s.response_ids) for s in samples)
    assert torch.equal(d["returns"], d["advantages"])


def test_inactive_role_samples_are_not_in_the_batch(trees):
    executor_only = samples_of(trees, roles=("executor",))
    batch = build_update_batch(executor_only, dp_size=2, pad_id=PAD)
    nt = batch.data.non_tensor_batch
    assert set(nt["mas_role"][~nt["is_padding"]]) == {"executor"}
    assert batch.real_rows == len(executor_only)


def test_last_token_advantage_placement(trees):
    samples = samples_of(trees)
    batch = build_update_batch(samples, dp_size=1, pad_id=PAD, advantage_placement="last_token")
    d = batch.data.batch
    rows = _rows_by_key(batch)
    for s in samples:
        i, lr = rows[",".join(map(str, s.key))], len(s.response_ids)
        expected = [0.0] * (lr - 1) + [s.advantage]
        assert d["advantages"][i, :lr].tolist() == pytest.approx(expected, abs=1e-6)
        assert d["response_mask"][i, :lr].sum() == lr  # every token still counts in the token-mean


@pytest.mark.parametrize("n, dp", [(5, 4), (1, 4), (8, 4), (7, 3), (40, 8)])
def test_dp_padding_with_zero_weight_rows_and_balanced_ranks(trees, n, dp):
    samples = samples_of(trees)[:n]
    batch = build_update_batch(samples, dp_size=dp, pad_id=PAD)
    d, nt = batch.data.batch, batch.data.non_tensor_batch
    rows = len(batch.data)
    assert rows == padded_size(n, dp) and rows % dp == 0 and rows >= dp
    assert batch.pad_rows == rows - n == int(nt["is_padding"].sum())
    pad = torch.as_tensor(nt["is_padding"])
    # padding rows are forwarded but weigh nothing: no loss tokens, no advantage, no log-probs
    assert (d["response_mask"][pad] == 0).all() and (d["advantages"][pad] == 0).all()
    assert (d["attention_mask"][pad].sum(-1) > 0).all()
    assert int(d["response_mask"].sum()) == sum(len(s.response_ids) for s in samples) == batch.response_tokens
    # rank k receives the k-th contiguous slice (verl's dispatch); every rank gets rows, tokens balanced
    per = rows // dp
    tokens = d["attention_mask"].sum(-1)
    rank_tokens = [int(tokens[k * per : (k + 1) * per].sum()) for k in range(dp)]
    assert rank_tokens == batch.rank_tokens
    assert max(rank_tokens) - min(rank_tokens) <= int(tokens.max())


def test_balancing_beats_the_given_order():
    long = [Sample("executor", [1] * 30, [2] * 20, [-1.0] * 20, 1.0, 1.0, key=(0, 0, 0, k)) for k in range(4)]
    short = [Sample("executor", [1] * 2, [2] * 1, [-1.0], -1.0, 1.0, key=(0, 0, 1, k)) for k in range(4)]
    unbalanced = build_update_batch(long + short, dp_size=2, pad_id=PAD, balance=False)
    balanced = build_update_batch(long + short, dp_size=2, pad_id=PAD)
    assert unbalanced.rank_tokens == [200, 12]
    assert balanced.rank_tokens == [106, 106]


def test_bad_inputs_are_refused_with_a_reason(trees):
    samples = samples_of(trees)
    with pytest.raises(VerlBackendError, match="skip update_actor"):
        build_update_batch([], dp_size=2, pad_id=PAD)
    with pytest.raises(VerlBackendError, match="dp_size"):
        build_update_batch(samples, dp_size=0, pad_id=PAD)
    with pytest.raises(VerlBackendError, match="advantage_placement"):
        build_update_batch(samples, dp_size=1, pad_id=PAD, advantage_placement="first")
    bad = Sample("executor", [1], [2, 3], [-1.0], 1.0, 1.0, key=(0,))
    with pytest.raises(VerlBackendError, match="log-probs"):
        build_update_batch([bad], dp_size=1, pad_id=PAD)
    nan = Sample("executor", [1], [2], [-1.0], float("nan"), 1.0, key=(0,))
    with pytest.raises(VerlBackendError, match="non-finite"):
        build_update_batch([nan], dp_size=1, pad_id=PAD)


def test_update_tensordict_is_what_update_actor_expects(trees):
    samples = samples_of(trees, temperatures={"designer": 1.0, "executor": 1.0})
    batch = build_update_batch(samples, dp_size=2, pad_id=PAD)
    td = update_tensordict(batch, seed=7)
    assert td["input_ids"].is_nested and td["position_ids"].is_nested
    assert torch.equal(td["input_ids"].offsets().diff(), batch.data.batch["attention_mask"].sum(-1))
    assert td["global_batch_size"] == batch.real_rows  # the real sequence count, not the padded one
    assert td["mini_batch_size"] == len(batch.data)  # one optimizer step per training step
    assert td["epochs"] == 1 and td["seed"] == 7 and td["compute_loss"] is True
    assert td["temperature"] == 1.0  # one shared temperature: verl's scalar field
    mixed = update_tensordict(build_update_batch(samples_of(trees), dp_size=2, pad_id=PAD))
    assert isinstance(mixed["temperature"], torch.Tensor) and mixed["temperature"].shape == (len(mixed),)
