"""Host-side planning environments of the ``plan`` task domain (AT-GRPO, seed 003, App. A.1.3-A.1.5): Sokoban,
Sudoku and plan-path, registered by name (``register_env``), seen by scripts only through the ``env_*`` tools.

Environments live on the host, never in the sandbox: a script sees them only through the tools
``env_observe()`` and ``env_step(answer)`` (:mod:`metaagent.workflow.tools`). Each is rebuilt from
``task.metadata["env"]`` (``{"name": ..., "seed": ..., "size": ...}``) by :func:`make_env`, so a task is a
seed and an execution's env is reproducible. Environments are registered by name (:func:`register_env`,
:data:`ENVS`); every list of their names derives from that table. Reward components are the paper appendix's, term by term
(:meth:`PlanEnv.components`); :mod:`.mixing` combines them per agent (presets ``alpha``, ``lambda``,
``pettingllms``).
"""

from .base import ENVS, EnvError, PlanEnv, env_names, parse_actions, parse_final, register_env
from .factory import make_env
from .mixing import MIX_PRESETS, TASK_LAMBDAS, lambda_of, mix_reward

__all__ = [
    "ENVS", "MIX_PRESETS", "TASK_LAMBDAS", "EnvError", "PlanEnv", "env_names", "lambda_of", "make_env", "mix_reward",
    "parse_actions", "parse_final", "register_env",
]  # fmt: skip
