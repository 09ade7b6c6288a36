"""The private internals of Lightning, Hydra and W&B the lab relies on, where no public API exists.

Each is one small function here, and tests/test_upstream.py fails when the upstream changes them, so that a
new release breaks a test, not a run.
"""

from __future__ import annotations

import contextlib


def subprocess_script_launcher() -> type:
    """Lightning's launcher for ranks > 0, which selfsup.training.strategies.WorkerLauncher extends (it starts them as
    `python -m selfsup.run.worker` instead of the script again)."""
    # Lightning is imported here, not at the top: ~5 s, and selfsup.run.sweep imports this module without it
    from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    return _SubprocessScriptLauncher


def set_launcher(strategy, launcher) -> None:
    """Give a Lightning strategy its launcher: strategies make theirs in the private `_configure_launcher` hook
    and keep it in `_launcher` (selfsup.training.strategies overrides the hook with the worker launcher)."""
    strategy._launcher = launcher


def data_parallel_only(strategy) -> None:
    """ModelParallelStrategy's device mesh as data parallelism over every process and no tensor parallelism
    (FSDP2 alone): its private `_data_parallel_size` and `_tensor_parallel_size`, which setup_environment reads."""
    strategy._data_parallel_size, strategy._tensor_parallel_size = strategy.num_nodes * strategy.num_processes, 1


def completed_rung(system_attrs: dict) -> tuple[int, str]:
    """The highest rung Optuna's SuccessiveHalvingPruner recorded for a trial, and the system attribute that holds
    its value there (`completed_rung_<n>`, the pruner's own bookkeeping); rung 0 when none."""
    rung = max((int(k.rsplit("_", 1)[1]) for k in system_attrs if k.startswith("completed_rung_")), default=0)
    return rung, f"completed_rung_{rung}"


def align_log_step(trainer) -> None:
    """Lightning logs each step under its fit loop's `_batches_that_stepped`, which a checkpoint saved at a
    batch end stores before that batch counts: a resumed run would log its first step under the previous
    number. Set it to the global step."""
    trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step


def cluster_environment(trainer):
    """The Trainer's cluster environment (LightningEnvironment, SLURMEnvironment, ...), single-device
    strategies included (public only on parallel strategies), or None."""
    return getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)


def failed_job_value(job_return):
    """What a Hydra job that failed raised (JobReturn.return_value re-raises it)."""
    return job_return._return_value


def drop_anonymous(logger) -> None:
    """Lightning's WandbLogger passes `anonymous` to wandb.init, which W&B 0.31 answers with a warning on
    stderr that it has no effect: take it out of the logger's init arguments."""
    logger._wandb_init.pop("anonymous", None)


def optuna_trial_id(trial) -> int:
    """The storage id of an Optuna trial (what `optuna.trial.Trial(study, trial_id)` takes in the job that runs
    it; the trial's `number` counts within its study)."""
    return trial._trial_id


def wandb_run(logger):
    """The W&B run a Lightning WandbLogger has started, or None (its `experiment` property would start one)."""
    return logger._experiment


def kill_wandb_service() -> None:
    """Kill the wandb-core service process this process started (wandb 0.31's handle on it)."""
    with contextlib.suppress(Exception):
        # wandb is imported here, not at the top: ~0.5 s, and selfsup.run.sweep imports this module without it
        from wandb.sdk import wandb_setup

        wandb_setup.singleton()._connection._proc._process.kill()


def forget_wandb_run(run) -> None:
    """Let go of a W&B run whose service is gone, so that the next run in this process starts afresh."""
    # wandb is imported here, not at the top: ~0.5 s, and selfsup.run.sweep imports this module without it
    import wandb

    with contextlib.suppress(Exception):
        if wandb.run is run:
            from wandb.sdk.lib import module

            module.unset_globals()


def hyperband_bracket_trials(pruner, study, trial) -> list:
    """The trials of `study` in the same Hyperband bracket as `trial` (Optuna's HyperbandPruner gives each
    trial a bracket by a hash of its number, in its private `_get_bracket_id`; the pruner must have pruned
    once, which sets its brackets up). selfsup.training.tune reads their rung values for the promotion cut."""
    bracket = pruner._get_bracket_id(study, trial)
    return [t for t in study.get_trials(deepcopy=False) if pruner._get_bracket_id(study, t) == bracket]
