"""Fault injection: what an attack on the lab broke (non-finite steps, resume overrides, two runs in one dir,
damaged caches, kills before the first checkpoint, refused resumes, signals, full disks, secrets).
Each case failed before its fix; every suggested command is run."""

import csv
import json
import math
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import forked
import pytest
import torch
from conftest import TINY

QUICK = ["logger=csv", "eval.fixed=null", "eval.pairs=null", "eval.tasks=null"]  # eval off (TINY sizes its probe)


def one_error_line(out) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return lines[-1]


def snapshot(folder: Path) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".selfsup.lock"}


def suggested(line: str, after: str) -> list[str]:
    """The selfsup-train command a message suggests after `after`, as arguments."""
    command = line.split(after, 1)[1].split(", or ")[0].strip()
    assert command.startswith("selfsup-train "), line
    return shlex.split(command)[1:]


# two runs (~8 s); the default suite: the non-finite guard in a real run, in-process (tests/test_reliability.py)
@pytest.mark.slow
def test_non_finite_gradients_never_reach_the_weights_and_the_suggested_command_trains(train, tmp_path):
    run = tmp_path / "run"
    out = train(*QUICK, "optim.lr=1e6", "trainer.max_steps=12", "trainer.val_check_interval=2", run_dir=run)
    assert out.returncode == 2
    line = one_error_line(out)
    assert (
        "(the weights were not updated)" in line
        and f"the last checkpoint is {run / 'checkpoints' / 'last.ckpt'}" in line
    )
    for ckpt in (run / "checkpoints").glob("*.ckpt"):  # no checkpoint holds NaN or inf
        weights = torch.load(ckpt, weights_only=True, map_location="cpu")["state_dict"]
        assert all(torch.isfinite(w).all() for w in weights.values()), ckpt
    # its weights already give NaN: the message says start again, with a lower rate; that command trains
    args = suggested(line, "start again with a lower learning rate: ")
    assert "optim.lr=0.001" in args
    again = train(
        *[a for a in args if not a.startswith(("data.cache_dir=", "hydra.run.dir="))],
        tiny=False,
        run_dir=tmp_path / "again",
    )
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.mark.slow  # three runs; the default suite resumes runs bitwise (test_resume.py) and refuses in-process
def test_resume_applies_a_new_learning_rate_and_records_it(train, tmp_path):
    run = tmp_path / "run"
    assert train(*QUICK, run_dir=run).returncode == 0  # 6 steps, lr 1e-3
    before = snapshot(run)
    # finished at its max_steps: refused, and the run is exactly as it was (what RunDirGuard checks, in-process)
    from selfsup.errors import UserError
    from selfsup.run.run_dir import check_resume

    with pytest.raises(UserError, match="nothing to continue, the run is unchanged") as finished:
        check_resume(run, [f"resume={run}"])
    # resuming with other objective settings: refused
    with pytest.raises(UserError, match="cannot change objective.mask_rate"):
        check_resume(run, [f"resume={run}", "trainer.max_steps=9", "objective.mask_rate=0.3"])
    assert snapshot(run) == before
    # the suggested command continues; the new learning rate is used and recorded
    args = suggested(str(finished.value), "raise the limit, e.g. ")
    out = train(*QUICK, *args, "optim.lr=5e-3", "optim.lr_decay_steps=1000", "optim.warmup_steps=2")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [r for r in csv.DictReader(open(run / "csv" / "resume-1" / "metrics.csv")) if r.get("train/lr")]
    lrs = [float(r["train/lr"]) for r in rows]
    assert lrs and all(4e-3 < lr <= 5e-3 for lr in lrs), lrs  # 5e-3 on a long cosine, not 1e-3's schedule
    [record] = (run / ".hydra").glob("resume-*/config.yaml")
    assert "lr: 0.005" in record.read_text() and "mask_rate: 0.15" in record.read_text()  # what it trained with
    assert json.loads((run / "summary.json").read_text())["steps"] == 12


@pytest.mark.slow  # the default suite: tests/test_run_dir.py locks a dir from another process
def test_two_runs_into_one_dir_one_is_refused(cache_dir, tmp_path):
    run = tmp_path / "shared"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    args = [
        "selfsup-train",
        *TINY,
        *QUICK,
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run}",
        "trainer.max_steps=200",
        "trainer.val_check_interval=100",
    ]
    first = forked.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline, config = time.time() + 120, run / ".hydra" / "config.yaml"
    # Hydra creates the file, then writes it: read it once it holds the config (empty, it was read mid-write)
    while not (config.is_file() and b"trainer:" in config.read_bytes()) and time.time() < deadline:
        time.sleep(0.2)
    hydra_config = config.read_bytes()
    second = forked.run(args[:-2] + ["trainer.max_steps=7"], capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 2
    assert f"{run} is in use by another selfsup-train (pid {first.pid})" in one_error_line(second)
    assert (run / ".hydra" / "config.yaml").read_bytes() == hydra_config  # nothing of the first overwritten
    assert first.wait(timeout=600) == 0, first.stderr.read()[-2000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 200


@pytest.mark.slow  # the default suite: the Ctrl-C test resumes a run that has no checkpoint yet
def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(train, cache_dir, tmp_path):
    run = tmp_path / "killed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = forked.Popen(
        [
            "selfsup-train",
            *TINY,
            *QUICK,
            f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={run}",
            "trainer.max_steps=100000",
            "trainer.val_check_interval=100000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.time() + 120
    while not (run / "csv" / "hparams.yaml").is_file() and time.time() < deadline:  # training has begun
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not list((run / "checkpoints").glob("*.ckpt")) if (run / "checkpoints").exists() else True
    from selfsup.errors import UserError
    from selfsup.run.run_dir import check_new_run_dir

    with pytest.raises(UserError, match=f"stopped before its first checkpoint.*resume={run}"):
        check_new_run_dir(run)  # starting it again names the command that works
    out = train(*QUICK, f"resume={run}", "trainer.max_steps=4", run_dir=run)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 4


# runs interrupted by signals (~25 s); the default suite: tests/test_reliability.py's SIGTERM checkpoint
@pytest.mark.slow
@pytest.mark.parametrize(
    "how,code,error",
    [
        (signal.SIGINT, 130, "interrupted (Ctrl-C)"),
        pytest.param("twice", 143, "interrupted by SIGTERM", marks=pytest.mark.slow),
    ],
)
def test_interrupted_runs_say_so_and_exit_non_zero(cache_dir, tmp_path, how, code, error):
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"PYTHONFAULTHANDLER": "1"}
    slow = ["architecture.d_model=256", "architecture.n_layers=4", "data.seq_len=128", "data.batch_size=32"]
    proc = forked.Popen(
        [
            "selfsup-train",
            *TINY,
            *QUICK,
            *slow,
            f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={run}",
            "trainer.max_steps=100000",
            "trainer.val_check_interval=100000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.time() + 120
    while not (run / "csv" / "hparams.yaml").is_file() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    seen = []
    if how == "twice":  # the first SIGTERM asks for a checkpoint after the step (~1 s), the second stops at once
        proc.send_signal(signal.SIGTERM)
        for line in proc.stdout:  # sent once the first is handled (two pending signals of a kind are one)
            seen.append(line)
            if "received SIGTERM" in line or "Traceback" in line:
                break
        proc.send_signal(signal.SIGTERM)
    else:
        proc.send_signal(how)
    try:
        output = "".join(seen) + proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:  # where it hangs: faulthandler's stacks of every thread (PYTHONFAULTHANDLER)
        proc.send_signal(signal.SIGABRT)
        pytest.fail(f"still running 120 s after {how}:\n" + "".join(seen) + proc.communicate(timeout=60)[0][-6000:])
    assert proc.returncode == code, output[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["error"]) == ("interrupted", error)
    [line] = [x for x in output.splitlines() if x.startswith(f"{error}: continue the run with ")]
    args = suggested(line, f"{error}: continue the run with ")
    assert args == [f"resume={run}"]
    again = forked.run(
        ["selfsup-train", *args, "trainer.max_steps=2", "logger.wandb=false"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


@pytest.mark.slow  # the default suite: tests/test_reliability.py's SIGTERM checkpoint
def test_a_second_sigterm_after_a_preempted_run_has_written_its_records_keeps_exit_0(cache_dir, tmp_path):
    """The exit status agrees with summary.json's status. Before: the second SIGTERM, landing while the interpreter
    shut down (its handlers back to the default action), killed it: exit -15 beside status `preempted`."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = subprocess.Popen(
        ["selfsup-train", *TINY, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}", "trainer.max_steps=100000",
         "trainer.val_check_interval=100000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    deadline = time.time() + 120
    while not (run / "csv" / "metrics.csv").is_file() and time.time() < deadline:
        time.sleep(
            0.2
        )  # training under way: the CSV logger writes its first 100 steps (before: a SIGTERM at start, 143)
    proc.send_signal(signal.SIGTERM)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("run dir: "):  # the run's last lines: its records are written
            break
    time.sleep(0.3)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    output = "".join(seen) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output[-2000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "preempted"


def _mount_small_disk(path: Path, size: str) -> bool:
    path.mkdir()
    done = forked.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


@pytest.mark.slow  # the default suite: tests/test_reliability.py's full disk while writing a checkpoint
def test_a_full_disk_is_one_line_and_summary_json_stays_valid(cache_dir, tmp_path):
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_small_disk(disk, "600k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
        out = forked.run(
            [
                "selfsup-train",
                *TINY,
                "eval.fixed=null",
                "eval.pairs=null",
                "eval.tasks=null",
                f"data.cache_dir={cache_dir}",
                f"hydra.run.dir={disk / 'run'}",
                "trainer.max_steps=40",
                "trainer.val_check_interval=2",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert out.returncode == 2, out.stderr[-3000:]
        line = one_error_line(out)
        assert "disk is full" in line
        assert len([x for x in out.stderr.splitlines() if x.strip()]) <= 3, out.stderr[-3000:]  # no tracebacks
        summary = disk / "run" / "summary.json"
        assert not summary.exists() or json.loads(summary.read_text())["status"] == "failed"
        # space freed (the tmpfs grown), the command the message names finishes the run
        command = line.split("then continue: ")[1]
        assert command == f"selfsup-train resume={disk / 'run'}"
        forked.run(["mount", "-o", "remount,size=200m", str(disk)], check=True)
        again = forked.run(
            [*command.split(), "logger.wandb=false"], capture_output=True, text=True, env=env, timeout=600
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(summary.read_text())["steps"] == 40
    finally:
        forked.run(["umount", str(disk)], capture_output=True)


@pytest.mark.slow  # the default suite: test_reliability_e2e's online fallback redacts a key in every run file
def test_a_secret_is_redacted_in_the_wandb_run_files(train, tmp_path):
    run = tmp_path / "run"
    secret, token = "not-forty-hex-characters-0042", "tok-of-a-user-0099"
    out = train(
        "eval.fixed=null",
        "eval.pairs=null",
        "eval.tasks=null",
        f"+logger.my_token={token}",
        f"logger.name=run-{secret}",
        "logger.tags=[t-" + token + "]",
        run_dir=run,
        env={"WANDB_API_KEY": secret, "WANDB_MODE": "offline"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    files = [p for p in (run / "wandb").rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)
    for p in files:
        data = p.read_bytes()
        assert secret.encode() not in data and token.encode() not in data, p


@pytest.mark.slow  # a corpus with shards over 2 MiB (8 MB of text); the default suite: test_data_cache.py, in-process
def test_a_shard_overwritten_in_its_middle_stops_training_in_one_line_and_is_rebuilt(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    words = np.array(
        ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), int(rng.integers(3, 9)))) for _ in range(3000)]
    )
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("".join(" ".join(rng.choice(words, 300)) + ".\n\n" for _ in range(4000)))
    cache = tmp_path / "cache"
    args = [
        "selfsup-train",
        "debug=tiny",
        "eval=none",
        "data.source=text_files",
        f"data.paths=[{tmp_path / 'corpus'}]",
        f"data.cache_dir={cache}",
        "data.shard_chars=100000000",
        "trainer.max_steps=200",
        "data.num_workers=2",
    ]
    env = {**os.environ, "WANDB_MODE": "offline"}
    first = forked.run(
        [*args, f"hydra.run.dir={tmp_path / 'a'}", "trainer.max_steps=2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr
    [shard] = cache.glob("*/train-00000.bin")
    good = shard.read_bytes()
    assert len(good) > 4 << 20  # the warm start checks its first and last MiB only
    data = np.memmap(shard, dtype="<u2", mode="r+")
    for k in range(5):  # ids past the vocabulary, in five places of the middle
        data[len(data) // 2 + k * 100_000 :][:1000] = 65535
    data.flush()
    del data
    damaged = forked.run(
        [*args, f"hydra.run.dir={tmp_path / 'b'}"], capture_output=True, text=True, env=env, timeout=600
    )
    assert damaged.returncode == 2
    line = one_error_line(damaged)
    assert "is damaged: train-00000.bin bytes" in line and "the next start rebuilds the cache" in line
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["error"] == line.removeprefix("error: ")
    again = forked.run([*args, f"hydra.run.dir={tmp_path / 'c'}"], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    said = again.stdout + again.stderr
    assert "do not match their checksum" in said and "rebuilding it" in said
    assert shard.read_bytes() == good  # rebuilt byte-identical


@pytest.mark.slow  # a kill and a resume (~12 s); the default suite resumes bitwise (test_resume.py)
def test_a_run_killed_in_its_final_validation_validates_when_resumed(train, cache_dir, tmp_path):
    """kill -9 once last.ckpt holds the last step (the final validation and evaluation are running): the
    resume trains nothing, runs them, and reports the validation loss and the evaluation."""
    run = tmp_path / "killed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = forked.Popen(
        ["selfsup-train", *TINY, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}", "trainer.max_steps=6"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    last, deadline = run / "checkpoints" / "last.ckpt", time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if last.is_file() and torch.load(last, weights_only=True, map_location="cpu")["global_step"] == 6:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run / "summary.json").exists()  # killed before the run's end
    out = train(f"resume={run}", run_dir=run)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert math.isfinite(summary["val_loss"]) and "eval/pairs/accuracy" in summary["eval"]


@pytest.mark.slow  # two runs; the default suite resumes bitwise (test_resume.py)
def test_a_run_whose_checkpoints_were_deleted_is_not_retrained_from_step_0(train, tmp_path):
    import shutil

    run = tmp_path / "run"
    assert train(*QUICK, "trainer.max_steps=6", run_dir=run).returncode == 0
    shutil.rmtree(run / "checkpoints")
    before = snapshot(run)
    out = train(*QUICK, f"resume={run}", "trainer.max_steps=12", run_dir=run)
    assert out.returncode == 2
    line = one_error_line(out)
    assert f"resume={run}: the run trained 6 steps, but {run / 'checkpoints'} holds no checkpoint" in line
    assert snapshot(run) == before  # nothing changed: no new W&B run, no retraining
