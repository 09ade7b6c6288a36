"""selfsup-train: the story of a run, in order.

compose   Hydra composes conf/ and the command line (main, hydra_main); selfsup.run.run_dir
          checks and claims the run dir, and a resume's settings, before Hydra writes into it
check     the settings and the objective, before any data is read: selfsup.run.build.settle, the door that
          turns the composed config into the run's RunSettings
build     data, objective, evaluation, model, optimizer, LightningModule (selfsup.run.build)
fit       Lightning's Trainer with the lab's callbacks and loggers (selfsup.run.lifecycle.fit, which records how
          the run ended whatever happens)
summarise summary.json (selfsup.common.names.RunSummary), the table, the W&B run files (hydra_main)

selfsup-train objective=clm trainer.max_steps=100
selfsup-train -m objective=mlm,clm,span_corruption
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import traceback
from functools import partial
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from selfsup.common.names import (
    ERROR,
    MULTIRUN,
    SUMMARY,
    TRACEBACK,
    VAL_ACCURACY,
    VAL_LOSS,
    VAL_PERPLEXITY,
)
from selfsup.errors import UserError, error_line
from selfsup.reliability import stop
from selfsup.results.verdict import VERDICT
from selfsup.run.build import (
    settle,
    with_init,
)
from selfsup.run.checks import config_error_line, null_part
from selfsup.run.lifecycle import fit
from selfsup.run.run_dir import join_sweep, requeue_checkpoint, resumed_config
from selfsup.run.schema import config_dir, register
from selfsup.run.settings import RunSettings
from selfsup.training.distributed import launched_rank

log = logging.getLogger("selfsup")

CONF_DIR = config_dir()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    earlier_run = (run_dir / SUMMARY).exists()  # its files are never touched by a refused run
    # under torchrun or srun every rank runs this app in the same run dir (selfsup.run.schema.run_dir);
    # rank 0 owns the loggers, the summary and the error files, as with selfsup's own launch
    rank = launched_rank()
    progress = {}
    sweep = None if multirun else join_sweep(run_dir)
    if rank == 0:
        keep_secrets_out_of_records(cfg, run_dir, multirun)
    try:
        requeued = requeue_checkpoint(cfg, run_dir)
        if requeued:  # a SLURM job requeued by Lightning after SIGUSR1: same command, same run dir
            cfg.resume, cfg.ckpt_path = str(run_dir), str(requeued)
        elif cfg.resume:
            hc = HydraConfig.get()
            cfg = resumed_config(
                run_dir, list(hc.overrides.task), record=Path(hc.runtime.output_dir) / hc.output_subdir / "config.yaml"
            )
        cfg = with_init(cfg)
        if multirun:  # checked after its W&B run has started: a failed job is a failed W&B run
            settings, check = RunSettings.of(cfg), partial(settle, cfg)
        else:
            stop.clear()
            settings, check = settle(cfg), None
        summary = fit(settings, run_dir, rank_zero=rank == 0, loggers_first=multirun, progress=progress, check=check)
    except SystemExit:
        if multirun and stop.received:  # an interrupted job: the sweep's callback stops the sweep at its end
            return float("nan")
        raise
    except Exception as err:
        user_error = isinstance(err, UserError)
        message = f"error: {error_line(err)}" if user_error else f"error: {type(err).__name__}: {err}"
        if rank == 0 and (not earlier_run or progress.get("training")):  # a refused resume changes nothing
            with contextlib.suppress(OSError):  # a full disk: the message still reaches the console
                (run_dir / ERROR).write_text(message + "\n")
        if multirun:
            # a failing job does not end the sweep: it is recorded (error.txt, summary.json, a failed
            # W&B run). The basic sweeper gets NaN and goes on; Optuna's sweeper needs the exception
            # to record a failed trial (it cannot tell NaN); it stops the study once failed trials
            # exceed hydra.sweeper.max_failure_rate (default 0: the first failure).
            if not user_error:
                with contextlib.suppress(OSError):
                    (run_dir / TRACEBACK).write_text(traceback.format_exc())
            log.error(message)
            if "optuna" in str(HydraConfig.get().sweeper.get("_target_", "")):
                raise
            return float("nan")
        if user_error:
            print(message, file=sys.stderr)
            raise SystemExit(2) from None
        raise
    if not multirun and rank == 0:
        from selfsup.results.summary import run_lines

        print("\n".join(run_lines(summary)))
        if sweep is not None:  # a job of a sweep run on its own (resumed, or not run by a stopped sweep)
            from selfsup.results.summary import read_summaries, shown_path
            from selfsup.results.verdict import save_verdict

            save_verdict(sweep, read_summaries(sweep))
            print(
                f"the sweep's verdict, with this run: {shown_path(sweep / VERDICT)} (selfsup-report {shown_path(sweep)})"
            )
    return optimized_value(settings, summary)


def keep_secrets_out_of_records(cfg: DictConfig, run_dir: Path, multirun: bool) -> None:
    """A secret given on the command line (`+logger.api_key=…`, a password in a URL) is redacted in the records
    Hydra wrote of the command (docs/failures.md): secrets belong in the environment (WANDB_API_KEY, HF_TOKEN)."""
    from selfsup.reliability.redact import redact_files, register_secrets

    register_secrets(OmegaConf.to_container(cfg, resolve=False))
    hc = HydraConfig.get()
    records = run_dir / str(hc.output_subdir) if hc.output_subdir else None
    files = [records / name for name in ("config.yaml", "overrides.yaml", "hydra.yaml")] if records else []
    redact_files(files + ([Path(hc.sweep.dir) / MULTIRUN] if multirun else []))


def optimized_value(settings: RunSettings, summary: dict) -> float | None:
    """The value of optimized_metric in a run summary (what a sweep's job returns to its sweeper)."""
    values = {
        VAL_LOSS: summary.get("val_loss"),
        VAL_PERPLEXITY: summary.get("val_perplexity"),
        VAL_ACCURACY: summary.get("val_accuracy"),
        **(summary.get("eval") or {}),
    }
    return values.get(settings.optimized_metric)


def composed(choices: list[str]) -> DictConfig:
    """The config that group choices (`eval=none`, `experiment=compare`) compose, without the command's settings."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=[c for c in choices if not c.startswith("hydra")])


def main() -> None:
    register()
    logging.raiseExceptions = False  # a log file that cannot be written (a full disk): no traceback per line
    if not CONF_DIR.is_dir():
        sys.exit(
            f"error: config folder {CONF_DIR} not found: reinstall selfsup (pip install .), or set "
            f"SELFSUP_CONF to the conf/ folder"
        )
    # Hydra prints a config error over several lines (and exits 1) unless HYDRA_FULL_ERROR is set,
    # in which case it raises: catch it here and give one line, as for every other bad input
    wants_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        hydra_main()
    except BrokenPipeError:  # `selfsup-train --help | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
    except Exception as err:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if wants_trace:
            raise
        if isinstance(err, UserError):  # re-raised by a job for Optuna's sweeper
            print(f"error: {error_line(err)}", file=sys.stderr)
            raise SystemExit(2) from None
        null = null_part(err, sys.argv[1:], composed)
        if null is not None:  # a setting inside a part the config turns off: Hydra cannot merge into null
            print(f"error: {null}", file=sys.stderr)
            raise SystemExit(2) from None
        frames = traceback.extract_tb(err.__traceback__)
        hydra_cli = isinstance(err, ValueError) and f"{os.sep}hydra{os.sep}" in frames[-1].filename  # e.g. -m --cfg
        in_job = any(frame.name == hydra_main.__name__ for frame in frames)  # raised once a job had started
        if in_job or not (hydra_cli or isinstance(err, (HydraException, OmegaConfBaseException))):
            raise  # a bug, not a config mistake: the whole traceback
        print(f"error: {config_error_line(err)}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        # every record is written and the exit status decided: a SIGTERM now (a second one after a preemption)
        # must not kill the interpreter while it shuts down (Python then restores the default action), which
        # would exit -15 against a summary.json that says `preempted`
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


if __name__ == "__main__":
    main()
