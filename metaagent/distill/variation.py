"""Meaning-preserving variants of template scripts, for template-only distillation.

The designer should learn to write a team for *this* task rather than copy a template byte for byte (the
paper reports that 77.5% of its agents get a byte-unique system prompt). A variant keeps the template's
control flow, tools, number of agents and output-format instructions, and rewrites only the two string
literals of each ``Agent("Role", "system prompt")`` call:

- **role name**: a generic prefix ("Math", "Code", "Python") may become the task's topic
  ("MathSolver" -> "PercentSolver"), and the role word may become a synonym ("Solver" -> "Expert");
- **system prompt**: the opening may be paraphrased ("You solve" -> "Your job is to solve"), "math problems"
  may name the topic ("percentage problems"), a topic sentence may open the prompt ("This task is about
  percentages.") and a task-specific focus sentence may close it ("Keep track of the apples.",
  "Define are_anagrams(a, b) exactly as the task specifies.").

The words a template's control flow tests replies for (``CORRECT``, ``VALID``, ``INVALID``) and the format
instructions (``\\boxed{}``, "one ```python block") are never removed: all changes are the table entries
below, applied at the start of a prompt, to the phrase "math problems", or as whole added sentences. Every
variant is re-checked with the workflow checker and re-analysed (same structure and pattern as the
template); one that fails either (never expected with these tables) falls back to the template.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from metaagent.data.tasks import Task
from metaagent.domain import get_domain

# ---- the tables (plain data) -------------------------------------------------------------------------------

#: role words (last CamelCase word of a role name) and their synonyms; the first entry is the original.
#: Synonyms keep the role cues of metaagent.workflow.analysis.ROLE_CUES (a critic stays critic-like and not
#: verifier-like, a planner keeps "plan", ...), so a variant has the template's structure and pattern.
ROLE_WORD_SYNONYMS: dict[str, tuple[str, ...]] = {
    "Solver": ("Solver", "Expert", "Specialist"),
    "Critic": ("Critic", "Reviewer", "Inspector"),
    "Judge": ("Judge", "Referee", "Arbiter"),
    "Verifier": ("Verifier", "Checker", "AnswerChecker"),
    "Reviewer": ("Reviewer", "Inspector", "Critic"),
    "Planner": ("Planner", "PlanWriter"),
    "Decomposer": ("Decomposer", "Splitter"),
    "Synthesizer": ("Synthesizer", "Combiner"),
    "Coder": ("Coder", "Programmer"),
    "Reasoner": ("Reasoner", "Analyst"),
}

#: role-name prefixes that say nothing about the task and may be replaced by the task's topic
GENERIC_PREFIXES = ("Math", "Code", "Python")

#: (pattern on the task text, topic phrase, problem adjective, role-name prefix); the first match wins
MATH_TOPICS: tuple[tuple[str, str, str, str], ...] = (
    (r"%|\bpercent", "percentages", "percentage", "Percent"),
    (r"\baverage\b|\bmean\b", "averages", "average", "Average"),
    (r"\barea\b|\bperimeter\b|\brectangle\b|\btriangle\b|\bcircle\b", "geometry", "geometry", "Geometry"),
    (r"\bspeed\b|\bper hour\b|\bkm\b|\bmiles\b", "rates and distances", "rate", "Rate"),
    (r"\bdiscount\b|\bprice\b|\bcosts?\b|\$|\bdollars?\b", "money and prices", "money", "Money"),
    (r"\bfractions?\b|\bhalf\b|\bthird\b|\bquarter\b", "fractions", "fraction", "Fraction"),
    (r"\bsolve for\b|\bequation\b|\bx\s*[-+*/=]", "equations", "equation", "Equation"),
    (r"^\s*What is [-\d\s+*/().^]+\?\s*$", "arithmetic", "arithmetic", "Arithmetic"),
)
MATH_DEFAULT_TOPIC = ("word problems", "word", "WordProblem")

CODE_TOPICS: tuple[tuple[str, str, str, str], ...] = (
    (r"\bstandard input\b|\bstdin\b", "input/output programs", "input/output", "IO"),
    (r"\bstrings?\b|\bletters?\b|\bcharacters?\b|\bwords?\b", "string processing", "string", "String"),
    (r"\blists?\b|\barrays?\b|\bintegers\b|\bnumbers\b", "list processing", "list", "List"),
)
CODE_DEFAULT_TOPIC = ("Python programming", "programming", "Program")

#: paraphrases of a prompt's opening words; the first entry is the original
OPENINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("You solve ", ("You solve ", "Your job is to solve ", "You carefully solve ")),
    ("You write ", ("You write ", "Your job is to write ", "You carefully write ")),
    ("You check ", ("You check ", "Your job is to check ", "You carefully check ")),
    ("You review ", ("You review ", "Your job is to review ", "You carefully review ")),
    ("You compare ", ("You compare ", "Your job is to compare ", "You carefully compare ")),
    ("You verify ", ("You verify ", "Your job is to verify ", "You carefully verify ")),
    ("You read ", ("You read ", "Your job is to read ", "You carefully read ")),
    ("You split ", ("You split ", "Your job is to split ")),
    ("You combine ", ("You combine ", "Your job is to combine ")),
    ("You reason ", ("You reason ", "Your job is to reason ")),
)

#: with ``short=True``: paraphrases of the phrases of metaagent/distill/short_style.py's prompts (the first
#: entry is the original), so a task's short prompts differ from design to design
SHORT_PARAPHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "step by step",
        ("step by step", "carefully", "one step at a time", "in small steps", "and check each step"),
    ),
    (
        "put the final answer in",
        ("put the final answer in", "give the final answer in", "end with the answer in"),
    ),
    ("give it in", ("give it in", "write it in", "state it in")),
    ("with algebra", ("with algebra", "with equations", "by algebra", "by working backwards")),
    ("the correct answer", ("the correct answer", "the right answer", "the best answer")),
    ("the program output", ("the program output", "the printed result", "the program's output")),
    ("a simple Python", ("a simple Python", "a plain Python", "a simple, correct Python")),
    ("a careful Python", ("a careful Python", "a well-tested Python", "an efficient Python")),
    ("the best program", ("the best program", "the most correct program", "the program most likely right")),
    ("You pick ", ("You pick ", "You choose ", "You select ")),
    ("You question ", ("You question ", "You doubt ", "You challenge ")),
    ("a Python program", ("a Python program", "a short Python program", "a clear Python program")),
    ("name the first error", ("name the first error", "point out the first mistake", "name any error")),
    ("name the bugs", ("name the bugs", "point out the bugs", "list the bugs")),
    ("a short plan", ("a short plan", "a numbered plan", "a plan of three steps")),
)

#: sentences that open a prompt; ``{topic}`` is the task's topic phrase
TOPIC_INTROS = ("This task is about {topic}. ", "The team is working on {topic}. ")

#: role words whose prompts get no focus sentence: they are told not to solve the task themselves
NO_FOCUS_ROLE_WORDS = ("Planner", "Decomposer")

#: words the templates' control flow looks for in replies: a variant must keep every occurrence
CONTROL_WORDS = ("CORRECT", "VALID", "INVALID", "FAIL")

#: words after a number that are not the things being counted
_NOT_UNITS = frozenset(
    [
        "more",
        "less",
        "times",
        "and",
        "or",
        "of",
        "the",
        "a",
        "an",
        "to",
        "in",
        "on",
        "by",
        "per",
        "each",
        "cm",
        "km",
        "kg",
        "m",
        "g",
        "percent",
        "more",
        "fewer",
    ]
)

#: with ``structural=True``: a sentence about how the role works, by role word (or "*" for any role)
ROLE_ADVICE: dict[str, tuple[str, ...]] = {
    "Solver": (
        "Show each step.",
        "Check your arithmetic before answering.",
        "Write down what is given first.",
    ),
    "Critic": ("Point out the first mistake you find.", "Check every step, not only the answer."),
    "Judge": ("Prefer the answer with the clearest reasoning.", "Check each candidate before choosing."),
    "Verifier": ("Redo the key computation yourself.", "Be strict."),
    "Reviewer": ("Point out the first mistake you find.", "Be specific."),
    "Planner": ("Keep the plan short.", "Number the steps."),
    "Coder": ("Keep the program simple.", "Handle empty input."),
    "*": ("Be concise.", "Think carefully.", "Be precise."),
}
P_ADVICE = 0.5

# probabilities of each kind of change, per agent
P_PREFIX, P_SYNONYM, P_OPENING, P_TOPIC_WORD, P_INTRO, P_FOCUS = 0.5, 0.4, 0.5, 0.5, 0.3, 0.7


# ---- task facts --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskFacts:
    """What a variant may say about a task: its topic and a few task-specific focus sentences."""

    topic: str
    adjective: str
    prefix: str
    focus: tuple[str, ...] = field(default=())
    subject: str = (
        ""  # a few words naming what this task is about ("the apples", "20 + 20", "two_sum"), or ""
    )


def task_facts(task: Task) -> TaskFacts:
    """Topic (from :data:`MATH_TOPICS` / :data:`CODE_TOPICS`) and focus sentences read off the task text."""
    text, program = task.question.strip(), get_domain(task.domain).runs_code  # a program task: code's vocabulary
    topics, default = (CODE_TOPICS, CODE_DEFAULT_TOPIC) if program else (MATH_TOPICS, MATH_DEFAULT_TOPIC)
    topic, adjective, prefix = default
    for pattern, t, adj, pre in topics:
        if re.search(pattern, text, re.IGNORECASE | re.MULTILINE):
            topic, adjective, prefix = t, adj, pre
            break
    return TaskFacts(topic, adjective, prefix, _focus(program, text), _subject(program, text))


def _subject(program: bool, text: str) -> str:
    """What the short prompts (``short=True``) name after the topic: a program task's function, a math task's
    expression, first counted thing or first named person; "" when there is none."""
    if program:
        m = re.search(r"`(\w+)\(", text) or re.search(r"\bRead(?:s)? (\w+ \w+)", text)
        return m.group(1) if m else ""
    m = re.fullmatch(r"\s*What is ([-\d\s+*/().^]+)\?\s*", text)
    if m:
        return m.group(1).strip()
    for unit in re.findall(r"\b\d+(?:\.\d+)?\s+([a-z]{3,})\b", text):
        if unit not in _NOT_UNITS:
            return f"the {unit}"
    m = re.search(
        r"\b([A-Z][a-z]{2,})\s+(?:has|had|buys|bought|gets|got|reads|walks|runs|drives|saves)\b", text
    )
    return m.group(1) if m else ""


def _focus(program: bool, text: str) -> tuple[str, ...]:
    out: list[str] = []
    if program:
        m = re.search(r"`(\w+)\(([^)`]*)\)`", text)
        if m:
            out.append(f"Define {m.group(1)}({m.group(2)}) exactly as the task specifies.")
        if re.search(r"standard input|stdin", text, re.IGNORECASE):
            out.append("Read the input exactly as described and print only what is asked.")
        return tuple(out)
    m = re.fullmatch(r"\s*What is ([-\d\s+*/().^]+)\?\s*", text)
    if m:
        out.append(f"Compute {m.group(1).strip()} exactly, one operation at a time.")
    units: list[str] = []
    for unit in re.findall(r"\b\d+(?:\.\d+)?\s+([a-z]{3,})\b", text):
        if unit not in _NOT_UNITS and unit not in units:
            units.append(unit)
    if units:
        things = units[0] if len(units) == 1 else f"{units[0]} and the {units[1]}"
        out.append(f"Keep track of the {things}.")
    names = re.findall(
        r"\b([A-Z][a-z]{2,})\s+(?:has|had|buys|bought|gets|got|reads|walks|runs|drives|saves)\b", text
    )
    if names:
        out.append(f"Follow each step of what happens to {names[0]}.")
    return tuple(out)


# ---- variants ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """A template instantiated for one task. ``roles``/``prompts`` are the rewritten Agent literals."""

    template: str
    script: str
    roles: tuple[str, ...]
    prompts: tuple[str, ...]
    changed: bool


def _split_role(name: str) -> tuple[str, str]:
    m = re.fullmatch(r"(.*?)([A-Z][a-z]+)", name)
    return (m.group(1), m.group(2)) if m else (name, "")


def vary_role(name: str, facts: TaskFacts, rng: random.Random) -> str:
    prefix, word = _split_role(name)
    if prefix in GENERIC_PREFIXES and rng.random() < P_PREFIX:
        prefix = facts.prefix
    synonyms = ROLE_WORD_SYNONYMS.get(word)
    if synonyms and rng.random() < P_SYNONYM:
        word = rng.choice(synonyms)
    return prefix + word


def vary_prompt(
    prompt: str, facts: TaskFacts, rng: random.Random, *, focus: bool = True, short: bool = False
) -> str:
    """``short`` (the ``--short`` cold start): name the topic and the task's subject in the prompt's one
    sentence ("math problems" -> "money problems about the apples", "coding tasks" -> "string tasks like
    to_upper"), paraphrase its phrases (:data:`SHORT_PARAPHRASES`); no topic-intro and no focus sentence."""
    out = prompt
    for original, choices in OPENINGS:
        if out.startswith(original):
            if short or rng.random() < P_OPENING:
                out = rng.choice(choices) + out[len(original) :]
            break
    if short:
        about = {"math": f" about {facts.subject}", "code": f" like {facts.subject}"} if facts.subject else {}
        if facts.topic == "arithmetic" and facts.subject:
            about["math"] = f" like {facts.subject}"
        out = out.replace("math problems", f"{facts.adjective} problems" + about.get("math", ""), 1)
        out = out.replace("coding tasks", f"{facts.adjective} tasks" + about.get("code", ""), 1)
    elif "math problems" in out and rng.random() < P_TOPIC_WORD:
        out = out.replace("math problems", f"{facts.adjective} problems", 1)
    if short:
        for original, choices in SHORT_PARAPHRASES:
            if original in out:
                out = out.replace(original, rng.choice(choices), 1)
    if not short and rng.random() < P_INTRO:
        out = rng.choice(TOPIC_INTROS).format(topic=facts.topic) + out
    if focus and not short and facts.focus and rng.random() < P_FOCUS:
        out = out.rstrip() + " " + rng.choice(facts.focus)
    return out


def _literal(text: str) -> str:
    """A double-quoted Python string literal whose value is ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


class _AgentRewriter(cst.CSTTransformer):
    """Rewrites the role and prompt literals of every ``Agent("Role", "prompt", ...)`` call."""

    def __init__(self, rewrite: Callable[[str, str], tuple[str, str]]) -> None:
        self.rewrite = rewrite
        self.roles: list[str] = []
        self.prompts: list[str] = []

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not (
            isinstance(updated.func, cst.Name) and updated.func.value == "Agent" and len(updated.args) >= 2
        ):
            return updated
        role_arg, prompt_arg = updated.args[0], updated.args[1]
        if role_arg.keyword is not None or prompt_arg.keyword is not None:
            return updated
        if not (
            isinstance(role_arg.value, cst.SimpleString) and isinstance(prompt_arg.value, cst.SimpleString)
        ):
            return updated
        role, prompt = role_arg.value.evaluated_value, prompt_arg.value.evaluated_value
        if not isinstance(role, str) or not isinstance(prompt, str):
            return updated
        new_role, new_prompt = self.rewrite(role, prompt)
        self.roles.append(new_role)
        self.prompts.append(new_prompt)
        args = list(updated.args)
        args[0] = role_arg.with_changes(value=cst.SimpleString(_literal(new_role)))
        args[1] = prompt_arg.with_changes(value=cst.SimpleString(_literal(new_prompt)))
        return updated.with_changes(args=args)


def _control_words(text: str) -> dict[str, int]:
    return {w: len(re.findall(rf"\b{w}\b", text)) for w in CONTROL_WORDS}


def _shape(analysis: dict) -> tuple:
    return (analysis["structure"], analysis["pattern"], analysis["num_agents"], analysis["num_call_sites"])


#: structural variation (``instantiate(..., structural=True)``): rounds of ``for _ in range(N)`` loops,
#: samples of ``parallel(agent, [task] * N)``, and the size of a list of agents (one dropped from a list of
#: three or more, or one added as a copy of the first under an unused role word)
ROUND_CHOICES = (1, 2, 3)
SAMPLE_CHOICES = (3, 4, 5, 6)
#: the same with ``short=True``: fewer rounds and samples, no agent added to a list
SHORT_ROUND_CHOICES, SHORT_SAMPLE_CHOICES = (1, 2), (2, 3, 4)
P_ROUNDS, P_SAMPLES, P_DROP_AGENT, P_ADD_AGENT = 0.5, 0.7, 0.3, 0.3


def _is_agent_call(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "Agent"


class _StructureRewriter(cst.CSTTransformer):
    """Changes the counts of a template (rounds, samples, agents in a list); control flow stays."""

    def __init__(self, rng: random.Random, short: bool = False) -> None:
        self.rng = rng
        self.short = short
        self.rounds = SHORT_ROUND_CHOICES if short else ROUND_CHOICES
        self.samples = SHORT_SAMPLE_CHOICES if short else SAMPLE_CHOICES

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        it = updated.iter
        if (
            isinstance(it, cst.Call)
            and isinstance(it.func, cst.Name)
            and it.func.value == "range"
            and len(it.args) == 1
            and isinstance(it.args[0].value, cst.Integer)
            and self.rng.random() < P_ROUNDS
        ):
            n = self.rng.choice(self.rounds)
            arg = it.args[0].with_changes(value=cst.Integer(str(n)))
            return updated.with_changes(iter=it.with_changes(args=[arg]))
        return updated

    def leave_BinaryOperation(self, original: cst.BinaryOperation, updated: cst.BinaryOperation):
        if (
            isinstance(updated.operator, cst.Multiply)
            and isinstance(updated.left, cst.List)
            and isinstance(updated.right, cst.Integer)
            and self.rng.random() < P_SAMPLES
        ):
            return updated.with_changes(right=cst.Integer(str(self.rng.choice(self.samples))))
        return updated

    def leave_List(self, original: cst.List, updated: cst.List) -> cst.List:
        elements = list(updated.elements)
        if len(elements) < 2 or not all(_is_agent_call(e.value) for e in elements):
            return updated
        r = self.rng.random()
        if len(elements) >= 3 and r < P_DROP_AGENT:
            drop = self.rng.randrange(len(elements))
            kept = [e for i, e in enumerate(elements) if i != drop]
            kept[-1] = kept[-1].with_changes(comma=elements[-1].comma)
            return updated.with_changes(elements=kept)
        if r >= 1.0 - P_ADD_AGENT and not self.short:
            first = elements[0].value
            role = (
                first.args[0].value.evaluated_value
                if isinstance(first.args[0].value, cst.SimpleString)
                else None
            )
            if not isinstance(role, str):
                return updated
            prefix, word = _split_role(role)
            taken = {
                e.value.args[0].value.evaluated_value
                for e in elements
                if isinstance(e.value.args[0].value, cst.SimpleString)
            }
            options = [prefix + w for w in ROLE_WORD_SYNONYMS.get(word, ()) if prefix + w not in taken]
            if not options:
                return updated
            new_role = self.rng.choice(options)
            clone = first.with_changes(
                args=[first.args[0].with_changes(value=cst.SimpleString(_literal(new_role))), *first.args[1:]]
            )
            last = elements[-1]
            comma = last.comma if not isinstance(last.comma, cst.MaybeSentinel) else cst.Comma()
            new = last.with_changes(value=clone, comma=last.comma)
            elements[-1] = last.with_changes(comma=comma)
            return updated.with_changes(elements=[*elements, new])
        return updated


def instantiate(
    template,
    task: Task,
    rng: random.Random,
    *,
    vary: bool = True,
    structural: bool = False,
    short: bool = False,
) -> Variant:
    """A variant of ``template`` (a :class:`metaagent.workflow.Template`) for ``task``.

    With ``vary=False`` (or when the variant would not pass the checker) the script is the template's own.
    Role names stay distinct within a script: a rename that would collide keeps the original name.
    ``structural`` also varies the counts (:class:`_StructureRewriter`): the variant then keeps the
    template's structure and pattern but may have a different number of agents and call sites.
    ``short`` keeps prompts short (:func:`vary_prompt` with ``short``, no role advice) and counts small
    (:data:`SHORT_ROUND_CHOICES`, :data:`SHORT_SAMPLE_CHOICES`); used with :mod:`metaagent.distill.short_style`.
    """
    from metaagent.workflow import analyze_script, check_script

    source = template.source
    if not vary:
        return Variant(template.name, source, (), (), False)
    facts = task_facts(task)
    used: set[str] = set()

    def rewrite(role: str, prompt: str) -> tuple[str, str]:
        new_role = vary_role(role, facts, rng)
        if new_role in used:
            new_role = role
        used.add(new_role)
        word = _split_role(role)[1]
        new_prompt = vary_prompt(prompt, facts, rng, focus=word not in NO_FOCUS_ROLE_WORDS, short=short)
        if structural and not short and rng.random() < P_ADVICE:
            advice = ROLE_ADVICE.get(word) or ROLE_ADVICE["*"]
            new_prompt = new_prompt.rstrip() + " " + rng.choice(advice)
        return new_role, new_prompt

    rewriter = _AgentRewriter(rewrite)
    try:
        module = cst.parse_module(source)
        if structural:
            module = module.visit(_StructureRewriter(rng, short=short))
        script = module.visit(rewriter).code
    except cst.ParserSyntaxError:
        return Variant(template.name, source, (), (), False)
    shape, want = _shape(analyze_script(script)), _shape(analyze_script(source))
    if structural:
        shape, want = shape[:2], want[:2]
    if (
        _control_words(script) != _control_words(source)
        or len(set(rewriter.roles)) != len(rewriter.roles)
        or not check_script(script).ok
        or shape != want
    ):
        return Variant(template.name, source, (), (), False)
    return Variant(template.name, script, tuple(rewriter.roles), tuple(rewriter.prompts), script != source)


def choose_variant(
    templates: Sequence,
    task: Task,
    rng: random.Random,
    *,
    fits: Callable[[str], bool] = lambda script: True,
    vary: bool = True,
    attempts: int = 8,
) -> Variant | None:
    """A variant of a template for the task's domain that ``fits`` (e.g. the designer's token budget).

    Templates are drawn uniformly from those whose domains include the task's; a variant that does not fit
    is redrawn up to ``attempts`` times, then the unvaried templates that fit are tried. None when no
    template of the domain fits at all.
    """
    pool = [t for t in templates if task.domain in t.domains]
    if not pool:
        return None
    for _ in range(attempts):
        variant = instantiate(rng.choice(pool), task, rng, vary=vary)
        if fits(variant.script):
            return variant
    plain = [t for t in pool if fits(t.source)]
    return instantiate(rng.choice(plain), task, rng, vary=False) if plain else None


def fenced(script: str) -> str:
    """The designer's reply for a script: one ```python block and nothing after it."""
    return f"```python\n{script.rstrip()}\n```"
