"""Task records, dataset loaders, the mixture sampler and the bundled offline task set."""

from .bundled import code_references, load_bundled
from .errors import DataError
from .loaders import SOURCES, DatasetSpec, load_tasks
from .mixture import MixtureSampler
from .tasks import Task, TaskError

__all__ = [
    "SOURCES",
    "DataError",
    "DatasetSpec",
    "MixtureSampler",
    "Task",
    "TaskError",
    "code_references",
    "load_bundled",
    "load_tasks",
]
