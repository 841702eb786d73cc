"""The post-rollout stage of evaluation-aligned credit (seed 002 §3.3-3.5, §6): the expensive work, written
into the records so that the ``eval_aligned`` estimator stays a pure function over them.

For every execution of the step, after its reward (``R_sys``) is known:

- success (``R_sys > 0``): the helpfulness judge labels each turn (``AgentTurn.labels["helpful"]``); the
  coalitions of the Shapley plan are re-executed exactly (same script, task and seed; agents outside the
  coalition answered by the baseline through :class:`~metaagent.rollout.reexec.CoalitionPolicy`) and stored as
  ``Execution.counterfactuals``; each turn's ``r_{i,t}`` is written as its ``TurnReward`` (source
  ``allocator``) for replay;
- failure (``R_sys = 0``): first-error bisection with the prefix judge (``Execution.first_error``; ``mc``
  queries re-run forced prefixes, stored as ``forced:<t>`` counterfactuals) and Eq. 9's labels
  (``AgentTurn.labels["helpful"]``: 1 before ``t*``, 0 at it), then the preferred reply for the
  failing turn — from a successful execution of the same task that saw the same context, else the first of
  ``nbest`` resamples that passes the prefix judge (``mc``: its continuations are ``resample:<t>`` runs) —
  as a ``PreferencePair`` (rejected = the failing reply), and a correction re-run (``correction:<t>``) with
  the failing reply replaced. No pair found: counted.

Every re-run and judge call is counted against the step's budget; what the budget refuses is counted, not
silently skipped (the estimator then counts the episode as ``missing_coalitions``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from metaagent.credit.eval_aligned import (
    ERR,
    HELPFUL,
    HELPFUL_ERROR,
    OK,
    call_order,
    episode_credit,
    evaluator_score,
    first_error,
    first_error_labels,
    plan_for,
    players,
)
from metaagent.data.tasks import Task
from metaagent.policy.base import ChatRequest, Policy, PolicyError
from metaagent.records import (
    AgentTurn,
    Counterfactual,
    Execution,
    FirstError,
    PreferencePair,
    RewardRecord,
    RolloutTree,
    TurnReward,
)
from metaagent.seeding import derive_seed

from ..reexec import CoalitionPolicy, ForcedPrefixPolicy, PrefixDivergence
from .config import EvalAlignedConfig
from .judges import HELPFUL as HELPFUL_TEMPLATE
from .judges import PREFIX as PREFIX_TEMPLATE
from .judges import helpful_item, make_judge, prefix_item

PREFIX = "credit/eval_aligned/"
#: the stage's counters, each present in the metrics (0 when nothing happened)
COUNTERS = (
    "runs", "coalition_runs", "prefix_runs", "correction_runs", "judge_calls", "judge_errors", "prefix_queries",
    "nbest_samples", "budget_refused_runs", "budget_refused_judge_calls", "divergences", "run_errors",
    "bisection_failed", "skipped_unscored",
)  # fmt: skip

_SHAPLEY_OPTIONS = ("score", "success_threshold", "exact_max_agents", "permutations")


class Budget:
    """Per-step limits on re-executions and judge calls (thread-safe); refusals are counted."""

    def __init__(self, runs: int, judge_calls: int, counts: Counter[str], lock: threading.Lock) -> None:
        self.left = {"runs": runs, "judge_calls": judge_calls}
        self.counts, self.lock = counts, lock

    def take(self, kind: str, n: int = 1) -> bool:
        with self.lock:
            if self.left[kind] < n:
                self.counts[f"budget_refused_{kind}"] += n
                return False
            self.left[kind] -= n
            self.counts[kind] += n
            return True


class EvalAlignedStage:
    """Annotates rollout trees for the ``eval_aligned`` estimator (see the module docstring).

    Args:
        engine: the :class:`~metaagent.rollout.engine.RolloutEngine` that made the trees (its sandbox pool,
            executor policy, sampling, limits, tools and reward config are reused for the re-runs).
        config: the stage's settings.
        options: the estimator's options (``algo.options`` over its defaults): the Shapley plan and the
            success predicate.
        reference: the frozen reference policy (``baseline: reference``).
    """

    def __init__(
        self,
        engine: Any,
        config: EvalAlignedConfig,
        options: Mapping[str, Any] | None = None,
        *,
        reference: Policy | None = None,
    ) -> None:
        from metaagent.credit import estimator_options

        if config.baseline == "reference" and reference is None:
            raise ValueError("eval_aligned.baseline=reference needs a reference policy")
        self.engine, self.config, self.reference = engine, config, reference
        merged = {**estimator_options("eval_aligned"), **dict(options or {})}
        self.options = {k: merged[k] for k in _SHAPLEY_OPTIONS}
        policy = engine.executor
        self.helpful = make_judge(config.helpful_judge, HELPFUL_TEMPLATE, policy, config.judge_max_tokens)
        self.prefix = make_judge(config.prefix_judge, PREFIX_TEMPLATE, policy, config.judge_max_tokens)

    # ---- public -------------------------------------------------------------------------------------------

    def annotate(self, trees: Sequence[RolloutTree]) -> dict[str, float]:
        """Write labels, counterfactual runs, first errors and preference pairs into ``trees`` (in place);
        returns the ``credit/eval_aligned/*`` cost metrics of this step."""
        t0 = time.perf_counter()
        counts: Counter[str] = Counter({k: 0 for k in COUNTERS})
        lock = threading.Lock()
        budget = Budget(self.config.max_runs_per_step, self.config.max_judge_calls_per_step, counts, lock)
        jobs = []
        for tree in trees:
            task = Task.coerce(tree.task)
            for d, e in tree.executions():
                if d.script is None:
                    continue
                r = evaluator_score(e.reward, score=self.options["score"], success_threshold=self.options["success_threshold"])
                if r is None:
                    counts["skipped_unscored"] += 1
                elif r > 0 and players(e):
                    jobs.append((self._success, (tree, task, d.script, e, budget, counts, lock)))
                elif r <= 0 and e.turns:
                    jobs.append((self._failure, (tree, task, d.script, e, budget, counts, lock)))
        # successes first: a failure may take its preferred reply from a success with the same context
        for phase in (self._success, self._failure):
            batch = [args for fn, args in jobs if fn == phase]
            if batch:
                workers = max(1, min(len(batch), self.engine.config.max_inflight))
                with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eval-aligned") as ex:
                    for f in [ex.submit(phase, *args) for args in batch]:
                        f.result()
        metrics = {PREFIX + k: float(v) for k, v in sorted(counts.items())}
        metrics[PREFIX + "time_s"] = time.perf_counter() - t0
        return metrics

    # ---- success route ------------------------------------------------------------------------------------

    def _success(self, tree, task, script, e: Execution, budget: Budget, counts, lock) -> None:
        self._label(tree.task, e, budget, counts, lock)
        plan = plan_for(e, exact_max_agents=self.options["exact_max_agents"], permutations=self.options["permutations"])
        have = {frozenset(cf.members) for cf in e.counterfactuals if cf.baseline == self.config.baseline}
        for s in plan.coalitions:
            if s in have or not budget.take("runs"):
                continue
            policy = CoalitionPolicy(s, self.config.baseline, self.engine.executor, reference=self.reference)
            cf = self._run(task, script, policy, e.seed, counts, lock)
            cf.members, cf.baseline = sorted(s), self.config.baseline
            with lock:
                counts["coalition_runs"] += 1
                e.counterfactuals.append(cf)
        ep = episode_credit(e, **self.options)
        for k, r in ep.turn_rewards.items():
            agent = e.turns[k].role
            e.turns[k].reward = TurnReward(
                r, "allocator",
                components={"phi": ep.phi[agent], "alpha": ep.alpha[agent], "omega": ep.weights[k]},
                details={"estimator": "eval_aligned", "r_sys": ep.r_sys, "plan": ep.plan.method},  # type: ignore[union-attr]
            )  # fmt: skip

    def _label(self, task: Mapping[str, Any], e: Execution, budget: Budget, counts, lock) -> None:
        if self.helpful is None:
            return
        turns = [t for t in e.turns if not t.synthetic]
        if not budget.take("judge_calls", len(turns)):
            for t in turns:
                t.labels[HELPFUL_ERROR] = 1.0
            return
        for t, tr in zip(turns, self.helpful.score([helpful_item(task, t) for t in turns])):
            if tr.total is None:
                t.labels[HELPFUL_ERROR] = 1.0
                with lock:
                    counts["judge_errors"] += 1
            else:
                t.labels[HELPFUL] = float(tr.total >= 0.5) if self.config.helpful_labels == "binary" else float(tr.total)

    # ---- failure route ------------------------------------------------------------------------------------

    def _failure(self, tree, task, script, e: Execution, budget: Budget, counts, lock) -> None:
        order = call_order(e)
        recorded = [e.turns[k] for k in order]

        def judge(t: int, replace: dict[int, AgentTurn] | None = None) -> str | None:
            with lock:
                counts["prefix_queries"] += 1
            if self.prefix is None:  # mc
                return self._mc(task, script, e, recorded, t, replace, budget, counts, lock)
            if not budget.take("judge_calls"):
                return None
            shown = [(replace or {}).get(p, turn) for p, turn in enumerate(recorded[:t])]
            (tr,) = self.prefix.score([prefix_item(tree.task, shown)])
            if tr.total is None:
                with lock:
                    counts["judge_errors"] += 1
                return None
            return OK if tr.total >= 0.5 else ERR

        found = first_error(len(recorded), judge)
        if found.turn is None:
            with lock:
                counts["bisection_failed"] += 1
            return
        t_star = found.turn
        bad = recorded[t_star - 1]
        e.first_error = FirstError(t_star, bad.role, found.queries, self.config.prefix_judge)
        for turn, q in zip(recorded, first_error_labels(t_star)):
            turn.labels[HELPFUL] = q
        chosen = self._preferred(tree, task, script, e, recorded, t_star, judge, budget, counts, lock)
        if chosen is None:
            return
        text, ids, logprobs, source = chosen
        e.preferences.append(
            PreferencePair(order[t_star - 1], bad.messages, list(bad.prompt_ids), ids, list(bad.response_ids), source,
                           chosen_logprobs=logprobs)  # fmt: skip
        )
        if self.config.correction_check and budget.take("runs"):
            policy = ForcedPrefixPolicy(recorded, t_star, self.engine.executor, replace={t_star - 1: text})
            cf = self._run(task, script, policy, e.seed, counts, lock)
            cf.members, cf.baseline = players(e), f"correction:{t_star}"
            with lock:
                counts["correction_runs"] += 1
                e.counterfactuals.append(cf)

    def _mc(self, task, script, e, recorded, t, replace, budget, counts, lock) -> str | None:
        """OK iff one of ``mc_continuations`` runs with the first ``t`` calls forced succeeds (fresh seeds
        after the prefix; stops at the first success); None when the budget refuses a run before a verdict or
        no continuation could be scored."""
        k = self.config.mc_continuations
        texts = {p: turn.response for p, turn in (replace or {}).items()}
        scored = False
        for c in range(k):
            if not budget.take("runs"):
                return None  # too few continuations to call it ERR
            seed = derive_seed(e.seed, "eval_aligned/mc", t, sorted(texts.items()), c)
            policy = ForcedPrefixPolicy(recorded, t, self.engine.executor, replace=texts)
            cf = self._run(task, script, policy, seed, counts, lock)
            cf.members, cf.baseline = players(e), (f"resample:{t}" if texts else f"forced:{t}")
            with lock:
                counts["prefix_runs"] += 1
                e.counterfactuals.append(cf)
            v = evaluator_score(cf.reward, score=self.options["score"], success_threshold=self.options["success_threshold"])
            if v is not None:
                scored = True
                if v > 0:
                    return OK
        return ERR if scored else None

    def _preferred(self, tree, task, script, e, recorded, t_star, judge, budget, counts, lock):
        """``(text, ids, logprobs, source)`` of the preferred reply at turn ``t_star``, or None (counted by
        the estimator as ``no_pair``)."""
        bad = recorded[t_star - 1]
        for source in self.config.pair_sources:
            if source == "success_episode":
                for _, other in tree.executions():
                    r = evaluator_score(other.reward, score=self.options["score"], success_threshold=self.options["success_threshold"])
                    if other is e or not r or r <= 0:
                        continue
                    match = next((t for t in other.turns if t.call_index == bad.call_index and t.messages == bad.messages
                                  and not t.synthetic and t.response != bad.response), None)  # fmt: skip
                    if match is not None:
                        return match.response, list(match.response_ids), match.logprobs, "success_episode"
            elif source == "resample":
                params = self.engine.config.executor.params()
                for n in range(self.config.nbest):
                    seed = derive_seed(e.seed, "eval_aligned/nbest", t_star, n)
                    request = ChatRequest(bad.messages, params.replace(seed=seed), agent=bad.role)
                    try:
                        (c,) = self.engine.executor.generate([request])
                    except PolicyError:
                        with lock:
                            counts["run_errors"] += 1
                        continue
                    with lock:
                        counts["nbest_samples"] += 1
                    if c.text == bad.response:
                        continue
                    candidate = AgentTurn.from_dict({**bad.to_dict(), "response": c.text, "response_ids": list(c.response_ids)})
                    verdict = judge(t_star, {t_star - 1: candidate})
                    if verdict == OK:
                        return c.text, list(c.response_ids), c.logprobs, "resample"
                    if verdict is None:
                        break  # budget or judge failure: no candidate can be checked
        return None

    # ---- one re-run ---------------------------------------------------------------------------------------

    def _run(self, task: Task, script: str, policy: Policy, seed: int | None, counts, lock) -> Counterfactual:
        """One exact re-execution, scored; a divergence or host failure is a run without a reward."""
        eng = self.engine
        try:
            run = eng.pool.run(script, task, policy, eng.config.limits, sampling=eng.config.executor.params(),
                               tools=eng.tools_factory(task), seed=seed)  # fmt: skip
        except PrefixDivergence as err:
            with lock:
                counts["divergences"] += 1
            return Counterfactual([], "", seed, "error", RewardRecord(None, None, None, error=str(err)))
        except PolicyError as err:
            with lock:
                counts["run_errors"] += 1
            return Counterfactual([], "", seed, "error", RewardRecord(None, None, None, error=f"host failure: {err}"))
        reward = eng._score(task, run)
        return Counterfactual([], "", seed, run.status, reward, len(run.turns), run.turns)
