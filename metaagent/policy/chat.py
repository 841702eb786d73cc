"""Rendering chat messages to prompt token ids: the one place every backend, the trainer, SFT and serving
call, so a model sees the same prompt in rollout, training, distillation, serving and evaluation.

``chat_template_kwargs`` are extra variables of the model's chat template. ``None`` means the default for
that template: ``{"enable_thinking": False}`` when the template reads ``enable_thinking`` (Qwen3: the
paper trains and evaluates in no-thinking mode, §4.1), else nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NO_THINKING = {"enable_thinking": False}


def default_chat_template_kwargs(tokenizer: Any) -> dict[str, Any]:
    """``{"enable_thinking": False}`` for templates that know the switch, else ``{}``."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):  # a dict of named templates
        template = " ".join(str(t) for t in dict(template).values())
    return dict(NO_THINKING) if "enable_thinking" in template else {}


def resolve_chat_template_kwargs(tokenizer: Any, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The kwargs to use: the given ones, or the template's default when None."""
    return default_chat_template_kwargs(tokenizer) if kwargs is None else dict(kwargs)


def chat_prompt_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, str]],
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of ``messages`` through the chat template (plus the assistant's generation prompt)."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=False,
        **resolve_chat_template_kwargs(tokenizer, chat_template_kwargs),
    )
    if hasattr(ids, "keys"):  # a BatchEncoding in some transformers versions
        ids = ids["input_ids"]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]
