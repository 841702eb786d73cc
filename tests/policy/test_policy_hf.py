"""HFPolicy: the token/log-prob contract, determinism, stopping, batching and bad input."""

from __future__ import annotations

import threading

import pytest

from metaagent.policy import ChatRequest, RequestError, SamplingParams
from metaagent.policy.hf import HFPolicy

PROMPTS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me a long story about a cat."},
    ],
    [{"role": "user", "content": "What is 2 + 2? Answer with one number and explain how you got it."}],
    [{"role": "user", "content": "x"}],
]


def _requests(temperature: float, max_tokens=12, seed0: int = 0, **kw):
    return [
        ChatRequest(m, SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed0 + i, **kw))
        for i, m in enumerate(PROMPTS)
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_equal_separate_forward_pass(tiny_policy, forward_logprobs, temperature):
    """pi_old from the decode loop (left-padded batch, KV cache) == log_softmax(logits/T) of one full pass."""
    completions = tiny_policy.generate(_requests(temperature, max_tokens=16))
    for c in completions:
        assert len(c.response_ids) == len(c.logprobs) == 16  # the random tiny model never emits eos early
        ref = forward_logprobs(tiny_policy, c, temperature)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.tolist())) < 1e-4


def test_logprobs_with_rows_finishing_at_different_steps(tiny_policy, forward_logprobs):
    """Rows leave the running batch (cache rows dropped, padding trimmed): the others' log-probs stay exact."""
    reqs = [
        ChatRequest(m, SamplingParams(max_tokens=n, temperature=1.0, seed=i))
        for i, (m, n) in enumerate(zip(PROMPTS, [3, 20, 7, 1]))
    ]
    completions = tiny_policy.generate(reqs)
    assert [len(c.response_ids) for c in completions] == [3, 20, 7, 1]
    assert all(c.finish_reason == "length" for c in completions)
    for c in completions:
        ref = forward_logprobs(tiny_policy, c, 1.0)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.tolist())) < 1e-4


def test_prompt_ids_are_the_chat_template(tiny_policy):
    c = tiny_policy.chat(PROMPTS[0], SamplingParams(max_tokens=2, seed=0))
    expected = tiny_policy.tokenizer.apply_chat_template(
        PROMPTS[0], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert c.prompt_ids == list(expected)
    assert c.text == tiny_policy.tokenizer.decode(c.response_ids, skip_special_tokens=True)
    assert c.model == "tiny"


def test_same_seeds_same_completions_different_seeds_differ(tiny_policy):
    a = tiny_policy.generate(_requests(1.0, seed0=10))
    b = tiny_policy.generate(_requests(1.0, seed0=10))
    c = tiny_policy.generate(_requests(1.0, seed0=500))
    assert [x.response_ids for x in a] == [x.response_ids for x in b]
    assert [x.logprobs for x in a] == [x.logprobs for x in b]
    assert all(x.response_ids != y.response_ids for x, y in zip(a, c))


def test_result_does_not_depend_on_batch_neighbours(tiny_policy):
    """A request gives the same tokens alone and inside a batch (per-request generator, left padding)."""
    batch = tiny_policy.generate(_requests(1.0, seed0=3))
    for req, in_batch in zip(_requests(1.0, seed0=3), batch):
        alone = tiny_policy.generate([req])[0]
        assert alone.response_ids == in_batch.response_ids
        assert alone.logprobs == pytest.approx(in_batch.logprobs, abs=1e-4)


def test_greedy_is_argmax_and_ignores_seed(tiny_policy, forward_logprobs):
    a = tiny_policy.generate(_requests(0.0, seed0=1))
    b = tiny_policy.generate(_requests(0.0, seed0=99))
    assert [x.response_ids for x in a] == [x.response_ids for x in b]
    import torch

    c = a[2]
    ids = torch.tensor([c.prompt_ids + c.response_ids])
    with torch.no_grad():
        logits = tiny_policy.model(ids).logits[0]
    assert logits[len(c.prompt_ids) - 1 : -1].argmax(-1).tolist() == c.response_ids


def test_top_k_one_is_greedy_and_logprobs_stay_untruncated(tiny_policy, forward_logprobs):
    greedy = tiny_policy.generate(_requests(0.0))
    topk1 = tiny_policy.generate(_requests(0.7, top_k=1))
    assert [x.response_ids for x in greedy] == [x.response_ids for x in topk1]
    for c in topk1:  # log-probs of the temperature-scaled full distribution, not log(1) = 0
        ref = forward_logprobs(tiny_policy, c, 0.7)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.tolist())) < 1e-4
        assert max(c.logprobs) < -1.0


def test_tiny_top_p_restricts_to_most_likely_token(tiny_policy):
    greedy = tiny_policy.generate(_requests(0.0))
    nucleus = tiny_policy.generate(_requests(1.0, top_p=1e-6))
    assert [x.response_ids for x in greedy] == [x.response_ids for x in nucleus]


def test_stop_string_ends_generation_and_is_kept(tiny_policy):
    req = _requests(1.0, max_tokens=20, seed0=7)[1]
    free = tiny_policy.generate([req])[0]
    tok = tiny_policy.tokenizer
    # a stop string completed by the 6th token: the last 2 characters of the text up to that token
    upto = tok.decode(free.response_ids[:6], skip_special_tokens=True)
    prev = tok.decode(free.response_ids[:5], skip_special_tokens=True)
    assert upto != prev
    stop = upto[max(len(prev) - 1, 0) :]  # the last character before token 6 and what token 6 adds
    assert upto.startswith(prev) and stop not in prev
    stopped = tiny_policy.generate(
        [ChatRequest(req.messages, req.sampling.replace(stop=(stop, "never-seen-xyz")))]
    )[0]
    assert stopped.finish_reason == "stop"
    assert stopped.response_ids == free.response_ids[:6]
    assert stop in stopped.text and stopped.text == upto


def test_stop_token_ends_generation_and_is_kept(tiny_policy):
    """Make the 4th greedy token a stop token: generation ends at its first occurrence, keeping it."""
    greedy = tiny_policy.chat(PROMPTS[2], SamplingParams(max_tokens=10, temperature=0))
    stop_id = greedy.response_ids[3]
    first = greedy.response_ids.index(stop_id)
    policy = HFPolicy(tiny_policy.model, tiny_policy.tokenizer)
    policy.stop_token_ids = frozenset({stop_id})
    c = policy.chat(PROMPTS[2], SamplingParams(max_tokens=10, temperature=0))
    assert c.finish_reason == "stop"
    assert c.response_ids == greedy.response_ids[: first + 1] and c.response_ids[-1] == stop_id
    assert len(c.logprobs) == len(c.response_ids)


def test_default_stop_tokens_include_chatml_end(tiny_policy):
    assert tiny_policy.tokenizer.convert_tokens_to_ids("<|im_end|>") in tiny_policy.stop_token_ids


def test_weights_updated_in_place_are_used(tiny_policy):
    """The trainer updates .model in place; the next generate must see the new weights."""
    import torch

    req = _requests(0.0)[:1]
    before = tiny_policy.generate(req)[0]
    params = list(tiny_policy.model.parameters())
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            for p in params:
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
        after = tiny_policy.generate(req)[0]
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
    assert after.logprobs != before.logprobs
    assert tiny_policy.generate(req)[0].response_ids == before.response_ids


def test_training_mode_is_restored(tiny_policy):
    tiny_policy.model.train()
    try:
        tiny_policy.chat(PROMPTS[0], SamplingParams(max_tokens=2, seed=0))
        assert tiny_policy.model.training
    finally:
        tiny_policy.model.eval()


def test_large_request_lists_are_split_into_chunks():
    policy = HFPolicy("tiny", max_batch_size=3)
    sizes = []
    original = policy._run_static
    policy._run_static = lambda rows: sizes.append(len(rows)) or original(rows)
    reqs = [ChatRequest(PROMPTS[i % 4], SamplingParams(max_tokens=2, seed=i)) for i in range(8)]
    out = policy.generate(reqs)
    assert sizes == [3, 3, 2] and len(out) == 8
    assert out[5].response_ids == policy.generate([reqs[5]])[0].response_ids


def test_concurrent_callers_are_serialised_and_correct(tiny_policy):
    reqs = _requests(1.0, seed0=40)
    expected = [c.response_ids for c in tiny_policy.generate(reqs)]
    got: dict[int, list[int]] = {}

    def call(i):
        got[i] = tiny_policy.generate([reqs[i]])[0].response_ids

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(reqs))] == expected


def test_usage_is_counted_per_role(tiny_policy):
    before = tiny_policy.usage.snapshot()["completion_tokens"].get("designer", 0)
    tiny_policy.chat(PROMPTS[0], SamplingParams(max_tokens=3, seed=0), role="designer")
    assert tiny_policy.usage.snapshot()["completion_tokens"]["designer"] == before + 3


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "messages, match",
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"role": "robot", "content": "hi"}], "role"),
        ([{"role": "user", "content": 3}], "content"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "last message"),
    ],
)
def test_malformed_messages_are_rejected(tiny_policy, messages, match):
    with pytest.raises(RequestError, match=match):
        tiny_policy.generate([ChatRequest(messages, SamplingParams(max_tokens=2))])


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_non_positive_max_tokens_is_rejected(tiny_policy, max_tokens):
    with pytest.raises(RequestError, match="max_tokens must be a positive integer"):
        tiny_policy.chat(PROMPTS[0], {"max_tokens": max_tokens})


def test_prompt_longer_than_context_is_rejected():
    policy = HFPolicy("tiny", max_context=16)
    with pytest.raises(RequestError, match="context of 16"):
        policy.chat([{"role": "user", "content": "word " * 50}], SamplingParams(max_tokens=2))


def test_response_is_cut_at_the_context_limit():
    policy = HFPolicy("tiny", max_context=40)
    c = policy.chat(PROMPTS[0], SamplingParams(max_tokens=100, seed=0))
    assert len(c.prompt_ids) + len(c.response_ids) == 40 and c.finish_reason == "length"


def test_model_object_needs_tokenizer(tiny_policy):
    with pytest.raises(ValueError, match="needs tokenizer"):
        HFPolicy(tiny_policy.model)


def test_model_object_shares_weights_and_takes_a_model_id(tiny_policy):
    policy = HFPolicy(tiny_policy.model, tiny_policy.tokenizer, model_id="my-run/step-3")
    assert policy.model is tiny_policy.model
    assert policy.chat(PROMPTS[0], SamplingParams(max_tokens=1, seed=0)).model == "my-run/step-3"


def test_unknown_model_path_error():
    with pytest.raises(FileNotFoundError, match="no model at '/nonexistent/model'"):
        HFPolicy("/nonexistent/model")


# --------------------------------------------------------------------------------------- the embedded model
@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_embedded_logprobs_equal_separate_forward_pass(embedded_policy, forward_logprobs, temperature):
    reqs = [
        ChatRequest(m, SamplingParams(max_tokens=8, temperature=temperature, seed=i))
        for i, m in enumerate(PROMPTS)
    ]
    for c in embedded_policy.generate(reqs):
        ref = forward_logprobs(embedded_policy, c, temperature)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.tolist())) < 1e-4


@pytest.mark.slow
def test_embedded_model_answers_a_chat_prompt(embedded_policy):
    """What `make demo` relies on: the embedded model, through HFPolicy, answers with real text and stops."""
    c = embedded_policy.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(max_tokens=48, temperature=0),
    )
    assert "Paris" in c.text
    assert c.finish_reason == "stop" and c.response_ids[-1] == embedded_policy.tokenizer.eos_token_id
    assert "<|im_end|>" not in c.text
