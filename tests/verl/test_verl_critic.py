"""The verl backend's critic for UnityMAS-O's GAE, without starting verl (CPU, fast): the plan, verl's ``critic``
section composed from metaagent's ``critic`` config, the batch fields the critic and the actor get, and the
critic checkpoints. ``test_verl_gae_cpu.py`` runs the real critic worker group end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import PAD, samples_of

from metaagent.config import ConfigError
from metaagent.learn.checkpoint import CheckpointError
from metaagent.train.config import TrainConfig
from metaagent.train.verl_backend.batch import build_update_batch, critic_tensordict
from metaagent.train.verl_backend.checkpoint import load_verl_checkpoint, save_verl_checkpoint
from metaagent.train.verl_backend.errors import VerlBackendError
from metaagent.train.verl_backend.plan import format_plan, resolve_plan
from metaagent.train.loop import TrainLoop
from metaagent.train.verl_backend.backend import VerlBackend
from metaagent.train.verl_backend.verl_config import compose_verl_config, metaagent_settings

GAE = ["algo.options={mode: gae, gamma: 1.0, lam: 1.0}", "trainer.backend=verl", "verl.n_gpus_per_node=1"]


def gae_config(*extra: str) -> TrainConfig:
    return TrainConfig.load("unity_code", [*GAE, *extra])


def test_gae_plans_a_critic_per_model_and_whiten_plans_none():
    plan = resolve_plan(gae_config())
    assert plan.critic
    assert "critic: one verl critic worker group per model" in format_plan(plan)
    whiten = resolve_plan(TrainConfig.load("unity_code", ["trainer.backend=verl", "verl.n_gpus_per_node=1"]))
    assert not whiten.critic and "critic:" not in format_plan(whiten)
    cfg = TrainConfig.load("unity_code", ["trainer.backend=verl", "verl.n_gpus_per_node=1"])
    assert metaagent_settings(cfg, whiten, whiten.models[0])["critic.enable"] is False


def test_verls_critic_section_is_built_from_metaagents_critic_config():
    from omegaconf import OmegaConf

    cfg = gae_config(
        "critic.lr=3e-5", "critic.weight_decay=0.0", "critic.grad_clip=0.5", "critic.cliprange_value=0.2",
        "critic.warmup_steps=2", "optim.loss_agg_mode=seq-mean-token-sum-norm",
    )  # fmt: skip
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0])
    c = vc.critic
    assert c.enable is True and vc.algorithm.adv_estimator == "gae"
    assert (vc.algorithm.gamma, vc.algorithm.lam) == (1.0, 1.0) and vc.trainer.critic_warmup == 2
    # the authors' _clone_critic_cfg_for_model: the critic is the actor's model (and tokenizer)
    assert c.model.path == vc.actor_rollout_ref.model.path == plan.models[0].path
    assert c.model.tokenizer_path == plan.models[0].path
    assert (c.optim.lr, c.optim.weight_decay, c.optim.clip_grad, c.grad_clip) == (3e-5, 0.0, 0.5, 0.5)
    assert c.cliprange_value == 0.2 and c.loss_agg_mode == "token-mean"  # the critic's own, not the actor's
    assert c.loss_scale_factor is None  # the actor's seq-mean-token-sum-norm constant does not leak in
    assert (c.ppo_epochs, c.shuffle, c.optim.lr_scheduler_type) == (1, False, "constant")
    assert c.ppo_max_token_len_per_gpu == plan.train_tokens_per_gpu
    assert OmegaConf.select(vc, "critic.model.override_config.attn_implementation") == "sdpa"  # no flash-attn here
    for key, value in metaagent_settings(cfg, plan, plan.models[0]).items():  # every key exists in verl's config
        got = OmegaConf.select(vc, key.removeprefix("+"))
        assert (OmegaConf.to_container(got) if hasattr(got, "_metadata") else got) == value, key


def test_cpu_critic_runs_fsdp2_in_fp32_and_another_critic_model_can_be_named():
    cfg = gae_config("verl.device=cpu", "critic.model=/models/value-init")
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0])
    assert vc.critic.strategy == "fsdp2" and vc.critic.fsdp.use_torch_compile is False
    assert dict(vc.critic.fsdp.mixed_precision) == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert vc.critic.model.path == "/models/value-init" and vc.critic.model.tokenizer_path == plan.models[0].path


def test_a_kl_in_the_reward_token_stage_is_refused_in_one_line():
    cfg = TrainConfig.load("mappa_tiny", ["trainer.backend=verl", "verl.n_gpus_per_node=1"])
    from metaagent.credit import get_token_stage

    stage = get_token_stage(cfg.algo.estimator, dict(cfg.algo.options))
    if stage is None or not stage.needs_ref(dict(cfg.algo.options)):
        pytest.skip("mappa_tiny runs without a KL term")
    with pytest.raises(ConfigError, match="reference log-probs") as e:
        resolve_plan(cfg)
    assert "\n" not in str(e.value)


def _with_gae_fields(samples):
    """Executor samples as the GAE token stage leaves them: V_t, R_t and per-token advantages."""
    out = [s for s in samples if s.role == "executor"]
    for n, s in enumerate(out):
        r = len(s.response_ids)
        s.values = [0.1 * n + 0.01 * t for t in range(r)]
        s.returns = [float(n % 3 - 1)] * r
        s.token_advantages = [float(n) - 0.5 * t for t in range(r)]
    return out


def test_critic_batch_carries_values_returns_and_per_token_advantages_in_row_order(trees):
    samples = _with_gae_fields(samples_of(trees))
    batch = build_update_batch(samples, dp_size=2, pad_id=PAD, advantage_placement="last_token")
    d = batch.data.batch
    assert len(batch.order) == len(batch.data) and sorted(n for n in batch.order if n >= 0) == list(range(len(samples)))
    for row, n in enumerate(batch.order):
        if n < 0:  # a zero-weight padding row
            assert d["response_mask"][row].sum() == 0 and d["values"][row].abs().sum() == 0
            continue
        s, r = samples[n], len(samples[n].response_ids)
        assert d["values"][row, :r].tolist() == pytest.approx(s.values, abs=1e-6)
        assert d["returns"][row, :r].tolist() == pytest.approx(s.returns, abs=1e-6)
        # token advantages go in as they are: last_token placement is for scalar advantages only
        assert d["advantages"][row, :r].tolist() == pytest.approx(s.token_advantages, abs=1e-6)
        assert d["values"][row, r:].abs().sum() == 0
    td = critic_tensordict(batch, seed=7)
    assert td["global_batch_size"] == len(samples) and td["mini_batch_size"] == len(batch.data)
    assert td["epochs"] == 1 and "values" in td and "returns" in td


def test_a_batch_without_critic_fields_keeps_returns_equal_to_advantages_and_has_no_values(trees):
    samples = samples_of(trees)
    batch = build_update_batch(samples, dp_size=1, pad_id=PAD)
    d = batch.data.batch
    assert "values" not in d and torch.equal(d["returns"], d["advantages"])
    with pytest.raises(VerlBackendError, match="no values/returns"):
        critic_tensordict(batch)
    mixed = samples[:1] + _with_gae_fields(samples[1:])  # a designer sample without returns: no critic fields
    assert "values" not in build_update_batch(mixed, dp_size=1, pad_id=PAD).data.batch


def test_per_token_fields_of_the_wrong_length_are_refused(trees):
    samples = _with_gae_fields(samples_of(trees))
    samples[0].values = samples[0].values[:-1]
    with pytest.raises(VerlBackendError, match="values"):
        build_update_batch(samples, dp_size=1, pad_id=PAD)


class CriticGroup:
    """Writes and reads back a marker file per folder, as verl's FSDP checkpoint manager would its shards."""

    def __init__(self, use_critic: bool = True) -> None:
        self.use_critic = use_critic
        self.loaded: list[tuple[str, Path]] = []

    def save(self, path: Path, step: int) -> None:
        (path / "fsdp_config.json").write_text(json.dumps({"what": "actor", "step": step}))

    def save_critic(self, path: Path, step: int) -> None:
        (path / "fsdp_config.json").write_text(json.dumps({"what": "critic", "step": step}))

    def load(self, path: Path) -> None:
        self.loaded.append((json.loads((path / "fsdp_config.json").read_text())["what"], path))

    def load_critic(self, path: Path) -> None:
        self.load(path)


def test_critic_checkpoints_sit_under_critics_and_resume_refuses_a_checkpoint_without_them(tmp_path):
    state = {"next_step": 3, "sampler": {}, "schedule": {}, "config_hash": "x", "run_id": "r"}
    path = save_verl_checkpoint(tmp_path, 3, groups={"policy": CriticGroup()}, state=state)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["critics"] == {"policy": "critics/policy"} and meta["models"] == {"policy": "verl/policy"}
    group = CriticGroup()
    assert load_verl_checkpoint(path, groups={"policy": group})["next_step"] == 3
    assert [(what, p.relative_to(path).as_posix()) for what, p in group.loaded] == [
        ("actor", "verl/policy"), ("critic", "critics/policy"),
    ]  # fmt: skip
    plain = save_verl_checkpoint(tmp_path / "b", 1, groups={"policy": CriticGroup(use_critic=False)}, state=state)
    assert "critics" not in json.loads((plain / "meta.json").read_text())
    with pytest.raises(CheckpointError, match="no critic for model"):
        load_verl_checkpoint(plain, groups={"policy": CriticGroup()})


class FakeCriticGroup:
    """A model group with a critic whose value is 0.5 on every token; records critic and actor batches."""

    def __init__(self) -> None:
        from test_verl_trainer import FakeGroup

        self.base = FakeGroup("policy", 2)
        self.key, self.dp_size, self.pad_id, self.policy = "policy", 2, 0, self.base.policy
        self.use_critic = True
        self.critic_batches: list = []
        self.value_batches = 0

    def critic_values(self, batch):
        self.value_batches += 1
        return 0.5 * batch.data.batch["response_mask"].float()

    def update_critic(self, batch, *, step):
        self.critic_batches.append((step, batch))
        return {"vf_loss": 0.125, "grad_norm": 1.0}

    def save_critic(self, path: Path, step: int) -> None:
        (path / "fsdp_config.json").write_text("{}")

    def load_critic(self, path: Path) -> None:
        assert (path / "fsdp_config.json").is_file()

    def __getattr__(self, name):  # update, sync_weights, free_rollout_memory, save, load, close
        return getattr(self.base, name)


@pytest.mark.slow
def test_gae_step_sends_the_critics_values_and_returns_to_update_critic_and_gae_advantages_to_the_actor(tmp_path):
    """The loop with a fake critic group: the critic's pre-pass values feed metaagent's GAE, the critic warms up
    for one step (no actor update, the rollout woken), then both update on the same step's samples."""
    from test_verl_trainer import config

    from metaagent.credit.unity import gae_advantages, last_token_rewards, whiten_tokens

    cfg = config(
        tmp_path, "algo.estimator=unity", "algo.options={mode: gae}", "turn_reward.allocator=shared_outcome",
        "rollout.frozen_designer=single_math", "schedule.mode=executor_only", "critic.warmup_steps=1",
    )  # fmt: skip
    group = FakeCriticGroup()
    with TrainLoop(cfg, VerlBackend(cfg, groups={"policy": group})) as trainer:
        results = trainer.train()
    m0, m1 = results[0].metrics, results[1].metrics
    assert m0["train/critic_warmup"] == 1.0 and "train/critic_warmup" not in m1
    assert [s for s, _ in group.critic_batches] == [0, 1] and [s for s, _ in group.base.updates] == [1]
    assert group.base.syncs == [0, 1, 2] and group.value_batches == 2  # warm-up step: synced to wake the rollout
    assert m1["train/critic/vf_loss"] == 0.125 and m1["train/critic/skipped_step"] == 0.0
    assert m1["credit/values_mean"] == pytest.approx(0.5)
    (_, critic_batch), (_, actor_batch) = group.critic_batches[1], group.base.updates[0]
    c, a = critic_batch.data.batch, actor_batch.data.batch
    rows = [i for i, n in enumerate(critic_batch.order) if n >= 0]
    lengths = [int(c["response_mask"][i].sum()) for i in rows]
    rewards = [float(c["returns"][i, 0]) for i in rows]  # gamma = lam = 1: R_t = r on every token
    assert len(set(rewards)) > 1  # right and wrong answers
    for i, n in zip(rows, lengths):
        assert c["values"][i, :n].tolist() == pytest.approx([0.5] * n)
        assert c["returns"][i, :n].tolist() == pytest.approx([c["returns"][i, 0].item()] * n)
    expected = whiten_tokens([gae_advantages(last_token_rewards(r, n), [0.5] * n)[0] for r, n in zip(rewards, lengths)])
    by_key = {k: i for i, k in enumerate(actor_batch.data.non_tensor_batch["mas_key"])}
    keys = critic_batch.data.non_tensor_batch["mas_key"]
    for i, n, adv in zip(rows, lengths, expected):
        assert a["advantages"][by_key[keys[i]], :n].tolist() == pytest.approx(adv.tolist(), abs=1e-5)
    meta = json.loads((Path(cfg.trainer.out) / "checkpoints" / "step_00000002" / "meta.json").read_text())
    assert meta["critics"] == {"policy": "critics/policy"}
