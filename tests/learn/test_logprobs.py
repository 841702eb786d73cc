"""Chunked log-probs equal the naive full-logits computation: values and gradients, fp32."""

from __future__ import annotations

import pytest
import torch

from metaagent.learn.logprobs import LogprobError, naive_response_logprobs, response_logprobs
from metaagent.learn.samples import collate

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk_size", [1, 5, 4096])
def test_values_and_entropy_match_naive(model, make_samples, chunk_size):
    batch = collate(make_samples(7, seed=1))
    with torch.no_grad():
        ref_lp, ref_ent = naive_response_logprobs(model, batch, with_entropy=True)
        lp, ent = response_logprobs(model, batch, chunk_size=chunk_size, with_entropy=True)
    assert lp.shape == batch["response_mask"].shape
    torch.testing.assert_close(lp, ref_lp, **TOL)
    torch.testing.assert_close(ent, ref_ent, **TOL)
    assert (lp[batch["response_mask"] == 0] == 0).all()
    assert (lp[batch["response_mask"] == 1] < 0).all()


@pytest.mark.parametrize("use_checkpoint", [True, False])
def test_gradients_match_naive(model, make_samples, use_checkpoint):
    batch = collate(make_samples(6, seed=2))
    weights = torch.randn(batch["response_mask"].shape) * batch["response_mask"]  # (B, R)

    lp, _ = naive_response_logprobs(model, batch)
    (lp * weights).sum().backward()
    ref = _grads(model)
    model.zero_grad(set_to_none=True)

    lp, _ = response_logprobs(model, batch, chunk_size=3, use_checkpoint=use_checkpoint)
    (lp * weights).sum().backward()
    got = _grads(model)
    assert ref.keys() == got.keys() and len(got) > 0
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], **TOL, msg=name)


def test_entropy_gradient_matches_naive(model, make_samples):
    batch = collate(make_samples(4, seed=3))
    _, ent = naive_response_logprobs(model, batch, with_entropy=True)
    ent.sum().backward()
    ref = _grads(model)
    model.zero_grad(set_to_none=True)
    _, ent = response_logprobs(model, batch, chunk_size=2, with_entropy=True, entropy_grad=True)
    ent.sum().backward()
    for name, g in _grads(model).items():
        torch.testing.assert_close(g, ref[name], **TOL, msg=name)


def test_logging_entropy_has_no_gradient(model, make_samples):
    batch = collate(make_samples(3))
    lp, ent = response_logprobs(model, batch, with_entropy=True)
    assert lp.requires_grad and not ent.requires_grad


def test_tied_embeddings(make_model, make_samples):
    model = make_model(seed=4, tie=True)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    batch = collate(make_samples(3, seed=4))
    with torch.no_grad():
        torch.testing.assert_close(
            response_logprobs(model, batch, chunk_size=2)[0], naive_response_logprobs(model, batch)[0], **TOL
        )


def test_temperature_is_per_sample(model, make_samples):
    samples = make_samples(2, seed=5)
    for s in samples:
        s.temperature = 1.0
    with torch.no_grad():
        base, _ = response_logprobs(model, collate(samples))
        samples[1].temperature = 0.5
        hot, _ = response_logprobs(model, collate(samples))
        logits = model(input_ids=collate(samples[1:])["input_ids"]).logits[0]  # (L, V)
    torch.testing.assert_close(hot[0], base[0])  # sample 0 unchanged
    assert not torch.allclose(hot[1], base[1])
    # sample 1 now scores softmax(logits / 0.5): check its first response token by hand
    p = len(samples[1].prompt_ids)
    expected = torch.log_softmax(logits[p - 1] / 0.5, -1)[samples[1].response_ids[0]]
    torch.testing.assert_close(hot[1, 0], expected, **TOL)


def test_bad_batches_are_refused(model, make_samples):
    batch = collate(make_samples(2))
    batch["temperatures"][0] = 0.0
    with pytest.raises(LogprobError, match="temperatures must be > 0"):
        response_logprobs(model, batch)
    with pytest.raises(LogprobError, match="missing"):
        response_logprobs(model, {"input_ids": batch["input_ids"]})
    with pytest.raises(LogprobError, match="not a Hugging Face causal LM"):
        response_logprobs(torch.nn.Linear(2, 2), collate(make_samples(2)))
