"""The environment interface, answer parsing and the table of environments (one place for each).

An environment is a :class:`PlanEnv` subclass registered under its ``name`` with :func:`register_env`
(``@register_env`` on the class); every list of environment names (the ``plan`` data sources, the factory's
error, the appendix's lambdas) is derived from :data:`ENVS`. The built-ins register themselves in their own
modules (:mod:`.planpath`, :mod:`.sudoku`, :mod:`.sokoban`); a plugin domain's module (``METAAGENT_DOMAINS``)
registers its own the same way, or an installed distribution names it as an entry point of the group
``metaagent.envs``. Its data source (generated boards) follows from the name
(:func:`metaagent.data.loaders.get_source`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from metaagent.errors import MetaAgentError
from metaagent.registry import Registry

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
FINAL_MARK = "#####"
#: the two agent kinds of the planning workflows; an agent whose role name contains "tool" is a Tool agent
KINDS = ("planner", "tool")


class EnvError(MetaAgentError, ValueError):
    """An environment spec is invalid (unknown name, bad size); the message says what is allowed."""


def role_kind(role: str) -> str:
    return "tool" if "tool" in role.lower() else "planner"


def parse_final(text: str) -> str:
    """The final answer: what follows the last line starting with ``#####`` (the whole text if none)."""
    lines = (text or "").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lstrip().startswith(FINAL_MARK):
            rest = lines[i].lstrip()[len(FINAL_MARK):].strip()
            return "\n".join([rest, *lines[i + 1:]]).strip()
    return (text or "").strip()


def parse_actions(text: str) -> list[str] | None:
    """A move list ``[U, R, D, L]`` (JSON or bare letters in brackets) from an answer; None if none parses
    or a symbol is not one of U/D/L/R (a format failure, scored s_fmt = 0)."""
    m = re.findall(r"\[([^\[\]]*)\]", text or "")
    if not m:
        return None
    items = [s.strip().strip("'\"").upper() for s in m[-1].split(",") if s.strip()]
    if not items or any(s not in MOVES for s in items):
        return None
    return items


def parse_json(text: str) -> Any:
    """The last JSON array in ``text`` (grids, step lists), or None."""
    starts = [i for i, ch in enumerate(text or "") if ch == "["]
    for i in starts:
        depth = 0
        for j in range(i, len(text)):
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            if depth == 0:
                try:
                    value = json.loads(text[i:j + 1])
                except ValueError:
                    break
                return value
    return None


class PlanEnv:
    """One environment instance. Subclasses implement the game and set the class facts below; the interface is:

    ``observe() -> str``; ``step(answer) -> str`` applies an answer (a turn) and says the outcome;
    ``components(answer, kind, executed)`` -> the appendix's reward terms of applying ``answer`` now
    (on a copy: the env is unchanged), with ``team``, ``loc``, every sub-score and the verifiability mask
    ``m``; ``success``; ``turn`` (turns applied so far).
    """

    name = ""  # the environment's name: ``task.metadata["env"]["name"]``, its data source's name
    #: the task text's rules, ``{size}`` and ``{box}`` (the square root of size) filled in (metaagent.data.plan)
    rules = ""
    default_size = 0  # the board size of a spec without ``size``
    #: lambda of the appendix's mixing preset (``r = lambda r_team + (1 - lambda) m r_loc``, App. A.1.3-A.1.5)
    lam: float | None = None

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)
        self.turn = 0

    # ---- game (subclasses) -----------------------------------------------------------------------------
    @property
    def success(self) -> bool:
        raise NotImplementedError

    def observe(self) -> str:
        raise NotImplementedError

    def apply(self, answer: str) -> dict[str, Any]:
        """Apply an answer in place; returns the facts the reward terms are computed from."""
        raise NotImplementedError

    def terms(self, before: PlanEnv, facts: dict[str, Any], kind: str, executed: bool) -> dict[str, float]:
        raise NotImplementedError

    def parsed(self, facts: dict[str, Any]) -> bool:
        """Whether :meth:`apply` could parse the answer (a grid / step list / move list)."""
        raise NotImplementedError

    def shaped(self, before: PlanEnv, facts: dict[str, Any]) -> float | None:
        """The reference code's shaped reward of the answer's moves (None: not defined for this env)."""
        return None

    # ---- shared ------------------------------------------------------------------------------------------
    def step(self, answer: str) -> str:
        if self.success:
            return "SOLVED: the puzzle is already solved\n" + self.observe()
        self.apply(answer)
        self.turn += 1
        return ("SOLVED\n" if self.success else "NOT SOLVED\n") + self.observe()

    def components(self, answer: str, kind: str, executed: bool = True) -> dict[str, float]:
        """Reward terms of ``answer`` applied to a copy of this env (this env is unchanged).

        ``executed``: for a Tool agent, whether its program ran without error/timeout (s_exec).
        Returns ``team``, ``loc`` (the convex combination of the sub-scores) and the sub-scores; ``m``, the
        appendix's verifiability mask: 0 when the answer cannot be parsed (App. A.1.3: "we can parse the
        action and compute legality/progress"), so :func:`~metaagent.envs.mixing.mix_reward` drops ``loc``;
        ``shaped`` when the reference preset defines it.
        """
        if kind not in KINDS:
            raise EnvError(f"agent kind must be one of {KINDS}, got {kind!r}")
        after = copy.deepcopy(self)
        facts = after.apply(answer)
        after.turn += 1
        out = after.terms(self, facts, kind, executed)
        out["m"] = float(after.parsed(facts))
        shaped = after.shaped(self, facts)
        if shaped is not None:
            out["shaped"] = shaped
        return out


#: name -> its PlanEnv subclass; plugins: an installed distribution's entry points of the group
#: ``metaagent.envs`` (``counter = "my_package.counter:Counter"``, a class its module registers with
#: :func:`register_env`)
ENVS: Registry[type[PlanEnv]] = Registry("planning environment", EnvError, group="metaagent.envs")


def register_env(cls: type[PlanEnv]) -> type[PlanEnv]:
    """Register the :class:`PlanEnv` subclass ``cls`` under ``cls.name`` (a class decorator); it needs its
    ``rules`` and a ``default_size`` (the task text is built from them)."""
    if not (isinstance(cls, type) and issubclass(cls, PlanEnv)) or not cls.name:
        raise EnvError(f"register_env takes a PlanEnv subclass with a name, got {cls!r}")
    if not cls.rules or cls.default_size < 1:
        raise EnvError(f"environment {cls.name!r} needs its task text's rules and a default_size >= 1")
    return ENVS.register(cls.name)(cls)


def env_names() -> tuple[str, ...]:
    """The registered environments' names, sorted."""
    return tuple(ENVS.names())
