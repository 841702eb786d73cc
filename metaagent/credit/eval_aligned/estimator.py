"""The ``eval_aligned`` credit estimator (seed 002 §3.4-3.5, §4.4): a pure function over records.

Success executions (``R_sys > 0``): every turn's advantage is ``Atilde_{i,t} = r_{i,t} - b`` (Eq. 11) with
``r_{i,t}`` from :func:`~.episode.episode_credit` (Shapley over agents, helpfulness split) and the baseline
``b`` (``pg_baseline``):

- ``batch`` (default): the mean of all ``r_{i,t}`` of the step's success episodes;
- ``agent_batch``: the mean of the ``r_{i,t}`` of the same agent (role name) over the step;
- ``episode_agent``: the paper's per-episode ``rbar_i = r_i / k_i`` (zeroes every uniformly labelled agent);
- ``none``: ``b = 0``.

Failure executions (``R_sys = 0``) get no policy-gradient sample; their ``Execution.preferences`` (written by
the post-rollout stage) train with the DPO loss (``optim.dpo``). The designer keeps hierarchical credit
(paper Eq. 4-5 on the outcome rewards): the seed paper does not cover designers.

The coalition runs, labels, bisection and pairs come from :mod:`metaagent.rollout.eval_aligned`; an
execution whose coalitions are missing (budget) or not computable gets no advantage and is counted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from metaagent.records import RolloutTree

from ..assign import TreeCredit, reward_matrix
from ..groups import DEFAULT_EPS, CreditError
from ..matrix import hierarchical_credit
from ..registry import register_estimator
from .episode import episode_credit

PG_BASELINES = ("batch", "agent_batch", "episode_agent", "none")
PREFIX = "eval_aligned/"
#: counters of the estimator, each present (0 when nothing happened) as ``credit/eval_aligned/<name>``
COUNTERS = (
    "success_episodes",
    "failure_episodes",
    "not_computable",
    "missing_coalitions",
    "no_agents",
    "negative_shapley",
    "degenerate",
    "unlabelled_agents",
    "first_errors",
    "pairs",
    "no_pair",
)


@register_estimator("eval_aligned")
def eval_aligned_estimator(
    trees: Sequence[RolloutTree],
    *,
    score: str = "total",
    success_threshold: float = 1.0,
    exact_max_agents: int = 5,
    permutations: int = 8,
    clip_negative: bool = False,
    pg_baseline: str = "batch",
    eps: float = DEFAULT_EPS,
    norm_by_std: bool = True,
) -> list[TreeCredit]:
    """Evaluation-aligned credit per tree (see the module docstring).

    Options: ``score`` (``total`` | ``correct``: the evaluator's r), ``success_threshold`` (success iff
    ``RewardRecord.correct >=`` it), ``exact_max_agents`` (exact Shapley up to this many agents, else
    ``permutations`` sampled orderings), ``clip_negative`` (false: signed phi kept), ``pg_baseline``
    (``batch`` | ``agent_batch`` | ``episode_agent`` | ``none``), ``eps`` / ``norm_by_std`` (designer GRPO).
    Advantages are per turn (shape: one float per executed turn of a success episode).
    """
    if pg_baseline not in PG_BASELINES:
        raise CreditError(f"pg_baseline must be one of {PG_BASELINES}, got {pg_baseline!r}")
    if exact_max_agents < 1:
        raise CreditError(f"exact_max_agents must be >= 1, got {exact_max_agents}")
    out: list[TreeCredit] = []
    pending: list[tuple[TreeCredit, tuple[int, int, int], str, float, float]] = []  # credit, key, agent, r, rbar_i
    for tree in trees:
        mc = hierarchical_credit(reward_matrix(tree), eps=eps, norm_by_std=norm_by_std)
        c = TreeCredit(design_rewards=dict(enumerate(mc.design_rewards)), designer=dict(enumerate(mc.designer)))
        c.counts.update({k: v for k, v in mc.counts.items() if not k.startswith("executor")})
        c.counts.update({PREFIX + k: 0 for k in COUNTERS})
        for i, d in enumerate(tree.designs):
            for j, e in enumerate(d.executions):
                c.executor[(i, j)] = None  # no turn trains with an execution-level advantage
                ep = episode_credit(
                    e, score=score, success_threshold=success_threshold, exact_max_agents=exact_max_agents,
                    permutations=permutations, clip_negative=clip_negative,
                )  # fmt: skip
                if ep.status == "failure":
                    c.counts[PREFIX + "failure_episodes"] += 1
                    c.counts[PREFIX + "first_errors"] += int(e.first_error is not None)
                    c.counts[PREFIX + "pairs"] += len(e.preferences)
                    c.counts[PREFIX + "no_pair"] += int(e.first_error is not None and not e.preferences)
                    continue
                if ep.status != "ok":
                    c.counts[PREFIX + ep.status] += 1
                    continue
                c.counts[PREFIX + "success_episodes"] += 1
                c.counts[PREFIX + "negative_shapley"] += sum(v < 0 for v in ep.phi.values())
                c.counts[PREFIX + "degenerate"] += int(ep.degenerate)
                c.counts[PREFIX + "unlabelled_agents"] += len(ep.unlabelled_agents)
                for k, r in ep.turn_rewards.items():
                    agent = e.turns[k].role
                    k_i = sum(1 for t in e.turns if t.role == agent and not t.synthetic)
                    pending.append((c, (i, j, k), agent, r, ep.agent_rewards[agent] / k_i))
        out.append(c)
    if pending:
        mean = sum(p[3] for p in pending) / len(pending)
        by_agent: dict[str, list[float]] = defaultdict(list)
        for p in pending:
            by_agent[p[2]].append(p[3])
        for c, key, agent, r, rbar_i in pending:
            b = {
                "batch": mean,
                "agent_batch": sum(by_agent[agent]) / len(by_agent[agent]),
                "episode_agent": rbar_i,
                "none": 0.0,
            }[pg_baseline]
            c.turns[key] = r - b
    return out


