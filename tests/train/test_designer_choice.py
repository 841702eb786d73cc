"""benchmarks/designer_choice.py (issue 62 item 5): the modal-pattern and match logic on hand-made records, the
arms' settings, the restore of committed summaries, and the whole driver end to end with the tiny model at toy
size (1 seed, 2 arms, 1 step, one family, a 1-task held-out evaluation), then the cross-session restore: the
runs folder deleted, a rerun trains nothing and rebuilds the same report from the committed files."""

from __future__ import annotations

import json
import lzma
import re
import shutil
from types import SimpleNamespace

import pytest
from builders import benchmark_script, metric_steps, run_benchmark, write_oracle


def design(pattern: str | None, reward: float = 0.0, advantage: float = 0.0, executions=()):
    """A design of ``pattern`` (None: it failed the checks) as the records give it."""
    return SimpleNamespace(valid=pattern is not None, structure={"pattern": pattern} if pattern else None,
                           reward=reward, advantage=advantage, executions=list(executions))  # fmt: skip


def tree(family: str, *designs, budget: str | None = None):
    t = SimpleNamespace(task={"metadata": {"family": family}}, designs=list(designs), budget=budget)
    t.executions = lambda: [(d, e) for d in t.designs for e in d.executions]
    return t


def execution(calls: int, correct: float | None):
    reward = None if correct is None else SimpleNamespace(correct=correct)
    return SimpleNamespace(turns=[object()] * calls, reward=reward)


def test_step_summary_counts_patterns_per_family_and_pools_the_budget_tags():
    dc = benchmark_script("designer_choice")
    step = dc.step_summary(3, [
        tree("lookup", design("self-consistency", 1.4, 1.0), design("single", 0.4, -0.5), design(None, 0.0, -0.5)),
        tree("lookup", design("self-consistency", 0.4, 0.2)),
        tree("start", design("single", 1.4, 0.7, [execution(1, 1.0), execution(2, 0.0)]), budget="LOW"),
        tree("start", design("tool-pair", 0.0, 0.0, [execution(2, None)]), budget="LOW"),
        tree("start", design("single", 1.4, 0.0, [execution(1, 1.0)]), budget="HIGH"),
    ])  # fmt: skip
    assert step["step"] == 3
    assert step["patterns"]["lookup"] == {"self-consistency": [2, pytest.approx(0.9), pytest.approx(0.6)],
                                          "single": [1, 0.4, -0.5], "(invalid)": [1, 0.0, -0.5]}  # fmt: skip
    assert step["patterns"]["start"]["single"] == [2, 1.4, 0.35]
    # LOW: 2 tasks, 3 executions, 5 calls; one reward not computable: 2 scored, 1 correct
    assert step["budget"] == {"LOW": {"tasks": 2, "executions": 3, "calls": 5, "scored": 2, "correct": 1.0},
                              "HIGH": {"tasks": 1, "executions": 1, "calls": 1, "scored": 1, "correct": 1.0}}  # fmt: skip


def test_modal_pattern_over_the_last_steps_and_the_match_with_the_best_pattern():
    dc = benchmark_script("designer_choice")
    steps = [
        dc.step_summary(0, [tree("lookup", design("single"), design("single"), design("single"))]),
        dc.step_summary(1, [tree("lookup", design("self-consistency"), design("single"), design(None), design(None))]),
        dc.step_summary(2, [tree("lookup", design("self-consistency"), design("self-consistency")),
                            tree("code", design("solver-tester"))]),  # fmt: skip
    ]
    window = steps[-2:]  # the last 2 steps: the three single designs of step 0 are out of it
    counts = dc.pattern_counts(window, "lookup")
    assert counts == {"self-consistency": 3, "single": 1}  # invalid designs are no pattern
    assert dc.modal(counts) == ("self-consistency", 0.75, False)
    assert dc.matches(counts, "self-consistency") and not dc.matches(counts, "single")
    everything = dc.pattern_counts(steps, "lookup")
    assert everything == {"single": 4, "self-consistency": 3} and dc.modal(everything)[0] == "single"
    tie = dc.pattern_counts(steps[1:2], "lookup")  # one self-consistency, one single
    assert dc.modal(tie) == ("self-consistency", 0.5, True)  # the first written is named ...
    assert not dc.matches(tie, "self-consistency")  # ... but a tie is no match
    assert dc.modal(dc.pattern_counts(window, "start")) == (None, None, False)  # no design of the family
    assert not dc.matches({}, "single")
    # per-step share of one pattern: a step without a valid design of the family has no point
    assert dc.share_series(steps, "lookup", "self-consistency") == [(0, 0.0), (1, 0.5), (2, 1.0)]
    assert dc.share_series(steps, "code", "solver-tester") == [(2, 1.0)]
    assert (dc.needed(dc.GOAL_FAMILIES, 5), dc.needed(dc.GOAL_SEEDS, 3), dc.needed(dc.GOAL_FAMILIES, 1)) == (4, 2, 1)


def test_each_arm_adds_its_item_to_the_one_before(tmp_path):
    dc = benchmark_script("designer_choice")
    args = dc.parse(["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--seeds", "1"])
    got = {arm: dc.pair_args(args, arm, 1)[0] for arm in dc.ARMS}
    base = got["base"]
    assert base.families == ["arith", "code", "lookup", "start", "strings"] and base.batch_size == 5  # the preset
    assert (base.eval_limit, base.eval_n, base.best_of_top, base.seed) == (20, 1, 2, 1)  # --scale session's sizes
    assert base.runs == str(tmp_path / "runs" / "base" / "seed1") and base.modes == ["designer_only"]
    assert "optim.lr=2e-5" in base.train_args and not any("domain_hint" in o for o in base.train_args)
    assert got["nohint"].domain_hint == "off" and "rollout.domain_hint=off" in got["nohint"].train_args
    for arm, before in (("nohint", "base"), ("knobs", "nohint"), ("control", "knobs"), ("budget", "control")):
        assert set(got[before].train_args) < set(got[arm].train_args), arm  # the arm before's, and more
    assert set(got["knobs"].train_args) - set(got["nohint"].train_args) == set(dc.KNOBS)
    assert "algo.designer_baseline=control" in got["control"].train_args
    assert "rollout.budget.tags=[LOW,HIGH]" in got["budget"].train_args
    assert got["budget"].eval_flags == ("--budget", "HIGH") and got["control"].eval_flags == ()
    # every arm's settings load as a training config
    from metaagent.train.config import TrainConfig

    cfg = TrainConfig.load(None, [o for o in got["budget"].train_args if not o.startswith("data.")])
    assert cfg.optim.per_role.designer.loss_agg_mode == "seq-mean-token-sum-norm" and cfg.algo.normalize == "role"
    assert cfg.algo.designer_baseline == "control" and cfg.rollout.budget.tags == ["LOW", "HIGH"]
    # the user's own settings win over the arm's
    mine = dc.parse(["--runs", str(tmp_path / "r"), "--steps", "3", "algo.normalize=none"])
    a2 = dc.pair_args(mine, "knobs", 0)[0]
    assert a2.steps == 3 and a2.train_args[-1] == "algo.normalize=none"


def test_restore_keeps_whole_runs_and_drops_a_lost_checkpoints_partial_summary(tmp_path, capsys):
    dc = benchmark_script("designer_choice")
    results = tmp_path / "results"
    args = dc.parse(["--runs", str(tmp_path / "runs"), "--results", str(results), "--seeds", "0", "--arms", "base",
                     "nohint", "--oracle", str(write_oracle(tmp_path)), "--families", "arith", "--steps", "2"])  # fmt: skip

    def commit(arm: str, steps_done: int, complete: bool | None) -> None:
        out = dc.committed_dir(args, arm, 0)
        dc.write_xz(out / dc.SUMMARY, json.dumps({"steps_done": steps_done, "steps_target": 2, "metrics": [],
                                                  "steps": []}).encode())  # fmt: skip
        if complete is not None:
            dc.write_xz(out / "heldout_designer_only" / "evals" / "arith" / "results.json.xz",
                        json.dumps({"complete": complete}).encode())  # fmt: skip

    commit("base", 2, True)
    commit("nohint", 2, False)  # trained, its evaluation stopped half way, and the checkpoint is gone
    assert dc.restore(args) == {("base", 0)}
    assert (dc.committed_dir(args, "base", 0) / dc.SUMMARY).is_file()
    assert not dc.committed_dir(args, "nohint", 0).exists() and "dropping them" in capsys.readouterr().out
    commit("nohint", 1, None)  # one of two steps
    assert dc.restore(args) == {("base", 0)} and not dc.committed_dir(args, "nohint", 0).exists()
    no_eval = dc.parse([*args.argv, "--no-eval"])  # without held-out evaluations, the trained steps are whole
    commit("nohint", 2, None)
    assert dc.restore(no_eval) == {("base", 0), ("nohint", 0)}


def test_plan_and_report_with_no_records(tmp_path):
    dc = benchmark_script("designer_choice")
    results = tmp_path / "results"
    args = dc.parse(["--plan", "--runs", str(tmp_path / "runs"), "--results", str(results), "--eval-rate", "1.8"])
    lines = dc.plan(args)
    assert lines[0].startswith("Plan: 15 of 15 (arm, seed) runs left") and "227 s a step" in lines[0]
    assert "1.8 records a minute (given (--eval-rate))" in lines[1] and "more than a 2.5-h session" in lines[-1]
    dc.report(args)
    status = (results / "STATUS.md").read_text()
    assert status.startswith("# Designer choice (issue 62 item 5) — status: PARTIAL")
    assert "| budget | 2 | 0 of 40 | - |" in status and "nohup python benchmarks/designer_choice.py --runs" in status
    assert "--eval-rate 1.8 >> " in status and "--plan" not in status
    table = (results / "table.md").read_text()
    assert "| base | today's designer_only (domain sentence on) | none | pending (0 of 3 seeds trained) |" in table
    assert "No held-out evaluation is in yet." in table and "No shares.png yet" in table
    assert not (results / "shares.png").exists()


def test_plan_rates_are_measured_where_they_exist_and_else_priors_named_as_such(tmp_path):
    """As evidence.py: the seconds a step are measured on these runs' folders, else on the evidence experiment's
    designer_only runs (beside --runs), else the prior, which the plan calls one; --step-s / --eval-rate win."""
    dc = benchmark_script("designer_choice")
    base = ["--plan", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--seeds", "0",
            "--arms", "base", "nohint", "--no-eval"]  # fmt: skip

    def metrics(folder, times) -> None:
        folder.mkdir(parents=True)
        rows = [{"step": -1, "time/step_s": 1.0}] + [{"step": i, "time/step_s": t} for i, t in enumerate(times)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # a val row: not a step

    def trained_hours(lines) -> float:
        return float(re.search(r"([0-9.]+) machine-hours of training", lines[0]).group(1))

    prior = dc.plan(dc.parse(base))
    assert "227 s a step (a prior, not measured here: " in prior[0]
    assert "9.2 records a minute (a prior, not measured here: " in prior[1]
    metrics(tmp_path / "evidence" / "seed1" / "designer_only", [100.0, 110.0])
    metrics(tmp_path / "evidence" / "seed0" / "sa_grpo", [900.0])  # another mode's steps: not the base arm's
    theirs = dc.plan(dc.parse(base))
    assert "105 s a step (measured on the evidence experiment's designer_only runs" in theirs[0]
    assert "the mean of 2 steps" in theirs[0] and trained_hours(theirs) < trained_hours(prior)
    metrics(tmp_path / "runs" / "nohint" / "seed0" / "designer_only", [60.0, 62.0, 64.0])  # these runs' own win
    own = dc.plan(dc.parse(base))
    assert "62 s a step (measured: the mean of the 3 steps these runs trained" in own[0]
    assert dc.plan(dc.parse([*base, "--evidence-runs", str(tmp_path / "none")]))[0] == own[0]
    assert "30 s a step (given (--step-s)" in dc.plan(dc.parse([*base, "--step-s", "30"]))[0]
    assert "25.0 records a minute (given (--eval-rate))" in dc.plan(dc.parse([*base, "--eval-rate", "25"]))[1]


@pytest.mark.slow
def test_driver_trains_two_arms_reports_and_restores_from_the_committed_summaries(tmp_path):
    oracle = write_oracle(tmp_path)
    runs, results = tmp_path / "runs", tmp_path / "results"
    common = ["--seeds", "0", "--arms", "base", "budget", "--runs", str(runs), "--results", str(results),
              "--config", "tiny", "--model", "tiny", "--oracle", str(oracle), "--families", "arith", "--steps", "1",
              "--save-every", "1", "--batch-size", "1", "--designs", "2", "--executions", "1",
              "--designer-max-tokens", "48", "--executor-max-tokens", "24", "--dtype", "float32",
              "--eval-limit", "1"]  # fmt: skip

    def run(*extra: str) -> str:
        return run_benchmark("designer_choice", *common, *extra)

    run()
    for arm in ("base", "budget"):
        assert metric_steps(runs / arm / "seed0" / "designer_only") == [0]
        held = runs / arm / "seed0" / "heldout_designer_only" / "evals" / "arith" / "results.json"
        res = json.loads(held.read_text())
        assert res["complete"] and set(res["methods"]) >= {"auto", "sa", "sa@auto", "fixed:pot", "best-per-domain"}
        committed = results / "records" / arm / "seed0"
        summary = json.loads(lzma.decompress((committed / "summary.json.xz").read_bytes()))
        assert summary["steps_done"] == 1 and [s["step"] for s in summary["steps"]] == [0]
        assert set(summary["steps"][0]["patterns"]) == {"arith"}  # the designs of the suite's family
        assert {k for r in summary["metrics"] for k in r} >= {"step", "rollout/reward/designer", "time/step_s"}
        assert any(k.startswith("reward/shortcut/") for k in summary["metrics"][0])  # shortcut counters kept
        assert lzma.decompress((committed / "heldout_designer_only/evals/arith/results.json.xz").read_bytes())
    budget = json.loads(lzma.decompress((results / "records/budget/seed0/summary.json.xz").read_bytes()))
    assert set(budget["steps"][0]["budget"]) <= {"LOW", "HIGH"} and budget["steps"][0]["budget"]  # a tag a question
    assert any(k.startswith("rollout/budget/") for k in budget["metrics"][0])
    cfg = (runs / "budget" / "seed0" / "designer_only" / "config.yaml").read_text()
    assert "designer_baseline: control" in cfg and "seq-mean-token-sum-norm" in cfg
    held_cmd = json.loads((runs / "budget/seed0/heldout_designer_only/evals/arith/results.json").read_text())
    assert held_cmd["config"]["budget"] == "HIGH" and held_cmd["config"]["domain_hint"] == "off"

    table = (results / "table.md").read_text()
    assert "| best pattern | | | `tool-pair` | |" in table
    assert any(line.startswith("| base | 0 | 1 of 1 | ") for line in table.splitlines())
    assert "| base | today's designer_only (domain sentence on) |" in table  # the goal row, met or missed
    assert "### base" in table and "### budget" in table and "| arith | 1 of 1 | " in table  # held-out gains
    assert "Budget tags" in table and "| budget | 0 |" in table.split("Budget tags")[1]
    assert "Shortcut refusals" in table and (results / "shares.png").read_bytes()[:4] == b"\x89PNG"
    status = (results / "STATUS.md").read_text()
    assert status.startswith("# Designer choice (issue 62 item 5) — status: done")
    assert "| budget | 0 | 1 of 1 | arith |" in status and "nohup python benchmarks/designer_choice.py --seeds 0" in status

    # a new machine: the runs folder is gone; nothing is trained or evaluated again, the report rebuilds the same
    shutil.rmtree(runs)
    out = run()
    assert "metaagent.cli.train" not in out and "metaagent.cli.eval" not in out
    assert not (runs / "base" / "seed0" / "designer_only").exists()
    assert (results / "table.md").read_text() == table
    assert (results / "STATUS.md").read_text() == status
    run("--report-only")
    assert (results / "table.md").read_text() == table


def summary(steps_done: int, steps: list[dict]) -> dict:
    return {"steps_done": steps_done, "steps_target": steps_done, "metrics": [], "steps": steps}


def test_the_goal_counts_matching_families_in_seeds_trained_to_their_steps(tmp_path):
    dc = benchmark_script("designer_choice")
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({
        "per_family": {"lookup": {"oracle": "fixed:self_consistency", "oracle_pattern": "self-consistency"},
                       "start": {"oracle": "sa", "oracle_pattern": "single"}},
        "matrix": {"lookup": {"sa": {}}, "start": {"sa": {}}}, "mixture": {"best_single": "sa"},
    }))  # fmt: skip
    args = dc.parse(["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--arms", "base",
                     "--oracle", str(path), "--families", "lookup", "start", "--steps", "2", "--last", "1"])  # fmt: skip
    a2, oracle = dc.pair_args(args, "base", 0)

    def step(i, lookup, start):
        return dc.step_summary(i, [tree("lookup", *map(design, lookup)), tree("start", *map(design, start))])

    right = [step(0, ["single"], ["tool-pair"]), step(1, ["self-consistency"], ["single", "single", "tool-pair"])]
    one_off = [step(0, ["single"], ["single"]), step(1, ["single"], ["single"])]  # lookup wrong: 1 of 2
    summaries = {("base", 0): summary(2, right), ("base", 1): summary(2, one_off), ("base", 2): summary(1, right[:1])}
    text = "\n".join(dc.choice_tables(args, summaries, oracle, a2.families))
    assert ">= 2 of 2 families, in >= 2 of 3 seeds" in text
    assert "| base | 0 | 2 of 2 | self-consistency 1.00 ✓ | single 0.67 ✓ | 2 of 2 |" in text  # the last step only
    assert "| base | 1 | 2 of 2 | single 1.00 | single 1.00 ✓ | 1 of 2 |" in text
    assert "| base | 2 | 1 of 2 |" in text  # not trained to its steps: shown, never counted
    assert "| 0 | pending (2 of 3 seeds trained) |" in text
    summaries[("base", 2)] = summary(2, right)
    assert "| 0, 2 | met |" in "\n".join(dc.choice_tables(args, summaries, oracle, a2.families))
    summaries[("base", 2)] = summary(2, one_off)
    assert "| 0 | missed |" in "\n".join(dc.choice_tables(args, summaries, oracle, a2.families))


def test_budget_table_pools_the_last_steps_per_tag_and_judges_the_goal(tmp_path):
    dc = benchmark_script("designer_choice")
    args = dc.parse(["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "r"), "--arms", "budget",
                     "--last", "2"])  # fmt: skip

    def step(i, low_calls, low_correct, high_correct):
        return dc.step_summary(i, [
            tree("arith", design("single", executions=[execution(c, x) for c, x in zip(low_calls, low_correct)]),
                 budget="LOW"),
            tree("arith", design("tool-pair", executions=[execution(2, x) for x in high_correct]), budget="HIGH"),
        ])  # fmt: skip

    early = step(0, [3, 3], [0.0, 0.0], [1.0, 1.0])  # out of the last 2 steps
    steps = [early, step(1, [1, 2], [1.0, 1.0], [1.0, 1.0]), step(2, [1, 1], [1.0, 0.0], [1.0, 0.0])]
    text = "\n".join(dc.budget_table(args, {("budget", 0): summary(3, steps)}))
    # LOW: 4 executions, 5 calls (1.25 a sample), 3 of 4 correct; HIGH: 3 of 4: 100% of HIGH's accuracy
    assert "| budget | 0 | 2 tasks, 1.25 calls, 75.0% | 2 tasks, 2.00 calls, 75.0% | 100% | met |" in text
    costly = [early, step(1, [2, 2], [1.0, 1.0], [1.0, 1.0])]
    assert "| 2.00 calls, 100.0% |" not in text and "missed |" in "\n".join(
        dc.budget_table(args, {("budget", 0): summary(2, costly)})
    )  # 2 calls a LOW sample: over the 1.5 goal
    assert dc.budget_table(args, {("budget", 0): summary(1, [dc.step_summary(0, [tree("arith", design("single"))])])}) == []
