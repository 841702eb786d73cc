"""The resumable example store: torn lines, unfinished tasks, dedupe, commit order; the stop-tag fix."""

from __future__ import annotations

import json
import os

import pytest

from metaagent.distill.config import TeacherConfig
from metaagent.distill.store import ExampleStore, StoreError
from metaagent.distill.teacher import RestoreStopTags, TeacherError, build_teacher, restore_stop_tag
from metaagent.policy import SamplingParams, ScriptedPolicy


def ex(task: str, text: str, kind: str = "designer") -> dict:
    messages = [{"role": "user", "content": f"q {task}"}, {"role": "assistant", "content": text}]
    return {"messages": messages, "id": f"{kind}-{task}-{text}", "task_id": task, "kind": kind}


def lines(path) -> list[dict]:
    return [json.loads(x) for x in open(path).read().splitlines() if x.strip()]


def test_commit_appends_examples_then_done_line_and_dedupes(tmp_path):
    with ExampleStore(tmp_path) as store:
        c = store.commit(
            "t1",
            {"designer": [ex("t1", "a"), ex("t1", "a")], "executor": [ex("t1", "x", "executor")]},
            {"n": 1},
        )
        assert c.counts == {"designer": 1, "designer_dup": 1, "executor": 1, "executor_dup": 0}
        c = store.commit(
            "t2", {"designer": [ex("t1", "a"), ex("t2", "b")]}, {"n": 2}
        )  # t1's example again: dup
        assert c.counts["designer"] == 1 and [e["id"] for e in c.fresh["designer"]] == ["designer-t2-b"]
        with pytest.raises(StoreError, match="already committed"):
            store.commit("t1", {}, {})
    assert [r["task_id"] for r in lines(tmp_path / "done.jsonl")] == ["t1", "t2"]
    assert lines(tmp_path / "done.jsonl")[0]["kept_designer_dup"] == 1
    assert [r["id"] for r in lines(tmp_path / "designer.jsonl")] == ["designer-t1-a", "designer-t2-b"]
    with ExampleStore(tmp_path) as again:  # the dedupe set survives a restart
        assert again.is_done("t1") and not again.is_done("t3")
        assert again.commit("t3", {"designer": [ex("t2", "b"), ex("t3", "c")]}, {}).counts["designer"] == 1


def test_open_repairs_torn_lines_and_drops_unfinished_tasks(tmp_path):
    with ExampleStore(tmp_path) as store:
        store.commit("t1", {"designer": [ex("t1", "a")], "executor": [ex("t1", "x", "executor")]}, {})
    # a kill after t2's examples were written but before its done line, and in the middle of a line
    with open(tmp_path / "designer.jsonl", "a") as f:
        f.write(json.dumps(ex("t2", "b")) + "\n")
        f.write('{"messages": [{"role": "us')
    with open(tmp_path / "done.jsonl", "a") as f:
        f.write('{"task_id": "t2", "kept_')
    with ExampleStore(tmp_path) as store:
        assert store.repair.torn_lines == {"done.jsonl": 1, "designer.jsonl": 1}
        assert store.repair.orphan_lines == {"designer.jsonl": 1}
        assert not store.is_done("t2")
        store.commit("t2", {"designer": [ex("t2", "b")]}, {})  # not a duplicate: the orphan was dropped
    assert [r["id"] for r in lines(tmp_path / "designer.jsonl")] == ["designer-t1-a", "designer-t2-b"]
    assert [r["task_id"] for r in lines(tmp_path / "done.jsonl")] == ["t1", "t2"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp files left


def test_a_corrupt_line_that_is_not_the_last_is_an_error(tmp_path):
    with ExampleStore(tmp_path) as store:
        store.commit("t1", {"designer": [ex("t1", "a")]}, {})
        store.commit("t2", {"designer": [ex("t2", "b")]}, {})
    text = (tmp_path / "designer.jsonl").read_text().splitlines()
    (tmp_path / "designer.jsonl").write_text("\n".join(["{broken", text[1]]) + "\n")
    with pytest.raises(StoreError, match=r"designer.jsonl:1 is not valid JSON"):
        ExampleStore(tmp_path)


@pytest.mark.parametrize(
    ("text", "finish", "expected"),
    [
        ("x <delivery>42", "stop", "x <delivery>42</delivery>"),  # the API dropped the stop string
        ("x <delivery>42</delivery>", "stop", "x <delivery>42</delivery>"),  # a vLLM-style reply kept it
        ("x <delivery>42", "length", "x <delivery>42"),  # cut at max_tokens: not a stop
        ("no block at all", "stop", "no block at all"),
        (
            "<delivery>a</delivery> then <delivery>b",
            "stop",
            "<delivery>a</delivery> then <delivery>b</delivery>",
        ),
    ],
)
def test_restore_stop_tag(text, finish, expected):
    assert restore_stop_tag(text, ("</delivery>",), finish) == expected


def test_restore_stop_tags_wraps_a_text_only_policy():
    inner = ScriptedPolicy(lambda r: "sum: <delivery>\\boxed{5}")
    policy = RestoreStopTags(inner)
    c = policy.chat([{"role": "user", "content": "2+3"}], SamplingParams(stop=("</delivery>",)))
    assert c.text.endswith("<delivery>\\boxed{5}</delivery>")
    c = policy.chat([{"role": "user", "content": "2+3"}], SamplingParams())
    assert c.text == "sum: <delivery>\\boxed{5}"  # no stop strings asked for: nothing restored
    assert not policy.provides_logprobs


def test_remote_teacher_without_key_is_refused_before_any_request(monkeypatch):
    monkeypatch.delenv("METAAGENT_TEST_KEY", raising=False)
    with pytest.raises(TeacherError, match=r"needs an API key in \$METAAGENT_TEST_KEY"):
        build_teacher(TeacherConfig(base_url="https://api.deepseek.com", api_key_env="METAAGENT_TEST_KEY"))
    local = build_teacher(
        TeacherConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="METAAGENT_TEST_KEY")
    )
    assert local.model_id == "m" and not local.inner.vllm_extras and not local.inner.logprobs
    local.close()
