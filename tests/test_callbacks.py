"""The callbacks group (conf/callbacks/): the Trainer's callbacks by name, each built from its _target_ with the
run's own arguments; one dropped with ~callbacks.NAME, one added with +callbacks.NAME, a bad setting refused in
one line."""

import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import ModelCheckpoint

from selfsup.errors import UserError
from selfsup.reliability.callbacks import LastCheckpoint, NonFiniteGuard, PreemptionHandler
from selfsup.run.cli import CONF_DIR
from selfsup.run.lifecycle import make_callbacks
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings
from selfsup.training.throughput import TokenThroughput


def composed(*overrides):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=list(overrides))


def test_the_default_callbacks_get_the_runs_paths_and_the_trainer_settings(tmp_path):
    made = make_callbacks(
        RunSettings.of(
            composed(
                "trainer.val_check_interval=7",
                "trainer.nonfinite=skip",
                "trainer.log_every_n_steps=5",
                "trainer.progress_bar=false",
            )
        ),
        tmp_path,
    )
    assert list(made) == ["best", "last", "guard", "preemption", "throughput"]  # the order the Trainer calls them
    best, last, guard, preemption, throughput = made.values()
    assert isinstance(best, ModelCheckpoint) and best.dirpath == str(tmp_path / "checkpoints")
    assert (best.monitor, best.mode, best.save_top_k, best.filename) == ("val/loss", "min", 1, "best-step{step:06d}")
    assert isinstance(last, LastCheckpoint) and last.path == tmp_path / "checkpoints" / "last.ckpt"
    assert last.every_n_steps == 7  # checkpoint_every_n_steps=null: at each validation
    assert isinstance(guard, NonFiniteGuard) and guard.policy == "skip"
    assert f"selfsup-train resume={tmp_path}" in guard.resume_hint
    assert isinstance(preemption, PreemptionHandler) and preemption.dirpath == tmp_path / "checkpoints"
    assert isinstance(throughput, TokenThroughput) and throughput.window_size == 5
    every = make_callbacks(
        RunSettings.of(composed("trainer.checkpoint_every_n_steps=3", "trainer.progress_bar=false")), tmp_path
    )
    assert every["last"].every_n_steps == 3


def test_a_callback_is_dropped_or_added_from_the_command_line(tmp_path):
    made = make_callbacks(
        RunSettings.of(
            composed(
                "~callbacks.throughput",
                "trainer.progress_bar=false",
                "+callbacks.lr={_target_: lightning.pytorch.callbacks.LearningRateMonitor}",
            )
        ),
        tmp_path,
    )
    assert list(made) == ["best", "last", "guard", "preemption", "lr"]
    assert type(made["lr"]).__name__ == "LearningRateMonitor"
    assert "console" in make_callbacks(
        RunSettings.of(composed()), tmp_path
    )  # trainer.progress_bar=true: the console's lines


def test_the_record_of_a_run_from_before_the_callbacks_group_resumes_with_the_default_ones(tmp_path):
    from omegaconf import OmegaConf

    recorded = OmegaConf.to_container(composed("trainer.progress_bar=false"), resolve=True)
    del recorded["callbacks"]
    made = make_callbacks(RunSettings.of(OmegaConf.create(recorded)), tmp_path)
    assert list(made) == ["best", "last", "guard", "preemption", "throughput"]
    assert made["last"].every_n_steps == recorded["trainer"]["val_check_interval"]


def test_a_bad_callback_setting_is_one_line(tmp_path):
    with pytest.raises(
        UserError,
        match=r"^callbacks.best.monitr is not a setting of "
        r"lightning.pytorch.callbacks.ModelCheckpoint: use .*monitor",
    ):
        make_callbacks(RunSettings.of(composed("+callbacks.best.monitr=val/accuracy")), tmp_path)
