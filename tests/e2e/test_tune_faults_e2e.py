"""`selfsup-train sweeps=tune` processes meeting the faults of docs/failures.md: bad settings, a bad search space
and a corrupt study database refused in one line with nothing left behind; a sweep killed with kill -9
during a trial, whose trial its continuation fails and reruns with the same parameters; two continuations
of one study at once, sampling distinct points. (The same through the sweeper's own code, faster:
tests/test_tune_faults.py.)"""

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import forked
import pytest

# a trial in seconds: the tiny model, no evaluation and no logger; the study minimizes val/loss
FAST = [
    "debug=tiny",
    "eval=none",
    "logger=none",
    "optimized_metric=val/loss",
    "hydra.sweeper.direction=minimize",
    "hydra.sweeper.pruner=none",
    "hydra.sweeper.heartbeat_interval=1",
    "hydra.sweeper.grace_period=2",
]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}


def tune(cache_dir, sweep_dir, *overrides) -> list[str]:
    return [
        "selfsup-train",
        "-m",
        "sweeps=tune",
        *FAST,
        f"data.cache_dir={cache_dir}",
        f"hydra.sweep.dir={sweep_dir}",
        *overrides,
    ]


def run(cache_dir, sweep_dir, *overrides) -> subprocess.CompletedProcess:
    return forked.run(
        tune(cache_dir, sweep_dir, *overrides), capture_output=True, text=True, env=ENV, timeout=600, check=False
    )


def refused_in_one_line(out: subprocess.CompletedProcess, starts: str) -> None:
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
    assert out.stderr.startswith(starts), out.stderr


def nothing_blocks(sweep_dir: Path) -> None:
    """A refused sweep leaves its sweep dir as it was: not made (no job folder, no optuna.db, no .selfsup.lock)."""
    assert not sweep_dir.exists(), sorted(p.name for p in sweep_dir.iterdir())


# three sweeps refused (~8 s); the default suite: tests/test_tune_faults.py refuses bad search spaces in-process
@pytest.mark.slow
@pytest.mark.parametrize(
    "key,expression",
    [
        ("objective.mask_rate", "interval(0.5, 0.1)"),
        ("optim.lr", "tag(log, interval(0, 1))"),
        ("objective.mask_rate", "0.3"),
    ],
)
def test_a_bad_search_space_is_refused_in_one_line_leaving_no_study(cache_dir, tmp_path, key, expression):
    pytest.importorskip("optuna")
    out = run(cache_dir, tmp_path / "sweep", f"hydra.sweeper.params={{{key}: '{expression}'}}")
    refused_in_one_line(out, f"error: hydra.sweeper.params.{key}={expression}: ")
    nothing_blocks(tmp_path / "sweep")


@pytest.mark.slow  # the default suite: tests/test_tune_faults.py, in-process
def test_nonsensical_n_trials_is_refused_in_one_line(cache_dir, tmp_path):
    pytest.importorskip("optuna")
    out = run(cache_dir, tmp_path / "sweep", "hydra.sweeper.n_trials=-3")
    refused_in_one_line(out, "error: hydra.sweeper.n_trials=-3: use at least 1 trial")
    nothing_blocks(tmp_path / "sweep")
    (tmp_path / "empty").mkdir()  # a folder that was there: left empty (before: .selfsup.lock in it)
    out = run(cache_dir, tmp_path / "empty", "hydra.sweeper.n_trials=0")
    refused_in_one_line(out, "error: hydra.sweeper.n_trials=0: use at least 1 trial")
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.slow  # the default suite: tests/test_tune_faults.py, in-process
def test_a_corrupt_study_database_is_refused_in_one_line(cache_dir, tmp_path):
    pytest.importorskip("optuna")
    db = tmp_path / "optuna.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    out = run(cache_dir, tmp_path / "more", f"hydra.sweeper.storage=sqlite:///{db}")
    refused_in_one_line(
        out, f"error: hydra.sweeper.storage=sqlite:///{db}: cannot read the study database (file is not a database)"
    )
    assert db.read_bytes()[:16] == b"SQLite format 3\x00" and db.stat().st_size == 16 + 256 * 8
    nothing_blocks(tmp_path / "more")


def trial_states(db: Path) -> list[str]:
    """The trials' states in optuna.db, read-only (the sweep is writing it)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as connection:
            return [state for (state,) in connection.execute("SELECT state FROM trials ORDER BY number")]
    except sqlite3.Error:  # not created yet
        return []


@pytest.mark.slow  # two sweeps (~40 s); tests/test_tune_faults.py kills a sweep's own code in a few seconds
def test_a_sweep_killed_during_a_trial_is_rerun_with_the_same_params_when_the_study_continues(
    cache_dir, tmp_path, capsys
):
    optuna = pytest.importorskip("optuna")
    from optuna.trial import TrialState

    from selfsup.report import main as report

    first = tmp_path / "first"
    sweep = forked.Popen(
        tune(cache_dir, first, "hydra.sweeper.n_trials=2", "trainer.max_steps=100000"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while not (trial_states(first / "optuna.db") == ["RUNNING"] and (first / "0" / ".hydra").is_dir()):
            assert sweep.poll() is None and time.time() < deadline, "the sweep ended before its trial ran"
            time.sleep(0.5)
        time.sleep(3)  # the job trains
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait(timeout=60)
    storage = f"sqlite:///{first / 'optuna.db'}"
    [killed] = optuna.load_study(study_name="tune", storage=storage).trials
    assert killed.state == TrialState.RUNNING
    with pytest.raises(SystemExit):
        report([str(first), "--format", "md"])
    out = capsys.readouterr().out
    assert (
        "Optuna study tune (minimize the jobs' optimized_metric): 1 trials, 0 complete, 0 pruned, 0 failed, 1 running."
        in out
        and "Running: trial 0: still running, or its sweep was killed" in out
    )
    time.sleep(2.5)  # hydra.sweeper.grace_period=2 passes with no heartbeat
    more = run(cache_dir, tmp_path / "more", "hydra.sweeper.n_trials=1", f"hydra.sweeper.storage={storage}")
    assert more.returncode == 0, more.stderr[-3000:]
    assert "trial 0 had no heartbeat for 2 s (its sweep was killed): failed" in more.stdout + more.stderr
    trials = optuna.load_study(study_name="tune", storage=storage).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    retry = trials[1]
    assert retry.params == killed.params and retry.system_attrs["failed_trial"] == 0
    assert retry.user_attrs["run_dir"] == str(first / "1") and retry.user_attrs["status"] == "finished"
    with pytest.raises(SystemExit):
        report([str(first), "--format", "md"])  # the continuation wrote into the study's sweep dir
    assert "2 trials, 1 complete, 0 pruned, 1 failed, 0 running." in capsys.readouterr().out


@pytest.mark.slow  # three sweeps (~60 s); tests/test_tune_faults.py asks in the two processes' order in seconds
def test_two_continuations_at_once_run_distinct_points(cache_dir, tmp_path):
    optuna = pytest.importorskip("optuna")
    first = run(cache_dir, tmp_path / "first", "hydra.sweeper.n_trials=1")
    assert first.returncode == 0, first.stderr[-3000:]
    storage = f"sqlite:///{tmp_path / 'first' / 'optuna.db'}"
    both = [
        forked.Popen(
            tune(cache_dir, tmp_path / name, "hydra.sweeper.n_trials=1", f"hydra.sweeper.storage={storage}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for name in "ab"
    ]
    for sweep in both:
        _, err = sweep.communicate(timeout=600)
        assert sweep.returncode == 0, err[-3000:]
    trials = optuna.load_study(study_name="tune", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 3, [t.params for t in trials]
    assert sorted(p.name for p in (tmp_path / "first").iterdir() if p.is_dir()) == ["0", "1", "2"]
