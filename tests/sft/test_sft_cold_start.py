"""The cold-start loader (adapter merged once into a cached model folder), the designer valid-rate measure,
and, with the embedded model, that SFT targets are the token ids the policy itself produces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from metaagent.policy.cold_start import ColdStartError, cold_start_dir, export_adapter
from metaagent.policy.models import load_cold_start
from metaagent.sft.trainer import SFTConfig, SFTTrainer


def _adapter(tmp_path: Path) -> Path:
    rows = [
        {
            "messages": [{"role": "user", "content": f"{a}+1"}, {"role": "assistant", "content": str(a + 1)}],
            "kind": "designer",
        }
        for a in range(6)
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = SFTConfig(
        data=[str(data)], model="tiny", out=str(tmp_path / "run"), max_steps=2, lora_rank=4, lr=0.05
    )
    trainer = SFTTrainer(cfg)
    trainer.run()
    return tmp_path / "run" / "adapter"


def test_load_cold_start_merges_once_and_caches(tmp_path):
    from metaagent.policy.hf import HFPolicy
    from metaagent.policy.models import load_model_and_tokenizer

    adapter = _adapter(tmp_path)
    cache = tmp_path / "cache"
    path = load_cold_start(adapter, base="tiny", cache=cache)
    assert Path(path).parent == cache / "models" and Path(path).name.startswith("tiny-sft-")
    mtime = (Path(path) / "config.json").stat().st_mtime_ns
    assert load_cold_start(adapter, base="tiny", cache=cache) == path  # cached: not rebuilt
    assert (Path(path) / "config.json").stat().st_mtime_ns == mtime
    merged, _ = load_model_and_tokenizer(path)
    trained, _ = load_model_and_tokenizer(str(tmp_path / "run" / "model"))
    for (name, a), (_, b) in zip(merged.state_dict().items(), trained.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), name
    c = HFPolicy(path).chat([{"role": "user", "content": "2+1"}], {"max_tokens": 3, "temperature": 0})
    assert c.response_ids

    # the shipped form: fp16 weights, no machine-specific base path; merges to (nearly) the same model
    shipped = export_adapter(adapter, tmp_path / "shipped", base="tiny")
    assert json.loads((shipped / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    assert (shipped / "adapter_model.safetensors").stat().st_size < (
        adapter / "adapter_model.safetensors"
    ).stat().st_size
    from_shipped, _ = load_model_and_tokenizer(load_cold_start(shipped, base="tiny", cache=cache))
    for (name, a), (_, b) in zip(from_shipped.state_dict().items(), trained.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-3), name


def test_missing_adapter_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv("METAAGENT_COLD_START", str(tmp_path / "nowhere"))
    assert cold_start_dir() == tmp_path / "nowhere"
    with pytest.raises(ColdStartError, match="make_cold_start.sh"):
        load_cold_start()


def test_designer_valid_rate_counts_valid_scripts():
    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import ScriptedPolicy
    from metaagent.sft.eval import designer_requests, designer_valid_rate
    from metaagent.workflow import load_templates

    tasks = load_tasks(DatasetSpec(source="bundled", split="val", levels=[1, 2]))
    good = '```python\nsolver = Agent("MathSolver", "Solve.")\nsubmit(solver(task))\n```'
    replies = iter([good, "The answer is 4.", "```python\nimport os\n```"] * 30)
    r = designer_valid_rate(ScriptedPolicy(lambda req: next(replies)), tasks, designs=30)
    assert (r.designs, r.valid, r.no_script) == (30, 10, 0)  # "The answer is 4." is extracted, then refused
    assert sum(r.errors.values()) == 20 and r.structures == {"single": 10}
    lo, hi = r.wilson()
    assert lo < r.rate < hi
    # same prompts as the engine, spread over all tasks, reproducible
    from metaagent.policy import SamplingParams

    reqs = designer_requests(tasks, 30, templates=load_templates(), sampling=SamplingParams())
    again = designer_requests(tasks, 30, templates=load_templates(), sampling=SamplingParams())
    assert [r.messages for r in reqs] == [r.messages for r in again] and len(reqs) == 30
    assert {m.messages[1]["content"].split("Task:\n")[1] for m in reqs} == {
        t.question.strip() + "\n\nWrite the workflow script for this task." for t in tasks
    }


@pytest.mark.slow
def test_sft_targets_are_the_ids_the_embedded_policy_produces():
    """Greedy designer replies of the real policy: encode(text) + <|im_end|> == the sampled response ids."""
    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import SamplingParams
    from metaagent.policy.hf import HFPolicy
    from metaagent.sft.data import encode_example
    from metaagent.sft.eval import designer_requests
    from metaagent.workflow import load_templates

    policy = HFPolicy("embedded", max_batch_size=4)
    tasks = load_tasks(DatasetSpec(source="bundled", split="val", levels=[1], limit=4))
    requests = designer_requests(
        tasks, 4, templates=load_templates(), sampling=SamplingParams(max_tokens=48, temperature=0)
    )
    stopped = 0
    for req, c in zip(requests, policy.generate(requests)):
        messages = [*req.messages, {"role": "assistant", "content": c.text}]
        prompt, response = encode_example(policy.tokenizer, messages)
        assert prompt == c.prompt_ids
        if c.finish_reason == "stop":  # ended on <|im_end|>: the whole reply is a complete SFT target
            stopped += 1
            assert response == c.response_ids
        else:  # cut at max_tokens: the same ids up to the cut
            assert response[:-1] == c.response_ids
    policy.close()


@pytest.mark.slow
def test_embedded_sft_alias_is_the_committed_adapter_merged():
    """`--model embedded-sft` (what configs/default.yaml and `make demo` use) loads the shipped cold start."""
    from metaagent.policy.models import cache_dir, load_model_and_tokenizer, resolve_model

    path = Path(resolve_model("embedded-sft"))
    assert path.name.startswith("embedded-sft-") and path.parent == cache_dir() / "models"
    # the cache is content-addressed: the merged folder is the committed adapter's revision, wherever the
    # first merge of those bytes was read from (e.g. an identical copy under runs/)
    from metaagent.policy.cold_start import model_revision

    revision = model_revision("embedded-sft")
    assert path.name == f"embedded-sft-{revision}"
    assert json.loads((path / "metaagent_cold_start.json").read_text())["hash"] == revision
    from metaagent.rollout.prompts import resolve_designer_prompt

    assert resolve_designer_prompt("auto", model="embedded-sft") == "compact"  # trained on the compact prompt
    merged, _ = load_model_and_tokenizer("embedded-sft")
    base, _ = load_model_and_tokenizer("embedded")
    changed = [n for (n, a), (_, b) in zip(merged.state_dict().items(), base.state_dict().items()) if not torch.equal(a, b)]
    assert changed and all("proj" in n for n in changed)  # LoRA on the linear layers only


@pytest.mark.slow
def test_suite_cold_start_alias_is_its_own_adapter_and_leaves_embedded_sft_alone(monkeypatch, tmp_path):
    """`embedded-sft-suite` (issue #42) merges the packaged suite adapter; `embedded-sft` keeps the shipped one,
    and $METAAGENT_COLD_START redirects only `embedded-sft`."""
    from metaagent.policy.cold_start import cold_start_dir, model_revision
    from metaagent.policy.models import resolve_model
    from metaagent.resources import cold_start_adapter_dir, suite_cold_start_adapter_dir
    from metaagent.rollout.prompts import resolve_designer_prompt

    suite = model_revision("embedded-sft-suite")
    assert suite and suite != model_revision("embedded-sft")
    path = Path(resolve_model("embedded-sft-suite"))
    assert path.name == f"embedded-sft-{suite}" and json.loads((path / "metaagent_cold_start.json").read_text())["hash"] == suite
    assert resolve_designer_prompt("auto", model="embedded-sft-suite") == "compact"
    monkeypatch.setenv("METAAGENT_COLD_START", str(tmp_path / "nowhere"))
    assert cold_start_dir() == tmp_path / "nowhere" != cold_start_adapter_dir()
    assert cold_start_dir("embedded-sft-suite") == suite_cold_start_adapter_dir()
    assert model_revision("embedded-sft-suite") == suite
