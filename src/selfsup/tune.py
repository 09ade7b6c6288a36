"""Pruning Optuna trials at validations: a job of the `selfsup_optuna` sweeper (hydra_plugins.selfsup_sweeper)
reports its optimized metric to its trial after each validation that logged it, and stops when the study's
pruner says so (the run is then `pruned`; the sweeper tells the study)."""

from __future__ import annotations

import logging
import math

from lightning.pytorch import Callback

log = logging.getLogger("selfsup")


class TrialPruning(Callback):
    def __init__(self, trial: dict, metric: str):
        """trial: {storage, study, id, pruner (median | none), startup, warmup}, as the sweeper passes it (a
        study's pruner lives in the sweeper's process, not in its storage)."""
        import optuna
        pruner = (optuna.pruners.MedianPruner(n_startup_trials=int(trial.get("startup", 3)),
                                              n_warmup_steps=int(trial.get("warmup", 0)))
                  if trial.get("pruner", "median") == "median" else optuna.pruners.NopPruner())
        study = optuna.load_study(study_name=trial["study"], storage=trial["storage"], pruner=pruner)
        self.trial = optuna.trial.Trial(study, int(trial["id"]))
        self.metric, self.pruned = metric, False

    def on_validation_end(self, trainer, pl_module) -> None:
        value = trainer.callback_metrics.get(self.metric)
        if trainer.sanity_checking or value is None or not math.isfinite(float(value)):
            return
        self.trial.report(float(value), step=trainer.global_step)
        if self.trial.should_prune():
            self.pruned = True
            trainer.should_stop = True
            log.warning(f"Optuna pruned trial {self.trial.number} at step {trainer.global_step} "
                        f"({self.metric} {float(value):.4f})")
