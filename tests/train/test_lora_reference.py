"""policy.lora with a reference policy (KL, DPO, MAPPA's pre-pass): the reference is the shared frozen base with
the adapters off, no second copy of the model is loaded, and its log-probs, KL and DPO terms equal those of a
separately loaded base after the adapters have moved."""

from __future__ import annotations

import contextlib
import functools
import gc

import pytest
import torch
from builders import random_samples

from metaagent.learn.logprobs import response_logprobs
from metaagent.learn.samples import PairSample, collate
from metaagent.policy.models import load_model_and_tokenizer
from metaagent.train.config import LoraSettings, OptimConfig, PolicyConfig
from metaagent.train.local.models import load_models, make_updaters
from metaagent.train.local.update import PolicyUpdater, UpdateError, ref_logprobs_routed, update_routed

LORA = LoraSettings(enabled=True, rank=4, alpha=8.0)


def _policy(lora: bool) -> PolicyConfig:
    return PolicyConfig(
        model="tiny", weights="separate", lora=LORA if lora else LoraSettings(), max_batch_size=4, prefix_cache_mb=0
    )


def _live_parameters() -> int:
    """How many model parameters are alive in this process: the distinct parameter tensors of every Hugging
    Face model object (a loaded copy adds its own, a wrapper or a submodule adds none)."""
    from transformers import PreTrainedModel

    gc.collect()
    params = {}
    for o in gc.get_objects():
        if issubclass(type(o), PreTrainedModel):
            params.update((id(p), p.numel()) for p in o.parameters())
    return sum(params.values())


def _base_logprobs(base, samples) -> list[list[float]]:
    with torch.no_grad():
        return [response_logprobs(base, collate([s]))[0][0].tolist() for s in samples]


@contextlib.contextmanager
def _models(lora: bool):
    models = load_models(_policy(lora))
    try:
        yield models
    finally:
        models.close()


def _set_parameters(models) -> int:
    """Distinct parameter tensors of the model set's own models (shared bases counted once)."""
    params = {}
    for m in models.models.values():
        params.update((id(p), p.numel()) for p in m.parameters())
    return sum(params.values())


def test_a_kl_run_without_lora_loads_a_reference_copy_per_model():
    """The contrast that makes the next test's count meaningful: without LoRA each key loads its own copy.
    Counts are differences: models of earlier tests may still be alive in the process."""
    with _models(lora=False) as models:
        before = _live_parameters()
        updaters = make_updaters(models, OptimConfig(kl_coef=0.1))
        # designer and executor: one reference copy each, as large as the set's own models together
        assert _live_parameters() - before == _set_parameters(models)
        assert all(u.ref_model is not None for u in updaters.values())


def test_lora_kl_reference_is_the_shared_base_and_equals_a_loaded_base():
    with _models(lora=True) as models:
        before = _live_parameters()
        updaters = make_updaters(models, OptimConfig(lr=1e-2, kl_coef=0.1, autocast=None))  # fp32: compared with fp32 references
        assert _live_parameters() == before  # no model was loaded for the reference
        assert all(u.ref_model is None and u.has_reference for u in updaters.values())
        aset = models.adapters["executor"]
        n_base = sum(p.numel() for n, p in aset.peft.named_parameters() if "lora_" not in n)
        assert _set_parameters(models) < 1.2 * n_base  # one base (+ two rank-4 adapters) for both keys

        samples = random_samples(8, seed=1, roles=("designer", "executor"))
        executor = [s for s in samples if s.role == "executor"]
        first = update_routed(updaters, samples, models.role_to_key, active_roles={"executor"})
        assert first["train/executor/skipped_step"] == 0.0
        assert first["train/executor/ref_kl"] == pytest.approx(0.0, abs=1e-7)  # B = 0: the policy is its base
        second = update_routed(updaters, samples, models.role_to_key, active_roles={"executor"})
        assert second["train/executor/ref_kl"] > 1e-6  # the adapter moved away from its base

        base, _ = load_model_and_tokenizer("tiny", dtype="float32")
        want = _base_logprobs(base, samples)
        policy = updaters["executor"]
        with aset.use("executor"):  # the executor's own adapter: far from its base now
            before_ref = _base_logprobs(policy.model, executor)
        aset.model.train()
        got = ref_logprobs_routed(updaters, samples, models.role_to_key)  # the MAPPA pre-pass, both keys
        assert aset.model.training  # the reference ran in eval mode and restored the mode
        assert max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) <= 1e-6
        assert max(abs(a - b) for g, w in zip(before_ref, _base_logprobs(base, executor)) for a, b in zip(g, w)) > 1e-4
        with aset.use("executor"):  # the reference pass left the executor's adapter on, and trainable
            assert _base_logprobs(policy.model, executor) == before_ref
        assert all(p.requires_grad for p in aset.parameters("executor"))

        # the KL term and its gradient equal those against a separately loaded base
        twin = PolicyUpdater(
            policy.model, ref_model=base, optim=policy.optim, loss=policy.loss, options=policy.options,
            params=aset.parameters("executor"), model_context=functools.partial(aset.use, "executor"),
        )  # fmt: skip
        grads, metrics = [], []
        for u in (policy, twin):  # the same adapter tensors: the gradients are read and cleared in between
            metrics.append(u.accumulate(executor))
            grads.append([p.grad.clone() for p in u.params])
            u.optimizer.zero_grad(set_to_none=True)
        (shared, loaded), (m_shared, m_loaded) = grads, metrics
        assert m_shared["train/ref_kl"] == pytest.approx(m_loaded["train/ref_kl"], abs=1e-7)
        assert m_shared["train/kl_loss"] == pytest.approx(m_loaded["train/kl_loss"], abs=1e-7)
        assert all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(shared, loaded))


def test_lora_dpo_uses_the_shared_base_as_reference():
    from metaagent.learn.losses import dpo_loss

    with _models(lora=True) as models:
        before = _live_parameters()
        updaters = make_updaters(models, OptimConfig(lr=1e-2, dpo=True, autocast=None))  # fp32: compared with an fp32 reference
        assert _live_parameters() == before and updaters["executor"].ref_model is None
        aset = models.adapters["executor"]
        torch.manual_seed(0)
        with torch.no_grad():  # a trained-looking executor adapter (B != 0)
            for p in aset.parameters("executor"):
                p.add_(torch.randn_like(p) * 0.05)
        pairs = [
            PairSample("executor", [1, 2, 3], [4, 5], [6, 7, 8], weight=2.0, agent="Solver"),
            PairSample("executor", [9, 3], [2], [5, 5], agent="Solver"),
        ]
        m = updaters["executor"].accumulate_pairs(pairs, beta=0.2)

        base, _ = load_model_and_tokenizer("tiny", dtype="float32")
        chosen, rejected = (collate(list(side)) for side in zip(*(p.sides() for p in pairs)))
        with torch.no_grad(), aset.use("executor"):
            lp_c, lp_r = (response_logprobs(aset.model, d)[0].sum(-1) for d in (chosen, rejected))
            ref_c, ref_r = (response_logprobs(base, d)[0].sum(-1) for d in (chosen, rejected))
        want, _ = dpo_loss(lp_c, lp_r, ref_c, ref_r, beta=0.2, weights=torch.tensor([2.0, 1.0]))
        assert m["train/dpo_loss"] == pytest.approx(float(want), abs=1e-6)
        # and not the loss against the adapted policy itself (log 2 at zero margin): the reference is the base
        assert abs(m["train/dpo_loss"] - 0.6931472) > 1e-4
        assert updaters["executor"].step()["train/skipped_step"] == 0.0


def test_a_token_stage_reference_is_shared_too_and_a_reference_is_given_once():
    with _models(lora=True) as models:
        updaters = make_updaters(models, OptimConfig(), need_ref=True)  # MAPPA's KL in the reward, kl_coef = 0
        assert all(u.ref_model is None and u.has_reference for u in updaters.values())
    model = load_model_and_tokenizer("tiny", dtype="float32")[0]
    with pytest.raises(UpdateError, match="not both"):
        PolicyUpdater(model, ref_model=model, ref_context=contextlib.nullcontext)
