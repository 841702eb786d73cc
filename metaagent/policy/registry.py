"""Map logical roles to physical policies: shared vs separate weights is one config switch.

Keys are logical roles (``"designer"``, ``"executor"``) or executor role-name patterns
(``"executor:*Critic*"``, shell-style globs matched case-sensitively). :meth:`PolicyRegistry.for_role`
resolves a role in this order:

1. an exact key (``"executor:MathCritic"``);
2. the first glob key, in insertion order, that matches (``"executor:*Critic*"``);
3. the role's base before the first ``":"`` (``"executor"``).

Examples::

    PolicyRegistry.shared(policy)                                   # one model plays every role
    PolicyRegistry({"designer": p_design, "executor": p_exec})      # separate models
    PolicyRegistry({"designer": p, "executor": p, "executor:*Critic*": p_critic})  # partial
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Mapping

from metaagent.records import DESIGNER, EXECUTOR
from metaagent.records import ROLES as LOGICAL_ROLES

from .base import ChatRequest, Completion, Policy

GLOB_CHARS = "*?["


def resolve_role(role: str, keys: Iterable[str]) -> str | None:
    """The key among ``keys`` that serves ``role`` (``designer``, ``executor`` or ``executor:<agent>``), or
    None. The one rule set for role -> model routing (the rollout's registry and the trainer's samples):

    1. the exact role string;
    2. the first key, in the given order, that is a glob pattern (``*?[``) matching the role;
    3. the role's base before the first ``":"`` (``executor``).
    """
    keys = list(keys)
    if role in keys:
        return role
    for key in keys:
        if any(c in key for c in GLOB_CHARS) and fnmatch.fnmatchcase(role, key):
            return key
    base = role.split(":", 1)[0]
    return base if base in keys else None


class PolicyRegistry(Mapping[str, Policy]):
    """A read-only mapping ``role key -> Policy`` with role resolution (see the module docstring)."""

    def __init__(self, mapping: Mapping[str, Policy]) -> None:
        if not isinstance(mapping, Mapping) or not mapping:
            raise ValueError(
                "PolicyRegistry needs a non-empty mapping of role -> Policy, e.g. "
                "{'designer': policy, 'executor': policy}, or use PolicyRegistry.shared(policy)"
            )
        for key, policy in mapping.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"role keys must be non-empty strings, got {key!r}")
            base = key.split(":", 1)[0]
            if base not in LOGICAL_ROLES:
                raise ValueError(
                    f"role key {key!r} must be one of {LOGICAL_ROLES} or start with 'executor:' "
                    "(e.g. 'executor:*Critic*')"
                )
            if base == DESIGNER and key != DESIGNER:
                raise ValueError(f"role key {key!r}: only executor roles take name patterns; use 'designer'")
            if not isinstance(policy, Policy):
                raise TypeError(f"registry[{key!r}] must be a Policy, got {type(policy).__name__}")
        self._map = dict(mapping)

    @classmethod
    def shared(cls, policy: Policy) -> PolicyRegistry:
        """One physical policy for the designer and every executor role."""
        return cls({DESIGNER: policy, EXECUTOR: policy})

    # Mapping protocol (over the configured keys)
    def __getitem__(self, key: str) -> Policy:
        return self._map[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"PolicyRegistry({self.models()})"

    # -------------------------------------------------------------------------------------------- lookup
    def for_role(self, role: str) -> Policy:
        """The policy that serves ``role`` (``"designer"``, ``"executor"`` or ``"executor:<name>"``)."""
        key = self.resolve(role)
        return self._map[key]

    def resolve(self, role: str) -> str:
        """The registry key that serves ``role``; raises :class:`KeyError` naming the configured keys."""
        key = resolve_role(role, self._map)
        if key is not None:
            return key
        base = role.split(":", 1)[0]
        raise KeyError(
            f"no policy for role {role!r}; configured roles: {list(self._map)}. Add a mapping for "
            f"{base!r} (or a pattern such as '{base}:*')"
        )

    def models(self) -> dict[str, str]:
        """``role key -> model id`` of the policy serving it."""
        return {key: policy.model_id for key, policy in self._map.items()}

    def physical(self) -> list[Policy]:
        """The distinct policy objects (by identity), in first-use order: one optimizer each."""
        seen: dict[int, Policy] = {}
        for policy in self._map.values():
            seen.setdefault(id(policy), policy)
        return list(seen.values())

    def roles_of(self, policy: Policy) -> list[str]:
        """The role keys a physical policy serves."""
        return [key for key, p in self._map.items() if p is policy]

    @property
    def is_shared(self) -> bool:
        return len(self.physical()) == 1

    def close(self) -> None:
        """Close every physical policy once."""
        for policy in self.physical():
            policy.close()


class RoutingPolicy(Policy):
    """One :class:`Policy` over a registry: each request goes to the policy serving its ``route_name``
    (``designer`` or ``executor:<agent>``), so a sandboxed script can call agents backed by different
    models (partial weight sharing). Requests for the same policy stay together in one ``generate`` call;
    completions come back in request order."""

    def __init__(self, registry: PolicyRegistry) -> None:
        super().__init__()
        self.registry = registry
        self.model_id = "+".join(sorted({p.model_id for p in registry.physical()}))

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        groups: dict[int, tuple[Policy, list[int]]] = {}
        for i, r in enumerate(requests):
            policy = self.registry.for_role(r.route_name)
            groups.setdefault(id(policy), (policy, []))[1].append(i)
        out: list[Completion | None] = [None] * len(requests)
        for policy, idx in groups.values():
            for i, c in zip(idx, policy.generate([requests[i] for i in idx])):
                out[i] = c
        return out  # type: ignore[return-value]

    def weights_changed(self) -> None:
        for policy in self.registry.physical():
            policy.weights_changed()

    def close(self) -> None:
        self.registry.close()
