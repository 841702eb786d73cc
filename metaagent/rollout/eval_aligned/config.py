"""Settings of the evaluation-aligned post-rollout stage (seed 002): what to re-run, which judges, budgets.

The Shapley plan (``exact_max_agents``, ``permutations``) and the success predicate (``score``,
``success_threshold``) are the ``eval_aligned`` estimator's options (``algo.options``): the stage reads them
from there, so the coalitions it runs are exactly the ones the estimator needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metaagent.config import ConfigError

COALITION_BASELINES = ("noop", "mask", "reference")
PAIR_SOURCES = ("success_episode", "resample")
LABEL_KINDS = ("binary", "soft")


@dataclass
class EvalAlignedConfig:
    """Evaluation-aligned credit (``algo.estimator: eval_aligned``): the post-rollout stage's choices.

    ``baseline``: what replaces the agents outside a coalition (Eq. 1): ``noop`` (empty reply), ``mask``
    (echo of the agent's own input: "copies the last valid state"), ``reference`` (the initial executor
    model, frozen). ``helpful_judge`` (Eq. 5) and ``prefix_judge`` (Eq. 8): ``rule:<name>`` (deterministic
    rules, :data:`metaagent.rollout.eval_aligned.judges.RULES`), ``policy`` (the executor model as an LLM
    judge), ``none`` (helpfulness only: no labels, uniform split); the prefix judge also ``mc`` (OK iff one of
    ``mc_continuations`` forced-prefix continuations succeeds, OmegaPRM's criterion).
    """

    baseline: str = "noop"  # replaces agents outside a coalition (Eq. 1): noop | mask | reference
    helpful_judge: str = "rule:gold"  # Eq. 5 labels: rule:<name> | policy (the executor model) | none (uniform)
    helpful_labels: str = "binary"  # binary: q = 1 iff the judge's [0, 1] score >= 0.5; soft: q = the score
    prefix_judge: str = "mc"  # Eq. 8 J_Omega: mc (forced-prefix continuations) | rule:<name> | policy
    mc_continuations: int = 4  # mc: OK iff one of this many continuations succeeds
    nbest: int = 4  # N-best resampling of the failing turn for the preferred reply (Eq. 10, source iii)
    # where a failing turn's preferred reply comes from: success_episode (a succeeding execution's turn), resample
    pair_sources: list[str] = field(default_factory=lambda: ["success_episode", "resample"])
    correction_check: bool = True  # re-run with the failing reply replaced by the preferred one (§5)
    max_runs_per_step: int = 512  # counterfactual + prefix + correction re-executions per training step
    max_judge_calls_per_step: int = 1024  # judge-model calls per training step
    judge_max_tokens: int = 256  # reply length of a model judge

    def __post_init__(self) -> None:
        if self.baseline not in COALITION_BASELINES:
            raise ConfigError(f"eval_aligned.baseline must be one of {COALITION_BASELINES}, got {self.baseline!r}")
        if self.helpful_labels not in LABEL_KINDS:
            raise ConfigError(f"eval_aligned.helpful_labels must be one of {LABEL_KINDS}, got {self.helpful_labels!r}")
        for name in ("helpful_judge", "prefix_judge"):
            value = getattr(self, name)
            ok = value in ("policy", "none", "mc") or value.startswith("rule:")
            if not ok or (name == "helpful_judge" and value == "mc") or (name == "prefix_judge" and value == "none"):
                raise ConfigError(f"eval_aligned.{name}: unknown judge {value!r}; see the EvalAlignedConfig docstring")
            if value.startswith("rule:"):
                from .judges import RULES

                if value[5:] not in RULES:
                    raise ConfigError(f"eval_aligned.{name}: unknown rule {value[5:]!r}; known: {sorted(RULES)}")
        bad = sorted(set(self.pair_sources) - set(PAIR_SOURCES))
        if bad:
            raise ConfigError(f"eval_aligned.pair_sources: unknown {bad}; allowed: {list(PAIR_SOURCES)}")
        for name in ("mc_continuations", "nbest", "max_runs_per_step", "max_judge_calls_per_step", "judge_max_tokens"):
            if getattr(self, name) < 0 or (name in ("mc_continuations", "judge_max_tokens") and getattr(self, name) < 1):
                raise ConfigError(f"eval_aligned.{name} must be >= {1 if name in ('mc_continuations', 'judge_max_tokens') else 0}")
