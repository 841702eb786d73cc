"""How close does a hierarchical rollout come to plain batched generation?

Side by side, in one run, with the embedded model on CPU:

- rollout: ``RolloutEngine.rollout`` of B tasks x M designs x N executions. The designs are workflow templates
  (single agent, solver-critic reflection, ensemble + judge, ... cycled over the designs, so the load has the
  real mix of one-call and multi-call workflows, sequential turns and parallel calls); every agent call goes
  through the executor policy exactly as in training (sandbox worker -> host -> batcher -> model).
- direct: the very prompts of every agent turn of that rollout, generated at once by ``HFPolicy.generate``
  in batches of ``--max-batch-size`` (same sampling, same token budget): the throughput ceiling of the model
  code with perfect batching and no workflow dependencies.

Both count completion tokens of agent calls; the designer is scripted (no model time), so the ratio isolates
the executor path. Goal: rollout tokens/s >= 0.7 x direct tokens/s. Two executor schedulers are measured:
``static`` (BatchingPolicy over HFPolicy, what the trainer uses) and ``continuous`` (HFPolicy admitting new
requests into the running batch between decode steps). Where the rest goes is printed too: time with no
request in flight (sandbox and host work between turns) and the mean batch size the model ran at.

Each rollout is followed at once by its own direct run and the ratio compares those two adjacent phases; on a
shared machine the load drifts within minutes, so use ``--repeats`` and read the median (wall and CPU time).

    .venv/bin/python benchmarks/rollout.py [--tasks 4] [--m-designs 2] [--n-executions 2] [--max-tokens 96]
        [--modes static,continuous] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import metaagent  # noqa: F401  (before torch: passive OpenMP waiting, see metaagent/__init__.py)

DESIGNS = ("single_math", "reflection", "ensemble_judge", "solver_verifier")


def meter(inner):
    """Wrap a policy: count completion tokens, calls, rows per call and the time no call is in flight."""
    from metaagent.policy import Policy

    class Meter(Policy):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.model_id = getattr(inner, "model_id", "model")
            self.lock = threading.Lock()
            self.reset()

        def reset(self) -> None:
            self.in_flight = 0
            self.idle_since: float | None = None
            self.idle_s = 0.0
            self.rows = self.calls = self.tokens = 0

        def _generate(self, requests):
            now = time.perf_counter()
            with self.lock:
                if self.in_flight == 0 and self.idle_since is not None:
                    self.idle_s += now - self.idle_since
                self.in_flight += 1
            try:
                out = self.inner.generate(requests)
            finally:
                with self.lock:
                    self.in_flight -= 1
                    if self.in_flight == 0:
                        self.idle_since = time.perf_counter()
            with self.lock:
                self.calls += 1
                self.rows += len(requests)
                self.tokens += sum(c.completion_tokens for c in out)
            return out

    return Meter()


def run_rollout(executor, tasks, args, templates):
    from metaagent.policy import ScriptedPolicy
    from metaagent.rollout.config import RolloutConfig, SamplingConfig
    from metaagent.rollout.engine import RolloutEngine

    scripts = [f"```python\n{templates[name].source}\n```" for name in DESIGNS]
    designer = ScriptedPolicy(scripts, cycle=True, model_id="templates")
    config = RolloutConfig(
        m_designs=args.m_designs,
        n_executions=args.n_executions,
        k_templates=0,
        executor=SamplingConfig(temperature=1.0, max_tokens=args.max_tokens, stop=["</delivery>"]),
        sandbox_workers=args.sandbox_workers,
    )
    metered = meter(executor)
    engine = RolloutEngine(designer, metered, config)
    try:
        engine.rollout(tasks[:1], seed=99, m_designs=1, n_executions=1)  # warm the sandbox workers
        metered.reset()
        t0 = time.perf_counter()
        trees = engine.rollout(tasks, seed=args.seed)
        elapsed = time.perf_counter() - t0
    finally:
        engine.close()
    if metered.idle_since is not None and metered.in_flight == 0:
        metered.idle_s += max(0.0, t0 + elapsed - metered.idle_since)
    return trees, elapsed, metered


def run_direct(hf, trees, args):
    from metaagent.policy import ChatRequest, SamplingParams

    turns = [turn for tree in trees for _, e in tree.executions() for turn in e.turns]
    requests = [
        ChatRequest(
            turn.messages,
            SamplingParams(temperature=1.0, max_tokens=args.max_tokens, stop=["</delivery>"], seed=i),
        )
        for i, turn in enumerate(turns)
    ]
    box: list = []

    def go():  # from a non-main thread, as the batcher's worker generates (see benchmarks/batching.py)
        t0 = time.perf_counter()
        out = []
        for i in range(0, len(requests), args.max_batch_size):
            out += hf.generate(requests[i : i + args.max_batch_size])
        box.append((time.perf_counter() - t0, sum(c.completion_tokens for c in out)))

    t = threading.Thread(target=go)
    t.start()
    t.join()
    return len(requests), *box[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded")
    p.add_argument("--tasks", type=int, default=4, help="B")
    p.add_argument("--m-designs", type=int, default=2, help="M")
    p.add_argument("--n-executions", type=int, default=2, help="N")
    p.add_argument("--max-tokens", type=int, default=96, help="per agent call")
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--sandbox-workers", type=int, default=16)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--modes", default="static,continuous", help="executor schedulers to measure, comma-separated"
    )
    p.add_argument(
        "--repeats", type=int, default=1, help="rounds of (rollout, direct) per mode; medians printed"
    )
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"static", "continuous"}:
        p.error(f"--modes takes static and/or continuous, got {args.modes!r}")

    import torch

    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import BatchingPolicy, HFPolicy
    from metaagent.policy.models import load_model_and_tokenizer
    from metaagent.workflow import load_templates

    if args.threads:
        torch.set_num_threads(args.threads)
    templates = {t.name: t for t in load_templates()}
    tasks = load_tasks(DatasetSpec(source="bundled", split="train", levels=[1, 2], domain="math"))[
        : args.tasks
    ]
    model, tok = load_model_and_tokenizer(args.model)
    static = HFPolicy(model, tok, max_batch_size=args.max_batch_size, model_id=args.model)
    continuous = HFPolicy(
        model, tok, max_batch_size=args.max_batch_size, continuous=True, model_id=args.model
    )

    b, m, n_exec = args.tasks, args.m_designs, args.n_executions
    print(
        f"B={b} M={m} N={n_exec}: {b * m * n_exec} executions of {', '.join(DESIGNS)}; model {args.model}, "
        f"{args.max_tokens} tokens per call, batch <= {args.max_batch_size}, torch threads "
        f"{torch.get_num_threads()}"
    )
    print(
        f"{'mode':<26}{'calls':>7}{'tokens':>8}{'seconds':>9}{'cpu s':>8}{'tok/s':>8}{'rows/model call':>17}"
        f"{'idle s':>8}{'load':>6}"
    )
    ratios: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for _ in range(args.repeats):
        for name in modes:
            # each rollout is followed at once by its direct run, so the ratio compares adjacent phases (on a
            # shared machine the load drifts within minutes); both start from an empty prefix cache
            policy = static if name == "static" else continuous
            policy.weights_changed()
            executor = (
                BatchingPolicy(static, max_batch_size=args.max_batch_size, max_wait_s=0.005)
                if name == "static"
                else continuous
            )
            c0 = time.process_time()
            trees, secs, meter = run_rollout(executor, tasks, args, templates)
            cpu = time.process_time() - c0
            turns = sum(len(e.turns) for t in trees for _, e in t.executions())
            per_call = "(continuous)"
            if name == "static":  # rows per model call: what the batcher merged
                per_call = f"{meter.rows / max(executor.stats().backend_calls, 1):.1f}"
                executor.close()
            _row(f"rollout ({name})", turns, meter.tokens, secs, cpu, per_call, f"{meter.idle_s:.1f}")
            static.weights_changed()
            c0 = time.process_time()
            n, dsecs, dtokens = run_direct(static, trees, args)
            dcpu = time.process_time() - c0
            _row("direct batched generate", n, dtokens, dsecs, dcpu, str(min(n, args.max_batch_size)), "-")
            ratios[name].append(
                ((meter.tokens / secs) / (dtokens / dsecs), (meter.tokens / cpu) / (dtokens / dcpu))
            )
    print("idle s: rollout time with no agent call in flight (sandbox start, script steps, rewards)")
    print(
        "cpu s: this process's CPU time (model, batcher, sandbox host); its ratio is less sensitive to load"
    )
    for name, got in ratios.items():
        wall, cpu = statistics.median(r[0] for r in got), statistics.median(r[1] for r in got)
        each = ", ".join(f"{w:.2f}" for w, _ in got)
        print(
            f"ratio rollout ({name}) / direct = {wall:.2f}  (goal >= 0.7; by CPU time {cpu:.2f}; "
            f"median of {len(got)}: {each})"
        )


def _row(label: str, calls: int, tokens: int, secs: float, cpu: float, per_call: str, idle: str) -> None:
    print(
        f"{label:<26}{calls:>7}{tokens:>8}{secs:>9.1f}{cpu:>8.1f}{tokens / secs:>8.1f}{per_call:>17}{idle:>8}"
        f"{os.getloadavg()[0]:>6.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
