"""benchmarks/evidence.py: the compute plan and its cuts, the report from no records, and the whole driver end to
end with the tiny model at toy size (2 seeds, 1 step, 1 task per benchmark): training, held-out evaluations,
resume, and the report (table.md, seed tables, gains.png, checkpoint hashes, STATUS.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import benchmark_script, metric_steps, run_benchmark, write_oracle


def placed(tmp_path: Path, monkeypatch) -> None:
    """GSM8K's and MBPP's files present under $METAAGENT_BENCHMARKS_DIR (the plan only checks they exist)."""
    for rel in ("gsm8k/test.jsonl", "mbpp/sanitized-mbpp.json"):
        (tmp_path / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / rel).write_text("")
    monkeypatch.setenv("METAAGENT_BENCHMARKS_DIR", str(tmp_path / "data"))


def test_plan_cuts_in_the_issues_order_and_never_the_seeds(tmp_path, monkeypatch):
    ev = benchmark_script("evidence")
    placed(tmp_path, monkeypatch)
    base = ["--runs", str(tmp_path / "runs"), "--modes", "designer_only", "stagewise", "coupled", "sa_grpo"]
    free = ev.plan(ev.parse(base))
    assert free.cuts == () and "227 s a step" in free.lines[0] and "AVX2" in free.lines[0]
    assert "12 training runs" in free.lines[0]  # 3 seeds x 4 modes
    tight = ev.plan(ev.parse([*base, "--budget-hours", "1"]))
    assert tight.cuts == ev.CUT_ORDER == ("mbpp", "coupled", "stagewise-external")
    assert "does not fit" in tight.lines[3] and "9 training runs" in tight.lines[0]  # coupled cut, seeds kept
    assert tight.hours < free.hours
    # a budget between the totals with and without MBPP cuts MBPP only
    no_mbpp = ev.estimate(
        ev.parse(base), *ev.seed_args(ev.parse(base), 0), ("mbpp",), 227.0, ev.PRIOR_EVAL_RATE
    )
    middle = ev.plan(ev.parse([*base, "--budget-hours", str(sum(no_mbpp[:2]) + 0.01)]))
    assert middle.cuts == ("mbpp",)
    assert "mbpp" not in ev.chosen_externals(ev.parse(base), ["arith"], middle.cuts)
    assert set(ev.chosen_externals(ev.parse(base), ["arith"])) == {
        "gsm8k",
        "humaneval",
        "mbpp",
        "heldout_arith",
    }


def test_shipped_benchmarks_need_no_placed_copy_and_one_without_a_copy_is_left_out(tmp_path, monkeypatch):
    from metaagent.data import loaders

    ev = benchmark_script("evidence")
    monkeypatch.setenv("METAAGENT_BENCHMARKS_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(loaders, "CHECKOUT_BENCHMARK_DIRS", ())
    args = ev.parse(["--runs", str(tmp_path / "runs")])
    assert ev.unavailable(args, ["arith"]) == []  # none placed: GSM8K and MBPP ship with the package
    assert set(ev.chosen_externals(args, ["arith"])) == {"gsm8k", "humaneval", "mbpp", "heldout_arith"}
    assert not any("No local copy" in line for line in ev.plan(args).lines)
    monkeypatch.setattr(loaders, "SHIPPED_DIR", tmp_path / "none-shipped")  # an install without them
    assert ev.unavailable(args, ["arith"]) == ["gsm8k", "mbpp"]
    assert set(ev.chosen_externals(args, ["arith"])) == {"humaneval", "heldout_arith"}
    assert "No local copy" in ev.plan(args).lines[-1]
    assert ev.methods_of(ev.externals(["code"])["humaneval"]) == ("auto", "sa", "sa@auto")  # no pot on code
    assert ev.methods_of(ev.externals(["arith"])["heldout_arith"])[-2:] == ("fixed:pot", "best-per-domain")
    with pytest.raises(SystemExit, match="NAME=N"):
        ev.parse(["--external-limit", "gsm8k=0"])


def test_report_only_with_no_records_writes_a_partial_report(tmp_path, monkeypatch):
    ev = benchmark_script("evidence")
    write_oracle(tmp_path)
    monkeypatch.setenv("METAAGENT_BENCHMARKS_DIR", str(tmp_path / "empty"))
    results = tmp_path / "results"
    args = ev.parse(["--runs", str(tmp_path / "runs"), "--results", str(results), "--report-only",
                     "--oracle", str(tmp_path / "matrix.json"), "--families", "arith"])  # fmt: skip
    ev.report(args)
    table = (results / "table.md").read_text()
    assert "| arith | 0 of 3 | - |" in table and "no gains.png yet" in table
    assert not (results / "gains.png").exists()
    status = (results / "STATUS.md").read_text()
    assert status.startswith("# Evidence — status: PARTIAL") and "| 2 | sa_grpo | 0 of 40 | - | - |" in status
    assert json.loads((results / "checkpoints.json").read_text()) == {}


@pytest.mark.slow
def test_driver_trains_two_seeds_evaluates_and_reports(tmp_path):
    write_oracle(tmp_path)
    runs, results = tmp_path / "runs", tmp_path / "results"
    common = ["--seeds", "0", "1", "--modes", "designer_only", "sa_grpo", "--runs", str(runs), "--results",
              str(results), "--external", "humaneval", "heldout", "--external-limit", "humaneval=1", "heldout=1",
              "--config", "tiny", "--model", "tiny", "--oracle", str(tmp_path / "matrix.json"), "--families", "arith",
              "--save-every", "1", "--stage-len", "1", "--batch-size", "1", "--designs", "2", "--executions", "1",
              "--designer-max-tokens", "48", "--executor-max-tokens", "24", "--dtype", "float32",
              "--eval-limit", "1"]  # fmt: skip

    def run(*extra: str) -> None:
        run_benchmark("evidence", *common, *extra, env={"METAAGENT_BENCHMARKS_DIR": str(tmp_path)}, timeout_s=1500)

    run("--steps", "1")
    for seed in (0, 1):
        for mode in ("designer_only", "sa_grpo"):
            assert metric_steps(runs / f"seed{seed}" / mode) == [0]
            for kind in ("evals/arith", "external/humaneval", "external/heldout_arith"):
                res = json.loads(
                    (runs / f"seed{seed}" / f"heldout_{mode}" / kind / "results.json").read_text()
                )
                assert (
                    res["complete"] and res["config"]["seed"] == seed
                )  # each seed evaluated with its own seed
    assert (runs / "seed0" / "heldout_start" / "evals" / "arith" / "results.json").is_file()
    assert (runs / "start" / "external" / "humaneval" / "results.json").is_file()
    assert not (runs / "seed1" / "heldout_start").exists()  # the start model is evaluated once
    held = json.loads(
        (runs / "seed0" / "heldout_designer_only" / "external" / "heldout_arith" / "results.json").read_text()
    )
    assert set(held["methods"]) >= {"auto", "sa", "sa@auto", "fixed:pot", "best-per-domain"}

    table = (results / "table.md").read_text()
    rows = {
        line.split(" | ")[0]: line
        for line in table.split("### designer_only")[1].splitlines()
        if line.startswith("| ")
    }
    for row in ("| arith", "| humaneval", "| heldout_arith"):
        assert rows[row].startswith(f"{row} | 2 of 2 | "), rows[row]  # both seeds' gains are in
    assert "s0: " in rows["| arith"] and "s1: " in rows["| arith"]  # the strongest baseline named per seed
    assert "### sa_grpo" not in table  # the single agent is a baseline, never a headline mode
    assert (results / "gains.png").read_bytes()[:4] == b"\x89PNG"
    hashes = json.loads((results / "checkpoints.json").read_text())
    assert set(hashes) == {"0", "1"} and all(
        len(h["sha256"]) == 64 for s in hashes.values() for h in s.values()
    )
    seed0 = (results / "seed0.md").read_text()
    assert "## sa_grpo (step 1, sha256 " in seed0 and "| humaneval | sa@auto" in seed0
    assert (results / "start.md").read_text().count("| humaneval |") >= 3
    status = (results / "STATUS.md").read_text()
    assert status.startswith("# Evidence — status: done")
    assert "| 1 | sa_grpo | 1 of 1 | arith | heldout_arith, humaneval |" in status
    assert "nohup python benchmarks/evidence.py --seeds 0 1" in status
    assert "python benchmarks/evidence.py --seeds 0 1" in (results / "COMMAND.md").read_text()

    run("--steps", "2", "--report-only")  # the report alone: nothing trained, the status back to partial
    assert metric_steps(runs / "seed0" / "designer_only") == [0]
    assert (results / "STATUS.md").read_text().startswith("# Evidence — status: PARTIAL")


def test_committed_records_keep_external_rollouts_out(tmp_path, monkeypatch):
    """The suite's held-out folders are copied whole (compressed); of an external benchmark only its summary:
    its rollouts quote the benchmark's questions, kept in its own copy (shipped or placed)."""
    import lzma

    ev = benchmark_script("evidence")
    monkeypatch.setenv("METAAGENT_BENCHMARKS_DIR", str(tmp_path / "empty"))
    runs, results = tmp_path / "runs", tmp_path / "results"
    args = ev.parse(["--runs", str(runs), "--results", str(results), "--seeds", "0"])
    for kind in ("evals/arith", "external/gsm8k"):
        folder = runs / "seed0" / "heldout_designer_only" / kind
        folder.mkdir(parents=True)
        (folder / "results.json").write_text('{"cells": {}}')
        (folder / "table.md").write_text("| table |")
    ext = runs / "seed0" / "heldout_designer_only" / "external" / "gsm8k" / "rollouts" / "m" / "b"
    ext.mkdir(parents=True)
    (ext / "auto.jsonl").write_text('{"task": {"question": "Q"}}\n')
    ev.copy_records(args, results)
    held = results / "records" / "seed0" / "heldout_designer_only"
    assert sorted(p.name for p in (held / "evals" / "arith").iterdir()) == ["results.json.xz", "table.md"]
    assert sorted(p.name for p in (held / "external" / "gsm8k").iterdir()) == ["results.json.xz", "table.md"]
    assert lzma.decompress((held / "external" / "gsm8k" / "results.json.xz").read_bytes()) == b'{"cells": {}}'


def test_session_scale_sets_the_evaluation_sizes_and_the_sa_grpo_methods(tmp_path, monkeypatch):
    ev = benchmark_script("evidence")
    placed(tmp_path, monkeypatch)
    args = ev.parse(["--scale", "session", "--runs", str(tmp_path / "runs")])
    a2, oracle = ev.seed_args(args, 0)
    assert (a2.eval_limit, a2.eval_n, a2.best_of_top, a2.sa_grpo_ks) == (20, 1, 2, [2, 3])
    assert args.external == ["gsm8k", "humaneval"] and args.limits == {"gsm8k": 40, "humaneval": 30}
    gsm8k = ev.chosen_externals(args, a2.families)["gsm8k"]
    assert ev.methods_of(gsm8k, a2, "sa_grpo") == ("sa", "sa@2", "sa@3")
    assert ev.methods_of(gsm8k, a2, "designer_only") == ("auto", "sa", "sa@auto", "fixed:pot")
    # the user's own flags win over the scale's
    mine = ev.seed_args(ev.parse(["--scale", "session", "--eval-n", "3", "--runs", str(tmp_path / "r")]), 0)[0]
    assert mine.eval_n == 3


def test_best_of_top_keeps_the_matrix_best_templates(tmp_path):
    ev = benchmark_script("evidence")
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({
        "per_family": {"arith": {"oracle": "fixed:b", "oracle_pattern": "p"}},
        "matrix": {"arith": {"sa": {"mean": 0.1}, "fixed:a": {"mean": 0.2}, "fixed:b": {"mean": 0.5},
                             "fixed:c": {"mean": 0.3}}},
        "mixture": {"best_single": "sa"},
    }))  # fmt: skip
    oracle = ev.v2.Oracle.read(path)
    assert ev.v2.best_of(oracle, "arith") == ("fixed:a", "fixed:b", "fixed:c", "fixed:pot", "sa")
    assert ev.v2.best_of(oracle, "arith", top=2) == ("fixed:b", "fixed:c", "fixed:pot", "sa")


def test_sa_grpo_pairs_auto_with_the_least_k_at_or_above_its_calls():
    ev = benchmark_script("evidence")

    def res(*methods):
        return {"cells": {"c": {"benchmarks": {"b": {m: {"per_task": []} for m in methods}}}}}

    assert ev.matched_sa_at_k(res("sa", "sa@2", "sa@3"), "b", 2.2)[0] == "sa@3"
    assert ev.matched_sa_at_k(res("sa", "sa@2", "sa@3"), "b", 2.0)[0] == "sa@2"
    assert ev.matched_sa_at_k(res("sa", "sa@2", "sa@3"), "b", 4.5)[0] == "sa@3"  # the largest run
    assert ev.matched_sa_at_k(res("sa", "sa@auto (k=2)"), "b", 2.2)[0] == "sa@auto"
    assert ev.matched_sa_at_k(None, "b", 2.0) == ("sa@auto", None)


def test_restore_brings_back_complete_runs_and_drops_a_lost_checkpoints_partial_records(tmp_path, monkeypatch):
    import lzma

    ev = benchmark_script("evidence")
    placed(tmp_path, monkeypatch)
    runs, results = tmp_path / "runs", tmp_path / "results"
    args = ev.parse(["--scale", "session", "--runs", str(runs), "--results", str(results), "--seeds", "0",
                     "--modes", "designer_only", "sa_grpo", "--no-suite"])  # fmt: skip
    families = ev.seed_args(args, 0)[0].families

    def commit(mode: str, complete: bool, skip: str | None = None) -> None:
        for f in ev.expected_folders(args, 0, mode, families):
            if f.name == skip:
                continue
            dst = results / "records" / f.relative_to(runs)
            dst.mkdir(parents=True, exist_ok=True)
            (dst / "results.json.xz").write_bytes(lzma.compress(json.dumps({"complete": complete}).encode()))

    commit("designer_only", True)
    commit("sa_grpo", False)
    done = ev.restore_records(args, families)
    assert done == {(0, "designer_only")}
    for f in ev.expected_folders(args, 0, "designer_only", families):
        assert json.loads((f / "results.json").read_text()) == {"complete": True}
    assert not (results / "records" / "seed0" / "heldout_sa_grpo").exists()  # its checkpoint is gone: trained again
    commit("sa_grpo", True, skip="humaneval")  # one evaluation missing: not complete either
    assert ev.restore_records(args, families) == {(0, "designer_only")}


def test_a_run_restored_from_records_is_not_planned_again_and_lets_status_finish(tmp_path, monkeypatch):
    """A new machine: seed 0's runs folder is gone and its complete evaluations are committed under records/;
    seed 1 trained here. A restored (seed, mode) costs the plan no training and no evaluation and reads
    restored in STATUS; STATUS is done once every (seed, mode) is evaluated or restored, PARTIAL while one
    family's evaluation is missing or a live run is behind --steps (its evaluations are of an earlier
    checkpoint)."""
    import lzma
    import math

    ev = benchmark_script("evidence")
    placed(tmp_path, monkeypatch)
    runs, results = tmp_path / "runs", tmp_path / "results"
    args = ev.parse(["--scale", "session", "--runs", str(runs), "--results", str(results), "--seeds", "0", "1",
                     "--modes", "designer_only", "sa_grpo", "--families", "arith", "code"])  # fmt: skip
    a2, oracle = ev.seed_args(args, 0)
    modes, steps = ("designer_only", "sa_grpo"), a2.steps
    chosen = ev.chosen_externals(args, a2.families)
    per_run = {m: ev.checkpoint_records(a2, oracle, chosen, True, m) for m in modes}

    def evaluations(seed: int, mode: str, committed: bool, skip: str | None = None) -> None:
        for f in ev.expected_folders(args, seed, mode, a2.families):
            if f.name == skip:
                continue
            body = json.dumps({"complete": True, "cells": {}}).encode()
            dst = results / "records" / f.relative_to(runs) if committed else f
            dst.mkdir(parents=True, exist_ok=True)
            if committed:
                (dst / "results.json.xz").write_bytes(lzma.compress(body))
            else:
                (dst / "results.json").write_bytes(body)

    def trained(seed: int, mode: str, n: int) -> None:
        folder = runs / f"seed{seed}" / mode
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(n)))

    def train_h(n_steps: int) -> float:
        chunks = math.ceil(n_steps / (a2.chunk or a2.save_every))
        return ev._report.train_hours(n_steps, chunks, 100.0, ev.v2.PRIOR_CHUNK_S)

    def estimate() -> tuple[float, int]:
        hours, _, records = ev.estimate(args, a2, oracle, (), 100.0, 35.0)
        return hours, records

    def status() -> str:
        ev.write_status(args)
        return (results / "STATUS.md").read_text()

    start = ev.checkpoint_records(a2, oracle, chosen)
    assert estimate() == (train_h(4 * steps), start + 2 * sum(per_run.values()))  # nothing in yet
    for mode in (ev.START, *modes):
        evaluations(0, mode, committed=True)
    assert not (runs / "seed0").exists()
    assert estimate() == (train_h(2 * steps), sum(per_run.values()))  # seed 1 only; the start model is in too

    for mode in modes:
        trained(1, mode, steps)
    evaluations(1, "designer_only", committed=False)
    evaluations(1, "sa_grpo", committed=False, skip="code")  # one family's evaluation missing
    assert estimate() == (0.0, per_run["sa_grpo"])
    text = status()
    assert text.startswith("# Evidence — status: PARTIAL")
    for mode in modes:
        assert f"| 0 | {mode} | {steps} of {steps} (restored from records/) |" in text
    assert f"| 1 | designer_only | {steps} of {steps} | arith, code |" in text
    assert f"| 1 | sa_grpo | {steps} of {steps} | arith |" in text

    evaluations(1, "sa_grpo", committed=False)
    assert estimate() == (0.0, 0)
    assert status().startswith("# Evidence — status: done")

    trained(1, "designer_only", steps - 1)  # --steps raised after its evaluations: it trains on
    assert estimate() == (train_h(1), per_run["designer_only"])
    text = status()
    assert text.startswith("# Evidence — status: PARTIAL")
    assert f"| 1 | designer_only | {steps - 1} of {steps} |" in text
