"""The resolved plan of a verl run: physical models on GPUs, sizes per step, and their validation.

Pure and cheap (no torch, Ray, verl or vLLM import): ``train-metaagent --backend verl --dry-run`` prints it on
any machine, and the backend (:class:`metaagent.train.verl_backend.backend.VerlBackend`, given it as ``plan=``)
starts from the same object on the GPU node.

Sizes of one training step (B tasks, M designs, N executions, K steps per stage)::

    designer generations      B * M                     (trained in designer stages)
    executions                <= B * M * N              (invalid designs are not executed)
    agent calls               ~ executions * c          (c = verl.plan_agent_calls; at most limits.max_agent_calls)
    executor samples          = agent calls             (trained in executor stages; one sample per call)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from metaagent.config import ConfigError
from metaagent.credit import get_token_stage
from metaagent.learn.optim import POLICY_LOSSES, LossConfig
from metaagent.train.backend_sections import ModelResources, VerlConfig
from metaagent.train.config import TrainConfig
from metaagent.train.roles import model_plan
from metaagent.train.schedule import DESIGNER, EXECUTOR, StageSchedule
from metaagent.workflow.limits import Limits


#: the verl advantage-estimator name of each metaagent credit estimator (registered in .advantage)
VERL_ESTIMATORS = {"hierarchical": "metaagent_hierarchical", "flat": "metaagent_flat"}


@dataclass(frozen=True)
class ModelPlan:
    """One physical model: its weights, the roles it trains, and where it runs."""

    key: str
    path: str
    roles: tuple[str, ...]  # route patterns of metaagent.learn.samples.route_samples trained by this model
    gpus: int  # FSDP actor GPUs
    rollout_gpus: int  # standalone vLLM GPUs (0 = colocated on the actor GPUs)
    dp_size: int  # data-parallel ranks of the actor (gpus / ulysses_sp)
    rollout_replicas: int  # vLLM servers (each rollout_tp GPUs)
    rollout_start_rank: int  # first vLLM replica rank (split models are numbered after colocated ones)

    @property
    def colocated(self) -> bool:
        return self.rollout_gpus == 0

    @property
    def placement(self) -> str:
        return "colocated" if self.colocated else "split"


@dataclass(frozen=True)
class StepSizes:
    """Per-step counts and token volumes (upper bounds at full response length unless named ``expected``)."""

    tasks: int
    designer_generations: int
    max_executions: int
    expected_agent_calls: float
    max_agent_calls: int
    generated_tokens_expected: int
    generated_tokens_max: int
    designer_stage_samples: int
    executor_stage_samples_expected: float
    designer_stage_response_tokens_max: int
    executor_stage_response_tokens_expected: int


@dataclass(frozen=True)
class Plan:
    models: tuple[ModelPlan, ...]
    designer_key: str
    route: dict[str, str]  # sample route pattern -> model key
    executor_keys: dict[str, str]  # policy registry pattern -> model key
    schedule: StageSchedule
    steps: int
    batch_size: int
    m_designs: int
    n_executions: int
    frozen_designer: str | None
    max_prompt_tokens: int
    max_response_tokens: int
    designer_max_tokens: int
    executor_max_tokens: int
    rollout_response_length: int
    max_model_len: int
    train_tokens_per_gpu: int
    logprob_tokens_per_gpu: int
    cluster_gpus: int
    used_gpus: int
    estimator: str
    verl_estimator: str | None  # None: the estimator has no verl counterpart (no cross-check)
    sizes: StepSizes
    verl: VerlConfig = field(repr=False)
    critic: bool = False  # a verl critic worker group per model (GAE token stages: unity mode gae)

    def model(self, key: str) -> ModelPlan:
        for m in self.models:
            if m.key == key:
                return m
        raise KeyError(f"no physical model {key!r}; models: {[m.key for m in self.models]}")


def model_loss(cfg: TrainConfig, roles: tuple[str, ...]) -> LossConfig:
    """The loss settings of one physical model that trains ``roles`` (route patterns), as its verl actor takes
    them: verl's actor has one ``loss_agg_mode`` and one ``entropy_coeff``, so ``optim.per_role`` maps when the
    roles the model trains agree on them (separate weights: each model trains one role); otherwise one line
    names the setting and the fix. An entropy bonus on a model that trains both roles in one step (``coupled``)
    is refused too: verl aggregates it over the joint batch, where the local trainer sums each role's own."""
    trained = sorted({DESIGNER if r == DESIGNER else EXECUTOR for r in roles})
    loss = cfg.optim.loss()
    per_role = {r: loss.for_role(r) for r in trained}
    for name in ("loss_agg_mode", "entropy_coef"):
        values = {r: getattr(c, name) for r, c in per_role.items()}
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{r}: {v}" for r, v in values.items())
            raise ConfigError(
                f"optim.per_role gives one physical model the {name}s {shown}, but its verl actor has one "
                f"{name}; set them equal, train each role on its own model (policy.weights=separate), or use "
                "trainer.backend=local"
            )
    chosen = per_role[trained[0]] if trained else loss
    if len(trained) > 1 and chosen.entropy_coef > 0 and cfg.schedule.mode == "coupled":
        raise ConfigError(
            "optim.entropy_coef > 0 with schedule.mode=coupled on one shared model: verl aggregates the entropy "
            "bonus over both roles' samples at once, not per role as Eq. 2's L_D + L_E; use policy.weights=separate, "
            "a stagewise schedule, or trainer.backend=local"
        )
    return chosen


def needs_critic(cfg: TrainConfig) -> bool:
    """Whether the estimator's token stage needs a critic's values (UnityMAS-O's ``unity`` in ``mode: gae``):
    then every physical model gets a verl critic worker group beside its actor."""
    options = dict(cfg.algo.options)
    stage = get_token_stage(cfg.algo.estimator, options)
    return stage is not None and bool(stage.needs_values(options))


def _check_token_stage(cfg: TrainConfig) -> None:
    """A token stage that needs reference log-probs (MAPPA's KL in the reward) has no verl pre-pass yet."""
    options = dict(cfg.algo.options)
    stage = get_token_stage(cfg.algo.estimator, options)
    if stage is not None and stage.needs_ref(options):
        raise ConfigError(
            f"algo.estimator={cfg.algo.estimator} with a KL term in the reward needs reference log-probs before the "
            "update, which the verl backend does not compute yet; use trainer.backend=local or set its beta to 0"
        )


def _resources(cfg: TrainConfig, verl: VerlConfig, keys: list[str]) -> dict[str, ModelResources]:
    if not verl.models:
        if len(keys) > 1:
            source = f"policy.weights={cfg.policy.weights}" + (
                " with policy.role_models" if cfg.policy.role_models else ""
            )
            raise ConfigError(
                f"{source} gives {len(keys)} physical models {keys}; say how to place them in verl.models, e.g. "
                + "{"
                + ", ".join(f"{k}: {{gpus: 2, rollout_gpus: 2}}" for k in keys)
                + "} (at most one model may be colocated, see metaagent.train.backend_sections)"
            )
        return {keys[0]: ModelResources(gpus=verl.total_gpus, rollout_gpus=0)}
    unknown = sorted(set(verl.models) - set(keys))
    missing = sorted(set(keys) - set(verl.models))
    if unknown or missing:
        raise ConfigError(
            f"verl.models must list exactly the physical models {keys} of policy.weights={cfg.policy.weights}; "
            f"unknown: {unknown}, missing: {missing}"
        )
    return {k: verl.models[k] for k in keys}


def resolve_plan(cfg: TrainConfig, verl: VerlConfig | None = None) -> Plan:
    """Validate ``cfg`` for the verl backend and resolve what runs where. Raises ``ConfigError`` naming the fix."""
    verl = verl or VerlConfig.from_train_config(cfg)
    _check_supported(cfg)
    _check_one_cluster(cfg, verl)
    paths, route, designer_key, executor_keys = model_plan(cfg.policy)
    keys = list(paths)
    resources = _resources(cfg, verl, keys)
    for key, res in resources.items():
        verl.check_model(key, res)
    used = _check_placement(cfg, verl, resources)
    verl = _resolve_old_log_prob(cfg, verl)
    max_prompt, max_response = cfg.optim.max_prompt_tokens, cfg.optim.max_response_tokens
    train_tokens, logprob_tokens = _micro_batch_tokens(verl, max_prompt + max_response)

    frozen = cfg.rollout.frozen_designer
    designer_tokens = 0 if frozen else cfg.rollout.designer.max_tokens
    executor_tokens = cfg.rollout.executor.max_tokens
    response_length = max(designer_tokens, executor_tokens)
    m = 1 if frozen else cfg.rollout.m_designs
    models = _model_plans(verl, paths, route, resources)
    for mp in models:  # optim.per_role: each actor's one aggregation and entropy bonus (refused where they differ)
        model_loss(cfg, mp.roles)
    return Plan(
        models=models,
        designer_key=designer_key,
        route=route,
        executor_keys=executor_keys,
        schedule=cfg.schedule.build(),
        steps=cfg.trainer.steps,
        batch_size=cfg.data.batch_size,
        m_designs=m,
        n_executions=cfg.rollout.n_executions,
        frozen_designer=frozen,
        max_prompt_tokens=max_prompt,
        max_response_tokens=max_response,
        designer_max_tokens=designer_tokens,
        executor_max_tokens=executor_tokens,
        rollout_response_length=response_length,
        max_model_len=max_prompt + response_length,
        train_tokens_per_gpu=train_tokens,
        logprob_tokens_per_gpu=logprob_tokens,
        cluster_gpus=verl.total_gpus,
        used_gpus=used,
        estimator=cfg.algo.estimator,
        verl_estimator=VERL_ESTIMATORS.get(cfg.algo.estimator),
        sizes=_step_sizes(cfg, verl, m, designer_tokens, executor_tokens),
        verl=verl,
        critic=needs_critic(cfg),
    )


def _check_supported(cfg: TrainConfig) -> None:
    """The local-backend-only options: a reset optimizer at stage switches, DPO, a plugin policy loss, a token
    stage needing refs."""
    if cfg.optim.stage_switch != "keep":
        raise ConfigError(
            "optim.stage_switch=reset is not supported by the verl backend yet (the optimizer state lives in the "
            "FSDP workers); use optim.stage_switch=keep or --backend local"
        )
    if cfg.optim.dpo:
        raise ConfigError("optim.dpo (the DPO loss on preference pairs) runs on the local backend only for now")
    if cfg.optim.policy_loss not in POLICY_LOSSES:
        raise ConfigError(
            f"optim.policy_loss={cfg.optim.policy_loss} is a plugin of metaagent's policy-loss registry, which the "
            f"local backend computes with; verl computes its own ({', '.join(POLICY_LOSSES)}): use --backend local"
        )
    _check_token_stage(cfg)


def _check_one_cluster(cfg: TrainConfig, verl: VerlConfig) -> None:
    """The trainer process joins one Ray cluster: verl's worker groups start it (``verl.ray_address``), and the Ray
    sandbox pool (``rollout.ray_address``) takes the one already joined, so the two must name the same cluster."""
    rollout = cfg.rollout.ray_address
    if rollout is None:
        return
    if (None if rollout == "local" else rollout) != verl.ray_address:
        raise ConfigError(
            f"rollout.ray_address={rollout} but verl.ray_address={verl.ray_address}: one trainer process joins one "
            "Ray cluster (verl's, joined first), so the sandbox actors would run on it; set both to the same "
            "address (verl.ray_address: null with rollout.ray_address: local for a local Ray)"
        )


def _check_placement(cfg: TrainConfig, verl: VerlConfig, resources: dict[str, ModelResources]) -> int:
    """Checks the models' placement against the cluster and the reference model; returns the GPUs used."""
    colocated = [k for k, r in resources.items() if r.colocated]
    if len(resources) > 1 and len(colocated) > 1:
        raise ConfigError(
            f"physical models {colocated} are all colocated (rollout_gpus: 0); verl 0.9.1 names hybrid vLLM servers "
            "by replica rank only, so two of them collide in one Ray job. Give all but one of them rollout_gpus > 0 "
            "(split placement)"
        )
    used = sum(r.total_gpus for r in resources.values())
    if used > verl.total_gpus:
        raise ConfigError(
            f"verl.models need {used} GPUs but the cluster has verl.nnodes * verl.n_gpus_per_node = "
            f"{verl.nnodes} * {verl.n_gpus_per_node} = {verl.total_gpus}"
        )
    if cfg.optim.kl_coef > 0 and not cfg.policy.lora.enabled and any(not r.colocated for r in resources.values()):
        raise ConfigError(  # with LoRA the reference is the actor with its adapter off (verl's ref_in_actor)
            "optim.kl_coef > 0 needs a reference model, which the verl backend hosts in the colocated "
            "actor_rollout_ref worker only; use colocated placement (rollout_gpus: 0), policy.lora, or optim.kl_coef: 0"
        )
    return used


def _resolve_old_log_prob(cfg: TrainConfig, verl: VerlConfig) -> VerlConfig:
    """``verl.old_log_prob: auto`` resolved: TIS weighs the actor's recomputed pi_old against the rollout engine's
    log-probs (verl's decoupled mode; the local backend recomputes too), so ``optim.tis_cap`` implies ``recompute``;
    without TIS, ``auto`` is ``rollout``."""
    if cfg.optim.tis_cap is None:
        return verl if verl.old_log_prob != "auto" else dataclasses.replace(verl, old_log_prob="rollout")
    if verl.old_log_prob not in ("auto", "recompute"):
        raise ConfigError(
            "optim.tis_cap weighs the actor's recomputed pi_old against the rollout's log-probs, so it needs "
            f"verl.old_log_prob=recompute (implied by auto, the default), not {verl.old_log_prob}"
        )
    return dataclasses.replace(verl, old_log_prob="recompute")


def _micro_batch_tokens(verl: VerlConfig, longest: int) -> tuple[int, int]:
    """The (train, log-prob) token budgets per GPU; each must hold one ``longest`` sample."""
    train_tokens = verl.train_tokens_per_gpu or longest
    if train_tokens < longest:
        raise ConfigError(
            f"verl.train_tokens_per_gpu = {train_tokens} is below one longest sample (optim.max_prompt_tokens + "
            f"optim.max_response_tokens = {longest}); verl's dynamic micro-batching cannot place it. Raise it or "
            "lower the optim lengths"
        )
    logprob_tokens = verl.logprob_tokens_per_gpu or 2 * train_tokens
    if logprob_tokens < longest:
        raise ConfigError(
            f"verl.logprob_tokens_per_gpu = {logprob_tokens} is below one longest sample ({longest})"
        )
    return train_tokens, logprob_tokens


def _model_plans(
    verl: VerlConfig, paths: dict[str, str], route: dict[str, str], resources: dict[str, ModelResources]
) -> tuple[ModelPlan, ...]:
    """One :class:`ModelPlan` per physical model, in ``paths`` order; split models' vLLM replicas are ranked
    after all the colocated ones."""
    models = []
    next_rank = sum(r.gpus // verl.rollout_tp for r in resources.values() if r.colocated)
    for key, path in paths.items():
        res = resources[key]
        if res.colocated:
            start, replicas = 0, res.gpus // verl.rollout_tp
        else:
            start, replicas = next_rank, res.rollout_gpus // verl.rollout_tp
            next_rank += replicas
        models.append(
            ModelPlan(
                key=key,
                path=path,
                roles=tuple(p for p, k in route.items() if k == key),
                gpus=res.gpus,
                rollout_gpus=res.rollout_gpus,
                dp_size=res.gpus // verl.ulysses_sp,
                rollout_replicas=replicas,
                rollout_start_rank=start,
            )
        )
    return tuple(models)


def _step_sizes(
    cfg: TrainConfig, verl: VerlConfig, m: int, designer_tokens: int, executor_tokens: int
) -> StepSizes:
    limits = Limits.coerce(cfg.rollout.limits)
    b, n = cfg.data.batch_size, cfg.rollout.n_executions
    designs = b * m
    executions = designs * n
    calls_expected = min(verl.plan_agent_calls, float(limits.max_agent_calls))
    per_exec_expected = min(limits.max_total_tokens, math.ceil(calls_expected * executor_tokens))
    per_exec_max = min(limits.max_total_tokens, limits.max_agent_calls * executor_tokens)
    designer_gen = designs * designer_tokens
    trained_response = min(executor_tokens, cfg.optim.max_response_tokens)
    per_exec_trained = min(limits.max_total_tokens, math.ceil(calls_expected * trained_response))
    return StepSizes(
        tasks=b,
        designer_generations=0 if cfg.rollout.frozen_designer else designs,
        max_executions=executions,
        expected_agent_calls=executions * calls_expected,
        max_agent_calls=executions * limits.max_agent_calls,
        generated_tokens_expected=designer_gen + executions * per_exec_expected,
        generated_tokens_max=designer_gen + executions * per_exec_max,
        designer_stage_samples=0 if cfg.rollout.frozen_designer else designs,
        executor_stage_samples_expected=executions * calls_expected,
        designer_stage_response_tokens_max=designs * min(designer_tokens, cfg.optim.max_response_tokens),
        executor_stage_response_tokens_expected=executions * per_exec_trained,
    )


def _stages(schedule: StageSchedule, steps: int, shown: int = 4) -> str:
    parts = [f"{a}-{b - 1} {name}" for a, b, name in schedule.boundaries(steps)[:shown]]
    more = len(schedule.boundaries(steps)) - shown
    return ", ".join(parts) + (f", ... ({more} more)" if more > 0 else "")


def format_plan(plan: Plan, verl_settings: dict[str, dict[str, Any]] | None = None) -> str:
    """The plan as the text ``--dry-run`` prints; ``verl_settings`` adds resolved verl config values per model."""
    lines = [
        "metaagent verl plan (dry run: nothing was started)",
        _cluster_line(plan),
        "physical models:",
        *_model_lines(plan, verl_settings or {}),
        *_run_lines(plan),
        "per step:",
        *_step_lines(plan),
    ]
    return "\n".join(lines)


def _cluster_line(plan: Plan) -> str:
    """The devices the run uses, and where the rollout runs when it is not vLLM."""
    v = plan.verl
    if v.device == "cpu":
        return (
            f"device: cpu: {plan.used_gpus} CPU worker process(es) of verl's FSDP engine (gloo); the rollout is the "
            "Hugging Face policy in this process, synced from the actor after every update"
        )
    line = f"cluster: {v.nnodes} node(s) x {v.n_gpus_per_node} GPU = {plan.cluster_gpus} GPUs; this run uses {plan.used_gpus}"
    if v.hf_rollout and v.device == "cuda":
        line += "; the rollout is the Hugging Face policy in this process (verl.rollout_name=hf), not vLLM"
    return line


def _model_lines(plan: Plan, verl_settings: dict[str, dict[str, Any]]) -> list[str]:
    """A line per physical model (weights, roles, placement), each followed by its resolved verl settings."""
    v, lines = plan.verl, []
    for mp in plan.models:
        where = (
            f"colocated on {mp.gpus} GPU(s) (FSDP dp={mp.dp_size}, {mp.rollout_replicas} vLLM replica(s) x tp={v.rollout_tp})"
            if mp.colocated
            else f"split: FSDP on {mp.gpus} GPU(s) (dp={mp.dp_size}), {mp.rollout_replicas} standalone vLLM "
            f"replica(s) x tp={v.rollout_tp} on {mp.rollout_gpus} GPU(s), ranks from {mp.rollout_start_rank}, "
            f"weights via {v.checkpoint_engine}"
        )
        lines.append(f"  {mp.key}: {mp.path}  trains {', '.join(mp.roles)}  [{where}]")
        for name, value in verl_settings.get(mp.key, {}).items():
            lines.append(f"      {name} = {value}")
    return lines


def _run_lines(plan: Plan) -> list[str]:
    """The rollout shape, the stage schedule, the credit estimator, the critic, the lengths and micro-batches."""
    v = plan.verl
    return [
        (
            f"hierarchical rollout: B={plan.batch_size} tasks x M={plan.m_designs} designs x N={plan.n_executions} "
            "executions" + (f" (frozen designer: {plan.frozen_designer})" if plan.frozen_designer else "")
        ),
        (
            f"schedule: {plan.schedule.mode}, K={plan.schedule.stage_len} steps per stage, {plan.steps} steps: "
            f"{_stages(plan.schedule, plan.steps)}"
        ),
        (
            f"credit: {plan.estimator} "
            + (f"(verl estimator '{plan.verl_estimator}')" if plan.verl_estimator else "(no verl counterpart: not cross-checked)")
            + "; advantages on "
            f"{v.advantage_placement}; pi_old = {v.old_log_prob} log-probs"
        ),
        *(
            [
                (
                    "critic: one verl critic worker group per model (value model = the model's weights + a linear "
                    "head, colocated with its actor); GAE on the critic's values, then update_critic before update_actor"
                )
            ]
            if plan.critic
            else []
        ),
        (
            f"lengths: train prompt <= {plan.max_prompt_tokens}, train response <= {plan.max_response_tokens}; "
            f"generation designer <= {plan.designer_max_tokens}, agent <= {plan.executor_max_tokens}; "
            f"vLLM max_model_len = {plan.max_model_len}"
        ),
        (
            f"micro-batches: <= {plan.train_tokens_per_gpu} tokens per GPU (train), "
            f"<= {plan.logprob_tokens_per_gpu} (log-prob)"
        ),
    ]


def _step_lines(plan: Plan) -> list[str]:
    """Per step: generations, agent calls, generated tokens, trained samples, and samples per data-parallel rank."""
    v, s = plan.verl, plan.sizes
    lines = [
        (
            f"  designer generations: {s.designer_generations}; executions: <= {s.max_executions}; agent calls: "
            f"~{s.expected_agent_calls:g} expected (<= {s.max_agent_calls})"
        ),
        (
            f"  generated tokens (every response at max_tokens): <= {s.generated_tokens_expected:,} with "
            f"{v.plan_agent_calls:g} agent calls per execution, <= {s.generated_tokens_max:,} at every limit"
        ),
        (
            f"  trained samples: designer stage {s.designer_stage_samples} "
            f"(<= {s.designer_stage_response_tokens_max:,} response tokens); executor stage "
            f"~{s.executor_stage_samples_expected:g} (<= {s.executor_stage_response_tokens_expected:,} response tokens)"
        ),
    ]
    for mp in plan.models:
        parts = []
        if DESIGNER in mp.roles:
            parts.append(f"designer stage {s.designer_stage_samples / mp.dp_size:.1f}")
        if any(r.startswith(EXECUTOR) for r in mp.roles):
            parts.append(f"executor stage <= ~{s.executor_stage_samples_expected / mp.dp_size:.1f}")
        lines.append(f"  {mp.key}: samples per data-parallel rank (dp={mp.dp_size}): {', '.join(parts)}")
    return lines
