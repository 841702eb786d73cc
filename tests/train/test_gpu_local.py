"""The local backend on CUDA computes what it computes on CPU (GPU-marked: skipped without a CUDA device; the GPU
check's ``gpu-tests`` stage runs them).

- generation: the log-probs the policy records on CUDA while sampling are those of a full forward pass over the
  sampled tokens (the Policy contract), on CUDA and on CPU;
- training: one update's loss and gradients on CUDA equal the same update on CPU (fp32, TF32 off).
"""

from __future__ import annotations

import os

import pytest
import torch
from builders import PAD, mixed_trees, samples_of, tiny_llama

#: the tiny model: the alias (built from the embedded GGUF), or the folder the GPU check built on a machine without it
TINY = os.environ.get("GPUCHECK_TINY_MODEL", "tiny")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(autouse=True)
def exact_fp32():
    """TF32 matmuls (on by default for cuDNN, opt-in for cuBLAS) would make CUDA fp32 differ from CPU by ~1e-3."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def full_forward_logprobs(model, prompt: list[int], response: list[int], device: str) -> torch.Tensor:
    ids = torch.tensor([prompt + response], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()[0, len(prompt) - 1 : -1]  # (R, V)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response, device=device)[:, None])[:, 0].cpu()


def test_recorded_logprobs_on_cuda_are_a_full_forwards_on_cuda_and_cpu():
    from metaagent.policy import ChatRequest, HFPolicy, SamplingParams
    from metaagent.policy.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(TINY, device="cuda")
    policy = HFPolicy(model, tok, device="cuda", max_batch_size=4)
    try:
        requests = [ChatRequest([{"role": "user", "content": f"What is {i} + {i}?"}], SamplingParams(max_tokens=12, seed=i))
                    for i in range(3)]  # fmt: skip
        completions = policy.generate(requests)
    finally:
        policy.close()
    cpu_model, _ = load_model_and_tokenizer(TINY, device="cpu")
    for c in completions:
        assert c.response_ids
        recorded = torch.tensor(c.logprobs)
        on_cuda = full_forward_logprobs(model, c.prompt_ids, c.response_ids, "cuda")
        on_cpu = full_forward_logprobs(cpu_model, c.prompt_ids, c.response_ids, "cpu")
        torch.testing.assert_close(recorded, on_cuda, atol=1e-4, rtol=0)
        torch.testing.assert_close(recorded, on_cpu, atol=1e-4, rtol=0)


def test_an_update_on_cuda_equals_the_same_update_on_cpu():
    from metaagent.train.local.update import PolicyUpdater

    samples = samples_of(mixed_trees())
    results = {}
    for device in ("cpu", "cuda"):
        model = tiny_llama(seed=0).to(device)
        updater = PolicyUpdater(model, micro_batch_tokens=64, compute_entropy=False, pad_id=PAD)
        loss = updater.accumulate(samples)["train/loss"]
        grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
        results[device] = loss, grads
    (loss_cpu, g_cpu), (loss_cuda, g_cuda) = results["cpu"], results["cuda"]
    assert loss_cuda == pytest.approx(loss_cpu, abs=1e-5) and g_cpu
    for name in g_cpu:
        torch.testing.assert_close(g_cuda[name], g_cpu[name], atol=1e-5, rtol=1e-3, msg=name)
