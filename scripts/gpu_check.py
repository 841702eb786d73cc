"""The GPU check: one command that tries everything GPU-side in stages and writes a report.

    bash scripts/gpu_check.sh [--out DIR] [--model DIR] [--wheels DIR] [--stages a,b] [--skip a,b]
    bash scripts/gpu_check.sh --device cpu --tiny          # the dry mode: every stage's logic on CPU (CI)
    bash scripts/gpu_check.sh --prepare DIR                # on a machine with network: DIR/model + DIR/wheels

Every stage runs in its own process under its own time budget; a stage that fails, hangs or is skipped never
stops the others. Each prints one line, ``PASS``, ``FAIL (reason)`` or ``SKIPPED (reason)``; at the end
``OUT/summary.json`` and ``OUT/summary.md`` hold every stage's numbers, and ``OUT/logs/<stage>.log`` its output.
The budgets add up to 7 minutes on one GPU (``--budget-scale`` multiplies them; the dry mode uses 3).

stages (in order):
  setup        --wheels DIR: install the folder's wheels with pip (no index, no network) into OUT/site, which
               goes first on every stage's PYTHONPATH (e.g. the pinned transformers over a newer one)
  env          driver, GPU, torch/CUDA/NCCL, package versions; the local training path imports (without ray)
  models       the tiny model and the 135M-shaped one (--model: its weights, or random weights of its
               config.json when it has none; --tiny: a 2-layer model of that config)
  gpu-tests    the tests marked ``gpu`` (pytest -m gpu; skipped without CUDA) but test_verl_gpu.py (verl-vllm)
  local-tiny   train-metaagent, local backend, policy.device=DEVICE, the tiny model: 2 steps, executor then
               designer stage (designer generation and a designer update on the device)
  local-135m   the same with the 135M-shaped model, a frozen template designer, executor stage (agent calls
               and an executor update): per-phase times and peak device memory
  step         benchmarks/gpu_step.py: one step vs a raw batched generate of the same tokens, same device
  verl-engine  verl's FSDP engine on the device (CUDA: FSDP1, bf16, NCCL) with the HF rollout: 2 updates,
               log-prob checks, weight sync, checkpoint (needs verl and ray)
  verl-vllm    train-metaagent --backend verl, 1 step on vLLM servers (needs verl, ray, vllm and CUDA)

Nothing is downloaded at run time; a machine without network gets its packages from --wheels and its model
(tokenizer + config.json, weights optional) from --model, both made by --prepare where pip and the embedded model
are at hand.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES_SCRIPT = ROOT / "scripts" / "gpu_check_stages.py"
RESULT = "GPUCHECK_RESULT"
#: stage -> seconds on one GPU; the sum is the 7-minute ceiling of the whole check
BUDGETS = {
    "setup": 45, "env": 15, "models": 30, "gpu-tests": 45, "local-tiny": 40, "local-135m": 55, "step": 55,
    "verl-engine": 60, "verl-vllm": 75,
}  # fmt: skip
DRY_BUDGET_SCALE = 3.0  # CPU (a shared 2-core CI machine) is slower than the GPU the budgets are set for
#: the vLLM test runs in its own stage (verl-vllm), with a smaller command
VLLM_TEST = "tests/verl/test_verl_gpu.py"
#: what --prepare downloads for a machine without network: the distributions the check's stages import (measured
#: 2026-11-28 with a sitecustomize hook over a dry run, plus the sandbox workers' checkers), at the versions
#: installed where --prepare runs. Not the torch stack nor what torch itself requires (sympy, jinja2, filelock,
#: fsspec, typing-extensions, numpy: any machine with torch has them), nor verl / ray / vLLM (hundreds of MB:
#: installed on the GPU machine, or their stages are skipped).
PREPARE_WHEELS = (
    "transformers", "tokenizers", "huggingface-hub", "hf-xet", "safetensors", "accelerate", "peft", "pydantic",
    "pydantic-core", "annotated-types", "typing-inspection", "libcst", "RestrictedPython", "math-verify",
    "latex2sympy2_extended", "antlr4-python3-runtime", "omegaconf", "hydra-core", "PyYAML", "rich", "markdown-it-py",
    "mdurl", "Pygments", "psutil", "regex", "tqdm", "packaging", "httpx", "httpcore", "h11", "anyio", "sniffio",
    "idna", "certifi", "click", "typer", "shellingham", "dill", "pytest", "pluggy", "iniconfig", "hypothesis",
    "sortedcontainers", "attrs",
)  # fmt: skip


@dataclass
class Stage:
    name: str
    status: str = "SKIPPED"
    reason: str = ""
    seconds: float = 0.0
    budget_s: float = 0.0
    details: dict = field(default_factory=dict)
    log: str = ""

    def line(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"[gpu-check] {self.name:<12} {self.status}{why}  {self.seconds:.1f}s of {self.budget_s:.0f}s"


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.scale = args.budget_scale or (DRY_BUDGET_SCALE if args.device == "cpu" else 1.0)
        self.python = args.python or sys.executable
        self.env = {
            **os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }  # fmt: skip
        self.stages: list[Stage] = []
        self.models: dict = {}

    # ---- running ----------------------------------------------------------------------------------------------

    def run(self, name: str, cmd: list[str], judge=None) -> Stage:
        """Run ``cmd`` under the stage's budget; ``judge(stage, output)`` sets the status (default: the stage
        body's ``GPUCHECK_RESULT`` line)."""
        stage = Stage(name, budget_s=BUDGETS[name] * self.scale, log=str(self.logs / f"{name}.log"))
        t0 = time.perf_counter()
        with open(stage.log, "w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)  # fmt: skip
            try:
                output, _ = proc.communicate(timeout=stage.budget_s)
                code = proc.returncode
            except subprocess.TimeoutExpired:  # the stage and everything it started (its own process group)
                os.killpg(proc.pid, signal.SIGKILL)
                output, _ = proc.communicate()
                code = None
            log.write(output)
        stage.seconds = time.perf_counter() - t0
        if code is None:
            stage.status, stage.reason = "FAIL", f"over its {stage.budget_s:.0f} s budget (killed)"
        else:
            (judge or self.judge_result)(stage, output, code)
        return stage

    @staticmethod
    def judge_result(stage: Stage, output: str, code: int) -> None:
        line = next((x for x in reversed(output.splitlines()) if x.startswith(RESULT)), None)
        if line is None:
            stage.status, stage.reason = "FAIL", f"exit code {code} and no result line; see {stage.log}"
            return
        res = json.loads(line[len(RESULT) :])
        stage.status, stage.reason, stage.details = res["status"], res["reason"], res["details"]

    def stage_cmd(self, name: str) -> list[str]:
        cmd = [self.python, str(STAGES_SCRIPT), name, "--device", self.args.device, "--out", str(self.out)]
        return cmd + (["--model", str(Path(self.args.model).resolve())] if self.args.model else []) + (["--tiny"] if self.args.tiny else [])

    def add(self, stage: Stage) -> None:
        self.stages.append(stage)
        print(stage.line(), flush=True)

    def skip(self, name: str, reason: str) -> None:
        self.add(Stage(name, "SKIPPED", reason, budget_s=BUDGETS[name] * self.scale))

    def has(self, module: str) -> bool:
        code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
        return subprocess.run([self.python, "-c", code], env=self.env, capture_output=True).returncode == 0

    # ---- stages -----------------------------------------------------------------------------------------------

    def setup(self) -> None:
        if not self.args.wheels:
            return self.skip("setup", "no --wheels: the interpreter's own packages")
        wheels = sorted(Path(self.args.wheels).glob("*.whl"))
        if not wheels:
            return self.add(Stage("setup", "FAIL", f"no *.whl in {self.args.wheels}", budget_s=BUDGETS["setup"] * self.scale))
        site = self.out / "site"
        cmd = [self.python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
               "--upgrade", "--target", str(site), *map(str, wheels)]  # fmt: skip

        def judge(stage, output, code):
            stage.details = {"wheels": [w.name for w in wheels], "target": str(site)}
            stage.status, stage.reason = ("PASS", "") if code == 0 else ("FAIL", f"pip exit code {code}; see {stage.log}")

        stage = self.run("setup", cmd, judge)
        if stage.status == "PASS":  # the wheels go before the interpreter's own packages
            self.env["PYTHONPATH"] = os.pathsep.join((str(site), self.env["PYTHONPATH"]))
            self.env["GPUCHECK_SITE"] = str(site)
        self.add(stage)

    def gpu_tests(self) -> None:
        files = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("test_*.py"))
                 if "mark.gpu" in p.read_text(encoding="utf-8", errors="replace") and str(p.relative_to(ROOT)) != VLLM_TEST]  # fmt: skip
        if not files:
            return self.skip("gpu-tests", "no test is marked gpu")
        junit = self.out / "gpu_tests.xml"
        cmd = [self.python, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-p", "no:randomly",
               f"--junitxml={junit}", *files]  # fmt: skip

        def judge(stage, output, code):
            counts = junit_counts(junit)
            stage.details = {"files": files, **counts}
            if code not in (0, 5) or counts["failures"] or counts["errors"]:
                stage.status, stage.reason = "FAIL", f"{counts['failures']} failed, {counts['errors']} errors (exit {code})"
            elif counts["tests"] and counts["tests"] == counts["skipped"]:
                stage.status, stage.reason = "SKIPPED", f"all {counts['tests']} skipped: {first_skip_reason(junit)}"
            else:
                stage.status, stage.reason = "PASS", f"{counts['tests'] - counts['skipped']} passed, {counts['skipped']} skipped"

        self.add(self.run("gpu-tests", cmd, judge))

    def train(self, name: str, model: str, run: str, steps: int, *overrides: str) -> None:
        out = self.out / "runs" / run
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.python, "-m", "metaagent.cli.train", "--config", "tiny", "--out", str(out), "--quiet",
               "--steps", str(steps), f"policy.model={model}", f"policy.device={self.args.device}",
               "trainer.save_every=0", "trainer.val_every=0", "trainer.tensorboard=false", *overrides]  # fmt: skip

        def judge(stage, output, code):
            rows = read_jsonl(out / "metrics.jsonl")
            stage.details = {"model": model, "steps": [step_numbers(r) for r in rows]}
            updated = [r for r in rows if r.get("train/loss") is not None]
            if code != 0:
                stage.status, stage.reason = "FAIL", f"exit code {code}; see {stage.log}"
            elif not updated:
                stage.status, stage.reason = "FAIL", "no step computed a loss (no samples were trained)"
            elif any(r["train/loss"] != r["train/loss"] for r in updated):  # NaN
                stage.status, stage.reason = "FAIL", "a loss is NaN"
            elif self.args.device == "cuda" and not any("memory/cuda_peak_update_mib" in r for r in rows):
                stage.status, stage.reason = "FAIL", "no peak CUDA memory was recorded: did the model run on the GPU?"
            else:
                stage.status, stage.reason = "PASS", ""

        self.add(self.run(name, cmd, judge))

    def step(self) -> None:
        numbers = self.out / "step.json"
        cmd = [self.python, str(ROOT / "benchmarks" / "gpu_step.py"), "--device", self.args.device, "--config", "tiny",
               "--model", self.models["shape"], "--json", str(numbers)]  # fmt: skip

        def judge(stage, output, code):
            if code != 0 or not numbers.is_file():
                stage.status, stage.reason = "FAIL", f"exit code {code}; see {stage.log}"
                return
            stage.details = json.loads(numbers.read_text())
            stage.status, stage.reason = "PASS", ""

        self.add(self.run("step", cmd, judge))

    def verl_vllm(self) -> None:
        missing = [m for m in ("verl", "ray", "vllm") if not self.has(m)]
        if missing:
            return self.skip("verl-vllm", f"{', '.join(missing)} not installed (pip install 'metaagent[gpu]')")
        if self.args.device != "cuda":
            return self.skip("verl-vllm", "vLLM servers need CUDA")
        out = self.out / "runs" / "verl_vllm"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.python, "-m", "metaagent.cli.train", "--config", "tiny", "--backend", "verl", "--steps", "1",
               "--out", str(out), "--quiet", f"policy.model={self.models['shape']}", "verl.n_gpus_per_node=1",
               "verl.gpu_memory_utilization=0.3", "verl.enforce_eager=true", "verl.logprob_check=true",
               "trainer.save_every=1", "trainer.val_every=0", "trainer.tensorboard=false"]  # fmt: skip

        def judge(stage, output, code):
            rows = read_jsonl(out / "metrics.jsonl")
            stage.details = {"steps": [step_numbers(r) for r in rows],
                             "verl": {k: v for r in rows for k, v in r.items() if k.startswith("verl/")}}  # fmt: skip
            ok = code == 0 and rows and (out / "checkpoints" / "step_00000001" / "meta.json").is_file()
            stage.status, stage.reason = ("PASS", "") if ok else ("FAIL", f"exit code {code}; see {stage.log}")

        self.add(self.run("verl-vllm", cmd, judge))

    # ---- the whole check --------------------------------------------------------------------------------------

    def wanted(self, name: str) -> bool:
        only = self.args.stages.split(",") if self.args.stages else list(BUDGETS)
        return name in only and name not in (self.args.skip.split(",") if self.args.skip else [])

    def main(self) -> int:
        t0 = time.perf_counter()
        print(f"[gpu-check] device {self.args.device}{' (tiny)' if self.args.tiny else ''}, out {self.out}, "
              f"budgets x{self.scale:g} (total {sum(BUDGETS.values()) * self.scale:.0f} s)", flush=True)  # fmt: skip
        order = ["setup", "env", "models", "gpu-tests", "local-tiny", "local-135m", "step", "verl-engine", "verl-vllm"]
        for name in order:
            if not self.wanted(name):
                continue
            needs_models = name in ("local-tiny", "local-135m", "step", "verl-engine", "verl-vllm")
            if needs_models and not self.models:
                self.skip(name, "the models stage did not pass")
                continue
            if name == "setup":
                self.setup()
            elif name in ("env", "models", "verl-engine"):
                stage = self.run(name, self.stage_cmd(name))
                if name == "models" and stage.status == "PASS":
                    self.models = stage.details
                    self.env["GPUCHECK_TINY_MODEL"] = self.models["tiny"]  # the gpu-marked tests' tiny model
                self.add(stage)
            elif name == "gpu-tests":
                self.gpu_tests()
            elif name == "local-tiny":
                self.train(name, self.models["tiny"], "local_tiny", 2, "schedule.stage_len=1")
            elif name == "local-135m":
                self.train(name, self.models["shape"], "local_135m", 1, "rollout.frozen_designer=single_math",
                           "schedule.mode=executor_only")  # fmt: skip
            elif name == "step":
                self.step()
            elif name == "verl-vllm":
                self.verl_vllm()
        total = time.perf_counter() - t0
        self.write(total)
        failed = [s.name for s in self.stages if s.status == "FAIL"]
        print(f"[gpu-check] {len(self.stages)} stages in {total:.0f} s: "
              + ", ".join(f"{s.name} {s.status}" for s in self.stages) + f"; summary in {self.out / 'summary.md'}")  # fmt: skip
        return 1 if failed else 0

    def write(self, total: float) -> None:
        summary = {
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "bash scripts/gpu_check.sh " + " ".join(self.args.argv),
            "device": self.args.device, "tiny": self.args.tiny, "host": platform.node(), "total_s": round(total, 1),
            "budget_total_s": sum(BUDGETS.values()) * self.scale,
            "stages": [asdict(s) | {"seconds": round(s.seconds, 1)} for s in self.stages],
        }  # fmt: skip
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        (self.out / "summary.md").write_text(markdown(summary))


# ---- helpers ---------------------------------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def step_numbers(row: dict) -> dict:
    """The numbers of one metrics row a GPU check reports: phase times, peak memory, samples, loss."""
    keep = ("step", "schedule/active", "train/loss", "samples/designer", "samples/executor", "rollout/valid_script_rate")
    return {k: row[k] for k in row if k in keep or k.startswith(("time/", "memory/"))}


def junit_counts(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def first_skip_reason(path: Path) -> str:
    import xml.etree.ElementTree as ET

    node = ET.parse(path).getroot().find(".//skipped")
    return (node.get("message") or "").strip()[:160] if node is not None else ""


def markdown(summary: dict) -> str:
    lines = [
        "# GPU check", "",
        f"`{summary['command']}` on {summary['host']} ({summary['created']}): {summary['total_s']} s of a "
        f"{summary['budget_total_s']:.0f} s budget.", "",
        "| stage | status | seconds | budget s | reason |", "| --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for s in summary["stages"]:
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {s['budget_s']:.0f} | {s['reason']} |")
    for s in summary["stages"]:
        if s["details"]:
            lines += ["", f"## {s['name']}", "", "```json", json.dumps(s["details"], indent=1, default=str), "```"]
    return "\n".join(lines) + "\n"


# ---- --prepare ---------------------------------------------------------------------------------------------------


def prepare(target: Path, python_version: str, platforms: list[str]) -> int:
    """``target/model``: the embedded model's tokenizer and config.json (no weights: the check builds random
    weights of that shape); ``target/wheels``: wheels of :data:`PREPARE_WHEELS` at the versions installed here,
    for ``python_version`` on ``platforms``."""
    from metaagent.policy.models import resolve_model

    model = target / "model"
    model.mkdir(parents=True, exist_ok=True)
    source = Path(resolve_model("embedded"))
    for f in source.iterdir():
        if f.is_file() and not f.name.startswith(("model", "pytorch_model")):
            shutil.copy2(f, model / f.name)
    print(f"[gpu-check] {model}: {sorted(p.name for p in model.iterdir())}")
    wanted = {}
    for name in PREPARE_WHEELS:
        try:
            wanted[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            print(f"[gpu-check] {name} is not installed here; install it (make install) or fetch its wheel by hand")
    wheels = target / "wheels"
    wheels.mkdir(exist_ok=True)
    failed = []
    for name, ver in sorted(wanted.items()):
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest",
               str(wheels), "--python-version", python_version, "--implementation", "cp",
               *[a for p in platforms for a in ("--platform", p)], f"{name}=={ver}"]  # fmt: skip
        if subprocess.run(cmd, capture_output=True, text=True).returncode == 0:
            continue
        # no binary for that platform: a pure-Python sdist (antlr4-python3-runtime) builds into a wheel for any
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                                str(wheels), f"{name}=={ver}"], capture_output=True, text=True)  # fmt: skip
        stem = name.replace("-", "_").lower()
        pure = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(stem) and w.name.endswith("-py3-none-any.whl")]
        if built.returncode != 0 or not pure:
            failed.append(f"{name}=={ver}")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"[gpu-check] {wheels}: {len(list(wheels.glob('*.whl')))} wheels; {target} holds {size / 2**20:.1f} MiB")
    if failed:
        print(f"[gpu-check] no wheel for {python_version} on {platforms}: {', '.join(failed)}")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="tiny models only (with --device cpu: the dry mode)")
    p.add_argument("--out", default="runs/gpu_check")
    p.add_argument("--model", help="HF model folder: tokenizer + config.json, weights optional")
    p.add_argument("--wheels", help="folder of wheels to install first (no network needed)")
    p.add_argument("--python", help="the interpreter the stages run with (default: this one)")
    p.add_argument("--stages", help="comma-separated: run only these")
    p.add_argument("--skip", help="comma-separated: leave these out")
    p.add_argument("--budget-scale", type=float, help=f"multiply every budget (default 1, {DRY_BUDGET_SCALE:g} on CPU)")
    p.add_argument("--prepare", metavar="DIR", help="write DIR/model and DIR/wheels for a machine without network")
    p.add_argument("--python-version", default="3.12", help="--prepare: the GPU machine's Python")
    p.add_argument("--platform", action="append", help="--prepare: pip platform tags (default: manylinux x86_64)")
    args = p.parse_args()
    args.argv = sys.argv[1:]
    if args.prepare:
        platforms = args.platform or ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"]
        raise SystemExit(prepare(Path(args.prepare), args.python_version, platforms))
    for name in (args.stages or "").split(",") + (args.skip or "").split(","):
        if name and name not in BUDGETS:
            p.error(f"unknown stage {name!r}; stages: {', '.join(BUDGETS)}")
    raise SystemExit(Check(args).main())


if __name__ == "__main__":
    main()
