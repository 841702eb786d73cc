"""benchmarks/seed_gains.py: per-seed paired gains of two methods from one results directory per training
seed,
their mean with the t interval over seeds, the strongest baseline per seed (``max:``), and the plot."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from builders import benchmark_script

from metaagent.eval import TaskScore
from metaagent.eval.metrics import t_quantile

def load():
    return benchmark_script("seed_gains")


def _entry(values: list[float]) -> dict:
    return {
        "per_task": [
            TaskScore(f"t{i}", "math", 2, 0, 2, 0, avg={2: v}).to_dict() for i, v in enumerate(values)
        ]
    }


def _results(folder: Path, methods: dict[str, list[float]]) -> Path:
    folder.mkdir()
    bench = {m: _entry(v) for m, v in methods.items()}
    results = {"k_main": 2, "config": {"seed": 0}, "cells": {"m": {"benchmarks": {"suite:test": bench}}}}
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def test_per_seed_gains_and_the_t_interval_over_seeds(tmp_path):
    sg = load()
    # auto - best baseline: seed a +0.25 (pot is that seed's strongest), seed b +0.5, seed c 0
    folders = [
        _results(tmp_path / "a", {"sa": [0, 0, 0, 0], "fixed:pot": [0.5, 0, 0, 0], "auto": [0.5, 0.5, 0, 0]}),
        _results(tmp_path / "b", {"sa": [0, 0, 0, 0], "fixed:pot": [0, 0, 0, 0], "auto": [1, 1, 0, 0]}),
        _results(tmp_path / "c", {"sa": [1, 0, 0, 0], "fixed:pot": [0, 0, 0, 0], "auto": [1, 0, 0, 0]}),
    ]
    args = argparse.Namespace(results=folders, a="max:sa,fixed:pot", b="auto", benchmark="suite:test", cell=None,
                              k=0, bootstrap=200, seed_key="folder")  # fmt: skip
    out = sg.gains(args)
    per = list(out["per_seed"].values())
    assert [g["a"] for g in per] == ["fixed:pot", "sa", "sa"]  # ties go to the first named
    assert [g["diff"] for g in per] == pytest.approx([0.125, 0.5, 0.0])
    mean = (0.125 + 0.5) / 3
    sd = math.sqrt(((0.125 - mean) ** 2 + (0.5 - mean) ** 2 + mean**2) / 2)
    half = t_quantile(0.975, 2) * sd / math.sqrt(3)
    assert out["seeds"] == 3 and out["mean"] == pytest.approx(mean)
    assert out["ci95"] == pytest.approx([mean - half, mean + half])
    assert all(g["ci95"][0] <= g["diff"] <= g["ci95"][1] for g in per)  # each seed's task bootstrap as detail
    sg.plot(out, tmp_path / "gains.png")
    assert (tmp_path / "gains.png").read_bytes()[:4] == b"\x89PNG"


def test_a_missing_method_names_the_ones_there(tmp_path):
    sg = load()
    folder = _results(tmp_path / "a", {"sa": [0.0]})
    args = argparse.Namespace(results=[folder], a="sa", b="auto", benchmark="suite:test", cell=None, k=0,
                              bootstrap=200, seed_key="folder")  # fmt: skip
    with pytest.raises(SystemExit, match="methods there: \\['sa'\\]"):
        sg.gains(args)
