"""The faults of an Optuna study run by the selfsup_optuna sweeper (docs/failures.md), on real optuna.db files:
a trial whose sweep is killed with kill -9 is failed and retried with its parameters when the study continues
(heartbeats); two continuations at once sample distinct points, one run stays reproducible; nonsensical
settings and search spaces are refused in one line before any storage exists; the report shows a killed
sweep's study, its running trials, and says a corrupt summary.json is corrupt.
The same through `selfsup-train` processes: tests/e2e/test_tune_faults_e2e.py."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hydra_plugins.selfsup_sweeper.optuna_sweeper import SelfSupOptunaSweeper
from hydra_plugins.selfsup_sweeper.study import distributions

SPACE = {
    "objective.mask_rate": "interval(0.05, 0.5)",
    "objective.mean_span_length": "choice(2, 3, 5, 8)",
    "optim.lr": "tag(log, interval(3e-4, 1e-2))",
}  # conf/sweeps/tune.yaml's
SETTINGS = {
    "direction": "maximize",
    "study_name": "tune",
    "storage": None,
    "n_trials": 2,
    "n_jobs": 1,
    "max_failure_rate": 0.0,
    "sampler": "tpe",
    "seed": 0,
    "pruner": "none",
    "pruner_startup_trials": 3,
    "pruner_warmup_steps": 0,
    "params": SPACE,
}


def sweeper(sweep_dir: Path, **settings) -> SelfSupOptunaSweeper:
    """The sweeper as hydra/sweeper=selfsup_optuna makes it (without its launcher: the tests ask and tell)."""
    made = SelfSupOptunaSweeper(**{**SETTINGS, **settings})
    made.sweep_dir = sweep_dir
    return made


def storage_of(sweep_dir: Path) -> str:
    return f"sqlite:///{sweep_dir / 'optuna.db'}"


# a sweep's process, killed with kill -9 while its trial runs: it asks a trial, beats its heartbeat as the
# sweeper does while the trial's job runs, says the trial's number, and waits to be killed
KILLED = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from hydra_plugins.selfsup_sweeper.optuna_sweeper import SelfSupOptunaSweeper
    sweeper = SelfSupOptunaSweeper(**json.loads(sys.argv[2]))
    sweeper.sweep_dir = Path(sys.argv[1])
    study, storage = sweeper.study()
    [trial] = sweeper.ask(study, 1)
    with sweeper.heartbeats([trial]):
        print(trial.number, flush=True)
        time.sleep(120)
""")


@pytest.mark.slow  # a sweep killed with kill -9 (~13 s); the default suite: the live trial's heartbeat below
def test_a_trial_killed_with_kill_9_is_failed_and_retried_with_its_params_when_the_study_continues(tmp_path):
    settings = {**SETTINGS, "heartbeat_interval": 1, "grace_period": 2}
    killed_sweep = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(tmp_path / "first"), json.dumps(settings)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        number = killed_sweep.stdout.readline().strip()
        assert number == "0", killed_sweep.communicate(timeout=60)
        time.sleep(1.5)  # a heartbeat or two more
    finally:
        with contextlib.suppress(ProcessLookupError):  # (a sweep that did not start: its error is the message)
            os.killpg(killed_sweep.pid, signal.SIGKILL)
        killed_sweep.wait(timeout=60)
    storage = storage_of(tmp_path / "first")
    [killed] = optuna.load_study(study_name="tune", storage=storage).trials
    assert killed.state == TrialState.RUNNING  # what today's Optuna leaves: RUNNING for ever, unless failed
    time.sleep(2.5)  # its grace period (hydra.sweeper.grace_period) passes with no heartbeat
    more = sweeper(tmp_path / "more", storage=storage, heartbeat_interval=1, grace_period=2)
    study, _ = more.study()  # the continuation
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.WAITING]
    [retry] = more.ask(study, 1)
    assert retry.number == 1 and retry.params == killed.params
    study.tell(retry, 0.5)
    trials = optuna.load_study(study_name="tune", storage=storage).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == killed.params
    [fresh] = more.ask(study, 1)  # the retry was the only one: the next trial samples a new point
    assert fresh.number == 2 and fresh.params != killed.params


def test_a_live_trial_is_not_failed_by_a_continuation_while_its_heartbeat_beats(tmp_path):
    first = sweeper(tmp_path, heartbeat_interval=1, grace_period=2)
    study, storage = first.study()
    [running] = first.ask(study, 1)
    with first.heartbeats([running]):
        time.sleep(3)  # longer than the grace period: only the heartbeat keeps it alive
        other, _ = sweeper(tmp_path / "other", storage=storage, heartbeat_interval=1, grace_period=2).study()
        assert [t.state for t in other.trials] == [TrialState.RUNNING]
    study.tell(running, 0.5)
    assert [t.state for t in optuna.load_study(study_name="tune", storage=storage).trials] == [TrialState.COMPLETE]


def test_two_continuations_at_once_sample_distinct_points(tmp_path):
    """Two `selfsup-train sweeps=tune hydra.sweeper.storage=<its optuna.db>` started together: both load the
    study before either asks (the ask order of two processes), each then asks its trials."""
    first = sweeper(tmp_path)
    study, storage = first.study()
    for value in (0.5, 0.6):
        [trial] = first.ask(study, 1)
        study.tell(trial, value)
    a, b = sweeper(tmp_path / "a", storage=storage), sweeper(tmp_path / "b", storage=storage)
    studies = {a: a.study()[0], b: b.study()[0]}
    asked = [one.ask(studies[one], 1)[0] for one in (a, b, a, b)]
    params = [tuple(sorted(t.params.items())) for t in asked]
    assert len(set(params)) == 4, params
    assert sorted(t.number for t in asked) == [2, 3, 4, 5]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_one_run_is_reproducible(tmp_path, sampler):
    def run(folder):
        one = sweeper(tmp_path / folder, sampler=sampler)
        study, _ = one.study()
        params = []
        for value in (0.5, 0.6, 0.7):
            [trial] = one.ask(study, 1)
            params.append(trial.params)
            study.tell(trial, value)
        return params

    first = run("one")
    assert first == run("two") and len({json.dumps(p, sort_keys=True) for p in first}) == 3


@pytest.mark.parametrize(
    "setting,value",
    [
        ("n_trials", -3),
        ("n_trials", 0),
        ("n_jobs", 0),
        ("max_failure_rate", 1.5),
        ("max_failure_rate", -0.1),
        ("heartbeat_interval", 0),
        ("grace_period", 1),
        ("max_retry", -1),
        ("direction", "up"),
        ("seeds", 0),
        ("pruner", "percentile"),
        ("pruner_reduction_factor", 1),
    ],
)
def test_nonsensical_settings_are_refused_in_one_line(tmp_path, capsys, setting, value):
    with pytest.raises(SystemExit) as refused:
        sweeper(tmp_path, **{"heartbeat_interval": 1, "grace_period": 2, setting: value})  # grace 1: not above 1
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: hydra.sweeper.{setting}={value}: ")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "key,expression,says",
    [
        ("objective.mask_rate", "interval(0.5, 0.1)", "low 0.5 is above high 0.1"),
        ("optim.lr", "tag(log, interval(0, 1))", "a log interval needs low > 0"),
        ("objective.mask_rate", "0.3", "use interval(a, b)"),
        ("objective.mask_rate", "interval(0.1", ""),
    ],
)
def test_a_bad_search_space_is_refused_in_one_line(tmp_path, capsys, key, expression, says):
    with pytest.raises(SystemExit) as refused:
        sweeper(tmp_path, params={**SPACE, key: expression})
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: hydra.sweeper.params.{key}={expression}: ") and says in err
    assert not list(tmp_path.iterdir())


def test_a_corrupt_study_database_is_refused_in_one_line_and_left_as_it_was(tmp_path, capsys):
    db = tmp_path / "optuna.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)  # a torn or overwritten file
    before = db.read_bytes()
    with pytest.raises(SystemExit) as refused:
        sweeper(tmp_path / "more", storage=storage_of(tmp_path)).study()
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"error: hydra.sweeper.storage={storage_of(tmp_path)}: cannot read the study database (file is not a database)"
    )
    assert db.read_bytes() == before


# ---------------------------------------------------------------------------- the report
def job(sweep_dir: Path, number: int, summary: str | None) -> Path:
    folder = sweep_dir / str(number)
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("objective:\n  name: span_corruption\nseed: 0\n")
    if summary is not None:
        (folder / "summary.json").write_text(summary)
    return folder


def report(capsys, *paths) -> tuple[int, str]:
    from selfsup.report import main

    with pytest.raises(SystemExit) as done:
        main([*map(str, paths), "--format", "md"])
    return done.value.code, capsys.readouterr().out


def test_the_report_shows_the_study_of_a_killed_sweep_with_its_running_trial(tmp_path, capsys):
    """Killed before it wrote optimization_results.yaml: the study is in its optuna.db, one trial RUNNING."""
    study = optuna.create_study(study_name="tune", storage=storage_of(tmp_path), direction="maximize")
    space = distributions(SPACE)
    done = study.ask(space)
    study.tell(done, 0.5)
    study.ask(space)  # the trial the kill left running
    job(tmp_path, 0, json.dumps({"status": "finished", "objective": "span_corruption", "val_loss": 5.0}))
    job(tmp_path, 1, None)
    code, out = report(capsys, tmp_path)
    assert code == 0, out
    assert (
        "Optuna study tune (maximize the jobs' optimized_metric): 2 trials, 1 complete, 0 pruned, 0 failed, 1 running."
    ) in out
    assert "Running: trial 1: still running, or its sweep was killed" in out
    assert "Optuna study tune" in (tmp_path / "report.md").read_text()


def test_the_report_says_a_corrupt_summary_json_is_corrupt(tmp_path, capsys):
    job(tmp_path, 0, json.dumps({"status": "finished", "objective": "span_corruption", "val_loss": 5.0}))
    job(tmp_path, 1, '{"status": "fini')  # cut short
    job(tmp_path, 2, "[]")  # not a summary
    code, out = report(capsys, tmp_path)
    assert code == 0, out
    assert f"incomplete: 1 ({tmp_path / '1'}): summary.json unreadable (corrupt" in out
    assert f"incomplete: 2 ({tmp_path / '2'}): summary.json unreadable (corrupt" in out
    assert "no summary.json" not in out


@pytest.mark.parametrize("damage", ["middle", "empty"])
def test_a_study_database_damaged_in_the_middle_or_empty_is_refused_in_one_line(tmp_path, capsys, damage):
    """Its header intact, a page in the middle overwritten (what a crash or a bad copy leaves); or a zero-byte
    file, which SQLite would take as a new database and Optuna write a study into."""
    db = tmp_path / "optuna.db"
    if damage == "middle":
        study = optuna.create_study(study_name="tune", storage=storage_of(tmp_path), direction="maximize")
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=60)
        data = bytearray(db.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 4096] = bytes(range(256)) * 16
        db.write_bytes(bytes(data))
    else:
        db.write_bytes(b"")
    before = db.read_bytes()
    with pytest.raises(SystemExit) as refused:
        sweeper(tmp_path / "more", storage=storage_of(tmp_path)).study()
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
    says = "cannot read the study database (" if damage == "middle" else "an empty file, not a study database"
    assert err.startswith(f"error: hydra.sweeper.storage={storage_of(tmp_path)}: {says}"), err
    assert db.read_bytes() == before


def test_the_report_of_a_sweep_whose_study_database_is_damaged_says_so_and_shows_the_runs(tmp_path, capsys):
    study = optuna.create_study(study_name="tune", storage=storage_of(tmp_path), direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=60)
    db = tmp_path / "optuna.db"
    data = bytearray(db.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = bytes(range(256)) * 16
    db.write_bytes(bytes(data))
    job(tmp_path, 0, json.dumps({"status": "finished", "objective": "span_corruption", "val_loss": 5.0}))
    code, out = report(capsys, tmp_path)
    assert code == 0 and f"cannot read the Optuna study of {tmp_path}: database disk image is malformed" in out
    assert "Report (1 run)" in out and "span_corruption" in (tmp_path / "report.md").read_text()
