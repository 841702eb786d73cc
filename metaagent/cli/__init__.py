"""Command-line entry points (``metaagent/__init__.py`` sets passive OpenMP waiting before torch loads)."""
