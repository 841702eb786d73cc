"""The local backend's physical models (the role -> model map is :mod:`metaagent.train.roles`).

Each physical model is loaded once (fp32 master weights), served for rollout through an ``HFPolicy``
behind a ``BatchingPolicy`` (both built by :func:`metaagent.policy.factory.build_policy`), and trained by its
own ``PolicyUpdater`` (own optimizer). The rollout
reads the very weights the updater changes (``policy.dtype: float32``), or a bf16 copy of them that the
policy refreshes when they changed (``bfloat16``, :class:`metaagent.policy.precision.DecodeCopy`), so no
sync step is needed on the local backend.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from metaagent.learn.optim import OptimizerConfig
from metaagent.policy.base import Policy
from metaagent.policy.factory import batcher_options, build_policy
from metaagent.policy.models import load_model_and_tokenizer
from metaagent.records import DESIGNER
from metaagent.train.config import OptimConfig, PolicyConfig
from metaagent.train.roles import executor_policy, model_plan


@dataclass
class ModelSet:
    """Loaded physical models, their rollout policies, and the role -> model-key routing."""

    models: dict[str, Any]  # key -> transformers model (trained in place)
    tokenizers: dict[str, Any]
    paths: dict[str, str]  # key -> the path or alias it was loaded from
    policies: dict[str, Policy]  # key -> batching policy over the model
    role_to_key: dict[str, str]  # patterns for metaagent.learn.samples.route_samples
    designer_key: str
    executor_keys: dict[str, str] = field(default_factory=dict)  # registry pattern -> key
    # policy.lora: key -> the AdapterSet holding its adapter (keys on one base share one set); empty otherwise
    adapters: dict[str, Any] = field(default_factory=dict)

    def checkpoint_models(self) -> dict[str, Any]:
        """What a checkpoint saves per key: the model, or (LoRA) a handle that writes only the key's adapter."""
        from metaagent.train.local.lora import AdapterHandle

        return {k: AdapterHandle(self.adapters[k], k) if k in self.adapters else m for k, m in self.models.items()}

    @property
    def designer(self) -> Policy:
        return self.policies[self.designer_key]

    def executor(self) -> Policy:
        """The policy agent calls go to: one model, or a router over executor role-name patterns."""
        return executor_policy(self.policies, self.executor_keys)

    def model_ids(self) -> dict[str, str]:
        return {DESIGNER: self.paths[self.designer_key], **{p: self.paths[k] for p, k in self.executor_keys.items()}}

    def weights_changed(self) -> None:
        """Tell every rollout policy that the weights moved (an update or a restored checkpoint)."""
        for p in self.policies.values():
            p.weights_changed()

    def free_memory(self) -> None:
        """Before an update: every rollout policy drops what it rebuilds on its next call (prefix caches, bf16
        copies of the weights), and freed heap memory goes back to the OS (the rollout's threads leave it in
        their malloc arenas, which the update's thread would not reuse)."""
        for p in self.policies.values():
            p.free_memory()
        release_freed_memory()

    def close(self) -> None:
        for p in self.policies.values():
            p.close()


@functools.cache
def _libc(function: str) -> Any:
    """The C library's ``function`` (glibc's ``malloc_trim``, ``mallopt``), or None elsewhere; looked up once
    (``find_library`` runs ``ldconfig``)."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), function, None) if name else None


def release_freed_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``; elsewhere a no-op)."""
    gc.collect()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter (malloc.h)
UPDATE_MMAP_THRESHOLD = 256 * 1024  # bytes: every activation and gradient of an update is larger
ROLLOUT_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's dynamic threshold's ceiling (DEFAULT_MMAP_THRESHOLD_MAX)


@contextlib.contextmanager
def update_heap() -> Iterator[None]:
    """During an update, blocks of 256 KiB and more that the heap's free space cannot serve get pages of their own
    (``mmap``) that go back to the OS the moment they are freed, instead of growing the heap (glibc; elsewhere a
    no-op).

    Why: backward frees activations while it allocates gradients of other sizes; from the heap, the holes left
    behind do not fit the next requests, and the peak resident memory of the default step grew by ~0.6 GB over the
    bytes alive (measured: one update of 3 x 768 tokens on SmolLM2-135M peaked at 4.29 GB, 3.70 GB with this).
    Afterwards the threshold is glibc's dynamic ceiling, where the rollout's steady state puts it anyway.
    """
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, UPDATE_MMAP_THRESHOLD)
    try:
        yield
    finally:
        if mallopt is not None:
            mallopt(M_MMAP_THRESHOLD, ROLLOUT_MMAP_THRESHOLD)


def load_models(cfg: PolicyConfig, *, seed: int = 0) -> ModelSet:
    """Load every physical model of ``cfg`` and wrap each in a batching rollout policy; ``seed`` (the run's
    ``trainer.seed``) seeds the LoRA adapters' initial weights (:class:`~metaagent.train.local.lora.AdapterSet`)."""
    if cfg.backend != "hf":
        raise ValueError(
            f"the local trainer generates with the model it trains (policy.backend=hf); got {cfg.backend!r}. "
            "For vLLM rollouts use trainer.backend=verl"
        )
    paths, route, designer_key, executor_keys = model_plan(cfg)
    models, tokenizers, policies, adapters = {}, {}, {}, {}
    loaded: dict[str, tuple[Any, Any]] = {}
    for key, path in paths.items():
        context = None
        if cfg.lora.enabled:  # keys naming the same model share one base, one adapter each
            from metaagent.train.local.lora import AdapterSet, base_name

            if path not in loaded:
                base, tok = load_model_and_tokenizer(path, dtype="float32", device=cfg.device)
                keys = [k for k, p in paths.items() if p == path]
                aset = AdapterSet(base, keys, cfg.lora, base_name(path), seed=seed)
                loaded[path] = (aset, tok)
            aset, tok = loaded[path]
            model, adapters[key] = aset.model, aset
            context = functools.partial(aset.use, key)
        else:
            model, tok = load_model_and_tokenizer(path, dtype="float32", device=cfg.device)
        models[key], tokenizers[key] = model, tok
        policies[key] = build_policy(
            "hf",
            model,
            tokenizer=tok,
            device=cfg.device,
            # a bf16 rollout generates from a refreshed bf16 copy; LoRA adapters switch on the model itself
            dtype=None if cfg.lora.enabled else cfg.dtype,
            max_batch_size=cfg.max_batch_size,
            continuous=cfg.continuous,
            model_id=path,
            prefix_cache_mb=cfg.prefix_cache_mb,
            prepack=cfg.prepack,
            chat_template_kwargs=cfg.chat_template_kwargs,
            model_context=context,
            batching=True,
            max_wait_s=cfg.max_wait_s,
            **batcher_options(cfg.max_batch_size, cfg.continuous),  # continuous: each request its own call
        )
    return ModelSet(models, tokenizers, paths, policies, route, designer_key, executor_keys, adapters)


def make_updaters(
    models: ModelSet, optim: OptimConfig, total_steps: int | None = None, *, need_ref: bool = False
) -> dict[str, Any]:
    """One PolicyUpdater (own AdamW) per physical model; ``optim`` is the one optimizer + loss config. Each gets
    a reference policy when the loss needs one (``kl_coef > 0``, DPO) or ``need_ref`` (a token stage that puts
    the KL into the reward): a frozen copy of the model loaded from its path, or with ``policy.lora`` the
    shared frozen base with the adapters off (:meth:`~metaagent.train.local.lora.AdapterSet.reference`), no copy."""
    from metaagent.train.local.update import PolicyUpdater, UpdateOptions

    updaters = {}
    for key, model in models.models.items():
        options = UpdateOptions(pad_id=models.tokenizers[key].pad_token_id or 0, recompute=optim.recompute)
        reference: dict[str, Any] = {}
        lora: dict[str, Any] = {}
        if key in models.adapters:  # only this key's adapter is optimised, with it active in every forward
            aset = models.adapters[key]
            lora = {"params": aset.parameters(key), "model_context": functools.partial(aset.use, key)}
        if optim.kl_coef > 0 or optim.dpo or need_ref:
            if key in models.adapters:  # the reference is the frozen base under the adapters
                reference = {"ref_context": models.adapters[key].reference}
            else:
                ref, _ = load_model_and_tokenizer(models.paths[key], dtype="float32", device=str(model.device))
                reference = {"ref_model": ref}
        updaters[key] = PolicyUpdater(
            model, optim=optim.optimizer(), loss=optim.loss(), options=options, total_steps=total_steps,
            **reference, **lora,
        )  # fmt: skip
    return updaters


def make_critics(models: ModelSet, critic: Any, optim: OptimConfig) -> dict[str, Any]:
    """One :class:`~metaagent.train.local.critic.Critic` per physical model (the authors' critic per LLM), its value
    model from ``critic.model`` or else the same weights as the policy it pairs with; AdamW at ``critic.lr``
    with the policy's betas, epsilon and micro-batch budget."""
    from metaagent.train.local.critic import Critic, load_value_model

    base = optim.optimizer()
    settings = {f: getattr(base, f) for f in OptimizerConfig.__dataclass_fields__}
    settings.update(lr=critic.lr, weight_decay=critic.weight_decay, grad_clip=critic.grad_clip, schedule="constant", warmup_steps=0)
    out = {}
    for key, model in models.models.items():
        value_model = load_value_model(critic.model or models.paths[key], device=str(model.device))
        out[key] = Critic(
            value_model, optim=OptimizerConfig(**settings), cliprange_value=critic.cliprange_value,
            loss_agg_mode=critic.loss_agg_mode, pad_id=models.tokenizers[key].pad_token_id or 0,
        )  # fmt: skip
    return out


def critic_values(critics: Mapping[str, Any], samples: Any, role_to_key: Mapping[str, str]) -> list[list[float]]:
    """``V_t`` of every response token of ``samples`` under the critic of its own model, in input order."""
    from metaagent.learn.samples import route_samples

    out: dict[int, list[float]] = {}
    index = {id(s): n for n, s in enumerate(samples)}
    for key, group in route_samples(samples, role_to_key).items():
        if key not in critics:
            raise ValueError(f"samples routed to model key {key!r} that has no critic; critics: {sorted(critics)}")
        for s, v in zip(group, critics[key].values(group)):
            out[index[id(s)]] = v
    return [out[n] for n in range(len(samples))]


def update_critics(critics: Mapping[str, Any], samples: Any, role_to_key: Mapping[str, str]) -> dict[str, float]:
    """One value-loss step of every critic on its model's samples; ``train/critic/*`` (one model) or
    ``train/critic/<key>/*`` (several)."""
    from metaagent.learn.samples import route_samples

    routed = route_samples(samples, role_to_key)
    metrics: dict[str, float] = {}
    for key, critic in critics.items():
        m = critic.update(routed.get(key, []))
        if len(critics) == 1:
            metrics.update(m)
        else:
            metrics.update({f"train/critic/{key}/{k.removeprefix('train/critic/')}": v for k, v in m.items()})
    return metrics
