"""`selfsup-train sweeps=tune hydra.sweeper.seeds=2`: one trial, two runs (seed=0, seed=1) in <number>-seed<k>;
its value is their mean, its value_se their sd / sqrt(2), from the runs' real summaries."""

import json
import math
import os

import forked
import pytest
import yaml
from conftest import TINY


@pytest.mark.slow  # an optuna sweep of two seeds a trial (~15 s); the default suite: tests/test_tune.py, in-process
def test_a_trial_of_two_seeds_is_their_mean_with_its_standard_error(cache_dir, tmp_path):
    optuna = pytest.importorskip("optuna")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = forked.run(
        [
            "selfsup-train",
            "-m",
            *TINY,
            f"data.cache_dir={cache_dir}",
            f"hydra.sweep.dir={tmp_path}",
            "sweeps=tune",
            "logger=none",
            "hydra.sweeper.n_trials=1",
            "hydra.sweeper.seeds=2",
            "hydra.sweeper.pruner=none",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [trial] = optuna.load_study(study_name="tune", storage=f"sqlite:///{tmp_path / 'optuna.db'}").trials
    run_dirs = [tmp_path / "0-seed0", tmp_path / "0-seed1"]
    assert trial.user_attrs["run_dirs"] == [str(d) for d in run_dirs] and trial.user_attrs["run_dir"] == str(
        run_dirs[0]
    )
    summaries = [json.loads((d / "summary.json").read_text()) for d in run_dirs]
    assert [s["status"] for s in summaries] == ["finished", "finished"]
    assert [yaml.safe_load((d / ".hydra" / "config.yaml").read_text())["seed"] for d in run_dirs] == [0, 1]
    values = [s["eval"]["eval/probe/accuracy"] for s in summaries]
    assert trial.value == pytest.approx(sum(values) / 2, rel=1e-6)
    assert trial.user_attrs["value_se"] == pytest.approx(abs(values[0] - values[1]) / 2, rel=1e-6, abs=1e-12)
    margins = [s["eval"].get("eval/probe/margin") for s in summaries]
    if None not in margins:
        assert trial.user_attrs["margin"] == pytest.approx(sum(margins) / 2, rel=1e-6)
        assert trial.user_attrs["margin_se"] == pytest.approx(abs(margins[0] - margins[1]) / 2, rel=1e-6, abs=1e-12)
        assert trial.user_attrs["random_init"] == pytest.approx(
            sum(s["eval"]["eval/probe/random_init_accuracy"] for s in summaries) / 2
        )
    assert "Best: trial 0, value" in out.stdout + out.stderr and "(SE over 2 seeds)" in out.stdout + out.stderr
    assert math.isfinite(trial.user_attrs["value_se"])
