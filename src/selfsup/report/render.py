"""The local report: the runs table and the plots as one self-contained HTML file, or Markdown with PNG files."""

from __future__ import annotations

import base64
import html
from datetime import datetime
from pathlib import Path

from selfsup.report.model import Run
from selfsup.report.notes import (
    COMPARISON_NOTE,
    PER_CLASS_NOTE,
    PREDICTIONS_NOTE,
    TASK_NOTE,
    VALUES_NOTE,
    WRITTEN_NOTE,
    _counts,
    _title,
    code_line,
    evaluated_note,
    fixed_line,
)
from selfsup.report.tables import (
    JOB_COLUMNS,
    PER_CLASS_TABLE,
    PREDICTION_COLUMNS,
    TASK_COLUMNS,
    WRITTEN_TABLE,
    evaluated,
    per_class_results,
    per_class_rows,
    prediction_rows,
    run_jobs,
    table_rows,
    task_rows,
    tasks,
    verdict,
    written_rows,
)
from selfsup.results.columns import COST, NUMERIC
from selfsup.results.summary import JOB_NOTE, column_chunks

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
p, li, figcaption, details, h1 { overflow-wrap: anywhere; }
.table-box { max-width: 100%; overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
td { max-width: 28em; overflow-wrap: break-word; }
th { background: #f3f3f3; min-width: 3em; }
th:first-child, td:first-child { position: sticky; left: 0; background: #fff; }
th:first-child { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; overflow-wrap: normal; }
tr.failed td { background: #fdecea; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
.not-drawn { font-size: 0.9em; color: #555; font-style: italic; }
.note { background: #f7f7ff; border-left: 4px solid #88a; padding: 0.6em 1em; }
code { background: #f3f3f3; padding: 0 0.2em; }
"""


def _breakable(text: str) -> str:
    """A header, escaped, that may break after its dots (objective.<wbr>mean_span_length)."""
    return html.escape(text).replace(".", ".<wbr>")


def _box(table: str) -> str:
    """A table in its own box, which scrolls sideways when the table is wider than the page."""
    return f'<div class="table-box">{table}</div>'


def _figure(name: str, caption: str, png: bytes) -> str:
    esc = html.escape
    if not png:  # not drawn: the line saying why
        return f'<p class="not-drawn" id="{esc(name)}">{esc(caption)}</p>'
    return (
        f'<figure id="{esc(name)}"><img alt="{esc(caption)}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode("ascii")}"><figcaption>{esc(caption)}</figcaption></figure>'
    )


def render_html(
    runs: list[Run], keys: list[str], plots: list[tuple[str, str, bytes]], setup: dict | None = None
) -> str:
    setup = setup or {}
    esc = html.escape
    header, rows = table_rows(runs, keys)
    head = "".join(f"<th>{_breakable(h)}</th>" for h in header)
    body = []
    for run, row in zip(runs, rows):
        cells = []
        for name, cell in zip(header, row):
            title = ""
            if name == "run":
                bits = [str(run.path)] + (
                    [f"W&B: {run.wandb_record['display_name']}"] if run.wandb_record.get("display_name") else []
                )
                title = f' title="{esc(" | ".join(bits))}"'
            cls = ' class="num"' if name in NUMERIC or name.endswith((" acc", " margin")) else ""
            cells.append(f"<td{cls}{title}>{esc(cell)}</td>")
        body.append(f'<tr class="{"finished" if run.finished else "failed"}">{"".join(cells)}</tr>')
    figures = "\n".join(_figure(name, caption, png) for name, caption, png in plots)
    notes = [f"<li><b>{esc(r.label)}</b>: {esc(r.note)}</li>" for r in runs if r.note]
    swept = ", ".join(f"<code>{esc(k)}</code>" for k in keys) or "nothing (one configuration)"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(_title(runs))}</title>
<style>{CSS}</style></head>
<body>
<h1>{esc(_title(runs))}</h1>
<p>{esc(_counts(runs))}; swept: {swept}. Written {datetime.now().strftime("%Y-%m-%d %H:%M")}.</p>
<p id="code">{esc(code_line(runs))}</p>
<details id="fixed"><summary>Settings every run shares</summary><p><code>{esc(fixed_line(setup))}</code></p></details>
{"".join(f"<p class='study'>{esc(line)}</p>" for line in setup.get("study", []))}
<h2>Runs</h2>
{_box(f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>{chr(10)}{chr(10).join(body)}{chr(10)}</tbody></table>')}
<p class="small">{esc(VALUES_NOTE)}</p>
{"<ul>" + "".join(notes) + "</ul>" if notes else ""}
<h2>How to compare</h2>
<p class="note">{esc(COMPARISON_NOTE)}</p>
{_verdict_html(runs, keys)}
{_tasks_html(runs)}
{_evaluated_html(runs, keys)}
<h2>Plots</h2>
{figures if any(png for _, _, png in plots) else figures + "<p>No validation values were logged: nothing to plot.</p>"}
{_predictions_html(runs)}
</body></html>
"""


def _verdict_html(runs: list[Run], keys: list[str]) -> str:
    lines = verdict(runs, keys)
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in lines[1:])
    return f'<div id="verdict"><p><b>{html.escape(lines[0])}</b></p><ul>{items}</ul></div>'


def _task_html(table_id: str, task: str, rows: list[list[str]], columns: list[str] = TASK_COLUMNS) -> str:
    """A task's (a generation job's) heading and its table."""
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in columns)
    body = "\n".join(
        "<tr>" + "".join(f"<td{'' if i < 2 else ' class=num'}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<h3>{esc(task)}</h3>\n" + _box(
        f'<table id="{esc(table_id)}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'
    )


def _tasks_html(runs: list[Run]) -> str:
    esc = html.escape
    sections = []
    for task in ["probe", *tasks(runs)]:
        rows = task_rows(runs, task)
        if not rows:
            continue
        sections.append(_task_html(f"task-{task}", task, rows))
    jobs = [_task_html(f"job-{job}", job, rows, JOB_COLUMNS) for job, rows in run_jobs(runs) if rows]
    if not sections and not jobs:
        return ""
    note = TASK_NOTE + (" Generation jobs: " + JOB_NOTE + "." if jobs else "")
    return f'<h2>Evaluation tasks</h2>\n<p class="small">{esc(note)}</p>\n' + "\n".join(sections + jobs)


def _evaluated_html(runs: list[Run], keys: list[str]) -> str:
    tables, lines = evaluated(runs, keys)
    if not tables and not lines:
        return ""
    esc = html.escape
    sections = [
        _task_html(f"evaluated-{task.replace(' ', '-')}", task, rows, columns) for task, columns, rows in tables
    ]
    items = "".join(f"<li>{esc(line.strip())}</li>" for line in lines[1:])
    verdict_html = f'<div id="evaluated-verdict"><p><b>{esc(lines[0])}</b></p><ul>{items}</ul></div>' if lines else ""
    return (
        f'<h2>Evaluated after training</h2>\n<p class="small">{esc(evaluated_note(tables))}</p>\n{verdict_html}\n'
        + "\n".join(sections)
        + _per_class_html(runs, keys)
        + _written_html(runs, keys)
    )


def _section_html(heading: str, note: str, table_id: str, header: list[str], rows: list[list[str]]) -> str:
    """A report section of one plain table: its heading (<h2>/<h3>: `heading` holds the tag), its note, its table
    ("" without rows)."""
    if not rows:
        return ""
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'{heading}\n<p class="small">{esc(note)}</p>\n' + _box(
        f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'
    )


def _written_html(runs: list[Run], keys: list[str]) -> str:
    rows = written_rows(runs, keys)
    return _section_html("<h3>Generated examples</h3>", WRITTEN_NOTE, "generated-examples", WRITTEN_TABLE, rows)


def _per_class_html(runs: list[Run], keys: list[str]) -> str:
    rows = per_class_rows(per_class_results(runs, keys))
    return _section_html("<h3>Per-class results</h3>", PER_CLASS_NOTE, "per-class", PER_CLASS_TABLE, rows)


def _predictions_html(runs: list[Run]) -> str:
    rows = prediction_rows(runs)
    return _section_html("<h2>Predictions</h2>", PREDICTIONS_NOTE, "predictions", PREDICTION_COLUMNS, rows)


MD_WIDTH = 200  # the Markdown's table rows (its prose is not wrapped)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_row(cells: list[str], width: int = MD_WIDTH) -> str:
    """A Markdown table row within `width` columns: the longest text cut (with …) until it fits."""
    cells = [str(c) for c in cells]
    while True:
        line = "| " + " | ".join(_md_cell(c) for c in cells) + " |"
        longest = max(range(len(cells)), key=lambda i: len(cells[i]))
        if len(line) <= width or len(cells[longest]) <= 2:
            return line
        cells[longest] = cells[longest][: max(1, len(cells[longest]) - (len(line) - width) - 1)] + "…"


def _md_table(header: list[str], rows: list[list[str]], align=None) -> list[str]:
    """A Markdown table, split into several (each repeating the first two columns) where one would be wider than
    MD_WIDTH; a row still too wide has its longest text cut."""
    align = align or (lambda i, h: "---:" if h in NUMERIC or h.endswith((" acc", " margin")) else "---")
    widths = [max(len(_md_cell(str(r[i]))) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for chunk in column_chunks(widths, min(2, len(header)), MD_WIDTH):
        out += [""] if out else []
        out += [
            _md_row([header[i] for i in chunk]),
            "|" + "|".join(align(i, header[i]) for i in chunk) + "|",
            *[_md_row([row[i] for i in chunk]) for row in rows],
        ]
    return out


def _md_task(task: str, rows: list[list[str]], columns: list[str] = TASK_COLUMNS) -> list[str]:
    """A task's (a generation job's) section: its heading and its table."""
    return [f"### {task}", "", *_md_table(columns, rows, lambda i, h: "---" if i < 2 else "---:"), ""]


def render_markdown(
    runs: list[Run], keys: list[str], plots: list[tuple[str, str, bytes]], out: Path, setup: dict | None = None
) -> tuple[str, list[Path]]:
    setup = setup or {}
    header, rows = table_rows(runs, keys)
    lines = [
        f"# {_title(runs)}",
        "",
        f"{_counts(runs)}; swept: {', '.join(f'`{k}`' for k in keys) or 'nothing (one configuration)'}.",
        "",
        code_line(runs),
        "",
        f"Settings every run shares: `{fixed_line(setup)}`",
        "",
        *[line + "\n" for line in setup.get("study", [])],
        "## Runs",
        "",
    ]
    scores = [i for i, h in enumerate(header) if h not in COST]  # two tables of at most ~200 columns
    cost = [0] + [i for i, h in enumerate(header) if h in COST]
    lines += _md_table([header[i] for i in scores], [[row[i] for i in scores] for row in rows])
    lines += ["", "Their cost:", ""]
    lines += _md_table([header[i] for i in cost], [[row[i] for i in cost] for row in rows])
    lines += ["", VALUES_NOTE, ""]
    lines += [f"- **{r.label}**: {r.note}" for r in runs if r.note]
    lines += [f"- **{r.label}** {r.status}: {r.error}" for r in runs if r.error]  # whole (the table's may be cut)
    lines += ["", "## How to compare", "", COMPARISON_NOTE, ""]
    found = verdict(runs, keys)
    if found:
        lines += [f"**{found[0]}**", "", *[f"- {line.strip()}" for line in found[1:]], ""]
    task_sections = [(task, TASK_COLUMNS, task_rows(runs, task)) for task in ["probe", *tasks(runs)]]
    task_sections += [(job, JOB_COLUMNS, rows) for job, rows in run_jobs(runs)]
    if any(rows for _, _, rows in task_sections):
        jobs = any(rows and columns is JOB_COLUMNS for _, columns, rows in task_sections)
        lines += ["## Evaluation tasks", "", TASK_NOTE + (" Generation jobs: " + JOB_NOTE + "." if jobs else ""), ""]
        for task, columns, rows in task_sections:
            if rows:
                lines += _md_task(task, rows, columns)
    tables, found = evaluated(runs, keys)
    if tables or found:
        lines += ["## Evaluated after training", "", evaluated_note(tables), ""]
        if found:
            lines += [f"**{found[0]}**", "", *[f"- {line.strip()}" for line in found[1:]], ""]
        for task, columns, rows in tables:
            lines += _md_task(task, rows, columns)
        per_class = per_class_rows(per_class_results(runs, keys))
        if per_class:
            lines += ["### Per-class results", "", PER_CLASS_NOTE, "", *_md_table(PER_CLASS_TABLE, per_class), ""]
        written = written_rows(runs, keys)
        if written:
            lines += ["### Generated examples", "", WRITTEN_NOTE, "", *_md_table(WRITTEN_TABLE, written), ""]
    lines += ["## Plots", ""]
    files = []
    for name, caption, png in plots:
        if not png:  # not drawn: the line saying why
            lines += [f"*{caption}*", ""]
            continue
        path = out.with_name(f"{out.stem}-{name}.png")
        path.write_bytes(png)
        files.append(path)
        lines += [f"![{name}]({path.name})", "", f"*{caption}*", ""]
    if not files:
        lines += ["No validation values were logged: nothing to plot.", ""]
    predictions = prediction_rows(runs)
    if predictions:
        lines += [
            "## Predictions",
            "",
            PREDICTIONS_NOTE,
            "",
            *_md_table(PREDICTION_COLUMNS, predictions, lambda i, h: "---"),
            "",
        ]
    return "\n".join(lines), files
