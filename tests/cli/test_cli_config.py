"""Every command: --help is generated from its config's fields; a wrong type or an unknown key, in a YAML
file or on the command line, is one line on stderr naming it, with a non-zero exit; --debug shows the
traceback instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(module: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", f"metaagent.cli.{module}", *args],
        cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def one_error_line(r: subprocess.CompletedProcess, prog: str, *needles: str) -> str:
    assert r.returncode != 0, r.stdout[-500:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"{prog}: ") and "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# module, prog, generated flag -> a phrase of its help, flags that make the command fail early
HELP = {
    "train": ("train-metaagent", {"--optim.lr": "FLOAT", "--optim.stage-switch": "AdamW moments",
                                  "--rollout.m-designs": "designs sampled per task", "--stage-len": "--schedule.stage-len"}),
    "sft": ("metaagent-sft", {"--lora-rank": "LoRA", "--batch-tokens": "micro-batch", "--max-len": "dropped"}),
    "serve": ("metaagent-serve", {"--max-concurrent-requests": "429", "--executor-sampling.max-tokens": "INT",
                                  "--workers": "--sandbox-workers"}),
    "distill": ("metaagent-distill", {"--teacher.max-retries": "INT", "--tasks-in-flight": "(default 4)",
                                      "--base-url": "--teacher.base-url"}),
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(HELP))
def test_help_lists_flags_generated_from_the_config(module):
    prog, flags = HELP[module]
    r = cli(module, "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    body = text[text.index("options:") :]  # the option list, after the usage lines
    for flag, phrase in flags.items():
        start = body.index(f" {flag} ") if phrase.startswith("--") else body.index(f" {flag}")
        window = body[max(0, start - 60) : start + 400]
        assert phrase in window, (flag, phrase, window)
    assert "--debug" in text


# a wrong type on the command line, an unknown flag/key on the command line, each per command
BAD_ARGS = {
    "train": [(["--config", "tiny", "--optim.lr", "abc"], "optim.lr"),
              (["--config", "tiny", "optim.lrr=1e-5"], "optim.lrr"),
              (["--config", "tiny", "--rollout.m-design", "3"], "--rollout.m-design")],
    "sft": [(["--data", "x.jsonl", "--max-len", "long"], "max_len"),
            (["--data", "x.jsonl", "--lora-rnak", "8"], "--lora-rnak")],
    "serve": [(["--max-batch-size", "many"], "max_batch_size"),
              (["--max-bach-size", "3"], "--max-bach-size")],
    "distill": [(["--out", "OUT", "--tasks-in-flight", "x"], "tasks_in_flight"),
                (["--out", "OUT", "--teacher.modle", "m"], "--teacher.modle")],
}  # fmt: skip


@pytest.mark.parametrize("module, args, needle", [(m, a, n) for m, cases in BAD_ARGS.items() for a, n in cases])
def test_bad_command_line_values_are_one_line(module, args, needle, tmp_path):
    args = [str(tmp_path / a) if a == "OUT" else a for a in args]
    one_error_line(cli(module, *args), HELP[module][0], needle)


YAML = {
    "train": ("optim:\n  lr: fast\n", "optim.lr", "optim:\n  lrr: 0.1\n", "optim.lrr"),
    "sft": ("data: [x.jsonl]\nepochs: many\n", "epochs", "data: [x.jsonl]\nepoch: 2\n", "epoch"),
    "serve": ("port: http\n", "port", "prot: 8000\n", "prot"),
}


@pytest.mark.parametrize("module", sorted(YAML))
def test_bad_yaml_values_are_one_line(module, tmp_path):
    wrong_type, type_key, unknown, unknown_key = YAML[module]
    for text, key in ((wrong_type, type_key), (unknown, unknown_key)):
        path = tmp_path / f"{module}.yaml"
        path.write_text(text)
        one_error_line(cli(module, "--config", str(path)), HELP[module][0], key)


def test_unknown_key_gets_a_suggestion():
    line = one_error_line(cli("train", "--config", "tiny", "rollout.m_design=2"), "train-metaagent")
    assert "did you mean rollout.m_designs?" in line


@pytest.mark.parametrize("module, args", [("train", ["--config", "tiny", "optim.lr=abc"]), ("serve", ["--port", "x"])])
def test_debug_shows_the_traceback(module, args):
    r = cli(module, *args, "--debug")
    assert r.returncode != 0 and "Traceback (most recent call last)" in r.stderr and "ConfigError" in r.stderr


def test_replay_errors_are_one_line(tmp_path):
    r = cli("replay", str(tmp_path / "no_such_run"))
    assert r.returncode != 0
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr
    assert cli("replay", "--help").returncode == 0 and "--debug" in cli("replay", "--help").stdout
