"""The local report: the runs table and the plots as one self-contained HTML file, or Markdown with PNG files."""

from __future__ import annotations

import base64
import html
from datetime import datetime, timedelta
from pathlib import Path

from selfsup.common.names import FIXED_LOSS, HELDOUT_BPB
from selfsup.common.version import describe
from selfsup.evaluation.generation import NOT_A_WRITER, WRITERS
from selfsup.evaluation.stats import Interval
from selfsup.report.model import Run, _show
from selfsup.results.summary import (
    DEFINITIONS,
    JOB_NOTE,
    LM_EVAL_NOTE,
    evaluated_rows,
    job_names,
    lm_eval_metrics,
    task_names,
)
from selfsup.results.verdict import run_margin, verdict_text

COMPARISON_NOTE = (
    "Compare runs on the columns that do not depend on their settings. A run's own val loss grades it on its own "
    "exam (its mask rate, its span length, its objective's scored positions), so it says how well the run learned "
    "that task, not which setting is better: never rank mask rates, span lengths or objectives by it. "
    "The fixed-exam loss (eval/fixed/loss) scores every run of a family on the same panel of tasks with the same "
    "masks, the mean of its members (encoders: MLM at mask rates 0.10 to 0.40; encoder-decoders: span corruption "
    "at rates 0.10 to 0.50 and mean spans 2 to 10; decoders: next-token loss), so that no swept value is scored on "
    "its own exam alone: compare it across mask rates, span lengths and seeds within a family, after the pairs and "
    'the probe (docs/evaluation.md, "Which score for which sweep"). The minimal pairs (eval/pairs/accuracy) '
    "and the probe (eval/probe/accuracy) score every family on the same examples: compare objectives by their "
    "margins over random-init (the same score on untrained models of the same shape), never by raw accuracies, "
    "at equal steps, tokens seen or FLOPs. The verdict below says which runs show pretraining (the margin's 95% "
    "interval above 0 at every seed) and calls a lead only when the difference of two margins exceeds its own "
    "interval and the spread over seeds: run seed=0,1,2."
)
VALUES_NOTE = (
    "Values, as the end-of-sweep table shows them: " + DEFINITIONS + ". Read from (column data): the W&B run "
    "files (offline runs, with `wandb leet inspect`), the W&B API (online runs), else csv/metrics.csv, else "
    "(logger=none) summary.json."
)


def tasks(runs: list[Run]) -> list[str]:
    """The user's evaluation tasks (eval.tasks.*) the runs logged, beside the built-in probe."""
    return [t for t in task_names(k for run in runs for k in run.logged_keys()) if t != "probe"]


BENCHMARK_SECONDS = 60  # a shorter run's tokens/s is mostly start-up and evaluation: not a throughput figure


def tokens_per_sec(metrics: dict) -> str:
    """`962`, or `962 (not a benchmark: 54 s run)` for a run shorter than a minute."""
    value, wall = metrics["tokens_per_sec"], metrics["wall_seconds"]
    if value is None:
        return "-"
    if wall is not None and wall < BENCHMARK_SECONDS:
        return f"{value:,.0f} (not a benchmark: {wall:.0f} s run)"
    return f"{value:,.0f}"


def table_rows(runs: list[Run], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    keys = [k for k in keys if k not in ("objective", "architecture")]  # columns of their own
    own = tasks(runs)
    header = [
        "run",
        "objective",
        "architecture",
        *keys,
        "val loss*",
        "val ppl",
        "fixed loss*",
        "held-out bpb*",
        "pairs acc",
        "pairs margin",
        "probe acc",
        "probe margin",
        *[f"{t} {c}" for t in own for c in ("acc", "margin")],
        "val signal/token",
        "tokens seen",
        "FLOPs",
        "targets",
        "tokens/s",
        "wall time",
        "status",
        "data",
    ]
    rows = []
    for run in runs:
        m = run.metrics()
        task_cells = []
        for t in own:
            found = run.task_value(f"eval/{t}/accuracy")
            task_cells += ["-" if found is None else f"{found:.4f}", run.margin(f"eval/{t}/accuracy") or "-"]

        def number(key: str, form: str) -> str:
            return "-" if m[key] is None else format(m[key], form)

        status = run.status if not run.error else f"{run.status}: {run.error}"
        rows.append(
            [
                run.label,
                run.objective or "-",
                run.summary.get("architecture_preset") or run.architecture or "-",
                *[_show(run.value(k)) for k in keys],
                number("val_loss", ".4f"),
                number("val_perplexity", ".2f"),
                run.bounded(FIXED_LOSS) or number("fixed_loss", ".4f"),
                run.bounded(HELDOUT_BPB) or number("heldout", ".4f"),
                number("pairs", ".4f"),
                m["pairs_margin"] or "-",
                number("probe", ".4f"),
                m["probe_margin"] or "-",
                *task_cells,
                number("signal_per_token", ".3f"),
                number("tokens_seen", ",.0f"),
                number("flops_seen", ".2g"),
                number("targets_seen", ",.0f"),
                tokens_per_sec(m),
                "-" if m["wall_seconds"] is None else str(timedelta(seconds=round(m["wall_seconds"]))),
                status,
                run.source,
            ]
        )
    return header, rows


TASK_NOTE = (
    "Each evaluation task (the built-in probe, and every eval.tasks.NAME) beside its baselines: the "
    "majority class's accuracy, and random-init: the same probe on untrained models of the run's shape "
    "(mean +- sd over seeds); the margin is the accuracy minus random-init, with its paired bootstrap 95% "
    "interval."
)
TASK_COLUMNS = ["run", "objective", "accuracy", "macro F1", "majority", "random-init", "margin [95%]"]


def task_rows(runs: list[Run], task: str) -> list[list[str]]:
    """[run, objective, accuracy, macro F1, majority, random-init mean +- sd, margin] of each run that has the task."""
    rows = []
    for run in runs:
        get = {
            k: run.task_value(f"eval/{task}/{k}")
            for k in ("accuracy", "macro_f1", "majority_accuracy", "random_init_accuracy", "random_init_accuracy_sd")
        }
        if get["accuracy"] is None:
            continue
        shown = {k: "-" if v is None else f"{v:.4f}" for k, v in get.items()}
        baseline = shown["random_init_accuracy"] + (
            "" if get["random_init_accuracy_sd"] is None else f" +- {get['random_init_accuracy_sd']:.4f}"
        )
        rows.append(
            [
                run.label,
                run.objective or "-",
                shown["accuracy"],
                shown["macro_f1"],
                shown["majority_accuracy"],
                baseline,
                run.margin(f"eval/{task}/accuracy") or "-",
            ]
        )
    return rows


JOB_COLUMNS = [
    "run",
    "objective",
    "loss",
    "random-init loss",
    "loss margin [95%]",
    "exact match",
    "EM margin [95%]",
    "token F1",
    "random-init F1",
    "F1 margin [95%]",
]


def job_rows(items: list[tuple], job: str) -> list[list[str]]:
    """JOB_COLUMNS rows of generation job `job`: items are (run label, objective, architecture, get: key -> value
    or None); a run of a family that writes no text says so, one without the job's scores is left out."""
    rows = []
    for label, objective, architecture, get in items:
        if architecture is not None and architecture not in WRITERS:
            rows.append([label, objective or "-", NOT_A_WRITER, *["-"] * (len(JOB_COLUMNS) - 3)])
            continue
        if get(f"eval/{job}/loss") is None:
            continue

        def number(key: str) -> str:
            value = get(f"eval/{job}/{key}")
            return "-" if value is None else f"{value:.4f}"

        def margin(score: str) -> str:
            found = [get(f"eval/{job}/{score}/margin{end}") for end in ("", "_low", "_high")]
            return "-" if None in found else str(Interval(*found))

        rows.append(
            [
                label,
                objective or "-",
                number("loss"),
                number("random_init_loss"),
                margin("loss"),
                number("exact_match"),
                margin("exact_match"),
                number("token_f1"),
                number("random_init_token_f1"),
                margin("token_f1"),
            ]
        )
    return rows


def run_jobs(runs: list[Run]) -> list[tuple[str, list[list[str]]]]:
    """(job, JOB_COLUMNS rows) of each generation job the runs logged during training."""
    items = [(r.label, r.objective, r.summary.get("architecture"), r.task_value) for r in runs]
    return [(job, job_rows(items, job)) for job in job_names(k for run in runs for k in run.logged_keys())]


def summary_rows(runs: list[Run], keys: list[str]) -> list[dict]:
    """The runs' summary rows for the verdict: runs are told apart by their objective and the keys that vary among
    runs of one objective (those that change with the objective, such as its own defaults, say nothing more)."""
    by_objective: dict[tuple, set] = {}
    for run in runs:
        for key in keys:
            by_objective.setdefault((key, run.objective), set()).add(_show(run.value(key)))
    told = [k for k in keys if any(len(v) > 1 for (key, _), v in by_objective.items() if key == k)]
    return [r.as_summary_row(told) for r in runs if r.summary]


def verdict(runs: list[Run], keys: list[str]) -> list[str]:
    """The verdict's lines (selfsup.results.verdict), as the end of a sweep prints them."""
    return verdict_text(summary_rows(runs, keys)).splitlines()


EVALUATED_NOTE = (
    "Scored after training by selfsup-eval (evaluated.json beside each run's summary.json): each task by its protocol "
    "(fine-tuned: the mean over fine-tuning seeds), beside the same on untrained models of the run's shape "
    "(random-init, mean +- sd over seeds) and the majority class; the margin's paired bootstrap 95% interval "
    "resamples the test examples, the random-init seeds and the fine-tuning seeds."
)


def evaluated(runs: list[Run], keys: list[str]) -> tuple[list[tuple[str, list[str], list[list[str]]]], list[str]]:
    """selfsup-eval's scores of the runs: (task, its columns, its rows) per task (TASK_COLUMNS) and generation job
    (JOB_COLUMNS), and the verdict over them."""
    every = summary_rows(runs, keys)
    rows = evaluated_rows(every)
    labels = {str(r.path): r.label for r in runs}
    tables = []
    for task in task_names(k for row in rows for k in row["eval"]):
        table = []
        for row in rows:
            get = {
                k: row["eval"].get(f"eval/{task}/{k}")
                for k in (
                    "accuracy",
                    "macro_f1",
                    "majority_accuracy",
                    "random_init_accuracy",
                    "random_init_accuracy_sd",
                )
            }
            if get["accuracy"] is None:
                continue
            shown = {k: "-" if v is None else f"{v:.4f}" for k, v in get.items()}
            sd = get["random_init_accuracy_sd"]
            m = run_margin(row, f"eval/{task}")
            table.append(
                [
                    labels.get(row["run_dir"], row["run_dir"]),
                    row.get("objective") or "-",
                    shown["accuracy"],
                    shown["macro_f1"],
                    shown["majority_accuracy"],
                    shown["random_init_accuracy"] + ("" if sd is None else f" +- {sd:.4f}"),
                    "-" if m is None else str(m),
                ]
            )
        tables.append((task, TASK_COLUMNS, table))
    items = [
        (labels.get(row["run_dir"], row["run_dir"]), row.get("objective"), row.get("architecture"), row["eval"].get)
        for row in rows
    ]
    tables += [(job, JOB_COLUMNS, job_rows(items, job)) for job in job_names(k for row in rows for k in row["eval"])]
    tables += lm_eval_tables(rows, labels, [r for r in every if r.get("architecture") == "encoder"])
    return tables, (verdict_text(rows).splitlines() if rows else [])


LM_EVAL_COLUMNS = ["run", "objective", "metric", "value", "stderr", "random-init", "margin [95%]"]
LM_EVAL_ENCODER = "lm-eval has no backend for encoders"


def lm_eval_tables(
    rows: list[dict], labels: dict, encoders: list[dict]
) -> list[tuple[str, list[str], list[list[str]]]]:
    """(`lm-eval <task>`, LM_EVAL_COLUMNS, rows) per lm-eval task: each run's metrics with lm-eval's stderr,
    random-init's mean +- sd and the margin; each encoder run (of `encoders`: summary rows) says lm-eval does not
    score it."""
    found = lm_eval_metrics(rows)
    tables = []
    for task in dict.fromkeys(t for t, _ in found):
        metrics = [m for t, m in found if t == task]
        table = []
        for row in sorted(
            encoders + rows, key=lambda r: list(labels).index(r["run_dir"]) if r["run_dir"] in labels else 0
        ):
            label, objective = labels.get(row["run_dir"], row["run_dir"]), row.get("objective") or "-"
            if row.get("architecture") == "encoder":
                if row in encoders:
                    table.append([label, objective, LM_EVAL_ENCODER, *["-"] * (len(LM_EVAL_COLUMNS) - 3)])
                continue
            for metric in metrics:
                key = f"eval/lm_eval/{task}/{metric}"
                get = row["eval"].get
                if get(key) is None:
                    continue
                sd = get(f"eval/lm_eval/{task}/random_init_{metric}_sd")
                base = get(f"eval/lm_eval/{task}/random_init_{metric}")
                m = run_margin(row, key)
                table.append(
                    [
                        label,
                        objective,
                        metric,
                        f"{get(key):.4g}",
                        "-" if get(f"{key}_stderr") is None else f"{get(f'{key}_stderr'):.3g}",
                        "-" if base is None else f"{base:.4g}" + ("" if sd is None else f" +- {sd:.3g}"),
                        "-" if m is None else str(m),
                    ]
                )
        tables.append((f"lm-eval {task}", LM_EVAL_COLUMNS, table))
    return tables


def code_line(runs: list[Run]) -> str:
    """Which code the runs ran (summary.json's `code`): one version, or each with its runs."""
    versions: dict[str, list[str]] = {}
    for run in runs:
        versions.setdefault(describe(run.summary.get("code")), []).append(run.label)
    if len(versions) == 1:
        return f"Code: {next(iter(versions))}."
    return "Code: " + "; ".join(f"{v} ({', '.join(labels)})" for v, labels in versions.items()) + "."


def fixed_line(setup: dict) -> str:
    fixed = setup.get("fixed") or {}
    return "; ".join(f"{k}={_show(v)}" for k, v in fixed.items()) or "none"


# ---------------------------------------------------------------------------- writing
def _title(runs: list[Run]) -> str:
    sweeps = list(dict.fromkeys(str(r.sweep) for r in runs))
    return "selfsup report: " + ", ".join(sweeps)


def _counts(runs: list[Run]) -> str:
    failed = sum(not r.finished for r in runs)
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f", {failed} not finished" if failed else "")


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

NUMERIC = {
    "val loss*",
    "val ppl",
    "fixed loss*",
    "held-out bpb*",
    "pairs acc",
    "pairs margin",
    "probe acc",
    "probe margin",
    "val signal/token",
    "tokens seen",
    "FLOPs",
    "targets",
    "tokens/s",
    "wall time",
}


PREDICTIONS_NOTE = (
    "The first examples of the fixed exam at each run's last evaluation (the same text windows and "
    "masks for every run of an architecture family): input is what the model reads, target the "
    "scored tokens (the first 24, separated by |), prediction the model's likeliest token at each."
)
PREDICTION_COLUMNS = ["run", "example", "input", "target", "prediction", "accuracy"]


def prediction_rows(runs: list[Run], per_run: int = 2, width: int = 160) -> list[list[str]]:
    """[run, example, input (shortened), target, prediction, accuracy] of the first per_run examples of each run."""
    rows = []
    for run in runs:
        for row in run.predictions[:per_run]:
            text = str(row.get("input", ""))
            rows.append(
                [
                    run.label,
                    str(row.get("example", "")),
                    text if len(text) <= width else text[: width - 1] + "…",
                    str(row.get("target", "")),
                    str(row.get("prediction", "")),
                    _show(row.get("accuracy")),
                ]
            )
    return rows


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
    if not tables:
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
    )


def _predictions_html(runs: list[Run]) -> str:
    rows = prediction_rows(runs)
    if not rows:
        return ""
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in PREDICTION_COLUMNS)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<h2>Predictions</h2>\n<p class="small">{esc(PREDICTIONS_NOTE)}</p>\n' + _box(
        f'<table id="predictions"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'
    )


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


COST = ("val signal/token", "tokens seen", "FLOPs", "targets", "tokens/s", "wall time")  # the runs table's 2nd part


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(_md_cell(h) for h in header) + " |",
        "|" + "|".join("---:" if h in NUMERIC or h.endswith((" acc", " margin")) else "---" for h in header) + "|",
        *["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows],
    ]


def evaluated_note(tables: list[tuple]) -> str:
    """EVALUATED_NOTE, and JOB_NOTE and LM_EVAL_NOTE where a generation job or an lm-eval task was evaluated."""
    jobs = any(columns is JOB_COLUMNS for _, columns, _ in tables)
    lm_eval = any(columns is LM_EVAL_COLUMNS for _, columns, _ in tables)
    return (
        EVALUATED_NOTE
        + (" Generation jobs: " + JOB_NOTE + "." if jobs else "")
        + (" " + LM_EVAL_NOTE + "." if lm_eval else "")
    )


def _md_task(task: str, rows: list[list[str]], columns: list[str] = TASK_COLUMNS) -> list[str]:
    """A task's (a generation job's) section: its heading and its table."""
    return [
        f"### {task}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(columns))) + "|",
        *["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows],
        "",
    ]


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
    if tables:
        lines += ["## Evaluated after training", "", evaluated_note(tables), ""]
        if found:
            lines += [f"**{found[0]}**", "", *[f"- {line.strip()}" for line in found[1:]], ""]
        for task, columns, rows in tables:
            lines += _md_task(task, rows, columns)
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
            "| " + " | ".join(PREDICTION_COLUMNS) + " |",
            "|" + "|".join("---" for _ in PREDICTION_COLUMNS) + "|",
        ]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in predictions] + [""]
    return "\n".join(lines), files
