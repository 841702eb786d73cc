"""The training run's configuration: one dataclass per section, validated on construction.

YAML files in ``configs/`` map one-to-one onto :class:`TrainConfig`; every field can be overridden from the
command line as ``section.field=value`` (e.g. ``rollout.m_designs=4``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metaagent.config import ConfigError, load_config, to_dict
from metaagent.execution.isolation import ExecutionConfig
from metaagent.rollout.config import RolloutConfig
from metaagent.rollout.eval_aligned.config import EvalAlignedConfig

BACKENDS = ("hf", "vllm", "openai")
WEIGHTS = ("shared", "separate")
TRAIN_BACKENDS = ("local", "verl")
SCHEDULE_MODES = ("stagewise", "coupled", "designer_only", "executor_only")
EXECUTOR_GROUPS = ("question", "design")
#: verl 0.9's POLICY_LOSS_REGISTRY (bypass_mode needs rollout importance weights: not offered)
POLICY_LOSSES = (
    "vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo",
)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass
class PolicyConfig:
    """Which models play which role.

    ``weights: shared`` — one model is designer and executor (the paper's main setting).
    ``weights: separate`` — designer and executor are separate copies (each its own optimizer), initialised
    from ``designer_model`` / ``executor_model`` (default: ``model``).
    ``role_models`` maps executor role-name patterns (e.g. ``"executor:*Critic*"``) to further models
    (partial sharing); those models are trained with the executor samples of matching roles.
    """

    model: str = "embedded"
    weights: str = "shared"
    designer_model: str | None = None
    executor_model: str | None = None
    role_models: dict[str, str] = field(default_factory=dict)
    backend: str = "hf"
    device: str = "cpu"
    dtype: str = "float32"
    max_batch_size: int = 32
    max_wait_s: float = 0.005
    # continuous batching: new agent calls join the running batch between decode steps (benchmarks/rollout.py:
    # 0.94 of direct batched generation vs 0.80 static); off by default because batch composition then
    # depends on timing, so rollouts are not bit-reproducible across runs
    continuous: bool = False
    # extra chat-template variables, used identically by rollout, training, SFT and serving; None = the
    # template's default ({enable_thinking: false} where the template knows it: the paper's no-thinking mode)
    chat_template_kwargs: dict[str, Any] | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"

    def __post_init__(self) -> None:
        if self.weights not in WEIGHTS:
            raise ConfigError(f"policy.weights must be one of {WEIGHTS}, got {self.weights!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"policy.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.weights == "shared" and (self.designer_model or self.executor_model):
            raise ConfigError(
                "policy.designer_model/executor_model need policy.weights=separate; with shared weights set "
                "policy.model only"
            )
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("policy.backend=openai needs policy.base_url (the OpenAI-compatible endpoint)")
        if self.max_batch_size < 1:
            raise ConfigError(f"policy.max_batch_size must be >= 1, got {self.max_batch_size}")

    def model_for(self, role: str) -> str:
        if self.weights == "separate":
            return (self.designer_model if role == "designer" else self.executor_model) or self.model
        return self.model


@dataclass
class DataConfig:
    """Training/validation tasks and the per-batch domain mixture (paper: batch 8, half math, half code)."""

    train: list[dict[str, Any]] = field(default_factory=lambda: [{"source": "bundled", "split": "train"}])
    val: list[dict[str, Any]] = field(default_factory=lambda: [{"source": "bundled", "split": "val"}])
    batch_size: int = 8
    math_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.math_fraction <= 1.0:
            raise ConfigError(f"data.math_fraction must be in [0, 1], got {self.math_fraction}")
        if not self.train:
            raise ConfigError("data.train must list at least one dataset, e.g. [{source: bundled, split: train}]")


@dataclass
class AlgoConfig:
    """Credit assignment (paper Eq. 4–7)."""

    estimator: str = "hierarchical"  # any name in metaagent.credit's registry (list_estimators())
    options: dict[str, Any] = field(default_factory=dict)  # keyword options of other estimators
    eps: float = 1e-6
    executor_group: str = "question"
    executor_unit: str = "call"  # "call" (Eq. 6-7: each agent call is a group member) | "execution"
    norm_by_std: bool = True
    filter_zero_var: bool = False

    def __post_init__(self) -> None:
        if self.executor_unit not in ("call", "execution"):
            raise ConfigError(f"algo.executor_unit must be one of ('call', 'execution'), got {self.executor_unit!r}")
        from metaagent.credit import CreditError, check_options, list_estimators

        if self.estimator not in list_estimators():
            raise ConfigError(f"algo.estimator must be one of {list_estimators()}, got {self.estimator!r}")
        try:
            check_options(self.estimator, dict(self.options))
        except CreditError as e:
            raise ConfigError(f"algo.options: {e}") from None
        if self.executor_group not in EXECUTOR_GROUPS:
            raise ConfigError(f"algo.executor_group must be one of {EXECUTOR_GROUPS}, got {self.executor_group!r}")
        if self.eps <= 0:
            raise ConfigError(f"algo.eps must be > 0, got {self.eps}")


@dataclass
class ScheduleConfig:
    """Which role is trained at each step (paper Eq. 9): stagewise alternation every ``stage_len`` steps."""

    mode: str = "stagewise"
    stage_len: int = 30

    def __post_init__(self) -> None:
        if self.mode not in SCHEDULE_MODES:
            raise ConfigError(f"schedule.mode must be one of {SCHEDULE_MODES}, got {self.mode!r}")
        if self.stage_len < 1:
            raise ConfigError(f"schedule.stage_len must be >= 1, got {self.stage_len}")


@dataclass
class OptimConfig:
    """PPO-clip / GRPO update (paper Eq. 2–3) and AdamW."""

    lr: float = 5e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01  # verl's AdamW default
    grad_clip: float = 1.0
    clip_low: float = 0.2  # eps of Eq. 2; not stated in the paper: PPO's and verl's 0.2
    clip_high: float = 0.2
    dual_clip: bool = False  # verl's dual clip at clip_ratio_c (not in Eq. 2)
    clip_ratio_c: float = 3.0
    policy_loss: str = "vanilla"  # any name in verl's policy-loss registry (vanilla, gspo, cispo, ...)
    loss_agg_mode: str = "seq-mean-token-mean"  # Eq. 2's 1/|G| sum over trajectories; verl: token-mean
    stage_switch: str = "keep"  # "keep" | "reset": clear AdamW moments at each stage boundary (Eq. 9)
    # train on the preference pairs the records carry (evaluation-aligned credit's failure route) with the DPO
    # loss, beside PPO-clip; loads a frozen reference model
    dpo: bool = False
    dpo_beta: float = 0.1
    kl_coef: float = 0.0
    entropy_coef: float = 0.0  # entropy bonus (verl: entropy_coeff); 0 as in the paper
    micro_batch_tokens: int = 4096
    logprob_chunk: int = 256
    autocast: str | None = None  # "bfloat16" autocasts forward passes; master weights stay fp32 (no fp16: no scaler)
    max_prompt_tokens: int = 4096
    max_response_tokens: int = 2048

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"optim.lr must be > 0, got {self.lr}")
        if self.clip_low <= 0 or self.clip_high <= 0:
            raise ConfigError("optim.clip_low and optim.clip_high must be > 0 (default 0.2; the paper does not state eps)")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ConfigError(f"optim.loss_agg_mode must be one of {LOSS_AGG_MODES}, got {self.loss_agg_mode!r}")
        if self.stage_switch not in ("keep", "reset"):
            raise ConfigError(f"optim.stage_switch must be one of ('keep', 'reset'), got {self.stage_switch!r}")
        if self.policy_loss not in POLICY_LOSSES:
            raise ConfigError(f"optim.policy_loss must be one of verl's {POLICY_LOSSES}, got {self.policy_loss!r}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ConfigError(f"optim.kl_coef and optim.entropy_coef must be >= 0, got {self.kl_coef}, {self.entropy_coef}")
        if self.autocast not in (None, "bfloat16"):
            raise ConfigError(f"optim.autocast must be null or bfloat16, got {self.autocast!r}")
        if self.micro_batch_tokens < 1 or self.logprob_chunk < 1:
            raise ConfigError("optim.micro_batch_tokens and optim.logprob_chunk must be >= 1")


@dataclass
class TrainerConfig:
    """Loop, logging and checkpoints."""

    steps: int = 300
    seed: int = 0
    out: str = "runs/metaagent"
    backend: str = "local"
    save_every: int = 30
    val_every: int = 0  # 0 = no validation
    val_tasks: int = 16
    val_repeats: int = 1
    val_greedy: bool = True
    tensorboard: bool = True
    show_samples: bool = True  # print a designer script and an agent reply each step

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"trainer.steps must be >= 0, got {self.steps}")
        if self.backend not in TRAIN_BACKENDS:
            raise ConfigError(f"trainer.backend must be one of {TRAIN_BACKENDS}, got {self.backend!r}")
        if self.save_every < 0 or self.val_every < 0:
            raise ConfigError("trainer.save_every and trainer.val_every must be >= 0 (0 disables)")


@dataclass
class TurnRewardConfig:
    """Per-turn rewards after each rollout (UnityMAS-O, seed 001): a registered reward allocator
    (:mod:`metaagent.rewards.allocators`: ``shared_outcome``, ``iterative_delta``, ``code_delta``, ``linear``)
    writes ``AgentTurn.reward`` before credit assignment; estimators such as ``unity`` read it."""

    allocator: str | None = None  # None: no per-turn rewards
    options: dict[str, Any] = field(default_factory=dict)  # the allocator's keyword options

    def __post_init__(self) -> None:
        if self.allocator is None:
            if self.options:
                raise ConfigError("turn_reward.options needs turn_reward.allocator")
            return
        from metaagent.rewards.errors import RewardError
        from metaagent.rewards.turn import check_allocator_options

        try:
            check_allocator_options(self.allocator, self.options)
        except RewardError as e:
            raise ConfigError(f"turn_reward: {e}") from None


@dataclass
class TrainConfig:
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: dict[str, Any] = field(default_factory=dict)  # metaagent.rewards.RewardConfig fields
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    verl: dict[str, Any] = field(default_factory=dict)  # GPU backend settings (see metaagent.train.verl_backend)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)  # isolation of model-written code
    # evaluation-aligned credit's post-rollout stage (seed 002); used when algo.estimator is eval_aligned
    eval_aligned: EvalAlignedConfig = field(default_factory=EvalAlignedConfig)
    turn_reward: TurnRewardConfig = field(default_factory=TurnRewardConfig)

    def __post_init__(self) -> None:
        self.reward_config()  # validate now, not at step 1
        if self.rollout.frozen_designer and self.schedule.mode in ("designer_only",):
            raise ConfigError(
                "rollout.frozen_designer leaves no designer samples to train; use schedule.mode=executor_only"
            )
        for role in ("designer", "executor"):
            s = getattr(self.rollout, role)
            if s.top_p < 1 or s.top_k > 0:
                raise ConfigError(
                    f"rollout.{role}: top_p={s.top_p}, top_k={s.top_k} truncate the sampling distribution, but the "
                    "trainer's pi and pi_old (Eq. 3) are the full softmax, so the ratio would not compare the policy "
                    "that sampled the tokens; train with top_p=1 and top_k=0 (evaluation and serving may truncate)"
                )

        if self.algo.estimator == "eval_aligned" and not self.optim.dpo:
            raise ConfigError(
                "algo.estimator=eval_aligned trains failed episodes on preference pairs with the DPO loss: set "
                "optim.dpo=true (and optim.kl_coef, the paper's eta, e.g. 0.001)"
            )

    def reward_config(self):
        from metaagent.rewards import RewardConfig

        try:
            return RewardConfig(**self.reward)
        except TypeError as e:
            raise ConfigError(f"reward: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def load(cls, path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
        return load_config(cls, path, overrides)
