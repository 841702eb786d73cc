"""``metaagent-eval`` on real models: the tiny model (fast) and the embedded model (slow), each with sa,
one fixed: and auto on two bundled tasks; table.md, results.json, and the replay CLI opening a task."""

from __future__ import annotations

import json

import pytest

from metaagent.cli.eval import main
from metaagent.cli.replay import main as replay_main


def _eval(out, model: str, tokens: int) -> dict:
    main(
        [
            "--model", model,
            "--methods", "sa", "fixed:single_math", "auto",
            "--benchmarks", "bundled:test",
            "--limit", "2",
            "--n", "1",
            "--designer-max-tokens", str(tokens),
            "--executor-max-tokens", str(tokens),
            "--sandbox-workers", "2",
            "--bootstrap", "100",
            "--out", str(out),
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
