"""VLLMPolicy: the clear error without vllm, and the request/response mapping against vLLM's documented API.

vLLM cannot run here (no GPU, not installed); the mapping test uses a stand-in module with the documented
shapes (``LLM.generate`` -> ``RequestOutput.outputs[0].token_ids/.logprobs/.text/.finish_reason``).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass

import pytest

from metaagent.policy import ChatRequest, PolicyError, RequestError, SamplingParams
from metaagent.policy.models import load_tokenizer
from metaagent.policy.vllm_backend import VLLMPolicy


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_missing_vllm_gives_install_hint():
    with pytest.raises(PolicyError, match=r"pip install 'metaagent\[gpu\]'.*backend 'hf'"):
        VLLMPolicy("tiny")


@dataclass
class _Logprob:
    logprob: float


def _fake_vllm(with_logprobs_mode: bool = True) -> types.ModuleType:
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.test"
    tokenizer = load_tokenizer("tiny")

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    @dataclass
    class EngineArgs:
        model: str = ""
        logprobs_mode: str = "raw_logprobs"

    if not with_logprobs_mode:

        @dataclass
        class EngineArgs:
            model: str = ""

    class LLM:
        def __init__(self, model, **kw):
            self.model, self.kw, self.calls = model, kw, []

        def get_tokenizer(self):
            return tokenizer

        def generate(self, prompts, sampling_params=None, use_tqdm=True):
            self.calls.append((prompts, sampling_params))
            outs = []
            for p in prompts:
                ids = [42, 43, 2]
                comp = types.SimpleNamespace(
                    token_ids=ids,
                    logprobs=[{t: _Logprob(-0.1 * (k + 1)), 7: _Logprob(-9.0)} for k, t in enumerate(ids)],
                    text="ab",
                    finish_reason="stop",
                )
                outs.append(types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[comp]))
            return outs

    mod.SamplingParams, mod.EngineArgs, mod.LLM = SamplingParams, EngineArgs, LLM
    return mod


def test_request_and_response_mapping(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm())
    policy = VLLMPolicy("tiny", gpu_memory_utilization=0.3)
    assert policy.llm.kw == {"gpu_memory_utilization": 0.3, "logprobs_mode": "processed_logprobs"}
    req = ChatRequest(
        [{"role": "user", "content": "hi"}],
        SamplingParams(max_tokens=5, temperature=0.7, seed=3, stop=("##",)),
    )
    c = policy.generate([req])[0]
    prompts, params = policy.llm.calls[-1]
    assert prompts[0]["prompt_token_ids"] == c.prompt_ids == policy.encode(req)
    kw = params[0].kw
    assert kw["logprobs"] == 0 and kw["top_k"] == -1 and kw["include_stop_str_in_output"] is True
    assert (kw["max_tokens"], kw["temperature"], kw["seed"], kw["stop"]) == (5, 0.7, 3, ["##"])
    assert c.response_ids == [42, 43, 2] and c.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert c.finish_reason == "stop" and c.text == "ab" and c.model == "tiny"


def test_old_vllm_without_logprobs_mode_refuses_scaled_temperatures(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(with_logprobs_mode=False))
    policy = VLLMPolicy("tiny")
    assert "logprobs_mode" not in policy.llm.kw and not policy.scaled_logprobs
    with pytest.raises(RequestError, match="unscaled log-probs"):
        policy.chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.7))
    assert policy.chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=1.0)).logprobs
