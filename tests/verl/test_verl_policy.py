"""ServerPolicy: the Policy contract on top of verl's token-in/token-out LLMServerClient (fake client, CPU)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest

from metaagent.policy.base import ChatRequest, PolicyError, RequestError, SamplingParams
from metaagent.train.verl_backend.policy import ServerPolicy

EOS = 2
IM_END = 3


class FakeTokenizer:
    """Characters are tokens (ord); the chat template joins 'role: content' lines."""

    chat_template = "{{ fake }}"
    eos_token_id = EOS

    def __init__(self) -> None:
        self.template_kwargs: list[dict] = []

    def get_vocab(self) -> dict[str, int]:
        return {"<eos>": EOS, "<|im_end|>": IM_END}

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict, **kwargs):
        assert add_generation_prompt and tokenize and return_dict is False
        self.template_kwargs.append(kwargs)
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i in (EOS, IM_END)))


@dataclass
class Output:  # the fields of verl's TokenOutput the policy reads
    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str = "completed"


@dataclass
class FakeClient:
    """Answers with a fixed reply (plus EOS unless it must run out of budget); records the calls."""

    reply: str = "ok"
    eos: bool = True
    calls: list[dict] = field(default_factory=list)
    outputs: dict[str, Output] = field(default_factory=dict)
    delay_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        with self.lock:
            self.calls.append(
                {"request_id": request_id, "prompt_ids": prompt_ids, "sampling_params": sampling_params}
            )
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = "".join(chr(i) for i in prompt_ids).rsplit("user: ", 1)[-1].split("\n", 1)[0]
        if text in self.outputs:
            return self.outputs[text]
        ids = [ord(c) for c in self.reply][: sampling_params["max_tokens"]]
        if self.eos and len(ids) < sampling_params["max_tokens"]:
            ids.append(EOS)
        return Output(ids, [-0.5] * len(ids))


def policy(client=None, **kw):
    return ServerPolicy(
        client or FakeClient(),
        FakeTokenizer(),
        model_id="m",
        max_model_len=kw.pop("max_model_len", 200),
        **kw,
    )


def req(text="hi", **sampling):
    return ChatRequest([{"role": "user", "content": text}], SamplingParams(**sampling))


def test_completion_carries_prompt_ids_tokens_and_logprobs():
    client = FakeClient(reply="42")
    with policy(client, chat_template_kwargs={"enable_thinking": False}) as p:
        c = p.generate([req("what?", max_tokens=10, temperature=0.7, seed=3)])[0]
    prompt = [ord(ch) for ch in "user: what?\nassistant:"]
    assert c.prompt_ids == prompt == client.calls[0]["prompt_ids"]
    assert c.response_ids == [ord("4"), ord("2"), EOS]
    assert c.logprobs == [-0.5, -0.5, -0.5]
    assert c.text == "42" and c.finish_reason == "stop" and c.model == "m"
    sp = client.calls[0]["sampling_params"]
    assert sp == {
        "max_tokens": 10,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
        "logprobs": True,
        "include_stop_str_in_output": True,
        "seed": 3,
    }
    assert p.tokenizer.template_kwargs == [{"enable_thinking": False}]


def test_finish_reasons_stop_string_and_length():
    client = FakeClient(reply="abc</delivery>tail", eos=False)
    client.outputs["stop"] = Output([ord(c) for c in "x</delivery>"], [-1.0] * 12)
    with policy(client) as p:
        stop, length = p.generate(
            [req("stop", max_tokens=50, stop=["</delivery>"]), req("long", max_tokens=4)]
        )
    assert stop.finish_reason == "stop" and stop.text.endswith("</delivery>")
    assert client.calls[0]["sampling_params"]["stop"] == ["</delivery>"]
    assert length.finish_reason == "length" and len(length.response_ids) == 4


def test_max_tokens_is_cut_to_the_context_and_long_prompts_are_refused():
    client = FakeClient()
    with policy(client, max_model_len=30) as p:
        p.generate([req("x", max_tokens=100)])
        prompt_len = len(client.calls[0]["prompt_ids"])
        assert client.calls[0]["sampling_params"]["max_tokens"] == 30 - prompt_len
        with pytest.raises(RequestError, match="max_model_len=30"):
            p.generate([req("a much longer question than fits", max_tokens=5)])


def test_server_failures_become_policy_errors():
    client = FakeClient()
    client.outputs["aborted"] = Output([], None, stop_reason="aborted")
    client.outputs["nolp"] = Output([5, 6], None)
    with policy(client) as p:
        with pytest.raises(PolicyError, match="aborted"):
            p.generate([req("aborted")])
        with pytest.raises(PolicyError, match="log-probs"):
            p.generate([req("nolp")])

    class Broken(FakeClient):
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            raise RuntimeError("No available servers in load balancer")

    with policy(Broken()) as p, pytest.raises(PolicyError, match="No available servers"):
        p.generate([req()])
    with (
        policy(FakeClient(delay_s=5.0), timeout_s=0.2) as p,
        pytest.raises(PolicyError, match="request_timeout_s"),
    ):
        p.generate([req()])


def test_many_threads_share_one_event_loop():
    client = FakeClient(delay_s=0.05)
    results = []
    with policy(client) as p:

        def worker(k):
            results.append(p.generate([req(f"q{k}"), req(f"r{k}")]))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.usage.snapshot()["requests"] == {"executor": 16}
    assert len(results) == 8 and len(client.calls) == 16
    assert len({c["request_id"] for c in client.calls}) == 16


def test_closed_policy_refuses_and_close_is_idempotent():
    p = policy()
    p.close()
    p.close()
    with pytest.raises(PolicyError, match="closed"):
        p.generate([req()])


def test_tokenizer_without_chat_template_is_refused():
    class Plain(FakeTokenizer):
        chat_template = None

    with pytest.raises(PolicyError, match="chat template"):
        ServerPolicy(FakeClient(), Plain(), model_id="base-model", max_model_len=100)


def test_request_ids_are_the_team_affinity_keys():
    """verl's load balancer is sticky on the request id: a request with an affinity key is sent under that
    key (the same server for a design's calls of one agent), one without gets a fresh uuid each time."""
    from dataclasses import replace

    client = FakeClient()
    with policy(client) as p:
        keyed = replace(req("a"), affinity="s3/t1/d0/Solver")
        p.generate([keyed, keyed, req("b"), req("b")])
    ids = [c["request_id"] for c in client.calls]
    assert ids[0] == ids[1] == "s3/t1/d0/Solver"
    assert ids[2] != ids[3] and len(ids[2]) == 32
