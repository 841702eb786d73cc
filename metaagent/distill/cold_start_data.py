"""Cold-start SFT data at scale without a teacher: designer examples from the template bank, executor examples
from the embedded model's own correct replies.

``scripts/make_cold_start_data.py`` writes both files; ``scripts/make_cold_start.sh`` trains on them.

- **Designer examples** (:func:`designer_examples`): for every task, ``per_task`` designs. Design ``i`` of
  task ``j`` takes the structure class ``(i + j) mod S`` of the S classes the task's domain has in the bank
  (single, ensemble, reflection, debate, solver-tester, other), so structures are balanced within each domain;
  the template inside a class is drawn with a seeded RNG. The reply is the template instantiated for the task
  by :func:`metaagent.distill.variation.instantiate` with ``structural=True``: role names and system prompts
  written for the task's topic and content, judge/critic wording paraphrased, and the counts varied (rounds,
  samples, agents in a list). The prompt is :func:`metaagent.rollout.prompts.designer_messages` in the
  requested style (``compact`` for the embedded cold start), with or without the domain sentence
  (``domain_hint``, ``--domain-hint``). With ``short=True`` (``--short``) the templates
  are :mod:`metaagent.distill.short_style`'s short ones, with one-sentence prompts. Every reply passes the workflow checker, keeps
  its template's structure class, and fits ``budget`` tokens; duplicates are dropped.
- **Executor examples** (:func:`executor_examples`): replies the embedded model itself wrote in correct
  executions (``sft_data/executor.jsonl``, made by template-only ``metaagent-distill``), kept only when the
  gold answer appears in the reply; the reply is cut after the sentence that first states it and closed
  with the delivery block the team protocol asks for (``<delivery>\\boxed{answer}</delivery>``), so every
  executor example is correct and well formatted.

- **Code executor examples** (:func:`reference_executor_examples`, ``--code-references N``): the embedded
  model solves almost no code task, so self-distillation keeps none; these pair coder prompts from the task's
  own designer examples with the train task's reference program, delivered in a ```python block.

Both kinds are rows of :data:`metaagent.distill.examples.EXAMPLE_FIELDS` (``source`` is
``template-bank`` / ``self-distilled`` / ``reference-solution``).
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from metaagent.data.tasks import Task
from metaagent.domain import get_domain
from metaagent.records import DESIGNER, EXECUTOR
from metaagent.rollout.prompts import designer_messages
from metaagent.seeding import derive_seed
from metaagent.workflow.protocol import DELIVERY_CLOSE, DELIVERY_OPEN, agent_system_prompt

from .examples import _row
from .plain_style import plain_style
from .short_style import SHORT_TEMPLATES
from .variation import fenced, instantiate

DESIGNER_SOURCE = "template-bank"
EXECUTOR_SOURCE = "self-distilled"


def structure_classes(templates: Sequence, domain: str) -> dict[str, list]:
    """The bank's templates of ``domain``, by structure class (sorted by class name, then template name)."""
    out: dict[str, list] = {}
    for t in sorted(templates, key=lambda t: (t.structure, t.name)):
        if domain in t.domains:
            out.setdefault(t.structure, []).append(t)
    return out


def designer_examples(
    tasks: Sequence[Task],
    templates: Sequence,
    *,
    per_task: int,
    seed: int = 0,
    style: str = "compact",
    domain_hint: bool = True,
    fits: Callable[[str], bool] = lambda script: True,
    attempts: int = 8,
    plain: bool = False,
    short: bool = False,
    extra_templates: Sequence = (),
) -> list[dict[str, Any]]:
    """``per_task`` designer examples per task, balanced over structure classes (see the module docstring).
    ``plain`` rewrites each reply in plain style (:func:`metaagent.distill.plain_style.plain_style`: no
    f-strings, built prompts on their own lines) before the token budget is checked. ``short`` draws from
    :data:`metaagent.distill.short_style.SHORT_TEMPLATES` instead of ``templates`` (the shortest scripts per
    structure class, already plain) and instantiates them with short prompts and small counts."""
    from metaagent.workflow import analyze_script

    if short:
        templates = SHORT_TEMPLATES
    templates = (*templates, *extra_templates)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for j, task in enumerate(tasks):
        classes = structure_classes(templates, task.domain)
        if not classes:
            continue
        names = list(classes)
        messages = designer_messages(task, [], style=style, domain_hint=domain_hint)
        for i in range(per_task):
            rng = random.Random(derive_seed(seed, task.id, i, "cold-start-design"))
            structure = names[(i + j) % len(names)]
            variant = None
            for _ in range(attempts):
                template = rng.choice(classes[structure])
                candidate = instantiate(template, task, rng, vary=True, structural=True, short=short)
                if plain:
                    candidate = dataclasses.replace(candidate, script=plain_style(candidate.script))
                if fits(candidate.script):
                    variant = candidate
                    break
            if variant is None:
                continue
            analysis = analyze_script(variant.script)
            row = _row(
                [*messages, {"role": "assistant", "content": fenced(variant.script)}],
                DESIGNER,
                {
                    "task_id": task.id,
                    "domain": task.domain,
                    "level": _level(task),
                    "source": DESIGNER_SOURCE,
                    "seed": seed,
                    "structure": analysis["structure"],
                    "pattern": analysis["pattern"],
                    "design": i,
                },
                template=variant.template,
                model="templates",
                correct=None,
                finish_reason="stop",
            )
            if row["id"] not in seen:
                seen.add(row["id"])
                rows.append(row)
    return rows


def thin_structures(rows: Sequence[dict[str, Any]], keep: dict[str, float], seed: int = 0) -> list[dict[str, Any]]:
    """``rows`` with only a seeded ``keep[structure]`` fraction of each listed structure class kept (the others
    all kept), e.g. ``{"single": 0.5}`` halves the single-agent designs a small model otherwise collapses to."""
    unknown = [k for k, v in keep.items() if not 0.0 <= v <= 1.0]
    if unknown:
        raise ValueError(f"keep fractions must be in [0, 1], got {[(k, keep[k]) for k in unknown]}")
    out = []
    for row in rows:
        fraction = keep.get(row["structure"], 1.0)
        if fraction >= 1.0 or random.Random(derive_seed(seed, row["id"], "thin")).random() < fraction:
            out.append(row)
    return out


def _level(task: Task) -> int:
    level = (task.metadata or {}).get("level")
    return int(level) if isinstance(level, int) else -1


_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")


def _states_answer(text: str, answer: str) -> int | None:
    """End offset of the first sentence of ``text`` that states ``answer`` (as a whole number/word), or None."""
    m = re.search(rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\d)", text)
    if m is None:
        return None
    end = _SENTENCE_END.search(text, m.end())
    return end.end() if end else len(text)


def format_reply(reply: str, answer: str) -> str | None:
    """``reply`` cut after the sentence that first states ``answer`` and closed with the delivery block; None
    when the reply never states the answer."""
    cut = _states_answer(reply, answer)
    if cut is None:
        return None
    body = reply[:cut].rstrip()
    for tag in (DELIVERY_OPEN, DELIVERY_CLOSE):
        body = body.replace(tag, "")
    return f"{body}\n{DELIVERY_OPEN}\\boxed{{{answer}}}{DELIVERY_CLOSE}"


def executor_examples(rows: Iterable[dict[str, Any]], tasks: Sequence[Task]) -> tuple[list[dict[str, Any]], Counter]:
    """Correct, well-formatted executor examples from the embedded model's own kept replies (math tasks with a
    gold answer); returns the rows and counts of what was kept and dropped, by reason."""
    answers = {t.id: t.answer for t in tasks if get_domain(t.domain).boxed_answer and t.answer}
    out: list[dict[str, Any]] = []
    counts: Counter = Counter()
    seen: set[str] = set()
    for row in rows:
        if row.get("kind") != EXECUTOR:
            continue
        answer = answers.get(row.get("task_id", ""))
        if answer is None:
            counts["dropped: no gold answer"] += 1
            continue
        if row.get("correct") is not True:
            counts["dropped: not from a correct execution"] += 1
            continue
        messages = [dict(m) for m in row["messages"]]
        reply = format_reply(messages[-1]["content"], str(answer).strip())
        if reply is None:
            counts["dropped: reply does not state the answer"] += 1
            continue
        messages[-1]["content"] = reply
        new = _row(
            messages,
            EXECUTOR,
            {k: row[k] for k in ("task_id", "domain", "level", "seed", "structure", "pattern", "design")},
            source=EXECUTOR_SOURCE,
            agent=row.get("agent", ""),
            execution=row.get("execution", -1),
            turn=row.get("turn", -1),
            model=row.get("model", ""),
            correct=True,
            reward=row.get("reward"),
            finish_reason="stop",
        )
        if new["id"] in seen:
            counts["dropped: duplicate"] += 1
            continue
        seen.add(new["id"])
        out.append(new)
        counts["kept"] += 1
    return out, counts


REFERENCE_SOURCE = "reference-solution"
TOOL_OUTPUT_SOURCE = "tool-output"

#: how a coder is asked for a math program: the task itself (the short bank) or the bank's tool_pair wording
CODER_MESSAGES = ("{task}", "Write a program that computes the answer to this problem:\n{task}")
#: how a reasoner is handed a program's output: the short bank's and the bank's tool_pair wording
READER_MESSAGES = (
    "{task}\n\nProgram output: {output}",
    "Problem:\n{task}\n\nA program computed:\n{output}\n\nCheck this against your own reasoning and give the "
    "final answer in \\boxed{{}}.",
)


def _agent_prompts(designer_rows: Iterable[dict[str, Any]], keep: Callable[[str], bool]) -> dict[str, list[str]]:
    """System prompts that ``keep`` accepts, of the agents in each task's designer examples (task id -> prompts)."""
    from metaagent.workflow import analyze_script, extract_script

    prompts: dict[str, list[str]] = {}
    for row in designer_rows:
        script = extract_script(row["messages"][-1]["content"]) or ""
        for prompt in analyze_script(script)["system_prompts"]:
            if keep(prompt) and prompt not in prompts.setdefault(row["task_id"], []):
                prompts[row["task_id"]].append(prompt)
    return prompts


def _is_coder(prompt: str) -> bool:
    return "program" in prompt and "\\boxed" not in prompt


def _is_reader(prompt: str) -> bool:
    return "\\boxed" in prompt and any(w in prompt for w in ("output", "printed", "program"))


def _executor_row(prompt: str, message: str, reply: str, task: Task, i: int, seed: int, source: str) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": agent_system_prompt(prompt)},
        {"role": "user", "content": message},
        {"role": "assistant", "content": reply},
    ]
    shape = {"task_id": task.id, "domain": task.domain, "level": _level(task), "seed": seed, "design": i}
    return _row(messages, EXECUTOR, shape, source=source, correct=True, finish_reason="stop")


def _program_reply(program: str) -> str:
    return f"{DELIVERY_OPEN}\n```python\n{program.strip()}\n```\n{DELIVERY_CLOSE}"


def reference_executor_examples(
    designer_rows: Iterable[dict[str, Any]],
    tasks: Sequence[Task],
    references: dict[str, str],
    *,
    per_task: int,
    seed: int,
    math: bool = False,
) -> list[dict[str, Any]]:
    """Coder executor examples from the tasks' reference programs (the train split's, never a test split's).

    The embedded model solves almost no code task, so self-distillation keeps nothing for code, and a cold
    start without code executor examples teaches the model that a ```python block is a workflow script. Here,
    for each code task with a reference, up to ``per_task`` coder prompts are drawn (seeded) from the system
    prompts the task's own designer examples give their agents (those that ask for a program); the example is
    that coder's first call as the engine makes it (system: the role prompt and the team protocol; user: the
    task) and, as the reply, the reference program in a ```python block inside the delivery block.

    With ``math=True`` math tasks with a reference (a program that prints the answer: the suite's) get coder
    examples too: the coder prompts of the task's own designer examples, else of every task of its family
    (few of a math task's designs have a coder), and the message is the task or the bank's tool_pair request
    (:data:`CODER_MESSAGES`).
    """
    own = _agent_prompts(designer_rows, _is_coder)
    out: list[dict[str, Any]] = []
    for task in tasks:
        reference, domain = references.get(task.id), get_domain(task.domain)
        if not reference or not (domain.runs_code or (math and domain.boxed_answer)):
            continue
        prompts = own.get(task.id) or (_family_pool(own, tasks, task) if domain.boxed_answer else [])
        if not prompts:
            continue
        rng = random.Random(derive_seed(seed, "reference-executor", task.id))
        for i, prompt in enumerate(rng.sample(prompts, min(per_task, len(prompts)))):
            message = task.question if domain.runs_code else rng.choice(CODER_MESSAGES).format(task=task.question)
            out.append(_executor_row(prompt, message, _program_reply(reference), task, i, seed, REFERENCE_SOURCE))
    return out


def _family_pool(prompts: dict[str, list[str]], tasks: Sequence[Task], task: Task) -> list[str]:
    """Every prompt in ``prompts`` of the tasks of ``task``'s family (suite tasks) or domain, sorted."""
    key = (task.metadata or {}).get("family", task.domain)
    same = {t.id for t in tasks if (t.metadata or {}).get("family", t.domain) == key}
    return sorted({p for tid, ps in prompts.items() if tid in same for p in ps})


def tool_reader_examples(
    designer_rows: Iterable[dict[str, Any]], tasks: Sequence[Task], *, per_task: int, seed: int
) -> list[dict[str, Any]]:
    """Examples of the second agent of a tool-pair team: handed the task and what a correct program printed
    (:data:`READER_MESSAGES`), it states that result and delivers it boxed. The reader prompts are the tool-pair
    solvers' of the designer examples of the task's family; math tasks with a gold answer only."""
    prompts = _agent_prompts(designer_rows, _is_reader)
    out: list[dict[str, Any]] = []
    for task in tasks:
        if not get_domain(task.domain).boxed_answer or not task.answer:
            continue
        pool = _family_pool(prompts, tasks, task)
        rng = random.Random(derive_seed(seed, "tool-reader", task.id))
        for i, prompt in enumerate(rng.sample(pool, min(per_task, len(pool)))):
            answer = str(task.answer).strip()
            message = rng.choice(READER_MESSAGES).format(task=task.question, output=answer + "\n")
            reply = f"The program printed {answer}.\n{DELIVERY_OPEN}\\boxed{{{answer}}}{DELIVERY_CLOSE}"
            out.append(_executor_row(prompt, message, reply, task, i, seed, TOOL_OUTPUT_SOURCE))
    return out
