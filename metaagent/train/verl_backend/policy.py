"""A :class:`~metaagent.policy.base.Policy` on verl's vLLM servers: token ids in, token ids and log-probs out.

The designer calls and every sandboxed agent call of the rollout engine go through this class to the vLLM
replicas verl launched for a physical model. It talks to them with verl's own ``LLMServerClient`` (least-
in-flight load balancing over the replicas, sticky sessions), token-in/token-out:

1. the chat messages are rendered with the model's chat template here (``chat_template_kwargs``, e.g.
   ``enable_thinking=False`` for Qwen3), so ``Completion.prompt_ids`` are exactly what the server saw;
2. ``client.generate(prompt_ids=..., sampling_params=...)`` returns verl's ``TokenOutput`` with the sampled
   ``token_ids`` and their ``log_probs``; verl starts vLLM with ``logprobs_mode=processed_logprobs``, i.e.
   ``log_softmax(logits / T)`` as the Policy contract requires;
3. the request id is the request's ``affinity`` key (step, task, design, agent; see
   :func:`~metaagent.policy.base.team_affinity`) when it has one, a fresh uuid otherwise: verl's load
   balancer is sticky on the request id, so the designer prompts of a task and a design's calls of one agent
   go to the same vLLM replica and hit its prefix cache (``enable_prefix_caching``). verl hands vLLM a fresh
   uuid per call itself (unless ``rollout.full_determinism``, which metaagent does not set);
4. the text is decoded here; ``finish_reason`` is ``stop`` when the last token is an end-of-turn token or
   the text contains a stop string, ``length`` when the token budget ran out.

The client is asynchronous (Ray actor calls); ``generate`` may be called from many threads (the engine
runs B*M*N executions at once), so requests are submitted to one event loop running in a daemon thread.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from metaagent.policy.base import ChatRequest, Completion, Policy, PolicyError, RequestError
from metaagent.policy.chat import chat_prompt_ids, resolve_chat_template_kwargs

END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


class ServerPolicy(Policy):
    """Generation on verl's vLLM servers (module docstring).

    Args:
        client: verl's ``LLMServerClient`` (``LLMServerManager.get_client()``), or anything with
            ``async generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput``.
        tokenizer: the model's Hugging Face tokenizer (chat template, decoding, end-of-turn ids).
        model_id: recorded in every completion (the model path).
        max_model_len: the servers' context length; a prompt leaving no room to generate is refused.
        chat_template_kwargs: extra ``apply_chat_template`` arguments.
        timeout_s: wall-clock limit of one request.
    """

    def __init__(
        self,
        client: Any,
        tokenizer: Any,
        *,
        model_id: str,
        max_model_len: int,
        chat_template_kwargs: dict[str, Any] | None = None,
        timeout_s: float = 3600.0,
    ) -> None:
        super().__init__()
        if getattr(tokenizer, "chat_template", None) is None:
            raise PolicyError(
                f"the tokenizer of {model_id} has no chat template; the verl backend needs a chat model"
            )
        if max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
        self.client = client
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.max_model_len = int(max_model_len)
        self.chat_template_kwargs = resolve_chat_template_kwargs(tokenizer, chat_template_kwargs)
        self.timeout_s = float(timeout_s)
        self.stop_token_ids = _stop_token_ids(tokenizer)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="metaagent-verl-client", daemon=True
        )
        self._thread.start()
        self._closed = False

    # ------------------------------------------------------------------------------------------- requests
    def encode(self, request: ChatRequest) -> list[int]:
        return chat_prompt_ids(self.tokenizer, request.messages, self.chat_template_kwargs)

    def max_tokens(self, request: ChatRequest, prompt_ids: list[int]) -> int:
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise RequestError(
                f"the prompt has {len(prompt_ids)} tokens and leaves no room to generate within the servers' "
                f"max_model_len={self.max_model_len}; raise optim.max_prompt_tokens or shorten the messages"
            )
        return min(request.sampling.max_tokens, room)

    def sampling_params(self, request: ChatRequest, max_tokens: int) -> dict[str, Any]:
        s = request.sampling
        params: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k if s.top_k > 0 else -1,  # -1 = whole vocabulary in every vLLM version
            "logprobs": True,  # verl asks vLLM for the sampled token's log-prob
            "include_stop_str_in_output": True,
        }
        if s.stop:
            params["stop"] = list(s.stop)
        if s.seed is not None:
            params["seed"] = s.seed
        return params

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if self._closed:
            raise PolicyError("this ServerPolicy is closed")
        prepared = []
        for r in requests:
            prompt = self.encode(r)
            budget = self.max_tokens(r, prompt)
            prepared.append((r, prompt, budget))
        futures: list[Future] = [
            asyncio.run_coroutine_threadsafe(
                self.client.generate(
                    request_id(r), prompt_ids=prompt, sampling_params=self.sampling_params(r, budget)
                ),
                self._loop,
            )
            for r, prompt, budget in prepared
        ]
        out = []
        for (r, prompt, budget), fut in zip(prepared, futures):
            try:
                output = fut.result(timeout=self.timeout_s)
            except FutureTimeout:
                fut.cancel()
                raise PolicyError(
                    f"{self.model_id}: no answer from the vLLM servers within {self.timeout_s:.0f} s; raise "
                    "verl.request_timeout_s or check the servers' logs"
                ) from None
            except PolicyError:
                raise
            except Exception as e:  # a Ray or server failure: the engine records it on the execution
                raise PolicyError(f"{self.model_id}: the vLLM server failed: {type(e).__name__}: {e}") from e
            out.append(self._completion(r, prompt, budget, output))
        return out

    def _completion(self, request: ChatRequest, prompt: list[int], budget: int, output: Any) -> Completion:
        if getattr(output, "stop_reason", None) in ("aborted", "abort"):
            raise PolicyError(
                f"{self.model_id}: the vLLM server aborted the request (weights were being updated?)"
            )
        ids = [int(t) for t in output.token_ids]
        logprobs = output.log_probs
        if logprobs is None or len(logprobs) != len(ids):
            raise PolicyError(
                f"{self.model_id}: the server returned {len(logprobs or [])} log-probs for {len(ids)} tokens; RL needs "
                "one per token (verl's rollout.calculate_log_probs must be true)"
            )
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        stopped = (
            bool(ids) and ids[-1] in self.stop_token_ids or any(s in text for s in request.sampling.stop)
        )
        finish = "stop" if stopped or len(ids) < budget else "length"
        return Completion(
            text=text,
            prompt_ids=list(prompt),
            response_ids=ids,
            logprobs=[float(x) for x in logprobs],
            finish_reason=finish,
            model=self.model_id,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()


def request_id(request: ChatRequest) -> str:
    """The id verl routes on: the request's affinity key (sticky), or a fresh uuid."""
    return request.affinity or uuid.uuid4().hex


def _stop_token_ids(tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None:
        ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
    return frozenset(int(i) for i in ids)
