"""The built-in task domains, one file each; importing this package registers them (:mod:`metaagent.domain`).

A new domain is one more file like these (plus its tests): build a :class:`metaagent.domain.Domain` and call
:func:`metaagent.domain.register_domain`. A domain outside the package is loaded by naming its module in
``METAAGENT_DOMAINS``.
"""

from . import code, math, plan, qa

__all__ = ["code", "math", "plan", "qa"]
