"""Hydra callback for sweeps: the keys a sweep varies, one line per job, the table at the end."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import textwrap
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback

from selfsup.common.names import (
    ERROR,
    FIXED_LOSS,
    HELDOUT_BPB,
    HYDRA_DIR,
    PAIRS,
    PROBE,
    RunSummary,
    override_key,
    shown,
)
from selfsup.common.upstream import failed_job_value
from selfsup.errors import UserError
from selfsup.evaluation.stats import Interval
from selfsup.reliability import stop
from selfsup.results.summary import DEFINITIONS, read_summaries, shown_path, summary_table, value
from selfsup.results.verdict import save_verdict, verdict_lines

CLAIMED: list = []  # (sweep dir, the folders claiming it made) of this process's sweep, once on_multirun_start ran


def take_back_claim() -> None:
    """A sweep refused after on_multirun_start (the Optuna sweeper checks its settings when Hydra builds it, after
    the callbacks' start): the lock it took and the empty folders claiming made are taken back, the folder as it
    was (a lock that was there before stays)."""
    from selfsup.run.run_dir import LOCK, release, remove_empty

    for sweep_dir, had_lock, created in CLAIMED:
        release(sweep_dir)
        if not had_lock:
            (sweep_dir / LOCK).unlink(missing_ok=True)
        remove_empty(created)
    CLAIMED.clear()


class SweepSummary(Callback):
    """Hydra callback: one line per finished job, and the table of all jobs when the sweep ends (or when a stop
    signal ends it early: then the jobs not run, and how to run them)."""

    def __init__(self) -> None:
        self.jobs: list[list[str]] = []  # a grid sweep's jobs, in order (a study samples its own)

    def on_multirun_start(self, config, **kwargs) -> None:
        """Tell the jobs which keys this sweep varies (for W&B names and tags); make the sweep dir
        (Optuna's SQLite study is created there before any job runs). A dir that already holds a
        sweep is refused before Hydra writes anything into it."""
        sweep_dir = Path(config.hydra.sweep.dir)
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = {k: v for k, v in (config.hydra.sweeper.get("params") or {}).items()}
        overrides = list(config.hydra.overrides.task) + [f"{k}={v}" for k, v in params.items()]
        parsed = OverridesParser.create().parse_overrides(overrides)
        # through the environment, not a module global: it reaches the jobs a launcher starts in other processes
        # (submitit, local or SLURM), and a job's own config holds only its values, not which of them are swept
        os.environ["SELFSUP_SWEPT"] = ",".join(sorted({o.get_key_element() for o in parsed if o.is_sweep_override()}))
        stop.clear()
        if "Optuna" not in str(config.hydra.sweeper.get("_target_", "")):  # (a study checks its own corners)
            self.jobs = job_overrides(parsed)
            check_jobs(self.jobs)  # before anything is written
        from selfsup.run.run_dir import LOCK, claim, own

        had_lock = (sweep_dir / LOCK).exists()
        created = [p for p in [sweep_dir, *sweep_dir.parents] if not p.exists()]  # what claiming it makes
        try:  # one sweep at a time in a sweep dir (two launched in the same second share the default one)
            claim(sweep_dir)
        except UserError as err:
            print(f"error: {err}".replace("hydra.run.dir", "hydra.sweep.dir"), file=sys.stderr)
            raise SystemExit(2) from None
        if any(p.is_dir() or p.name == "optuna.db" for p in sweep_dir.iterdir()):
            if not had_lock:  # the refused sweep leaves the folder as it was
                (sweep_dir / LOCK).unlink(missing_ok=True)
            print(
                f"error: hydra.sweep.dir={sweep_dir} already holds a sweep: nothing was overwritten; pick a "
                f"new hydra.sweep.dir (or leave it out for a fresh timestamped one)",
                file=sys.stderr,
            )
            raise SystemExit(2)
        own(sweep_dir)
        CLAIMED[:] = [(sweep_dir, had_lock, created)]

    def on_job_start(self, config, **kwargs) -> None:
        """A stop signal between two jobs: this one is not run (its fresh folder, only Hydra's record, removed)."""
        if config.hydra.mode.name != "MULTIRUN" or not stop.received:
            return
        job_dir = Path(config.hydra.runtime.output_dir)
        if job_dir.is_dir() and all(p.name == HYDRA_DIR or p.suffix == ".log" for p in job_dir.iterdir()):
            shutil.rmtree(job_dir, ignore_errors=True)
        self.stop_sweep(config, int(config.hydra.job.num))

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.core.utils import JobStatus

        if config.hydra.mode.name != "MULTIRUN":
            return
        job_dir = Path(config.hydra.runtime.output_dir)
        error = job_dir / ERROR
        if job_return.status != JobStatus.COMPLETED:
            what = f"FAILED: {failed_job_value(job_return)}"
        elif error.is_file():
            what = "FAILED: " + error.read_text().strip().removeprefix("error: ")
        else:
            summary = RunSummary.read(job_dir).values
            status, by = summary.get("status"), summary.get("preempted_by")
            parts = [f"{status} by {by}" if by else status] if status not in ("finished", None) else []
            parts += [
                f"{name} {v if isinstance(v, Interval) else f'{v:.3f}'}"
                for name, v in (
                    ("val loss", summary.get("val_loss")),
                    ("fixed loss", value(summary, FIXED_LOSS)),
                    ("held-out bpb", value(summary, HELDOUT_BPB)),
                    ("pairs acc", value(summary, PAIRS)),
                    ("probe acc", value(summary, PROBE)),
                )
                if v is not None
            ]
            what = ", ".join(parts) or "finished"
        swept = set(os.environ.get("SELFSUP_SWEPT", "").split(","))
        label = " ".join(
            f"{o.split('=', 1)[0]}={shown(o.split('=', 1)[1])}"
            for o in config.hydra.overrides.task
            if override_key(o) in swept
        )
        line = f"[job {config.hydra.job.num}] {label}: {what}  ({shown_path(job_dir)})"
        print(textwrap.fill(line, 100, subsequent_indent="    ", break_on_hyphens=False), flush=True)
        if stop.received:
            self.stop_sweep(config, int(config.hydra.job.num) + 1)

    def on_multirun_end(self, config, **kwargs) -> None:
        rows = read_summaries(Path(config.hydra.sweep.dir))
        if rows:
            raise SystemExit(self.sweep_end(config, rows))

    def sweep_end(self, config, rows: list[dict]) -> int:
        """The table, the verdict (verdict.json), where the outputs are, and each job that did not finish with its
        status and what to do; the sweep's exit status (1 when a job failed, was preempted or interrupted)."""
        sweep_dir = shown_path(config.hydra.sweep.dir)
        print(summary_table(rows))
        print(textwrap.fill(DEFINITIONS, 100))
        print("\n".join(verdict_lines(rows)))
        save_verdict(Path(config.hydra.sweep.dir), rows)
        unfinished = [r for r in rows if r.get("status") not in ("finished", "pruned")]  # pruned: Optuna stopped it
        wandb_dirs = [r["wandb_dir"] for r in rows if r.get("wandb_dir")]
        print(f"Sweep outputs: {sweep_dir}\n  report: selfsup-report {sweep_dir}")
        if wandb_dirs:
            print(f"W&B offline runs: {len(wandb_dirs)}\n  upload: wandb sync {sweep_dir}/*/wandb/offline-run-*")
        statuses = [r.get("status") or "failed" for r in unfinished]
        for r, status in zip(unfinished, statuses):
            if status in ("preempted", "interrupted"):
                print(f"{status}: {shown_path(r['run_dir'])}: continue it with selfsup-train resume={r['run_dir']}")
            else:
                print(f"failed: {shown_path(r['run_dir'])}: {r.get('error')}")
        counts = Counter(statuses)
        if counts:
            print(", ".join(f"{n} of {len(rows)} jobs {status}" for status, n in counts.items()), file=sys.stderr)
        return 1 if counts else 0

    def stop_sweep(self, config, first_not_run: int) -> None:
        """A stop signal reached the sweep: the jobs so far summed up, the jobs not run named with the command
        that runs each (into this sweep's folder), and the sweep ends with 128 + the signal's number."""
        rows = read_summaries(Path(config.hydra.sweep.dir))
        if rows:
            self.sweep_end(config, rows)
        name = stop.received or "SIGTERM"
        left = self.jobs[first_not_run:]
        print(f"stopped by {name}: no further job was started", file=sys.stderr)
        if left:
            sweep_dir = Path(config.hydra.runtime.output_dir).parent
            print(f"{len(left)} of {len(self.jobs)} jobs not run; each runs into this sweep with:", file=sys.stderr)
            for number, overrides in enumerate(left, start=first_not_run):
                words = [*overrides, "hydra.mode=RUN", f"hydra.run.dir={sweep_dir / str(number)}"]
                print(f"  selfsup-train {' '.join(shlex.quote(w) for w in words)}", file=sys.stderr)
        elif not self.jobs:  # a study: its sampler picks the next trials
            study = Path(config.hydra.sweep.dir) / "optuna.db"
            print(f"continue the study: the same command with hydra.sweeper.storage=sqlite:///{study}", file=sys.stderr)
        raise SystemExit(128 + signal.Signals[name].value)


def job_overrides(parsed) -> list[list[str]]:
    """Every job's overrides of a grid sweep (the cartesian product of its sweep overrides, as Hydra's basic
    sweeper runs them)."""
    import itertools

    choices = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override() else [o.input_line]
        for o in parsed
    ]
    return [list(job) for job in itertools.product(*choices)]


def check_jobs(jobs: list[list[str]], label: str = "job") -> None:
    """Every job's settings, composed and checked before the first job starts: one bad value refuses the
    sweep in one line (exit 2), naming the job, instead of failing after the jobs before it ran."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from selfsup.run.build import init_source, settle, with_init
    from selfsup.run.checks import config_error_line
    from selfsup.run.continued import SIBLING, check_sibling

    def family_of(job: list[str]) -> str:
        return compose(config_name="train", overrides=job).architecture.name

    for number, overrides in enumerate(jobs):
        try:
            cfg = compose(config_name="train", overrides=overrides)
            source = init_source(cfg)
            if source and source.startswith(SIBLING):  # an earlier job's run dir, which does not exist yet
                check_sibling(source, overrides, jobs[:number], family_of)
                cfg.init["from"] = None
            settle(with_init(cfg), overrides)
        except (HydraException, OmegaConfBaseException) as err:
            problem = config_error_line(err)
        except UserError as err:
            problem = str(err)
        else:
            continue
        swept = " ".join(overrides)
        print(
            f"error: {label} {number} of {len(jobs)} ({swept}): {problem}: no job was run; fix the sweep's values",
            file=sys.stderr,
        )
        raise SystemExit(2)
