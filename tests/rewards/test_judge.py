"""Judges: the rule judge, and an OpenAI-compatible HTTP stub that answers in format or with garbage."""

from __future__ import annotations

import pytest
from builders import StubServer, chat_completion

from metaagent.rewards.judge import COACH, Judge, JudgeError, JudgeTemplate, parse_score, rule_judge

ITEM = {"task": "2+2?", "role": "Solver", "input": "solve", "output": "4", "reference": ""}


def test_rule_judge_scores_and_normalises():
    judge = Judge(COACH, rule_judge(lambda prompt: 8.0 if "4" in prompt else 2.0))
    good, bad = judge.score([ITEM, {**ITEM, "output": "5"}])
    assert good.total == pytest.approx(0.8) and good.components == {"score": 8.0} and good.source == "judge"
    assert bad.total == pytest.approx(0.2)
    assert judge.metrics() == {"judge/calls": 2.0}


@pytest.mark.parametrize(
    "text, expected",
    [("fine\nSCORE: 7", 7.0), ("SCORE: 3 ... SCORE=9.5", 9.5), ("score : 0", 0.0)],
)
def test_parse_score_takes_the_last_score_line(text, expected):
    assert parse_score(text, 0, 10) == expected


@pytest.mark.parametrize("text", ["no number here", "SCORE: 11", ""])
def test_parse_score_refuses_missing_or_out_of_range(text):
    with pytest.raises(ValueError):
        parse_score(text, 0, 10)


def test_a_template_field_the_item_lacks_is_a_clear_error():
    with pytest.raises(JudgeError, match="no field 'task'"):
        Judge(COACH, rule_judge(lambda p: 1.0)).score([{"role": "A"}])
    with pytest.raises(JudgeError, match="must exceed"):
        Judge(JudgeTemplate("x", "s", "u", low=1, high=1), rule_judge(lambda p: 1.0))


class _Judge:
    reply = "SCORE: 6"


def _judge_route(method, path, body):
    if body.get("model") == "down":
        return 503, None, {}
    return 200, chat_completion(body["model"], _Judge.reply), {}


@pytest.fixture
def stub():
    with StubServer(_judge_route) as server:
        yield server.base_url
    _Judge.reply = "SCORE: 6"


def _api_judge(base_url: str, model: str = "coach") -> Judge:
    from metaagent.policy.openai_backend import OpenAIPolicy

    backend = OpenAIPolicy(base_url, model, api_key="test", logprobs=False, vllm_extras=False, max_retries=0)
    return Judge(COACH, backend)


def test_an_http_judge_in_format(stub):
    (r,) = _api_judge(stub).score([ITEM])
    assert r.total == pytest.approx(0.6) and r.error is None


def test_an_http_judge_answering_garbage_is_an_error_counted_never_a_score(stub):
    _Judge.reply = "I think it is pretty good!"
    judge = _api_judge(stub)
    (r,) = judge.score([ITEM])
    assert r.total is None and "SCORE" in r.error
    assert judge.metrics()["judge/errors"] == 1.0 and judge.metrics()["judge/parse_errors"] == 1.0


def test_an_unreachable_judge_backend_is_an_error_counted(stub):
    judge = _api_judge(stub, model="down")
    rewards = judge.score([ITEM, ITEM])
    assert [r.total for r in rewards] == [None, None]
    assert judge.metrics()["judge/backend_errors"] == 2.0
