"""metaagent/policy/precision.py: the bf16 hardware check, "auto", and generation from a bf16 copy of fp32
master weights that follows every change of the master."""

from __future__ import annotations

import pytest
import torch

from metaagent.policy import ChatRequest, SamplingParams
from metaagent.policy import precision
from metaagent.policy.hf import HFPolicy
from metaagent.policy.models import load_model_and_tokenizer


@pytest.mark.parametrize(
    ("flags", "expected"),
    [({"avx512f", "avx512_bf16"}, "bfloat16"), ({"amx_bf16", "amx_tile"}, "bfloat16"), ({"avx512f", "avx2"}, "float32")],
)
def test_auto_is_bf16_only_with_native_bf16_units(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))
    assert precision.resolve_dtype("auto", "cpu") == expected
    assert precision.resolve_dtype("float32", "cpu") == "float32"  # explicit choices are kept
    with pytest.raises(ValueError, match="dtype must be one of"):
        precision.resolve_dtype("fp8", "cpu")


def test_the_copy_is_the_cast_master_and_follows_its_changes():
    model, _ = load_model_and_tokenizer("tiny")
    copy = precision.DecodeCopy(model, torch.bfloat16)
    low = copy.model()
    assert all(p.dtype == torch.bfloat16 for p in low.parameters())
    assert low.get_input_embeddings().weight is low.get_output_embeddings().weight  # tied stays tied
    assert all(b.dtype == m.dtype for b, m in zip(low.buffers(), model.buffers()))  # rotary freqs stay fp32
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()  # the master moves in place
    assert copy.syncs == 0
    low = copy.model()
    assert copy.syncs == 1
    for a, b in zip(low.parameters(), model.parameters()):
        assert torch.equal(a, b.detach().to(torch.bfloat16))
    copy.model()
    assert copy.syncs == 1  # nothing changed: no copy
    model.load_state_dict({k: v + 1 for k, v in model.state_dict().items()})
    assert torch.equal(next(copy.model().parameters()), next(model.parameters()).detach().to(torch.bfloat16))
    copy.release()  # while the master trains: the copy's weights are freed, and cast again when next needed
    assert all(p.numel() == 0 for p in copy._copy.parameters())
    low = copy.model()
    assert low.get_input_embeddings().weight is low.get_output_embeddings().weight
    for a, b in zip(low.parameters(), model.parameters()):
        assert torch.equal(a, b.detach().to(torch.bfloat16))


def _requests() -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "user", "content": "say " + "a " * i}], SamplingParams(max_tokens=10, seed=i))
        for i in range(3)
    ]


def test_a_bf16_policy_over_fp32_weights_generates_with_the_current_weights():
    model, tokenizer = load_model_and_tokenizer("tiny")
    policy = HFPolicy(model, tokenizer, dtype="bfloat16", prefix_cache_mb=0)
    assert policy.dtype == "bfloat16" and policy.decoder.dtype == torch.bfloat16 and model.dtype == torch.float32
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # what an optimizer step does: the next generation must see it
    got = policy.generate(_requests())
    fresh = HFPolicy(model, tokenizer, dtype="bfloat16", prefix_cache_mb=0)  # a copy made after the change
    want = fresh.generate(_requests())
    assert [c.response_ids for c in got] == [c.response_ids for c in want]
    assert [c.logprobs for c in got] == [c.logprobs for c in want]
    policy.free_memory()  # the trainer's call before an update: the next generate casts the weights again
    again = policy.generate(_requests())
    assert [c.logprobs for c in again] == [c.logprobs for c in want]


def test_lora_adapters_cannot_reach_a_copy():
    model, tokenizer = load_model_and_tokenizer("tiny")
    with pytest.raises(ValueError, match="model_context"):
        HFPolicy(model, tokenizer, dtype="bfloat16", model_context=lambda: None)


def test_cpu_kind_env_hides_the_flags_of_faster_kinds(monkeypatch):
    """$METAAGENT_CPU_KIND: the project chooses as on a slower kind (the flags above it are hidden)."""
    import builtins
    import io

    fake = "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: io.StringIO(fake) if p == "/proc/cpuinfo" else real_open(p, *a, **k))
    for wanted, kind, bf16 in (("", "AMX", True), ("avx512_bf16", "avx512_bf16", True), ("AVX2", "AVX2", False)):
        monkeypatch.setenv(precision.CPU_KIND_ENV, wanted)
        precision._cpu_flags.cache_clear()
        assert (precision.cpu_kind(), precision.bf16_supported("cpu")) == (kind, bf16)
    monkeypatch.setenv(precision.CPU_KIND_ENV, "avx3")
    precision._cpu_flags.cache_clear()
    with pytest.raises(ValueError, match="METAAGENT_CPU_KIND"):
        precision.cpu_kind()
    monkeypatch.delenv(precision.CPU_KIND_ENV)
    precision._cpu_flags.cache_clear()
