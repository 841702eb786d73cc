"""verl's actor loss on the adapter's batches equals the local trainer's loss, and so do the gradients.

Both sides use a tiny random Llama on CPU and the same rollout records:

- local: ``PolicyUpdater.accumulate`` (metaagent's collate layout, chunked log-probs, micro-batches,
  ``metaagent.learn.losses.policy_loss``);
- verl: ``build_update_batch`` -> ``update_tensordict`` (what ``update_actor`` receives) -> verl's DP dispatch
  split (``chunk_tensordict``) -> verl's dynamic micro-batching (``rearrange_micro_batches``) -> log-probs
  computed like verl's FSDP engine without remove-padding (nested -> padded forward -> next-token
  log-probs, per-row temperature) -> verl's ``ppo_loss`` per micro-batch. FSDP averages gradients over the
  DP ranks, so the step's loss is the mean over ranks of the summed micro-batch losses.
"""

from __future__ import annotations

import pytest
import torch
from builders import PAD, mixed_trees, samples_of, tiny_llama

from metaagent.learn.logprobs import response_logprobs
from metaagent.learn.losses import GlobalBatch, LossConfig, policy_loss, verl_actor_config
from metaagent.learn.samples import collate
from metaagent.train.local.update import PolicyUpdater
from metaagent.train.verl_backend.batch import build_update_batch, update_tensordict


def engine_log_probs(model, mb):
    """``model_output["log_probs"]`` as verl's FSDP engine builds it (use_remove_padding=False path)."""
    from verl.workers.utils.padding import build_attention_mask_from_nested

    ids, pos = mb["input_ids"], mb["position_ids"]
    lens = ids.offsets().diff()  # (b,)
    b, width = len(lens), int(lens.max())
    input_ids = torch.nested.to_padded_tensor(ids, padding=PAD, output_size=(b, width))  # (b, L)
    position_ids = torch.nested.to_padded_tensor(pos, padding=0, output_size=(b, width))  # (b, L)
    attention_mask = build_attention_mask_from_nested(ids, width)  # (b, L)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).logits
    temperature = mb["temperature"]
    if not isinstance(temperature, torch.Tensor):
        temperature = torch.full((b,), float(temperature))
    logp = torch.log_softmax(logits.float() / temperature.float()[:, None, None], dim=-1)  # (b, L, V)
    labels = torch.roll(input_ids, shifts=-1, dims=1)  # (b, L): position t predicts token t+1
    token_logp = logp.gather(-1, labels[..., None]).squeeze(-1)  # (b, L)
    return torch.nested.as_nested_tensor([token_logp[i, : lens[i]] for i in range(b)], layout=torch.jagged)


def verl_step_loss(model, samples, *, dp_size, loss_config, max_token_len=64):
    """The loss one verl update step minimises on ``samples`` (module docstring), differentiable."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.seqlen_balancing import rearrange_micro_batches
    from verl.workers.utils.losses import ppo_loss

    batch = build_update_batch(samples, dp_size=dp_size, pad_id=PAD, loss_agg_mode=loss_config.loss_agg_mode)
    td = update_tensordict(batch)
    global_tokens = int(td["loss_mask"].sum())
    actor_config = verl_actor_config(loss_config, GlobalBatch(global_tokens, batch.real_rows))
    total = 0.0
    for rank_td in tu.chunk_tensordict(td, dp_size):
        tu.assign_non_tensor(rank_td, dp_size=dp_size, batch_num_tokens=global_tokens)
        micro_batches, _ = rearrange_micro_batches(rank_td, max_token_len=max_token_len)
        for mb in micro_batches:
            loss, _ = ppo_loss(actor_config, {"log_probs": engine_log_probs(model, mb)}, mb)
            total = total + loss
    return total / dp_size, batch


def local_step_loss(model, samples, loss_config, micro_batch_tokens=64):
    updater = PolicyUpdater(
        model,
        micro_batch_tokens=micro_batch_tokens,
        loss_agg_mode=loss_config.loss_agg_mode,
        compute_entropy=False,
        pad_id=PAD,
    )
    metrics = updater.accumulate(samples)
    return metrics["train/loss"], updater


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "loss_agg_mode, dp_size",
    [("token-mean", 1), ("token-mean", 3), ("seq-mean-token-mean", 3), ("seq-mean-token-sum", 2)],
)
def test_verl_loss_and_gradients_equal_the_local_trainers(loss_agg_mode, dp_size):
    samples = samples_of(mixed_trees())  # designer and executor samples, temperatures 0.7 and 1.0
    assert {s.role for s in samples} == {"designer", "executor"}
    cfg = LossConfig(loss_agg_mode=loss_agg_mode)

    local_model = tiny_llama(seed=0)
    local_loss, _ = local_step_loss(local_model, samples, cfg)

    verl_model = tiny_llama(seed=0)
    loss, batch = verl_step_loss(verl_model, samples, dp_size=dp_size, loss_config=cfg)
    assert batch.pad_rows == (-len(samples)) % dp_size
    assert loss.item() == pytest.approx(local_loss, abs=1e-6)

    loss.backward()
    g_local, g_verl = grads(local_model), grads(verl_model)
    assert g_local.keys() == g_verl.keys() and g_local
    for name in g_local:
        torch.testing.assert_close(g_verl[name], g_local[name], atol=1e-6, rtol=1e-4, msg=name)


def test_loss_matches_policy_loss_on_metaagents_collate_layout():
    """The single-micro-batch form: metaagent's right-padded collate vs verl's left/right-padded layout."""
    samples = samples_of(mixed_trees(), roles=("executor",))
    cfg = LossConfig()
    model = tiny_llama(seed=1)
    data = collate(samples, PAD)
    logp, _ = response_logprobs(model, data)
    n_tokens = sum(len(s.response_ids) for s in samples)
    expected, _ = policy_loss(
        logp,
        data["old_log_probs"],
        data["advantages"],
        data["response_mask"],
        config=cfg,
        batch=GlobalBatch(n_tokens, len(samples)),
    )
    got, _ = verl_step_loss(model, samples, dp_size=1, loss_config=cfg, max_token_len=10_000)
    assert got.item() == pytest.approx(expected.item(), abs=1e-6)


def test_padding_rows_and_balance_do_not_change_the_loss():
    samples = samples_of(mixed_trees())[:7]
    cfg = LossConfig()
    model = tiny_llama(seed=2)
    losses = [(verl_step_loss(model, samples, dp_size=dp, loss_config=cfg)[0]).item() for dp in (1, 2, 8)]
    assert max(losses) - min(losses) < 1e-6
