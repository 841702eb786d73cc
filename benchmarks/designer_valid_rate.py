"""Valid-script rate of the designer before and after the SFT cold start, on the same prompts.

    .venv/bin/python benchmarks/designer_valid_rate.py --models embedded embedded-sft --designs 64

Each model answers the same ``--designs`` designer prompts: held-out bundled tasks (``--split val``,
levels 1-2, as in configs/default.yaml), the designer prompt ``--designer-prompt`` (``auto``: the style the
model was trained on, ``full`` with ``--k-templates`` 1 in-context template, or ``compact``), sampled at temperature 1.0 with 256 new tokens (the demo's designer budget) and the engine's
per-design seeds. A design is valid when a script is extracted from the reply and the workflow checker
accepts it. ``--suite-families`` asks on the structure-sensitive suite instead (``--per-family`` tasks of each
family's ``--split``, families interleaved so that a cut ``--designs`` keeps them balanced); ``--domain-hint``
runs every model once per setting of the prompt's ``Task domain: <domain>.`` sentence (``auto``: what the model
was trained with; issue 62 measures ``on`` and ``off`` side by side):

    .venv/bin/python benchmarks/designer_valid_rate.py --models embedded-sft-suite --suite-families arith code \
        lookup start strings --per-family 12 --designs 60 --max-tokens 384 --domain-hint on off --json OUT.json
 ``embedded-sft`` is the alias of the committed cold-start adapter merged into the embedded model
(``metaagent.policy.models.load_cold_start()``); any other name is a model alias or HF directory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["embedded", "embedded-sft"])
    p.add_argument("--designs", type=int, default=64)
    p.add_argument("--split", default="val")
    p.add_argument("--levels", nargs="+", type=int, default=[1, 2])
    p.add_argument("--k-templates", type=int, default=1)
    p.add_argument("--designer-prompt", default="auto", choices=["auto", "full", "compact"])
    p.add_argument("--domain-hint", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                   help="the 'Task domain: <domain>.' sentence; several: each model once per setting")  # fmt: skip
    p.add_argument("--suite-families", nargs="+", default=None,
                   help="ask on these suite families (metaagent.data.suite) instead of the bundled set")
    p.add_argument("--per-family", type=int, default=0, help="--suite-families: first N tasks a family (0: all)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy machine)")
    p.add_argument("--batch", type=int, default=32, help="rows decoded together")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--show", type=int, default=1, help="print this many valid replies per model")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from metaagent.data import DatasetSpec, load_tasks
    from metaagent.policy.hf import HFPolicy
    from metaagent.sft.eval import designer_valid_rate

    if args.suite_families:
        from metaagent.data.suite import family_source

        per = [load_tasks(DatasetSpec(source=family_source(f), split=args.split)) for f in args.suite_families]
        per = [ts[: args.per_family] if args.per_family else ts for ts in per]
        tasks = [t for row in itertools.zip_longest(*per) for t in row if t is not None]  # families interleaved
        where = f"suite tasks ({args.split}, {args.per_family or 'all'} of each of {', '.join(args.suite_families)})"
    else:
        tasks = load_tasks(DatasetSpec(source="bundled", split=args.split, levels=args.levels))
        where = f"held-out bundled tasks ({args.split}, levels {args.levels})"
    print(
        f"{args.designs} designs on {len(tasks)} {where}; "
        f"k={args.k_templates} template, temperature {args.temperature}, {args.max_tokens} tokens, seed {args.seed}; "
        f"torch threads {torch.get_num_threads()}, load avg {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results = []
    for name in args.models:
        policy = HFPolicy(name, max_batch_size=args.batch, model_id=name)
        for hint in args.domain_hint:
            t0 = time.perf_counter()
            r = designer_valid_rate(
                policy,
                tasks,
                designs=args.designs,
                k_templates=args.k_templates,
                temperature=args.temperature,
                max_tokens=args.max_tokens,
                seed=args.seed,
                keep_examples=args.show,
                designer_prompt=args.designer_prompt,
                domain_hint=hint,
            )
            results.append(r)
            lo, hi = r.wilson()
            print(
                f"  {name} ({r.designer_prompt} prompt, domain hint {'on' if r.domain_hint else 'off'}): "
                f"{r.valid}/{r.designs} valid ({r.rate:.1%}, 95% CI "
                f"{lo:.1%}-{hi:.1%}) in {time.perf_counter() - t0:.0f}s; {len(r.structures)} structure classes, "
                f"top {r.top_structure_share:.0%}; {r.unique_prompt_share:.1%} of {r.agents} agents have a "
                "byte-unique system prompt",
                flush=True,
            )
            for text in r.examples:
                print("    e.g. " + text.strip().replace("\n", "\n         ")[:1200])
        policy.close()

    print()
    print(
        f"{'model':<16} {'hint':>4} {'valid':>9} {'rate':>7} {'95% CI':>15} {'no script':>10} {'cut@max':>8} {'tokens':>7}  checker errors / structures"
    )
    for r in results:
        lo, hi = r.wilson()
        errors = ", ".join(f"{k} {v}" for k, v in r.errors.most_common(3)) or "-"
        structures = ", ".join(f"{k} {v}" for k, v in r.structures.most_common()) or "-"
        print(
            f"{r.model:<16} {'on' if r.domain_hint else 'off':>4} {r.valid:>4}/{r.designs:<4} {r.rate:>7.1%} {lo:>7.1%}-{hi:<7.1%} {r.no_script:>10} "
            f"{r.cut_at_max_tokens:>8} {r.mean_tokens:>7.0f}  {errors} | {structures}"
        )
        if args.suite_families:
            print("    per family: " + ", ".join(f"{f} {v}/{n}" for f, (v, n) in per_family(r, tasks).items()))
    if args.json:
        with open(args.json, "w") as f:
            rows = [
                {**r.to_dict(), **({"per_family": per_family(r, tasks)} if args.suite_families else {}),
                 "samples": r.samples}  # per design: task, reply, cut, verdict
                for r in results
            ]  # fmt: skip
            json.dump({"args": vars(args), "results": rows}, f, indent=1)


def per_family(r, tasks) -> dict[str, list[int]]:
    """Suite family -> [valid designs, designs] of a result (each sample names its task)."""
    family = {t.id: t.metadata.get("family", t.domain) for t in tasks}
    out: dict[str, list[int]] = {}
    for s in r.samples:
        row = out.setdefault(family[s["task_id"]], [0, 0])
        row[0] += int(s["verdict"] == "ok")
        row[1] += 1
    return out


if __name__ == "__main__":
    main()
