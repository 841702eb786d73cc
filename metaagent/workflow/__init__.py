"""The workflow language: the script API a designer writes, its checker, analysis, templates (``templates.py``:
the package's bank and every registered one) and sandbox.

    from metaagent.workflow import check_script, run_script, extract_script

    script = extract_script(designer_reply)
    report = check_script(script)            # report.ok, report.errors (line, col, code, message)
    execution = run_script(script, task, policy, {"timeout_s": 10})

Names are imported lazily, so the sandbox worker (``python -m metaagent.workflow.worker``) starts without
loading libcst or the host-side modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

_EXPORTS = {
    "check_script": "checker",
    "extract_script": "extract",
    "analyze_script": "analysis",
    "api_reference": "api",
    "run_script": "sandbox",
    "SandboxPool": "sandbox",
    "SandboxError": "sandbox",
    "Limits": "limits",
    "LimitsError": "limits",
    "load_templates": "templates",
    "Template": "templates",
    "default_tools": "tools",
}

__all__ = [
    "Limits",
    "LimitsError",
    "SandboxError",
    "SandboxPool",
    "Template",
    "analyze_script",
    "api_reference",
    "check_script",
    "default_tools",
    "extract_script",
    "load_templates",
    "run_script",
]
assert sorted(__all__) == sorted(_EXPORTS)

if TYPE_CHECKING:
    from .analysis import analyze_script
    from .api import api_reference
    from .checker import check_script
    from .extract import extract_script
    from .limits import Limits, LimitsError
    from .sandbox import SandboxError, SandboxPool, run_script
    from .templates import Template, load_templates
    from .tools import default_tools


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
