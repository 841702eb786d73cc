"""Host-side planning environments of the ``plan`` task domain (AT-GRPO, seed 003, App. A.1.3-A.1.5).

Environments live on the host, never in the sandbox: a script sees them only through the tools
``env_observe()`` and ``env_step(answer)`` (:mod:`metaagent.workflow.tools`). Each is rebuilt from
``task.metadata["env"]`` (``{"name": ..., "seed": ..., "size": ...}``) by :func:`make_env`, so a task is a
seed and an execution's env is reproducible. Reward components are the paper appendix's, term by term
(:meth:`PlanEnv.components`); :mod:`.mixing` combines them per agent (presets ``alpha``, ``lambda``,
``pettingllms``).
"""

from .base import ENV_NAMES, EnvError, PlanEnv, parse_actions, parse_final
from .factory import make_env
from .mixing import LAMBDAS, MIX_PRESETS, mix_reward

__all__ = ["ENV_NAMES", "LAMBDAS", "MIX_PRESETS", "EnvError", "PlanEnv", "make_env", "mix_reward", "parse_actions", "parse_final"]
