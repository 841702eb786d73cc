"""Write the cold-start SFT data for the embedded model (no teacher): designer examples from the template bank
for every training task, executor examples from the embedded model's own correct replies.

    .venv/bin/python scripts/make_cold_start_data.py --out sft_data/cold_start_v2

Writes OUT/designer.jsonl, OUT/executor.jsonl and OUT/manifest.json (command, counts per domain, structure and
template, share of byte-unique system prompts). See metaagent/distill/cold_start_data.py for how each example
is made; scripts/make_cold_start.sh trains the committed adapter on these files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="sft_data/cold_start_v2")
    p.add_argument("--split", default="train", help="bundled split whose tasks get designer examples")
    p.add_argument("--per-task", type=int, default=12, help="designer examples per task")
    p.add_argument("--style", default="compact", choices=["compact", "full"], help="designer prompt style")
    p.add_argument("--domain-hint", default="on", choices=["on", "off"],
                   help="designer prompts with or without the 'Task domain: <domain>.' sentence (issue 62); the "
                   "trained model records it, and rollout.domain_hint: auto follows it")  # fmt: skip
    p.add_argument("--max-script-tokens", type=int, default=300, help="a reply (fenced script) fits this")
    p.add_argument("--executor-from", default="sft_data/executor.jsonl", help="self-distilled executor replies")
    p.add_argument(
        "--keep", nargs="*", default=[], metavar="STRUCTURE=FRACTION",
        help="keep only this seeded fraction of a structure class's designer examples, e.g. single=0.5",
    )  # fmt: skip
    p.add_argument(
        "--plain", action="store_true",
        help="plain-style replies: no f-strings, built prompts on their own lines (metaagent/distill/plain_style.py)",
    )  # fmt: skip
    p.add_argument(
        "--short", action="store_true",
        help="shortest replies: the short template bank (metaagent/distill/short_style.py), one-sentence prompts "
        "naming the task's topic, 2-3 agents, 1-2 rounds, plain style",
    )  # fmt: skip
    p.add_argument(
        "--code-references", type=int, default=0, metavar="N",
        help="add up to N code executor examples per code task: a coder prompt from the task's designer examples "
        "and the task's reference program as the reply (the train split's references; 0 = none)",
    )  # fmt: skip
    p.add_argument(
        "--suite", type=int, default=0, metavar="K",
        help="also K designer examples per task of the structure-sensitive suite's split (metaagent.data.suite), "
        "structures balanced within each family, plus its coder and tool-reader executor examples (0 = none)",
    )  # fmt: skip
    p.add_argument(
        "--suite-families", nargs="+", default=None, metavar="FAMILY",
        help="the suite families --suite draws from (default: every family; embedded-sft-suite was made from "
        "arith code lookup strings, before the start family was added)",
    )  # fmt: skip
    p.add_argument("--suite-coders", type=int, default=2, help="coder examples per suite task (reference programs)")
    p.add_argument("--suite-readers", type=int, default=1, help="tool-reader examples per suite math task")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    from metaagent.data import DatasetSpec, code_references, load_tasks
    from metaagent.data.suite import FAMILIES as SUITE_FAMILIES, family_source, suite_references

    unknown = sorted(set(args.suite_families or ()) - set(SUITE_FAMILIES))
    if unknown:
        raise SystemExit(f"--suite-families: unknown {unknown}; the suite has {', '.join(SUITE_FAMILIES)}")
    from metaagent.distill.cold_start_data import (
        designer_examples,
        executor_examples,
        reference_executor_examples,
        thin_structures,
        tool_reader_examples,
    )
    from metaagent.distill.short_style import SUITE_SHORT_TEMPLATES
    from metaagent.policy.models import load_tokenizer
    from metaagent.sft.data import read_chat_jsonl
    from metaagent.workflow import analyze_script, extract_script, load_templates

    tokenizer = load_tokenizer("embedded")
    tasks = load_tasks(DatasetSpec(source="bundled", split=args.split))
    designer = designer_examples(
        tasks,
        load_templates(),
        per_task=args.per_task,
        seed=args.seed,
        style=args.style,
        domain_hint=args.domain_hint == "on",
        plain=args.plain,
        short=args.short,
        fits=lambda script: len(tokenizer.encode("```python\n" + script + "\n```")) + 1 <= args.max_script_tokens,
    )
    keep = {k: float(v) for k, v in (item.split("=", 1) for item in args.keep)}
    designer = thin_structures(designer, keep, seed=args.seed)
    executor, executor_counts = executor_examples(read_chat_jsonl([args.executor_from]), tasks)
    if args.code_references:
        if args.split != "train":
            raise SystemExit("--code-references uses reference programs as training targets: only with --split train")
        code = reference_executor_examples(
            designer, tasks, code_references(), per_task=args.code_references, seed=args.seed
        )
        executor += code
        executor_counts["code references"] = len(code)
    if args.suite:
        if args.split != "train":
            raise SystemExit("--suite uses reference programs and answers as training targets: only with --split train")
        suite_tasks = [
            task
            for family in args.suite_families or SUITE_FAMILIES
            for task in load_tasks(DatasetSpec(source=family_source(family), split=args.split))
        ]
        suite_designer = designer_examples(
            suite_tasks,
            load_templates(),
            per_task=args.suite,
            seed=args.seed,
            style=args.style,
            domain_hint=args.domain_hint == "on",
            plain=args.plain,
            short=args.short,
            fits=lambda script: len(tokenizer.encode("```python\n" + script + "\n```")) + 1 <= args.max_script_tokens,
            extra_templates=SUITE_SHORT_TEMPLATES if args.short else (),
        )
        coders = reference_executor_examples(
            suite_designer, suite_tasks, suite_references(), per_task=args.suite_coders, seed=args.seed, math=True
        )
        readers = tool_reader_examples(suite_designer, suite_tasks, per_task=args.suite_readers, seed=args.seed)
        designer += suite_designer
        executor += coders + readers
        executor_counts["suite coders"] = len(coders)
        executor_counts["suite tool readers"] = len(readers)

    os.makedirs(args.out, exist_ok=True)
    for name, rows in (("designer", designer), ("executor", executor)):
        with open(os.path.join(args.out, f"{name}.jsonl"), "w") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    prompts: Counter = Counter()
    agents = 0
    for row in designer:
        for prompt in analyze_script(extract_script(row["messages"][-1]["content"]) or "")["system_prompts"]:
            prompts[prompt] += 1
            agents += 1
    manifest = {
        "command": "python scripts/make_cold_start_data.py " + " ".join(sys.argv[1:]),
        "args": vars(args),
        "tasks": len(tasks),
        "designer": len(designer),
        "executor": len(executor),
        "executor_counts": dict(executor_counts),
        "designer_by_domain": dict(Counter(r["domain"] for r in designer)),
        "suite_designer_by_family_structure": {
            family: dict(Counter(r["structure"] for r in designer if r["task_id"].startswith(f"suite-{family}-")))
            for family in sorted({r["task_id"].split("-")[1] for r in designer if r["task_id"].startswith("suite-")})
        },
        "designer_by_structure": dict(Counter(r["structure"] for r in designer).most_common()),
        "designer_by_template": dict(Counter(r["template"] for r in designer).most_common()),
        "agents": agents,
        "byte_unique_system_prompt_share": round(sum(1 for c in prompts.values() if c == 1) / max(1, agents), 4),
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
