"""QA (UnityMAS-O): short answers scored by their best token F1 against the gold answers (``answer`` or
``metadata["answers"]``); scripts get ``retrieve(query)`` over ``metadata["corpus"]`` (default: the bundled one)."""

from __future__ import annotations

from collections.abc import Mapping

from metaagent.data.tasks import Task
from metaagent.domain import Domain, Verdict, register_domain
from metaagent.records import Execution
from metaagent.rewards.provenance import answer_from_agents
from metaagent.rewards.qa import answer_f1, extract_qa_answer
from metaagent.rewards.score import RewardConfig
from metaagent.workflow.tools import Retrieve


def score(task: Task, execution: Execution, cfg: RewardConfig) -> Verdict:
    pred = extract_qa_answer(execution.answer)
    golds = task.metadata.get("answers") or [task.answer]
    if pred is not None and not answer_from_agents("qa", pred, execution, task.question):
        refused = {"qa": {"pred": pred, "golds": list(golds), "f1": 0.0, "status": "not_from_agents"}}
        return Verdict(0.0, refused, ("answer_not_from_agents",))
    correct = answer_f1(pred, golds)
    return Verdict(correct, {"qa": {"pred": pred, "golds": list(golds), "f1": correct}})


def tools(task: Task) -> dict:
    corpus = task.metadata.get("corpus") if isinstance(task.metadata, Mapping) else None
    return {"retrieve": Retrieve(corpus)}


QA = register_domain(
    Domain(
        name="qa",
        reference="gold answer",
        needs="a gold 'answer' or metadata.answers (or split='adhoc')",
        has_reference=lambda task: bool(task.answer or task.metadata.get("answers")),
        score=score,
        solution_format=lambda answer, fences: float(bool(answer.strip())),
        tools=tools,
        tool_names=("retrieve",),
        row_fields=(("answer", "answer"), ("answers", "metadata.answers"), ("corpus", "metadata.corpus")),
        answer_hint="The final answer is a short phrase (a name, date or number); tools: retrieve(query).",
    )
)
