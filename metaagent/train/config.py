"""The training run's configuration: one dataclass per section, validated on construction.

YAML files in ``configs/`` map one-to-one onto :class:`TrainConfig`; every field can be overridden from the
command line as ``section.field=value`` (e.g. ``rollout.m_designs=4``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import Checked, ConfigError, load_config, parse_sections, registered_name, to_dict
from metaagent.credit.control import DESIGNER_BASELINES
from metaagent.credit.matrix import EXECUTOR_GROUPS, EXECUTOR_UNITS
from metaagent.credit.normalize import NORMALIZE_MODES
from metaagent.data.files import SOURCE as FILE_SOURCE
from metaagent.execution.isolation import ExecutionConfig
from metaagent.learn.optim import (  # noqa: F401
    DEFAULT_TIS_CAP,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    LossConfig,
    OptimizerConfig,
    autocast_dtype,
    resolve_update,
    update_defaults,
)
from metaagent.learn.trackers import LOGGERS
from metaagent.policy.factory import MODEL_BACKENDS
from metaagent.policy.precision import DTYPES, resolve_dtype
from metaagent.rewards.coach import CoachConfig
from metaagent.rewards.errors import RewardError
from metaagent.rewards.score import RewardConfig
from metaagent.rewards.turn import check_allocator_options
from metaagent.rollout.config import RolloutConfig, auto_sandbox_workers
from metaagent.rollout.eval_aligned.config import EvalAlignedConfig
from metaagent.train.backend_sections import VerlConfig

from .backend import backend_names
from .schedule import MODES, StageSchedule

log = logging.getLogger(__name__)

WEIGHTS = ("shared", "separate")
BackendName = registered_name(backend_names, "training backend")
EXECUTOR_BALANCES = ("auto", "member", "design")  # "auto": design under rollout.adaptive_budget, else member
STAGE_SWITCHES = ("keep", "reset")
# LOSS_AGG_MODES and POLICY_LOSSES are re-exported for older imports; their home is metaagent.learn.optim


@dataclass
class LoraSettings(Checked):
    """LoRA RL (``policy.lora``, :mod:`metaagent.train.local.lora`): the base weights stay frozen and each physical
    model key of the run becomes one LoRA adapter (peft) on it. ``weights: shared``: one adapter trained by both
    roles; ``weights: separate`` (and ``role_models``): one adapter per role on ONE shared base when the roles
    name the same model (AT-GRPO's per-role "L2" level at the memory of one model). The optimizer holds only
    adapter parameters; checkpoints hold the adapters (peft folders); ``metaagent-export`` merges one into a
    full model folder. verl backend: ``actor_rollout_ref.model.lora_rank / lora_alpha / target_modules``."""

    enabled: bool = False  # train LoRA adapters on frozen base weights instead of the full model
    rank: PositiveInt = 16  # r (verl: lora_rank)
    alpha: PositiveFloat = 32.0  # scaling alpha / r (verl: lora_alpha)
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0  # LoRA dropout probability (verl: must be 0)
    target_modules: str | list[str] = "all-linear"  # peft's target_modules (verl: target_modules)


@dataclass
class PolicyConfig(Checked):
    """Which models play which role.

    ``weights: shared`` — one model is designer and executor (the paper's main setting).
    ``weights: separate`` — designer and executor are separate copies (each its own optimizer), initialised
    from ``designer_model`` / ``executor_model`` (default: ``model``).
    ``role_models`` maps executor role-name patterns (e.g. ``"executor:*Critic*"``) to further models
    (partial sharing); those models are trained with the executor samples of matching roles.
    """

    model: str = "embedded"  # the trained model: "embedded", "tiny", a local Hugging Face folder or a hub name
    weights: Literal[WEIGHTS] = "shared"  # shared: one model plays both roles; separate: one copy per role
    designer_model: str | None = None  # weights=separate: the designer's starting model (null: policy.model)
    executor_model: str | None = None  # weights=separate: the executor's starting model (null: policy.model)
    # executor role-name pattern (e.g. "executor:*Critic*") -> a further trained model for matching agents
    role_models: dict[str, str] = field(default_factory=dict)
    backend: Literal[MODEL_BACKENDS] = "hf"  # how the rollout generates: hf (transformers), vllm, openai (remote)
    device: str = "cpu"  # torch device of the local models ("cpu", "cuda", "cuda:1")
    # the rollout's dtype (hf backend; the trained weights stay fp32): "auto" = bfloat16 where the device has bf16
    # matrix units (avx512_bf16 / amx_bf16 CPUs, CUDA), else float32; resolved when the config loads. The
    # rollout then generates from a bf16 copy of the weights, refreshed after every update
    # (metaagent.policy.precision); optim.tis_cap corrects the mismatch. LoRA: auto = float32
    dtype: Literal[DTYPES] = "auto"
    max_batch_size: PositiveInt = 32  # most requests one generate call batches together
    max_wait_s: Annotated[float, Field(ge=0)] = 0.005  # seconds the batcher waits for more requests to join
    # continuous batching: the step's designer generations and agent calls join one running batch between decode
    # steps, and each call returns when its own rows finish (benchmarks/step.py measures it against static
    # batching). Which rows decode together then depends on timing, and a matmul's rounding on its row count, so
    # rollouts are not bit-reproducible (in bf16 a rounding difference moves log-probs by ~1e-2 and can change a
    # sampled token); false: each call's requests form one batch run to the end (exact replays and resumes)
    continuous: bool = True
    # hf backend: MiB of KV cache kept for shared prompt prefixes (the designer's system prompt and API text,
    # each agent's system prompt), reused by every prompt that starts with them; 0 = off. Dropped after every
    # update. benchmarks/step.py measures it (vLLM's automatic prefix caching, on the local backend)
    prefix_cache_mb: Annotated[float, Field(ge=0)] = 256
    # hf backend on CPU: generation multiplies each linear in the form measured fastest for the CPU kind and
    # dtype (metaagent/policy/packed.py DECODE_FORMS): bf16 weights prepacked once for oneDNN (made again
    # after each update; decode 1.2-1.33x at 8-32 rows, same tokens), the fp32 LM head as W @ h.T (1.6-2.1x,
    # within 1e-6). false: torch's plain linear everywhere (one more bf16 copy of the weights is not held)
    prepack: bool = True
    # extra chat-template variables, used identically by rollout, training, SFT and serving; None = the
    # template's default ({enable_thinking: false} where the template knows it: the paper's no-thinking mode)
    chat_template_kwargs: dict[str, Any] | None = None
    base_url: str | None = None  # backend=openai: the OpenAI-compatible endpoint's API root
    api_key_env: str = "OPENAI_API_KEY"  # backend=openai: environment variable holding the API key
    lora: LoraSettings = field(default_factory=LoraSettings)  # LoRA RL: adapters on frozen base weights

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weights == "shared" and (self.designer_model or self.executor_model):
            raise ConfigError(
                "policy.designer_model/executor_model need policy.weights=separate; with shared weights set "
                "policy.model only"
            )
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("policy.backend=openai needs policy.base_url (the OpenAI-compatible endpoint)")

    def model_for(self, role: str) -> str:
        if self.weights == "separate":
            return (self.designer_model if role == "designer" else self.executor_model) or self.model
        return self.model


def dataset_specs(value: Any) -> Any:
    """``data.train`` / ``data.val`` as given: a task file's path (``--data.train tasks.jsonl``, or
    ``file:tasks.jsonl``) stands for ``{source: file, path: ...}`` (:mod:`metaagent.data.files`), alone or as
    an item of the list."""
    if isinstance(value, (str, dict)):
        value = [value]
    if isinstance(value, list):
        prefix = f"{FILE_SOURCE}:"
        return [{"source": FILE_SOURCE, "path": v.removeprefix(prefix)} if isinstance(v, str) else v
                for v in value]  # fmt: skip
    return value


DatasetSpecs = Annotated[list[dict[str, Any]], BeforeValidator(dataset_specs)]


@dataclass
class DataConfig(Checked):
    """Training/validation tasks and the per-batch domain mixture (paper: batch 8, half math, half code)."""

    # training datasets: metaagent.data.DatasetSpec mappings (source, split, limit, ...) or a task file's path
    train: DatasetSpecs = field(default_factory=lambda: [{"source": "bundled", "split": "train"}])
    # validation datasets (trainer.val_every), same form as data.train
    val: DatasetSpecs = field(default_factory=lambda: [{"source": "bundled", "split": "val"}])
    batch_size: PositiveInt = 8  # tasks per training step (paper: 8)
    # domain -> weight of a training batch's tasks, e.g. {math: 3, code: 1}; {} = every loaded domain alike
    # (the paper's half math, half code). A loaded domain with weight 0 is refused (data.mixture.batch_shares)
    mix: dict[str, Annotated[float, Field(ge=0)]] = field(default_factory=dict)
    # domain -> "module:function": a plain Python reward(task, answer) -> float in [0, 1] as that domain's
    # R_correct instead of its scorer (metaagent.domain.register_reward; docs/guide/own-tasks.md)
    rewards: dict[str, str] = field(default_factory=dict)
    # deprecated alias of data.mix = {math: f, code: 1 - f} (over the loaded domains); null = data.mix decides
    math_fraction: Annotated[float, Field(ge=0, le=1)] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.train:
            raise ConfigError("data.train must list at least one dataset, e.g. [{source: bundled, split: train}]")
        if self.math_fraction is not None and self.mix:
            raise ConfigError(
                "data.math_fraction is a deprecated alias of data.mix; give only data.mix, "
                "e.g. {math: 1, code: 1}"
            )

    def batch_mix(self, loaded: Iterable[str]) -> dict[str, float]:
        """``data.mix``, or the deprecated ``math_fraction`` f as ``{math: f, code: 1 - f}`` over the
        ``loaded`` domains (a loaded domain it gives no weight is refused like one data.mix leaves out)."""
        if self.math_fraction is None:
            return dict(self.mix)
        f = self.math_fraction
        log.warning("data.math_fraction=%s is deprecated: use data.mix={math: %s, code: %s}", f, f, 1 - f)
        return {d: w for d, w in (("math", f), ("code", 1.0 - f)) if d in set(loaded)}


@dataclass
class DynamicSamplingConfig(Checked):
    """DAPO's dynamic sampling (metaagent.train.dynamic_sampling): drop trees without an informative group
    of a trained role and draw fresh tasks until the batch holds the full number of informative groups per
    role, at most ``max_extra_tasks`` extra tasks (full M x N trees) per step. Off: zero-variance groups stay
    in the batch with advantage 0 (masked with ``algo.filter_zero_var``)."""

    enabled: bool = False  # redraw tasks until every trained role has a full batch of informative groups
    max_extra_tasks: NonNegativeInt = 16  # most extra tasks (full M x N trees) rolled out per step for it


@dataclass
class OverlongConfig(Checked):
    """DAPO's overlong handling (Yu et al. 2025, §3.4), both off by default. ``filter``: samples of
    ``filter_roles`` whose generation ended at a length limit are masked out of the loss
    (:func:`metaagent.learn.samples.mask_overlong`). ``buffer`` > 0: the soft overlong punishment of Eq. 13
    with ``L_max = rollout.executor.max_tokens`` and ``L_cache = buffer`` on every executor turn, added to its
    execution's reward (:mod:`metaagent.rewards.overlong`; verl's ``reward.overlong_buffer``)."""

    filter: bool = False  # mask samples that ended at a length limit out of the loss
    # the roles whose truncated samples filter masks
    filter_roles: list[Literal["designer", "executor"]] = field(default_factory=lambda: ["designer", "executor"])
    buffer: NonNegativeInt = 0  # L_cache of Eq. 13 (DAPO: 4096 of 20480); 0 = no soft punishment
    penalty_factor: Annotated[float, Field(ge=0)] = 1.0  # verl's overlong_buffer.penalty_factor


@dataclass
class AlgoConfig(Checked):
    """Credit assignment (paper Eq. 4–7)."""

    estimator: str = "hierarchical"  # any name in metaagent.credit's registry (list_estimators())
    options: dict[str, Any] = field(default_factory=dict)  # keyword options of other estimators
    eps: PositiveFloat = 1e-6  # added to a group's reward std before dividing (Eq. 5, 7)
    executor_group: Literal[EXECUTOR_GROUPS] = "question"  # which executor samples form one advantage group
    executor_unit: Literal[EXECUTOR_UNITS] = "call"  # "call" (Eq. 6-7: each agent call is a group member) | "execution"
    # how the designs of a question weigh in its executor group: "member" (Eq. 6, each member alike), "design"
    # (each design alike whatever its executions: unequal N), "auto" (design when rollout.adaptive_budget is on)
    executor_balance: Literal[EXECUTOR_BALANCES] = "auto"
    norm_by_std: bool = True  # divide advantages by the group's reward std (GRPO); false: mean-centred only
    # a second scale of the step's trained advantages after the estimator's (metaagent.credit.normalize): none;
    # batch: one std over every sample; role: each role's own std (Dr. MAS, Feng et al. 2026, arXiv 2602.08847, Eq. 5)
    normalize: Literal[NORMALIZE_MODES] = "none"
    filter_zero_var: bool = False  # mask groups whose rewards are all equal (advantage 0) out of the loss
    # what a design's reward is measured against (docs/concepts/credit.md): "group" (Eq. 5, the
    # question's designs) or "control": each tree also runs one agent at each design's budget (k = its mean agent
    # calls per execution, rounded up; majority vote / first passing the public tests) and the designer's reward
    # is the design's minus the control's (hierarchical estimator; executor advantages unchanged)
    designer_baseline: Literal[DESIGNER_BASELINES] = "group"
    # DAPO's dynamic sampling: redraw tasks until the batch holds enough informative groups
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    overlong: OverlongConfig = field(default_factory=OverlongConfig)  # DAPO's overlong filter and soft penalty

    def __post_init__(self) -> None:
        super().__post_init__()
        from metaagent.credit import CreditError, check_options, list_estimators

        if self.estimator not in list_estimators():
            raise ConfigError(f"algo.estimator must be one of {list_estimators()}, got {self.estimator!r}")
        from metaagent.credit import estimator_options

        if self.designer_baseline != "group" and "designer_baseline" not in estimator_options(self.estimator):
            raise ConfigError(
                f"algo.designer_baseline={self.designer_baseline} is an option of the hierarchical estimator; "
                f"algo.estimator={self.estimator} does not take it (use algo.estimator=hierarchical)"
            )
        try:
            check_options(self.estimator, dict(self.options))
        except CreditError as e:
            raise ConfigError(f"algo.options: {e}") from None


@dataclass
class ScheduleConfig(Checked):
    """Which role is trained at each step (paper Eq. 9): stagewise alternation every ``stage_len`` steps."""

    # stagewise: alternate the trained role every stage_len steps; coupled: both roles every step; designer_only,
    # executor_only: one role throughout; frozen: no role (no update; the paired baseline of an experiment)
    mode: Literal[MODES] = "stagewise"
    stage_len: PositiveInt = 30  # steps per stage of the stagewise schedule (paper: 30)

    def build(self) -> StageSchedule:
        """The schedule this section describes (the loop's, the verl plan's and the display's)."""
        return StageSchedule(self.mode, self.stage_len)


@dataclass
class OptimConfig(LossConfig, OptimizerConfig):
    """The ``optim`` section: the one optimizer config (:class:`~metaagent.learn.optim.OptimizerConfig`:
    AdamW, grad clip, micro-batches, LR schedule) and the one loss config
    (:class:`~metaagent.learn.optim.LossConfig`: PPO-clip / GRPO, paper Eq. 2-3), plus what only RL training
    needs. Every field is a flat YAML key (``optim.lr``, ``optim.clip_low``, ...) except ``per_role``, each role's
    own aggregation and entropy bonus (``optim.per_role.designer.loss_agg_mode``)."""

    # bf16 autocast of the update's forwards (fp32 master weights): "auto" = where the device has bf16 matrix units
    autocast: Literal["auto", "bfloat16"] | None = "auto"
    # truncated importance sampling against the rollout's log-probs (LossConfig.tis_cap); "auto": verl's 2.0 when the
    # local backend's rollout runs in another dtype than fp32 (policy.dtype), else off. Resolved when the config loads
    tis_cap: Annotated[float, Field(gt=0)] | Literal["auto"] | None = "auto"
    stage_switch: Literal[STAGE_SWITCHES] = "keep"  # "keep" | "reset": clear AdamW moments at each stage boundary (Eq. 9)
    # train on the preference pairs the records carry (evaluation-aligned credit's failure route) with the DPO
    # loss, beside PPO-clip; loads a frozen reference model
    dpo: bool = False
    dpo_beta: PositiveFloat = 0.1  # beta of the DPO loss (optim.dpo): strength of the implicit KL to the reference
    max_prompt_tokens: PositiveInt = 4096  # longest prompt of a training sample, in tokens (longer: dropped, counted)
    max_response_tokens: PositiveInt = 2048  # longest response of a training sample, in tokens (longer: cut)

    def optimizer(self) -> OptimizerConfig:
        """The optimizer part alone. ``"auto"`` update settings that no TrainConfig resolved (an OptimConfig
        on its own, which knows no device) are resolved for the CPU."""
        return resolve_update(
            OptimizerConfig(**{f: getattr(self, f) for f in OptimizerConfig.__dataclass_fields__}), "cpu"
        )

    def loss(self) -> LossConfig:
        """The loss part alone. A ``tis_cap: auto`` that no TrainConfig resolved (an OptimConfig on its own, which
        knows no rollout dtype) is off."""
        fields = {f: getattr(self, f) for f in LossConfig.__dataclass_fields__}
        if fields["tis_cap"] == "auto":
            fields["tis_cap"] = None
        return LossConfig(**fields)


@dataclass
class TrainerConfig(Checked):
    """Loop, logging and checkpoints."""

    steps: NonNegativeInt = 300  # training steps of the run (one batch of tasks each)
    seed: int = 0  # seed of data order, sampling and initialisation; the same seed replays the same run
    out: str = "runs/metaagent"  # run directory (config, metrics, rollouts, checkpoints)
    # the training backend by name (metaagent.train.backend.BACKENDS): local (this process, CPU or one GPU),
    # verl (Ray, FSDP, vLLM), or an installed plugin's (entry-point group metaagent.backends)
    backend: BackendName = "local"
    save_every: NonNegativeInt = 30  # 0 = only at the end
    val_every: NonNegativeInt = 0  # 0 = no validation
    val_tasks: int = 16  # validation tasks per validation round (the first of data.val)
    val_repeats: int = 1  # rollouts per validation task (metrics averaged)
    val_greedy: bool = True  # validate with greedy decoding (temperature 0) instead of the training sampling
    tensorboard: bool = True  # false drops tensorboard from loggers
    # metric destinations (metaagent.learn.trackers): jsonl (required), tensorboard, wandb, mlflow (verl's
    # trainer.logger, OpenRLHF's --use_wandb / --use_tensorboard); wandb and mlflow need their pip extras
    loggers: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard"])
    tracker_project: str = "metaagent"  # wandb project and MLflow experiment name
    show_samples: bool = True  # print a designer script and an agent reply each step

    def __post_init__(self) -> None:
        super().__post_init__()

        bad = [n for n in self.loggers if n not in LOGGERS]
        if bad or "jsonl" not in self.loggers:
            raise ConfigError(
                f"trainer.loggers must include 'jsonl' (resume and metaagent-replay read metrics.jsonl) and name only "
                f"{LOGGERS}, got {self.loggers!r}"
            )

    def active_loggers(self) -> list[str]:
        """``loggers`` in order, without tensorboard when ``tensorboard`` is false, each once."""
        names = [n for n in self.loggers if self.tensorboard or n != "tensorboard"]
        return list(dict.fromkeys(names))


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

        try:
            check_allocator_options(self.allocator, self.options)
        except RewardError as e:
            raise ConfigError(f"turn_reward: {e}") from None


@dataclass
class CriticConfig(Checked):
    """The value model of estimators whose token stage needs one (``unity`` with ``algo.options.mode: gae``,
    UnityMAS-O Eq. 20-21; :mod:`metaagent.train.local.critic`). One critic per trained physical model, as the authors'
    code (one verl critic worker group per LLM); the defaults are verl's ``critic`` section's."""

    model: str | None = None  # None: each critic starts from the weights of the model it pairs with (authors' code)
    lr: PositiveFloat = 1e-5  # verl critic.optim.lr
    weight_decay: Annotated[float, Field(ge=0)] = 0.01  # verl critic.optim.weight_decay
    grad_clip: PositiveFloat = 1.0  # verl critic.grad_clip
    cliprange_value: PositiveFloat = 0.5  # verl critic.cliprange_value (eps_v of the clipped value loss)
    loss_agg_mode: Literal[LOSS_AGG_MODES] = "token-mean"  # verl critic.loss_agg_mode
    warmup_steps: NonNegativeInt = 0  # verl trainer.critic_warmup: the first steps train the critic only


@dataclass
class TrainConfig:
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # the trained models and how they generate
    data: DataConfig = field(default_factory=DataConfig)  # training and validation tasks, batch mixture
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # M designs x N executions per task, sampling
    reward: RewardConfig = field(default_factory=RewardConfig)  # how executions are scored (paper App. B, Eq. 10)
    algo: AlgoConfig = field(default_factory=AlgoConfig)  # credit assignment (paper Eq. 4-7)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)  # which role trains at each step (Eq. 9)
    optim: OptimConfig = field(default_factory=OptimConfig)  # optimizer, loss and sample lengths
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # loop length, logging, checkpoints
    verl: VerlConfig = field(default_factory=VerlConfig)  # GPU backend settings (trainer.backend=verl)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)  # isolation of model-written code
    # evaluation-aligned credit's post-rollout stage (seed 002); used when algo.estimator is eval_aligned
    eval_aligned: EvalAlignedConfig = field(default_factory=EvalAlignedConfig)
    # MAPPA's coach: a judge that scores every agent action after each training execution (metaagent.rewards.coach)
    coach: CoachConfig = field(default_factory=CoachConfig)
    turn_reward: TurnRewardConfig = field(default_factory=TurnRewardConfig)  # per-turn reward allocator
    critic: CriticConfig = field(default_factory=CriticConfig)  # GAE estimators' value model (unity mode: gae)

    def __post_init__(self) -> None:
        parse_sections(self)  # TrainConfig(reward={...}): a section given as a mapping is parsed like YAML
        self._resolve_precision()
        if self.rollout.sandbox_workers == "auto":  # config.yaml records the number
            self.rollout.sandbox_workers = auto_sandbox_workers(self.policy.max_batch_size)
        if self.algo.estimator == "mappa" and self.coach.backend is None:
            raise ConfigError(
                "algo.estimator=mappa trains on coach scores: set coach.backend (openai, hf or rule; see "
                "configs/mappa_mathchat.yaml and configs/mappa_tiny.yaml)"
            )
        if self.algo.designer_baseline == "control" and self.rollout.frozen_designer:
            raise ConfigError(
                "algo.designer_baseline=control credits the designer against one agent, but rollout.frozen_designer "
                "leaves no designer to credit; drop one of them"
            )
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

        if self.trainer.backend == "verl" and self.policy.lora.enabled:
            if self.policy.weights == "separate" or self.policy.role_models:
                raise ConfigError(
                    "policy.lora with one adapter per role (weights=separate or role_models) runs on the local backend "
                    "only: verl's LoRA keys (lora_rank, lora_alpha, target_modules) give each actor one adapter on "
                    "its own base"
                )
            if self.policy.lora.dropout > 0:
                raise ConfigError("policy.lora.dropout > 0: verl's LoRA config has no dropout key; set it to 0")
        if self.algo.overlong.buffer > self.rollout.executor.max_tokens:
            raise ConfigError(
                f"algo.overlong.buffer = {self.algo.overlong.buffer} exceeds rollout.executor.max_tokens = "
                f"{self.rollout.executor.max_tokens} (Eq. 13's L_cache must fit in L_max)"
            )
        if self.algo.estimator == "eval_aligned" and not self.optim.dpo:
            raise ConfigError(
                "algo.estimator=eval_aligned trains failed episodes on preference pairs with the DPO loss: set "
                "optim.dpo=true (and optim.kl_coef, the paper's eta, e.g. 0.001)"
            )

    def _resolve_precision(self) -> None:
        """``"auto"`` precision settings -> what this machine runs, so config.yaml records it: ``policy.dtype``
        (float32 under LoRA: adapters switch on the trained model, not on a copy), ``optim.autocast``,
        ``optim.tis_cap`` (TIS at verl's 2.0 when the local rollout's dtype is not fp32), and the update's
        ``optim.micro_batch_tokens`` and ``optim.recompute`` (measured per CPU kind and update dtype:
        :func:`~metaagent.learn.optim.update_defaults`)."""
        p, o = self.policy, self.optim
        # the verl backend runs its own precision (bf16 vLLM rollout, FSDP mixed precision) and does not read these
        # fields: they record the GPU recipe's bf16 without probing a device (its dry run imports no torch)
        local = self.trainer.backend == "local"
        if p.dtype == "auto":
            p.dtype = "float32" if p.lora.enabled else resolve_dtype("auto", p.device) if local else "bfloat16"
        elif p.lora.enabled and p.dtype != "float32" and self.trainer.backend == "local":
            raise ConfigError(
                f"policy.dtype={p.dtype} generates from a copy of the weights, which LoRA adapters (switched on the "
                "trained model) do not reach; use policy.dtype=float32 (or auto) with policy.lora"
            )
        o.autocast = autocast_dtype(o.autocast, p.device) if local or o.autocast != "auto" else "bfloat16"
        chosen = update_defaults(p.device, o.autocast)
        for name in ("micro_batch_tokens", "recompute"):
            if getattr(o, name) == "auto":
                setattr(o, name, chosen[name])
        if o.tis_cap == "auto":
            o.tis_cap = DEFAULT_TIS_CAP if self.trainer.backend == "local" and p.dtype != "float32" else None

    def executor_balance(self) -> str:
        """``algo.executor_balance`` with "auto" resolved: "design" under ``rollout.adaptive_budget``."""
        b = self.algo.executor_balance
        if b == "auto":
            return "design" if self.rollout.adaptive_budget.enabled else "member"
        return b

    def reward_config(self) -> RewardConfig:
        """The ``reward`` section (how executions are scored)."""
        return self.reward

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def load(cls, path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
        return load_config(cls, path, overrides)
