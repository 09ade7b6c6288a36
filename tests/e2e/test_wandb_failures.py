"""W&B dying or stuck mid-run never loses training: the real wandb-core service of a real selfsup-train is
killed or frozen."""

import contextlib
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import forked
import pytest
from conftest import TINY

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the W&B service in /proc")


def wandb_core_of(pid: int) -> int | None:
    """The wandb-core service process that W&B started as a child of process pid."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"wandb-core" in (stat.parent / "cmdline").read_bytes():
                return int(stat.parent.name)
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
    return None


def wandb_service() -> int:
    """The pid of the wandb-core service this process's W&B uses (the handle selfsup.common.upstream.kill_wandb_service
    kills: wandb 0.31's)."""
    from wandb.sdk import wandb_setup

    return wandb_setup.singleton()._connection._proc._process.pid


def wait_for(condition, proc, timeout=120.0):
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


# the stuck service's timeout is also tested in-process below
@pytest.mark.parametrize(
    "fault",
    [
        pytest.param("killed", marks=pytest.mark.slow),  # in-process: the tests below
        pytest.param("frozen", marks=pytest.mark.slow),
    ],
)
def test_wandb_service_killed_or_frozen_mid_run_training_goes_on(fault, cache_dir, tmp_path):
    """killed: every W&B call then fails at once. frozen (SIGSTOP): calls are taken until the socket's
    buffer fills, and finishing the run waits for an answer that never comes, until logger.timeout."""
    run, steps = tmp_path / "run", 60 if fault == "killed" else 20  # frozen: W&B stops at the end anyway
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = forked.Popen(
        [
            "selfsup-train",
            *TINY,
            "objective=clm",
            f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={steps // 2}",
            "trainer.checkpoint_every_n_steps=5",
            "logger.timeout=5",
            f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={run}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # the W&B run has started (its files exist) and training is past step 5 (last.ckpt)
        wait_for(
            lambda: list(run.glob("wandb/offline-run-*/run-*.wandb")) and (run / "checkpoints/last.ckpt").exists(), proc
        )
        core = wandb_core_of(proc.pid)
        assert core is not None, "no wandb-core child process"
        os.kill(core, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        if fault == "frozen" and core is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(core, signal.SIGKILL)
    text = out + err
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    [folder] = run.glob("wandb/offline-run-*")
    warnings = [line for line in text.splitlines() if "W&B stopped at step" in line]
    assert len(warnings) == 1, text[-3000:]  # once
    warning = warnings[0]
    reason = "service process is gone" if fault == "killed" else "its service did not answer in 5 s and was stopped"
    assert reason in warning and "training goes on" in warning, warning
    assert f"metrics go to the CSV log in {run / 'csv'}" in warning and f"wandb sync {folder}" in warning, warning
    stopped_at = int(warning.split("W&B stopped at step ")[1].split(":")[0])
    # killed after last.ckpt of step 5 was written (a log call of the step before may still be in flight)
    assert 4 <= stopped_at < steps - 1 if fault == "killed" else stopped_at == steps - 1, warning  # frozen: at finish
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == steps, summary
    assert summary["wandb_dir"] == str(folder)
    with open(run / "csv" / "metrics.csv") as f:
        logged = [int(row["step"]) for row in csv.DictReader(f) if row["train/loss"]]
    assert logged == list(range(steps)), logged  # every step, before and after W&B died
    # what W&B wrote before it died is kept for `wandb sync` (wandb-core buffers: it may be little)
    assert list(folder.glob("run-*.wandb")) and (folder / "files").is_dir()


def test_a_dead_service_stops_the_logger_once_and_the_next_run_in_the_process_starts_afresh(
    tmp_path, monkeypatch, caplog
):
    """As in a sweep, whose jobs run one after another in one process: real wandb, offline, in this process."""
    import wandb
    from lightning.pytorch.loggers.logger import DummyExperiment

    from selfsup.run.loggers import SafeWandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    first = SafeWandbLogger(save_dir=str(tmp_path / "first"), project="p", mode="offline", csv_dir="runs/csv")
    first.log_metrics({"loss": 3.0}, step=1)
    folder = first.run_folder()
    os.kill(wandb_service(), signal.SIGKILL)
    with caplog.at_level("WARNING", logger="selfsup"):
        for step in range(2, 100):  # a write can still reach the socket before wandb notices the loss
            first.log_metrics({"loss": 2.0}, step=step)
            if first.stopped:
                break
            time.sleep(0.02)
        first.log_metrics({"loss": 1.0}, step=step + 1)
        first.log_hyperparams({"lr": 0.1})
        first.finalize("success")
        first.experiment.mark_preempting()  # as fit() calls it: a no-op now
        assert first.finish(0) == folder  # for `wandb sync`
    [warning] = [r.getMessage() for r in caplog.records if r.name == "selfsup"]  # once (wandb logs its own errors)
    assert warning.startswith(f"W&B stopped at step {step}: its service process is gone (ConnectionResetError: "), (
        warning
    )
    assert warning.endswith(
        f"); training goes on, metrics go to the CSV log in runs/csv; sync what was written with `wandb sync {folder}`"
    ), warning
    assert isinstance(first.experiment, DummyExperiment) and wandb.run is None
    second = SafeWandbLogger(save_dir=str(tmp_path / "second"), project="p", mode="offline")
    second.log_metrics({"loss": 3.0}, step=1)
    assert second.stopped is None and second.experiment is wandb.run
    assert second.finish(0) == second.run_folder() != folder


def test_a_stuck_service_times_out_a_log_call_once_and_the_next_run_starts_afresh(tmp_path, monkeypatch, caplog):
    """A frozen service takes log records until its socket's buffer is full; the call after that would wait
    for good: it is given up after `timeout` s, the service is stopped, and the logger does nothing more."""
    import wandb
    from lightning.pytorch.loggers.logger import DummyExperiment

    from selfsup.run.loggers import SafeWandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    first = SafeWandbLogger(save_dir=str(tmp_path / "first"), project="p", mode="offline", timeout=2)
    first.log_metrics({"loss": 3.0}, step=1)
    folder, core = first.run_folder(), wandb_service()
    os.kill(core, signal.SIGSTOP)
    try:
        record = {f"metric_{i}": float(i) for i in range(2000)}  # large records fill the buffer sooner
        start = time.time()
        with caplog.at_level("WARNING", logger="selfsup"):
            for step in range(2, 5000):
                first.log_metrics(record, step=step)
                if first.stopped:
                    break
            took = time.time() - start
            assert first.stopped and took < 60, (first.stopped, step, took, core, wandb_core_of(os.getpid()))
            later = time.time()
            first.log_metrics(record, step=step + 1)
            first.finalize("success")
            assert first.finish(0) == folder  # for `wandb sync`
            assert time.time() - later < 1, time.time() - later  # no more waiting
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(core, signal.SIGKILL)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "selfsup"]  # once (wandb logs its own errors)
    assert warning.startswith(
        f"W&B stopped at step {step}: TimeoutError: its service did not answer in 2 s and "
        f"was stopped; training goes on, metrics are not recorded; sync what was written "
        f"with `wandb sync {folder}`"
    ), warning
    assert isinstance(first.experiment, DummyExperiment) and wandb.run is None
    second = SafeWandbLogger(save_dir=str(tmp_path / "second"), project="p", mode="offline", timeout=2)
    second.log_metrics({"loss": 3.0}, step=1)
    assert second.stopped is None and second.experiment is wandb.run
    assert second.finish(0) == second.run_folder() != folder
