"""Task records, dataset loaders, the mixture sampler and the bundled offline task set."""

from .tasks import DOMAINS, Task, TaskError

__all__ = ["DOMAINS", "Task", "TaskError"]
