"""Sweeps: shipped definitions compose, bad values refused before any job, a failing job does not end the sweep,
resumed jobs keep their W&B identity, the config tree whatever the working directory, Optuna, submitit."""

import csv
import json
import os
import subprocess
from pathlib import Path

import forked
import pytest
from conftest import TINY, wandb_run_record, wandb_summary
from omegaconf import OmegaConf

SWEEPS = sorted(p.stem for p in (Path(__file__).parents[2] / "sweeps").glob("*.yaml"))


def compose(*overrides):
    """The config `selfsup-train` composes for these overrides, Hydra's part included (in-process)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import hydra_plugins.selfsup_sweeper.optuna_sweeper  # noqa: F401  (Hydra imports its plugins when it runs)
    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):  # its sweeps/ group: the repository's sweeps/
        return hydra_compose("train", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.parametrize("sweep", SWEEPS)
def test_shipped_sweeps_compose(sweep):
    cfg = compose(f"sweeps={sweep}")
    assert cfg.hydra.mode.name == "MULTIRUN" and cfg.hydra.sweeper.params
    assert f"sweep={sweep}" in cfg.logger.tags


def test_sweep_grids_match_the_ablations():
    assert compose("sweeps=mask_rate").hydra.sweeper.params["objective.mask_rate"] == "0.10,0.15,0.25,0.40"
    span = compose("sweeps=span").hydra.sweeper.params
    assert span["objective.mean_span_length"] == "2,3,5,10" and span["objective.mask_rate"] == "0.15,0.25,0.50"
    assert (
        compose("sweeps=objectives").hydra.sweeper.params["objective"]
        == "mlm,clm,span_corruption,prefix_lm,ul2,bart,fim"
    )


@pytest.mark.parametrize("objective,layers", [("mlm", 4), ("clm", 4), ("span_corruption", 2), ("ul2", 2)])
def test_objectives_sweep_gives_equal_depth_budget(objective, layers):
    from selfsup.run.schema import register

    register()  # the per_stack resolver
    cfg = compose("sweeps=objectives", f"objective={objective}")
    assert OmegaConf.to_container(cfg.architecture, resolve=True)["n_layers"] == layers
    assert cfg.trainer.max_tokens == 150000


def run_sweep(cache_dir, sweep_dir, *overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return forked.run(
        ["selfsup-train", "-m", *TINY, f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep_dir}", *overrides],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def lr_sweep(cache_dir, tmp_path_factory):
    """2 jobs: optim.lr=1e9 fails at its first step (the loss becomes NaN), 1e-3 trains."""
    sweep_dir = tmp_path_factory.mktemp("lr_sweep")
    return sweep_dir, run_sweep(cache_dir, sweep_dir, "optim.lr=1e9,1e-3")


# a sweep of three jobs (~30 s); the default suite: a failed job's error file (tests/test_names.py) and verdict
# (test_verdict.py)
@pytest.mark.slow
def test_a_failing_job_does_not_end_the_sweep(lr_sweep, cache_dir):
    sweep_dir, out = lr_sweep
    assert out.returncode == 1  # the sweep ran to the end, then says that a job failed
    assert "Traceback" not in out.stdout + out.stderr
    bad, good = sweep_dir / "0", sweep_dir / "1"
    assert json.loads((good / "summary.json").read_text())["status"] == "finished"
    error = (bad / "error.txt").read_text()
    assert "the loss became nan at step" in error and len(error.strip().splitlines()) == 1
    assert (
        "checkpoint is none yet" in error
        and f"start again with a lower learning rate: selfsup-train resume={bad}" in error
    )
    assert wandb_summary(bad)["state"] == "failed" and wandb_summary(good)["state"] == "finished"
    assert "[job 0] optim.lr=1e+09: FAILED: the loss became nan" in out.stdout
    assert "[job 1] optim.lr=0.001: val loss" in out.stdout
    assert f"failed: {bad}" in out.stdout and "1 of 2 jobs failed" in out.stderr
    # the end-of-sweep table: the swept value as a column, metrics said how they were computed
    table = " ".join(out.stdout[out.stdout.index("job | objective | lr    | val loss*") :].split())
    assert "job | objective | architecture | params | steps" in table  # the runs' facts: a table of their own
    assert "val loss: the last validation" in table and "tokens/s: input tokens per second of training time" in table

    # the same sweep into the same dir: refused before Hydra writes anything
    before = {p: p.read_bytes() for p in sweep_dir.rglob("*") if p.is_file()}
    again = run_sweep(cache_dir, sweep_dir, "optim.lr=1e9,1e-3")
    assert again.returncode == 2 and again.stderr.startswith(f"error: hydra.sweep.dir={sweep_dir} already holds")
    assert len(again.stderr.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in sweep_dir.rglob("*") if p.is_file()} == before


@pytest.mark.slow  # a resume (~13 s); the default suite resumes a run into the same W&B id (test_resume.py)
def test_a_resumed_sweep_job_keeps_its_wandb_identity_and_the_report_reads_both_segments(lr_sweep, cache_dir):
    sweep_dir, _ = lr_sweep
    job = sweep_dir / "1"
    first = wandb_run_record(job)
    assert first["run_group"] == f"sweep-{sweep_dir.parent.name}-{sweep_dir.name}"
    assert "optim.lr=0.001" in first["tags"] and first["display_name"] == "mlm-encoder-lr=0.001"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    resumed = forked.run(
        ["selfsup-train", f"resume={job}", "trainer.max_steps=12"], capture_output=True, text=True, env=env, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    segments = sorted((job / "wandb").glob("offline-run-*"))
    assert len(segments) == 2
    records = [wandb_run_record(job, segment) for segment in segments]
    for record in records:
        assert (record["run_id"], record["display_name"], record["run_group"], sorted(record["tags"])) == (
            first["run_id"],
            first["display_name"],
            first["run_group"],
            sorted(first["tags"]),
        )
    from selfsup.report import load_runs

    run = {r.label: r for r in load_runs([str(sweep_dir)])}["1"]
    steps = sorted({row["trainer/global_step"] for row in run.history if "val/loss" in row})
    assert steps[0] < 6 < steps[-1] and run.last("train/tokens_seen") == 12 * 8 * 32  # both segments


def test_a_bad_value_refuses_the_sweep_before_any_job(cache_dir, tmp_path):
    sweep_dir = tmp_path / "sweep"
    out = run_sweep(cache_dir, sweep_dir, "objective.mask_rate=0.2,0.3,1.5")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
    assert out.stderr.startswith("error: job 2 of 3 (") and "objective.mask_rate=1.5" in out.stderr
    assert out.stderr.rstrip().endswith("no job was run; fix the sweep's values")
    assert not sweep_dir.exists()  # nothing ran, nothing was written


@pytest.mark.slow  # five help commands (~13 s); the default suite composes every documented command (test_readme.py)
def test_help_lists_the_labs_groups_in_seconds_whatever_the_working_directory_holds(tmp_path):
    """The config tree is the package's: a large virtual environment in the working directory is not walked."""
    venv = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    for i in range(300):
        package = venv / f"pkg{i}" / "conf"
        package.mkdir(parents=True)
        for j in range(20):
            (package / f"c{j}.yaml").write_text("a: 1\n")
    out = forked.run(["selfsup-train", "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert out.returncode == 0, out.stderr
    groups = out.stdout[out.stdout.index("Config groups") :]
    for group in ("objective:", "architecture:", "data:", "trainer:", "sweeps:", "eval:"):
        assert group in groups
    assert ".venv" not in out.stdout and "conf/" not in out.stdout
    from selfsup.run.cli import CONF_DIR

    experiments = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))  # read from the folder
    assert f"experiment:   {', '.join(experiments)}\n" in groups and "compare_quick" in experiments
    # a reader that leaves at once (`selfsup-train --help | head`): no BrokenPipeError traceback, exit 0
    closed = subprocess.Popen(["selfsup-train", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    closed.stdout.close()
    err = closed.stderr.read().decode()
    assert closed.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
    completion = forked.run(
        ["selfsup-train", "-sc", "query=bash"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
        env={**os.environ, "COMP_LINE": "selfsup-train ", "COMP_POINT": "14"},
    )
    offered = completion.stdout.split()
    assert "objective=" in offered and "sweeps=" in offered and not any(o.startswith((".", "src")) for o in offered)


@pytest.mark.slow  # two sweeps' compositions in new processes (~8 s); the default suite composes the shipped sweeps
def test_a_users_config_dir_keeps_the_built_in_sweeps(tmp_path):
    (tmp_path / "objective").mkdir()
    (tmp_path / "objective" / "my_mlm.yaml").write_text("defaults:\n  - mlm\n  - _self_\nmask_rate: 0.3\n")
    out = forked.run(
        [
            "selfsup-train",
            "--config-dir",
            str(tmp_path),
            "objective=my_mlm",
            "sweeps=mask_rate",
            "--cfg",
            "hydra",
            "--package",
            "hydra.sweeper",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "objective.mask_rate: 0.10,0.15,0.25,0.40" in out.stdout
    job = forked.run(
        ["selfsup-train", "--config-dir", str(tmp_path), "objective=my_mlm", "--cfg", "job", "--package", "objective"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert job.returncode == 0, job.stderr
    assert "mask_rate: 0.3" in job.stdout and "mask_token_prob: 0.8" in job.stdout


# two optuna sweeps (~45 s); the default suite: tests/test_tune.py and tests/test_tune_faults.py, in-process
@pytest.mark.slow
def test_optuna_study_continues_with_new_points_in_one_wandb_group(cache_dir, tmp_path):
    """A trial, then one more into the same study: 2 different parameter sets; the continuation writes its job
    into the study's own sweep dir (trial number = job dir), its own sweep dir taken back; each trial keeps its
    run dir and W&B run id; both runs in the study's W&B group; the report of that dir shows the study once,
    with its trial numbers and run dirs, its best trial ± SE, and why no importances."""
    optuna = pytest.importorskip("optuna")
    first = run_sweep(
        cache_dir, tmp_path / "first", "sweeps=tune", "hydra.sweeper.n_trials=1", "hydra.sweeper.pruner=none"
    )  # pruning: test_tune.py
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Callback" not in first.stderr  # the sweep callbacks ran (Hydra turns their errors into warnings)
    storage = f"sqlite:///{tmp_path / 'first' / 'optuna.db'}"
    more = run_sweep(
        cache_dir,
        tmp_path / "more",
        "sweeps=tune",
        "hydra.sweeper.n_trials=1",
        "hydra.sweeper.pruner=none",
        f"hydra.sweeper.storage={storage}",
    )
    assert more.returncode == 0, more.stderr[-3000:]
    assert not (tmp_path / "more").exists()  # one folder, one study
    study = optuna.load_study(study_name="tune", storage=storage)
    assert study.direction.name == "MAXIMIZE" and len(study.trials) == 2
    params = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(set(params)) == 2 and {"objective.mask_rate", "objective.mean_span_length", "optim.lr"} == {
        k for k, _ in params[0]
    }
    run_dirs = [Path(t.user_attrs["run_dir"]) for t in study.trials]
    assert run_dirs == [tmp_path / "first" / "0", tmp_path / "first" / "1"]
    groups = set()
    for trial, run_dir in zip(study.trials, run_dirs):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert trial.state.name == "COMPLETE" and trial.user_attrs["status"] == "finished"
        assert trial.value == pytest.approx(summary["eval"]["eval/probe/accuracy"], rel=1e-6)  # optimized_metric
        assert trial.user_attrs["value_se"] == summary["eval"]["eval/probe/accuracy_se"]
        config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
        assert config.trial.number == trial.number and "id" not in config.trial
        assert OmegaConf.load(run_dir / ".hydra" / "hydra.yaml").hydra.job.num == trial.number
        record = wandb_run_record(run_dir)
        assert trial.user_attrs["wandb_run_id"] == record["run_id"] == (run_dir / "wandb-run-id").read_text().strip()
        [lr] = [t.split("=")[1] for t in record["tags"] if t.startswith("optim.lr=")]
        assert lr == f"{float(lr):.4g}" and float(lr) == pytest.approx(trial.params["optim.lr"], rel=1e-3)
        assert f"lr={lr}" in record["display_name"]  # 4 significant digits, not Optuna's 17
        groups.add(record["run_group"])
    assert groups == {f"tune-{tmp_path.name}-first"}
    commands = OmegaConf.load(tmp_path / "first" / "optimization_results.yaml").commands
    assert [list(c.trials) for c in commands] == [[0], [1]]  # each command's trials, the first one's kept
    from selfsup.report import main as report

    with pytest.raises(SystemExit) as done:
        report([str(tmp_path / "first"), str(tmp_path / "first" / "."), "--format", "md"])
    assert done.value.code == 0
    text = (tmp_path / "first" / "report.md").read_text()
    assert text.count("Optuna study tune (maximize the jobs' optimized_metric): 2 trials, 2 complete") == 1
    best = study.best_trial
    assert f"Best: trial {best.number}, value {best.value:.4f} ± {best.user_attrs['value_se']:.4f}" in text
    assert f"(run dir {tmp_path / 'first' / str(best.number)})" in text
    assert "Parameter importances: need 10 completed trials, the study has 2." in text
    assert "report-optuna_history.png" in text


@pytest.mark.slow  # the default suite: tests/test_tune_faults.py refuses bad study settings in-process
def test_continuing_a_study_that_is_not_there_is_refused(cache_dir, tmp_path):
    pytest.importorskip("optuna")
    out = run_sweep(cache_dir, tmp_path / "sweep", "sweeps=tune", f"hydra.sweeper.storage=sqlite:///{tmp_path}/nope.db")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
    assert out.stderr.startswith(f"error: hydra.sweeper.storage=sqlite:///{tmp_path}/nope.db: no such study database")
    assert not (tmp_path / "nope.db").exists() and not list((tmp_path / "sweep").glob("*/summary.json"))


@pytest.mark.slow  # a cluster launcher (~20 s): keeps the default run under 10 minutes
def test_submitit_local_launcher_runs_two_jobs(cache_dir, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    out = run_sweep(cache_dir, tmp_path, "hydra/launcher=local", "objective=mlm,clm")
    assert out.returncode == 0, out.stderr[-3000:]
    for job, objective in enumerate(["mlm", "clm"]):
        summary = json.loads((tmp_path / str(job) / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["objective"] == objective
        assert wandb_summary(tmp_path / str(job))["state"] == "finished"
    assert list(tmp_path.glob(".submitit/*"))  # submitit's own job files


# three objectives to one FLOP budget (~17 s); the default suite: tests/evaluation/test_evaluation.py stops a run at
# max_flops
@pytest.mark.slow
def test_compare_flops_stops_every_objective_at_the_same_training_flops(cache_dir, tmp_path):
    """experiment=compare_flops (tiny): each objective runs to its own step count at one FLOP budget, its cosine
    ending at that step, and the verdict says that FLOPs were held equal and steps were not."""
    sweep_dir = tmp_path / "sweep"
    budget = 4.4e9  # about 100 steps of the tiny CLM model, 200 of the MLM one: the last step overshoots < 1%
    out = run_sweep(
        cache_dir,
        sweep_dir,
        "experiment=compare_flops",
        f"trainer.max_flops={budget}",
        "trainer.max_steps=1000",
        "trainer.val_check_interval=1000",
        "eval.tasks=null",
        "logger=csv",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads((sweep_dir / str(job) / "summary.json").read_text()) for job in range(3)]
    assert [r["objective"] for r in rows] == ["mlm", "clm", "span_corruption"]
    steps = [r["steps"] for r in rows]
    assert len(set(steps)) == 3 and steps[0] > steps[2] > steps[1] >= 100  # MLM's steps are the cheapest
    for row in rows:
        per_step = row["flops_seen"] / row["steps"]
        assert budget <= row["flops_seen"] < budget + per_step  # stopped at the first step past the budget
        lr = [
            float(r["train/lr"])
            for r in csv.DictReader(open(Path(row["run_dir"]) / "csv" / "metrics.csv"))
            if r.get("train/lr")
        ]
        assert lr[-1] == pytest.approx(3e-3 * 0.1, rel=0.05)  # the cosine reached its floor at the last step
    verdict = json.loads((sweep_dir / "verdict.json").read_text())["verdict"]
    assert verdict.startswith("Verdict (margin over random-init, 95% paired-bootstrap interval; held equal: ")
    head = verdict.splitlines()[0]
    assert "FLOPs (within 1%)" in head and f"not equal: steps {min(steps)} to {max(steps)}" in head


def test_a_sweep_into_a_folder_that_holds_one_is_refused_and_leaves_it_as_it_was(tmp_path):
    sweep = tmp_path / "multirun"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "summary.json").write_text("{}")
    out = forked.run(
        ["selfsup-train", "-m", "debug=tiny", "objective=clm,mlm", f"hydra.sweep.dir={sweep}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(
        f"error: hydra.sweep.dir={sweep} already holds a sweep: nothing was overwritten"
    ), out.stderr[-2000:]
    assert sorted(p.name for p in sweep.iterdir()) == ["0"]  # no .selfsup.lock left behind
