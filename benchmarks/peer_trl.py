"""metaagent's training step beside TRL's ``GRPOTrainer`` step on the same work, interleaved (issue #63, item 1).

The same work on both sides:

- weights: the cached embedded model (SmolLM2-135M-Instruct,
  ``metaagent.policy.models.resolve_model("embedded")``), fp32 master weights on both sides;
- prompts: the 4 math prompts metaagent's executor sends with a frozen single-agent designer
  (``rollout.frozen_designer=single_math``, ``data.train`` the bundled math tasks, ``data.mix={math: 1}``, ``data.batch_size=4``): the first
  metaagent run records each task's agent messages and gold answer, and every TRL run trains on exactly those
  messages (TRL renders them with the same chat template);
- G = 8 completions per prompt (``rollout.n_executions=8`` / ``num_generations=8``), 32 in all, at temperature
  1, at most 128 new tokens (``rollout.executor.max_tokens=128`` / ``max_completion_length=128``), no stop
  string on either side (metaagent's ``</delivery>`` stop is turned off: both stop at end of turn or 128
  tokens);
- one optimizer step (``schedule.mode=executor_only``; TRL ``max_steps=1``, 4 micro-batches of 8 with gradient
  checkpointing), no KL term (``beta=0``), lr 5e-6;
- precision (``--precision``): ``bf16`` = metaagent's defaults on a CPU with bf16 units (bf16 rollout from a
  copy of the fp32 weights, bf16 autocast in the update) beside TRL's ``bf16=True`` (accelerate's bf16
  autocast); ``fp32`` = ``policy.dtype=float32 optim.autocast=null`` beside TRL in fp32.

Variants (``--variants``): ``ma`` = metaagent with its default ``rollout.sandbox_workers`` (read from the
config and set explicitly), ``ma32`` = the same with ``rollout.sandbox_workers=32``, ``trl`` = TRL. Each run
is a fresh subprocess; ``--rounds`` rounds of all variants in turn (A B C A B C: load drift on a shared
machine hits every variant alike); min and median per variant. Reported per run: step seconds, rollout
(metaagent: the whole rollout, sandboxed executions included; TRL: ``_generate_and_score_completions``,
generation and rewards) and update seconds, generated tokens and tokens/s of the rollout, peak RSS of the
process and of its process tree (PSS sum, sandbox workers included), and the 1-minute load average
(``uptime``) before and after.

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/peer_trl.py [--rounds 2] [--precision bf16]
        [--variants ma,ma32,trl] [--trl-python $TRL_VENV/bin/python] [--out benchmarks/results/peer_trl_X.txt]

TRL is imported by ``--trl-python`` (default: this interpreter, where ``trl`` is installed); for a venv of its
own: ``python3 -m venv $TRL_VENV && $TRL_VENV/bin/pip install torch==2.13.0 --index-url <the CPU
wheels> && $TRL_VENV/bin/pip install trl==1.12.0`` (metaagent is then imported from this tree through
PYTHONPATH for the embedded weights' path and the math check of the reward).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from statistics import median

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

#: the shared settings of the work (module docstring)
G, MAX_NEW, TASKS, LR = 8, 128, 4, 5e-6
#: metaagent's overrides of configs/default.yaml for the work
WORK = [
    "data.train=[{source: bundled, split: train, levels: [1, 2], domain: math}]", "data.mix={math: 1}",
    f"data.batch_size={TASKS}", "rollout.frozen_designer=single_math",
    f"rollout.n_executions={G}", "rollout.executor.stop=[]", "schedule.mode=executor_only", f"optim.lr={LR}",
    "trainer.save_every=0", "trainer.val_every=0", "trainer.tensorboard=false",
]  # fmt: skip
PRECISIONS = {"bf16": [], "fp32": ["policy.dtype=float32", "optim.autocast=null"]}
VARIANTS = ("ma", "ma32", "trl")


def cpu_kind() -> str:
    """The CPU's bf16 kind as the project names them: AMX, avx512_bf16 or AVX2 (or 'other'), with the model name."""
    flags, name = set(), "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            if line.startswith("model name") and name == "?":
                name = line.split(":", 1)[1].strip()
    kind = ("AMX" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags
            else "AVX2" if "avx2" in flags else "other")  # fmt: skip
    return f"{kind} ({name}, {os.cpu_count()} CPUs)"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process and its live children (metaagent's sandbox workers)."""
    import psutil

    total = 0.0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def in_thread(fn):
    """Run ``fn`` in a non-main thread, as the batcher's worker does (see benchmarks/step.py)."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    return box[0]


# --------------------------------------------------------------------------------------------- metaagent side
def run_metaagent(args) -> dict:
    """One metaagent training step of the work; its timings and the agent prompts it sent."""
    from metaagent.policy import ChatRequest, SamplingParams
    from metaagent.train.config import TrainConfig
    from metaagent.train.loop import TrainLoop

    base = TrainConfig.load("default", [])
    workers = args.sandbox_workers or base.rollout.sandbox_workers
    overrides = [*WORK, *PRECISIONS[args.precision], f"rollout.sandbox_workers={workers}",
                 f"policy.model={args.model}", f"rollout.executor.max_tokens={args.max_new}",
                 f"trainer.out={tempfile.mkdtemp(prefix='peer-trl-')}"]  # fmt: skip
    cfg = TrainConfig.load("default", overrides)
    with TrainLoop(cfg) as trainer:
        warm = [ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2, seed=0))]
        in_thread(lambda: trainer.backend.models.executor().generate(warm))  # one-off set-up, as TRL's warm-up
        update, spent = trainer.backend.update, {}

        def timed_update(*a, **k):  # in this process, no children: its CPU time is the process's
            c0 = time.process_time()
            try:
                return update(*a, **k)
            finally:
                spent["update_cpu_s"] = time.process_time() - c0

        trainer.backend.update = timed_update
        c0, t0 = tree_cpu(), time.perf_counter()
        result = in_thread(lambda: trainer.train_step(0))
        secs, cpu = time.perf_counter() - t0, tree_cpu() - c0
    m = result.metrics
    turns = [(t, turn) for t in result.trees for _, e in t.executions() for turn in e.turns if not turn.synthetic]
    prompts: dict[str, dict] = {}
    for tree, turn in turns:
        prompts.setdefault(tree.task_id, {"messages": turn.messages, "answer": tree.task["answer"],
                                          "prompt_tokens": len(turn.prompt_ids)})  # fmt: skip
    tokens = sum(len(turn.response_ids) for _, turn in turns)
    return {
        "seconds": secs, "rollout_s": m["time/rollout_s"], "update_s": m["time/update_s"], "tokens": tokens,
        "completions": len(turns), "trained": m.get("train/samples"), "sandbox_workers": workers,
        "dtype": cfg.policy.dtype, "autocast": cfg.optim.autocast, "prompts": list(prompts.values()),
        "reward": m.get("rollout/reward/executor"), "cpu_s": cpu, "update_cpu_s": spent["update_cpu_s"],
        "rollout_cpu_s": cpu - spent["update_cpu_s"],
    }  # fmt: skip


# --------------------------------------------------------------------------------------------------- TRL side
def run_trl(args) -> dict:
    """One ``GRPOTrainer`` step on the recorded prompts; generation and update timed separately."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from metaagent.policy.models import load_tokenizer, resolve_model
    from metaagent.rewards.math import extract_answer, math_equal

    with open(args.prompts) as f:
        prompts = json.load(f)
    path = resolve_model(args.model)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    data = Dataset.from_list([{"prompt": p["messages"], "answer": p["answer"]} for p in prompts])

    def reward(prompts, completions, answer, **_):
        return [float(math_equal(extract_answer(c[0]["content"]), a)) for c, a in zip(completions, answer)]

    timed = {"generate_s": 0.0, "generate_cpu_s": 0.0, "tokens": 0}

    class Timed(trl.GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            t0, c0 = time.perf_counter(), tree_cpu()
            out = super()._generate_and_score_completions(inputs)
            timed["generate_s"] += time.perf_counter() - t0
            timed["generate_cpu_s"] += tree_cpu() - c0
            timed["tokens"] += int(out["completion_mask"].sum())
            return out

    config = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="peer-trl-"), max_steps=1, per_device_train_batch_size=G,
        gradient_accumulation_steps=len(prompts) * G // G, num_generations=G, max_completion_length=args.max_new,
        temperature=1.0, top_p=1.0, beta=0.0, learning_rate=LR, bf16=args.precision == "bf16", use_cpu=True,
        gradient_checkpointing=True, report_to=[], save_strategy="no", logging_steps=1, seed=0,
        dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = Timed(model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tokenizer)
    with torch.no_grad():  # one-off set-up, as metaagent's warm-up generate
        ids = tokenizer("hi", return_tensors="pt")
        trainer.model.generate(**ids, max_new_tokens=2, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    t0, c0 = time.perf_counter(), tree_cpu()
    trainer.train()
    secs, cpu = time.perf_counter() - t0, tree_cpu() - c0
    return {
        "seconds": secs, "rollout_s": timed["generate_s"], "update_s": secs - timed["generate_s"], "cpu_s": cpu,
        "rollout_cpu_s": timed["generate_cpu_s"], "update_cpu_s": cpu - timed["generate_cpu_s"],
        "tokens": timed["tokens"], "completions": len(prompts) * G, "trl": trl.__version__,
        "precision": args.precision,
    }  # fmt: skip


# ------------------------------------------------------------------------------------------------ orchestration
def spawn(args, variant: str, prompts: str | None) -> dict:
    """Run one variant in a fresh subprocess, sampling its memory every 0.2 s; its result with peak RSS (one
    process, MiB) and the process tree's peak PSS sum (MiB), and the load before and after."""
    import psutil

    python = args.trl_python if variant == "trl" else sys.executable
    cmd = [python, os.path.abspath(__file__), "--runner", variant, "--precision", args.precision,
           "--model", args.model, "--max-new", str(args.max_new)]
    if variant == "ma32":
        cmd += ["--sandbox-workers", "32"]
    if prompts:
        cmd += ["--prompts", prompts]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1",
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}  # both sides alike (metaagent's default)
    before = uptime()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_rss = peak_tree = 0
    root = psutil.Process(proc.pid)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
    reader.start()
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            peak_rss = max(peak_rss, max(p.memory_info().rss for p in procs))
            peak_tree = max(peak_tree, sum(p.memory_full_info().pss for p in procs))
        except psutil.Error:
            pass
        time.sleep(0.2)
    stdout = proc.stdout.read()
    reader.join()
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"variant {variant} failed (exit {proc.returncode}):\n{err[0][-3000:]}")
    out = json.loads(lines[-1][len("RESULT ") :])
    out.update(variant=variant, peak_rss_mib=peak_rss / 2**20, peak_tree_mib=peak_tree / 2**20,
               uptime_before=before, uptime_after=uptime())  # fmt: skip
    return out


def row(r: dict) -> str:
    return (f"  {r['variant']:<6}{r['seconds']:>9.1f}{r['rollout_s']:>9.1f}{r['update_s']:>8.1f}"
            f"{r['cpu_s']:>8.1f}{r['rollout_cpu_s']:>8.1f}{r['update_cpu_s']:>8.1f}{r['tokens']:>8}"
            f"{r['tokens'] / r['rollout_s']:>8.1f}{r['peak_rss_mib']:>9.0f}{r['peak_tree_mib']:>9.0f}"
            f"   {r['uptime_before'].split('load average:')[-1].strip()} -> "
            f"{r['uptime_after'].split('load average:')[-1].strip()}")  # fmt: skip


#: the summary's columns: key, label, unit
COLUMNS = (("seconds", "step", "s"), ("rollout_s", "rollout", "s"), ("update_s", "update", "s"),
           ("cpu_s", "step CPU", "s"), ("rollout_cpu_s", "rollout CPU", "s"), ("update_cpu_s", "update CPU", "s"),
           ("tok_s", "rollout", "tok/s"), ("peak_rss_mib", "peak RSS", "MiB"), ("peak_tree_mib", "tree PSS", "MiB"))  # fmt: skip


def summary(runs: list[dict], variants: list[str]) -> list[str]:
    """Per variant min and median of each column, and the ratios of TRL's medians to the variant's."""
    lines = ["per variant, min / median over its runs (wall seconds, CPU seconds of the process tree: the CPU "
             "figures are the ones a loaded shared machine moves least)"]  # fmt: skip
    med: dict[str, dict] = {}
    for v in variants:
        mine = [{**r, "tok_s": r["tokens"] / r["rollout_s"]} for r in runs if r["variant"] == v]
        med[v] = {k: median(r[k] for r in mine) for k, _, _ in COLUMNS}
        cells = [f"{label} {min(r[k] for r in mine):.1f} / {med[v][k]:.1f} {unit}" for k, label, unit in COLUMNS]
        lines.append(f"  {v:<6}" + ", ".join(cells))
    if "trl" in med:
        t = med["trl"]
        lines.append("ratios of medians, TRL's / the variant's (> 1: the variant is faster; memory: the variant's "
                     "/ TRL's)")  # fmt: skip
        for v in (v for v in variants if v != "trl"):
            m = med[v]
            times = ", ".join(f"{label} {t[k] / m[k]:.2f}x" for k, label, _ in COLUMNS[:6] if t[k] > 0 and m[k] > 0)
            lines.append(f"  {v} vs trl: {times}; tok/s {m['tok_s'] / t['tok_s']:.2f}x; peak RSS "
                         f"{m['peak_rss_mib'] / t['peak_rss_mib']:.2f}x (tree {m['peak_tree_mib'] / t['peak_tree_mib']:.2f}x)")  # fmt: skip
    return lines


def orchestrate(args) -> None:
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
    trl_version = subprocess.run([args.trl_python, "-c", "import trl, torch; print(trl.__version__, torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()  # fmt: skip
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    head = [
        f"# {' '.join(sys.argv)}   ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit.stdout.strip()})",
        f"CPU: {cpu_kind()}; precision {args.precision}; TRL {trl_version} (trl, torch) in "
        f"{'the benchmark interpreter' if args.trl_python == sys.executable else 'its own interpreter (--trl-python)'}",
        f"work: {TASKS} math prompts x G={G}, <= {args.max_new} new tokens, weights {args.model}, one step, lr {LR}, no KL; metaagent: "
        f"frozen single_math designer, executor_only; TRL: GRPOTrainer, 4 micro-batches of {G}, gradient checkpointing",
    ]  # fmt: skip
    print("\n".join(head), flush=True)
    prompts = os.path.join(tempfile.mkdtemp(prefix="peer-trl-"), "prompts.json")
    runs: list[dict] = []
    order = [v for _ in range(args.rounds) for v in variants]
    if "trl" in order and order[0] == "trl":
        order = [v for v in order if v != "trl"][:1] + order  # the prompts come from a metaagent run first
    header = (f"  {'run':<6}{'step s':>9}{'rollout':>9}{'update':>8}{'CPU s':>8}{'roll.':>8}{'upd.':>8}{'tokens':>8}"
              f"{'tok/s':>8}{'RSS MiB':>9}{'tree MiB':>9}   load (1, 5, 15 min) before -> after")  # fmt: skip
    print(header, flush=True)
    for v in order:
        r = spawn(args, v, prompts if v == "trl" else None)
        if v != "trl" and not os.path.exists(prompts):
            with open(prompts, "w") as f:
                json.dump(r["prompts"], f)
            print(f"  (prompt tokens per task: {[p['prompt_tokens'] for p in r['prompts']]}; sandbox_workers "
                  f"default {r['sandbox_workers'] if v == 'ma' else '?'}; metaagent dtype {r['dtype']}, autocast "
                  f"{r['autocast']})", flush=True)  # fmt: skip
        runs.append(r)
        print(row(r), flush=True)
        if args.out:  # after every run: a partial table survives an interrupted benchmark
            done = sorted({x["variant"] for x in runs}, key=variants.index)
            with open(args.out, "w") as f:
                f.write("\n".join(head + [header] + [row(x) for x in runs] + summary(runs, done)) + "\n")
    print("\n".join(summary(runs, variants)), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="rounds of all variants (A B C A B C)")
    p.add_argument("--variants", default="ma,ma32,trl", help=f"any of {list(VARIANTS)}")
    p.add_argument("--precision", choices=sorted(PRECISIONS), default="bf16")
    p.add_argument("--trl-python", default=sys.executable, help="the interpreter TRL runs in (its own venv)")
    p.add_argument("--out", help="write the table here too, after every run (benchmarks/results/peer_trl_<kind>.txt)")
    p.add_argument("--model", default="embedded", help="the weights (a smoke test: tiny)")
    p.add_argument("--max-new", type=int, default=MAX_NEW, help="new tokens per completion at most")
    p.add_argument("--runner", choices=VARIANTS, help=argparse.SUPPRESS)  # a variant's subprocess
    p.add_argument("--sandbox-workers", type=int, help=argparse.SUPPRESS)
    p.add_argument("--prompts", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.runner:
        result = run_trl(args) if args.runner == "trl" else run_metaagent(args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    orchestrate(args)


if __name__ == "__main__":
    main()
