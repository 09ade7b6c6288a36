"""Pruning Optuna trials at validations, above the noise: a job of the `selfsup_optuna` sweeper
(the lab's Optuna sweeper) reports its optimized metric to its trial after each validation that logged it
(step = the trainer's global_step), and stops when the study's pruner says so (the run is then `pruned`; the
sweeper tells the study).

`make_pruner` builds the study's pruner, the one place that does (the sweeper for its study, each job for
its trial, from the same settings: the `trial=` override). `NoiseAwarePruner` prunes a trial only when
Optuna's pruner says so AND its value is worse than the pruner's reference by more than the metric's own
standard error at that validation (`<metric>_se` in the trainer's logged metrics, e.g.
eval/probe/accuracy_se); with no standard error logged it prunes nothing (one warning line says so). The
reference, from the study's public trial data:

    median     the median of the complete trials' intermediate values at the same step (what MedianPruner
               compares), against the trial's best intermediate value so far (what it compares it with)
    hyperband  at the rung where successive halving stopped the trial: the promotion cut of that rung (the
               worst value still in the top 1/reduction_factor of the values the trials of its bracket
               recorded there, its own included), against the trial's value at this validation
    none       no pruning

A trial kept by the standard error goes on, and competes again at its next validation (hyperband: at its
next rung).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import optuna
from lightning.pytorch import Callback
from optuna.pruners import BasePruner
from optuna.trial import TrialState

from selfsup.common.upstream import completed_rung, hyperband_bracket_trials

log = logging.getLogger("selfsup")

PRUNERS = ("median", "hyperband", "none")


class NoiseAwarePruner(BasePruner):
    """An Optuna pruner (median | hyperband | none) that also needs the value worse than its reference by more
    than `se`, the metric's standard error at the validation being judged (set before should_prune; None:
    unknown, nothing is pruned). `last`: the last judgement, {value, reference, se, prune, inner, why}."""

    def __init__(
        self,
        kind: str = "median",
        startup: int = 3,
        warmup: int = 0,
        min_resource: int = 1,
        max_resource: int | None = None,
        reduction_factor: int = 3,
    ):
        if kind not in PRUNERS:
            raise ValueError(f"pruner {kind}: use {', '.join(PRUNERS)}")
        self.kind, self.reduction_factor = kind, reduction_factor
        if kind == "median":
            self.inner = optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup)
        elif kind == "hyperband":
            self.inner = optuna.pruners.HyperbandPruner(
                min_resource=min_resource, max_resource=max_resource or "auto", reduction_factor=reduction_factor
            )
        else:
            self.inner = optuna.pruners.NopPruner()
        self.se: float | None = None
        self.last: dict | None = None

    def prune(self, study, trial) -> bool:
        self.last = None
        if self.kind == "none" or trial.last_step is None or not self.inner.prune(study, trial):
            return False
        value, reference, why = (
            self.median_reference(study, trial) if self.kind == "median" else self.rung_reference(study, trial)
        )
        maximize = study.direction.name == "MAXIMIZE"
        worse_by = (reference - value) if maximize else (value - reference)
        se = self.se if self.se is not None and math.isfinite(self.se) else None
        prune = se is not None and worse_by > se
        self.last = {"value": value, "reference": reference, "se": se, "worse_by": worse_by, "prune": prune, "why": why}
        return prune

    @staticmethod
    def median_reference(study, trial) -> tuple[float, float, str]:
        step = trial.last_step
        at_step = [
            t.intermediate_values[step]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if step in t.intermediate_values
        ]
        own = list(trial.intermediate_values.values())
        value = max(own) if study.direction.name == "MAXIMIZE" else min(own)
        return (float(value), float(np.nanmedian(at_step)), f"median of {len(at_step)} complete trials at step {step}")

    def rung_reference(self, study, trial) -> tuple[float, float, str]:
        value = float(trial.intermediate_values[trial.last_step])
        bracket = hyperband_bracket_trials(self.inner, study, trial)
        mine = [t for t in bracket if t.number == trial.number]
        attrs = mine[0].system_attrs if mine else trial.system_attrs  # the rung successive halving just recorded
        rung, key = completed_rung(attrs)
        competing = sorted(
            [t.system_attrs[key] for t in bracket if t.number != trial.number and key in t.system_attrs] + [value]
        )
        cut = max(len(competing) // self.reduction_factor - 1, 0)  # SuccessiveHalvingPruner's promotion index
        reference = competing[-(cut + 1)] if study.direction.name == "MAXIMIZE" else competing[cut]
        return (
            value,
            float(reference),
            (f"promotion cut of rung {rung} (top 1/{self.reduction_factor} of {len(competing)} trials of its bracket)"),
        )


def make_pruner(settings: dict) -> NoiseAwarePruner:
    """The study's pruner from the sweeper's pruner settings (the `trial=` override of a job): {pruner,
    startup, warmup, min_resource, max_resource, reduction_factor}."""
    max_resource = settings.get("max_resource")
    return NoiseAwarePruner(
        kind=str(settings.get("pruner", "median")),
        startup=int(settings.get("startup", 3)),
        warmup=int(settings.get("warmup", 0)),
        min_resource=int(settings.get("min_resource") or 1),
        max_resource=int(max_resource) if max_resource else None,
        reduction_factor=int(settings.get("reduction_factor", 3)),
    )


def load_trial(trial: dict, pruner=None):
    """The job's Optuna trial from the `trial=` override ({storage, study, number}): the study loaded with
    `pruner`, the trial found by its number (public storage API: the study's id by its name, the trial's
    storage id by the study id and the number)."""
    storage = optuna.storages.get_storage(str(trial["storage"]))
    study = optuna.load_study(study_name=str(trial["study"]), storage=storage, pruner=pruner)
    trial_id = storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name(str(trial["study"])), int(trial["number"])
    )
    return optuna.trial.Trial(study, trial_id)


class TrialPruning(Callback):
    def __init__(self, trial: dict, metric: str):
        """trial: {storage, study, number, pruner (median | hyperband | none), startup, warmup, min_resource,
        max_resource, reduction_factor}, as the sweeper passes it (a study's pruner lives in the processes
        that use it, not in its storage)."""
        self.pruner = make_pruner(trial)
        self.trial = load_trial(trial, self.pruner)
        self.metric, self.pruned, self.warned = metric, False, False

    def on_validation_end(self, trainer, pl_module) -> None:
        value = trainer.callback_metrics.get(self.metric)
        if trainer.sanity_checking or value is None or not math.isfinite(float(value)):
            return
        se = trainer.callback_metrics.get(f"{self.metric}_se")
        se = float(se) if se is not None and math.isfinite(float(se)) else None
        step, number = trainer.global_step, self.trial.number
        self.trial.report(float(value), step=step)
        if self.pruner.kind != "none" and se is None and not self.warned:
            self.warned = True
            log.warning(
                f"trial {number}: no {self.metric}_se logged at its validations: it is not pruned (the pruner "
                f"cannot tell a worse trial from noise without the metric's standard error)"
            )
        self.pruner.se = se
        prune = self.trial.should_prune()
        judged = self.pruner.last
        if judged and not prune and se is not None:
            log.info(
                f"trial {number} kept at step {step}: {self.metric} {judged['value']:.4f}, reference "
                f"{judged['reference']:.4f} ({judged['why']}), worse by {judged['worse_by']:.4f}, within its "
                f"SE {se:.4f}"
            )
        if prune:
            self.pruned = True
            trainer.should_stop = True
            log.warning(
                f"trial {number} pruned at step {step}: {self.metric} {judged['value']:.4f}, reference "
                f"{judged['reference']:.4f} ({judged['why']}), worse by {judged['worse_by']:.4f} > SE "
                f"{se:.4f}"
            )
