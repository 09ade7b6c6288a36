"""Run summaries: the table printed at the end of a run or sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hydra.experimental.callback import Callback

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


def read_summaries(sweep_dir: Path) -> list[dict]:
    rows = []
    for job in sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name)):
        summary, error = job / "summary.json", job / "error.txt"
        if summary.is_file():
            rows.append(json.loads(summary.read_text()))
        elif error.is_file():
            rows.append({"status": "failed", "error": error.read_text().strip(), "run_dir": str(job)})
    return rows


class SweepSummary(Callback):
    """Hydra callback: one line per finished job, and the table of all jobs when the sweep ends."""

    def on_multirun_start(self, config, **kwargs) -> None:
        """Tell the jobs which keys this sweep varies (for W&B names and tags)."""
        from hydra.core.override_parser.overrides_parser import OverridesParser
        overrides = list(config.hydra.overrides.task) + [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides(overrides)
        os.environ["SELFSUP_SWEPT"] = ",".join(sorted({o.get_key_element() for o in parsed if o.is_sweep_override()}))

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.core.utils import JobStatus
        if config.hydra.mode.name != "MULTIRUN":
            return
        job_dir = Path(config.hydra.runtime.output_dir)
        ok = job_return.status == JobStatus.COMPLETED
        what = f"val loss {job_return.return_value:.3f}" if ok and job_return.return_value is not None else (
            "finished" if ok else f"FAILED: {job_return._return_value}")
        swept = set(os.environ.get("SELFSUP_SWEPT", "").split(","))
        label = " ".join(o for o in config.hydra.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept)
        print(f"[job {config.hydra.job.num}] {label}: {what}  ({job_dir})", flush=True)

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = read_summaries(sweep_dir)
        if not rows:
            return
        print(summary_table(rows))
        failed = [r for r in rows if r.get("status") != "finished"]
        for r in failed:
            print(f"failed: {r['run_dir']}: {r.get('error')}")
        wandb_dirs = [r["wandb_dir"] for r in rows if r.get("wandb_dir")]
        print(f"Sweep outputs: {sweep_dir}")
        if wandb_dirs:
            print(f"W&B offline runs: {len(wandb_dirs)} (upload: wandb sync {sweep_dir}/*/wandb/offline-run-*)")
