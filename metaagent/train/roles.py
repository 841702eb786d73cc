"""Which physical model plays which role: shared by the loop and both backends.

    policy.weights = shared    {"policy": M}                       designer, executor  -> M
    policy.weights = separate  {"designer": D, "executor": E}      designer -> D, executor -> E
    policy.role_models         + {"role0": R, ...}                 executor:<pattern>  -> R
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metaagent.policy.base import Policy
from metaagent.policy.registry import PolicyRegistry, RoutingPolicy
from metaagent.records import DESIGNER, EXECUTOR
from metaagent.train.config import PolicyConfig


def model_plan(cfg: PolicyConfig) -> tuple[dict[str, str], dict[str, str], str, dict[str, str]]:
    """(key -> model path, route patterns -> key, designer key, executor registry patterns -> key)."""
    if cfg.weights == "shared":
        paths = {"policy": cfg.model}
        designer_key, executor_key = "policy", "policy"
    else:
        paths = {DESIGNER: cfg.model_for(DESIGNER), EXECUTOR: cfg.model_for(EXECUTOR)}
        designer_key, executor_key = DESIGNER, EXECUTOR
    executor_keys: dict[str, str] = {}
    route: dict[str, str] = {DESIGNER: designer_key}
    for i, (pattern, path) in enumerate(cfg.role_models.items()):
        key = f"role{i}"
        paths[key] = path
        registry_pattern = pattern if pattern.startswith("executor:") else f"executor:{pattern}"
        executor_keys[registry_pattern] = key
        route[registry_pattern] = key
    executor_keys[EXECUTOR] = executor_key
    route[EXECUTOR] = executor_key
    return paths, route, designer_key, executor_keys


def executor_policy(policies: Mapping[str, Policy], executor_keys: Mapping[str, str]) -> Policy:
    """The policy of the one executor model, or a router from executor role-name patterns to models.

    ``executor_keys`` maps registry patterns (e.g. ``"executor:*Critic*"``, ``"executor"``) to model keys.
    """
    keys = set(executor_keys.values())
    if len(keys) == 1:
        return policies[keys.pop()]

    return RoutingPolicy(PolicyRegistry({p: policies[k] for p, k in executor_keys.items()}))


def temperatures(rollout_cfg: Any) -> Mapping[str, float]:
    """Per-role temperature the log-probs were sampled at (greedy -> 1.0, see policy.base)."""
    return {
        DESIGNER: rollout_cfg.designer.temperature or 1.0,
        EXECUTOR: rollout_cfg.executor.temperature or 1.0,
    }
