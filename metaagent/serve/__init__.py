"""Serve a trained meta-agent over HTTP: a task in, a designed team out (``metaagent-serve``).

    from metaagent.serve import ServeConfig, TeamService, create_app

    service = TeamService(ServeConfig(model="embedded"))
    app = create_app(service)            # FastAPI; run it with uvicorn

Layout (as vLLM's ``entrypoints/openai``): :mod:`.protocol` (wire models), :mod:`.app` (thin routes),
:mod:`.service` (loading, admission, threads), :mod:`.team` (one team: engine, selection, outcome),
:mod:`.validation` (limits and caps), :mod:`.openai_compat` (chat requests and SSE chunks),
:mod:`.selection` (first / majority / judge), :mod:`.views` (records -> responses), :mod:`.metrics`
(Prometheus text), :mod:`.middleware` (API key, size limit, request metrics).
"""

from .app import create_app
from .config import ServeConfig
from .errors import ServeError
from .models import ServeModels, load_models
from .service import TeamService
from .team import TeamSpec

__all__ = ["ServeConfig", "ServeError", "ServeModels", "TeamService", "TeamSpec", "create_app", "load_models"]
