"""``metaagent-eval`` on real models: the tiny model (fast) and the embedded model (slow), each with sa,
one fixed: and auto on two bundled tasks; table.md, results.json, and the replay CLI opening a task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metaagent.cli.eval import main
from metaagent.cli.replay import main as replay_main
from metaagent.records import read_trees


def _eval(out, model: str, tokens: int, *extra: str, workers: str | None = "2") -> dict:
    main(
        [
            "--model", model,
            "--methods", "sa", "fixed:single_math", "auto",
            "--benchmarks", "bundled:test",
            "--limit", "2",
            "--n", "1",
            "--designer-max-tokens", str(tokens),
            "--executor-max-tokens", str(tokens),
            *(("--sandbox-workers", workers) if workers else ()),
            "--bootstrap", "100",
            "--out", str(out),
            *extra,
        ]
    )  # fmt: skip
    return json.loads((out / "results.json").read_text())


def _check(out, results: dict, model: str, capsys) -> None:
    entries = results["cells"][model]["benchmarks"]["bundled:test"]
    assert list(entries) == ["sa", "fixed:single_math", "auto"]
    for method, entry in entries.items():
        assert entry["tasks"] == 2 and entry["complete"], method
        assert 0.0 <= entry["metrics"]["avg@1"]["mean"] <= 1.0
        assert sum(entry["exec_status"].values()) == 2  # one sample per task: executions or invalid designs
    assert entries["auto"]["valid_script_rate"] is not None
    assert results["config"]["models"] == [model] and results["ks"] == [1]
    table = (out / "table.md").read_text()
    assert "## avg@1 (Table 1 layout)" in table and f"| {model} | auto |" in table
    assert (out / "report.html").stat().st_size > 1000
    capsys.readouterr()
    task = entries["sa"]["per_task"][0]["task_id"]
    with pytest.raises(SystemExit) as exit_info:
        replay_main([str(out), "--task", task])
    assert exit_info.value.code in (0, None)
    assert task in capsys.readouterr().out


def test_cli_tiny_model(tmp_path, capsys):
    out = tmp_path / "tiny"
    _check(out, _eval(out, "tiny", 8), "tiny", capsys)


def test_cli_tiny_model_with_the_equal_compute_baselines(tmp_path, capsys):
    """sa@2, sa@auto, fixed:pot and best-per-domain (chosen on bundled:val) beside sa and auto, end to end
    with the
    tiny model: every method scored on every task, the compute columns filled, best-per-domain's choice
    printed."""
    out = tmp_path / "baselines"
    main(
        [
            "--model", "tiny",
            "--methods", "sa", "sa@2", "sa@auto", "fixed:pot", "best-per-domain", "auto",
            "--benchmarks", "bundled:test/math",
            "--limit", "2", "--n", "1",
            "--designer-max-tokens", "8", "--executor-max-tokens", "8",
            "--sandbox-workers", "2", "--bootstrap", "100", "--no-html",
            "--out", str(out),
        ]
    )  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    entries = results["cells"]["tiny"]["benchmarks"]["bundled:test/math"]
    assert list(entries) == ["sa", "sa@2", "fixed:pot", "auto", "sa@auto", "best-per-domain"]
    assert all(e["tasks"] == 2 and e["complete"] for e in entries.values())
    assert entries["sa@2"]["budget"]["agent_calls_per_sample"] == 2.0  # one answer from two executions
    assert entries["sa@auto"]["k"] >= 1 and entries["sa@auto"]["k_from"] == "auto"
    assert entries["best-per-domain"]["selection"]["math"]["chosen"] in ("sa", "fixed:pot")
    table = (out / "table.md").read_text()
    assert "| tiny | sa@auto (k=" in table and "exec calls/sample" in table and "## best-per-domain" in table
    capsys.readouterr()


@pytest.mark.slow
def test_cli_embedded_model(tmp_path, capsys):
    out = tmp_path / "embedded"
    _check(out, _eval(out, "embedded", 48), "embedded", capsys)


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    for argv, needle in (
        (["--model", "tiny", "--methods", "nope", "--out", str(tmp_path)], "unknown method 'nope'; valid methods: sa, auto, fixed:"),
        (["--model", "tiny", "--n", "2", "--k", "3", "--out", str(tmp_path)], "k=3 > n=2"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("metaagent-eval: ") and needle in err, err


def _samples(out: Path) -> dict[tuple[str, str], list]:
    """Every task's designer scripts and agent replies (text and token ids), by (record file, task id)."""
    found = {}
    for path in sorted((out / "rollouts").rglob("*.jsonl")):
        trees, bad = read_trees(path)
        assert not bad
        for t in trees:
            found[(str(path.relative_to(out)), t.task_id)] = [
                (d.script, d.sample.response_ids if d.sample else None,
                 [[(turn.response, turn.response_ids) for turn in e.turns]
                  for e in d.executions])  # fmt: skip
                for d in t.designs
            ]
    return found


def _logprobs(out: Path) -> dict[tuple[str, str, int, int, int], list[float]]:
    """The sampled tokens' log-probs of every agent turn, by (record file, task, design, execution, turn)."""
    found = {}
    for path in sorted((out / "rollouts").rglob("*.jsonl")):
        for t in read_trees(path)[0]:
            for d in t.designs:
                for e in d.executions:
                    for turn in e.turns:
                        key = (str(path.relative_to(out)), t.task_id, d.index, e.index, turn.index)
                        found[key] = turn.logprobs
    return found


#: batched vs one at a time, fp32: the same tokens; a log-prob may move by float summation order (other rows
#: and left padding in the batch change the reduction order of a matmul and the attention softmax), below this
LOGPROB_TOLERANCE = 1e-4


def test_batched_defaults_give_the_samples_of_one_task_at_a_time(tmp_path):
    """The default batching (every task in flight, auto workers, continuous batching: their agent calls join
    one running batch) samples exactly what one task at a time with static batches samples, token for token:
    per-request seeds, only the batch composition differs. Log-probs agree within LOGPROB_TOLERANCE (fp32)."""
    out_alone, out_together = tmp_path / "alone", tmp_path / "together"
    _eval(out_alone, "tiny", 8, "--concurrency", "1", "--no-continuous", "--n", "2", "--k", "2")
    _eval(out_together, "tiny", 8, "--n", "2", "--k", "2", workers=None)
    alone, together = _samples(out_alone), _samples(out_together)
    assert alone == together and len(alone) == 6  # 3 methods x 2 tasks
    replies = [r for samples in alone.values() for _, _, runs in samples for turns in runs for r, _ in turns]
    assert len(replies) >= 8 and len(set(replies)) > 1  # sa and fixed: 2 tasks x 2 samples each; sampled text
    a, b = _logprobs(out_alone), _logprobs(out_together)
    assert a.keys() == b.keys()
    assert max(abs(x - y) for k in a for x, y in zip(a[k], b[k], strict=True)) < LOGPROB_TOLERANCE
