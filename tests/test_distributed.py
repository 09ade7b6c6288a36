"""Strategy choice: Hydra-safe DDP/FSDP launchers, one clear line for GPU presets without a GPU."""

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from selfsup.errors import UserError
from selfsup.run.checks import check_devices
from selfsup.run.cli import CONF_DIR
from selfsup.run.lifecycle import strategy as strategy_for
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings
from selfsup.training.strategies import HydraSafeDDPStrategy, HydraSafeFSDPStrategy, WorkerLauncher


def config(*overrides):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=list(overrides))


def test_ddp_ranks_start_as_workers_from_the_resolved_config(tmp_path):
    cfg = config("trainer=ddp_cpu")
    strategy = strategy_for(RunSettings.of(cfg), tmp_path, rank_zero=True)
    assert isinstance(strategy, HydraSafeDDPStrategy)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)
    assert isinstance(trainer.strategy._launcher, WorkerLauncher)  # not Lightning's re-run of the Hydra script
    saved = OmegaConf.load(tmp_path / ".hydra" / "resolved.yaml")  # what rank 1 trains from
    assert saved.trainer.strategy == "ddp" and saved.objective.name == cfg.objective.name


def test_fsdp_preset_is_hydra_safe_fsdp2_over_all_ranks(tmp_path):
    cfg = config("trainer=fsdp")
    assert (cfg.trainer.strategy, cfg.trainer.accelerator, cfg.trainer.precision) == ("fsdp", "gpu", "bf16-mixed")
    strategy = strategy_for(RunSettings.of(config("trainer=fsdp", "trainer.accelerator=cpu")), tmp_path, rank_zero=True)
    assert isinstance(strategy, HydraSafeFSDPStrategy)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)  # built, not run here
    assert isinstance(trainer.strategy._launcher, WorkerLauncher)
    assert not trainer.strategy._save_distributed_checkpoint  # one checkpoint file, like the other strategies


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("preset", ["gpu", "ddp", "fsdp"])
def test_gpu_presets_without_a_gpu_fail_in_one_line(preset):
    with pytest.raises(UserError, match="no usable GPU.*trainer=cpu"):
        check_devices(config(f"trainer={preset}"))
