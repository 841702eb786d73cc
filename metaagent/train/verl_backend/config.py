"""The ``verl:`` section of a training config: GPUs, placement and verl/vLLM knobs of the GPU backend.

Everything else (model, M, N, K, lengths, learning rate, clip ratios) comes from the shared sections of
:class:`metaagent.train.config.TrainConfig`, so the local and the verl backend read one config. Example::

    verl:
      nnodes: 1
      n_gpus_per_node: 8
      rollout_tp: 1                    # vLLM tensor parallel size per replica
      gpu_memory_utilization: 0.6      # vLLM share of each GPU while it generates
      models:                          # per physical model; default: the one shared model on every GPU
        policy: {gpus: 8}              # colocated: FSDP actor and vLLM on the same 8 GPUs
      chat_template_kwargs: {enable_thinking: false}   # Qwen3 no-thinking mode (paper §4.1)

Placement of a physical model (``models.<key>``):

- ``rollout_gpus: 0`` (default) — *colocated* (verl's hybrid engine): the FSDP actor and the vLLM
  server share ``gpus``; vLLM sleeps during the update and weights are synced in place.
- ``rollout_gpus: G`` — *split*: the FSDP actor trains on ``gpus`` and ``G`` more GPUs run standalone
  vLLM replicas, synced through ``checkpoint_engine`` (NCCL by default).

verl 0.9.1 names the hybrid vLLM server actors and their weight-transfer sockets by replica rank only
(``vllm_server_<replica>_<node>``, ``rl-colocate-zmq-<job>-replica-<r>-...``), so two colocated models in
one Ray job would collide: with several physical models at most one may be colocated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metaagent.config import ConfigError, from_dict

ADVANTAGE_PLACEMENTS = ("all_tokens", "last_token")
OLD_LOG_PROBS = ("rollout", "recompute")
CHECKPOINT_ENGINES = ("nccl", "nixl", "mooncake")  # verl engines for split placement (colocated: naive)
ROLLOUT_NAMES = ("vllm", "hf")  # hf: this project's HF policy in the driver (what verl.device=cpu always uses)
DEVICES = ("cuda", "cpu")  # cpu: verl's FSDP engine on gloo, the HF policy as the rollout (tests, CI)
ATTN_IMPLEMENTATIONS = ("auto", "sdpa", "flash_attention_2", "eager")  # auto: flash-attn if installed, else sdpa


@dataclass
class ModelResources:
    """GPUs of one physical model. ``rollout_gpus == 0``: colocated on ``gpus``; > 0: split placement."""

    gpus: int = 8
    rollout_gpus: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise ConfigError(f"gpus must be a positive integer (GPUs of the FSDP actor), got {self.gpus!r}")
        if (
            isinstance(self.rollout_gpus, bool)
            or not isinstance(self.rollout_gpus, int)
            or self.rollout_gpus < 0
        ):
            raise ConfigError(
                f"rollout_gpus must be an integer >= 0 (0 = vLLM colocated on the actor's GPUs), got "
                f"{self.rollout_gpus!r}"
            )

    @property
    def colocated(self) -> bool:
        return self.rollout_gpus == 0

    @property
    def total_gpus(self) -> int:
        return self.gpus + self.rollout_gpus


@dataclass
class VerlConfig:
    """Settings of the verl backend (module docstring). All sizes are per GPU unless named otherwise.

    Attributes:
        nnodes, n_gpus_per_node: the Ray cluster (paper: 1 node of 8 H200).
        models: physical model key -> :class:`ModelResources`; keys are ``policy`` (shared weights),
            ``designer``/``executor`` (separate) and ``role<i>`` (``policy.role_models``). Empty: the
            single shared model gets every GPU, colocated.
        rollout_name: ``vllm`` (vLLM servers) or ``hf``: this project's Hugging Face policy in the driver process as
            the rollout, the actor's weights pulled into it after every update (:mod:`.cpu`): verl's FSDP engine on
            CUDA checked without vLLM (``scripts/gpu_check.sh``); ``verl.device=cpu`` always uses it.
        rollout_tp: vLLM tensor-parallel size of one replica (replicas = rollout GPUs / rollout_tp).
        gpu_memory_utilization: fraction of a GPU vLLM may take (weights + KV cache).
        max_num_seqs, max_num_batched_tokens: vLLM scheduler limits per replica.
        enforce_eager: disable CUDA graphs in vLLM (saves memory, slower decoding).
        enable_prefix_caching: vLLM's automatic prefix caching (the designer's system prompt and each
            agent's system prompt are computed once per replica; requests are routed by team affinity).
        train_tokens_per_gpu: token budget of one FSDP micro-batch (``ppo_max_token_len_per_gpu``);
            default: ``optim.max_prompt_tokens + optim.max_response_tokens`` (one longest sample).
        logprob_tokens_per_gpu: same for forward-only log-prob passes; default 2x the training budget.
        ulysses_sp: Ulysses sequence-parallel size of the actor (long sequences).
        param_offload, optimizer_offload: FSDP CPU offload of parameters / optimizer states between phases.
        gradient_checkpointing: recompute activations in backward.
        advantage_placement: ``all_tokens`` (every response token carries the sample's advantage, as
            verl's GRPO and the local backend do) or ``last_token`` (only the final response token).
        old_log_prob: ``rollout`` (pi_old = the rollout log-probs, paper Eq. 3, as the local backend) or
            ``recompute`` (the actor recomputes them before the update; rollout log-probs are kept as
            ``rollout_log_probs`` for verl's mismatch metrics, ``verl/<key>/rollout_corr/*``). ``optim.tis_cap``
            implies ``recompute``: verl's ``rollout_is_weights`` weigh the recomputed pi_old against the rollout.
        calculate_entropy: compute token entropies in the update (logged; memory heavy at 150k vocab).
        checkpoint_engine: weight-sync backend for split placement.
        save_hf_model: also write a full Hugging Face model into every checkpoint (slow for 8B; see
            ``python -m metaagent.train.verl_backend.convert`` for converting afterwards).
        chat_template_kwargs: extra arguments of ``tokenizer.apply_chat_template`` (Qwen3:
            ``{enable_thinking: false}`` for the paper's no-thinking mode).
        ray_address: address of an existing Ray cluster; None starts a local one.
        request_timeout_s: wall-clock limit of one generation request on the vLLM servers.
        plan_agent_calls: expected agent calls per execution, used only for the dry-run's estimates.
        overrides: raw Hydra overrides applied to verl's ``ppo_trainer`` config of every physical model
            (e.g. ``actor_rollout_ref.actor.fsdp_config.model_dtype=bf16``), after metaagent's own.
        device: ``cuda`` (GPUs, vLLM servers) or ``cpu``: verl's real FSDP engine on CPU workers with gloo, and
            this project's Hugging Face policy as the rollout, its weights taken from the FSDP engine after
            every update (:mod:`.cpu`); for CI and small models, no GPU needed.
        attn_implementation: the actor's attention kernel; ``auto`` picks ``flash_attention_2`` when the
            ``flash_attn`` package is installed and ``sdpa`` otherwise (always ``sdpa`` on CPU).
        logprob_check: before every update, let the actor compute the batch's log-probs and log how far the
            rollout's are from them (``verl/<key>/rollout_logprob_diff_max``, ``_mean``); costs one forward.
    """

    nnodes: int = 1
    n_gpus_per_node: int = 8
    models: dict[str, ModelResources] = field(default_factory=dict)
    rollout_name: str = "vllm"
    rollout_tp: int = 1
    gpu_memory_utilization: float = 0.6
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enforce_eager: bool = False
    enable_prefix_caching: bool = True
    train_tokens_per_gpu: int | None = None
    logprob_tokens_per_gpu: int | None = None
    ulysses_sp: int = 1
    param_offload: bool = False
    optimizer_offload: bool = False
    gradient_checkpointing: bool = True
    advantage_placement: str = "all_tokens"
    old_log_prob: str = "rollout"
    calculate_entropy: bool = False
    checkpoint_engine: str = "nccl"
    save_hf_model: bool = False
    chat_template_kwargs: dict[str, Any] | None = None  # None: policy.chat_template_kwargs (template default)
    ray_address: str | None = None
    request_timeout_s: float = 3600.0
    plan_agent_calls: float = 4.0
    overrides: list[str] = field(default_factory=list)
    device: str = "cuda"
    attn_implementation: str = "auto"
    logprob_check: bool = False

    def __post_init__(self) -> None:
        for name in (
            "nnodes",
            "n_gpus_per_node",
            "rollout_tp",
            "max_num_seqs",
            "max_num_batched_tokens",
            "ulysses_sp",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"verl.{name} must be a positive integer, got {value!r}")
        for name in ("train_tokens_per_gpu", "logprob_tokens_per_gpu"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(
                    f"verl.{name} must be a positive integer or null (automatic), got {value!r}"
                )
        if not 0.05 <= self.gpu_memory_utilization <= 0.98:
            raise ConfigError(
                f"verl.gpu_memory_utilization must be in [0.05, 0.98] (vLLM's share of a GPU), got "
                f"{self.gpu_memory_utilization}"
            )
        _one_of("rollout_name", self.rollout_name, ROLLOUT_NAMES)
        _one_of("advantage_placement", self.advantage_placement, ADVANTAGE_PLACEMENTS)
        _one_of("old_log_prob", self.old_log_prob, OLD_LOG_PROBS)
        _one_of("checkpoint_engine", self.checkpoint_engine, CHECKPOINT_ENGINES)
        _one_of("device", self.device, DEVICES)
        _one_of("attn_implementation", self.attn_implementation, ATTN_IMPLEMENTATIONS)
        if self.device == "cpu" and self.attn_implementation == "flash_attention_2":
            raise ConfigError("verl.attn_implementation=flash_attention_2 needs CUDA; on verl.device=cpu use auto or sdpa")
        if not self.request_timeout_s > 0:
            raise ConfigError(f"verl.request_timeout_s must be > 0 seconds, got {self.request_timeout_s}")
        if not self.plan_agent_calls >= 1:
            raise ConfigError(
                f"verl.plan_agent_calls must be >= 1 (agent calls per execution), got {self.plan_agent_calls}"
            )
        for i, o in enumerate(self.overrides):
            if not isinstance(o, str) or "=" not in o:
                raise ConfigError(
                    f"verl.overrides[{i}] must be a Hydra override 'key.path=value' for verl's ppo_trainer "
                    f"config, got {o!r}"
                )
        for key, res in self.models.items():
            if not isinstance(res, ModelResources):
                raise ConfigError(f"verl.models.{key} must be a mapping like {{gpus: 8, rollout_gpus: 0}}")
            self.check_model(key, res)

    @property
    def hf_rollout(self) -> bool:
        """Whether the rollout is the Hugging Face policy in the driver (``rollout_name: hf``, or ``device: cpu``)."""
        return self.device == "cpu" or self.rollout_name == "hf"

    def check_model(self, key: str, res: ModelResources) -> None:
        """Raise ``ConfigError`` unless ``res`` fits this cluster's node size, vLLM TP and sequence parallelism."""
        for what, n in (("gpus", res.gpus), ("rollout_gpus", res.rollout_gpus)):
            if n > self.n_gpus_per_node and n % self.n_gpus_per_node:
                raise ConfigError(
                    f"verl.models.{key}.{what} = {n} spans nodes but is not a multiple of "
                    f"verl.n_gpus_per_node = {self.n_gpus_per_node}; use whole nodes beyond one node"
                )
        if res.rollout_gpus and res.rollout_gpus % self.rollout_tp:
            raise ConfigError(
                f"verl.models.{key}.rollout_gpus = {res.rollout_gpus} must be a multiple of verl.rollout_tp = "
                f"{self.rollout_tp} (one vLLM replica spans rollout_tp GPUs)"
            )
        if res.colocated and res.gpus % self.rollout_tp:
            raise ConfigError(
                f"verl.models.{key}.gpus = {res.gpus} must be a multiple of verl.rollout_tp = {self.rollout_tp}: "
                "colocated vLLM replicas run on the actor's GPUs"
            )
        if res.gpus % self.ulysses_sp:
            raise ConfigError(
                f"verl.models.{key}.gpus = {res.gpus} must be a multiple of verl.ulysses_sp = {self.ulysses_sp}"
            )

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    @classmethod
    def from_train_config(cls, config: Any) -> VerlConfig:
        """Parse ``config.verl`` (a plain dict in :class:`TrainConfig`); errors name the ``verl.`` key."""
        data = dict(config.verl or {})
        models = data.get("models")
        if models is not None and not isinstance(models, dict):
            raise ConfigError(f"verl.models must be a mapping of model key -> {{gpus: ..}}, got {models!r}")
        return from_dict(cls, data, where="verl")


def _one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"verl.{name} must be one of {allowed}, got {value!r}")
