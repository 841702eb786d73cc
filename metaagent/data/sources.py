"""The table of data sources: every task set ``DatasetSpec(source=...)`` can name, built-in or a domain's own.

A :class:`Source` says where a task set lives (a hub repository, or a reader of package-local rows) and how
its rows become tasks (its ``mapper``). :func:`register_source` adds one to :data:`SOURCES`; the built-ins
are registered by :mod:`metaagent.data.loaders`, a domain's own by its module (``METAAGENT_DOMAINS``), e.g.
a task file shipped beside it::

    register_source(task_file_source("arith", Path(__file__).with_name("arith_tasks.jsonl"), domain="arith"))

(:func:`metaagent.data.files.task_file_source`). Lookups go through
:func:`metaagent.data.loaders.get_source` and :func:`~metaagent.data.loaders.source_names`, which load the
plugin domains first, so a plugin's sources are known wherever a name is checked, and which give every
registered environment its source of generated boards (:func:`metaagent.data.plan.plan_source`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metaagent.registry import Registry

from .errors import DataError
from .tasks import Task

if TYPE_CHECKING:
    from .loaders import DatasetSpec

PLACED_NAMES = ("{split}.jsonl", "{split}.json", "{split}.parquet")  # a placed copy's file names, in order


@dataclass(frozen=True)
class Source:
    """A known dataset: where it lives (the hub, or its own ``rows`` reader) and how its rows become tasks."""

    name: str
    domain: str  # the domain of its tasks ("math", "code", ...; "math+code" for a mixed set, "any": the file's)
    hub: str | None  # hub repository, or None for package-local sources (they need ``rows``)
    default_split: str
    mapper: Callable[[Mapping[str, Any], int, DatasetSpec], Task]
    subset: str | None = None  # hub config name
    hub_files: dict[str, str] | None = None  # split -> file in the hub repo (repos without a builder config)
    note: str = ""
    shuffle_seed: int | None = None  # rows served in this seeded order (each keeps its line as ``index``)
    placed_names: tuple[str, ...] = PLACED_NAMES  # file names of a placed copy, ``{split}`` filled in
    #: a package-local source's rows: ``rows(spec) -> iterable of rows`` for its ``mapper`` (None: the hub)
    rows: Callable[[DatasetSpec], Iterable[Any]] | None = None
    #: ``rows`` reads ``spec.path`` itself (the ``file`` source), instead of the generic local-file reader
    reads_path: bool = False

    def __post_init__(self) -> None:
        if self.hub is None and self.rows is None:
            raise DataError(f"source {self.name!r} has neither a hub repository nor a rows reader; give one")

    @property
    def offline(self) -> bool:
        """Its tasks need neither a local copy nor the hub (package-local rows)."""
        return self.hub is None


#: name -> Source; plugins: an installed distribution's entry points of the group ``metaagent.sources`` (a
#: ``module:SOURCE`` naming a Source), besides a domain module's own ``register_source`` calls
SOURCES: Registry[Source] = Registry("dataset source", DataError, group="metaagent.sources")


def register_source(source: Source) -> Source:
    """Add ``source`` to :data:`SOURCES` under its name (a second, different source of that name is an error)."""
    if not isinstance(source, Source):
        raise DataError(f"register_source takes a metaagent.data.sources.Source, got {source!r}")
    return SOURCES.register(source.name)(source)
