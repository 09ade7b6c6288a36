"""The private upstream internals selfsup.common.upstream reaches for: each test fails when a release moves one."""

import inspect

import lightning as L
import pytest
import torch

from selfsup.common import upstream


def test_lightning_log_step_counter_and_cluster_environment(tmp_path):
    from lightning.fabric.plugins.environments import ClusterEnvironment

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    trainer.fit_loop.epoch_loop._batches_that_stepped = 5
    upstream.align_log_step(trainer)
    assert trainer.fit_loop.epoch_loop._batches_that_stepped == trainer.global_step == 0
    assert isinstance(upstream.cluster_environment(trainer), ClusterEnvironment)


def test_lightning_subprocess_launcher_has_the_hooks_the_worker_launcher_overrides():
    launcher = upstream.subprocess_script_launcher()
    for name in ("_call_children_scripts", "_check_can_spawn_children", "launch"):
        assert callable(getattr(launcher, name)), name
    assert list(inspect.signature(launcher.__init__).parameters)[1:4] == [
        "cluster_environment",
        "num_processes",
        "num_nodes",
    ]


def test_lightning_strategies_keep_the_launcher_and_mesh_sizes_selfsup_sets():
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    for cls in (DDPStrategy, ModelParallelStrategy):
        assert callable(getattr(cls, "_configure_launcher")), cls
        strategy = cls()
        assert hasattr(strategy, "_launcher"), cls
        upstream.set_launcher(strategy, "launcher")
        assert strategy._launcher == "launcher"
    strategy = ModelParallelStrategy()
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == ("auto", "auto")
    strategy.num_nodes, strategy.parallel_devices = 2, [torch.device("cpu")] * 3  # the accelerator connector's
    upstream.data_parallel_only(strategy)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (6, 1)
    assert "self._data_parallel_size" in inspect.getsource(ModelParallelStrategy.setup_environment)


def test_hydra_job_return_keeps_what_a_failed_job_raised():
    from hydra.core.utils import JobReturn, JobStatus

    failed = JobReturn(status=JobStatus.FAILED, _return_value=ValueError("boom"))
    assert str(upstream.failed_job_value(failed)) == "boom"


def test_wandb_run_and_service_handles(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb.teardown()  # settings another test of this process left in W&B's singleton
    logger = WandbLogger(save_dir=str(tmp_path), project="selfsup-upstream-test", offline=True)
    upstream.drop_anonymous(logger)
    assert "anonymous" not in logger._wandb_init
    assert upstream.wandb_run(logger) is None  # not started yet
    run = logger.experiment
    assert upstream.wandb_run(logger) is run
    from wandb.sdk import wandb_setup

    assert wandb_setup.singleton()._connection._proc._process.pid > 0  # what kill_wandb_service kills
    run.finish()
    upstream.forget_wandb_run(run)


def test_hyperband_bracket_trials():
    optuna = pytest.importorskip("optuna")
    pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=9, reduction_factor=3)
    study = optuna.create_study(pruner=pruner)
    for _ in range(6):
        trial = study.ask()
        trial.report(1.0, 9)
        study.tell(trial, 1.0)
    trial = study.ask()
    trial.report(1.0, 1)
    pruner.prune(study, study.trials[-1])  # sets the brackets up
    assert pruner._n_brackets == 3  # floor(log3(9 / 1)) + 1
    frozen = study.trials[-1]
    brackets = [pruner._get_bracket_id(study, t) for t in study.trials]
    assert set(brackets) <= {0, 1, 2}
    assert [t.number for t in upstream.hyperband_bracket_trials(pruner, study, frozen)] == [
        t.number for t, b in zip(study.trials, brackets) if b == brackets[-1]
    ]


def test_successive_halving_keeps_each_rung_in_a_completed_rung_attribute():
    optuna = pytest.importorskip("optuna")
    study = optuna.create_study(pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2))
    trial = study.ask()
    for step in range(1, 5):
        trial.report(1.0, step)
        trial.should_prune()
    attrs = study.trials[-1].system_attrs
    rung, key = upstream.completed_rung(attrs)
    assert rung >= 1 and attrs[key] == 1.0
    assert upstream.completed_rung({}) == (0, "completed_rung_0")


def test_optuna_trial_id_is_the_storage_id_a_trial_is_rebuilt_from(tmp_path):
    """The heartbeat of the selfsup_optuna sweeper and the job's `optuna.trial.Trial(study, trial_id)` (selfsup.training.tune)
    need a trial's storage id, which counts across the studies of a storage (its `number` counts within one)."""
    optuna = pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name="first", storage=storage).ask()
    study = optuna.create_study(study_name="second", storage=storage)
    trial = study.ask()
    assert (trial.number, upstream.optuna_trial_id(trial)) == (0, 2)
    rebuilt = optuna.trial.Trial(study, upstream.optuna_trial_id(trial))
    rebuilt.set_user_attr("seen", True)
    assert study.trials[0].user_attrs == {"seen": True}
