"""Committed evaluation results keep their records compressed (``.jsonl.xz``; ``.jsonl.gz`` reads alike):
``--report-only`` rewrites the same tables from them, and a run that adds tasks appends to them (plain JSONL
again)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from metaagent.eval import Evaluation, make_config
from metaagent.policy import ChatRequest, ScriptedPolicy
from metaagent.records import compress, read_trees
from metaagent.replay import load_run
from metaagent.workflow import SandboxPool

DESIGN = 'solver = Agent("MathSolver", "Solve it. Put the answer in \\\\boxed{}.")\nsubmit(solver(task))\n'


def reply(request: ChatRequest) -> str:
    return f"```python\n{DESIGN}```" if request.role == "designer" else "<delivery>\\boxed{4}</delivery>"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


def run(out, pool, **kw):
    values = {"models": ["scripted"], "methods": ["sa", "auto"], "benchmarks": ["bundled:test/math"], "limit": 1,
              "n": 2, "k": [1, 2], "out": str(out), "bootstrap": 100, "concurrency": 2, "html_tasks": 2, **kw}  # fmt: skip
    policy = ScriptedPolicy(reply, model_id="scripted")
    Evaluation(make_config(**values), policies={"scripted": policy}, pool=pool).run()
    return policy


def pack(path: Path, ext: str) -> Path:
    """Compress one record file as committed results are: ``compress`` (xz), or gzip by hand."""
    if ext == ".xz":
        return compress(path)
    packed = path.with_name(path.name + ext)
    packed.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return packed


def scores(out: Path) -> dict:
    """results.json's scores per (cell, benchmark, method): all it says but the record file's name."""
    cells = json.loads((out / "results.json").read_text())["cells"]
    return {
        (cell, bench, method): {k: v for k, v in m.items() if k != "records"}
        for cell, c in cells.items()
        for bench, methods in c["benchmarks"].items()
        for method, m in methods.items()
    }


@pytest.mark.parametrize("ext", [".xz", ".gz"])
def test_report_only_from_compressed_records_writes_the_same_table_and_a_run_appends(tmp_path, pool, ext):
    out = tmp_path / "res"
    run(out, pool)
    table, cells = (out / "table.md").read_bytes(), scores(out)
    plain = sorted((out / "rollouts").rglob("*.jsonl"))
    trees = {p: read_trees(p)[0] for p in plain}
    assert len(plain) == 2 and len(cells) == 2
    for p in plain:
        assert pack(p, ext).suffix == ext
    (out / "table.md").unlink()

    policy = run(out, pool, report_only=True)
    assert not policy.calls and (out / "table.md").read_bytes() == table and scores(out) == cells
    assert sorted((out / "rollouts").rglob("*.jsonl")) == []  # report-only leaves them compressed

    policy = run(out, pool, limit=2)  # one more task per method: only it runs, appended to the old records
    assert len(policy.calls) == 2 + 2 + 2  # sa: 2 agent calls; auto: 2 designs + 2 agent calls
    for p in plain:
        got, bad = read_trees(p)
        assert not bad and got[:1] == trees[p] and len(got) == 2
    assert not list((out / "rollouts").rglob(f"*{ext}"))
    assert not load_run(out).bad_lines
