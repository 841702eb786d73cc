"""A self-contained HTML report of a run: one file that opens offline.

Everything is inline: CSS in one ``<style>`` block (system fonts only), plots as base64 PNG ``data:``
images, scripts highlighted by pygments with inline styles; no JavaScript, no external fonts, stylesheets
or images. Long texts sit in ``<details>`` blocks (collapsed, complete up to :data:`MAX_TEXT_CHARS`).

Sections: run overview, unreadable lines, plots (reward per role with stages shaded, structure shares
over steps, structure share per benchmark), statistics (as ``--stats``), the comparison with another run
(when given), and a replay of each task (designs, scripts, executions turn by turn).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metaagent.eval.html import escape as _e
from metaagent.eval.html import highlight_python as _highlight
from metaagent.eval.html import img as _img
from metaagent.eval.html import table as _table
from metaagent.eval.html import write_page
from metaagent.records import Design, Execution, execution_graph, graph_lines

from .comparison import Comparison, TaskSide, compare
from .plots import benchmark_plot, reward_plot, structure_plot
from .run import Run, TreeRef, load_run
from .summary import stats
from .text import control_rows, num, one_line, pct, reference_text, reward_terms

MAX_TASKS = 50
MAX_TEXT_CHARS = 20_000

def _text_block(label: str, text: str | None, open_: bool = False) -> str:
    if text is None:
        return f'<div><b>{_e(label)}</b>: <span class="dim">—</span></div>'
    cut = text[:MAX_TEXT_CHARS]
    more = f"\n… {len(text) - len(cut)} more characters not shown" if len(text) > len(cut) else ""
    first = one_line(text, 90)
    return (
        f'<details{" open" if open_ else ""}><summary><b>{_e(label)}</b> <span class="dim">{_e(first)}</span></summary>'
        f'<pre class="text">{_e(cut + more)}</pre></details>'
    )


# ---- sections ----------------------------------------------------------------------------------------------


def _overview(run: Run) -> str:
    models = sorted({f"{k}={v}" for r in run.refs for k, v in r.tree.models.items()})
    info = run.info or {}
    rows = [
        ("run", _e(run.name)),
        ("directory", _e(run.root) if run.root else '<span class="dim">(record files only)</span>'),
        ("record files", _e(len(run.files))),
        ("trees / tasks", f"{len(run.refs)} / {len(run.task_ids())}"),
        ("kinds", _e(", ".join(run.kinds()) or "—")),
        ("steps", _e(", ".join(num(s) for s in run.steps()) or "—")),
        ("models", _e(", ".join(models) or "—")),
        ("metrics", _e(run.metrics_source or "none") + f" ({len(run.metrics)} steps)"),
    ]
    rows += [
        (f"run.json {k}", _e(one_line(v, 120))) for k, v in info.items() if k not in ("run_id", "models")
    ]
    return '<h2 id="overview">Run</h2>' + _table(["", ""], rows)


def _problems(run: Run) -> str:
    if not run.bad_lines and not run.notes:
        return ""
    out = f'<h2 id="problems" class="warn">Unreadable lines ({len(run.bad_lines)}), skipped</h2>'
    out += _table(
        ["file", "line", "reason"], [(_e(b.path), _e(b.line), _e(b.error)) for b in run.bad_lines], [1]
    )
    out += "".join(f'<p class="warn">{_e(n)}</p>' for n in run.notes)
    return out


def _plots(run: Run, st: dict[str, Any]) -> str:
    src = "metrics.jsonl" if run.metrics_source == "metrics.jsonl" else "the records (no metrics.jsonl)"
    return (
        f'<h2 id="plots">Training curves</h2><p class="dim">from {src}</p>'
        + _img(reward_plot(run.metrics), "reward per role over training steps")
        + _img(structure_plot(run.metrics), "structure shares over training steps")
        + _img(benchmark_plot(st["structure_share"]["family"]), "structure family share per benchmark")
    )


def _share_rows(
    shares: dict[str, dict[str, float]], counts: dict[str, int] | None = None, group: str = "benchmark"
) -> tuple[list[str], list[list[str]]]:
    labels = list(dict.fromkeys(l for row in shares.values() for l in row))
    headers = [group, *labels] + (["workflows"] if counts is not None else [])
    rows = []
    for bench, row in shares.items():
        extra = [_e(counts.get(bench, sum(counts.values())))] if counts is not None else []
        rows.append([_e(bench), *[pct(row.get(l)) for l in labels], *extra])
    return headers, rows


def _stats(st: dict[str, Any]) -> str:
    out = ['<h2 id="stats">Statistics</h2>']
    out.append(
        f"<p>{st['designs']} designs ({_e(', '.join(f'{k} {v}' for k, v in st['designs_by_source'].items()) or '—')}), "
        f"{st['workflows']} workflows (valid designs; from: {_e(st['workflows_from'])}). "
        f"Valid-script rate: <b>{pct(st['valid_script_rate'])}</b>; invalid because: "
        f"{_e(', '.join(f'{c} ×{n}' for c, n in st['invalid_reasons'].items()) or '—')}.</p>"
    )
    for title, shares, counts, group in (
        (
            "Structure share per benchmark (family; paper Tables 6 and 10)",
            st["structure_share"]["family"],
            st["workflows_by_benchmark"],
            "benchmark",
        ),
        ("Structure share per benchmark", st["structure_share"]["structure"], None, "benchmark"),
        ("Pattern share per benchmark", st["structure_share"]["pattern"], None, "benchmark"),
        ("Structure share per domain (family)", st["structure_share_by_domain"]["family"], None, "domain"),
    ):
        headers, rows = _share_rows(shares, counts, group)
        out.append(f"<h3>{_e(title)}</h3>" + _table(headers, rows, range(1, len(headers))))
    r = st["roles"]
    out.append(f"<h3>Top role names (Table 9): {r['distinct']} distinct names over {r['agents']} agents</h3>")
    out.append(_table(["role", "agents"], [(_e(n), _e(c)) for n, c in r["top"]], [1]))
    sp = st["system_prompts"]
    out.append(
        f"<p>Byte-unique system prompts: <b>{pct(sp['unique_share'])}</b> of {sp['known']} agents with a literal "
        f"prompt ({sp['unique']} unique, {sp['unknown']} not literal).</p>"
    )
    ex, wf = st["executions"], st["workflow"]
    out.append(
        "<p>Executions: "
        + _e(f"{ex['total']}: " + ", ".join(f"{k} {v}" for k, v in ex["by_status"].items()))
        + f". Per workflow: mean agents {num(wf['mean_agents'], 2)}, call sites {num(wf['mean_call_sites'], 2)}; "
        f"per execution: mean agent calls {num(wf['mean_agent_calls'], 2)}, tool calls {num(wf['mean_tool_calls'], 2)}.</p>"
    )
    out.append("<h3>Reward per benchmark</h3>")
    out.append(
        _table(
            ["benchmark", "executions", "scored", "reward errors", "mean reward", "correct", "submitted"],
            [
                (
                    _e(b),
                    v["executions"],
                    v["scored"],
                    v["reward_errors"],
                    num(v["mean_reward"]),
                    pct(v["correct_rate"]),
                    pct(v["submitted_rate"]),
                )
                for b, v in st["reward"].items()
            ],
            range(1, 7),
        )
    )
    return "".join(out)


def _side(side: TaskSide | None) -> list[str]:
    if side is None:
        return ["—"] * 5
    answers = " | ".join(one_line(a, 40) for a in side.answers if a is not None) or "—"
    solved = "yes" if side.solved else ("—" if side.solved is None else "no")
    return [
        num(side.step),
        _e(side.structure or "— (no valid design)"),
        _e(answers),
        num(side.mean_reward),
        solved,
    ]


def _comparison(cmp: Comparison) -> str:
    s = cmp.summary()
    rows = []
    for t in cmp.tasks:
        css = "good" if t.outcome.startswith("only B") else ("bad" if t.outcome.startswith("only A") else "")
        rows.append(
            [
                f'<a href="#task-{_e(t.task_id)}">{_e(t.task_id)}</a>',
                _e(t.benchmark),
                *_side(t.a),
                *_side(t.b),
                f'<span class="{css}">{_e(t.outcome)}</span>',
            ]
        )
    headers = (
        ["task", "benchmark"]
        + [f"{x} {c}" for x in "AB" for c in ("step", "structure", "answers", "reward", "solved")]
        + ["outcome"]
    )
    return (
        f'<h2 id="compare">Comparison: A = {_e(cmp.name_a)} vs B = {_e(cmp.name_b)}</h2>'
        f"<p>Structure level: {_e(cmp.level)}; a task is solved when its solve rate is at least {cmp.threshold}. "
        f"Solved: A {s['solved_a']}, B {s['solved_b']} of {s['tasks']}. "
        f"Solved only by B: <b>{s['only_b']}</b> — same structure (executor-side gain) "
        f"{pct(s['only_b_same_structure_share'])}, structure changed (designer flip) "
        f"{pct(s['only_b_structure_changed_share'])}. Solved only by A: {s['only_a']}.</p>"
        + _table(["outcome", "tasks"], [(_e(k), v) for k, v in s["outcomes"].items() if v], [1])
        + _table(headers, rows, [2, 5, 7, 10])
    )


def _turn_credit(t: Any) -> str:
    """Per-turn reward, labels and advantage (records v2), when set."""
    bits = []
    if t.reward is not None:
        r = t.reward
        value = f'<span class="bad">not computable ({_e(r.error)})</span>' if r.total is None else f"<b>{num(r.total)}</b>"
        bits.append(f"turn reward ({_e(r.source)}) {value}")
    if t.labels:
        bits.append("labels " + _e(", ".join(f"{k}={num(v)}" for k, v in t.labels.items())))
    if t.advantage is not None:
        bits.append(f"turn advantage <b>{num(t.advantage)}</b>")
    if t.synthetic:
        bits.append('<span class="warn">synthetic (not sampled; never trained)</span>')
    return f"<div>{' · '.join(bits)}</div>" if bits else ""


def _group(g: Any) -> str:
    """A call's candidates (tree sampling), the selected one marked."""
    rows = []
    for c, (cand, reward) in enumerate(zip(g.candidates, g.rewards)):
        adv = g.advantages[c] if c < len(g.advantages) else None
        mark = "▶ selected" if c == g.selected else ""
        rows.append(
            f"<li>{mark} candidate {c}: reward {num(reward)}"
            + (f", advantage {num(adv)}" if adv is not None else "")
            + f"{_text_block('response', cand.response)}</li>"
        )
    return (
        f'<div class="turn"><b>candidates of {_e(g.role)} turn {g.role_turn} (call {g.call_index})</b><ul>'
        + "".join(rows)
        + "</ul></div>"
    )


def _execution(e: Execution, task: dict[str, Any], open_: bool = False) -> str:
    calls = sorted(e.tool_calls, key=lambda c: (c.after_turn, c.index))
    parts = []

    def tool(c: Any) -> str:
        args = ", ".join(f"{k}={one_line(v, 40)}" for k, v in c.args.items())
        return f'<div class="tool"><b>tool {_e(c.name)}</b>({_e(args)}) · {"ok" if c.ok else "failed"}{_text_block("result", c.result)}</div>'

    for k, t in enumerate(e.turns):
        parts += [tool(c) for c in calls if c.after_turn == k]
        prompt = "\n\n".join(
            f"[{m['role']}]\n{m['content']}" for m in t.messages if m.get("role") != "system"
        )
        delivery = (
            f'<span class="good">{_e(one_line(t.delivery, 200))}</span>'
            if t.delivery is not None
            else '<span class="warn">— (no delivery block)</span>'
        )
        parents = f" · reads turns {t.parents}" if t.parents else ""
        parts.append(
            f'<div class="turn"><b>turn {t.index} · {_e(t.role)}</b> <span class="dim">{len(t.response_ids)} tokens · '
            f"{_e(t.finish_reason)}{_e(parents)} · {_e(t.model)}</span>"
            + _text_block("system prompt", t.system_prompt)
            + _text_block("prompt", prompt)
            + _text_block("response", t.response, open_=True)
            + f"<div><b>delivery</b>: {delivery}</div>"
            + _turn_credit(t)
            + "</div>"
        )
    parts += [tool(c) for c in calls if c.after_turn >= len(e.turns)]
    if e.turns:
        items = "".join(f"<li><code>{_e(line)}</code></li>" for line in graph_lines(execution_graph(e)))
        parts.append(f'<div class="graph"><b>workflow graph</b> (nodes and their outgoing edges)<ul>{items}</ul></div>')
    parts += [_group(g) for g in e.groups]
    for cf in e.counterfactuals:
        cr = cf.reward
        value = "not scored" if cr is None else (num(cr.total) if cr.total is not None else f"error ({cr.error})")
        parts.append(
            f'<p class="dim">counterfactual: keep {_e(", ".join(cf.members) or "—")}, others → {_e(cf.baseline)}: '
            f"{_e(cf.status)}, {cf.n_calls} calls, reward {_e(value)}</p>"
        )
    if e.first_error is not None:
        fe = e.first_error
        parts.append(f'<p class="bad">first error: turn {fe.turn} ({_e(fe.role)}), {len(fe.queries)} judge queries</p>')
    for pair in e.preferences:
        parts.append(
            f'<p class="dim">preference pair ({_e(pair.source)}, weight {num(pair.weight)}): turn {pair.turn} rejected</p>'
        )
    if e.error is not None:
        parts.append(
            f'<p class="bad">script error {_e(e.error.type)} (line {_e(e.error.line)}): {_e(e.error.message)}</p>'
        )
    r = e.reward
    if r is None:
        reward = '<span class="warn">not scored</span>'
    elif r.total is None:
        reward = f'<span class="bad">could not be computed: {_e(r.error)}</span>'
    else:
        comps = ", ".join(f"{k} {num(v)}" for k, v in r.components.items())
        reward = f'<b>{num(r.total)}</b> = {_e(reward_terms(r))} <span class="dim">({_e(comps)})</span>'
    answer = (
        _e(one_line(e.answer, 200))
        if e.answer is not None
        else '<span class="dim">— (nothing submitted)</span>'
    )
    summary = (
        f"execution {e.index} · {_e(e.status)} · {len(e.turns)} turns · {len(e.tool_calls)} tool calls · "
        f"reward {num(r.total if r else None)}"
    )
    return (
        f"<details{' open' if open_ else ''}><summary>{summary}</summary>"
        + "".join(parts)
        + f"<p><b>answer</b>: {answer}<br><b>reference</b>: {_e(reference_text(task))}<br><b>reward</b>: {reward}"
        + (f"<br><b>advantage</b>: {num(e.advantage)}" if e.advantage is not None else "")
        + "</p></details>"
    )


def _design(d: Design, task: dict[str, Any], open_first: bool = False) -> str:
    s = d.structure or {}
    validity = "valid" if d.valid else '<span class="bad">invalid</span>'
    head = (
        f"design {d.index} · {_e(d.source)} · {validity} · "
        f"{_e(s.get('pattern', '—'))} · reward {num(d.reward)} · advantage {num(d.advantage)}"
    )
    out = [f"<h3>{head}</h3>"]
    if d.sample is not None:
        out.append(
            f'<p class="dim">designer {_e(d.sample.model)}: {len(d.sample.response_ids)} tokens, finish '
            f"{_e(d.sample.finish_reason)}, templates shown: {_e(', '.join(d.sample.templates) or '—')}</p>"
        )
    if d.script is not None:
        out.append(_highlight(d.script[:MAX_TEXT_CHARS]))
    elif d.sample is not None:
        out.append(_text_block("designer reply (no script could be extracted)", d.sample.text, open_=True))
    if s:
        out.append(
            f"<p>structure <b>{_e(s.get('structure'))}</b> / pattern <b>{_e(s.get('pattern'))}</b> / family "
            f"{_e(s.get('family'))}; agents {_e(s.get('num_agents'))}, call sites {_e(s.get('num_call_sites'))}; "
            f"tags {_e(', '.join(s.get('tags', [])) or '—')}; roles <b>{_e(', '.join(s.get('roles', [])) or '—')}</b></p>"
        )
    diags = [("error", x) for x in d.check.errors] + [("warning", x) for x in d.check.warnings]
    if diags:
        out.append(
            "<ul>"
            + "".join(f'<li class="{"bad" if k == "error" else "warn"}">{k} {_e(x)}</li>' for k, x in diags)
            + "</ul>"
        )
    out += [_execution(e, task, open_=open_first and k == 0) for k, e in enumerate(d.executions)]
    return "".join(out)


def _control(tree: Any) -> str:
    """The budget-matched single-agent control of a tree: per design its budget, the control's reward and the
    difference (metaagent.credit.control), then the control's executions (synthetic: never trained)."""
    c = tree.control
    rows = "".join(
        "<tr>" + "".join(f"<td>{num(x)}</td>" for x in row) + "</tr>" for row in control_rows(tree)
    )
    out = [
        f"<h3>control · {_e(c.source)} · {len(c.executions)} executions · select {_e(c.select)}</h3>",
        "<table><tr><th>design</th><th>calls k</th><th>control reward C(k)</th><th>design reward</th>"
        f"<th>design - control</th></tr>{rows}</table>",
    ]
    for e, mark in zip(c.executions, c.marks):
        out.append(f'<p class="dim">selection mark ({_e(c.select)}): {_e(repr(mark))}</p>')
        out.append(_execution(e, tree.task))
    return "".join(out)


def _task(refs: Sequence[TreeRef], open_: bool = False) -> str:
    ref = refs[-1]
    task = ref.tree.task
    # in an unfolded task, the first execution of the first design that has any is unfolded too
    shown = next((d for r in refs for d in r.tree.designs if d.executions), None) if open_ else None
    summary = (
        f"<b>{_e(ref.task_id)}</b> · {_e(ref.benchmark)} / {_e(task.get('domain'))} · step {num(ref.step)} · "
        f"{len(refs)} tree(s) · {sum(len(r.tree.designs) for r in refs)} designs"
    )
    out = [
        f'<details id="task-{_e(ref.task_id)}"{" open" if open_ else ""}><summary>{summary}</summary>',
        _text_block("question", task.get("question"), open_=True),
        f"<p><b>reference</b>: {_e(reference_text(task))}</p>",
    ]
    for r in refs:
        out.append(
            f'<p class="dim">from {_e(r.where)} · seed {r.tree.seed} · models '
            f"{_e(', '.join(f'{k}={v}' for k, v in r.tree.models.items()))}</p>"
        )
        out += [_design(d, task, open_first=d is shown) for d in r.tree.designs]
        if r.tree.control is not None:
            out.append(_control(r.tree))
    out.append("</details>")
    return "".join(out)


def _tasks(run: Run, tasks: Sequence[str] | None, max_tasks: int) -> str:
    ids = list(tasks) if tasks else run.task_ids()
    shown = ids[:max_tasks]
    out = [f'<h2 id="tasks">Task replays ({len(shown)} of {len(ids)} tasks; latest step of each)</h2>']
    if len(ids) > len(shown):
        out.append(
            f'<p class="warn">{len(ids) - len(shown)} tasks not shown; raise max_tasks (--html-tasks) '
            "or pick tasks with --task.</p>"
        )
    out += [_task(run.select(t), open_=(i == 0)) for i, t in enumerate(shown)]  # the first task unfolded
    return "".join(out)


def render_html(
    run: Run | Any,
    out: str | os.PathLike[str],
    *,
    compare_with: Run | Any | None = None,
    tasks: Sequence[str] | None = None,
    max_tasks: int = MAX_TASKS,
    title: str | None = None,
    comparison: Comparison | None = None,
) -> Path:
    """Write the self-contained HTML report of ``run`` to ``out`` and return its path.

    Args:
        compare_with: a second run; adds the per-task comparison (A = ``run``, B = ``compare_with``).
        tasks: task ids to replay (default: every task, up to ``max_tasks``).
        comparison: a ready :class:`Comparison` (instead of ``compare_with``, e.g. with another level).
    """
    run = load_run(run)
    st = stats(run)
    if comparison is None and compare_with is not None:
        comparison = compare(run, compare_with)
    title = title or f"metaagent replay — {run.name}"
    body = [
        f"<h1>{_e(title)}</h1>",
        _overview(run),
        _problems(run),
        _plots(run, st),
        _stats(st),
        _comparison(comparison) if comparison is not None else "",
        _tasks(run, tasks, max_tasks),
    ]
    return write_page(out, title, body)
