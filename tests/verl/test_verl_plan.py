"""The verl: section, the resolved plan and verl's composed config (all CPU, no GPU import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaagent.config import ConfigError
from metaagent.train.config import TrainConfig
from metaagent.train.backend_sections import VerlConfig
from metaagent.train.verl_backend.plan import resolve_plan
from metaagent.train.verl_backend.verl_config import compose_verl_config, metaagent_settings

ROOT = Path(__file__).resolve().parents[2]
PAPER = str(ROOT / "configs" / "paper_qwen3_8b.yaml")
SINGLE = str(ROOT / "configs" / "single_gpu_qwen3_1_7b.yaml")
SEPARATE = [
    "policy.weights=separate",
    "verl.models={designer: {gpus: 4}, executor: {gpus: 2, rollout_gpus: 2}}",
]


def load(path=PAPER, *overrides):
    return TrainConfig.load(path, list(overrides))


def test_paper_plan_one_colocated_model_on_eight_gpus():
    plan = resolve_plan(load())
    (m,) = plan.models
    assert (m.key, m.path, m.gpus, m.rollout_gpus, m.dp_size, m.rollout_replicas) == (
        "policy",
        "Qwen/Qwen3-8B",
        8,
        0,
        8,
        8,
    )
    assert m.colocated and set(m.roles) == {"designer", "executor"}
    assert (plan.batch_size, plan.m_designs, plan.n_executions, plan.schedule.stage_len) == (8, 4, 4, 30)
    assert plan.max_model_len == 8192 + 8192 and plan.train_tokens_per_gpu == 16384
    s = plan.sizes
    assert (s.designer_generations, s.max_executions, s.max_agent_calls) == (32, 128, 128 * 16)
    assert s.expected_agent_calls == 128 * 4
    assert s.generated_tokens_max == 32 * 8192 + 128 * 65536  # max_total_tokens caps an execution
    assert plan.verl_estimator == "metaagent_hierarchical"


def test_single_gpu_plan():
    plan = resolve_plan(load(SINGLE))
    (m,) = plan.models
    assert (m.path, m.gpus, m.dp_size, m.rollout_replicas, plan.used_gpus) == ("Qwen/Qwen3-1.7B", 1, 1, 1, 1)
    assert plan.verl.chat_template_kwargs == {"enable_thinking": False}


def test_separate_weights_need_a_placement_and_at_most_one_colocated_model():
    with pytest.raises(ConfigError, match="verl.models"):
        resolve_plan(load(PAPER, "policy.weights=separate"))
    with pytest.raises(ConfigError, match="collide"):
        resolve_plan(
            load(PAPER, "policy.weights=separate", "verl.models={designer: {gpus: 4}, executor: {gpus: 4}}")
        )
    plan = resolve_plan(load(PAPER, *SEPARATE))
    d, e = plan.model("designer"), plan.model("executor")
    assert d.colocated and d.rollout_start_rank == 0 and d.rollout_replicas == 4
    assert not e.colocated and e.rollout_start_rank == 4 and e.rollout_replicas == 2  # after the hybrid ranks
    assert plan.route["designer"] == "designer" and plan.route["executor"] == "executor"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["verl.models={policy: {gpus: 16}}"], "cluster has"),
        (["verl.train_tokens_per_gpu=4096"], "below one longest sample"),
        (["verl.gpu_memory_utilization=1.5"], "gpu_memory_utilization"),
        (["verl.rollout_tp=3"], "multiple of verl.rollout_tp"),
        (["verl.models={typo: {gpus: 8}}"], "unknown: \\['typo'\\]"),
        (["verl.nosuchkey=1"], "unknown key"),
        (["verl.advantage_placement=first"], "advantage_placement"),
        (["verl.overrides=[not-an-override]"], "Hydra override"),
        ([*SEPARATE, "optim.kl_coef=0.01"], "reference model"),
    ],
)
def test_bad_settings_name_the_key_and_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        resolve_plan(load(PAPER, *overrides))


def test_composed_verl_config_carries_metaagents_settings():
    cfg = load(PAPER, "optim.clip_high=0.28", "optim.loss_agg_mode=seq-mean-token-mean")
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0], run_dir="/tmp/run")
    a, r = vc.actor_rollout_ref.actor, vc.actor_rollout_ref.rollout
    assert vc.actor_rollout_ref.model.path == "Qwen/Qwen3-8B"
    assert (a.optim.lr, a.clip_ratio_low, a.clip_ratio_high, a.loss_agg_mode) == (
        5e-6,
        0.2,
        0.28,
        "seq-mean-token-mean",
    )
    assert a.use_dynamic_bsz and a.ppo_max_token_len_per_gpu == 16384 and not a.use_kl_loss
    assert (r.name, r.mode, r.tensor_model_parallel_size, r.max_model_len) == ("vllm", "async", 1, 16384)
    assert r.logprobs_mode == "processed_logprobs" and r.calculate_log_probs
    assert r.checkpoint_engine.backend == "naive" and r.free_cache_engine
    assert vc.trainer.n_gpus_per_node == 8 and vc.trainer.default_local_dir == "/tmp/run/checkpoints"
    assert vc.algorithm.adv_estimator == "metaagent_hierarchical"
    # interpolations resolved: verl's rollout lengths follow data.*
    assert (r.prompt_length, r.response_length) == (8192, 8192)


def test_split_model_config_and_user_overrides_win():
    cfg = load(PAPER, *SEPARATE, "verl.overrides=[actor_rollout_ref.rollout.gpu_memory_utilization=0.8]")
    plan = resolve_plan(cfg)
    ex = compose_verl_config(cfg, plan, plan.model("executor"))
    r = ex.actor_rollout_ref.rollout
    assert r.checkpoint_engine.backend == "nccl" and not r.free_cache_engine
    assert (r.nnodes, r.n_gpus_per_node) == (1, 2) and ex.trainer.n_gpus_per_node == 2
    assert r.gpu_memory_utilization == 0.8  # verl.overrides beat metaagent's 0.6
    assert not ex.actor_rollout_ref.hybrid_engine


def test_bad_override_is_a_config_error():
    cfg = load(PAPER, "verl.overrides=[actor_rollout_ref.no_such_key=1]")
    plan = resolve_plan(cfg)
    with pytest.raises(ConfigError, match="verl.overrides"):
        compose_verl_config(cfg, plan, plan.models[0])


def test_every_metaagent_setting_exists_in_verls_config():
    """A renamed verl key must fail here, not as a silently ignored setting on the GPU node."""
    cfg = load(PAPER)
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0])
    from omegaconf import OmegaConf

    for key, value in metaagent_settings(cfg, plan, plan.models[0]).items():
        got = OmegaConf.select(vc, key.removeprefix("+"))  # "+": a key verl reads but does not declare
        assert (OmegaConf.to_container(got) if hasattr(got, "_metadata") else got) == value, key


def test_composed_config_passes_verls_own_dataclass_validation():
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import CheckpointEngineConfig, FSDPActorConfig, RolloutConfig

    cfg = load(PAPER)
    plan = resolve_plan(cfg)
    vc = compose_verl_config(cfg, plan, plan.models[0])
    actor = omega_conf_to_dataclass(vc.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(vc.actor_rollout_ref.rollout)
    engine = omega_conf_to_dataclass(vc.actor_rollout_ref.rollout.checkpoint_engine)
    assert isinstance(actor, FSDPActorConfig) and actor.clip_ratio_high == 0.2 and actor.use_dynamic_bsz
    assert isinstance(rollout, RolloutConfig) and rollout.max_model_len == 16384
    assert isinstance(engine, CheckpointEngineConfig) and engine.backend == "naive"


def test_verl_section_defaults_are_valid():
    v = VerlConfig()
    # old_log_prob: auto until the plan resolves it (rollout without optim.tis_cap: test_verl_tis)
    assert v.total_gpus == 8 and v.advantage_placement == "all_tokens" and v.old_log_prob == "auto"


@pytest.mark.parametrize("path", [PAPER, SINGLE])
def test_shipped_gpu_configs_turn_vllm_prefix_caching_on(path):
    cfg = load(path)
    plan = resolve_plan(cfg)
    assert plan.verl.enable_prefix_caching
    assert compose_verl_config(cfg, plan, plan.models[0]).actor_rollout_ref.rollout.enable_prefix_caching
    off = load(path, "verl.enable_prefix_caching=false")
    plan = resolve_plan(off)
    assert not compose_verl_config(off, plan, plan.models[0]).actor_rollout_ref.rollout.enable_prefix_caching


def test_per_role_loss_settings_map_to_each_models_actor_where_one_model_trains_one_role():
    """issue 62: optim.per_role on verl. Separate weights: each actor gets its role's aggregation and entropy
    bonus (verl computes the entropies it adds); one shared model: the roles must agree, else one line."""
    cfg = load(PAPER, *SEPARATE, "optim.per_role.designer.loss_agg_mode=token-sum",
               "optim.per_role.designer.entropy_coef=0.01")  # fmt: skip
    plan = resolve_plan(cfg)
    d = metaagent_settings(cfg, plan, plan.model("designer"))
    e = metaagent_settings(cfg, plan, plan.model("executor"))
    ar = "actor_rollout_ref.actor"
    assert (d[f"{ar}.loss_agg_mode"], d[f"{ar}.entropy_coeff"], d[f"{ar}.calculate_entropy"]) == ("token-sum", 0.01, True)
    assert (e[f"{ar}.loss_agg_mode"], e[f"{ar}.entropy_coeff"], e[f"{ar}.calculate_entropy"]) == (
        "seq-mean-token-mean", 0.0, False,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="optim.per_role gives one physical model the loss_agg_modes designer: "
                       "token-sum, executor: seq-mean-token-mean"):  # fmt: skip
        resolve_plan(load(PAPER, "optim.per_role.designer.loss_agg_mode=token-sum"))
    shared = load(PAPER, "optim.entropy_coef=0.01", "optim.per_role.designer.loss_agg_mode=seq-mean-token-mean")
    s = metaagent_settings(shared, resolve_plan(shared), resolve_plan(shared).models[0])
    assert s[f"{ar}.entropy_coeff"] == 0.01  # the shared entropy bonus is no longer dropped on verl
    with pytest.raises(ConfigError, match="schedule.mode=coupled"):
        resolve_plan(load(PAPER, "optim.entropy_coef=0.01", "schedule.mode=coupled"))
    assert resolve_plan(load(PAPER, "algo.normalize=role")).models  # done on the samples before the update
