"""Training samples -> verl ``DataProto`` for ``update_actor``: layout, masks, advantages, DP padding, balance.

Pure CPU code between generation and the update; :mod:`metaagent.learn.samples` already turned the records
into :class:`~metaagent.learn.samples.Sample` objects of the active role only (the inactive role's samples
are never built, so they are not in the batch at all). This module lays them out as verl's actor expects::

    prompts        (B, P)     left-padded with pad_id        (P = longest prompt of the batch)
    responses      (B, R)     right-padded with pad_id       (R = longest response)
    input_ids      (B, P+R)   prompts ++ responses
    attention_mask (B, P+R)   1 on real prompt and response tokens
    position_ids   (B, P+R)   clip(cumsum(attention_mask) - 1, 0)   (verl's compute_position_id_with_mask)
    response_mask  (B, R)     1 on response tokens that enter the loss
    old_log_probs  (B, R)     pi_old of Eq. 3: the rollout log-probs (0 on padding)
    advantages     (B, R)     the sample's advantage on every response token, or on the last one only; a sample
                              with per-token advantages (a token stage: MAPPA, UnityMAS-O GAE) carries them as is
    returns        (B, R)     = advantages (verl's field; unused by the actor loss), or, when every sample has
                              them, the value targets R_t of Sample.returns (GAE: A_t + V_t before whitening)
    values         (B, R)     when every sample has them: V_t of Sample.values, the critic's values before the update
                              (V_old of verl's clipped value loss)
    temperature    (B,)       sampling temperature of each row (designer and executor may differ)
    rollout_log_probs, rollout_is_weights  (B, R)   added before the update when the actor recomputes pi_old
                              (verl.old_log_prob=recompute; optim.tis_cap: add_rollout_correction)
    non-tensor: uid (question), mas_role, mas_key, is_padding

Data parallelism: verl's dispatch hands rank k the k-th contiguous B/dp slice, so B must be a multiple of
``dp_size`` and every rank needs at least one row. Missing rows are **zero-weight copies** of the shortest
real sample (``response_mask`` 0, advantage 0): they run through the model but add nothing to the loss, the
gradient or the token count (verl normalises by the summed ``response_mask``; the sequence count we pass as
``global_batch_size`` is the real one). Rows are then partitioned into dp groups of equal size with balanced
token counts (verl's Karmarkar-Karp ``get_seqlen_balanced_partitions``) and ordered rank by rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from metaagent.learn.losses import role_advantage_scales
from metaagent.learn.samples import Sample
from metaagent.train.backend_sections import ADVANTAGE_PLACEMENTS

from .errors import VerlBackendError


@dataclass
class UpdateBatch:
    """A DataProto ready for ``update_actor`` and what was done to build it."""

    data: object  # verl.DataProto
    dp_size: int
    real_rows: int
    pad_rows: int
    response_tokens: int  # real response tokens: the loss normaliser of token-mean
    rank_tokens: list[int]  # forwarded tokens (prompt + response) per data-parallel rank
    metrics: dict[str, float] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # per row: the index of its sample in the input, -1 for padding


def _check(samples: Sequence[Sample], dp_size: int, advantage_placement: str) -> None:
    if not samples:
        raise VerlBackendError(
            "no samples to train on: skip update_actor for this model instead of sending an empty batch"
        )
    if isinstance(dp_size, bool) or not isinstance(dp_size, int) or dp_size < 1:
        raise VerlBackendError(
            f"dp_size must be a positive integer (data-parallel ranks of the actor), got {dp_size!r}"
        )
    if advantage_placement not in ADVANTAGE_PLACEMENTS:
        raise VerlBackendError(
            f"advantage_placement must be one of {ADVANTAGE_PLACEMENTS}, got {advantage_placement!r}"
        )
    for i, s in enumerate(samples):
        if not isinstance(s, Sample):
            raise VerlBackendError(
                f"samples[{i}] is {type(s).__name__}, expected a Sample (see build_samples)"
            )
        if not s.prompt_ids or not s.response_ids or len(s.old_logprobs) != len(s.response_ids):
            raise VerlBackendError(
                f"samples[{i}] (key {s.key}) has {len(s.prompt_ids)} prompt tokens, {len(s.response_ids)} response "
                f"tokens and {len(s.old_logprobs)} log-probs; build samples with build_samples"
            )
        if not np.isfinite(s.advantage) or not all(np.isfinite(s.old_logprobs)):
            raise VerlBackendError(f"samples[{i}] (key {s.key}) has a non-finite advantage or log-prob")
        for name in ("token_advantages", "values", "returns"):
            per_token = getattr(s, name)
            if per_token is not None and (len(per_token) != len(s.response_ids) or not all(np.isfinite(per_token))):
                raise VerlBackendError(
                    f"samples[{i}] (key {s.key}) has {len(per_token)} {name} for {len(s.response_ids)} response "
                    "tokens, or a non-finite one"
                )
        if not s.temperature > 0:
            raise VerlBackendError(
                f"samples[{i}] (key {s.key}) has temperature {s.temperature}; greedy samples carry 1.0"
            )


def balanced_order(seq_lens: Sequence[int], dp_size: int) -> tuple[list[int], list[int]]:
    """Row order (rank 0's rows first) and tokens per rank, balancing ``seq_lens`` over ``dp_size`` equal groups."""
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

    if len(seq_lens) % dp_size:
        raise VerlBackendError(f"{len(seq_lens)} rows cannot be split evenly over {dp_size} ranks; pad first")
    partitions = get_seqlen_balanced_partitions(list(seq_lens), k_partitions=dp_size, equal_size=True)
    order = [i for part in partitions for i in part]
    return order, [sum(seq_lens[i] for i in part) for part in partitions]


def padded_size(n: int, dp_size: int) -> int:
    """Smallest multiple of ``dp_size`` that is >= max(n, dp_size)."""
    return max(dp_size, -(-n // dp_size) * dp_size)


def build_update_batch(
    samples: Sequence[Sample],
    *,
    dp_size: int,
    pad_id: int,
    advantage_placement: str = "all_tokens",
    balance: bool = True,
    loss_agg_mode: str | None = None,
):
    """The verl batch of one physical model's update (module docstring). Returns an :class:`UpdateBatch`.

    With ``loss_agg_mode`` and samples of both roles (``coupled``), each role's advantages are scaled so
    verl's one aggregation equals ``L_D + L_E`` as the local trainer computes it
    (:func:`metaagent.learn.losses.role_advantage_scales`)."""
    from verl import DataProto

    _check(samples, dp_size, advantage_placement)
    real = list(samples)
    rows, source, rank_tokens = _dp_rows(real, dp_size, balance)
    # a critic batch: every sample has the critic's values and targets (the GAE token stage's executor samples)
    critic = all(s.values is not None and s.returns is not None for s in real)
    tensors = _layout(rows, pad_id, advantage_placement, _role_scales(real, loss_agg_mode), critic)
    non_tensors = {
        "uid": np.array([f"{s.key[0] if s.key else 0}:{s.task_id}" for s, _ in rows], dtype=object),
        "mas_role": np.array([s.role for s, _ in rows], dtype=object),
        "mas_key": np.array([",".join(map(str, s.key)) for s, _ in rows], dtype=object),
        "is_padding": np.array([is_pad for _, is_pad in rows], dtype=bool),
    }
    data = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
    b, n_pad = len(rows), len(rows) - len(real)
    response_tokens = int(tensors["response_mask"].sum())
    metrics = {
        "verl/rows": float(b),
        "verl/pad_rows": float(n_pad),
        "verl/response_tokens": float(response_tokens),
        "verl/padded_tokens": float(tensors["input_ids"].numel()),
        "verl/rank_tokens_max": float(max(rank_tokens)),
        "verl/rank_tokens_min": float(min(rank_tokens)),
    }
    return UpdateBatch(data, dp_size, len(real), n_pad, response_tokens, rank_tokens, metrics, source)


def _role_scales(real: Sequence[Sample], loss_agg_mode: str | None) -> dict[str, float]:
    """Each role's advantage scale (:func:`metaagent.learn.losses.role_advantage_scales`; 1.0 without a mode)."""
    sizes: dict[str, tuple[int, int]] = {}
    for s in real:
        n, t = sizes.get(s.role, (0, 0))
        sizes[s.role] = (n + 1, t + len(s.response_ids))
    return role_advantage_scales(sizes, loss_agg_mode) if loss_agg_mode else {r: 1.0 for r in sizes}


def _dp_rows(
    real: list[Sample], dp_size: int, balance: bool
) -> tuple[list[tuple[Sample, bool]], list[int], list[int]]:
    """The rows ordered rank by rank, as (sample, is_padding): the real samples plus zero-weight copies of the
    cheapest one up to a multiple of ``dp_size``. Also each row's index in ``real`` (-1: padding) and each
    rank's token count."""
    n_pad = padded_size(len(real), dp_size) - len(real)
    filler = min(real, key=lambda s: (s.num_tokens, s.key))  # cheapest row to forward
    rows: list[tuple[Sample, bool]] = [(s, False) for s in real] + [(filler, True)] * n_pad
    seq_lens = [s.num_tokens for s, _ in rows]
    if balance:
        order, rank_tokens = balanced_order(seq_lens, dp_size)
    else:
        order = list(range(len(rows)))
        per = len(rows) // dp_size
        rank_tokens = [sum(seq_lens[r * per : (r + 1) * per]) for r in range(dp_size)]
    source = [i if i < len(real) else -1 for i in order]
    return [rows[i] for i in order], source, rank_tokens


def _layout(
    rows: list[tuple[Sample, bool]],
    pad_id: int,
    advantage_placement: str,
    scale: dict[str, float],
    critic: bool,
) -> dict[str, torch.Tensor]:
    """The tensors of the module docstring's layout; padding rows are forwarded but masked out of the loss."""
    b = len(rows)
    p = max(len(s.prompt_ids) for s, _ in rows)
    r = max(len(s.response_ids) for s, _ in rows)
    prompts = torch.full((b, p), pad_id, dtype=torch.long)  # (B, P)
    responses = torch.full((b, r), pad_id, dtype=torch.long)  # (B, R)
    prompt_mask = torch.zeros((b, p), dtype=torch.long)  # (B, P)
    resp_attn = torch.zeros((b, r), dtype=torch.long)  # (B, R)
    response_mask = torch.zeros((b, r), dtype=torch.long)  # (B, R)
    old_log_probs = torch.zeros((b, r), dtype=torch.float32)  # (B, R)
    advantages = torch.zeros((b, r), dtype=torch.float32)  # (B, R)
    values = torch.zeros((b, r), dtype=torch.float32)  # (B, R)  critic batches only
    returns = torch.zeros((b, r), dtype=torch.float32)  # (B, R)  critic batches only
    temperature = torch.tensor([s.temperature for s, _ in rows], dtype=torch.float32)  # (B,)
    for row, (s, is_pad) in enumerate(rows):
        lp, lr = len(s.prompt_ids), len(s.response_ids)
        prompts[row, p - lp :] = torch.tensor(s.prompt_ids, dtype=torch.long)
        prompt_mask[row, p - lp :] = 1
        responses[row, :lr] = torch.tensor(s.response_ids, dtype=torch.long)
        resp_attn[row, :lr] = 1
        if is_pad:
            continue
        response_mask[row, :lr] = 1
        old_log_probs[row, :lr] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        if critic:
            values[row, :lr] = torch.tensor(s.values, dtype=torch.float32)
            returns[row, :lr] = torch.tensor(s.returns, dtype=torch.float32)
        if s.token_advantages is not None:  # a token stage's per-token advantages (placement does not apply)
            advantages[row, :lr] = torch.tensor(s.token_advantages, dtype=torch.float32) * scale[s.role]
        elif advantage_placement == "all_tokens":
            advantages[row, :lr] = s.advantage * scale[s.role]
        else:
            advantages[row, lr - 1] = s.advantage * scale[s.role]
    attention_mask = torch.cat([prompt_mask, resp_attn], dim=1)  # (B, P+R)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),  # (B, P+R)
        "attention_mask": attention_mask,
        "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),  # (B, P+R)
        "response_mask": response_mask,
        "old_log_probs": old_log_probs,
        "advantages": advantages,
        "returns": returns if critic else advantages.clone(),
        "temperature": temperature,
    }
    if critic:
        tensors["values"] = values
    return tensors


def update_tensordict(batch: UpdateBatch, *, calculate_entropy: bool = False, seed: int = 0):
    """What verl's trainer sends to ``update_actor``: no-padding TensorDict plus the update's meta fields.

    Mirrors ``RayPPOTrainer._update_actor`` of verl 0.9.1 with one mini-batch of the whole batch (one
    optimizer step per training step, as the local backend) and ``global_batch_size`` = the real rows.
    A batch whose rows share one temperature passes it as verl's scalar ``temperature``; otherwise the
    per-row tensor stays (verl's FSDP engine supports per-sample temperature).
    """
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = _scalar_temperature(left_right_2_no_padding(batch.data.to_tensordict()))
    tu.assign_non_tensor(
        td,
        calculate_entropy=calculate_entropy,
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=batch.real_rows,
        mini_batch_size=len(batch.data),
        epochs=1,
        seed=seed,
        dataloader_kwargs={"shuffle": False},
        compute_loss=True,
    )
    return td


def critic_tensordict(batch: UpdateBatch, *, seed: int = 0):
    """What verl's trainer sends to the critic's ``train_mini_batch`` (``RayPPOTrainer._update_critic`` of verl
    0.9.1), with one mini-batch of the whole batch and ``global_batch_size`` = the real rows, as for the actor."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    if "values" not in batch.data.batch:
        raise VerlBackendError("the critic's batch has no values/returns: build it from samples of the GAE token stage")
    td = _scalar_temperature(left_right_2_no_padding(batch.data.to_tensordict()))
    tu.assign_non_tensor(
        td,
        global_batch_size=batch.real_rows,
        mini_batch_size=len(batch.data),
        epochs=1,
        seed=seed,
        dataloader_kwargs={"shuffle": False},
    )
    return td


def logprob_tensordict(batch: UpdateBatch):
    """What verl's trainer sends to ``compute_log_prob`` / ``compute_ref_log_prob`` for this batch."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = _scalar_temperature(left_right_2_no_padding(batch.data.to_tensordict()))
    tu.assign_non_tensor(td, calculate_entropy=False, compute_loss=False)
    return td


def _scalar_temperature(td):
    """One shared temperature becomes verl's scalar meta field (its common path); mixed ones stay per row."""
    from verl.utils import tensordict_utils as tu

    temps = td["temperature"]  # (B,)
    if bool((temps == temps[0]).all()):
        del td["temperature"]
        tu.assign_non_tensor(td, temperature=float(temps[0]))
    return td


def add_rollout_correction(batch: UpdateBatch, rollout_correction: Any) -> dict[str, float]:
    """verl's rollout-training mismatch correction on the batch, as verl's trainer applies it in decoupled mode.

    Needs ``old_log_probs`` recomputed by the actor and the rollout engine's ``rollout_log_probs``
    (:meth:`~.workers.ModelGroup.recompute_old_log_probs`). verl's ``compute_rollout_correction_and_add_to_batch``
    reads ``rollout_correction`` (the composed config's ``algorithm.rollout_correction``: ``rollout_is``,
    ``rollout_is_threshold``, ``rollout_rs``, ...) and adds ``rollout_is_weights`` (B, R)::

        token:     w_t = min(exp(old_log_probs_t - rollout_log_probs_t), rollout_is_threshold)
        sequence:  w_t = min(exp(sum_t' (old_log_probs_t' - rollout_log_probs_t')), rollout_is_threshold)

    which verl's actor loss (``ppo_loss`` -> the registered policy loss) multiplies into each token's
    policy-gradient term; a ``rollout_rs`` rejection rule zeroes ``response_mask`` where it rejects. It runs on
    the real rows only: the zero-weight DP padding rows keep weight 0 and do not dilute the per-response
    metrics. Returns verl's metrics, ``rollout_corr/*`` (IS weight statistics, KL, k3-KL, perplexities, chi^2).
    """
    data = batch.data
    if "rollout_log_probs" not in data.batch:
        raise VerlBackendError(
            "rollout correction compares the actor's recomputed pi_old with the rollout's log-probs: recompute "
            "old_log_probs first (verl.old_log_prob=recompute)"
        )
    if rollout_correction.get("bypass_mode", False):
        raise VerlBackendError(
            "algorithm.rollout_correction.bypass_mode=true is verl's pi_old = rollout log-probs mode; metaagent's "
            "equivalent is verl.old_log_prob=rollout (without optim.tis_cap)"
        )
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    real = torch.from_numpy(~np.asarray(data.non_tensor_batch["is_padding"], dtype=bool))
    sub, metrics = compute_rollout_correction_and_add_to_batch(data.select_idxs(real), rollout_correction)
    data.batch["response_mask"][real] = sub.batch["response_mask"].to(data.batch["response_mask"].dtype)
    if "rollout_is_weights" in sub.batch:
        weights = torch.zeros_like(data.batch["old_log_probs"])  # (B, R), 0 on padding rows
        weights[real] = sub.batch["rollout_is_weights"].to(weights.dtype)
        data.batch["rollout_is_weights"] = weights
    return {k: float(v) for k, v in metrics.items()}
