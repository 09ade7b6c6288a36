"""The end-of-run / end-of-sweep table: `summary_table` of the rows `read_summaries` reads from a sweep dir."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = [("objective", "objective"), ("architecture", "architecture"), ("parameters", "params"),
           ("steps", "steps"), ("val_loss", "val loss"), ("val_perplexity", "val ppl"),
           ("signal_per_token", "signal/token"), ("tokens_per_sec", "tokens/s"), ("status", "status"),
           ("run_dir", "run dir")]


def _fmt(key: str, value) -> str:
    if value is None:
        return "-"
    if key == "parameters":
        return f"{value / 1e6:.2f}M"
    if key == "tokens_per_sec":
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def summary_table(rows: list[dict]) -> str:
    cells = [[title for _, title in COLUMNS]] + [[_fmt(k, r.get(k)) for k, _ in COLUMNS] for r in rows]
    width = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, width)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in width))
    return "\n".join(lines)


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
