"""Terminal rendering (rich) of runs, task replays, statistics, comparisons and re-runs.

Every text that comes from a record (model output, prompts, scripts) is rendered as plain ``Text`` or
``Syntax``, never parsed as rich markup.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from metaagent.records import Design, Execution, execution_graph, graph_lines

from .comparison import Comparison, TaskComparison, TaskSide
from .reexecute import RerunResult
from .run import Run, TreeRef
from .text import control_rows, fold, fold_note, num, one_line, pct, reference_text, reward_terms

SCRIPT_LINES = 80  # a folded script keeps this many lines
PROMPT_LINES = 4  # a folded system prompt keeps this many lines


def _plain(text: str | None, style: str = "") -> Text:
    return Text(text or "", style=style)


def _folded(text: str | None, full: bool, lines: int = 12, style: str = "") -> Text:
    kept, hidden = fold(text, full, lines=lines)
    out = Text(kept, style=style)
    if hidden:
        out.append("\n" + fold_note(hidden), style="dim italic")
    return out


# ---- load problems and listing -----------------------------------------------------------------------------


def print_problems(run: Run, console: Console) -> None:
    """Lines that could not be read (file, line, reason) and other non-fatal problems."""
    if run.bad_lines:
        table = Table(title=f"{len(run.bad_lines)} unreadable line(s), skipped", title_style="bold yellow")
        table.add_column("file")
        table.add_column("line", justify="right")
        table.add_column("reason")
        for b in run.bad_lines:
            table.add_row(_plain(b.path), str(b.line), _plain(b.error))
        console.print(table)
    for note in run.notes:
        console.print(Text(f"note: {note}", style="yellow"))


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _summary_row(refs: Sequence[TreeRef]) -> list[str]:
    designs = [d for r in refs for d in r.tree.designs]
    executions = [e for d in designs for e in d.executions]
    scored = [e.reward for e in executions if e.reward is not None and e.reward.total is not None]
    return [
        str(len(designs)),
        str(sum(d.valid for d in designs)),
        str(len(executions)),
        num(_mean([float(x.total) for x in scored])),  # type: ignore[arg-type]
        pct(_mean([float(x.correct or 0.0) for x in scored])),
    ]


def print_listing(run: Run, console: Console) -> None:
    """The run's steps and tasks (what ``--task`` and ``--step`` can select)."""
    console.print(
        Text.assemble(
            ("run ", "bold"),
            (run.name, "bold cyan"),
            f"  {len(run.refs)} trees from {len(run.files)} file(s); kinds: {', '.join(run.kinds()) or '—'}",
        )
    )
    by_step: dict[tuple[Any, str], list[TreeRef]] = {}
    for r in run.refs:
        by_step.setdefault((r.step, r.kind), []).append(r)
    steps = Table(title="steps")
    for col in ("step", "kind", "tasks", "designs", "valid", "executions", "mean reward", "correct"):
        steps.add_column(col, justify="right" if col not in ("kind",) else "left")
    for (step, kind), refs in sorted(
        by_step.items(), key=lambda kv: (kv[0][0] is not None, kv[0][0] or 0, kv[0][1])
    ):
        steps.add_row(num(step), kind, str(len({r.task_id for r in refs})), *_summary_row(refs))
    console.print(steps)

    by_task: dict[str, list[TreeRef]] = {}
    for r in run.refs:
        by_task.setdefault(r.task_id, []).append(r)
    tasks = Table(title=f"{len(by_task)} tasks (replay one with --task ID [--step S])")
    for col in (
        "task",
        "benchmark",
        "domain",
        "steps",
        "designs",
        "valid",
        "executions",
        "mean reward",
        "correct",
    ):
        tasks.add_column(col, justify="left" if col in ("task", "benchmark", "domain", "steps") else "right")
    for task_id, refs in by_task.items():
        step_list = sorted({r.step for r in refs}, key=lambda s: -1 if s is None else s)
        shown = ", ".join(num(s) for s in step_list[:6]) + (" …" if len(step_list) > 6 else "")
        tasks.add_row(
            _plain(task_id),
            _plain(refs[0].benchmark),
            _plain(str(refs[0].tree.task.get("domain", "?"))),
            shown,
            *_summary_row(refs),
        )
    console.print(tasks)


# ---- one task -----------------------------------------------------------------------------------------------


def _structure_line(design: Design) -> Text:
    s = design.structure
    if not s:
        return Text("structure: — (invalid design)", style="dim")
    return Text.assemble(
        ("structure ", "bold"),
        f"{s.get('structure')} / pattern {s.get('pattern')} / family {s.get('family')}",
        f"  agents {s.get('num_agents')}, call sites {s.get('num_call_sites')}",
        f", tags {', '.join(s.get('tags', [])) or '—'}",
        f", tools {', '.join(s.get('tools', [])) or '—'}",
        "\nroles: ",
        (", ".join(s.get("roles", [])) or "—", "cyan"),
    )


def _diagnostics(design: Design) -> Text | None:
    items = [("error", d) for d in design.check.errors] + [("warning", d) for d in design.check.warnings]
    if not items:
        return None
    out = Text()
    for kind, d in items:
        out.append(f"{kind} ", style="red" if kind == "error" else "yellow")
        out.append(str(d) + "\n")
    return out


def _reward_text(execution: Execution) -> Text:
    r = execution.reward
    if r is None:
        return Text("reward: not scored", style="yellow")
    if r.total is None:
        return Text(f"reward: could not be computed ({r.error})", style="red")
    comps = ", ".join(f"{k} {num(v)}" for k, v in r.components.items())
    return Text.assemble(
        ("reward ", "bold"),
        (num(r.total), "bold green" if (r.correct or 0) > 0 else "bold"),
        f" = {reward_terms(r)}",
        f"  ({comps})" if comps else "",
        f"  advantage {num(execution.advantage)}" if execution.advantage is not None else "",
    )


def _turn_panel(turn: Any, full: bool) -> Panel:
    prompt = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in turn.messages if m.get("role") != "system")
    body = Group(
        Text("system prompt", style="bold dim"),
        _folded(turn.system_prompt, full, PROMPT_LINES, style="dim"),
        Text("prompt", style="bold dim"),
        _folded(prompt, full),
        Text("response", style="bold dim"),
        _folded(turn.response, full),
        Text.assemble(
            ("delivery: ", "bold"),
            (
                one_line(turn.delivery, 200) if turn.delivery is not None else "— (no delivery block)",
                "green" if turn.delivery is not None else "yellow",
            ),
        ),
    )
    title = f"turn {turn.index} · {turn.role} #{turn.role_turn} · {len(turn.response_ids)} tokens · {turn.finish_reason}"
    title += f" · reads turns {turn.parents}" if turn.parents else ""
    title += " · synthetic (not sampled; never trained)" if turn.synthetic else ""
    credit = _turn_credit(turn)
    if credit is not None:
        body = Group(body, credit)
    return Panel(body, title=Text(title), title_align="left", border_style="dim" if turn.synthetic else "blue")


def _turn_credit(turn: Any) -> Text | None:
    """Per-turn reward, labels and advantage (records v2), when any is set."""
    parts: list[tuple[str, str] | str] = []
    r = turn.reward
    if r is not None:
        if r.total is None:
            parts.append((f"turn reward ({r.source}): could not be computed ({r.error})  ", "red"))
        else:
            comps = ", ".join(f"{k} {num(v)}" for k, v in r.components.items())
            parts.append((f"turn reward ({r.source}) {num(r.total)}" + (f" ({comps})" if comps else "") + "  ", "bold"))
    if turn.labels:
        parts.append("labels " + ", ".join(f"{k}={num(v)}" for k, v in turn.labels.items()) + "  ")
    if turn.advantage is not None:
        parts.append((f"turn advantage {num(turn.advantage)}", "bold"))
    return Text.assemble(*parts) if parts else None


def _group_panel(group: Any, full: bool) -> Panel:
    """A call's K candidates (tree sampling), the selected one marked."""
    rows = []
    for c, (cand, reward) in enumerate(zip(group.candidates, group.rewards)):
        adv = group.advantages[c] if c < len(group.advantages) else None
        mark = "▶ " if c == group.selected else "  "
        rows.append(
            Text.assemble(
                (mark, "bold green"),
                f"candidate {c}: reward {num(reward)}",
                f", advantage {num(adv)}" if adv is not None else "",
                f" · {one_line(cand.response, 10**6 if full else 120)}",
            )
        )
    title = f"candidates of {group.role} turn {group.role_turn} (call {group.call_index}) · selected {group.selected}"
    return Panel(Group(*rows), title=Text(title), title_align="left", border_style="cyan")


def _counterfactual_line(cf: Any) -> Text:
    r = cf.reward
    reward = "not scored" if r is None else (num(r.total) if r.total is not None else f"error ({r.error})")
    return Text(
        f"counterfactual: keep {cf.members or '—'}, others -> {cf.baseline}: status {cf.status}, "
        f"{cf.n_calls} calls, reward {reward}",
        style="cyan",
    )


def _tool_panel(call: Any, full: bool) -> Panel:
    args = ", ".join(f"{k}={one_line(v, 40)}" for k, v in call.args.items())
    return Panel(
        _folded(call.result, full, 6),
        title=Text(f"tool {call.name}({args}) · {'ok' if call.ok else 'failed'}"),
        title_align="left",
        border_style="magenta",
    )


def print_execution(execution: Execution, task: dict[str, Any], console: Console, full: bool = False) -> None:
    console.print(
        Text.assemble(
            (f"execution {execution.index}", "bold"),
            f"  status {execution.status}, seed {execution.seed}, {len(execution.turns)} agent turns, "
            f"{len(execution.tool_calls)} tool calls, {execution.elapsed_s:.2f}s",
        )
    )
    calls = sorted(execution.tool_calls, key=lambda c: (c.after_turn, c.index))
    for k, turn in enumerate(execution.turns):
        for call in [c for c in calls if c.after_turn == k]:
            console.print(_tool_panel(call, full))
        console.print(_turn_panel(turn, full))
    for call in [c for c in calls if c.after_turn >= len(execution.turns)]:
        console.print(_tool_panel(call, full))
    if execution.turns:
        console.print(Text("workflow graph: " + "; ".join(graph_lines(execution_graph(execution))), style="cyan"))
    for group in execution.groups:
        console.print(_group_panel(group, full))
    for cf in execution.counterfactuals:
        console.print(_counterfactual_line(cf))
    if execution.first_error is not None:
        fe = execution.first_error
        console.print(
            Text(f"first error: turn {fe.turn} ({fe.role}), found with {len(fe.queries)} judge queries", style="red")
        )
    for pair in execution.preferences:
        console.print(
            Text(
                f"preference pair ({pair.source}, weight {num(pair.weight)}): turn {pair.turn} rejected, "
                f"{len(pair.chosen_ids)} chosen tokens",
                style="cyan",
            )
        )
    if execution.error is not None:
        line = f" (line {execution.error.line})" if execution.error.line else ""
        console.print(
            Text(f"script error {execution.error.type}{line}: {execution.error.message}", style="red")
        )
    answer, hidden = fold(execution.answer, full, lines=6)
    console.print(
        Text.assemble(
            ("answer    ", "bold"),
            answer if execution.answer is not None else "— (nothing submitted)",
            ("  " + fold_note(hidden)) if hidden else "",
        )
    )
    console.print(Text.assemble(("reference ", "bold"), reference_text(task)))
    console.print(_reward_text(execution))
    if execution.reward is not None and execution.reward.details:
        console.print(Text(f"details: {one_line(execution.reward.details, 300)}", style="dim"))


def print_design(
    design: Design,
    task: dict[str, Any],
    console: Console,
    *,
    execution: int | None = None,
    full: bool = False,
) -> None:
    console.print(
        Rule(
            Text(
                f"design {design.index} · {design.source} · reward {num(design.reward)}"
                f" · advantage {num(design.advantage)}"
            )
        )
    )
    if design.sample is not None:
        s = design.sample
        console.print(
            Text(
                f"designer {s.model}: {len(s.response_ids)} tokens, finish {s.finish_reason}, "
                f"templates shown: {', '.join(s.templates) or '—'}",
                style="dim",
            )
        )
    if design.script is not None:
        kept, hidden = fold(design.script, full, lines=SCRIPT_LINES, chars=20_000)
        console.print(Syntax(kept, "python", line_numbers=True, word_wrap=True))
        if hidden:
            console.print(Text(fold_note(hidden), style="dim italic"))
    elif design.sample is not None:
        console.print(Text("designer reply (no script could be extracted):", style="bold"))
        console.print(_folded(design.sample.text, full))
    console.print(_structure_line(design))
    diags = _diagnostics(design)
    if diags is not None:
        console.print(diags)
    chosen = [e for e in design.executions if execution is None or e.index == execution]
    if execution is not None and not chosen:
        console.print(
            Text(
                f"design {design.index} has no execution {execution}; it has "
                f"{[e.index for e in design.executions]}",
                style="yellow",
            )
        )
    for e in chosen:
        print_execution(e, task, console, full)


def print_control(tree: Any, console: Console, *, execution: int | None = None, full: bool = False) -> None:
    """The tree's budget-matched single-agent control (``RolloutTree.control``): each design's budget k, the
    control's reward at k and the design's reward minus it (metaagent.credit.control), then the control's
    executions (synthetic: never trained) with their selection marks."""
    control = tree.control
    console.print(Rule(Text(f"control · {control.source} · {len(control.executions)} executions · select {control.select}")))
    table = Table(title="budget-matched control per design")
    for col in ("design", "calls k", "control reward C(k)", "design reward", "design - control"):
        table.add_column(col)
    for row in control_rows(tree):
        table.add_row(*(num(x) for x in row))
    console.print(table)
    for e, mark in zip(control.executions, control.marks):
        if execution is None or e.index == execution:
            console.print(Text(f"selection mark ({control.select}): {mark!r}", style="cyan"))
            print_execution(e, tree.task, console, full)


def print_task(
    refs: Sequence[TreeRef],
    console: Console,
    *,
    design: int | None = None,
    execution: int | None = None,
    full: bool = False,
    control: bool = False,
) -> None:
    """Replay of each tree: task, designs (script, structure, diagnostics), executions turn by turn, and the
    budget-matched control when the tree has one (``control``: the control alone)."""
    for ref in refs:
        tree = ref.tree
        task = tree.task
        head = Text.assemble(
            ("task ", "bold"),
            (ref.task_id, "bold cyan"),
            f"  {ref.benchmark} / {task.get('domain', '?')}  step {num(ref.step)}  kind {ref.kind}  seed {tree.seed}"
            + (f"  budget {tree.budget}" if tree.budget else "") + "\n",
            ("models ", "bold"),
            ", ".join(f"{k}={v}" for k, v in tree.models.items()),
            f"  run {tree.run_id}  schema v{tree.schema_version}  from {ref.where}",
        )
        console.print(
            Panel(
                Group(
                    head,
                    Text("question", style="bold"),
                    _folded(task.get("question"), full),
                    Text.assemble(("reference: ", "bold"), reference_text(task)),
                ),
                border_style="cyan",
            )
        )
        overview = Table(title="designs")
        for col in (
            "design",
            "source",
            "valid",
            "structure",
            "pattern",
            "roles",
            "executions",
            "reward",
            "advantage",
        ):
            overview.add_column(col)
        for d in tree.designs:
            s = d.structure or {}
            overview.add_row(
                str(d.index),
                _plain(d.source),
                "yes" if d.valid else Text("no", style="red"),
                str(s.get("structure", "—")),
                str(s.get("pattern", "—")),
                _plain(one_line(", ".join(s.get("roles", [])), 50)),
                str(len(d.executions)),
                num(d.reward),
                num(d.advantage),
            )
        console.print(overview)
        chosen = [d for d in tree.designs if design is None or d.index == design]
        if design is not None and not chosen:
            console.print(
                Text(f"no design {design}; designs: {[d.index for d in tree.designs]}", style="yellow")
            )
        if control:
            if tree.control is None:
                console.print(Text("this tree has no control (algo.designer_baseline was not control)", style="yellow"))
            else:
                print_control(tree, console, execution=execution, full=full)
            continue
        for d in chosen:
            print_design(d, task, console, execution=execution, full=full)
        if design is None and tree.control is not None:
            print_control(tree, console, execution=execution, full=full)


# ---- statistics ---------------------------------------------------------------------------------------------


def _share_table(
    title: str,
    shares: dict[str, dict[str, float]],
    counts: dict[str, int] | None = None,
    group: str = "benchmark",
) -> Table:
    labels = list(dict.fromkeys(l for row in shares.values() for l in row))
    table = Table(title=title)
    table.add_column(group)
    for l in labels:
        table.add_column(l, justify="right")
    if counts is not None:
        table.add_column("workflows", justify="right")
    for bench, row in shares.items():
        cells = [pct(row.get(l)) if l in row else "—" for l in labels]
        extra = [str(counts.get(bench, sum(counts.values())))] if counts is not None else []
        table.add_row(_plain(bench), *cells, *extra)
    return table


def print_stats(st: dict[str, Any], console: Console) -> None:
    console.print(
        Text.assemble(
            ("statistics of ", "bold"),
            (str(st["run"]), "bold cyan"),
            f"  {st['trees']} trees, {st['tasks']} tasks, {st['designs']} designs "
            f"({', '.join(f'{k} {v}' for k, v in st['designs_by_source'].items()) or '—'}), "
            f"{st['workflows']} workflows (valid designs, from: {st['workflows_from']})",
        )
    )
    console.print(
        Text.assemble(
            ("valid-script rate ", "bold"),
            pct(st["valid_script_rate"]),
            "  by benchmark: "
            + (", ".join(f"{b} {pct(v)}" for b, v in st["valid_script_rate_by_benchmark"].items()) or "—"),
            "  invalid because: " + (", ".join(f"{c} ×{n}" for c, n in st["invalid_reasons"].items()) or "—"),
        )
    )
    counts = st["workflows_by_benchmark"]
    console.print(
        _share_table(
            "structure share per benchmark (Tables 6 / 10: family)", st["structure_share"]["family"], counts
        )
    )
    console.print(
        _share_table("structure share per benchmark (structure)", st["structure_share"]["structure"])
    )
    console.print(_share_table("pattern share per benchmark", st["structure_share"]["pattern"]))
    console.print(
        _share_table(
            "structure share per domain (family)", st["structure_share_by_domain"]["family"], group="domain"
        )
    )

    roles = Table(
        title="top role names (Table 9)",
        caption=f"{st['roles']['distinct']} distinct names over {st['roles']['agents']} agents",
    )
    roles.add_column("role")
    roles.add_column("agents", justify="right")
    for name, count in st["roles"]["top"]:
        roles.add_row(_plain(name), str(count))
    console.print(roles)
    sp = st["system_prompts"]
    console.print(
        Text.assemble(
            ("byte-unique system prompts ", "bold"),
            pct(sp["unique_share"]),
            f" of {sp['known']} agents with a literal prompt ({sp['unique']} unique; {sp['unknown']} not literal)",
        )
    )
    ex = st["executions"]
    wf = st["workflow"]
    console.print(
        Text.assemble(
            ("executions ", "bold"),
            f"{ex['total']}: " + ", ".join(f"{k} {v}" for k, v in ex["by_status"].items()),
            "\n",
            ("per workflow ", "bold"),
            f"mean agents {num(wf['mean_agents'], 2)}, call sites {num(wf['mean_call_sites'], 2)}; per execution "
            f"mean agent calls {num(wf['mean_agent_calls'], 2)}, tool calls {num(wf['mean_tool_calls'], 2)}",
        )
    )
    rewards = Table(title="reward per benchmark")
    for col in ("benchmark", "executions", "scored", "reward errors", "mean reward", "correct", "submitted"):
        rewards.add_column(col, justify="left" if col == "benchmark" else "right")
    for bench, r in st["reward"].items():
        rewards.add_row(
            _plain(bench),
            str(r["executions"]),
            str(r["scored"]),
            str(r["reward_errors"]),
            num(r["mean_reward"]),
            pct(r["correct_rate"]),
            pct(r["submitted_rate"]),
        )
    console.print(rewards)


# ---- comparison ---------------------------------------------------------------------------------------------


def _side_cells(side: TaskSide | None) -> list[Any]:
    if side is None:
        return ["—"] * 3
    structure = side.structure or "— (no valid design)"
    if len(side.structures) > 1:
        structure += f" (+{len(side.structures) - 1})"
    return [
        _plain(structure),
        num(side.mean_reward),
        "yes" if side.solved else ("—" if side.solved is None else "no"),
    ]


def print_comparison(cmp: Comparison, console: Console) -> None:
    """Per-task outcome table and the split of tasks solved only by B (§4.4); answers and roles are in the
    per-task view (``--task``)."""
    table = Table(title=f"A = {cmp.name_a}   vs   B = {cmp.name_b}   (structure level: {cmp.level})")
    table.add_column("task", no_wrap=True)
    table.add_column("benchmark")
    for side in ("A", "B"):
        for col in ("structure", "reward", "solved"):
            table.add_column(f"{side} {col}", justify="right" if col == "reward" else "left")
    table.add_column("outcome")
    for t in cmp.tasks:
        style = (
            "green" if t.outcome.startswith("only B") else ("red" if t.outcome.startswith("only A") else "")
        )
        table.add_row(
            _plain(t.task_id),
            _plain(t.benchmark),
            *_side_cells(t.a),
            *_side_cells(t.b),
            Text(t.outcome, style=style),
        )
    console.print(table)
    s = cmp.summary()
    console.print(
        Text.assemble(
            ("outcomes ", "bold"),
            ", ".join(f"{k} {v}" for k, v in s["outcomes"].items() if v),
            f"\nsolved: A {s['solved_a']}, B {s['solved_b']} of {s['tasks']} (solve rate >= {cmp.threshold})",
            "\n",
            ("solved only by B ", "bold"),
            f"{s['only_b']}: ",
            f"same structure (executor-side gain) {pct(s['only_b_same_structure_share'])}, "
            f"structure changed (designer flip) {pct(s['only_b_structure_changed_share'])}",
        )
    )


def print_task_comparison(tc: TaskComparison, cmp: Comparison, console: Console) -> None:
    """One task under both runs, side by side: structure, roles, answers, reward."""
    table = Table(title=f"task {tc.task_id} ({tc.benchmark} / {tc.domain}): {tc.outcome}")
    table.add_column("")
    table.add_column(f"A = {cmp.name_a}", overflow="fold")
    table.add_column(f"B = {cmp.name_b}", overflow="fold")

    def cell(side: TaskSide | None, fn: Any) -> Any:
        return "— (task missing)" if side is None else fn(side)

    rows = [
        ("step", lambda s: num(s.step)),
        ("designs (valid)", lambda s: f"{s.designs} ({s.valid})"),
        ("structure", lambda s: _plain(f"{s.structure or '—'}  {dict(Counter(s.structures))}")),
        ("roles", lambda s: _plain(", ".join(s.roles) or "—")),
        ("answers", lambda s: _plain("\n".join(one_line(a, 80) for a in s.answers) or "—")),
        ("mean reward", lambda s: num(s.mean_reward)),
        ("solve rate", lambda s: pct(s.solve_rate)),
        ("records", lambda s: _plain("\n".join(s.where))),
    ]
    for name, fn in rows:
        table.add_row(name, cell(tc.a, fn), cell(tc.b, fn))
    console.print(table)


# ---- re-run -------------------------------------------------------------------------------------------------


def print_rerun(res: RerunResult, console: Console, full: bool = False) -> None:
    table = Table(
        title=f"re-run of task {res.task_id} design {res.design} execution {res.execution} "
        f"with {res.model} (seed {res.seed})"
    )
    table.add_column("")
    table.add_column("recorded", overflow="fold")
    table.add_column("re-run", overflow="fold")

    def rw(e: Execution) -> str:
        r = e.reward
        if r is None:
            return "—"
        return (
            f"{num(r.total)} (correct {num(r.correct)}, format {num(r.format)})"
            if r.total is not None
            else f"error: {r.error}"
        )

    table.add_row("status", res.recorded.status, res.rerun.status)
    table.add_row(
        "model", _plain(", ".join(sorted({t.model for t in res.recorded.turns})) or "—"), _plain(res.model)
    )
    table.add_row("agent turns", str(len(res.recorded.turns)), str(len(res.rerun.turns)))
    table.add_row(
        "answer",
        _plain(fold(res.recorded.answer, full, 6)[0] or "—"),
        _plain(fold(res.rerun.answer, full, 6)[0] or "—"),
    )
    table.add_row("reward", rw(res.recorded), rw(res.rerun))
    console.print(table)
    verdict = "identical" if res.identical_turns else f"differ: {res.first_difference}"
    console.print(
        Text.assemble(
            ("turns ", "bold"),
            (verdict, "green" if res.identical_turns else "yellow"),
            ("\nsame answer ", "bold"),
            num(res.same_answer),
            ("  same reward ", "bold"),
            num(res.same_reward),
            f"\nsampling {res.sampling}\nlimits {res.limits}",
        )
    )
    for note in res.notes:
        console.print(Text(f"note: {note}", style="yellow"))
