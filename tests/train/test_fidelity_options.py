"""Paper-fidelity options of the training config: truncated sampling refused, chat-template kwargs shared by
rollout and SFT, stage-switch and loss options validated."""

from __future__ import annotations

import pytest

from metaagent.config import ConfigError
from metaagent.policy.chat import chat_prompt_ids, default_chat_template_kwargs
from metaagent.train.config import TrainConfig

THINKING_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}{% endif %}"
)


@pytest.mark.parametrize("override", ["rollout.executor.top_p=0.9", "rollout.designer.top_k=20"])
def test_truncated_sampling_is_refused_for_training(override):
    with pytest.raises(ConfigError, match="top_p=1 and top_k=0"):
        TrainConfig.load("tiny", [override])


@pytest.mark.parametrize("override, message", [
    ("optim.stage_switch=forget", "stage_switch"),
    ("optim.policy_loss=ppo2", "policy_loss"),
    ("algo.executor_unit=turn", "executor_unit"),
])
def test_new_options_are_validated(override, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.load("tiny", [override])


def test_defaults_follow_the_paper():
    cfg = TrainConfig.load("tiny")
    assert cfg.algo.executor_unit == "call"  # Eq. 6-7
    assert cfg.optim.loss_agg_mode == "seq-mean-token-mean"  # Eq. 2: 1/|G| sum over trajectories
    assert cfg.optim.dual_clip is False and cfg.optim.policy_loss == "vanilla"
    assert cfg.optim.stage_switch == "keep"
    assert cfg.policy.chat_template_kwargs is None  # the template's default


def test_chat_template_kwargs_default_to_no_thinking_where_the_template_knows_it():
    from transformers import AutoTokenizer

    from metaagent.policy.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    assert default_chat_template_kwargs(tok) == {}  # SmolLM2's template has no thinking switch
    tok.chat_template = THINKING_TEMPLATE
    assert default_chat_template_kwargs(tok) == {"enable_thinking": False}
    msgs = [{"role": "user", "content": "hi"}]
    default = tok.decode(chat_prompt_ids(tok, msgs))
    thinking = tok.decode(chat_prompt_ids(tok, msgs, {"enable_thinking": True}))
    assert default.endswith("<think></think>") and not thinking.endswith("<think></think>")

    from metaagent.policy.base import ChatRequest
    from metaagent.policy.hf import HFPolicy
    from metaagent.sft.data import prompt_ids

    policy = HFPolicy("tiny")
    policy.tokenizer.chat_template = THINKING_TEMPLATE
    policy.chat_template_kwargs = default_chat_template_kwargs(policy.tokenizer)
    assert policy.encode(ChatRequest(msgs)) == prompt_ids(policy.tokenizer, msgs)  # rollout == SFT
