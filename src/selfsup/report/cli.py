"""`selfsup-report SWEEP_DIR [SWEEP_DIR ...]`: arguments, then runs -> plots -> HTML/Markdown (-> W&B Report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selfsup.report.model import ReportError
from selfsup.report.notes import _counts
from selfsup.report.plots import make_plots, plot_study
from selfsup.report.publish import publish_wandb
from selfsup.report.render import render_html, render_markdown
from selfsup.report.runs import fixed_settings, load_runs, swept_keys
from selfsup.report.studies import load_studies, study_lines


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        prog="selfsup-report",
        description="Report of selfsup-train sweeps: the runs, the values they vary, the fixed exam and the "
        "probe, curves against tokens seen, and an Optuna study's history; one self-contained HTML file, "
        "or Markdown with PNG files.",
    )
    parser.add_argument(
        "sweep_dirs",
        nargs="+",
        metavar="SWEEP_DIR",
        help="a sweep dir of selfsup-train -m (outputs/multirun/<date>/<time>) or a run dir",
    )
    parser.add_argument("--out", help="where to write the report (default: <first SWEEP_DIR>/report.html or .md)")
    parser.add_argument(
        "--format",
        choices=["html", "md"],
        help="html (default; plots embedded) or md (PNG files beside it); default: from --out's suffix",
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="also publish the panels as a W&B Report (online "
        "runs); for offline runs, print the `wandb sync` command that uploads them",
    )
    return parser.parse_args(argv)


def run_report(args) -> int:
    fmt = args.format or ("md" if args.out and Path(args.out).suffix.lower() in (".md", ".markdown") else "html")
    runs = load_runs(args.sweep_dirs)
    if args.out:
        out = Path(args.out)
        if out.is_dir():
            out = out / f"report.{fmt}"
    else:
        out = Path(args.sweep_dirs[0]) / f"report.{fmt}"
    keys = swept_keys(runs)
    plots = make_plots(runs, keys)
    studies, problems = load_studies(args.sweep_dirs)
    study = [line for s in studies for line in study_lines(s)] + problems
    for s in studies:
        plots += plot_study(s)
    setup = {"fixed": fixed_settings(runs), "study": study}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "html":
            out.write_text(render_html(runs, keys, plots, setup), encoding="utf-8")
            files = []
        else:
            text, files = render_markdown(runs, keys, plots, out, setup)
            out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ReportError(f"cannot write the report to {out}: {err.strerror or err}") from None
    problem = None
    try:
        status = publish_wandb(runs, keys) if args.wandb else 0
    except ReportError as err:  # said after where the local report is
        problem, status = err, 2
    for line in study:
        print(line)
    for run in runs:
        if not run.finished:
            print(f"{run.status}: {run.label} ({run.path})" + (f": {run.error}" if run.error else ""))
    print(f"Report ({_counts(runs)}): {out}" + (f"  (plots: {', '.join(p.name for p in files)})" if files else ""))
    if problem:
        raise problem
    return status


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        code = run_report(args)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    raise SystemExit(code)
