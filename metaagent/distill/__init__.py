"""Cold-start data (paper App. A): designer and executor SFT examples from a teacher or from templates.

    from metaagent.distill import DistillConfig, Distiller

    cfg = DistillConfig(out="sft_data/run", template_only=True, executor_model="embedded")
    with Distiller(cfg) as d:
        d.run()            # resumable: run again to continue after an interruption

Command line: ``metaagent-distill`` (see ``metaagent-distill --help``). Output files: ``designer.jsonl``
and ``executor.jsonl`` in the chat ``messages`` format (:mod:`.examples`), ``done.jsonl`` (the done-set,
:mod:`.store`), ``trees.jsonl`` (full rollout records) and ``manifest.json`` (:mod:`.manifest`).
"""

from metaagent.data.chat import ExampleError, example_id, validate_example

from .config import DistillConfig, TeacherConfig
from .examples import tree_examples
from .runner import Distiller, DistillError, DistillObserver, RunSummary, RunTotals
from .store import ExampleStore, StoreError, read_examples
from .teacher import TeacherError, build_teacher, restore_stop_tag
from .variation import Variant, choose_variant, fenced, instantiate, task_facts

__all__ = [
    "DistillConfig",
    "DistillError",
    "DistillObserver",
    "Distiller",
    "ExampleError",
    "ExampleStore",
    "RunSummary",
    "RunTotals",
    "StoreError",
    "TeacherConfig",
    "TeacherError",
    "Variant",
    "build_teacher",
    "choose_variant",
    "example_id",
    "fenced",
    "instantiate",
    "read_examples",
    "restore_stop_tag",
    "task_facts",
    "tree_examples",
    "validate_example",
]
