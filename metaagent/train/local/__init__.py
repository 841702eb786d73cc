"""The local backend: one process, CPU or one GPU (:class:`.backend.LocalBackend`).

Modules: :mod:`.backend` (the :class:`metaagent.train.backend.Backend` of this process), :mod:`.models` (the
physical models, their updaters and critics), :mod:`.update` (``PolicyUpdater``: Eq. 2-3), :mod:`.critic`
(value models of GAE), :mod:`.lora` (LoRA RL adapters).
"""

from .backend import LocalBackend

__all__ = ["LocalBackend"]
