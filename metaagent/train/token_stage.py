"""The token stage: per-token advantages of estimators that finish their credit in the trainer (MAPPA).

An estimator that registered a token stage (:func:`metaagent.credit.register_token_stage`) leaves each
executor turn's *action reward* in the sample's scalar ``advantage``. After the samples are built this step

1. drops samples cut by ``max_response_len`` when the stage says so (MAPPA masks truncated completions;
   counted);
2. when the stage needs them (``needs_ref(options)``, e.g. MAPPA's beta > 0), gets ``log pi_ref`` of every
   response token of the whole batch from the backend's reference pre-pass
   (:meth:`metaagent.train.local.update.PolicyUpdater.ref_logprobs`), before any loss is computed; likewise the
   critic's values ``V_t`` (``needs_values(options)``: UnityMAS-O's GAE, :mod:`metaagent.train.local.critic`);
3. calls the stage on all executor samples at once (the batch-wide normalisation needs them all) and stores
   the result in ``Sample.token_advantages`` (and, for a critic, ``Sample.values`` / ``Sample.returns``).

Designer samples keep their scalar advantage (MAPPA: hierarchical Eq. 4-5 on outcome rewards).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from metaagent.credit import TokenCredit, TokenStage
from metaagent.credit.mappa import Action
from metaagent.learn.samples import Sample, SampleError, SampleSet
from metaagent.records import EXECUTOR

RefLogprobs = Callable[[Sequence[Sample]], list[list[float]]]
Values = Callable[[Sequence[Sample]], list[list[float]]]


def apply_token_stage(
    samples: SampleSet,
    stage: TokenStage,
    options: Mapping[str, Any],
    *,
    ref_logprobs: RefLogprobs | None,
    group_of: Callable[[Sample], str],
    values: Values | None = None,
) -> SampleSet:
    """``samples`` with per-token advantages on every executor sample (truncated ones dropped).

    Args:
        stage: the estimator's token stage.
        options: the estimator's options (``algo`` fields and ``algo.options``).
        ref_logprobs: the backend's reference pre-pass, ``samples -> [log pi_ref per response token]``.
        group_of: the physical model of a sample (``norm_scope="model"`` normalises per model).
        values: the backend's critic pre-pass, ``samples -> [V_t per response token]`` (stages with a critic).

    Adds ``samples/token_stage_actions``, ``samples/token_stage_truncated`` and, with reference log-probs,
    ``credit/ref_kl_mean`` (mean ``log pi_old - log pi_ref`` over action tokens) to ``.metrics``.
    """
    metrics = dict(samples.metrics)
    kept = [s for s in samples if not (stage.drop_truncated and s.role == EXECUTOR and s.truncated)]
    metrics["samples/token_stage_truncated"] = float(len(samples) - len(kept))
    actions = [s for s in kept if s.role == EXECUTOR]
    metrics["samples/token_stage_actions"] = float(len(actions))
    if actions:
        ref: list[list[float]] | list[None] = [None] * len(actions)
        if stage.needs_ref(dict(options)):
            if ref_logprobs is None:
                raise SampleError(f"the token stage of {stage.name!r} needs reference log-probs; the backend has none")
            ref = ref_logprobs(actions)
            kl = np.concatenate([np.asarray(s.old_logprobs) - np.asarray(r) for s, r in zip(actions, ref)])
            metrics["credit/ref_kl_mean"] = float(kl.mean())
        vals: list[list[float]] | list[None] = [None] * len(actions)
        if stage.needs_values(dict(options)):
            if values is None:
                raise SampleError(f"the token stage of {stage.name!r} needs critic values; the backend has no critic")
            vals = values(actions)
            every_v = np.concatenate([np.asarray(v) for v in vals])
            metrics["credit/values_mean"] = float(every_v.mean())
        batch = [
            Action(
                reward=s.advantage,
                old_logprobs=s.old_logprobs,
                ref_logprobs=r,
                episode=(*s.key[:3], s.agent),
                order=s.key[3] if len(s.key) > 3 else 0,
                group=group_of(s),
                values=v,
            )
            for s, r, v in zip(actions, ref, vals)
        ]
        out = stage(batch, **dict(options))
        advantages = out.advantages if isinstance(out, TokenCredit) else out
        for s, adv in zip(actions, advantages):
            s.token_advantages = [float(x) for x in adv]
        if isinstance(out, TokenCredit) and out.returns is not None:
            for s, v, ret in zip(actions, vals, out.returns):
                s.values, s.returns = list(v), [float(x) for x in ret]
            every_r = np.concatenate([np.asarray(s.returns) for s in actions])
            metrics["credit/returns_mean"] = float(every_r.mean())
        every = np.concatenate([np.asarray(s.token_advantages) for s in actions])
        metrics["credit/token_adv_mean"] = float(every.mean())
        metrics["credit/token_adv_std"] = float(every.std())
    return SampleSet(kept, metrics)
