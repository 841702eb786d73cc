"""LoRA RL on the local backend (``policy.lora``): LoRA adapters (peft) on one frozen base per model path.

Every physical model key of the run (:func:`metaagent.train.local.models.model_plan`: ``policy``, or ``designer`` and
``executor``, plus ``role<i>``) becomes one adapter named after the key; keys that name the same model share
ONE base::

    weights: shared     base + {policy}                  both roles train the one adapter
    weights: separate   base + {designer, executor}      each stage trains its own role's adapter only

An :class:`AdapterSet` holds the base with its adapters (a ``PeftModel``) and switches the active adapter
under one lock: the rollout policy of a key (``HFPolicy(model_context=...)``) and its ``PolicyUpdater``
enter ``use(key)`` around every forward, so designer and executor calls on the shared base never see each
other's adapter. The updater of a key optimises only that adapter's parameters; the base has no gradient and
no AdamW state.

The reference policy of every key is the frozen base itself: :meth:`AdapterSet.reference` turns the adapters
off, so a KL, DPO or MAPPA reference holds no second copy of the model (:func:`metaagent.train.local.models.make_updaters`).

A checkpoint folder ``models/<key>/`` of a LoRA run is a peft adapter folder (``adapter_config.json`` with
``base_model_name_or_path`` = the base the run started from, ``adapter_model.safetensors``, the tokenizer);
``metaagent-export`` merges it into a full model folder, and :func:`metaagent.policy.models.resolve_model`
accepts it as ``--model`` directly (merged once into the cache).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from metaagent.errors import MetaAgentError
from metaagent.policy.models import ALIASES
from metaagent.seeding import lora_seed, seeded_torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class LoraError(MetaAgentError, ValueError):
    """An adapter cannot be built, saved or loaded; the message names the adapter and the fix."""


def peft_config(settings: Any) -> Any:
    """peft ``LoraConfig`` of the ``policy.lora`` settings (causal LM, no bias; the saved adapters name their
    base, :meth:`AdapterSet.save`)."""
    from peft import LoraConfig

    targets = settings.target_modules
    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )


def base_name(path: str) -> str:
    """What an adapter records as its base: an alias as is, a folder as an absolute path."""
    return path if path in ALIASES else str(Path(path).expanduser().resolve())


class AdapterSet:
    """One base model with one LoRA adapter per key (module docstring).

    Args:
        model: the base Hugging Face causal LM (fp32); its linear layers get LoRA layers injected in place.
        keys: adapter names, one per physical model key sharing this base.
        settings: the ``policy.lora`` section.
        base: what the saved adapters record as their base (an alias or an absolute folder).
        seed: the run's seed (``trainer.seed``): adapter ``key`` starts from the weights peft draws under
            ``lora_seed(seed, key)``, so runs with one seed start from bit-identical adapters whatever
            ran before, and other seeds (or other keys) from other ones.
    """

    def __init__(self, model: Any, keys: Sequence[str], settings: Any, base: str, *, seed: int) -> None:
        from peft import get_peft_model

        if not keys:
            raise LoraError("an adapter set needs at least one adapter name")
        self.base = base
        config = peft_config(settings)
        with seeded_torch(lora_seed(seed, keys[0])):
            self.peft = get_peft_model(model, config, adapter_name=keys[0])
        for key in keys[1:]:
            with seeded_torch(lora_seed(seed, key)):
                self.peft.add_adapter(key, copy.deepcopy(config))
        self.keys = list(keys)
        self.model = self.peft.base_model.model  # the HF model, LoRA layers inside: what rollout and updater call
        self._lock = threading.RLock()
        self.peft.set_adapter(keys[0])

    @contextlib.contextmanager
    def use(self, key: str) -> Iterator[None]:
        """Make ``key`` the active adapter for the duration (other users of the base wait)."""
        if key not in self.keys:
            raise LoraError(f"no adapter {key!r}; this base has {self.keys}")
        with self._lock:
            if self.peft.active_adapter != key:
                self.peft.set_adapter(key)
            yield

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """The frozen base for the duration: every adapter off (peft's ``PeftModel.disable_adapter``, which
        turns off all LoRA layers whatever adapter is active and re-enables exactly the active one on exit) and
        eval mode, under the lock. The base never trains, so inside this context the model computes the
        reference policy of every key on this base: the KL, DPO and MAPPA references need no loaded copy
        (TRL's ``disable_adapter`` reference, verl's ``ref_in_actor`` when ``lora_rank > 0``)."""
        with self._lock, self.peft.disable_adapter():
            was_training = self.model.training
            self.model.eval()  # like a loaded reference (eval mode): no dropout anywhere
            try:
                yield
            finally:
                self.model.train(was_training)

    def parameters(self, key: str) -> list[torch.nn.Parameter]:
        """The trainable parameters of adapter ``key`` (and nothing of the base or the other adapters)."""
        pattern = re.compile(rf"\.lora_[A-Za-z_]+\.{re.escape(key)}(\.|$)")
        params = [p for n, p in self.peft.named_parameters() if pattern.search(n)]
        if not params:
            raise LoraError(f"adapter {key!r} has no parameters; do policy.lora.target_modules match the model?")
        for p in params:
            p.requires_grad_(True)
        return params

    def state_dict(self, key: str) -> dict[str, torch.Tensor]:
        """Adapter ``key``'s weights in peft's saved-file naming (no adapter name in the keys)."""
        from peft.utils import get_peft_model_state_dict

        return get_peft_model_state_dict(self.peft, adapter_name=key)

    def save(self, key: str, out: str | os.PathLike[str]) -> Path:
        """Write adapter ``key`` as a peft adapter folder (loadable by ``PeftModel.from_pretrained``)."""
        from safetensors.torch import save_file

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        config = copy.deepcopy(self.peft.peft_config[key])
        config.base_model_name_or_path = self.base
        config.save_pretrained(str(out))
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict(key).items()}
        save_file(tensors, str(out / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        return out

    def load(self, key: str, folder: str | os.PathLike[str]) -> None:
        """Load adapter ``key``'s weights from a folder written by :meth:`save` (exactly, every tensor)."""
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(folder) / ADAPTER_WEIGHTS
        if not path.is_file():
            raise LoraError(f"{folder} has no {ADAPTER_WEIGHTS}: not an adapter checkpoint of a policy.lora run")
        saved = load_file(str(path))
        expected = self.state_dict(key)
        if set(saved) != set(expected):
            diff = sorted(set(saved) ^ set(expected))[:4]
            raise LoraError(
                f"{path} does not match adapter {key!r} (differing tensors {diff}); resume with the policy.lora "
                "settings the run was saved with"
            )
        set_peft_model_state_dict(self.peft, saved, adapter_name=key)


class AdapterHandle:
    """What :func:`metaagent.learn.checkpoint.save_checkpoint` saves for a LoRA key: ``save_pretrained`` writes
    the adapter folder."""

    def __init__(self, adapters: AdapterSet, key: str) -> None:
        self.adapters, self.key = adapters, key

    def save_pretrained(self, out: str | os.PathLike[str], **_: Any) -> None:
        self.adapters.save(self.key, out)
