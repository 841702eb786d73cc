"""benchmarks/coevolution_v2.py: the suite preset, and the whole pipeline at its smallest size with the tiny model
(train two modes, resume them to more steps, evaluate held-out, write table.md, curves.png and STATUS.md)."""

from __future__ import annotations

import argparse
import json
import lzma
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import benchmark_script, metric_steps, run_benchmark, write_oracle


def test_results_copies_are_compressed_and_replace_a_stale_plain_copy(tmp_path):
    v1 = benchmark_script("coevolution_v2").v1
    src, dst = tmp_path / "run", tmp_path / "results"
    (src / "evals" / "arith").mkdir(parents=True)
    (src / "evals" / "arith" / "results.json").write_text('{"cells": "new"}')
    (src / "evals" / "arith" / "table.md").write_text("| table |")
    (dst / "evals" / "arith").mkdir(parents=True)
    (dst / "evals" / "arith" / "results.json").write_text('{"cells": "old, plain"}')  # an earlier report's copy
    (dst / "evals" / "arith" / "results.json.xz").write_bytes(lzma.compress(b'{"cells": "old"}'))
    v1.copy_compressed(src, dst)
    assert sorted(p.name for p in (dst / "evals" / "arith").iterdir()) == ["results.json.xz", "table.md"]
    assert lzma.decompress((dst / "evals" / "arith" / "results.json.xz").read_bytes()) == b'{"cells": "new"}'
    assert (src / "evals" / "arith" / "results.json").is_file()  # the run's own summary stays plain

    (src / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    (dst / "metrics_coupled.jsonl").write_text('{"step": 0}\n')  # an earlier report's plain copy
    v1.copy_metrics(src, dst, "coupled")
    assert lzma.decompress((dst / "metrics_coupled.jsonl.xz").read_bytes()) == b'{"step": 0}\n{"step": 1}\n'
    assert not (dst / "metrics_coupled.jsonl").exists() and (src / "metrics.jsonl").is_file()


def test_suite_preset_draws_the_families_in_proportion_and_sets_the_sizes():
    v2 = benchmark_script("coevolution_v2")
    args = argparse.Namespace(families=["arith", "lookup", "strings", "code"], batch_size=4, designs=4, executions=2,
                              designer_max_tokens=384, executor_max_tokens=192)  # fmt: skip
    overrides = dict(o.split("=", 1) for o in v2.suite_overrides(args))
    assert overrides["data.mix"] == "{math: 3, code: 1}"  # three math families of four: a task a family, B=4
    assert "suite_code, split: train" in overrides["data.train"] and "suite_arith, split: train" in overrides["data.train"]
    assert (overrides["rollout.m_designs"], overrides["rollout.n_executions"], overrides["data.batch_size"]) == ("4", "2", "4")


def test_domain_hint_off_sets_the_override_the_eval_flag_and_folders_of_its_own(tmp_path, monkeypatch):
    """``--domain-hint off`` (issue 62): rollout.domain_hint=off for training, ``--domain-hint off`` for every
    held-out evaluation (the start model's too), and ``_nohint`` folders; the default adds none of it."""
    v2 = benchmark_script("coevolution_v2")
    oracle = write_oracle(tmp_path)
    on, _ = v2.parse(["--oracle", str(oracle)])
    off, _ = v2.parse(["--oracle", str(oracle), "--domain-hint", "off", "--seed", "1"])
    assert not any("domain_hint" in o for o in on.train_args) and on.runs == "runs/coevolution_v2"
    assert "rollout.domain_hint=off" in off.train_args
    assert (off.runs, off.results) == ("runs/coevolution_v2_seed1_nohint", "benchmarks/results/coevolution_v2_seed1_nohint")
    calls = []
    monkeypatch.setattr(v2.v1.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    for args in (on, off):
        v2.v1.evaluate(args, v2.v1.START, benchmarks=("suite_arith:test",), methods=("auto",), out=tmp_path / "e")
    assert "--domain-hint" not in calls[0]
    assert calls[1][calls[1].index("--domain-hint") + 1] == "off"


def test_oracle_methods_per_family(tmp_path):
    v2 = benchmark_script("coevolution_v2")
    data = {
        "per_family": {"arith": {"oracle": "fixed:tool_pair", "oracle_pattern": "tool-pair"},
                       "code": {"oracle": "fixed:sample_tests", "oracle_pattern": "solver-tester"}},
        "matrix": {"arith": {"sa": {}, "fixed:tool_pair": {}}, "code": {"sa": {}, "fixed:sample_tests": {}}},
        "mixture": {"best_single": "fixed:tool_pair"},
    }  # fmt: skip
    (tmp_path / "matrix.json").write_text(json.dumps(data))
    oracle = v2.Oracle.read(tmp_path / "matrix.json")
    assert oracle.eval_methods("arith") == ("auto", "sa", "fixed:tool_pair")  # the best single is the oracle here
    assert oracle.eval_methods("code") == ("auto", "sa", "fixed:sample_tests")  # the matrix never ran tool_pair on code
    with pytest.raises(SystemExit, match="does not exist"):
        v2.Oracle.read(tmp_path / "missing.json")


def test_designs_by_pattern_keep_invalid_designs_apart():
    v2 = benchmark_script("coevolution_v2")

    def design(valid, pattern, reward, advantage):
        return SimpleNamespace(valid=valid, structure={"pattern": pattern} if valid else None, reward=reward,
                               advantage=advantage)  # fmt: skip

    tree = SimpleNamespace(task={"metadata": {"family": "arith"}},
                           designs=[design(True, "tool-pair", 1.4, 1.2), design(True, "tool-pair", 0.4, -0.2),
                                    design(False, None, 0.0, -1.0), design(True, "single", 0.4, 0.0)])  # fmt: skip
    by_family = v2.pattern_designs([(0, [tree]), (1, [tree])])
    assert by_family == {"arith": {"tool-pair": [(1.4, 1.2), (0.4, -0.2)] * 2, v2.INVALID: [(0.0, -1.0)] * 2,
                                   "single": [(0.4, 0.0)] * 2}}  # fmt: skip
    section = "\n".join(v2.pattern_section(["arith"], ["frozen", "coupled"], {"frozen": by_family, "coupled": {}}))
    assert "| tool-pair | 4 (0.90, +0.50) | 0 |" in section  # most designs first; a mode without any: 0
    assert section.index("| tool-pair |") < section.index(f"| {v2.INVALID} | 2 (0.00, -1.00) | 0 |")


def test_pattern_shares_count_valid_designs_per_family_and_skip_steps_without_one():
    v2 = benchmark_script("coevolution_v2")

    def tree(family, *patterns):
        designs = [SimpleNamespace(valid=p is not None, structure={"pattern": p} if p else None, reward=0.0,
                                   advantage=0.0) for p in patterns]  # fmt: skip
        return SimpleNamespace(task={"metadata": {"family": family}}, designs=designs)

    steps = [(0, [tree("arith", "tool-pair", "single", None), tree("start", "single", "single")]),
             (1, [tree("arith", None, None), tree("start", "ensemble", "single")])]  # fmt: skip
    oracle = v2.pattern_shares(steps, {"arith": "tool-pair", "start": "single"})
    assert oracle == {"arith": [(0, 0.5)], "start": [(0, 1.0), (1, 0.5)]}  # invalid designs are not counted
    single = v2.pattern_shares(steps, dict.fromkeys(["arith", "start"], v2.SINGLE))
    assert single == {"arith": [(0, 0.5)], "start": [(0, 1.0), (1, 0.5)]}
    modal = v2.modal_patterns(steps, ["arith", "start", "code"], last=1)  # the last step only
    assert modal == {"arith": "-", "start": "ensemble 0.50", "code": "-"}  # arith's designs there are all invalid
    assert v2.modal_patterns(steps, ["arith", "start"])["start"] == "single 0.75"


class FakeRuns:
    """v1's ``train`` and ``checkpoint_step`` over a dict of steps per mode: each call is logged, and a mode's
    ``hooks`` entry runs inside its chunk (to block it, or to fail it)."""

    def __init__(self, monkeypatch, v1, steps: dict[str, int], hooks=None):
        self.steps, self.hooks, self.calls, self.lock = dict(steps), hooks or {}, [], threading.Lock()
        monkeypatch.setattr(v1, "run_dir", lambda args, mode: Path(mode))
        monkeypatch.setattr(v1, "checkpoint_step", lambda folder: self.steps[folder.name])
        monkeypatch.setattr(v1, "train", self.train)

    def train(self, args, mode, until):
        with self.lock:
            self.calls.append((mode, until))
        if mode in self.hooks:
            self.hooks[mode]()
        self.steps[mode] = until
        return True


def schedule_args(modes, steps, jobs, chunk=1):
    return argparse.Namespace(modes=modes, steps=steps, jobs=jobs, chunk=chunk, save_every=1)


def test_the_mode_with_the_fewest_steps_goes_first_and_finished_modes_are_skipped(monkeypatch):
    v1 = benchmark_script("coevolution_v2").v1
    runs = FakeRuns(monkeypatch, v1, {"a": 2, "b": 0, "c": 4})
    reports = []
    v1.train_round_robin(schedule_args(["a", "b", "c"], steps=4, jobs=1, chunk=2), lambda: reports.append(1))
    assert runs.calls == [("b", 2), ("a", 4), ("b", 4)]  # ties in --modes order; c had its 4 steps
    assert runs.steps == {"a": 4, "b": 4, "c": 4} and len(reports) == 3


def test_a_slow_mode_does_not_hold_a_fast_one_back(monkeypatch):
    v1 = benchmark_script("coevolution_v2").v1
    fast_done = threading.Event()
    # the slow mode's first chunk ends only once the fast mode has all its steps: a round barrier (every mode
    # one chunk, then the next round) would keep the fast mode at step 1 and the wait would time out
    runs = FakeRuns(monkeypatch, v1, {"fast": 0, "slow": 0}, hooks={"slow": lambda: fast_done.wait(timeout=20)})
    v1.train_round_robin(schedule_args(["slow", "fast"], steps=3, jobs=2),
                         lambda: runs.steps["fast"] == 3 and fast_done.set())  # fmt: skip
    assert fast_done.is_set()
    assert runs.calls.index(("fast", 3)) < runs.calls.index(("slow", 2)) and runs.steps == {"fast": 3, "slow": 3}


def test_a_failed_chunk_is_raised_after_the_other_modes_finish_and_not_retried(monkeypatch):
    v1 = benchmark_script("coevolution_v2").v1

    def fail():
        raise RuntimeError("trainer exited with 1")

    runs = FakeRuns(monkeypatch, v1, {"bad": 0, "good": 0}, hooks={"bad": fail})
    with pytest.raises(RuntimeError, match="exited with 1"):
        v1.train_round_robin(schedule_args(["bad", "good"], steps=3, jobs=2), lambda: None)
    assert runs.steps == {"bad": 0, "good": 3} and runs.calls.count(("bad", 1)) == 1


def test_a_job_with_nothing_to_train_evaluates_a_finished_mode_while_another_trains(monkeypatch):
    v1 = benchmark_script("coevolution_v2").v1
    log, start_done = [], threading.Event()
    # the slow mode's chunk ends only once the start model's evaluation ran: a version that evaluates after all
    # training (or lets the second job idle) would time out the wait and log the evaluation after the chunk
    runs = FakeRuns(monkeypatch, v1, {"done": 3, "slow": 2}, hooks={"slow": lambda: start_done.wait(timeout=20)})

    def evaluation(name, event=None):
        def call():
            with runs.lock:
                log.append((name, dict(runs.steps)))
            if event:
                event.set()
        return call

    evals = {"start": [evaluation("start", start_done)], "slow": [evaluation("slow")], "done": [evaluation("done")]}
    v1.train_round_robin(schedule_args(["slow", "done"], steps=3, jobs=2), lambda: None, evals)
    assert start_done.is_set() and log[0] == ("start", {"done": 3, "slow": 2})
    # a mode is evaluated once it has its steps, never mid-training
    assert ("slow", {"done": 3, "slow": 3}) in log and {name for name, _ in log} == {"start", "slow", "done"}


def test_a_failed_modes_evaluations_are_dropped_and_the_error_raised_after_the_rest(monkeypatch):
    v1 = benchmark_script("coevolution_v2").v1
    log = []

    def fail():
        raise RuntimeError("trainer exited with 1")

    FakeRuns(monkeypatch, v1, {"bad": 0, "good": 2}, hooks={"bad": fail})
    evals = {mode: [lambda mode=mode: log.append(mode)] for mode in ("start", "bad", "good")}
    with pytest.raises(RuntimeError, match="exited with 1"):
        v1.train_round_robin(schedule_args(["bad", "good"], steps=2, jobs=2), lambda: None, evals)
    assert sorted(log) == ["good", "start"]


@pytest.mark.slow
def test_pipeline_trains_resumes_evaluates_and_reports(tmp_path):
    write_oracle(tmp_path)
    runs, results = tmp_path / "runs", tmp_path / "results"
    common = ["--config", "tiny", "--model", "tiny", "--oracle", str(tmp_path / "matrix.json"),
              "--modes", "frozen", "stagewise", "--save-every", "1", "--stage-len", "1", "--batch-size", "1",
              "--designs", "2", "--executions", "1", "--designer-max-tokens", "48", "--executor-max-tokens", "24",
              "--dtype", "float32", "--runs", str(runs), "--results", str(results), "--eval-limit", "1", "--eval-n", "1"]  # fmt: skip

    def run(*extra: str) -> None:
        run_benchmark("coevolution_v2", *common, *extra)

    run("--steps", "1", "--no-eval")
    ids = {m: json.loads((runs / m / "run.json").read_text())["run_id"] for m in ("frozen", "stagewise")}
    assert {m: metric_steps(runs / m) for m in ids} == {"frozen": [0], "stagewise": [0]}
    status = (results / "STATUS.md").read_text()
    assert status.startswith("# Co-evolution v2 — status: training done, held-out PARTIAL")

    run("--steps", "2")  # continues both runs (a restart would move the old run folder aside and redo step 0)
    for mode, run_id in ids.items():
        assert metric_steps(runs / mode) == [0, 1]
        assert json.loads((runs / mode / "run.json").read_text())["run_id"] == run_id
    assert sorted(p.name for p in runs.iterdir()) == ["frozen", "heldout_stagewise", "heldout_start", "stagewise"]
    trees = (runs / "stagewise" / "rollouts").glob("step_*.jsonl")
    families = {json.loads(line)["task"]["metadata"]["family"] for f in trees for line in f.read_text().splitlines()}
    assert families == {"arith"}  # trained on the suite's family, not the bundled set

    table = (results / "table.md").read_text()
    assert "| frozen | 2 |" in table and "| stagewise | 2 |" in table  # the training table: a row per mode
    single = table.split("Single-agent share per family")[1].split("\n\n")[1].splitlines()  # the drift table
    assert single[0] == "| mode | arith |" and [r.split(" | ")[0] for r in single[2:]] == ["| frozen", "| stagewise"]
    modal = table.split("most over the last 5 steps")[1].split("\n\n")[1].splitlines()
    assert modal[0] == "| mode | arith |" and [r.split(" | ")[0] for r in modal[2:]] == ["| frozen", "| stagewise"]
    held = [line for line in table.splitlines() if line.startswith(("| start | ", "| stagewise | "))]
    assert any(line.startswith("| start | ") and line.count("(1)") == 3 for line in held)  # auto - sa/best/oracle
    assert any(line.startswith("| stagewise | ") and "solved only here" in line for line in held)  # App. C column
    assert (results / "curves.png").read_bytes()[:4] == b"\x89PNG"
    summary = results / "heldout" / "stagewise" / "evals" / "arith" / "results.json"
    assert json.loads(lzma.decompress(summary.with_name("results.json.xz").read_bytes()))["cells"]
    assert not summary.exists()  # committed compressed only (the size budget of tests/test_repository.py)
    assert not list(results.rglob("report.html"))  # derived: metaagent-eval --report-only writes it from the records
    metrics = lzma.decompress((results / "metrics_stagewise.jsonl.xz").read_bytes()).decode().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [0, 1]
    status = (results / "STATUS.md").read_text()
    assert status.startswith("# Co-evolution v2 — status: done\n")  # every step trained, every held-out record in
    assert "| frozen | 2 of 2 | - |" in status and "| stagewise | 2 of 2 | arith |" in status
    assert "python benchmarks/coevolution_v2.py --config tiny" in status


def test_ctrl_c_starts_nothing_new_and_lets_the_running_job_finish():
    """SIGINT in the driver (KeyboardInterrupt in its main thread): the running call ends, queued calls never
    start, the exit is 130 with one line (a real SIGINT: it wakes the main thread's wait at once)."""
    import signal
    import time

    v1 = benchmark_script("coevolution_v2").v1
    started, ended = [], []
    gate = threading.Event()

    def call(i: int):
        def run():
            started.append(i)
            gate.set()
            time.sleep(0.3)
            ended.append(i)

        return run

    threading.Thread(target=lambda: (gate.wait(5), time.sleep(0.1), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
    try:
        with pytest.raises(SystemExit) as stop:
            v1.run_jobs(1, [call(i) for i in range(5)])
        assert stop.value.code == 130
        assert started == ended == [0]  # the running call finished; the queued four were cancelled
        assert v1.STOP.is_set()
    finally:
        v1.STOP.clear()
