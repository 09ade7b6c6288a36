"""The end-of-run / end-of-sweep table (`summary_table` of the rows `read_summaries` reads from a sweep dir)
and the line that says which setting leads on the probe (`probe_verdict`). The table and selfsup-report
show the same values, defined in DEFINITIONS."""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from datetime import timedelta
from pathlib import Path

from selfsup.evaluation.pairs import pair_lines
from selfsup.evaluation.stats import Interval

PROBE, PAIRS = "eval/probe/accuracy", "eval/pairs/accuracy"
COLUMNS = [("job", "job"), ("objective", "objective"), ("architecture", "architecture"), ("parameters", "params"),
           ("steps", "steps"), ("val_loss", "val loss"), ("eval/fixed/loss", "fixed loss"),
           (PAIRS, "pairs acc"), ("eval/pairs/random_init_accuracy", "pairs r-i"),
           (PROBE, "probe acc"), ("eval/probe/random_init_accuracy", "random-init"),
           ("signal_per_token", "signal/token"), ("tokens_per_sec", "tokens/s"), ("wall_seconds", "wall time"),
           ("status", "status")]


DEFINITIONS = ("val loss: the last validation; fixed loss, pairs acc, probe acc: the last evaluation; pairs acc: "
               "zero-shot minimal pairs (decoders by summed log-probability, encoders by pseudo-log-likelihood, "
               "encoder-decoders by the decoder's log-probability given a blank encoder input), pairs r-i: the "
               "same on untrained models of the run's shape (mean of the seeds); random-init: the probe's; "
               "signal/token: scored targets / input tokens of the last validation; tokens/s: input tokens per "
               "second of training time over the run (validation, evaluation and the first step excluded); "
               "wall time: the whole run; job: the run's folder in the sweep dir")


def value(row: dict, key: str):
    """A summary value; eval/... keys come from its `eval` dict, swept settings from `swept`."""
    if key.startswith("eval/"):
        return (row.get("eval") or {}).get(key)
    if key in (row.get("swept") or {}):
        return row["swept"][key]
    if key == "job":
        return Path(row["run_dir"]).name if row.get("run_dir") else None
    return row.get(key)


def shown_path(path) -> str:
    """A path as the console shows it: relative to the working directory when it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_lines(row: dict) -> list[str]:
    """The end of a single run, in lines of at most 100 characters (the table is a sweep's)."""
    def part(key: str, title: str) -> str | None:
        v = value(row, key)
        return None if v is None else f"{title} {_fmt(key, v)}"
    wall = row.get("wall_seconds")
    head = (f"{row.get('status', '?')}: {row.get('objective')} on {row.get('architecture')}, "
            f"{_fmt('parameters', row.get('parameters'))} parameters, {row.get('steps', 0)} steps"
            + (f", wall time {_fmt('wall_seconds', wall)}" if wall is not None else ""))
    scores = [p for p in (part("val_loss", "val loss"), part("eval/fixed/loss", "fixed loss"),
                          part(PROBE, "probe acc"), part("eval/probe/random_init_accuracy", "random-init"),
                          part("signal_per_token", "signal/token")) if p]
    lines = [head, "  " + "  ".join(scores)] if scores else [head]
    lines += ["  " + line for line in pair_lines(row.get("eval") or {}, row.get("pairs_scorers") or {})]
    lines += pretraining_lines(row)
    if row.get("tokens_per_sec"):
        lines.append(f"  tokens/s {_fmt('tokens_per_sec', row['tokens_per_sec'])} (training time: validation, "
                     f"evaluation and the first step excluded)")
    if row.get("error"):
        lines.append(f"  error: {row['error']}")
    lines.append(f"run dir: {shown_path(row.get('run_dir'))}")
    if row.get("wandb_dir"):
        lines.append(f"W&B run files: {shown_path(row['wandb_dir'])}")
        lines.append(f"  upload: wandb sync {shown_path(row['wandb_dir'])}")
    return lines


def margins(row: dict) -> list[tuple[str, Interval]]:
    """(label, margin over random-init with its 95% interval) of a run's scores: each minimal-pairs scorer
    and set, then each probe task."""
    evaluated = row.get("eval") or {}
    keys = list(row.get("pairs_scorers") or {})
    keys += [k.removesuffix("/margin") for k in evaluated if k.endswith("/margin") and not k.startswith("eval/pairs")]
    return [(key.removeprefix("eval/").replace("/", " "), Interval(evaluated[f"{key}/margin"], evaluated[f"{key}/margin_low"],
             evaluated[f"{key}/margin_high"])) for key in keys if f"{key}/margin" in evaluated]


def pretraining_lines(row: dict, width: int = 100) -> list[str]:
    """Which of the run's scores show pretraining (their margin's 95% interval above 0) and which do not yet
    (it holds 0, or lies below), each with its margin."""
    found = margins(row)
    shown = [f"{label} {m}" for label, m in found if m.low > 0]
    held = [f"{label} {m}" for label, m in found if m.low <= 0]
    lines = []
    for title, parts in (("shows pretraining (margin over random-init, 95% interval above 0)", shown),
                         ("no pretraining shown yet (the interval holds 0 or lies below)", held)):
        if parts:
            lines += textwrap.wrap(f"{title}: " + "; ".join(parts), width, initial_indent="  ", subsequent_indent="    ")
    return lines


def _fmt(key: str, v) -> str:
    if v is None:
        return "-"
    if key == "parameters":
        return f"{v / 1e6:.2f}M"
    if key == "tokens_per_sec":
        return f"{v:,.0f}"
    if key == "wall_seconds":
        return str(timedelta(seconds=round(v)))
    if isinstance(v, float):
        return f"{v:.3f}" if key in dict(COLUMNS) else f"{v:.4g}"
    return str(v)


def swept_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """(key, title) of the settings the rows' sweep varies, in the order first seen."""
    keys = list(dict.fromkeys(k for r in rows for k in (r.get("swept") or {})))
    return [(k, k.split(".")[-1]) for k in keys]


def summary_table(rows: list[dict]) -> str:
    columns = COLUMNS[:3] + swept_columns(rows) + COLUMNS[3:]
    if not any(r.get("eval") for r in rows):  # eval=none: no empty columns
        columns = [c for c in columns if not c[0].startswith("eval/")]
    cells = [[title for _, title in columns]] + [[_fmt(k, value(r, k)) for k, _ in columns] for r in rows]
    width = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, width)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in width))
    return "\n".join(lines)


def setting_label(row: dict) -> str:
    """What a row's run was, seed aside: its objective (when runs differ in it) and swept values."""
    swept = {k: v for k, v in (row.get("swept") or {}).items() if k != "seed"}
    parts = [f"{k.split('.')[-1]}={_fmt(k, v)}" for k, v in swept.items()]
    return " ".join([row.get("objective") or "?", *parts])


def probe_verdict(rows: list[dict], metric: str = PROBE) -> str | None:
    """One line: which setting leads on the probe and by how much, beside the baselines; with several
    seeds per setting the mean and spread (min-max), and whether the lead is within the seed spread."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        v = value(row, metric)
        if row.get("status") == "finished" and isinstance(v, (int, float)) and math.isfinite(v):
            groups.setdefault(setting_label(row), []).append(float(v))
    if len(groups) < 2:
        return None
    ranked = sorted(groups.items(), key=lambda item: -statistics.fmean(item[1]))
    (best, best_values), (second, second_values) = ranked[0], ranked[1]
    margin = statistics.fmean(best_values) - statistics.fmean(second_values)

    def show(values: list[float]) -> str:
        mean = statistics.fmean(values)
        return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ({min(values):.3f}-{max(values):.3f}, {len(values)} seeds)"

    others = ", ".join(f"{name} {show(values)}" for name, values in ranked[1:])
    line = f"Probe ({metric}): {best} leads with {show(best_values)}, +{margin:.3f} over {second}; then {others}."
    baselines = [(key, [value(r, key) for r in rows if isinstance(value(r, key), (int, float))])
                 for key in (metric.replace("/accuracy", "/random_init_accuracy"),
                             metric.replace("/accuracy", "/majority_accuracy"))]
    shown = [f"{key.split('/')[-1].removesuffix('_accuracy').replace('_', '-')} "
             + (f"{min(v):.3f}" if min(v) == max(v) else f"{min(v):.3f}-{max(v):.3f}") for key, v in baselines if v]
    if shown:
        line += f" Baselines: {', '.join(shown)}."
    spread = max((max(v) - min(v) for v in (best_values, second_values) if len(v) > 1), default=None)
    if spread is None:
        line += " One seed per setting: add seed=0,1,2 to see whether the lead exceeds the seed spread."
    elif margin <= spread:
        line += f" The lead is within the seed spread ({spread:.3f}): not a difference these seeds can show."
    else:
        line += f" The lead exceeds the seed spread ({spread:.3f})."
    return line


def _job_key(path: Path):
    return (len(path.name), path.name)


def read_summaries(sweep_dir: Path) -> list[dict]:
    rows = []
    for job in sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir()), key=_job_key):
        summary, error = job / "summary.json", job / "error.txt"
        if summary.is_file():
            rows.append(json.loads(summary.read_text()))
        elif error.is_file():
            rows.append({"status": "failed", "error": error.read_text().strip(), "run_dir": str(job)})
    return rows
