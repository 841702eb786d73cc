"""MAPPA's coach (seed 000, §2.2, App. B.4): after an execution a judge reads every agent action and scores it.

For each executed turn the coach sees (1) the agent's role and responsibilities (its role name and system
prompt), (2) what it received (its chat messages), (3) what it answered, (4) the results of the tool calls its
answer caused, and (5) the ground truth, **only for the final action** (the turn whose deliverable the script
submitted, else the last turn); every other action is shown ``N/A``. It answers ``PROCESS_SCORE: s`` with
``s`` in [0, 10] (clamped, as the authors' parser does); the turn's reward is
``TurnReward(total = s / 10, source = "judge", components = {"score": s, ...})``.

Backends (``coach.backend``): ``openai`` (any OpenAI-compatible endpoint: the paper's Gemini 2.5 Flash through
Google's OpenAI-compatible API, or a local ``vllm serve``), ``hf`` (a local transformers model) and ``rule``
(a deterministic coach that reads the same prompt, for tests and CPU runs: :data:`RULES`).

Failures: an unreadable reply is asked again once with a format reminder; then the turn's reward is
``total=None`` with the error (counted in ``judge/errors``; the turn is not trained). The authors' code
silently scores 5.0 instead; that is ``coach.on_failure: fallback`` (``fallback_score``), counted in
``judge/fallbacks``. A coach that raises unexpectedly marks every turn of the execution unscored.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metaagent.policy.base import Policy, SamplingParams
from metaagent.policy.factory import build_policy
from metaagent.records import Execution, RolloutTree, ToolCall, TurnReward
from metaagent.registry import Registry

from ..data.tasks import Task
from .judge import Judge, JudgeError, JudgeTemplate

BACKENDS = ("openai", "hf", "rule")
ON_FAILURE = ("error", "fallback")
NOT_GIVEN = "N/A"

# the prompt's section headers (App. B.4), shared by the template and the rule coach that reads it
H_PROBLEM = "**Problem that the overall system is solving:**"
H_ROLE = "**Current agent being evaluated:**"
H_INPUT = "**What the agent received as input:**"
H_OUTPUT = "**What the agent outputted:**"
H_TOOLS = "**Environment feedback for the agent's tool call (if applicable):**"
H_TRUTH = "**Ground truth answer (if applicable):**"
H_END = "Evaluate the agent's decision quality based on:"

#: App. B.4, the MathChat coach prompt (one user message, no system prompt)
MAPPA_MATH = JudgeTemplate(
    name="mappa_math",
    system="",
    user=(
        "You are evaluating a specific agent in a multiagent system that collaboratively solves a math competition "
        "problem. The system has 3 specialized agents working sequentially:\n"
        "1. **Problem Solver**: Reasons through the problem step-by-step\n"
        "2. **Code Executor**: Writes and executes Python code to verify/compute solutions\n"
        "3. **Verifier**: Synthesizes the code executor's output and provides the final answer.\n"
        "The success of the overall system is determined by the Verifier's final answer.\n\n"
        "**Workflow Constraints:**\n"
        "- Each agent has a limited output length. Outputs beyond this are truncated.\n"
        "- All agents can see the original problem statement.\n\n"
        "When evaluating, consider whether the agent:\n"
        "- (IMPORTANT) Performed well given their role and the information provided\n"
        "- Stayed within output length limit\n\n"
        f"{H_PROBLEM}\n{{problem}}\n\n"
        f"{H_ROLE}\n{{agent_role}}\n\n"
        f"{H_INPUT}\n{{agent_input}}\n\n"
        f"{H_OUTPUT}\n{{agent_output}}\n\n"
        f"{H_TOOLS}\n{{tool_observation}}\n\n"
        f"{H_TRUTH}\n{{ground_truth_answer}}\n\n"
        f"{H_END}\n"
        "- Given the agent's role and the information it had as input, how helpful is its output towards the "
        "overall system's success?\n"
        "- For Code Executor: Did it output code in the right format? Is the code syntactically correct and does "
        "it solve the problem?\n"
        "- For Verifier: Did it correctly synthesize the information and output the final answer?\n\n"
        "Strictly assigns a score from 0 (terrible) to 10 (perfect).\n\n"
        'Additionally, if ground truth is provided (not "N/A") and the agent is "Verifier", you MUST also verify '
        "answer correctness:\nProvide binary correctness as:\n"
        "- ANSWER_CORRECT: 1 (if the Verifier's final answer matches the ground truth)\n"
        "- ANSWER_CORRECT: 0 (if the Verifier's final answer is incorrect)\n\n"
        "Structure your output in the following format exactly:\n"
        "PROCESS_SCORE: [0 to 10]\n"
        "ANSWER_CORRECT: [0 or 1, but only if ground truth provided and agent is Verifier]"
    ),
    low=0.0,
    high=10.0,
)
TEMPLATES = {MAPPA_MATH.name: MAPPA_MATH}
REMINDER = (
    "Your reply did not follow the required format. Reply again, ending with the line\n"
    "PROCESS_SCORE: <a number from 0 to 10>"
)

_PROCESS_RE = re.compile(r"PROCESS_SCORE\s*:\s*\**\s*\[?\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_CORRECT_RE = re.compile(r"ANSWER_CORRECT\s*:\s*\**\s*\[?\s*([01])\b", re.IGNORECASE)


def parse_process_score(text: str, low: float, high: float) -> float:
    """The last ``PROCESS_SCORE: s`` of the reply, clamped to ``[low, high]`` (the authors' parser clamps);
    ``ValueError`` when there is none."""
    found = _PROCESS_RE.findall(text or "")
    if not found:
        raise ValueError(f"no 'PROCESS_SCORE: <number>' line in the coach's reply {(text or '')[:80]!r}")
    return min(high, max(low, float(found[-1])))


def parse_answer_correct(text: str) -> float | None:
    found = _CORRECT_RE.findall(text or "")
    return float(found[-1]) if found else None


# ---- what the coach is shown ----------------------------------------------------------------------------------


def tool_call_succeeded(call: ToolCall) -> bool:
    """A tool call that ran and whose program did not fail (``run_program`` reports failures as ``ERROR``)."""
    return call.ok and not call.result.lstrip().startswith(("ERROR", "FAIL", "error:"))


def caused_tool_calls(execution: Execution, k: int) -> list[ToolCall]:
    """Tool calls made with turn ``k``'s output: after the turn and before the same agent's next call, with an
    argument that is (part of) the turn's response."""
    turn = execution.turns[k]
    later = [t.index for t in execution.turns[k + 1 :] if t.role == turn.role]
    until = later[0] if later else len(execution.turns)
    out = []
    for call in execution.tool_calls:
        if not k + 1 <= call.after_turn <= until:
            continue
        args = [a.strip() for a in call.args.values() if isinstance(a, str) and a.strip()]
        if any(a in turn.response or (turn.delivery and a == turn.delivery.strip()) for a in args):
            out.append(call)
    return out


def final_turn(execution: Execution) -> int | None:
    """The final action: the last turn whose deliverable is the submitted answer, else the last turn."""
    if not execution.turns:
        return None
    answer = (execution.answer or "").strip()
    if execution.submitted and answer:
        for turn in reversed(execution.turns):
            text = turn.delivery if turn.delivery is not None else turn.response.strip()
            if text.strip() == answer:
                return turn.index
    return execution.turns[-1].index


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n...[{len(text) - limit} characters cut]...\n{text[-half:]}"


def coach_items(task: Task | Mapping[str, Any], execution: Execution, *, max_chars: int = 16000) -> list[tuple[int, dict[str, str]]]:
    """``(turn position, template fields)`` for every non-synthetic turn; ground truth only for the final one."""
    task = Task.coerce(task)
    final = final_turn(execution)
    items = []
    for k, turn in enumerate(execution.turns):
        if turn.synthetic:
            continue
        shown = [m for m in turn.messages if m.get("role") != "system"]
        agent_input = shown[0]["content"] if len(shown) == 1 else "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in shown)
        calls = caused_tool_calls(execution, k)
        tools = "\n\n".join(f"{c.name} -> {c.result}" for c in calls) if calls else NOT_GIVEN
        truth = task.answer if (turn.index == final and task.answer) else NOT_GIVEN
        items.append(
            (k, {
                "problem": _clip(task.question, max_chars),
                "agent_role": f"{turn.role}\nIts instructions: {turn.system_prompt}",
                "agent_input": _clip(agent_input, max_chars),
                "agent_output": _clip(turn.response, max_chars),
                "tool_observation": _clip(tools, max_chars),
                "ground_truth_answer": str(truth),
            })
        )  # fmt: skip
    return items


# ---- rule coaches (deterministic; they read the rendered prompt, exactly what an LLM coach sees) ---------------


def _section(prompt: str, header: str, nxt: str) -> str:
    start = prompt.find(header)
    if start < 0:
        return ""
    start += len(header)
    end = prompt.find(nxt, start)
    return prompt[start : end if end >= 0 else None].strip()


_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def mappa_format_rule(prompt: str) -> str:
    """``PROCESS_SCORE``: 5 for a complete ``<delivery>`` block, +3 for a ``\\boxed{}`` answer, +2 when ground
    truth is shown and the last boxed answer equals it (with ``ANSWER_CORRECT``)."""
    output = _section(prompt, H_OUTPUT, H_TOOLS)
    truth = _section(prompt, H_TRUTH, H_END)
    boxed = _BOXED_RE.findall(output)
    score = 5 * ("<delivery>" in output and "</delivery>" in output) + 3 * bool(boxed)
    lines = []
    if truth and truth != NOT_GIVEN:
        correct = bool(boxed) and boxed[-1].strip() == truth.strip()
        score += 2 * correct
        lines.append(f"ANSWER_CORRECT: {int(correct)}")
    return "\n".join([f"PROCESS_SCORE: {score}", *lines])


# ---- configuration and the coach itself ------------------------------------------------------------------------


class CoachError(JudgeError):
    """The coach is misconfigured; the message names the key."""


#: deterministic coaches by name (``coach.backend: rule``, ``coach.model: <name>``): ``rule(prompt) -> reply``;
#: plugins: entry points of the group ``metaagent.coach_rules``
RULES: Registry[Callable[[str], str]] = Registry("coach rule", CoachError, group="metaagent.coach_rules")
RULES.register("mappa_format")(mappa_format_rule)


@dataclass
class CoachConfig:
    """MAPPA's coach (App. B.4, G.8): a judge that scores every agent action 0-10 after each execution.

    ``backend: null`` (default) runs no coach. The paper's coach is ``gemini-2.5-flash`` at temperature 0:
    ``backend: openai``, ``base_url: https://generativelanguage.googleapis.com/v1beta/openai/``,
    ``api_key_env: GEMINI_API_KEY``.
    """

    backend: str | None = None  # null (no coach) | openai | hf | rule
    model: str = ""  # openai: the served model name; hf: a model path or alias; rule: a name in RULES
    base_url: str | None = None  # openai: the API root
    api_key_env: str = "OPENAI_API_KEY"  # openai: environment variable holding the API key
    template: str = "mappa_math"  # the coach's prompt and score format (a name in TEMPLATES)
    temperature: float = 0.0  # sampling temperature of the coach (paper: 0)
    max_tokens: int = 1024  # longest coach reply, in tokens
    max_retries: int = 5  # API retries with exponential backoff (openai backend)
    format_retries: int = 1  # re-asks with a format reminder after an unreadable reply
    on_failure: str = "error"  # error: the turn is not trained (counted) | fallback: score fallback_score
    fallback_score: float = 5.0  # the authors' code's silent default, used only with on_failure=fallback
    max_concurrency: int = 8  # coach requests in flight
    max_field_chars: int = 16000  # each prompt field is cut in the middle beyond this
    device: str = "cpu"  # hf backend

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in BACKENDS:
            raise CoachError(f"coach.backend must be null or one of {BACKENDS}, got {self.backend!r}")
        if self.on_failure not in ON_FAILURE:
            raise CoachError(f"coach.on_failure must be one of {ON_FAILURE}, got {self.on_failure!r}")
        if self.template not in TEMPLATES:
            raise CoachError(f"coach.template must be one of {sorted(TEMPLATES)}, got {self.template!r}")
        if self.backend == "openai" and not (self.base_url and self.model):
            raise CoachError("coach.backend=openai needs coach.base_url and coach.model (the served model name)")
        if self.backend == "rule" and self.model not in RULES:
            raise CoachError(f"coach.backend=rule needs coach.model, one of {sorted(RULES)}; got {self.model!r}")
        if self.backend == "hf" and not self.model:
            raise CoachError("coach.backend=hf needs coach.model (a model path or alias such as 'embedded')")
        if self.format_retries < 0 or self.max_retries < 0 or self.max_concurrency < 1 or self.max_tokens < 1:
            raise CoachError("coach.format_retries and max_retries must be >= 0, max_concurrency and max_tokens >= 1")
        t = TEMPLATES[self.template]
        if not t.low <= self.fallback_score <= t.high:
            raise CoachError(f"coach.fallback_score must be in [{t.low}, {t.high}], got {self.fallback_score}")


def make_backend(config: CoachConfig) -> Policy:
    """The coach's policy for ``config.backend``, built by the one builder (:func:`metaagent.policy.build_policy`)."""
    if config.backend == "rule":
        rule = RULES.get(config.model)
        # the rule reads the rendered coach prompt (the first user message), as an LLM coach would
        return build_policy(
            "scripted", f"rule:{config.model}",
            replies=lambda req: rule(next(m["content"] for m in req.messages if m["role"] == "user")),
        )  # fmt: skip
    if config.backend == "openai":
        return build_policy(
            "openai", config.model, base_url=config.base_url or "", api_key_env=config.api_key_env,
            max_concurrency=config.max_concurrency, max_retries=config.max_retries, vllm_extras=False, logprobs=False,
        )  # fmt: skip
    if config.backend == "hf":  # fp32, generation under inference mode (the coach is never trained)
        return build_policy(
            "hf", config.model, device=config.device, model_id=f"coach:{config.model}", batching=True,
            batch_size=config.max_concurrency,
        )  # fmt: skip
    raise CoachError(f"coach.backend {config.backend!r} has no backend to build (set coach.backend)")


class Coach:
    """Scores every turn of an execution in place (``AgentTurn.reward``); thread-safe, never raises for a
    failed judgment. :meth:`take_metrics` returns the ``judge/*`` counts since its last call."""

    def __init__(self, config: CoachConfig, backend: Policy | None = None) -> None:
        self.config = config
        self.backend = backend if backend is not None else make_backend(config)
        template = TEMPLATES[config.template]
        self.judge = Judge(
            template,
            self.backend,
            sampling=SamplingParams(max_tokens=config.max_tokens, temperature=config.temperature),
            parser=parse_process_score,
            format_retries=config.format_retries,
            reminder=REMINDER,
            fallback=config.fallback_score if config.on_failure == "fallback" else None,
        )
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._latency = 0.0
        self._executions = 0

    def score_execution(self, task: Task | Mapping[str, Any], execution: Execution) -> None:
        """Write each non-synthetic turn's coach reward into ``turn.reward``."""
        t0 = time.perf_counter()
        try:
            items = coach_items(task, execution, max_chars=self.config.max_field_chars)
            rewards = self.judge.score([item for _, item in items])
        except Exception as e:  # noqa: BLE001 - a coach bug marks the turns unscored, never a silent score
            self.judge._count("judge/errors", sum(not t.synthetic for t in execution.turns))
            for turn in execution.turns:
                if not turn.synthetic:
                    turn.reward = TurnReward(None, "judge", error=f"coach failed: {type(e).__name__}: {e}")
            rewards, items = [], []
        for (k, item), reward in zip(items, rewards):
            correct = parse_answer_correct(str(reward.details.get("reply", "")))
            if correct is not None and item["ground_truth_answer"] != NOT_GIVEN:
                reward.components["answer_correct"] = correct  # the coach's verdict on the final answer
            execution.turns[k].reward = reward
        with self._lock:
            self._latency += time.perf_counter() - t0
            self._executions += 1

    def take_metrics(self) -> dict[str, float]:
        """``judge/calls``, ``judge/errors``, ``judge/parse_errors``, ``judge/backend_errors``,
        ``judge/format_retries``, ``judge/fallbacks`` since the last call (0 when none), and
        ``judge/latency_s`` (mean coach time per execution)."""
        now = Counter(self.judge.metrics())
        with self._lock:
            delta = {k: now[k] - self._seen[k] for k in now}
            self._seen = now
            latency = self._latency / self._executions if self._executions else 0.0
            self._latency, self._executions = 0.0, 0
        keys = ("judge/calls", "judge/errors", "judge/parse_errors", "judge/backend_errors", "judge/format_retries", "judge/fallbacks")
        out = {k: float(delta.get(k, 0.0)) for k in keys}
        out["judge/latency_s"] = latency
        return out

    def close(self) -> None:
        self.backend.close()


def coach_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """The paper's Fig. 3 per agent role: ``judge/score_mean/<role>`` (coach score 0-10 over scored turns;
    fallbacks included), ``rollout/response_tokens/<role>`` (mean response length) and
    ``rollout/tool_success_rate/<role>`` (successful tool calls among those the role's turns caused; only roles
    that caused some), plus ``judge/score_mean``, ``judge/excluded_turns`` (turns whose score failed) and
    ``judge/score_share_le_1``: the share of scored turns with a score <= 1. The prompt asks for 0-10, but the
    paper's own example coach outputs use 0-1, which silently divides every reward by 10; a share near 1 on a
    team that is not failing says the coach answers on the wrong scale."""
    scores: dict[str, list[float]] = defaultdict(list)
    lengths: dict[str, list[int]] = defaultdict(list)
    tools: dict[str, list[bool]] = defaultdict(list)
    excluded = 0
    for tree in trees:
        for _, e in tree.executions():
            for k, turn in enumerate(e.turns):
                if turn.synthetic:
                    continue
                lengths[turn.role].append(len(turn.response_ids))
                tools[turn.role].extend(tool_call_succeeded(c) for c in caused_tool_calls(e, k))
                r = turn.reward
                if r is not None and r.source == "judge":
                    if r.total is None:
                        excluded += 1
                    elif "score" in r.components:
                        scores[turn.role].append(float(r.components["score"]))
    out: dict[str, float] = {"judge/excluded_turns": float(excluded)}
    every = [s for v in scores.values() for s in v]
    if every:
        out["judge/score_mean"] = sum(every) / len(every)
        out["judge/score_share_le_1"] = sum(s <= 1.0 for s in every) / len(every)
    for role, v in sorted(scores.items()):
        out[f"judge/score_mean/{role}"] = sum(v) / len(v)
    for role, v in sorted(lengths.items()):
        out[f"rollout/response_tokens/{role}"] = sum(v) / len(v)
    for role, v in sorted(tools.items()):
        if v:
            out[f"rollout/tool_success_rate/{role}"] = sum(v) / len(v)
    return out
