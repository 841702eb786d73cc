"""How often a designer writes a valid workflow script: the number the SFT cold start is meant to raise.

The prompts are exactly the rollout engine's designer prompts (:func:`metaagent.rollout.prompts.designer_messages`
with ``k`` in-context templates chosen by :func:`~metaagent.rollout.prompts.select_templates` from the seed
the engine derives for (seed, task, design)), so a rate measured here is the rate the designer has at the
start of RL. A design is valid when a script can be extracted from the reply and the workflow checker
accepts it (the engine's own test before it runs anything).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from metaagent.data.tasks import Task
from metaagent.policy.base import ChatRequest, Policy, SamplingParams
from metaagent.rollout.prompts import (
    designer_messages,
    resolve_designer_prompt,
    resolve_domain_hint,
    select_templates,
)
from metaagent.seeding import derive_seed


@dataclass
class ValidRate:
    """Result of :func:`designer_valid_rate`."""

    model: str
    designs: int
    valid: int
    no_script: int
    errors: Counter = field(default_factory=Counter)  # checker error code -> designs refused with it
    structures: Counter = field(default_factory=Counter)  # structure of the valid designs
    mean_tokens: float = 0.0
    cut_at_max_tokens: int = 0
    elapsed_s: float = 0.0
    examples: list[str] = field(default_factory=list, repr=False)
    system_prompts: Counter = field(default_factory=Counter)  # agents' system prompts in the valid designs
    designer_prompt: str = ""  # the prompt style the designs were asked with
    domain_hint: bool = True  # whether the prompts showed the task's domain ("Task domain: <domain>.")
    samples: list[dict[str, Any]] = field(default_factory=list, repr=False)  # one per design: reply, cut, verdict

    @property
    def agents(self) -> int:
        return sum(self.system_prompts.values())

    @property
    def unique_prompt_share(self) -> float:
        """Share of the valid designs' agents whose system prompt no other agent has (byte for byte)."""
        n = self.agents
        return sum(1 for c in self.system_prompts.values() if c == 1) / n if n else 0.0

    @property
    def top_structure_share(self) -> float:
        """Share of the valid designs that have the most common structure class."""
        return self.structures.most_common(1)[0][1] / self.valid if self.valid else 0.0

    @property
    def rate(self) -> float:
        return self.valid / self.designs if self.designs else 0.0

    def wilson(self, z: float = 1.96) -> tuple[float, float]:
        """95% Wilson score interval of the rate."""
        n, p = self.designs, self.rate
        if n == 0:
            return (0.0, 0.0)
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, centre - half), min(1.0, centre + half))

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.wilson()
        return {
            "model": self.model,
            "designs": self.designs,
            "valid": self.valid,
            "rate": round(self.rate, 4),
            "ci95": [round(lo, 4), round(hi, 4)],
            "no_script": self.no_script,
            "errors": dict(self.errors.most_common()),
            "structures": dict(self.structures.most_common()),
            "mean_tokens": round(self.mean_tokens, 1),
            "cut_at_max_tokens": self.cut_at_max_tokens,
            "elapsed_s": round(self.elapsed_s, 1),
            "designer_prompt": self.designer_prompt,
            "domain_hint": "on" if self.domain_hint else "off",
            "agents": self.agents,
            "unique_prompt_share": round(self.unique_prompt_share, 4),
            "top_structure_share": round(self.top_structure_share, 4),
        }


def design_slots(n_tasks: int, designs: int) -> list[tuple[int, int]]:
    """The (task index b, design index i) of each of ``designs`` requests over ``n_tasks`` tasks, in the order
    of :func:`designer_requests`: M = ceil(designs / n_tasks) a task, the cut spread over all tasks."""
    m = math.ceil(designs / n_tasks)
    slots = [(b, i) for b in range(n_tasks) for i in range(m)]
    order = sorted(range(len(slots)), key=lambda j: (j % m, j // m))  # spread the cut over all tasks
    return [slots[j] for j in sorted(order[:designs])]


def designer_requests(
    tasks: Sequence[Task],
    designs: int,
    *,
    templates: Sequence,
    k_templates: int = 1,
    selection: str = "domain",
    sampling: SamplingParams,
    seed: int = 0,
    style: str = "full",
    domain_hint: bool = True,
) -> list[ChatRequest]:
    """``designs`` designer requests over ``tasks``, in the engine's order (task-major, M = ceil(designs/B)),
    each with the engine's seed for its (seed, step=None, task, b, i)."""
    if not tasks:
        raise ValueError("designer_requests needs at least one task")
    requests = []
    for b, i in design_slots(len(tasks), designs):
        task = tasks[b]
        s = derive_seed(seed, None, task.id, b, i, "design")
        k = k_templates if style == "full" else 0
        shown = select_templates(templates, task, k, random.Random(s), selection)
        messages = designer_messages(task, shown, style=style, domain_hint=domain_hint)
        requests.append(ChatRequest(messages, sampling.replace(seed=s), role="designer"))
    return requests


def designer_valid_rate(
    policy: Policy,
    tasks: Sequence[Task],
    *,
    designs: int = 64,
    k_templates: int = 1,
    temperature: float = 1.0,
    max_tokens: int = 256,
    seed: int = 0,
    templates: Sequence | None = None,
    keep_examples: int = 3,
    designer_prompt: str = "auto",
    domain_hint: str = "auto",
) -> ValidRate:
    """Sample ``designs`` designer replies from ``policy`` and count the valid scripts.

    ``designer_prompt`` "auto" uses the style the policy's model was trained on (see
    :func:`metaagent.rollout.prompts.resolve_designer_prompt`), ``domain_hint`` "auto" the domain sentence
    setting it was trained with (:func:`~metaagent.rollout.prompts.resolve_domain_hint`); "on" / "off" force it."""
    from metaagent.workflow import analyze_script, check_script, extract_script, load_templates

    bank = list(templates) if templates is not None else load_templates()
    sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    style = resolve_designer_prompt(designer_prompt, policy)
    hint = resolve_domain_hint(domain_hint, policy)
    requests = designer_requests(
        tasks, designs, templates=bank, k_templates=k_templates, sampling=sampling, seed=seed, style=style,
        domain_hint=hint,
    )
    t0 = time.perf_counter()
    completions = policy.generate(requests)
    result = ValidRate(
        model=policy.model_id, designs=len(completions), valid=0, no_script=0, designer_prompt=style,
        domain_hint=hint,
    )
    result.elapsed_s = time.perf_counter() - t0
    tokens = 0
    task_ids = [tasks[b].id for b, _ in design_slots(len(tasks), designs)]
    for task_id, c in zip(task_ids, completions, strict=True):
        tokens += len(c.response_ids)
        result.cut_at_max_tokens += int(c.finish_reason == "length")
        sample: dict[str, Any] = {
            "task_id": task_id, "text": c.text, "tokens": len(c.response_ids), "finish_reason": c.finish_reason
        }
        result.samples.append(sample)
        script = extract_script(c.text)
        if script is None:
            result.no_script += 1
            sample["verdict"] = "no-script"
            continue
        report = check_script(script)
        sample["verdict"] = "ok" if report.ok else report.errors[0].code
        if not report.ok:
            sample["error"] = str(report.errors[0])
        if report.ok:
            result.valid += 1
            analysis = analyze_script(script)
            result.structures[analysis["structure"]] += 1
            result.system_prompts.update(analysis["system_prompts"])
            if len(result.examples) < keep_examples:
                result.examples.append(c.text)
        else:
            result.errors[report.errors[0].code] += 1
    result.mean_tokens = tokens / len(completions) if completions else 0.0
    return result
