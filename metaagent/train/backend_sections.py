"""The config sections of the training backends, below both the run's config (:mod:`metaagent.train.config`,
whose :class:`~metaagent.train.config.TrainConfig` holds them) and the backends that read them, so the run's
config imports no backend. Today one: ``verl:`` (:class:`VerlConfig`), the GPUs, placement and verl/vLLM knobs
of the verl backend (:mod:`metaagent.train.verl_backend`); the local backend reads the shared sections only.

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
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from metaagent.config import Checked, ConfigError, from_dict

ADVANTAGE_PLACEMENTS = ("all_tokens", "last_token")
OLD_LOG_PROBS = ("auto", "rollout", "recompute")  # auto: recompute under optim.tis_cap, else rollout
CHECKPOINT_ENGINES = ("nccl", "nixl", "mooncake")  # verl engines for split placement (colocated: naive)
ROLLOUT_NAMES = ("vllm", "hf")  # hf: this project's HF policy in the driver (what verl.device=cpu always uses)
DEVICES = ("cuda", "cpu")  # cpu: verl's FSDP engine on gloo, the HF policy as the rollout (tests, CI)
ATTN_IMPLEMENTATIONS = ("auto", "sdpa", "flash_attention_2", "eager")  # auto: flash-attn if installed, else sdpa


@dataclass
class ModelResources(Checked):
    """GPUs of one physical model. ``rollout_gpus == 0``: colocated on ``gpus``; > 0: split placement."""

    gpus: PositiveInt = 8  # GPUs of the model's FSDP actor (colocated: shared with its vLLM replicas)
    rollout_gpus: NonNegativeInt = 0  # GPUs of standalone vLLM replicas; 0 = vLLM colocated on the actor's GPUs

    @property
    def colocated(self) -> bool:
        return self.rollout_gpus == 0

    @property
    def total_gpus(self) -> int:
        return self.gpus + self.rollout_gpus


@dataclass
class VerlConfig(Checked):
    """Settings of the verl backend (module docstring). All sizes are per GPU unless named otherwise; each field's
    comment is its help text (``--verl.<field>``, the configuration reference)."""

    nnodes: PositiveInt = 1  # nodes of the Ray cluster (paper: 1 node of 8 H200)
    n_gpus_per_node: PositiveInt = 8  # GPUs per node of the Ray cluster
    # physical model key -> its GPUs ({gpus: 8, rollout_gpus: 0}); keys: policy (shared weights), designer /
    # executor (separate), role<i> (policy.role_models). Empty: the single shared model gets every GPU, colocated
    models: dict[str, ModelResources] = field(default_factory=dict)
    # the rollout engine: vllm (vLLM servers) or hf (this project's Hugging Face policy in the driver, the actor's
    # weights pulled into it after every update: verl's FSDP engine checked without vLLM; verl.device=cpu uses it)
    rollout_name: Literal[ROLLOUT_NAMES] = "vllm"
    rollout_tp: PositiveInt = 1  # vLLM tensor-parallel size of one replica (replicas = rollout GPUs / rollout_tp)
    # fraction of a GPU vLLM may take (weights + KV cache) while it generates
    gpu_memory_utilization: Annotated[float, Field(ge=0.05, le=0.98)] = 0.6
    max_num_seqs: PositiveInt = 256  # vLLM scheduler limit: sequences decoded at once per replica
    max_num_batched_tokens: PositiveInt = 8192  # vLLM scheduler limit: tokens per scheduler step per replica
    enforce_eager: bool = False  # disable CUDA graphs in vLLM (saves memory, slower decoding)
    # vLLM's automatic prefix caching: the designer's and each agent's system prompt are computed once per
    # replica (requests are routed by team affinity)
    enable_prefix_caching: bool = True
    # token budget of one FSDP micro-batch (verl's ppo_max_token_len_per_gpu); null: optim.max_prompt_tokens +
    # optim.max_response_tokens (one longest sample)
    train_tokens_per_gpu: PositiveInt | None = None
    # token budget of one forward-only log-prob micro-batch; null: 2x the training budget
    logprob_tokens_per_gpu: PositiveInt | None = None
    ulysses_sp: PositiveInt = 1  # Ulysses sequence-parallel size of the actor (long sequences)
    param_offload: bool = False  # FSDP CPU offload of the parameters between phases
    optimizer_offload: bool = False  # FSDP CPU offload of the optimizer states between phases
    gradient_checkpointing: bool = True  # recompute activations in the backward pass (less memory, slower)
    # which response tokens carry the sample's advantage: all_tokens (as verl's GRPO and the local backend) or
    # last_token (only the final response token)
    advantage_placement: Literal[ADVANTAGE_PLACEMENTS] = "all_tokens"
    # pi_old of Eq. 3: rollout (the rollout's log-probs, as the local backend) or recompute (the actor recomputes
    # them before the update; the rollout's are kept for verl's mismatch metrics verl/<key>/rollout_corr/*);
    # auto: recompute under optim.tis_cap (which needs it), else rollout. Resolved by the plan
    old_log_prob: Literal[OLD_LOG_PROBS] = "auto"
    calculate_entropy: bool = False  # compute token entropies in the update (logged; memory heavy at a 150k vocab)
    checkpoint_engine: Literal[CHECKPOINT_ENGINES] = "nccl"  # weight-sync backend of split placement
    # also write a full Hugging Face model into every checkpoint (slow for 8B; python -m
    # metaagent.train.verl_backend.convert converts afterwards)
    save_hf_model: bool = False
    # extra arguments of tokenizer.apply_chat_template (Qwen3: {enable_thinking: false}, the paper's no-thinking
    # mode); null: policy.chat_template_kwargs
    chat_template_kwargs: dict[str, Any] | None = None
    ray_address: str | None = None  # address of an existing Ray cluster; null starts a local one
    request_timeout_s: PositiveFloat = 3600.0  # wall-clock seconds one generation request may take on vLLM
    # expected agent calls per execution, used only for the dry run's size estimates
    plan_agent_calls: Annotated[float, Field(ge=1)] = 4.0
    # raw Hydra overrides of verl's ppo_trainer config of every physical model, applied after metaagent's own
    # (e.g. actor_rollout_ref.actor.fsdp_config.model_dtype=bf16)
    overrides: list[str] = field(default_factory=list)
    # cuda (GPUs, vLLM servers) or cpu (verl's FSDP engine on CPU workers with gloo, the Hugging Face policy as
    # the rollout: CI and small models, no GPU)
    device: Literal[DEVICES] = "cuda"
    # the actor's attention kernel; auto: flash_attention_2 when flash_attn is installed, else sdpa (always sdpa
    # on CPU)
    attn_implementation: Literal[ATTN_IMPLEMENTATIONS] = "auto"
    # before every update, log how far the rollout's log-probs are from the actor's
    # (verl/<key>/rollout_logprob_diff_max, _mean); costs one forward
    logprob_check: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device == "cpu" and self.attn_implementation == "flash_attention_2":
            raise ConfigError("verl.attn_implementation=flash_attention_2 needs CUDA; on verl.device=cpu use auto or sdpa")
        for i, o in enumerate(self.overrides):
            if "=" not in o:
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
        """``config.verl``: the typed section of :class:`TrainConfig` (a mapping is parsed, errors name the key)."""
        if isinstance(config.verl, VerlConfig):
            return config.verl
        return from_dict(cls, dict(config.verl or {}), where="verl")
