"""Sweeps: shipped definitions compose, a failing job does not end the sweep, Optuna, submitit."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import TINY, wandb_summary

SWEEPS = sorted(p.stem for p in (Path(__file__).parents[2] / "sweeps").glob("*.yaml"))


def compose(*overrides):
    """The config `selfsup-train` composes for these overrides, Hydra's part included (in-process)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from selfsup.config import register
    from selfsup.train import CONF_DIR
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
    assert compose("sweeps=objectives").hydra.sweeper.params["objective"] == "mlm,clm,span_corruption,prefix_lm,ul2"


@pytest.mark.parametrize("objective,layers", [("mlm", 4), ("clm", 4), ("span_corruption", 2), ("ul2", 2)])
def test_objectives_sweep_gives_equal_depth_budget(objective, layers):
    from selfsup.config import register
    register()  # the per_stack resolver
    cfg = compose("sweeps=objectives", f"objective={objective}")
    assert OmegaConf.to_container(cfg.architecture, resolve=True)["n_layers"] == layers
    assert cfg.trainer.max_tokens == 150000


def run_sweep(cache_dir, sweep_dir, *overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return subprocess.run(["selfsup-train", "-m", *TINY, f"data.cache_dir={cache_dir}",
                           f"hydra.sweep.dir={sweep_dir}", *overrides],
                          capture_output=True, text=True, env=env, timeout=600)


def test_a_failing_job_does_not_end_the_sweep(cache_dir, tmp_path):
    out = run_sweep(cache_dir, tmp_path, "architecture=decoder,encoder")  # MLM cannot train a decoder
    assert out.returncode == 1  # the sweep ran to the end, then says that a job failed
    assert "Traceback" not in out.stdout + out.stderr
    bad, good = tmp_path / "0", tmp_path / "1"
    assert json.loads((good / "summary.json").read_text())["status"] == "finished"
    assert json.loads((bad / "summary.json").read_text())["objective"] == "mlm"
    error = (bad / "error.txt").read_text()
    assert "architecture=decoder" in error and len(error.strip().splitlines()) == 1
    # the refused job is a W&B run too (its settings are checked once the run has started)
    assert wandb_summary(bad)["state"] == "failed" and wandb_summary(good)["state"] == "finished"
    assert "[job 0] architecture=decoder: FAILED" in out.stdout
    assert "[job 1] architecture=encoder: val loss" in out.stdout
    assert f"failed: {bad}" in out.stdout and "1 of 2 jobs failed" in out.stderr

    # the same sweep into the same dir: refused before Hydra writes anything
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    again = run_sweep(cache_dir, tmp_path, "architecture=decoder,encoder")
    assert again.returncode == 2 and again.stderr.startswith(f"error: hydra.sweep.dir={tmp_path} already holds")
    assert len(again.stderr.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.fixture
def optuna_study(cache_dir, tmp_path):
    optuna = pytest.importorskip("optuna")
    out = run_sweep(cache_dir, tmp_path, "sweeps=tune", "hydra.sweeper.n_trials=3")
    assert out.returncode == 0, out.stderr[-3000:]
    return optuna, f"sqlite:///{tmp_path}/optuna.db", tmp_path


def test_optuna_three_trials_stored_in_sqlite_in_the_sweep_dir(optuna_study):
    optuna, storage, sweep_dir = optuna_study
    study = optuna.load_study(study_name="selfsup-tune", storage=storage)
    trials = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(trials) == 3
    logged = sorted(json.loads((sweep_dir / str(i) / "summary.json").read_text())["eval"]["eval/probe/accuracy"]
                    for i in range(3))
    assert sorted(t.value for t in trials) == pytest.approx(logged, rel=1e-6)  # the app returns the probe accuracy
    assert study.direction.name == "MAXIMIZE"
    assert {"objective.mask_rate", "objective.mean_span_length", "optim.lr"} <= set(trials[0].params)


@pytest.mark.slow
def test_optuna_study_can_be_continued(optuna_study, cache_dir):
    optuna, storage, sweep_dir = optuna_study
    again = run_sweep(cache_dir, sweep_dir / "more", "sweeps=tune", "hydra.sweeper.n_trials=1",
                      f"hydra.sweeper.storage={storage}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(optuna.load_study(study_name="selfsup-tune", storage=storage).trials) == 4


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
