"""The built-in task domains, one file each (``math``, ``code``, ``qa``, ``plan``); importing this package
registers them (:mod:`metaagent.domain`). A domain's file holds what a task needs, its scorer, format rule and
settings, the tools its scripts get, its voting key (serve, eval's maj@k), the designer's answer hint and the
``sa`` baseline.

A new domain is one more file like these (plus its tests): build a :class:`metaagent.domain.Domain` and call
:func:`metaagent.domain.register_domain`; the same file registers the domain's data sources
(:func:`metaagent.data.register_source`), its settings (``Domain.settings``, the config section
``reward.domains.<name>``) and its planning environments (:func:`metaagent.envs.register_env`). A domain outside
the package is loaded by naming its module in ``METAAGENT_DOMAINS``, or by an installed distribution's entry
point of the group ``metaagent.domains`` (example: ``tests/domains/arith_domain.py`` with its task file
``arith_tasks.jsonl``).
"""

from . import code, math, plan, qa

__all__ = ["code", "math", "plan", "qa"]
