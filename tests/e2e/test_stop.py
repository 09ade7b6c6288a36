"""A stop signal stops: a preempted run skips the evaluation, a signal during the evaluation ends it at the next
boundary, and a sweep that received one starts no further job and names the command of each job it did not run."""

import json
import os
import shlex
import signal
import subprocess
import time

import forked
import pytest
from conftest import TINY

ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}


def wait_for(path, proc, timeout=120):
    deadline = time.time() + timeout
    while not path.is_file():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.time() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_sigterm_in_the_final_evaluation_stops_it_at_a_boundary(cache_dir, tmp_path):
    run = tmp_path / "run"
    # a model shape of its own: its random-init baselines are not cached, so the final evaluation takes seconds
    proc = forked.Popen(
        ["selfsup-train", *TINY, "logger=csv", "objective=clm", "architecture.d_model=40", "trainer.max_steps=4"]
        + ["trainer.val_check_interval=100", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )
    wait_for(run / "checkpoints" / "last.ckpt", proc)  # written at step 4, the last, before the final validation
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output[-3000:]
    assert "SIGTERM: the evaluation stopped in " in output and "none of it is kept" in output, output[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["preempted_by"], summary["steps"]) == ("preempted", "SIGTERM", 4)
    assert not summary["eval"] and "verdict" not in summary  # nothing of the stopped evaluation is reported
    assert not (run / "outcomes.npz").exists()
    # (resume=RUN from a checkpoint of the last step runs the final validation and evaluation: tests/e2e/test_faults.py)


@pytest.mark.slow  # a sweep stopped by SIGTERM (~14 s); the default suite: SIGTERM in the final evaluation, below
def test_sigterm_stops_a_sweep_which_names_the_jobs_not_run_and_their_commands_run(cache_dir, tmp_path):
    sweep = tmp_path / "multirun"
    proc = forked.Popen(
        ["selfsup-train", "-m", *TINY, "logger=csv", "eval.tasks=null", "eval.fixed=null"]
        + ["objective=clm,mlm,span_corruption"]
        + ["trainer.max_steps=100000"]
        + ["trainer.val_check_interval=100000", f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    wait_for(sweep / "0" / "csv" / "metrics.csv", proc)  # job 0 is training
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0"]  # no further job started
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["status"] == "preempted" and not summary["eval"]  # the preempted job skipped its evaluation
    steps = summary["steps"]
    # one status everywhere: the job's line, the table's row, the footer, the exit status (the verdict: below)
    assert "[job 0] objective=clm: preempted by SIGTERM" in out
    assert f"preempted: {sweep / '0'}: continue it with selfsup-train resume={sweep / '0'}" in out
    assert "1 of 1 jobs preempted" in err and "failed" not in out + err
    assert "stopped by SIGTERM: no further job was started" in err and "2 of 3 jobs not run" in err
    commands = [shlex.split(line)[1:] for line in err.splitlines() if line.startswith("  selfsup-train ")]
    assert [c[c.index("hydra.mode=RUN") + 1] for c in commands] == [f"hydra.run.dir={sweep / n}" for n in "12"]
    assert "objective=mlm" in commands[0] and "objective=span_corruption" in commands[1]
    # each runs into the sweep (fewer steps, and W&B on here), joins its W&B group, and rewrites verdict.json
    done = forked.run(
        ["selfsup-train", *commands[0], "trainer.max_steps=3", "logger=wandb"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((sweep / "1" / "summary.json").read_text())["status"] == "finished"
    group = json.loads((sweep / "1" / "wandb-identity.json").read_text())[1]
    assert group == f"sweep-{sweep.parent.name}-{sweep.name}"
    verdict = json.loads((sweep / "verdict.json").read_text())
    assert str(sweep / "1") in verdict["runs"] and "mlm" in verdict["verdict"]
    assert f"left out: clm (0): preempted by SIGTERM at step {steps}" in verdict["verdict"]
