"""Training samples from rollout records, token-budget micro-batches, and collation to tensors.

A :class:`Sample` is one generation to train on: a designer generation (``Design.sample``) with the
design's advantage, or one agent turn of an execution with the execution's advantage (Eq. 7: every turn
of an execution shares it) unless the credit estimator gave the turn its own.

Truncation rule (``max_prompt_len`` / ``max_response_len``):

- a response longer than ``max_response_len`` keeps its first ``max_response_len`` tokens. This is exact:
  under a causal LM the kept tokens' log-probs do not depend on the dropped ones, so the ratio against
  the rollout log-probs is still a ratio of the same quantities;
- a prompt is never cut: removing context changes ``pi_theta(o | c)`` itself, so the ratio would no longer
  measure a policy change. A sample whose prompt is longer than ``max_prompt_len`` is dropped and counted
  (``samples/dropped_long_prompt``).

Padding is on the right (prompt + response, then ``pad_id``), with ``position_ids = 0..L-1`` per row:
causal attention never lets a real token see the padding after it, so no position shift is needed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from metaagent.errors import MetaAgentError
from metaagent.policy.registry import resolve_role
from metaagent.records import (
    DESIGNER,
    EXECUTOR,
    ROLES,
    AgentTurn,
    Design,
    DesignerSample,
    Execution,
    RolloutTree,
)


class SampleError(MetaAgentError, ValueError):
    """Records cannot be turned into training samples; the message names the record and the fix."""


def active_role_set(active_roles: Iterable[str], error: type[Exception] = SampleError) -> frozenset[str]:
    """The Eq. 9 mask as a set: the roles whose samples enter the loss. Samples of the other roles are never
    built (:func:`build_samples`) nor forwarded (:class:`metaagent.train.local.update.PolicyUpdater`), so they
    contribute exactly zero gradient. Raises ``error`` for a name that is not a role."""
    active = frozenset(active_roles)
    unknown = active - set(ROLES)
    if unknown:
        raise error(f"unknown role(s) {sorted(unknown)} in active_roles; roles are {ROLES}")
    return active


@dataclass
class Sample:
    """One generation to train on. ``key`` locates it: (tree, design), (tree, design, execution, turn) or,
    for a candidate of a candidate group, (tree, design, execution, turn, candidate)."""

    role: str  # "designer" | "executor": which stage trains it
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]  # rollout log-probs of response_ids (pi_old, at `temperature`)
    advantage: float
    temperature: float  # the sampling temperature; greedy samples carry 1.0 (log-probs of softmax(logits))
    agent: str = ""  # executor: the agent's role name in the script; designer: ""
    key: tuple[int, ...] = ()
    task_id: str = ""
    truncated: bool = False  # cut by max_response_len (the trainer's limit)
    # the generation ended at a length limit: the rollout's max_tokens (finish_reason "length") or the cut above
    overlong: bool = False
    token_advantages: list[float] | None = None  # per response token; overrides ``advantage`` in the loss
    values: list[float] | None = None  # critic values V_t of the response tokens (GAE token stages; pre-update)
    returns: list[float] | None = None  # the critic's value targets R_t = A_t + V_t (before whitening)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def route_name(self) -> str:
        """``designer`` or ``executor:<agent>``: the name role-to-model patterns are matched against."""
        return self.role if self.role == DESIGNER else f"{self.role}:{self.agent}"


@dataclass
class PairSample:
    """A preference pair to train with the DPO loss: one context, a chosen and a rejected response."""

    role: str
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    weight: float = 1.0
    temperature: float = 1.0
    agent: str = ""
    key: tuple[int, ...] = ()

    @property
    def route_name(self) -> str:
        return self.role if self.role == DESIGNER else f"{self.role}:{self.agent}"

    def sides(self) -> tuple[Sample, Sample]:
        """The chosen and the rejected side as :class:`Sample` rows (for log-prob passes; no advantage)."""

        def side(ids: list[int]) -> Sample:
            return Sample(self.role, self.prompt_ids, ids, [0.0] * len(ids), 0.0, self.temperature, self.agent, self.key)

        return side(self.chosen_ids), side(self.rejected_ids)


class SampleSet(list):
    """A list of :class:`Sample` with the ``samples/*`` counts of how it was built."""

    def __init__(self, items: Iterable[Sample] = (), metrics: Mapping[str, float] | None = None) -> None:
        super().__init__(items)
        self.metrics: dict[str, float] = dict(metrics or {})


def _temperature(temperatures: Mapping[str, float], role: str) -> float:
    if role not in temperatures:
        raise SampleError(
            f"no sampling temperature for role {role!r}; pass temperatures={{'designer': T_D, 'executor': T_E}} "
            "with the temperatures the rollout sampled at"
        )
    t = float(temperatures[role])
    if not t >= 0:
        raise SampleError(f"temperatures[{role!r}] must be >= 0, got {t}")
    return 1.0 if t == 0 else t  # greedy: the backend reports log-probs of softmax(logits)


def _record_temperature(recorded: float | None, fallback: float) -> float:
    """The temperature a record says it was sampled at (greedy -> 1.0), else the caller's per-role value."""
    if recorded is None:
        return fallback
    return 1.0 if recorded == 0 else float(recorded)


def _make(
    where: str,
    role: str,
    agent: str,
    key: tuple[int, ...],
    task_id: str,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    logprobs: Sequence[float] | None,
    advantage: float,
    temperature: float,
    max_prompt_len: int | None,
    max_response_len: int | None,
    counts: Counter[str],
    finish_reason: str = "",
) -> Sample | None:
    if logprobs is None:
        raise SampleError(
            f"{where} has no log-probs; RL training needs the rollout log-probs (use a backend that returns "
            "them: 'hf', 'vllm', or an OpenAI-compatible server with logprobs and token ids)"
        )
    if len(logprobs) != len(response_ids):
        raise SampleError(f"{where} has {len(response_ids)} response tokens but {len(logprobs)} log-probs")
    if not prompt_ids:
        raise SampleError(
            f"{where} has an empty prompt; the first response token needs a context to predict it"
        )
    if not response_ids:
        counts["samples/empty_response"] += 1
        return None
    if max_prompt_len is not None and len(prompt_ids) > max_prompt_len:
        counts["samples/dropped_long_prompt"] += 1
        return None
    truncated = max_response_len is not None and len(response_ids) > max_response_len
    if truncated:
        counts["samples/truncated_response"] += 1
        response_ids, logprobs = response_ids[:max_response_len], logprobs[:max_response_len]
    overlong = truncated or finish_reason == "length"
    counts[f"samples/overlong/{role}"] += int(overlong)
    counts[f"samples/{role}"] += 1
    counts[f"samples/tokens/{role}"] += len(response_ids)
    return Sample(
        role=role,
        prompt_ids=list(prompt_ids),
        response_ids=list(response_ids),
        old_logprobs=[float(x) for x in logprobs],
        advantage=float(advantage),
        temperature=temperature,
        agent=agent,
        key=key,
        task_id=task_id,
        truncated=truncated,
        overlong=overlong,
    )


def build_samples(
    trees: Sequence[RolloutTree],
    *,
    active_roles: Iterable[str],
    temperatures: Mapping[str, float],
    turn_advantages: Mapping[tuple[int, int, int, int], float] | None = None,
    max_prompt_len: int | None = None,
    max_response_len: int | None = None,
) -> SampleSet:
    """Samples of the active roles, after :func:`metaagent.credit.assign_credit` filled the advantages.

    Args:
        trees: the rollout trees of the step.
        active_roles: roles whose samples enter the loss (``StageSchedule.active_roles(step)``); samples of
            inactive roles are not built at all (so never forwarded) and are counted.
        temperatures: sampling temperature per role ("designer", "executor"), as in the rollout config; used
            for records that do not carry their own ``temperature`` (records written by metaagent do, and
            theirs wins, so evaluation passes at other temperatures stay correct).
        turn_advantages: per-turn advantages keyed (tree, design, execution, turn); they replace the
            execution's advantage for those turns. By default each turn's own ``AgentTurn.advantage`` (written
            by :func:`metaagent.credit.assign_credit`) does that.
        max_prompt_len, max_response_len: the truncation rule of the module docstring.

    Counts in ``.metrics``: ``samples/<role>``, ``samples/tokens/<role>``, ``samples/inactive/<role>``,
    ``samples/no_advantage/<role>``, ``samples/frozen_designs``, ``samples/empty_response``,
    ``samples/truncated_response``, ``samples/overlong/<role>`` (ended at a length limit),
    ``samples/dropped_long_prompt``, ``samples/synthetic_turns``,
    ``samples/candidates``.

    Turns marked ``synthetic`` (forced or baseline replies) are never samples. A call with a candidate
    group (tree sampling) gives one sample per candidate (key ``(t, i, j, k, c)``: candidate c of the call
    executed as turn k; the candidate's own advantage) instead of one for its executed turn.
    """
    active = active_role_set(active_roles, SampleError)
    for name, v in (("max_prompt_len", max_prompt_len), ("max_response_len", max_response_len)):
        if v is not None and (not isinstance(v, int) or v < 1):
            raise SampleError(f"{name} must be a positive integer or None, got {v!r}")
    temps = {r: _temperature(temperatures, r) for r in active}
    build = _Builder(temps, dict(turn_advantages or {}), max_prompt_len, max_response_len)
    for t, tree in enumerate(trees):
        for i, d in enumerate(tree.designs):
            where = f"tree {t} (task {tree.task_id}) designs[{i}]"
            build.design(where, (t, i), tree.task_id, d, DESIGNER in active)
            for j, e in enumerate(d.executions):
                if EXECUTOR not in active:
                    if e.turns:
                        build.counts[f"samples/inactive/{EXECUTOR}"] += len(e.turns)
                    continue
                build.turns(f"{where}.executions[{j}]", (t, i, j), tree.task_id, e)
                build.candidates(f"{where}.executions[{j}]", (t, i, j), tree.task_id, e)
    return SampleSet(build.out, {k: float(v) for k, v in sorted(build.counts.items())})


_Generation = DesignerSample | AgentTurn  # a turn group's candidates are AgentTurn records too


class _Builder:
    """The state of one :func:`build_samples` call: the per-role temperatures, the truncation limits, the
    samples built so far (in record order) and the ``samples/*`` counts."""

    def __init__(
        self,
        temps: Mapping[str, float],
        turn_adv: Mapping[tuple[int, int, int, int], float],
        max_prompt_len: int | None,
        max_response_len: int | None,
    ) -> None:
        self.temps, self.turn_adv = temps, turn_adv
        self.max_prompt_len, self.max_response_len = max_prompt_len, max_response_len
        self.counts: Counter[str] = Counter({f"samples/{p}{r}": 0 for r in ROLES for p in ("", "overlong/")})
        self.out: list[Sample] = []

    def add(
        self, where: str, role: str, agent: str, key: tuple[int, ...], task_id: str, gen: _Generation, adv: float
    ) -> bool:
        """One generation record (a designer sample, a turn or a candidate) as a sample; False when dropped."""
        sample = _make(
            where,
            role,
            agent,
            key,
            task_id,
            gen.prompt_ids,
            gen.response_ids,
            gen.logprobs,
            adv,
            _record_temperature(gen.temperature, self.temps[role]),
            self.max_prompt_len,
            self.max_response_len,
            self.counts,
            gen.finish_reason,
        )
        if sample is not None:
            self.out.append(sample)
        return sample is not None

    def design(self, where: str, key: tuple[int, int], task_id: str, d: Design, active: bool) -> None:
        """The designer sample of one design, or the count of why there is none."""
        if not active:
            self.counts[f"samples/inactive/{DESIGNER}"] += int(d.sample is not None)
        elif d.sample is None:
            self.counts["samples/frozen_designs"] += 1
        elif d.advantage is None:
            self.counts[f"samples/no_advantage/{DESIGNER}"] += 1
        else:
            self.add(where, DESIGNER, "", key, task_id, d.sample, d.advantage)

    def turns(self, where: str, key: tuple[int, int, int], task_id: str, e: Execution) -> None:
        """The executor samples of an execution's turns (Eq. 7: the execution's advantage unless the turn, or
        ``turn_advantages``, has its own); a turn whose call has a candidate group trains through it instead."""
        branched = {g.call_index for g in e.groups}
        for k, turn in enumerate(e.turns):
            if turn.synthetic:
                self.counts["samples/synthetic_turns"] += 1
                continue
            if turn.call_index in branched:
                continue  # trained through its candidate group (candidates)
            own = turn.advantage if turn.advantage is not None else e.advantage
            adv = self.turn_adv.get((*key, k), own)
            if adv is None:
                self.counts[f"samples/no_advantage/{EXECUTOR}"] += 1
                continue
            self.add(f"{where}.turns[{k}]", EXECUTOR, turn.role, (*key, k), task_id, turn, adv)

    def candidates(self, where: str, key: tuple[int, int, int], task_id: str, e: Execution) -> None:
        """One executor sample per candidate of each candidate group (key ``(t, i, j, k, c)``), with the
        candidate's own advantage."""
        turn_of_call = {turn.call_index: k for k, turn in enumerate(e.turns)}
        for g, group in enumerate(e.groups):
            k = turn_of_call.get(group.call_index, group.call_index)
            for c, cand in enumerate(group.candidates):
                adv = group.advantages[c] if c < len(group.advantages) else None
                if cand.synthetic or adv is None:
                    self.counts[f"samples/no_advantage/{EXECUTOR}"] += int(not cand.synthetic)
                    continue
                where_c = f"{where}.groups[{g}].candidates[{c}]"
                if self.add(where_c, EXECUTOR, cand.role, (*key, k, c), task_id, cand, adv):
                    self.counts["samples/candidates"] += 1


def mask_overlong(samples: SampleSet, roles: Iterable[str]) -> SampleSet:
    """DAPO's overlong filtering (Yu et al. 2025, §3.4): samples of ``roles`` whose generation ended at a
    length limit (``Sample.overlong``) are masked out of the loss, i.e. left out of the batch, so they add
    neither gradient nor tokens to the loss normaliser (their group's advantages were computed with them, as in
    DAPO). Counted as ``samples/overlong_masked/<role>``."""
    roles = set(roles)
    kept = [s for s in samples if not (s.overlong and s.role in roles)]
    counts = Counter(s.role for s in samples if s.overlong and s.role in roles)
    metrics = dict(samples.metrics)
    for role in ROLES:
        metrics[f"samples/overlong_masked/{role}"] = float(counts.get(role, 0))
    return SampleSet(kept, metrics)


def build_pair_samples(trees: Sequence[RolloutTree], *, active_roles: Iterable[str]) -> list[PairSample]:
    """One :class:`PairSample` per ``Execution.preferences`` entry of an active role (executor pairs: the
    agent is the role of the rejected turn), key ``(tree, design, execution, pair)``."""
    active = active_role_set(active_roles, SampleError)
    out: list[PairSample] = []
    if EXECUTOR not in active:
        return out
    for t, tree in enumerate(trees):
        for i, d in enumerate(tree.designs):
            for j, e in enumerate(d.executions):
                for p, pair in enumerate(e.preferences):
                    agent = e.turns[pair.turn].role if 0 <= pair.turn < len(e.turns) else ""
                    temp = e.turns[pair.turn].temperature if 0 <= pair.turn < len(e.turns) else None
                    out.append(
                        PairSample(EXECUTOR, list(pair.prompt_ids), list(pair.chosen_ids), list(pair.rejected_ids),
                                   pair.weight, _record_temperature(temp, 1.0), agent, (t, i, j, p))
                    )  # fmt: skip
    return out


RoleToModel = Mapping[str, str] | Callable[[Sample], str]


def model_key(sample: Sample, role_to_model_key: RoleToModel) -> str:
    """The physical model that trains ``sample``.

    ``role_to_model_key`` is a callable ``sample -> key`` or a mapping from role keys to model keys,
    resolved for ``sample.route_name`` (``designer`` or ``executor:<agent>``) by the same rules as the
    rollout's policy registry (:func:`metaagent.policy.registry.resolve_role`). Shared policy:
    ``{"designer": "policy", "executor": "policy"}``; separate: ``{"designer": "D", "executor": "E"}``;
    partial: ``{"executor:Verifier*": "V", "*": "policy"}``.
    """
    if callable(role_to_model_key):
        return role_to_model_key(sample)
    pattern = resolve_role(sample.route_name, role_to_model_key)
    if pattern is not None:
        return role_to_model_key[pattern]
    raise SampleError(
        f"no model for sample {sample.route_name!r} (key {sample.key}); role_to_model_key patterns are "
        f"{list(role_to_model_key)}: add one that matches, e.g. '{sample.role}' or '*'"
    )


def route_samples(samples: Iterable[Sample], role_to_model_key: RoleToModel) -> dict[str, list[Sample]]:
    """Split samples by the physical model that trains them (one :class:`PolicyUpdater` per key)."""
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(model_key(s, role_to_model_key), []).append(s)
    return out


def micro_batches(samples: Sequence[Sample], max_tokens: int) -> list[list[Sample]]:
    """Split samples into micro-batches whose padded size ``rows x longest`` stays within ``max_tokens``.

    Samples are sorted longest first (stable, so the split is deterministic) and packed greedily; a single
    sample longer than ``max_tokens`` gets a micro-batch of its own. Because the loss is normalised by the
    whole batch's token count (see ``PolicyUpdater``), the split does not change the gradient.
    """
    if max_tokens < 1:
        raise SampleError(f"micro-batch token budget must be >= 1, got {max_tokens}")
    order = sorted(samples, key=lambda s: s.num_tokens, reverse=True)
    batches: list[list[Sample]] = []
    current: list[Sample] = []
    longest = 0
    for s in order:
        if current and max(longest, s.num_tokens) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(s)
        longest = max(longest, s.num_tokens)
    if current:
        batches.append(current)
    return batches


def collate(samples: Sequence[Sample], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded tensors of a micro-batch (B samples, L = longest prompt+response, R = longest response).

    Returns:
        input_ids (B, L) long; attention_mask (B, L) long; position_ids (B, L) long;
        responses (B, R) long; response_mask (B, R) float; response_index (B, R) long (position whose hidden
        state predicts each response token); old_log_probs (B, R) float; advantages (B, R) float (the
        sample's ``token_advantages``, or its scalar advantage on every response token); temperatures (B,)
        float.
    """
    if not samples:
        raise SampleError("cannot collate an empty micro-batch")
    b = len(samples)
    seq_len = max(s.num_tokens for s in samples)
    resp_len = max(len(s.response_ids) for s in samples)
    input_ids = torch.full((b, seq_len), pad_id, dtype=torch.long)  # (B, L)
    attention_mask = torch.zeros((b, seq_len), dtype=torch.long)  # (B, L)
    responses = torch.full((b, resp_len), pad_id, dtype=torch.long)  # (B, R)
    response_mask = torch.zeros((b, resp_len), dtype=torch.float32)  # (B, R)
    response_index = torch.zeros((b, resp_len), dtype=torch.long)  # (B, R)
    old_log_probs = torch.zeros((b, resp_len), dtype=torch.float32)  # (B, R)
    advantages = torch.zeros((b, resp_len), dtype=torch.float32)  # (B, R)
    temperatures = torch.tensor([s.temperature for s in samples], dtype=torch.float32)  # (B,)
    for row, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[row, : p + r] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention_mask[row, : p + r] = 1
        responses[row, :r] = torch.tensor(s.response_ids, dtype=torch.long)
        response_mask[row, :r] = 1.0
        response_index[row, :r] = torch.arange(p - 1, p + r - 1)
        old_log_probs[row, :r] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        if s.token_advantages is None:
            advantages[row, :r] = s.advantage
        else:
            if len(s.token_advantages) != r:
                raise SampleError(
                    f"sample {s.key}: {len(s.token_advantages)} token advantages for {r} response tokens"
                )
            advantages[row, :r] = torch.tensor(s.token_advantages, dtype=torch.float32)
    position_ids = torch.arange(seq_len, dtype=torch.long).expand(b, seq_len).contiguous()  # (B, L)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "responses": responses,
        "response_mask": response_mask,
        "response_index": response_index,
        "old_log_probs": old_log_probs,
        "advantages": advantages,
        "temperatures": temperatures,
    }
