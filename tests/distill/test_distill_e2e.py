"""End to end: `metaagent-distill` against a real local OpenAI-compatible HTTP teacher, interrupted and resumed.

4 bundled arithmetic tasks; a first run stops after 2 (``--max-tasks 2``), a second run is killed with
SIGKILL in the middle of the 4th task (and a torn line is appended, as a kill during a write leaves one), a
third run resumes. No finished task is rolled out again, none is lost, every example is valid chat data
that ``datasets`` and TRL read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from distill_teacher_server import TeacherServer

from metaagent.data import DatasetSpec, load_tasks
from metaagent.data.chat import validate_example
from metaagent.distill.examples import EXAMPLE_FIELDS
from metaagent.workflow import check_script, extract_script

M, N = 2, 2
DATA = ["--data", "bundled:train", "--levels", "1", "--domain", "math", "--limit", "4"]


def _tasks():
    return load_tasks(DatasetSpec(source="bundled", split="train", levels=[1], domain="math", limit=4))


def _cmd(server: TeacherServer, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "metaagent.cli.distill",
        "--base-url", server.base_url, "--model", "fake-teacher", "--api-key-env", "METAAGENT_TEST_NO_KEY",
        *DATA, "--m-designs", str(M), "--n-executions", str(N), "--tasks-in-flight", "1",
        "--max-concurrency", "4", "--out", str(out), "--seed", "7",
        "rollout.sandbox_workers=2", "rollout.limits.timeout_s=20", *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "METAAGENT_TEST_NO_KEY"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_distill_http_teacher_interrupt_and_resume(tmp_path):
    out = tmp_path / "distill"
    tasks = _tasks()
    questions = {t.id: t.question for t in tasks}
    assert len(tasks) == 4
    with TeacherServer(delay_s=0.05) as server:
        # run 1: two tasks, then stop
        first = _run(_cmd(server, out, "--max-tasks", "2"))
        assert first.returncode == 0, first.stderr
        done1 = [r["task_id"] for r in _lines(out / "done.jsonl")]
        assert done1 == [t.id for t in tasks[:2]]
        assert {questions[i]: server.state.designer_calls[questions[i]] for i in done1} == {
            questions[i]: M for i in done1
        }

        # run 2: killed (SIGKILL, no chance to clean up) once the third task is committed
        proc = subprocess.Popen(
            _cmd(server, out), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 240
        while len(_lines(out / "done.jsonl")) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the third task did not finish in time"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stderr.close()
        done2 = [r["task_id"] for r in _lines(out / "done.jsonl")]
        assert done2[:2] == done1 and len(done2) in (3, 4)
        # a kill during a write leaves a torn last line; lines of an unfinished task may precede it
        with open(out / "executor.jsonl", "a") as f:
            f.write('{"messages": [{"role": "system", "content": "torn')
        with open(out / "designer.jsonl", "a") as f:
            f.write(json.dumps({"messages": [], "id": "orphan", "task_id": "not-finished"}) + "\n")

        # run 3: resume
        third = _run(_cmd(server, out))
        assert third.returncode == 0, third.stderr
        assert "repaired" in third.stderr
        calls = dict(server.state.designer_calls)

    done = _lines(out / "done.jsonl")
    assert sorted(r["task_id"] for r in done) == sorted(t.id for t in tasks)  # none lost
    assert len(done) == 4  # none committed twice
    for task_id in done2[:3]:  # finished tasks were never rolled out again
        assert calls[questions[task_id]] == M
    # the killed task may have been started before the kill: between 0 and M of its designer calls were made
    # then (the kill can land between two of them), and the resume makes all M again
    assert M <= calls[questions[tasks[3].id]] <= 2 * M

    designer, executor = _lines(out / "designer.jsonl"), _lines(out / "executor.jsonl")
    for kind, rows in (("designer", designer), ("executor", executor)):
        assert rows, f"no {kind} examples"
        assert len({r["id"] for r in rows}) == len(rows)  # deduplicated
        for i, r in enumerate(rows):
            validate_example(r, f"{kind}[{i}]")
            assert set(r) == set(EXAMPLE_FIELDS)
            assert r["kind"] == kind and r["correct"] is True and r["task_id"] in questions
    assert {r["task_id"] for r in designer} == set(questions)  # the teacher is always right
    for r in designer:
        assert r["messages"][0]["content"].startswith("You are the designer")
        script = extract_script(r["messages"][-1]["content"])
        assert r["messages"][-1]["content"].startswith("```python") and check_script(script).ok
        assert r["templates_shown"] and r["model"] == "fake-teacher"
    for r in executor:
        assert r["messages"][-1]["content"].endswith("</delivery>")  # the stop tag the API dropped is back
        assert r["agent"] and r["turn"] >= 0

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mode"] == "teacher" and manifest["teacher"]["model"] == "fake-teacher"
    assert manifest["counts"]["designer"] == len(designer) and manifest["counts"]["executor"] == len(executor)
    assert manifest["tasks"] == {"total": 4, "done": 4, "by_domain": {"math": 4}}
    assert manifest["acceptance"]["execution_rate"] == 1.0
    assert manifest["tokens"]["total_tokens"] > 0 and len(manifest["runs"]) == 3
    assert manifest["runs"][2]["repair"]["torn_lines"] == {"executor.jsonl": 1}
    assert sum(manifest["templates"]["shown_in_kept_prompts"].values()) == len(designer)
    assert manifest["files"]["designer.jsonl"]["lines"] == len(designer)
    assert "--max-tasks 2" in manifest["runs"][0]["command"]


@pytest.mark.slow
def test_distilled_files_load_with_datasets_and_trl(tmp_path):
    out = tmp_path / "distill"
    with TeacherServer() as server:
        result = _run(_cmd(server, out, "--limit", "2"))
    assert result.returncode == 0, result.stderr
    import datasets

    files = [str(out / "designer.jsonl"), str(out / "executor.jsonl")]
    ds = datasets.load_dataset("json", data_files=files, split="train")
    n = sum(len(_lines(Path(f))) for f in files)
    assert ds.num_rows == n and "messages" in ds.column_names
    assert Counter(ds["kind"]) == Counter(
        {"designer": len(_lines(out / "designer.jsonl")), "executor": n - len(_lines(out / "designer.jsonl"))}
    )
    ds.to_parquet(str(tmp_path / "all.parquet"))  # what verl's SFT trainer reads

    trl = pytest.importorskip("trl")
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    from metaagent.policy.models import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    for row in ds:
        assert is_conversational(row)
        text = maybe_apply_chat_template({"messages": row["messages"]}, tokenizer)["text"]
        assert text == tokenizer.apply_chat_template(row["messages"], tokenize=False)
    assert trl.__version__
