r"""Answer provenance: a team's submitted answer must come from its agents (``answer_not_from_agents``).

A workflow script holds the task's text. A design can make one token-long agent call (which defeats
``no_agent_runs``) and then compute the answer itself: parse ``task``, multiply its numbers, submit
``\boxed{391}``; or write the program, or the planning moves, itself. That pays R = 1.4 on every task whose
answer a few lines of Python find, and teaches the designer nothing about teams. The rule: the submitted
answer, read as its domain reads it (its *key*), must occur in an agent reply of the same execution, or in the
output of a tool that ran an agent's text; otherwise R_correct = 0 (shortcut ``answer_not_from_agents``,
:mod:`.shortcuts`). For the plan domain every action applied with ``env_step`` (the reward replays them)
must come from the agents in the same way.

Evidence, in one execution:

- every agent reply (``AgentTurn.response`` and its ``<delivery>`` block);
- the output of :data:`AGENT_DRIVEN_TOOLS` calls whose program is an agent's (one of the fenced blocks of a
  reply, or a whole reply) and whose input is empty, part of an agent reply or part of the task: the
  output of a program an agent wrote is the agents' work; a program the script wrote is not.

Keys (one :class:`Rule` per domain, :data:`RULES`; the submitted answer is keyed as its scorer reads it):

- ``math``: the final answer of a text (:func:`~metaagent.rewards.math.extract_answer`), every ``\boxed{}``
  in it and every short line, normalised (LaTeX variants, spaces), plus the exact value of each that reads
  as a number, so ``\boxed{0.5}`` in a reply carries ``1/2`` and ``50\%``;
- ``code``: every fenced block of a text and the whole text, lines right-stripped, blank lines dropped;
- ``plan``: the move list or JSON array after the final-answer mark (and in the whole text), canonical;
- ``qa``: the normalised answer (SQuAD normalisation) must occur, on word boundaries, in a normalised reply.

What it does not close: a script that writes its computed answer into an agent's prompt and has the agent
repeat it (the agent's reply then holds the key); the turn records show it (``AgentTurn.messages``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from metaagent.envs.base import parse_actions, parse_final, parse_json
from metaagent.execution.code import extract_program
from metaagent.records import Execution

from ..workflow.protocol import extract_delivery
from .math import MAX_TEXT_CHARS, extract_answer
from .numbers import clean_answer, final_number, normalize_answer
from .qa import extract_qa_answer, normalize_answer as qa_normal

#: tools whose output counts as the agents' work: tool name -> (the argument that must be an agent's
#: program, the argument that must be empty, an agent's text or the task's)
AGENT_DRIVEN_TOOLS: dict[str, tuple[str, str | None]] = {
    "run_program": ("program", "input"),
    "run_tests": ("program", None),
}
#: tools that apply an action to the task's environment: tool name -> the argument holding the action
ACTION_TOOLS: dict[str, str] = {"env_step": "answer"}
#: lines of a text longer than this are prose, not an answer (math keys read short lines only)
MAX_KEY_LINE_CHARS = 64

_FENCE_RE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_PUNCT_RE = re.compile(r"[^\w\s]")
_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)

Keys = Callable[[str], set[str]]


# ---- keys ------------------------------------------------------------------------------------------------


def _brace_pairs(text: str) -> dict[int, int]:
    """``{open index: close index}`` of every balanced brace group, escaped braces skipped: one pass over the
    braces and backslashes only (:func:`~metaagent.rewards.numbers.brace_pairs` visits every character)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE_TOKEN_RE.finditer(text):
        token = match.group(0)
        if token == "{":
            stack.append(match.start())
        elif token == "}" and stack:
            pairs[stack.pop()] = match.start()
    return pairs


def _boxed_all(text: str) -> list[str]:
    """The content of every balanced ``\\boxed{...}`` of ``text`` (one pass pairs every brace)."""
    matches = list(_BOX_RE.finditer(text))
    if not matches:
        return []
    pairs = _brace_pairs(text)
    return [text[m.end() : pairs[m.end() - 1]] for m in matches if m.end() - 1 in pairs]


def _math_key(answer: str) -> set[str]:
    """One answer's keys: its normalised spelling and, when it reads as a number, its exact value(s)."""
    text = re.sub(r"\s+", "", normalize_answer(answer)[0])
    if not text:
        return set()
    numbers = final_number(answer, strict=False) or []
    return {text} | {f"={n.value}" for n in numbers}


def math_keys(text: str) -> set[str]:
    """Keys of every answer a text states: its final answer, each ``\\boxed{}``, each short line (of its last
    :data:`~metaagent.rewards.math.MAX_TEXT_CHARS` characters, as the answer is extracted: bounded work), and
    the whole text when it is one line (a program's printed output longer than a short line)."""
    if not text:
        return set()
    text = text[-MAX_TEXT_CHARS:]
    candidates = _boxed_all(text)
    # the final answer: the last box when there is one (as extract_answer reads it), else the fallback phrases
    final = clean_answer(candidates[-1]) if candidates else extract_answer(text)
    if final:
        candidates.append(final)
    candidates += [line for line in text.splitlines() if 0 < len(line.strip()) <= MAX_KEY_LINE_CHARS]
    if "\n" not in text.strip():  # one line of any length: a program's printed answer, however long
        candidates.append(text.strip())
    return {key for c in candidates for key in _math_key(c)}


def normalized_program(text: str) -> str:
    """A program with lines right-stripped and blank lines dropped (the form two copies are compared in)."""
    return "\n".join(line.rstrip() for line in text.strip().splitlines() if line.strip())


def code_keys(text: str) -> set[str]:
    """Every fenced block of ``text`` and the whole text, normalised."""
    if not text:
        return set()
    found = {normalized_program(block) for block in _FENCE_RE.findall(text)} | {normalized_program(text)}
    return {key for key in found if key}


def _plan_key(part: str) -> set[str]:
    keys = set()
    moves = parse_actions(part)
    if moves is not None:
        keys.add("moves:" + ",".join(moves))
    value = parse_json(part)
    if isinstance(value, list):
        keys.add("json:" + json.dumps(value, sort_keys=True, separators=(",", ":")))
    return keys


def plan_answer_keys(answer: str) -> set[str]:
    """The keys of what an environment reads from an answer: the part after the final-answer mark."""
    return _plan_key(parse_final(answer or ""))


def plan_keys(text: str) -> set[str]:
    """The move list (``moves:U,R``) or JSON array (``json:...``) after the final-answer mark, or anywhere."""
    return _plan_key(parse_final(text or "")) | _plan_key(text or "")


def qa_keys(text: str) -> set[str]:
    """The normalised answer of a QA text (its ``<answer>`` tag, else the text): one key."""
    answer = extract_qa_answer(text)
    key = qa_normal(answer) if answer else ""
    return {key} if key else set()


def _program_key(program: str) -> set[str]:
    """The key of the program the code tests run."""
    key = normalized_program(program or "")
    return {key} if key else set()


@dataclass(frozen=True)
class Rule:
    """How one domain keys answers: ``scored`` keys what its scorer reads from a submitted answer (math: the
    extracted final answer; code: the program; plan: the answer text; qa: the answer);
    ``offered`` the keys an agent reply or tool output states; ``words``: a key must occur in a normalised
    text on word boundaries instead (free-text answers)."""

    scored: Keys
    offered: Keys
    words: bool = False


#: domain -> its provenance rule (a domain without an entry has none)
RULES: dict[str, Rule] = {
    "math": Rule(_math_key, math_keys),
    "code": Rule(_program_key, code_keys),
    "plan": Rule(plan_answer_keys, plan_keys),
    "qa": Rule(qa_keys, qa_keys, words=True),
}


# ---- evidence --------------------------------------------------------------------------------------------


def agent_texts(execution: Execution) -> list[str]:
    """Every agent reply of ``execution``: the whole response and its delivery block (what the script got)."""
    texts = []
    for turn in execution.turns:
        response = turn.response or ""
        delivery = turn.delivery if turn.delivery is not None else extract_delivery(response)
        texts += [response, delivery] if delivery else [response]
    return texts


def _agent_program(value: object, program_keys: set[str]) -> bool:
    """Whether a tool's program argument is an agent's program (read as the tool reads it: its last fenced
    block, else the text)."""
    if not isinstance(value, str):
        return False
    return normalized_program(extract_program(value) or value) in program_keys


def evidence(execution: Execution, task_text: str = "") -> list[str]:
    """The texts an answer may come from: agent replies, and the outputs of agent-driven tool calls
    (:data:`AGENT_DRIVEN_TOOLS`: an agent's program, run on an empty input, an agent's text or the task's)."""
    replies = agent_texts(execution)
    program_keys = set().union(*(code_keys(r) for r in replies)) if replies else set()
    texts = list(replies)
    for call in execution.tool_calls:
        spec = AGENT_DRIVEN_TOOLS.get(call.name)
        if spec is None or not call.ok:
            continue
        program_arg, input_arg = spec
        if not _agent_program(call.args.get(program_arg), program_keys):
            continue
        given = call.args.get(input_arg, "") if input_arg else ""
        given = given.strip() if isinstance(given, str) else None
        if given is None or (given and given not in task_text and not any(given in r for r in replies)):
            continue
        texts.append(call.result)
    return texts


def occurs(answer: str, texts: Iterable[str], rule: Rule) -> bool:
    """Whether a scored key of ``answer`` is offered by one of ``texts``.

    An answer with no key (nothing the domain's scorer can read) is not refused here: it scores 0 anyway."""
    wanted = rule.scored(answer)
    if not wanted:
        return True
    if rule.words:
        # each text as the answer is normalised, and with punctuation as spaces ("<answer>Seine</answer>")
        padded = [f" {qa_normal(form)} " for t in texts for form in (t, _PUNCT_RE.sub(" ", t))]
        return any(f" {key} " in text for key in wanted for text in padded)
    return any(wanted & rule.offered(text) for text in texts)


def answer_from_agents(domain: str, answer: str | None, execution: Execution, task_text: str = "") -> bool:
    """Whether ``answer``, what the ``domain``'s scorer read from the submission (:class:`Rule`), comes from
    the agents of ``execution``; ``task_text`` is the task's question (a tool input may come from it)."""
    rule = RULES.get(domain)
    if rule is None or not answer:
        return True
    return occurs(answer, evidence(execution, task_text), rule)


def actions_not_from_agents(execution: Execution, task_text: str = "") -> list[int]:
    """Indices of the :data:`ACTION_TOOLS` calls (``env_step``) whose action no agent wrote (empty: none)."""
    texts = evidence(execution, task_text)
    refused = []
    for call in execution.tool_calls:
        arg = ACTION_TOOLS.get(call.name)
        if arg is not None and call.ok and not occurs(str(call.args.get(arg, "")), texts, RULES["plan"]):
            refused.append(call.index)
    return refused
