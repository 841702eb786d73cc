"""Task domains: everything that differs between math, code, qa, plan, ... in one record per domain.

A :class:`Domain` says what a task of that domain needs to be scored, how its answer is scored and formatted,
which tools its scripts get, and what serve, eval and the designer prompt do differently for it. Each domain is
one file that builds its record and calls :func:`register_domain` (the built-ins: ``metaagent/domains/``). The
rooms that branch on a task's domain (data, workflow, rewards, rollout, eval, serve) look it up with
:func:`get_domain`; none of them names a domain.

Domains are a :class:`metaagent.registry.Registry`, :data:`DOMAINS`, the table style of every extension point.
Lookup order: the built-in domains (the package :mod:`metaagent.domains`, imported on the first lookup by its
name, the way a plugin is found: a lower room never imports it), the modules named in the environment variable
:data:`PLUGINS_ENV` (comma-separated, e.g. ``METAAGENT_DOMAINS=mypkg.arith``), whose import registers more,
and an installed distribution's entry points of the group ``metaagent.domains`` (loaded on the first lookup
of their name). To add a domain: write a module that calls ``register_domain(Domain(name=..., ...))`` and
import it before the tasks are built, name it in ``METAAGENT_DOMAINS`` so every command (``train-metaagent``,
...) loads it, or install it with an entry point (``arith = "my_package.arith:ARITH"``). The module also owns
the domain's data (``metaagent.data.register_source``: a source is looked up after the plugins are loaded) and
its settings (``Domain.settings``: the config section ``reward.domains.<name>``).

A domain's R_correct can also be a plain Python function ``reward(task, answer) -> float`` in [0, 1]
(TRL-style), registered for it in :data:`REWARDS` (:func:`register_reward`, or a ``module:function`` spec in
``data.rewards`` / ``metaagent-eval --rewards``); the scorer of the rewards room runs it in place of the
domain's ``score``, in a helper process under a deadline (:mod:`metaagent.rewards.task_reward`).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from metaagent.errors import MetaAgentError
from metaagent.lazy import import_file
from metaagent.records import Execution
from metaagent.registry import Registry

# The members take the higher rooms' own types, which this floor does not import: Task (metaagent.data.tasks),
# RewardConfig (metaagent.rewards.score).
Task = RewardConfig = Any

BUILTIN = "metaagent.domains"  # the package whose import registers math, code, qa and plan
PLUGINS_ENV = "METAAGENT_DOMAINS"  # more domain modules to import, comma-separated


class DomainError(MetaAgentError, ValueError):
    """An unknown domain, or a domain registered twice; the message names the registered ones."""


@dataclass
class Verdict:
    """What a domain's scorer found for one submitted answer.

    ``correct`` is R_correct in [0, 1] (None with ``error``: it could not be computed, e.g. a checker timeout);
    ``details`` go into ``RewardRecord.details[<domain>]``-style keys as the scorer names them; ``shortcuts``
    are the shortcut classes the answer tried (:mod:`metaagent.rewards.shortcuts`); ``error_kind`` counts the
    error in ``reward/errors/<kind>``.
    """

    correct: float | None
    details: dict[str, Any] = field(default_factory=dict)
    shortcuts: tuple[str, ...] = ()
    error_kind: str | None = None
    error: str | None = None


def no_tools(task: Task) -> dict[str, Callable[..., str]]:
    return {}


MAX_KEY_CHARS = 64  # voting keys longer than this are shortened (serve shows them in `votes`)


def short_key(key: str) -> str:
    """``key``, or for a long one a readable head plus a hash (keys of different texts stay distinct)."""
    if len(key) > MAX_KEY_CHARS:
        key = key[: MAX_KEY_CHARS - 14] + "~sha1:" + hashlib.sha1(key.encode()).hexdigest()[:8]
    return key


def text_key(text: str) -> str:
    """The voting key of plain text: whitespace removed, shortened (:func:`short_key`)."""
    return short_key(re.sub(r"\s+", "", text) or text.strip())


@dataclass(frozen=True)
class Domain:
    """One task domain. Only ``name``, ``reference``, ``has_reference``, ``score`` and ``solution_format`` are
    required; the rest have the plain defaults (no extra tools, no majority vote, no prompt hint)."""

    name: str
    #: what a scored task carries, for messages ("gold answer", "tests"): "task 'x' has no <reference>"
    reference: str
    #: the task carries its reference (gold answer, tests, environment): it can be scored
    has_reference: Callable[[Task], bool]
    #: R_correct of a submitted answer: ``score(task, execution, reward_config) -> Verdict``
    score: Callable[[Task, Execution, RewardConfig], Verdict]
    #: solution formatting in [0, 1] of a non-empty answer: ``solution_format(answer, fence_languages)``
    solution_format: Callable[[str, tuple[str, ...]], float]
    #: what a task needs to be built outside the ``adhoc`` split (default: ``has_reference``)
    valid: Callable[[Task], bool] | None = None
    #: how the validation error names the missing reference ("a gold 'answer'")
    needs: str = ""
    #: the tools a task's scripts get besides run_tests / run_program (fresh per execution)
    tools: Callable[[Task], dict[str, Callable[..., str]]] = no_tools
    #: their names (the checker of frozen designs allows them without a task at hand)
    tool_names: tuple[str, ...] = ()
    #: serve's ``majority``: the voting key of an answer (answers with equal keys are one group)
    answer_key: Callable[[str], str] = text_key
    #: eval reports maj@k for this domain: the majority vote over the samples' ``answer_key``
    votes: bool = False
    #: the designer prompt's sentence on the final answer ("Task domain: math. <hint>"); kept with
    #: ``rollout.domain_hint: off`` (only "Task domain: math." goes), so it must not name the domain
    answer_hint: str = ""
    #: the single-agent baseline's frozen script (eval method ``sa``); None: no baseline for this domain
    solo_script: str | None = None
    #: eval's ``fixed:<template>`` on a task of this domain: (template written for another domain, this domain's
    #: version of the same structure) pairs, e.g. ("single_math", "single_code")
    template_twins: tuple[tuple[str, str], ...] = ()
    #: answers are programs run on the task's tests: training on it needs an isolation layer, and distillation
    #: words its examples as program tasks (the task text is the coder's message)
    runs_code: bool = False
    #: the final answer is a ``\boxed{}`` value checked against a gold ``answer`` (distillation's boxed examples)
    boxed_answer: bool = False
    #: the domain's own settings: a ``Checked`` dataclass (one comment a field) whose fields are its section
    #: ``reward.domains.<name>`` of the reward config; its scorer reads ``config.domain_settings(name)``
    #: (e.g. math's ``MathSettings``: ``reward.domains.math.final_form``). None: no settings of its own
    settings: type | None = None
    #: a task file's row fields for this domain (docs/guide/own-tasks.md: ``{"question", "answer"}`` for an
    #: answer domain) -> where each goes in the Task: ``answer``, ``tests`` or ``metadata.<key>``; the first
    #: is the reference a row must carry (:mod:`metaagent.data.files`)
    row_fields: tuple[tuple[str, str], ...] = (("answer", "answer"),)
    #: ``metaagent-serve`` accepts a request naming this domain (its text alone is a whole task)
    served: bool = False
    #: serve's guess for a request without a domain: True when the text is a task of this domain
    looks_like: Callable[[str], bool] | None = None
    #: serve's guess when no served domain's ``looks_like`` matches (one served domain sets it)
    guess_default: bool = False

    def is_valid(self, task: Task) -> bool:
        return (self.valid or self.has_reference)(task)

    def twin(self, template: str) -> str | None:
        """This domain's version of ``template`` (a template written for another domain), or None."""
        return dict(self.template_twins).get(template)


#: ``reward(task, answer) -> float`` in [0, 1]: a plain Python function as a domain's R_correct (TRL-style)
RewardFn = Callable[[Task, str], float]
REWARDS: Registry[RewardFn] = Registry("task reward", DomainError)  # domain name -> its registered reward


#: the ``sys.modules`` names of reward modules imported from a ``.py`` file (:func:`import_reward_module`)
FILE_MODULE_PREFIX = "metaagent_reward_"


def register_reward(domain: str, fn: RewardFn | None = None) -> Any:
    """Register ``fn(task, answer) -> float`` as the R_correct of ``domain``'s tasks, in place of the domain's
    scorer (its format reward stays): ``register_reward("math", fn)`` or ``@register_reward("math")``. The
    value must be a number in [0, 1]; an exception, another value or missing the deadline
    ``reward.task_reward_timeout_s`` is a reward error, counted, never a 0. It runs in a helper process on
    copies of the task and answer (:mod:`metaagent.rewards.task_reward`)."""
    get_domain(domain)  # an unknown domain is an error naming the registered ones
    return REWARDS.register(domain) if fn is None else REWARDS.register(domain)(fn)


def load_reward(spec: str) -> RewardFn:
    """The function a ``module:function`` spec names: an importable module (``my_rewards:exact_match``) or a
    Python file (``my_rewards.py:exact_match``, relative to the working directory; imported once)."""
    module, _, name = spec.rpartition(":")
    if not module or not name:
        raise DomainError(f"reward {spec!r} must look like module:function, e.g. my_rewards.py:exact_match")
    try:
        loaded = import_reward_module(module)
    except Exception as e:  # noqa: BLE001 - the user's module (a missing file, a syntax error): one line
        raise DomainError(f"reward {spec!r}: cannot import {module!r} ({type(e).__name__}: {e})") from None
    fn = getattr(loaded, name, None)
    if fn is None:
        raise DomainError(f"reward {spec!r}: module {module!r} has no {name!r}")
    if not callable(fn):
        raise DomainError(f"reward {spec!r} is not a function")
    return fn


def import_reward_module(module: str) -> Any:
    """``module`` imported by name, or a ``.py`` file imported from its path (once: sys.modules keeps it, under
    :data:`FILE_MODULE_PREFIX` and a hash of the absolute path, so every process names one file alike)."""
    if not module.endswith(".py"):
        return importlib.import_module(module)
    path = os.path.abspath(module)
    return import_file(path, FILE_MODULE_PREFIX + hashlib.sha1(path.encode()).hexdigest()[:12])


def extend_path(entries: Iterable[str]) -> None:
    """Append to ``sys.path`` each of ``entries`` (another process's search path, where its rewards' modules
    are found) that it lacks."""
    for entry in entries:
        if entry not in sys.path:
            sys.path.append(entry)


def use_rewards(specs: Mapping[str, str]) -> None:
    """Register each ``domain: "module:function"`` of a config's rewards (:func:`register_reward`)."""
    for domain, spec in specs.items():
        register_reward(domain, load_reward(spec))


#: domain name -> its record. Built-ins: :data:`BUILTIN`; plugins: an installed distribution's entry point
#: of the group ``metaagent.domains`` (``arith = "my_package.arith:ARITH"``, the record its module
#: registers), or a module named in :data:`PLUGINS_ENV`
DOMAINS: Registry[Domain] = Registry("domain", DomainError, group="metaagent.domains")
_loaded: set[str] = set()  # the modules of BUILTIN and PLUGINS_ENV imported so far
_lock = threading.RLock()


def register_domain(domain: Domain) -> Domain:
    """Register ``domain`` under its name (once: another record under a registered name is an error)."""
    if not isinstance(domain, Domain) or not domain.name:
        raise DomainError(f"register_domain takes a Domain with a non-empty name, got {domain!r}")
    with _lock:
        old = DOMAINS.loaded(domain.name)
        if old is not None and old is not domain:
            raise DomainError(f"domain {domain.name!r} is already registered; pick another name")
        DOMAINS.register(domain.name)(domain)
    return domain


def _load_plugins() -> None:
    """Import the built-in domains and the modules of :data:`PLUGINS_ENV` (each once)."""
    names = [BUILTIN, *(m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip())]
    with _lock:
        for module in names:
            if module in _loaded:
                continue
            _loaded.add(module)
            try:
                importlib.import_module(module)
            except ImportError as e:
                _loaded.discard(module)
                raise DomainError(f"cannot import domain module {module!r} (from {PLUGINS_ENV}): {e}") from e


def _entry(name: str) -> Domain:
    """The domain ``name`` from :data:`DOMAINS` (an entry point's loaded now): a Domain of that name."""
    found = DOMAINS.get(name)
    if not isinstance(found, Domain) or found.name != name:
        raise DomainError(
            f"the entry point {name!r} of group {DOMAINS.group} must name a Domain whose name is {name!r}, "
            f"got {getattr(found, 'name', found)!r}"
        )
    return found


def domains() -> Mapping[str, Domain]:
    """Every registered domain by name (built-ins and plugins loaded)."""
    _load_plugins()
    return {name: _entry(name) for name in DOMAINS.names()}


def domain_names() -> tuple[str, ...]:
    """Every registered domain's name, sorted (an installed plugin's listed without importing it)."""
    _load_plugins()
    return tuple(DOMAINS.names())


def get_domain(name: str) -> Domain:
    """The domain registered as ``name``; the error names the registered ones and how to add one."""
    found = DOMAINS.loaded(name)
    if found is not None:
        return found
    _load_plugins()
    if name in DOMAINS:
        return _entry(name)
    raise DomainError(
        f"unknown domain {name!r}; registered: {list(domain_names())}. To add one, call "
        f"metaagent.domain.register_domain(Domain(...)) in a module and name it in {PLUGINS_ENV}, "
        f"or install it as an entry point of the group {DOMAINS.group}"
    )


def served_domains() -> tuple[str, ...]:
    """The domains ``metaagent-serve`` accepts by name (``Domain.served``), sorted."""
    return tuple(name for name, d in sorted(domains().items()) if d.served)


def guess_domain(text: str) -> str:
    """The served domain a request without one is taken to be: the first (by name) whose ``looks_like`` matches
    ``text``, else the one marked ``guess_default``."""
    served = [d for _, d in sorted(domains().items()) if d.served]
    for d in served:
        if d.looks_like is not None and d.looks_like(text):
            return d.name
    fallback = [d.name for d in served if d.guess_default]
    if len(fallback) != 1:
        raise DomainError(f"exactly one served domain must set guess_default, found {fallback}")
    return fallback[0]


def domain_tool_names() -> tuple[str, ...]:
    """The tools any registered domain adds, in domain order (for checking scripts without a task)."""
    out: list[str] = []
    for d in domains().values():
        out += [t for t in d.tool_names if t not in out]
    return tuple(out)
