"""SFT data: chat ``messages`` JSONL -> token ids, tokenised exactly as the rollout tokenises.

An example's prompt is every message but the last, through the chat template with the generation prompt
(what :class:`metaagent.policy.hf.HFPolicy` feeds the model); its target is the last (assistant) message's
content followed by the end-of-turn token (``<|im_end|>`` for ChatML models such as SmolLM2)::

    prompt_ids   = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True)
    response_ids = tokenizer.encode(messages[-1]["content"], add_special_tokens=False) + [<|im_end|>]

so the loss covers exactly the assistant tokens the policy would sample, and nothing of the prompt.
:func:`check_tokenization` verifies that ``prompt_ids + response_ids`` spell what the chat template makes
of the whole conversation. Each example becomes a :class:`metaagent.learn.samples.Sample`, so the SFT trainer
shares the RL trainer's micro-batching, collation and chunked log-prob code.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from metaagent.data.chat import ExampleError, validate_example
from metaagent.errors import MetaAgentError
from metaagent.learn.samples import Sample, SampleSet
from metaagent.policy.chat import chat_prompt_ids
from metaagent.records import EXECUTOR, ROLES

#: end-of-turn tokens, in order of preference, that close an assistant reply
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
KINDS = ROLES  # an example trains the designer or an executor call


class SFTDataError(MetaAgentError, ValueError):
    """SFT data cannot be read or tokenised; the message names the file, line and fix."""


def read_chat_jsonl(paths: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """All examples of the given JSONL files, validated; ``kind`` defaults to "executor" when absent."""
    if not paths:
        raise SFTDataError(
            "no SFT data files given; pass e.g. --data sft_data/designer.jsonl sft_data/executor.jsonl"
        )
    out: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise SFTDataError(f"SFT data file {p} does not exist")
        with open(p, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SFTDataError(
                        f"{where} is not valid JSON ({e}); each line must be one example"
                    ) from None
                try:
                    messages = validate_example(row, where)
                except ExampleError as e:
                    raise SFTDataError(str(e)) from None
                kind = row.get("kind", EXECUTOR)
                if kind not in KINDS:
                    raise SFTDataError(f"{where}: 'kind' must be one of {KINDS}, got {kind!r}")
                out.append({**row, "messages": messages, "kind": kind, "_where": where})
    if not out:
        raise SFTDataError(f"the SFT data files {[str(p) for p in paths]} hold no examples")
    return out


def data_fingerprint(paths: Sequence[str | os.PathLike[str]]) -> str:
    """Content hash of the data files (a resumed run must train on the same data)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(Path(path).read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that ends an assistant turn in this tokenizer's chat format."""
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab:
            return int(vocab[token])
    if tokenizer.eos_token_id is None:
        raise SFTDataError("the tokenizer has no end-of-turn token and no eos token; set tokenizer.eos_token")
    return int(tokenizer.eos_token_id)


def _ids(value: Any) -> list[int]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        value = value["input_ids"]
    if value and isinstance(value[0], list):
        value = value[0]
    return [int(i) for i in value]


def prompt_ids(
    tokenizer: Any, messages: Sequence[dict[str, str]], chat_template_kwargs: dict[str, Any] | None = None
) -> list[int]:
    """The ids the policy feeds the model for ``messages`` (chat template + generation prompt), exactly as
    the rollout renders them (:func:`metaagent.policy.chat.chat_prompt_ids`)."""
    return chat_prompt_ids(tokenizer, messages, chat_template_kwargs)


def encode_example(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    *,
    eot_id: int | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> tuple[list[int], list[int]]:
    """``(prompt_ids, response_ids)`` of a conversation whose last message is the assistant's target."""
    if not messages or messages[-1]["role"] != "assistant":
        raise SFTDataError("the last message of an SFT example must be the assistant's reply")
    eot = end_of_turn_id(tokenizer) if eot_id is None else eot_id
    response = tokenizer.encode(messages[-1]["content"], add_special_tokens=False)
    return prompt_ids(tokenizer, messages[:-1], chat_template_kwargs), [*map(int, response), eot]


def check_tokenization(tokenizer: Any, messages: Sequence[dict[str, str]]) -> bool:
    """Whether ``prompt_ids + response_ids`` spell exactly the chat template's text of the whole conversation.

    Token for token they also equal the template tokenised in one piece, except when the reply starts with
    whitespace: the template would merge it with the newline after ``<|im_start|>assistant``, while the
    policy sees that newline as the prompt's last token and samples the reply after it, which is what
    :func:`encode_example` reproduces.
    """
    prompt, response = encode_example(tokenizer, messages)
    text = tokenizer.apply_chat_template(list(messages), tokenize=False)
    ours = tokenizer.decode(prompt + response, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return text.startswith(ours) and not text[len(ours) :].strip()


def build_sft_samples(
    examples: Iterable[dict[str, Any]],
    tokenizer: Any,
    *,
    max_len: int | None = None,
    kinds: Iterable[str] = KINDS,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> SampleSet:
    """One :class:`Sample` per example (advantage 1, temperature 1, old log-probs unused).

    An example longer than ``max_len`` tokens (prompt + response) is dropped and counted, never cut: a cut
    prompt is a different context and a cut response would train a reply that never ends.

    Counts in ``.metrics``: ``sft/examples/<kind>``, ``sft/response_tokens/<kind>``, ``sft/dropped_long``,
    ``sft/dropped_kind``.
    """
    wanted = frozenset(kinds)
    eot = end_of_turn_id(tokenizer)
    counts: Counter[str] = Counter()
    out: list[Sample] = []
    for i, ex in enumerate(examples):
        kind = ex.get("kind", EXECUTOR)
        if kind not in wanted:
            counts["sft/dropped_kind"] += 1
            continue
        prompt, response = encode_example(
            tokenizer, ex["messages"], eot_id=eot, chat_template_kwargs=chat_template_kwargs
        )
        if max_len is not None and len(prompt) + len(response) > max_len:
            counts["sft/dropped_long"] += 1
            continue
        counts[f"sft/examples/{kind}"] += 1
        counts[f"sft/response_tokens/{kind}"] += len(response)
        out.append(
            Sample(
                role=kind,
                prompt_ids=prompt,
                response_ids=response,
                old_logprobs=[0.0] * len(response),
                advantage=1.0,
                temperature=1.0,
                agent=str(ex.get("agent", "")),
                key=(i,),
                task_id=str(ex.get("task_id", "")),
            )
        )
    if not out:
        raise SFTDataError(
            f"no example is left to train on ({dict(counts)}); raise --max-len or check --kinds and the data"
        )
    return SampleSet(out, {k: float(v) for k, v in sorted(counts.items())})
