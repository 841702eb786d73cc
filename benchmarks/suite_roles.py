"""Can a model play the suite's roles? Coder replies that run, and the designer's valid rate and structure mix.

    .venv/bin/python benchmarks/suite_roles.py --models embedded-sft runs/adapter_v6_final --json OUT.json

On the test tasks of every family of the structure-sensitive suite (``metaagent.data.suite``), per model:

* **coder**: one coder call per task as the fixed teams make it (math families: ``tool_pair``'s PythonCoder,
  "Write a program that computes the answer to this problem:"; code: ``single_code``'s coder, the task),
  sampled like ``metaagent-eval`` (temperature 0.7, 192 tokens, stop at ``</delivery>``, per-task seeds). The
  reply's deliverable (what ``agent(...)`` returns in a script) goes to the real ``run_program`` tool (math: no
  input; code: the first public test's input). A reply *runs* when the tool printed something and reported
  no error; ``workflow`` counts replies that are a workflow script (``Agent(`` and ``submit(``), the failure
  of the v5 cold start; ``correct`` counts programs whose output is the answer (code: the public output).
* **designer**: ``--designs`` designs per family on the same tasks with the designer prompt the model was
  trained on (``metaagent.sft.eval.designer_valid_rate``; temperature 0.7 and 384 tokens as in the committed
  matrix's ``auto``): the valid rate, and per family the share of each structure class and pattern among
  the valid designs (issue #42: the oracle structure's share should be <= 40% in every family after SFT).

Rates come with 95% Wilson intervals. The structure that is each family's oracle is read from the matrix
(``benchmarks/results/structure_matrix/``), not decided here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter


#: the coder call each family's fixed team makes: (template, message format)
CODER_CALLS = {"math": ("tool_pair", "Write a program that computes the answer to this problem:\n{task}"),
               "code": ("single_code", "{task}")}  # fmt: skip


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    from metaagent.sft.eval import ValidRate

    return ValidRate("", n, k, 0).wilson(z)


def rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 4) if n else 0.0, "ci95": [round(lo, 4), round(hi, 4)]}


def coder_requests(tasks, seed: int, max_tokens: int, temperature: float):
    from metaagent.policy.base import ChatRequest, SamplingParams
    from metaagent.seeding import derive_seed
    from metaagent.workflow import analyze_script, load_templates
    from metaagent.workflow.protocol import DELIVERY_CLOSE, agent_system_prompt

    bank = {t.name: t for t in load_templates()}
    out = []
    for task in tasks:
        template, message = CODER_CALLS[task.domain]
        prompt = analyze_script(bank[template].source)["system_prompts"][0]
        messages = [
            {"role": "system", "content": agent_system_prompt(prompt)},
            {"role": "user", "content": message.format(task=task.question)},
        ]
        sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature, stop=(DELIVERY_CLOSE,),
                                  seed=derive_seed(seed, "suite-coder", task.id))  # fmt: skip
        out.append(ChatRequest(messages, sampling, role="executor"))
    return out


def judge_coder(task, reply: str) -> dict:
    """Run the reply's program as a script's ``run_program`` would; what it printed and whether it is right."""
    from metaagent.workflow.protocol import DELIVERY_CLOSE, extract_delivery
    from metaagent.workflow.tools import RunProgram

    if not reply.rstrip().endswith(DELIVERY_CLOSE) and "<delivery>" in reply:
        reply = reply + DELIVERY_CLOSE  # the stop string is not part of the text
    deliverable = extract_delivery(reply)
    deliverable = reply if deliverable is None else deliverable
    public = (task.metadata or {}).get("public_tests") or {}
    stdin = public["inputs"][0] if task.domain == "code" else ""
    output = RunProgram()(deliverable, stdin)
    ran = not output.startswith("ERROR") and output != "(the program printed nothing)"
    expected = public["outputs"][0] if task.domain == "code" else task.answer
    return {
        "ran": ran,
        "workflow": "Agent(" in deliverable and "submit(" in deliverable,
        "correct": ran and output.strip() == str(expected).strip(),
        "output": output[:200],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["embedded-sft"])
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=40, help="tasks per family")
    p.add_argument("--designs", type=int, default=40, help="designs per family (0: skip the designer)")
    p.add_argument("--coder", action=argparse.BooleanOptionalAction, default=True, help="measure the coder")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--executor-max-tokens", type=int, default=192)
    p.add_argument("--designer-max-tokens", type=int, default=384)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from metaagent.data import load_tasks
    from metaagent.data.suite import FAMILIES, family_source
    from metaagent.policy.hf import HFPolicy
    from metaagent.sft.eval import designer_valid_rate
    from metaagent.workflow import analyze_script, extract_script

    tasks = {f: load_tasks(f"{family_source(f)}:{args.split}")[: args.limit] for f in FAMILIES}
    print(f"suite {args.split}: {', '.join(f'{f} {len(t)}' for f, t in tasks.items())} tasks; load avg "
          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    results = []
    for name in args.models:
        policy = HFPolicy(name, max_batch_size=args.batch, model_id=name)
        result: dict = {"model": name, "coder": {}, "designer": {}}
        t0 = time.perf_counter()
        if args.coder:
            everything = [t for f in FAMILIES for t in tasks[f]]
            replies = policy.generate(coder_requests(everything, args.seed, args.executor_max_tokens, args.temperature))
            verdicts = {t.id: {**judge_coder(t, c.text), "reply": c.text} for t, c in zip(everything, replies)}
            for f in FAMILIES:
                v = [verdicts[t.id] for t in tasks[f]]
                result["coder"][f] = {key: rate(sum(x[key] for x in v), len(v)) for key in ("ran", "workflow", "correct")}
            v = list(verdicts.values())
            result["coder"]["all"] = {key: rate(sum(x[key] for x in v), len(v)) for key in ("ran", "workflow", "correct")}
            result["coder_samples"] = verdicts
            print(f"  {name} coder: runs {result['coder']['all']['ran']} | "
                  + ", ".join(f"{f} {result['coder'][f]['ran']['rate']:.0%}" for f in FAMILIES), flush=True)  # fmt: skip
        if args.designs:
            valid = designs = 0
            for f in FAMILIES:
                r = designer_valid_rate(policy, tasks[f], designs=args.designs, temperature=args.temperature,
                                        max_tokens=args.designer_max_tokens, seed=args.seed, keep_examples=0)  # fmt: skip
                patterns: Counter = Counter()
                for s in r.samples:
                    if s["verdict"] == "ok":
                        patterns[analyze_script(extract_script(s["text"]) or "")["pattern"]] += 1
                share = {k: round(v / r.valid, 4) for k, v in r.structures.most_common()} if r.valid else {}
                pshare = {k: round(v / r.valid, 4) for k, v in patterns.most_common()} if r.valid else {}
                result["designer"][f] = {"valid": rate(r.valid, r.designs), "structures": share, "patterns": pshare,
                                         "errors": dict(r.errors), "samples": r.samples}  # fmt: skip
                valid, designs = valid + r.valid, designs + r.designs
                print(f"  {name} designer {f}: valid {r.valid}/{r.designs}; structures {share}; patterns {pshare}",
                      flush=True)  # fmt: skip
            result["designer"]["all"] = {"valid": rate(valid, designs)}
        result["elapsed_s"] = round(time.perf_counter() - t0, 1)
        policy.close()
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
