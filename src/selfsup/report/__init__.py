"""Run summaries and reports.

`summary_table` / `read_summaries`: the table printed at the end of a run or sweep.

`selfsup-report SWEEP_DIR [SWEEP_DIR ...]`: one report of one or more sweeps (or single runs) —
a table with a row per run and the values each sweep varies, and plots of the fixed exam and the
probe against mask rate, span length, tokens seen and FLOPs — as one self-contained HTML file (default) or Markdown with
PNG files beside it; `--wandb` publishes the same panels as a W&B Report.

    selfsup-report outputs/multirun/<date>/<time>
    selfsup-report SWEEP_A SWEEP_B --format md --out comparison/report.md
    selfsup-report outputs/multirun/<date>/<time> --wandb

Every metric value is read from what the run logged: its W&B run files (offline runs, read with
`wandb leet inspect`), the W&B API (online runs), else its CSV log.

Modules, along the data flow: `model` (Run, ReportError), `runs` (finding and reading runs), `studies` (Optuna
studies), `plot_data` (what the plots show), `figures` (drawing them), `plots` (which plots, their captions),
`tables` (the tables' rows), `notes` (the report's words), `render` (HTML, Markdown), `publish` (the W&B Report),
`cli` (selfsup-report); the end-of-run table is selfsup.results.summary.
"""

from selfsup.report.cli import main, parse_args, run_report
from selfsup.report.model import (
    IGNORED_KEYS,
    IGNORED_PREFIXES,
    MASK_RATE,
    SEED,
    SPAN_LENGTH,
    ReportError,
    Run,
)
from selfsup.report.notes import COMPARISON_NOTE, VALUES_NOTE
from selfsup.report.plots import make_plots, plot_loss_vs_tokens
from selfsup.report.publish import build_wandb_report, publish_wandb
from selfsup.report.render import render_html, render_markdown
from selfsup.report.runs import (
    api_history,
    csv_history,
    fill_tokens_seen,
    find_runs,
    inspect_wandb,
    load_run,
    load_runs,
    swept_keys,
)
from selfsup.report.tables import table_rows
from selfsup.results.summary import COLUMNS, read_summaries, summary_table

__all__ = [
    "COLUMNS",
    "IGNORED_KEYS",
    "IGNORED_PREFIXES",
    "MASK_RATE",
    "COMPARISON_NOTE",
    "SEED",
    "SPAN_LENGTH",
    "VALUES_NOTE",
    "ReportError",
    "Run",
    "api_history",
    "build_wandb_report",
    "csv_history",
    "fill_tokens_seen",
    "find_runs",
    "inspect_wandb",
    "load_run",
    "load_runs",
    "main",
    "make_plots",
    "parse_args",
    "plot_loss_vs_tokens",
    "publish_wandb",
    "read_summaries",
    "render_html",
    "render_markdown",
    "run_report",
    "summary_table",
    "swept_keys",
    "table_rows",
]
