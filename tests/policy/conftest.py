"""Fixtures of the policy tests: the tiny random model (fast) and the embedded model (slow tests only)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_policy():
    from metaagent.policy.hf import HFPolicy

    return HFPolicy("tiny", max_batch_size=32)


@pytest.fixture(scope="session")
def embedded_policy():
    from metaagent.policy.hf import HFPolicy

    return HFPolicy("embedded")


def _forward_logprobs(policy, completion, temperature: float):
    """log_softmax(logits / T) of the response tokens from one separate full forward pass (T=1 for greedy)."""
    import torch

    from metaagent.policy.logsoftmax import log_softmax

    ids = torch.tensor([completion.prompt_ids + completion.response_ids])
    with torch.no_grad():
        logits = policy.model(ids).logits[0].float()  # (L, V)
    t = temperature if temperature > 0 else 1.0
    n = len(completion.prompt_ids)
    logp = log_softmax(logits / t)[n - 1 : -1]  # position i predicts token i + 1
    return logp.gather(1, torch.tensor(completion.response_ids)[:, None]).squeeze(1)


@pytest.fixture
def forward_logprobs():
    """The reference log-probs of a completion: ``forward_logprobs(policy, completion, temperature)``."""
    return _forward_logprobs


@pytest.fixture(scope="module")
def openai_stub():
    """A local OpenAI-compatible stub server (builders.OpenAIStub) for the module's tests."""
    from builders import OpenAIStub

    with OpenAIStub() as server:
        yield server
