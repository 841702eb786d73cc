"""The SFT trainer on the tiny model: tokenisation as the policy does it, assistant-only loss, learning,
exact resume, and an output folder that is a valid --model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from metaagent.config import ConfigError
from metaagent.policy import ChatRequest
from metaagent.sft.data import (
    SFTDataError,
    build_sft_samples,
    check_tokenization,
    encode_example,
    end_of_turn_id,
    read_chat_jsonl,
)
from metaagent.sft.trainer import SFTConfig, SFTError, SFTTrainer, epoch_order, lr_at

SYSTEM = "You add numbers. Reply with the sum only."


def conversation(a: int, b: int, *, kind: str = "executor", memory: bool = False) -> dict:
    messages = [{"role": "system", "content": SYSTEM}]
    if memory:
        messages += [{"role": "user", "content": "1 + 1"}, {"role": "assistant", "content": "2"}]
    messages += [
        {"role": "user", "content": f"{a} + {b}"},
        {"role": "assistant", "content": f"The sum is {a + b}."},
    ]
    return {"messages": messages, "kind": kind, "task_id": f"{a}+{b}"}


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def tiny_tok():
    from metaagent.policy.models import load_tokenizer

    return load_tokenizer("tiny")


@pytest.fixture
def data(tmp_path) -> list[str]:
    rows = [conversation(a, b, memory=(a % 3 == 0)) for a in range(4) for b in range(3)]
    designer = [conversation(a, 7, kind="designer") for a in range(4)]
    return [write(tmp_path / "executor.jsonl", rows), write(tmp_path / "designer.jsonl", designer)]


def config(data: list[str], out: Path, **changes) -> SFTConfig:
    base = {
        "data": data,
        "model": "tiny",
        "out": str(out),
        "batch_size": 4,
        "micro_batch_tokens": 256,
        "epochs": 1,
        "lr": 1e-3,
    }
    return SFTConfig(**{**base, **changes})


# ---- tokenisation ------------------------------------------------------------------------------------------


def test_tokenisation_is_the_policys(tiny_tok, data):
    from metaagent.policy.hf import HFPolicy
    from metaagent.policy.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    policy = HFPolicy(model, tok)
    eot = end_of_turn_id(tiny_tok)
    assert tiny_tok.convert_ids_to_tokens(eot) == "<|im_end|>"
    for ex in read_chat_jsonl(data):
        prompt, response = encode_example(tiny_tok, ex["messages"])
        assert prompt == policy.encode(ChatRequest(ex["messages"][:-1]))  # what the rollout feeds the model
        assert response[-1] == eot and tiny_tok.decode(response[:-1]) == ex["messages"][-1]["content"]
        assert check_tokenization(tiny_tok, ex["messages"])
        # replies that do not start with whitespace: identical to the template applied to the whole chat
        full = tiny_tok.apply_chat_template(ex["messages"], tokenize=True, return_dict=False)
        assert list(full[: len(prompt) + len(response)]) == prompt + response


def test_bad_data_lines_are_named(tmp_path, tiny_tok):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(conversation(1, 2))
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "x"}]})
        + "\n"
    )
    with pytest.raises(SFTDataError, match=r"bad.jsonl:2: 'messages' must list at least"):
        read_chat_jsonl([bad])
    bad.write_text(
        json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]}) + "\n"
    )
    with pytest.raises(SFTDataError, match="last message must be the assistant"):
        read_chat_jsonl([bad])
    bad.write_text("{not json\n")
    with pytest.raises(SFTDataError, match=r"bad.jsonl:1 is not valid JSON"):
        read_chat_jsonl([bad])
    short, long = conversation(1, 2), conversation(3, 4, kind="designer", memory=True)
    limit = sum(map(len, encode_example(tiny_tok, short["messages"])))
    samples = build_sft_samples([short, long], tiny_tok, max_len=limit)
    assert len(samples) == 1 and samples.metrics["sft/dropped_long"] == 1  # dropped and counted, never cut
    assert len(build_sft_samples([short, long], tiny_tok, kinds=["designer"])) == 1
    with pytest.raises(SFTDataError, match="no example is left"):
        build_sft_samples([long], tiny_tok, max_len=limit)


# ---- the loss -------------------------------------------------------------------------------------------


def test_loss_is_the_assistant_tokens_nll_only(tmp_path, data):
    trainer = SFTTrainer(config(data, tmp_path / "run", lr=1e-9, batch_size=16))
    batch = trainer.batch_of(0)
    # reference: Hugging Face's own loss with labels -100 everywhere but the assistant reply + <|im_end|>
    ref_num, ref_den = 0.0, 0
    for s in batch:
        ids = torch.tensor([s.prompt_ids + s.response_ids])
        labels = ids.clone()
        labels[0, : len(s.prompt_ids)] = -100
        with torch.no_grad():
            out = trainer.model(input_ids=ids, labels=labels)
        ref_num += float(out.loss) * len(s.response_ids)
        ref_den += len(s.response_ids)
    # the LM head only ever sees the hidden states that predict reply tokens (the trainer's forward pass)
    from metaagent.learn.logprobs import response_logprobs
    from metaagent.learn.samples import collate

    rows: list[int] = []
    hook = trainer.model.get_output_embeddings().register_forward_hook(
        lambda m, i, o: rows.append(i[0].shape[0])
    )
    with torch.no_grad():
        response_logprobs(
            trainer.model, collate(batch, trainer.pad_id), chunk_size=trainer.config.logprob_chunk
        )
    hook.remove()
    metrics = trainer.train_step(0)
    assert sum(rows) == ref_den == metrics["sft/tokens"]
    assert metrics["sft/loss"] == pytest.approx(ref_num / ref_den, rel=1e-5)


def test_prompt_tokens_get_no_gradient_as_targets(tmp_path, data, tiny_tok):
    """Changing what follows a prompt position (its 'label') cannot change anything: only reply tokens are
    targets. Changing a reply token does change the gradient."""
    trainer = SFTTrainer(config(data, tmp_path / "run", batch_size=1))
    s = min(trainer.samples, key=lambda x: x.num_tokens)

    def grad_for(sample) -> torch.Tensor:
        from metaagent.learn.logprobs import response_logprobs
        from metaagent.learn.samples import collate

        trainer.model.zero_grad(set_to_none=True)
        data_ = collate([sample], trainer.pad_id)
        logp, _ = response_logprobs(trainer.model, data_)
        (-(logp * data_["response_mask"]).sum()).backward()
        return trainer.model.get_output_embeddings().weight.grad.clone()

    base = grad_for(s)
    # the loss is a function of (prompt as context, reply as targets); there is no per-prompt-position target
    # to change, so pick the closest thing: the same prompt with a different reply changes the gradient ...
    other = type(s)(**{**s.__dict__, "response_ids": [s.response_ids[0] + 1, *s.response_ids[1:]]})
    assert not torch.equal(base, grad_for(other))
    # ... while the same reply after the same prompt, batched next to a longer sample (so padded), does not
    longer = max(trainer.samples, key=lambda x: x.num_tokens)
    assert longer.num_tokens > s.num_tokens
    from metaagent.learn.logprobs import response_logprobs
    from metaagent.learn.samples import collate

    trainer.model.zero_grad(set_to_none=True)
    both = collate([s, longer], trainer.pad_id)
    logp, _ = response_logprobs(trainer.model, both)
    (-(logp[0] * both["response_mask"][0]).sum()).backward()
    scale = float(base.abs().max())
    assert torch.allclose(
        trainer.model.get_output_embeddings().weight.grad, base, rtol=1e-4, atol=1e-5 * scale
    )


def test_loss_goes_down(tmp_path, data):
    trainer = SFTTrainer(config(data, tmp_path / "run", epochs=12, lr=3e-3, batch_size=8, warmup_steps=2))
    trainer.run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["sft/loss"] for r in rows if r["step"] >= 0]
    assert len(losses) == trainer.total_steps == 12 * 2
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    assert last < 0.6 * first, (first, last)
    for key in ("sft/loss", "sft/tokens", "sft/lr", "sft/grad_norm"):
        assert all(key in r for r in rows if r["step"] >= 0)


# ---- schedule, order, resume -----------------------------------------------------------------------------


def test_lr_schedule_and_epoch_order(data, tmp_path):
    cfg = config(data, tmp_path, lr=1.0, warmup_steps=2, min_lr_ratio=0.1)
    lrs = [lr_at(s, 10, cfg) for s in range(10)]
    assert (
        lrs[:2] == [0.5, 1.0]
        and lrs[-1] == pytest.approx(0.1)
        and lrs == sorted(lrs[:2]) + sorted(lrs[2:], reverse=True)
    )
    assert lr_at(5, 10, config(data, tmp_path, lr=1.0, schedule="constant")) == 1.0
    assert epoch_order(10, 0, 1) == epoch_order(10, 0, 1) != epoch_order(10, 0, 2)
    assert sorted(epoch_order(10, 0, 1)) == list(range(10))


class _Stop(Exception):
    pass


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_resume_continues_exactly(tmp_path, data, lora_rank):
    kw = {"epochs": 2, "batch_size": 5, "save_every": 2, "lora_rank": lora_rank, "lr": 2e-3}
    straight = SFTTrainer(config(data, tmp_path / "a", **kw))
    assert straight.total_steps == 8
    straight.run()

    def stop_after_step_4(line: str) -> None:
        if "saved checkpoint" in line and line.endswith("step_00000004"):
            raise _Stop

    with pytest.raises(_Stop):
        SFTTrainer(config(data, tmp_path / "b", **kw), log=stop_after_step_4).run()
    resumed = SFTTrainer(config(data, tmp_path / "b", **kw), resume=True)
    assert resumed.step == 4
    resumed.run()
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name
    metrics = [
        [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        for run in ("a", "b")
    ]
    assert [r["sft/loss"] for r in metrics[0] if r["step"] >= 0] == [
        r["sft/loss"] for r in metrics[1] if r["step"] >= 0
    ]
    assert [r["step"] for r in metrics[1]] == [-1, *range(8)]  # no step logged twice


def test_resume_refuses_a_different_run(tmp_path, data):
    SFTTrainer(config(data, tmp_path / "r", max_steps=1)).run()
    with pytest.raises(SFTError, match=r"lr: checkpoint 0.001, now 0.002"):
        SFTTrainer(config(data, tmp_path / "r", max_steps=1, lr=2e-3), resume=True)
    with pytest.raises(SFTError, match="no complete checkpoint"):
        SFTTrainer(config(data, tmp_path / "empty"), resume=True)


def test_config_errors_say_what_to_change(tmp_path, data):
    with pytest.raises(ConfigError, match="lora_rank = -1: Input should be greater than or equal to 0"):
        config(data, tmp_path, lora_rank=-1)
    with pytest.raises(ConfigError, match="--data files not found"):
        config([str(tmp_path / "missing.jsonl")], tmp_path)
    with pytest.raises(ConfigError, match="kinds"):
        config(data, tmp_path, kinds=["critic"])
    assert config(data, tmp_path, lr=None, lora_rank=8).lr == 2e-4
    assert config(data, tmp_path, lr=None).lr == 1e-5


# ---- the output --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_output_folder_is_a_valid_model(tmp_path, data, lora_rank):
    from metaagent.policy.hf import HFPolicy
    from metaagent.policy.models import load_model_and_tokenizer, resolve_model

    trainer = SFTTrainer(config(data, tmp_path / "run", max_steps=2, lora_rank=lora_rank, lr=5e-2))
    out = trainer.run()
    assert Path(resolve_model(str(out))) == out  # what train-metaagent / metaagent-serve accept as --model
    policy = HFPolicy(str(out), max_batch_size=2)
    c = policy.chat(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "2 + 2"}],
        {"max_tokens": 4, "temperature": 0},
    )
    assert c.response_ids and c.logprobs
    loaded, _ = load_model_and_tokenizer(str(out))
    merged = trainer.merged_model()
    for (name, a), (_, b) in zip(loaded.state_dict().items(), merged.state_dict().items()):
        assert torch.equal(a, b), name
    base, _ = load_model_and_tokenizer("tiny")
    assert any(
        not torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), base.state_dict().values())
    )
    if lora_rank:
        from peft import PeftModel

        adapter = tmp_path / "run" / "adapter"
        assert (adapter / "adapter_config.json").is_file()
        again = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
        for (name, a), (_, b) in zip(again.state_dict().items(), loaded.state_dict().items()):
            assert torch.allclose(a, b, atol=1e-6), name


def test_cli_runs_and_reports(tmp_path, data, capsys):
    from metaagent.cli.sft import main

    main(
        [
            "--data",
            *data,
            "--model",
            "tiny",
            "--out",
            str(tmp_path / "cli"),
            "--max-steps",
            "1",
            "--lr",
            "1e-3",
            "--threads",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert "16 examples" in err and "use it as --model" in err
    assert (tmp_path / "cli" / "model" / "config.json").is_file()
    with pytest.raises(SystemExit) as exit_info:
        main(["--data", str(tmp_path / "nope.jsonl"), "--model", "tiny"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metaagent-sft: --data files not found")


@pytest.mark.parametrize("hint", [True, False], ids=["domain-hint-on", "domain-hint-off"])
def test_model_records_the_designer_prompt_it_was_trained_on(tmp_path, data, hint):
    from metaagent.data import Task
    from metaagent.policy.models import PROMPT_FILE
    from metaagent.rollout.prompts import designer_messages, resolve_designer_prompt, resolve_domain_hint

    task = Task(id="t", domain="math", question="What is 1 + 1?", answer="2", source="test")
    reply = {"role": "assistant", "content": "```python\nsubmit(task)\n```"}
    compact = [
        {"messages": [*designer_messages(task, [], style="compact", domain_hint=hint), reply], "kind": "designer"}
    ] * 4
    files = [data[0], write(tmp_path / "compact.jsonl", compact)]
    out = SFTTrainer(config(files, tmp_path / "run", max_steps=1, lora_rank=4)).run()
    record = {"designer_prompt": "compact", "domain_hint": "on" if hint else "off"}
    assert json.loads((out / PROMPT_FILE).read_text()) == record
    assert json.loads((tmp_path / "run" / "adapter" / PROMPT_FILE).read_text()) == record
    assert resolve_designer_prompt("auto", model=str(out)) == "compact"
    assert resolve_domain_hint("auto", model=str(out)) is hint
    other = SFTTrainer(config(data, tmp_path / "other", max_steps=1)).run()  # designer rows of another prompt
    assert not (other / PROMPT_FILE).exists()
    assert resolve_designer_prompt("auto", model=str(other)) == "full"


def test_init_adapter_continues_a_saved_lora(tmp_path, data):
    """--init-adapter starts the LoRA from a saved adapter: step 0's model is that adapter's, not the base."""
    first = SFTTrainer(config(data, tmp_path / "first", max_steps=2, lora_rank=4, lr=5e-2))
    first.run()
    trained = {k: v.clone() for k, v in first.model.state_dict().items()}
    again = SFTTrainer(
        config(data, tmp_path / "again", max_steps=1, lora_rank=4, lr=5e-2, init_adapter=str(tmp_path / "first" / "adapter"))
    )
    for name, value in again.model.state_dict().items():
        assert torch.equal(value, trained[name]), name
    fresh = SFTTrainer(config(data, tmp_path / "fresh", max_steps=1, lora_rank=4, lr=5e-2))
    assert any(not torch.equal(a, b) for a, b in zip(fresh.model.state_dict().values(), trained.values()))
    with pytest.raises(SFTError, match="has rank 4 and alpha 8.0; the run asks rank 8"):
        SFTTrainer(config(data, tmp_path / "bad", max_steps=1, lora_rank=8, init_adapter=str(tmp_path / "first" / "adapter")))
    with pytest.raises(ConfigError, match="--init-adapter needs --lora-rank > 0"):
        config(data, tmp_path, init_adapter=str(tmp_path / "first" / "adapter"))
