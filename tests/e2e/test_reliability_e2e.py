"""Reliability through selfsup-train: preemption, non-finite losses, bad checkpoints, W&B trouble."""

import json
import os
import signal
import subprocess
import time

import forked
import pytest
from conftest import TINY, wandb_summary


@pytest.mark.slow  # in-process in tests/test_reliability.py; the exit path: tests/e2e/test_faults.py
def test_sigterm_saves_a_checkpoint_and_the_run_resumes(cache_dir, tmp_path):
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = forked.Popen(
        [
            "selfsup-train",
            *TINY,
            "trainer.max_steps=100000",
            "trainer.val_check_interval=1000",
            f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={run}",
            "objective=clm",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.time() + 120
    while not list((run / "csv").glob("metrics.csv")) and time.time() < deadline:
        time.sleep(0.5)  # training has logged: it is past the first steps
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["preempted_by"] == "SIGTERM"
    stopped_at = summary["steps"]
    assert 0 < stopped_at < 100000 and (run / "checkpoints" / "last.ckpt").is_file()
    resumed = forked.run(
        ["selfsup-train", f"resume={run}", f"trainer.max_steps={stopped_at + 3}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == stopped_at + 3


@pytest.mark.slow  # both policies are also tested in-process in tests/test_reliability.py
@pytest.mark.parametrize(
    "policy,words",
    [("stop", ["loss became", "last.ckpt"]), ("skip", ["3 times in a row, more than the 2 skips allowed"])],
)
def test_non_finite_loss_policies(train, tmp_path, policy, words):
    # a learning rate of 1e30 makes the loss non-finite after the first update
    out = train(
        "objective=clm",
        "optim.lr=1e30",
        "optim.warmup_steps=0",
        "optim.grad_clip=0",
        "trainer.checkpoint_every_n_steps=1",
        f"trainer.nonfinite={policy}",
        "trainer.nonfinite_max_skips=2",
    )
    text = out.stdout + out.stderr
    assert out.returncode == 2 and "Traceback" not in text, text[-2000:]
    for w in words:
        assert w in text, text[-2000:]
    assert wandb_summary(tmp_path / "run")["state"] == "failed"


@pytest.mark.slow  # also tested in-process in tests/test_reliability.py
def test_truncated_checkpoint_is_refused_clearly(train, tmp_path):
    assert train("objective=clm", run_dir=tmp_path / "a").returncode == 0
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:2000])
    out = train("objective=clm", f"ckpt_path={last}", run_dir=tmp_path / "b")
    text = out.stdout + out.stderr
    assert out.returncode == 2 and "Traceback" not in text and "last.ckpt" in text, text[-2000:]


@pytest.mark.slow  # also tested in-process in tests/test_reliability.py
def test_resume_with_another_objective_is_refused_with_the_difference(train, tmp_path):
    assert train("objective=clm", run_dir=tmp_path / "a").returncode == 0
    out = train(
        "objective=prefix_lm", f"ckpt_path={tmp_path / 'a' / 'checkpoints' / 'last.ckpt'}", run_dir=tmp_path / "b"
    )
    text = out.stdout + out.stderr
    assert out.returncode == 2 and "Traceback" not in text, text[-2000:]
    assert "objective.name is clm in the checkpoint but prefix_lm now" in text


def test_wandb_online_without_a_key_falls_back_to_offline_and_secrets_are_redacted(train, tmp_path):
    key = "0123456789abcdef0123456789abcdef01234567"
    out = train(
        "objective=clm",
        "logger.mode=online",
        f"+logger.api_key={key}",
        f"logger.tags=[{key}]",
        # an empty WANDB_MODE is unset (W&B's own settings refused "": no W&B run)
        env={"HOME": str(tmp_path), "NETRC": str(tmp_path / "none"), "WANDB_MODE": ""},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no API key" in out.stdout + out.stderr
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    recorded = json.dumps(wandb_summary(tmp_path / "run"))
    assert key not in recorded and '"api_key": "***"' in recorded
    for path in (tmp_path / "run").rglob("*"):  # nor any output, checkpoint or log, nor Hydra's record of the command
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert "***" in (tmp_path / "run" / ".hydra" / "config.yaml").read_text()


@pytest.mark.slow
def test_a_requeued_slurm_job_resumes_by_itself(train, tmp_path):
    """Lightning saves hpc_ckpt_<n>.ckpt in the run dir on SIGUSR1 under SLURM and requeues the same
    command; that command then continues from it instead of refusing the run dir."""
    run = tmp_path / "run"
    assert train("objective=clm", run_dir=run).returncode == 0
    (run / "hpc_ckpt_1.ckpt").write_bytes((run / "checkpoints" / "last.ckpt").read_bytes())
    again = train("objective=clm", "trainer.max_steps=9", run_dir=run, env={"SLURM_JOB_ID": "4242"})
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 9
