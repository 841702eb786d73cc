"""Task records, dataset loaders, the table of data sources (a domain registers its own: ``register_source``),
the mixture sampler, the bundled offline task set and the public benchmarks shipped with their licences
(``benchmarks/``: GSM8K's test split, MBPP sanitized)."""

from .bundled import code_references, load_bundled
from .errors import DataError
from .files import task_file_source
from .loaders import DatasetSpec, get_source, load_tasks, source_names
from .mixture import MixtureSampler
from .sources import SOURCES, Source, register_source
from .tasks import Task, TaskError

__all__ = [
    "SOURCES",
    "DataError",
    "DatasetSpec",
    "MixtureSampler",
    "Source",
    "Task",
    "TaskError",
    "get_source",
    "register_source",
    "source_names",
    "task_file_source",
    "code_references",
    "load_bundled",
    "load_tasks",
]
