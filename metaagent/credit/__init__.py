"""Credit assignment over rollout records (paper §3.2): designer and executor advantages, six estimators by name.

Two layers:

- pure array math, one question at a time (:mod:`.groups`, :mod:`.matrix`):
  ``hierarchical_advantages(rewards) -> (designer_adv, executor_adv)``;
- record-level estimators and the token stages some finish in the trainer, two registries (:mod:`.registry`;
  plugins: ``metaagent.estimators``, ``metaagent.token_stages``), and :mod:`.assign`:
  ``assign_credit(trees, estimator="hierarchical", **options) -> CreditResult``. The estimators:
  ``hierarchical`` and ``flat`` (Eq. 4-7, :mod:`.assign`; also registered in verl's estimator registry),
  ``at_grpo`` (AT-GRPO, seed 003: per (environment, agent, turn) groups, :mod:`.at_grpo`), ``mappa`` (MAPPA,
  seed 000: per-action coach rewards and a token stage, :mod:`.mappa`), ``unity`` (UnityMAS-O, seed 001:
  per-model advantages, :mod:`.unity`) and ``eval_aligned`` (seed 002: Shapley and first-error credit,
  :mod:`.eval_aligned`).
- the step's second scale of the advantages (:mod:`.normalize`: ``algo.normalize`` none / batch / role,
  Dr. MAS);
- the budget-matched single-agent control of the designer's reward (:mod:`.control`:
  ``hierarchical`` with ``designer_baseline="control"``).
"""

from .assign import (
    COUNTERS,
    CreditResult,
    TreeCredit,
    assign_credit,
    call_matrix,
    design_row,
    execution_reward,
    fill_design_rewards,
    reward_matrix,
)
from .control import DESIGNER_BASELINES, control_baselines, control_budget, control_size, control_value, design_budget
from .groups import DEFAULT_EPS, CreditError, GroupResult, group_advantages
from .matrix import (
    EXECUTOR_GROUPS,
    EXECUTOR_UNITS,
    MatrixCredit,
    design_reward,
    flat_advantages,
    flat_credit,
    hierarchical_advantages,
    hierarchical_credit,
)
from . import at_grpo as _at_grpo  # noqa: F401  (registers the "at_grpo" estimator)
from .registry import check_options, estimator_options, get_estimator, list_estimators, register_estimator
from . import eval_aligned  # registers the "eval_aligned" estimator (seed 002)
from .registry import TokenCredit, TokenStage, get_token_stage, register_token_stage
from . import mappa  # noqa: E402,F401  (registers the "mappa" estimator and its token stage)
from . import unity as _unity  # noqa: E402,F401  (registers the "unity" estimator)

__all__ = [
    "COUNTERS",
    "DEFAULT_EPS",
    "DESIGNER_BASELINES",
    "EXECUTOR_GROUPS",
    "EXECUTOR_UNITS",
    "CreditError",
    "CreditResult",
    "GroupResult",
    "TokenCredit",
    "TokenStage",
    "MatrixCredit",
    "TreeCredit",
    "assign_credit",
    "check_options",
    "call_matrix",
    "control_baselines",
    "control_budget",
    "control_size",
    "control_value",
    "design_budget",
    "design_reward",
    "design_row",
    "estimator_options",
    "execution_reward",
    "fill_design_rewards",
    "flat_advantages",
    "flat_credit",
    "get_estimator",
    "get_token_stage",
    "group_advantages",
    "hierarchical_advantages",
    "hierarchical_credit",
    "list_estimators",
    "register_estimator",
    "register_token_stage",
    "reward_matrix",
]
