"""DAPO's overlong handling (Eq. 13 soft punishment, overlong filtering) and truncated importance sampling
(Yao et al. 2025), each against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from builders import make_tree

from metaagent.config import ConfigError
from metaagent.credit import assign_credit
from metaagent.learn.losses import GlobalBatch, LossError, policy_loss, tis_weights
from metaagent.learn.optim import LossConfig
from metaagent.learn.samples import build_samples, mask_overlong
from metaagent.rewards.errors import RewardError
from metaagent.rewards.overlong import apply_overlong_penalty, overlong_penalty
from metaagent.train.config import TrainConfig

TEMPS = {"designer": 1.0, "executor": 1.0}


# ---- Eq. 13 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "length, expected",
    [(0, 0.0), (16, 0.0), (17, -0.25), (18, -0.5), (19, -0.75), (20, -1.0), (21, -1.0), (500, -1.0)],
)
def test_overlong_penalty_eq13(length, expected):
    # L_max = 20, L_cache = 4: free up to 16 tokens, then -1/4 per token, -1 at and past the limit
    assert overlong_penalty(length, 20, 4) == pytest.approx(expected)


def test_overlong_penalty_factor_and_off():
    assert overlong_penalty(18, 20, 4, penalty_factor=0.5) == pytest.approx(-0.25)
    assert overlong_penalty(20, 20, 0) == 0.0  # no buffer: no soft punishment
    assert overlong_penalty(7, 8, 8) == pytest.approx(-7 / 8)  # buffer = L_max: the penalty starts at 0 tokens
    with pytest.raises(RewardError, match="buffer <= max_len"):
        overlong_penalty(3, 4, 5)


def test_apply_overlong_penalty_sums_turns_into_the_execution_reward():
    tree = make_tree([[1.0, 0.0, None]], turns=2, seed=0)
    lengths = [(3, 5), (6, 6), (6, 6)]  # L_max = 6, buffer 2: 3 -> 0, 5 -> -0.5, 6 -> -1
    for e, (a, b) in zip(tree.designs[0].executions, lengths):
        e.turns[0].response_ids = list(range(a))
        e.turns[1].response_ids = list(range(b))
    m = apply_overlong_penalty([tree], max_len=6, buffer=2)
    e0, e1, e2 = tree.designs[0].executions
    assert e0.reward.total == pytest.approx(1.0 - 0.5) and e0.reward.components["overlong"] == pytest.approx(-0.5)
    assert e1.reward.total == pytest.approx(0.0 - 2.0)
    assert e2.reward.total is None and "overlong" not in e2.reward.components  # not computable stays so
    assert m == {"rollout/overlong_penalty_mean": pytest.approx(-1.25), "rollout/overlong_penalised": 2.0}


def test_overlong_config_checks_the_buffer_against_max_tokens():
    with pytest.raises(ConfigError, match="algo.overlong.buffer = 600 exceeds rollout.executor.max_tokens = 512"):
        TrainConfig.load(None, ["algo.overlong.buffer=600", "rollout.executor.max_tokens=512"])
    cfg = TrainConfig.load(None, ["policy.dtype=float32"])
    assert (cfg.algo.overlong.filter, cfg.algo.overlong.buffer, cfg.optim.tis_cap) == (False, 0, None)  # all off


# ---- overlong filtering ----------------------------------------------------------------------------------


def test_overlong_samples_are_counted_and_masked_per_role():
    tree = make_tree([[1.0, 0.0], [0.0, 1.0]], turns=2, seed=3)
    tree.designs[1].sample.finish_reason = "length"  # the designer hit max_tokens
    tree.designs[0].executions[1].turns[0].finish_reason = "length"
    tree.designs[1].executions[0].turns[1].finish_reason = "length"
    assign_credit([tree])
    samples = build_samples([tree], active_roles={"designer", "executor"}, temperatures=TEMPS)
    assert samples.metrics["samples/overlong/designer"] == 1.0
    assert samples.metrics["samples/overlong/executor"] == 2.0
    assert len(samples) == 2 + 8

    both = mask_overlong(samples, ["designer", "executor"])
    assert len(both) == 7 and not any(s.overlong for s in both)
    assert both.metrics["samples/overlong_masked/designer"] == 1.0
    assert both.metrics["samples/overlong_masked/executor"] == 2.0
    assert {s.key for s in samples} - {s.key for s in both} == {(0, 1), (0, 0, 1, 0), (0, 1, 0, 1)}

    only_exec = mask_overlong(samples, ["executor"])
    assert len(only_exec) == 8 and any(s.overlong and s.role == "designer" for s in only_exec)
    assert only_exec.metrics["samples/overlong_masked/designer"] == 0.0


def test_a_cut_response_is_overlong():
    tree = make_tree([[1.0, 0.0]], turns=1, seed=1)
    assign_credit([tree])
    samples = build_samples([tree], active_roles={"executor"}, temperatures=TEMPS, max_response_len=1)
    long = [s for s in samples if s.truncated]
    assert long and all(s.overlong for s in long)


# ---- truncated importance sampling -----------------------------------------------------------------------


TRAIN = torch.tensor([[-1.0, -2.0, -0.5]])
ROLLOUT = torch.tensor([[-1.5, -1.0, -0.7]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding


def test_tis_token_weights_by_hand():
    w, m = tis_weights(TRAIN, ROLLOUT, MASK, cap=1.5)
    # ratios exp(0.5) = 1.6487 -> capped at 1.5; exp(-1) = 0.3679; padding -> 0
    assert w.tolist()[0] == pytest.approx([1.5, math.exp(-1.0), 0.0], abs=1e-6)
    assert m["train/tis_clipfrac"] == pytest.approx(0.5)  # one of two tokens above the cap
    assert m["train/mismatch_kl"] == pytest.approx(((-1.5 + 1.0) + (-1.0 + 2.0)) / 2)  # mean(logp_rollout - logp_train)
    assert not w.requires_grad


def test_tis_sequence_weights_by_hand():
    w, m = tis_weights(TRAIN, ROLLOUT, MASK, cap=1.5, level="sequence")
    seq = math.exp(0.5 - 1.0)  # product of the two token ratios, below the cap
    assert w.tolist()[0] == pytest.approx([seq, seq, 0.0], abs=1e-6)
    assert m["train/tis_clipfrac"] == 0.0
    w2, m2 = tis_weights(TRAIN, ROLLOUT, MASK, cap=0.5, level="sequence")
    assert w2.tolist()[0] == pytest.approx([0.5, 0.5, 0.0]) and m2["train/tis_clipfrac"] == 1.0
    with pytest.raises(LossError, match="cap must be > 0"):
        tis_weights(TRAIN, ROLLOUT, MASK, cap=0.0)


def test_policy_loss_with_tis_by_hand():
    logp = TRAIN.clone().requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    cfg = LossConfig(tis_cap=1.5)
    loss, m = policy_loss(logp, ROLLOUT, adv, MASK, config=cfg, batch=GlobalBatch(num_tokens=2, num_samples=1))
    # pi_old := the trainer's own log-probs (ratio 1), each token's -A * ratio times its weight, mean over the
    # sample's 2 tokens: -(1.5 + e^-1) / 2; gradient -A * w_t / 2
    w1 = math.exp(-1.0)
    assert float(loss.detach()) == pytest.approx(-(1.5 + w1) / 2, abs=1e-6)
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([-1.5 / 2, -w1 / 2, 0.0], abs=1e-6)
    assert m["train/tis_clipfrac"] == pytest.approx(0.5)
    assert m["train/pg_clipfrac"] == 0.0  # the PPO ratio is against the trainer's own pi_old: never clipped here

    off, m_off = policy_loss(
        TRAIN.clone(), ROLLOUT, adv, MASK, config=LossConfig(), batch=GlobalBatch(num_tokens=2, num_samples=1)
    )
    assert "train/tis_clipfrac" not in m_off  # off by default: the ratio is against the rollout log-probs
    assert off.item() != pytest.approx(loss.item())


@pytest.mark.slow
def test_tiny_run_counts_overlong_samples_and_reports_tis(tmp_path):
    """On the local fp32 backend the rollout and the trainer compute the same log-probs: TIS clips nothing and the
    mismatch KL is float noise. The tiny model's designs all run to max_tokens: counted, masked only when asked."""
    from metaagent.learn.metrics import read_metrics
    from metaagent.train.loop import TrainLoop

    cfg = TrainConfig.load(
        "tiny",
        [f"trainer.out={tmp_path / 'run'}", "trainer.steps=1", "trainer.save_every=0", "schedule.mode=designer_only",
         "algo.overlong.filter=true", "algo.overlong.filter_roles=[executor]", "optim.tis_cap=2.0",
         "policy.dtype=float32", "optim.autocast=null"],  # the fp32 path; a bf16 rollout's mismatch is tested apart
    )  # fmt: skip
    with TrainLoop(cfg) as trainer:
        trainer.train()
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert row["samples/overlong/designer"] >= 1 and row["samples/overlong_masked/designer"] == 0
    assert row["train/samples"] == row["samples/designer"]
    assert row["train/tis_clipfrac"] == 0.0 and abs(row["train/mismatch_kl"]) < 1e-4


@pytest.mark.slow
def test_a_bf16_rollout_reports_its_mismatch_and_turns_tis_on(tmp_path):
    """A bf16 rollout copy beside fp32 master weights: the config's auto TIS cap is verl's C = 2, and the distance
    between the rollout's and the trainer's log-probs is measured (bf16 rounding: far above fp32 noise)."""
    from metaagent.learn.metrics import read_metrics
    from metaagent.train.loop import TrainLoop

    cfg = TrainConfig.load(
        "tiny",
        [f"trainer.out={tmp_path / 'run'}", "trainer.steps=1", "trainer.save_every=0", "schedule.mode=designer_only",
         "policy.dtype=bfloat16", "optim.autocast=null", "policy.continuous=false"],
    )  # fmt: skip
    assert cfg.optim.tis_cap == 2.0
    with TrainLoop(cfg) as trainer:
        trainer.train()
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert 0.0 <= row["train/tis_clipfrac"] <= 1.0 and row["train/tis_weight_mean"] > 0
    assert 1e-6 < abs(row["train/mismatch_kl"]) < 1.0


@pytest.mark.parametrize(
    ("flags", "settings", "resolved"),
    [
        ({"avx512_bf16"}, [], ("bfloat16", "bfloat16", 2.0)),  # a bf16 machine: bf16 rollout, autocast, TIS on
        ({"avx2"}, [], ("float32", None, None)),  # no bf16 units: today's fp32 path
        ({"avx512_bf16"}, ["policy.dtype=float32"], ("float32", "bfloat16", None)),  # fp32 rollout: no mismatch
        ({"avx512_bf16"}, ["policy.lora.enabled=true"], ("float32", "bfloat16", None)),  # adapters need the master
        ({"avx512_bf16"}, ["optim.tis_cap=5", "optim.autocast=null"], ("bfloat16", None, 5.0)),  # explicit wins
        ({"avx512_bf16"}, ["trainer.backend=verl"], ("bfloat16", "bfloat16", None)),  # verl keeps its own default
    ],
)
def test_auto_precision_resolves_per_machine_when_the_config_loads(monkeypatch, flags, settings, resolved):
    from metaagent.policy import precision

    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))
    cfg = TrainConfig.load(None, settings)
    assert (cfg.policy.dtype, cfg.optim.autocast, cfg.optim.tis_cap) == resolved


def test_a_bf16_rollout_under_lora_is_refused():
    with pytest.raises(ConfigError, match="policy.dtype=bfloat16 generates from a copy"):
        TrainConfig.load(None, ["policy.lora.enabled=true", "policy.dtype=bfloat16"])


def test_the_mismatch_is_reported_without_tis_too():
    from metaagent.learn.losses import GlobalBatch, LossConfig, policy_loss

    rollout = torch.tensor([[-1.0, -2.0, -0.5]])
    train = rollout + torch.tensor([[0.1, -0.2, 0.0]])
    mask = torch.ones(1, 3)
    _, m = policy_loss(
        train, rollout, torch.ones(1, 3), mask, config=LossConfig(), batch=GlobalBatch(num_tokens=3, num_samples=1)
    )
    assert m["train/mismatch_kl"] == pytest.approx(float((rollout - train).mean()))  # KL(rollout || train), direct
    assert "train/tis_weight_mean" not in m
