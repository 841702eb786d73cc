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

    .venv/bin/python benchmarks/rollout.py [--tasks 4] [--m-designs 2] [--n-executions 2] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import metaagent  # noqa: E402,F401  (before torch: passive OpenMP waiting, see metaagent/__init__.py)

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
    args = p.parse_args()

    import torch

    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy import BatchingPolicy, HFPolicy
    from metaagent.policy.models import load_model_and_tokenizer
    from metaagent.workflow import load_templates

    if args.threads:
        torch.set_num_threads(args.threads)
    templates = {t.name: t for t in load_templates()}
    tasks = load_tasks(DatasetSpec(source="bundled", split="train", levels=[1, 2], domain="math"))[: args.tasks]
    model, tok = load_model_and_tokenizer(args.model)
    static = HFPolicy(model, tok, max_batch_size=args.max_batch_size, model_id=args.model)
    continuous = HFPolicy(model, tok, max_batch_size=args.max_batch_size, continuous=True, model_id=args.model)

    rows = []
    trees = None
    for name, executor in (
        ("static", BatchingPolicy(static, max_batch_size=args.max_batch_size, max_wait_s=0.005)),
        ("continuous", continuous),
    ):
        trees_i, secs, meter = run_rollout(executor, tasks, args, templates)
        trees = trees if trees is not None else trees_i
        turns = sum(len(e.turns) for t in trees_i for _, e in t.executions())
        model_rows = None
        if name == "static":  # rows per model call: what the batcher merged
            model_rows = meter.rows / max(executor.stats().backend_calls, 1)
            executor.close()
        rows.append((f"rollout ({name})", turns, meter.tokens, secs, meter, model_rows))
    static.weights_changed()  # the direct run starts from an empty prefix cache, as the rollouts did
    n, secs, tokens = run_direct(static, trees, args)
    rows.append(("direct batched generate", n, tokens, secs, None, min(n, args.max_batch_size)))

    b, m, n_exec = args.tasks, args.m_designs, args.n_executions
    print(
        f"B={b} M={m} N={n_exec}: {b * m * n_exec} executions of {', '.join(DESIGNS)}; model {args.model}, "
        f"{args.max_tokens} tokens per call, batch <= {args.max_batch_size}, torch threads "
        f"{torch.get_num_threads()}, load avg {os.getloadavg()[0]:.2f}"
    )
    print(f"{'mode':<26}{'calls':>7}{'tokens':>8}{'seconds':>9}{'tok/s':>8}{'rows/model call':>17}{'idle s':>8}")
    direct_rate = rows[-1][2] / rows[-1][3]
    for label, calls, tokens, secs, meter, model_rows in rows:
        per_call = f"{model_rows:.1f}" if model_rows else "(continuous)"
        idle = f"{meter.idle_s:.1f}" if meter else "-"
        print(f"{label:<26}{calls:>7}{tokens:>8}{secs:>9.1f}{tokens / secs:>8.1f}{per_call:>17}{idle:>8}")
    print("idle s: rollout time with no agent call in flight (sandbox start, script steps, rewards)")
    for label, _, tokens, secs, *_ in rows[:-1]:
        print(f"ratio {label} / direct = {(tokens / secs) / direct_rate:.2f}  (goal >= 0.7)")


if __name__ == "__main__":
    main()
