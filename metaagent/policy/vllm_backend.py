"""vLLM offline-engine backend (GPU only; ``pip install metaagent[gpu]``).

Thin by design: vLLM does the batching, KV paging and sampling. Prompts are rendered with the model's own
chat template here (so ``prompt_ids`` are exactly what the engine sees) and passed as token-id prompts to
``LLM.generate``; each request gets ``SamplingParams(logprobs=0)``, which returns the log-prob of the
sampled token only.

What only a GPU run can confirm (nothing here can run on this CPU-only project machine):

- Log-prob semantics. vLLM reports the *raw* model distribution by default (``logprobs_mode=
  "raw_logprobs"``: ``log_softmax(logits)``, temperature ignored). The contract in
  :mod:`metaagent.policy.base` is ``log_softmax(logits / T)``, so the engine is built with
  ``logprobs_mode="processed_logprobs"`` (after temperature; also after top-k/top-p, which is why training
  must use ``top_p=1, top_k=0``, where both modes agree with the contract). vLLM versions without the
  ``logprobs_mode`` engine argument (< 0.10.2) only give raw log-probs; this class then refuses
  temperatures other than 0 and 1 instead of recording wrong pi_old values.
- That ``token_ids`` end with the EOS token when the model stopped on it, and that vLLM's seeded sampling
  is batch-independent (it is documented per-request).
- The fp32 agreement of these log-probs with the trainer's forward pass (bf16 kernels differ; verl's
  rollout-correction handles the gap on GPU).

Weight updates: this class serves the weights it was built with (evaluation, distillation, serving). RL
training on GPU goes through the verl backend, which syncs weights into its own vLLM servers.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from .base import ChatRequest, Completion, Policy, PolicyError, RequestError
from .chat import chat_prompt_ids, resolve_chat_template_kwargs
from .models import ALIASES, resolve_model

PROCESSED_LOGPROBS = "processed_logprobs"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise PolicyError(
            "the 'vllm' backend needs the vllm package and a GPU: `pip install 'metaagent[gpu]'` "
            "(or `pip install vllm`). On a CPU-only machine use backend 'hf'"
        ) from e
    return vllm


class VLLMPolicy(Policy):
    """Generate with ``vllm.LLM``.

    Args:
        model: an alias (``"embedded"``, ``"tiny"``: converted to HF format first) or a local HF directory.
        engine_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization=0.5``, ``dtype="bfloat16"``,
            ``max_model_len=8192``). ``logprobs_mode`` defaults to ``"processed_logprobs"``.
    """

    def __init__(
        self, model: str, *, chat_template_kwargs: dict[str, Any] | None = None, **engine_kwargs: Any
    ) -> None:
        super().__init__()
        vllm = _import_vllm()

        path = resolve_model(model) if model in ALIASES else model
        self.model_id = str(model)
        accepted = _engine_arg_names(vllm)
        self.scaled_logprobs = "logprobs_mode" in accepted if accepted is not None else True
        if self.scaled_logprobs:
            engine_kwargs.setdefault("logprobs_mode", PROCESSED_LOGPROBS)
        elif "logprobs_mode" in engine_kwargs:
            raise PolicyError(
                f"this vllm ({vllm.__version__}) has no logprobs_mode engine argument; upgrade vllm"
            )
        self.scaled_logprobs = (
            self.scaled_logprobs and engine_kwargs.get("logprobs_mode") == PROCESSED_LOGPROBS
        )
        self.llm = vllm.LLM(model=path, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.chat_template_kwargs = resolve_chat_template_kwargs(self.tokenizer, chat_template_kwargs)
        self._vllm = vllm
        self._lock = threading.Lock()

    def encode(self, request: ChatRequest) -> list[int]:
        return chat_prompt_ids(self.tokenizer, request.messages, self.chat_template_kwargs)

    def check_request(self, request: ChatRequest) -> None:
        t = request.sampling.temperature
        if not self.scaled_logprobs and t not in (0.0, 1.0):
            raise RequestError(
                f"temperature={t}: this vLLM engine reports unscaled log-probs, which equal the contract's "
                "log_softmax(logits / T) only at T = 0 or 1; use T=1 (or upgrade vllm and keep "
                f"logprobs_mode={PROCESSED_LOGPROBS!r})"
            )

    def _sampling_params(self, request: ChatRequest) -> Any:
        s = request.sampling
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,  # -1 = whole vocabulary in every vLLM version
            stop=list(s.stop) or None,
            seed=s.seed,
            logprobs=0,  # the sampled token's log-prob only
            include_stop_str_in_output=True,  # contract: text contains the stop string
            skip_special_tokens=True,
        )

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        for r in requests:
            self.check_request(r)
        prompts = [{"prompt_token_ids": self.encode(r)} for r in requests]
        params = [self._sampling_params(r) for r in requests]
        with self._lock:
            outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        return [self._completion(p["prompt_token_ids"], o) for p, o in zip(prompts, outputs)]

    def _completion(self, prompt_ids: list[int], output: Any) -> Completion:
        out = output.outputs[0]
        ids = [int(t) for t in out.token_ids]
        if out.logprobs is None or len(out.logprobs) != len(ids):
            raise PolicyError(f"vLLM returned {len(out.logprobs or [])} log-probs for {len(ids)} tokens")
        logprobs = [float(step[tok].logprob) for step, tok in zip(out.logprobs, ids)]
        return Completion(
            text=out.text,
            prompt_ids=list(prompt_ids),
            response_ids=ids,
            logprobs=logprobs,
            finish_reason="length" if out.finish_reason == "length" else "stop",
            model=self.model_id,
        )

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None and hasattr(llm, "shutdown"):  # newer vllm releases engine processes explicitly
            llm.shutdown()


def _engine_arg_names(vllm: Any) -> set[str] | None:
    """Field names of vllm's EngineArgs, or None when they cannot be listed."""
    engine_args = getattr(vllm, "EngineArgs", None)
    if engine_args is None:
        return None
    fields = getattr(engine_args, "__dataclass_fields__", None)
    if fields:
        return set(fields)
    try:
        return set(inspect.signature(engine_args).parameters)
    except (TypeError, ValueError):
        return None
