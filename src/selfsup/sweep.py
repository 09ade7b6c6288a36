"""Hydra callback for sweeps: the keys a sweep varies, one line per job, the table at the end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from hydra.experimental.callback import Callback

from selfsup.report.summary import PROBE, probe_verdict, read_summaries, summary_table, value
from selfsup.upstream import failed_job_value


class SweepSummary(Callback):
    """Hydra callback: one line per finished job, and the table of all jobs when the sweep ends."""

    def on_multirun_start(self, config, **kwargs) -> None:
        """Tell the jobs which keys this sweep varies (for W&B names and tags); make the sweep dir
        (Optuna's SQLite study is created there before any job runs). A dir that already holds a
        sweep is refused before Hydra writes anything into it."""
        sweep_dir = Path(config.hydra.sweep.dir)
        from selfsup.checks import SelfSupError
        from selfsup.reliability.run_dir import claim, own
        try:  # one sweep at a time in a sweep dir (two launched in the same second share the default one)
            claim(sweep_dir)
        except SelfSupError as err:
            print(f"error: {err}".replace("hydra.run.dir", "hydra.sweep.dir"), file=sys.stderr)
            raise SystemExit(2) from None
        if any(p.is_dir() or p.name == "optuna.db" for p in sweep_dir.iterdir()):
            print(f"error: hydra.sweep.dir={sweep_dir} already holds a sweep: nothing was overwritten; pick a "
                  f"new hydra.sweep.dir (or leave it out for a fresh timestamped one)", file=sys.stderr)
            raise SystemExit(2)
        own(sweep_dir)
        from hydra.core.override_parser.overrides_parser import OverridesParser
        overrides = list(config.hydra.overrides.task) + [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides(overrides)
        os.environ["SELFSUP_SWEPT"] = ",".join(sorted({o.get_key_element() for o in parsed if o.is_sweep_override()}))

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.core.utils import JobStatus
        if config.hydra.mode.name != "MULTIRUN":
            return
        job_dir = Path(config.hydra.runtime.output_dir)
        error = job_dir / "error.txt"
        if job_return.status != JobStatus.COMPLETED:
            what = f"FAILED: {failed_job_value(job_return)}"
        elif error.is_file():
            what = "FAILED: " + error.read_text().strip().removeprefix("error: ")
        else:
            summary = json.loads((job_dir / "summary.json").read_text()) if (job_dir / "summary.json").is_file() else {}
            parts = [f"{name} {v:.3f}" for name, v in (("val loss", summary.get("val_loss")),
                                                       ("fixed loss", value(summary, "eval/fixed/loss")),
                                                       ("probe acc", value(summary, PROBE))) if v is not None]
            what = ", ".join(parts) or "finished"
        swept = set(os.environ.get("SELFSUP_SWEPT", "").split(","))
        label = " ".join(o for o in config.hydra.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept)
        print(f"[job {config.hydra.job.num}] {label}: {what}  ({job_dir})", flush=True)

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = read_summaries(sweep_dir)
        if not rows:
            return
        print(summary_table(rows))
        verdict = probe_verdict(rows)
        if verdict:
            print(verdict)
        failed = [r for r in rows if r.get("status") not in ("finished", "pruned")]  # pruned: Optuna stopped it
        wandb_dirs = [r["wandb_dir"] for r in rows if r.get("wandb_dir")]
        print(f"Sweep outputs: {sweep_dir}   (report: selfsup-report {sweep_dir})")
        if wandb_dirs:
            print(f"W&B offline runs: {len(wandb_dirs)} (upload: wandb sync {sweep_dir}/*/wandb/offline-run-*)")
        if failed:
            for r in failed:
                print(f"failed: {r['run_dir']}: {r.get('error')}")
            print(f"{len(failed)} of {len(rows)} jobs failed", file=sys.stderr)
            raise SystemExit(1)
